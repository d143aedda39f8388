//! `toolsearch eval`, run as a user runs it, over a tiny dataset written here.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Output;

use crate::peers;
use peers::stderr_of as stderr;

const TOOLS: &str = r#"[
  {"name": "send_email", "description": "Send an email to a recipient", "server": "mail"},
  {"name": "read_email", "description": "Read email from the inbox", "server": "mail"},
  {"name": "read_file", "description": "Read a file from disk", "server": "files"},
  {"name": "get_weather", "description": "Current weather conditions for a city", "server": "weather"},
  {"name": "create_issue", "description": "Open an issue in a repository", "server": "github"}
]"#;

const QUERIES: &str = r#"{"id": "q1", "query": "send an email to my boss", "relevant": ["send_email"]}
{"id": "q2", "query": "what is the weather in Paris", "instruction": "Use the tools.", "relevant": ["get_weather"]}

{"id": "q3", "query": "open an issue in the repository", "relevant": ["create_issue"]}
"#;

/// Every ranker, in order: hybrid and semantic only when the embedding model can be loaded
/// (`scripts/test.sh` installs it; `TOOLSEARCH_REQUIRE_MODEL` says it must be there).
fn all_rankers() -> Vec<&'static str> {
    if peers::model_installed() {
        vec![
            "toolsearch",
            "hybrid",
            "semantic",
            "overlap",
            "bm25-plain",
            "regex",
        ]
    } else {
        vec!["toolsearch", "overlap", "bm25-plain", "regex"]
    }
}

/// A dataset folder named `name` in `dir`, holding tools.json and queries.jsonl.
fn write_dataset(dir: &Path, name: &str, tools: &str, queries: &str) -> PathBuf {
    let folder = dir.join(name);
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(folder.join("tools.json"), tools).unwrap();
    std::fs::write(folder.join("queries.jsonl"), queries).unwrap();
    folder
}

fn toolsearch_in(dir: &Path, args: &[&str]) -> Output {
    peers::run_toolsearch_in(Some(dir), args)
}

