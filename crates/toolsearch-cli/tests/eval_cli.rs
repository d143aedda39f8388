//! `toolsearch eval`, run as a user runs it, over a tiny dataset written here.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Output;

mod peers;
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