#[test]
fn json_report_has_the_documented_shape() {
    let scratch = peers::scratch("eval-cli-json");
    let dataset = write_dataset(&scratch, "tiny", TOOLS, QUERIES);
    let out = toolsearch_in(
        &scratch,
        &["eval", "--dataset", dataset.to_str().unwrap(), "--json"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let json: Value = serde_json::from_slice(&out.stdout).expect("--json prints JSON");
    let datasets = json["datasets"].as_array().expect("a `datasets` array");
    assert_eq!(datasets.len(), 1);
    let report = &datasets[0];
    assert_eq!(report["name"], "tiny");
    assert_eq!(report["tools"], 5);
    assert_eq!(report["queries"], 3);
    let rankers = report["rankers"].as_array().unwrap();
    let names: Vec<&str> = rankers
        .iter()
        .map(|r| r["ranker"].as_str().unwrap())
        .collect();
    assert_eq!(names, all_rankers());
    for r in rankers {
        for metric in ["recall_at_5", "ndcg_at_10", "mrr", "complete_at_5"] {
            let value = r[metric]
                .as_f64()
                .unwrap_or_else(|| panic!("{metric} missing in {r}"));
            assert!((0.0..=1.0).contains(&value), "{metric} = {value} in {r}");
        }
        for latency in ["p50_us", "p99_us"] {
            let value = r[latency].as_f64().unwrap();
            assert!(value >= 0.0, "{latency} = {value}");
        }
        assert!(r["p99_us"].as_f64().unwrap() >= r["p50_us"].as_f64().unwrap());
    }
    // Each query names its tool plainly: the engine finds every one first.
    let engine = &rankers[0];
    assert_eq!(engine["recall_at_5"], 1.0, "{engine}");
    assert_eq!(engine["mrr"], 1.0, "{engine}");
}

#[test]
fn rankers_and_settings_can_be_chosen() {
    let scratch = peers::scratch("eval-cli-choose");
    let dataset = write_dataset(&scratch, "tiny", TOOLS, QUERIES);
    let dataset = dataset.to_str().unwrap();
    let out = toolsearch_in(
        &scratch,
        &[
            "eval",
            "--dataset",
            dataset,
            "--ranker",
            "overlap",
            "--ranker",
            "toolsearch",
            "--with-instruction",
            "--set",
            "name.weight=2",
            "--json",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = json["datasets"][0]["rankers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["ranker"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["overlap", "toolsearch"]);

    let out = toolsearch_in(&scratch, &["eval", "--dataset", dataset]);
    assert!(out.status.success(), "{}", stderr(&out));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("tiny (5 tools, 3 queries)"), "{table}");
    for ranker in all_rankers() {
        assert!(table.contains(ranker), "{table}");
    }
    assert!(table.contains("nDCG@10"), "{table}");
}

#[test]
fn several_datasets_are_reported_in_order() {
    let scratch = peers::scratch("eval-cli-several");
    let a = write_dataset(&scratch, "alpha", TOOLS, QUERIES);
    let b = write_dataset(
        &scratch,
        "beta",
        TOOLS,
        r#"{"id": "x", "query": "read a file", "relevant": ["read_file"]}"#,
    );
    let out = toolsearch_in(
        &scratch,
        &[
            "eval",
            "--dataset",
            a.to_str().unwrap(),
            "--dataset",
            b.to_str().unwrap(),
            "--ranker",
            "toolsearch",
            "--json",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = json["datasets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["alpha", "beta"]);
    assert_eq!(json["datasets"][1]["queries"], 1);
}

#[test]
fn without_data_it_exits_2_and_says_what_to_pass() {
    let scratch = peers::scratch("eval-cli-no-data");
    // The default data path is ../shared/eval/datasets from the current directory: run from a
    // folder whose parent has no `shared`.
    let cwd = scratch.join("project");
    std::fs::create_dir_all(&cwd).unwrap();
    assert!(!cwd.join("../shared").exists());
    let out = toolsearch_in(&cwd, &["eval", "--json"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("no evaluation data"), "{err}");
    assert!(err.contains("--dataset"), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn bad_input_exits_2() {
    let scratch = peers::scratch("eval-cli-bad");
    let dataset = write_dataset(&scratch, "tiny", TOOLS, QUERIES);
    let dataset = dataset.to_str().unwrap();

    let out = toolsearch_in(
        &scratch,
        &["eval", "--dataset", dataset, "--ranker", "nope"],
    );
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("unknown ranker `nope`"), "{err}");
    assert!(err.contains("bm25-plain"), "{err}");

    let out = toolsearch_in(&scratch, &["eval", "--dataset", dataset, "--set", "k1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("KEY=VALUE"), "{}", stderr(&out));

    let out = toolsearch_in(
        &scratch,
        &["eval", "--dataset", dataset, "--set", "bogus=1"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("bogus"), "{}", stderr(&out));

    let missing = scratch.join("absent");
    let out = toolsearch_in(&scratch, &["eval", "--dataset", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("tools.json"), "{}", stderr(&out));

    let broken = write_dataset(&scratch, "broken", TOOLS, "{\"id\": \"q1\"}\n");
    let out = toolsearch_in(&scratch, &["eval", "--dataset", broken.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("line 1"), "{}", stderr(&out));
}

/// The same tool names as `TOOLS`, on no server, described otherwise: pooled with `TOOLS`,
/// equal names must stay apart.
const OTHER_TOOLS: &str = r#"[
  {"name": "send_email", "description": "Send a newsletter email to every subscriber"},
  {"name": "read_file", "description": "Read a spreadsheet file and return its rows"},
  {"name": "translate", "description": "Translate text into another language"}
]"#;

const OTHER_QUERIES: &str = r#"{"id": "o1", "query": "translate this into French", "relevant": ["translate"]}
{"id": "o2", "query": "mail the newsletter to subscribers", "relevant": ["send_email"]}
"#;

/// `TOOLS` with one request that fits and one that no tool fits.
const REQUESTS: &str = r#"{"id": "fit-1", "query": "read the file notes.txt", "relevant": ["read_file"]}
{"id": "fit-2", "query": "send an email to Bob", "relevant": ["send_email"]}
{"id": "fit-3", "query": "open an issue about the crash", "relevant": ["create_issue"]}
{"id": "unfit-1", "query": "play some jazz music", "relevant": []}
"#;

fn json_of(out: &Output) -> Value {
    assert!(out.status.success(), "{}", stderr(out));
    serde_json::from_slice(&out.stdout).expect("--json prints JSON")
}

fn ranker_names(rankers: &Value) -> Vec<&str> {
    rankers
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["ranker"].as_str().unwrap())
        .collect()
}

#[test]
fn stress_self_asks_for_every_tool_by_its_first_sentence() {
    let scratch = peers::scratch("eval-cli-self");
    let dataset = write_dataset(&scratch, "tiny", TOOLS, QUERIES);
    let dataset = dataset.to_str().unwrap();
    let json = json_of(&toolsearch_in(
        &scratch,
        &["eval", "--dataset", dataset, "--stress", "self", "--json"],
    ));
    assert_eq!(json["stress"], "self");
    let report = &json["datasets"][0];
    assert_eq!(report["name"], "tiny");
    // One query per tool, whatever queries.jsonl holds.
    assert_eq!(report["tools"], 5);
    assert_eq!(report["queries"], 5);
    assert_eq!(ranker_names(&report["rankers"]), all_rankers());

    let out = toolsearch_in(
        &scratch,
        &["eval", "--dataset", dataset, "--stress", "self"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("self-retrieval: tiny (5 tools, 5 queries)"),
        "{table}"
    );
    assert!(
        table.contains("nDCG@10") && table.contains("Complete@5"),
        "{table}"
    );
}

/// Multi-tool queries of two sentences or more, one sentence per need.
const SEVERAL: &str = r#"{"id": "s1", "query": "Read the file notes.txt. Then send an email to Bob.", "relevant": ["read_file", "send_email"]}
{"id": "s2", "query": "What is the weather in Oslo? Open an issue about the crash.", "relevant": ["get_weather", "create_issue"]}
{"id": "s3", "query": "read the file and mail it", "relevant": ["read_file", "send_email"]}
{"id": "s4", "query": "Read the file notes.txt. It is long.", "relevant": ["read_file"]}
"#;

#[test]
fn stress_several_searches_the_sentences_of_multi_tool_queries_at_once() {
    let scratch = peers::scratch("eval-cli-several");
    let dataset = write_dataset(&scratch, "tiny", TOOLS, SEVERAL);
    let dataset = dataset.to_str().unwrap();
    let args = ["eval", "--dataset", dataset, "--stress", "several"];
    let json = json_of(&toolsearch_in(&scratch, &[&args[..], &["--json"]].concat()));
    assert_eq!(json["stress"], "several");
    let report = &json["datasets"][0];
    assert_eq!(report["dataset"], "tiny");
    // One sentence, or one relevant tool: not measured.
    assert_eq!(report["queries"], 2);
    assert_eq!(report["mean_sentences"], 2.0);
    // Each sentence names its tool's own words: searched apart, both needs are found.
    assert_eq!(report["split"]["complete"], 1.0, "{report}");
    for way in ["split", "whole_5", "whole_same"] {
        let recall = report[way]["recall"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&recall), "{way}: {report}");
    }

    let out = toolsearch_in(&scratch, &args);
    assert!(out.status.success(), "{}", stderr(&out));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("tiny"), "{table}");
    assert!(table.contains("split: complete/recall/listed"), "{table}");
}

#[test]
fn stress_pooled_scores_each_set_on_all_catalogs_in_one() {
    let scratch = peers::scratch("eval-cli-pooled");
    let a = write_dataset(&scratch, "alpha", TOOLS, QUERIES);
    let b = write_dataset(&scratch, "beta", OTHER_TOOLS, OTHER_QUERIES);
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    let args = ["eval", "--dataset", a, "--dataset", b, "--stress", "pooled"];
    let json = json_of(&toolsearch_in(&scratch, &[&args[..], &["--json"]].concat()));
    assert_eq!(json["stress"], "pooled");
    assert_eq!(json["tools"], 8);
    let sets = json["datasets"].as_array().unwrap();
    let shape: Vec<(&str, u64, u64)> = sets
        .iter()
        .map(|d| {
            (
                d["name"].as_str().unwrap(),
                d["tools"].as_u64().unwrap(),
                d["queries"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(shape, vec![("alpha", 8, 3), ("beta", 8, 2)]);
    for set in sets {
        assert_eq!(ranker_names(&set["rankers"]), all_rankers());
    }

    let out = toolsearch_in(&scratch, &args);
    assert!(out.status.success(), "{}", stderr(&out));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("pooled: 2 catalogs in one, 8 tools"),
        "{table}"
    );
    assert!(
        table.contains("pooled: beta (8 tools, 2 queries)"),
        "{table}"
    );
    assert!(table.contains("mean over 2 datasets"), "{table}");

    let out = toolsearch_in(&scratch, &["eval", "--dataset", a, "--stress", "pooled"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("at least two datasets"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn stress_everyday_reports_fitting_and_unfit_requests() {
    let scratch = peers::scratch("eval-cli-everyday");
    let dataset = write_dataset(&scratch, "tiny", TOOLS, REQUESTS);
    let dataset = dataset.to_str().unwrap();
    let args = ["eval", "--dataset", dataset, "--stress", "everyday"];
    let json = json_of(&toolsearch_in(&scratch, &[&args[..], &["--json"]].concat()));
    assert_eq!(json["stress"], "everyday");
    let report = &json["datasets"][0];
    assert_eq!(report["tools"], 5);
    assert_eq!(report["fitting"], 3);
    assert_eq!(report["unfit"], 1);
    assert_eq!(ranker_names(&report["rankers"]), all_rankers());
    for r in report["rankers"].as_array().unwrap() {
        for share in ["top_1", "top_3"] {
            let value = r[share].as_f64().unwrap();
            assert!((0.0..=1.0).contains(&value), "{share} = {value} in {r}");
        }
        assert!(r["top_3"].as_f64() >= r["top_1"].as_f64(), "{r}");
        for spread in ["fitting_top_score", "unfit_top_score"] {
            let s = &r[spread];
            assert!(s["min"].as_f64() <= s["median"].as_f64(), "{spread}: {s}");
            assert!(s["median"].as_f64() <= s["max"].as_f64(), "{spread}: {s}");
        }
        let requests = r["requests"].as_array().unwrap();
        assert_eq!(requests.len(), 4);
        assert_eq!(requests[3]["id"], "unfit-1");
        assert_eq!(requests[3]["fits"], false);
        assert!(requests[3]["rank"].is_null());
    }

    let out = toolsearch_in(&scratch, &args);
    assert!(out.status.success(), "{}", stderr(&out));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("everyday: tiny (5 tools, 3 fitting and 1 unfit requests)"),
        "{table}"
    );
    for column in [
        "top-1",
        "top-3",
        "fitting top score",
        "unfit top score",
        "floor",
    ] {
        assert!(table.contains(column), "{column}: {table}");
    }

    // As a plain dataset, the request no tool fits is left out of the metrics, and said so.
    let out = toolsearch_in(&scratch, &["eval", "--dataset", dataset, "--json"]);
    let json = json_of(&out);
    assert_eq!(json["datasets"][0]["queries"], 3);
    assert!(
        stderr(&out).contains("1 request(s) no tool fits"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn stress_everyday_reads_the_repository_set_by_default() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let json = json_of(&toolsearch_in(
        &root,
        &[
            "eval",
            "--stress",
            "everyday",
            "--ranker",
            "toolsearch",
            "--json",
        ],
    ));
    let report = &json["datasets"][0];
    assert_eq!(report["name"], "everyday");
    assert!(report["fitting"].as_u64().unwrap() >= 40, "{report}");
    assert!(report["unfit"].as_u64().unwrap() >= 10, "{report}");

    // Elsewhere, it says where the set is and what to pass instead.
    let scratch = peers::scratch("eval-cli-everyday-absent");
    let out = toolsearch_in(&scratch, &["eval", "--stress", "everyday"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("tests/data/everyday"), "{err}");
    assert!(err.contains("--dataset"), "{err}");
}

#[test]
fn ablation_decides_every_feature_by_the_datasets_left_out() {
    let scratch = peers::scratch("eval-cli-ablation");
    let a = write_dataset(&scratch, "alpha", TOOLS, QUERIES);
    let b = write_dataset(
        &scratch,
        "beta",
        TOOLS,
        r#"{"id": "x", "query": "read a file", "relevant": ["read_file"]}"#,
    );
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    let json = json_of(&toolsearch_in(
        &scratch,
        &[
            "eval",
            "--dataset",
            a,
            "--dataset",
            b,
            "--ablation",
            "--json",
        ],
    ));
    assert_eq!(json["datasets"], serde_json::json!(["alpha", "beta"]));
    assert_eq!(json["base"].as_array().unwrap().len(), 2);
    assert_eq!(json["bm25_plain"].as_array().unwrap().len(), 2);
    let switches = json["switches"].as_array().unwrap();
    let features: Vec<&str> = switches
        .iter()
        .map(|s| s["feature"].as_str().unwrap())
        .collect();
    for feature in [
        "synonyms",
        "proximity",
        "fuzzy expansion",
        "server aggregation",
    ] {
        assert!(features.contains(&feature), "{features:?}");
    }
    for switch in switches {
        assert_eq!(switch["chosen"].as_array().unwrap().len(), 2);
        assert_eq!(switch["held_out_gain"].as_array().unwrap().len(), 2);
        assert!(switch["kept"].is_boolean());
    }
    for grid in json["grids"].as_array().unwrap() {
        let values: Vec<&Value> = grid["values"].as_array().unwrap().iter().collect();
        assert!(values.contains(&&grid["median_choice"]), "{grid}");
    }
    // Without --json: the Markdown tables docs/EVAL.md shows.
    let out = toolsearch_in(
        &scratch,
        &["eval", "--dataset", a, "--dataset", b, "--ablation"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("| feature | off |"), "{text}");
    assert!(text.contains("| bm25-plain |"), "{text}");
}
