//! `toolsearch bench search`, run as a user runs it, on synthetic tools and queries (the
//! evaluation datasets are pointed away, so this needs no data).
//!
//! `toolsearch bench` runs the separate `toolsearch-bench` program next to `toolsearch`, which
//! `cargo test` does not build (it builds this package's programs only): `scripts/test.sh` builds
//! the workspace first, and a test finding the harness missing or out of date fails and says so.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::SystemTime;

use crate::peers;
use peers::stderr_of as stderr;

const NO_DATASETS: &str = "/nonexistent/toolsearch-bench-cli-datasets";

fn toolsearch(args: &[&str]) -> Output {
    harness_is_built();
    peers::run_toolsearch_in(None, args)
}

/// Fails unless `toolsearch-bench` is next to the `toolsearch` under test and built from the
/// sources as they are: no file its dep-info lists (what cargo would rebuild it for) is newer.
fn harness_is_built() {
    const BUILD: &str = "build it first: cargo build -p toolsearch-bench";
    let harness = Path::new(env!("CARGO_BIN_EXE_toolsearch"))
        .with_file_name(format!("toolsearch-bench{}", std::env::consts::EXE_SUFFIX));
    let built =
        modified(&harness).unwrap_or_else(|| panic!("{} is missing: {BUILD}", harness.display()));
    let dep_info = std::fs::read_to_string(harness.with_extension("d")).unwrap_or_default();
    for source in dependencies(&dep_info) {
        if modified(&source).is_some_and(|changed| changed > built) {
            panic!(
                "{} is older than {}: {BUILD}",
                harness.display(),
                source.display()
            );
        }
    }
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// The files of a dep-info line (`target: file file…`, a space in a name escaped as `\ `).
fn dependencies(dep_info: &str) -> Vec<PathBuf> {
    let Some((_, files)) = dep_info.lines().next().and_then(|l| l.split_once(": ")) else {
        return Vec::new();
    };
    let mut paths = Vec::new();
    let mut path = String::new();
    let mut chars = files.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&' ') => path.push(chars.next().unwrap_or(' ')),
            ' ' if !path.is_empty() => paths.push(PathBuf::from(std::mem::take(&mut path))),
            ' ' => {}
            c => path.push(c),
        }
    }
    if !path.is_empty() {
        paths.push(PathBuf::from(path));
    }
    paths
}

fn number(value: &Value, key: &str) -> f64 {
    value[key]
        .as_f64()
        .unwrap_or_else(|| panic!("`{key}` is a number in {value}"))
}

fn check_hybrid(hybrid: &Value) {
    if !peers::model_installed() {
        assert!(hybrid.is_null(), "no model, no hybrid figures: {hybrid}");
        return;
    }
    assert_eq!(hybrid["tools"], 40, "{hybrid}");
    assert_eq!(hybrid["errors"], 0, "every search ran as hybrid: {hybrid}");
    assert_eq!(
        hybrid["restart_embedded"], 0,
        "the restart reads every vector from the cache: {hybrid}"
    );
    assert!(number(hybrid, "tools_per_second") > 0.0);
    // Two texts per tool; two rows of a byte per dimension and a scale each.
    assert_eq!(hybrid["texts_embedded"], 80, "{hybrid}");
    assert_eq!(number(hybrid, "vector_bytes_per_tool"), 2.0 * (384.0 + 4.0));
    for phase in ["cold", "warm", "keyword"] {
        let latency = &hybrid[phase];
        let (p50, p99, max) = (
            number(latency, "p50_us"),
            number(latency, "p99_us"),
            number(latency, "max_us"),
        );
        assert!(0.0 < p50 && p50 <= p99 && p99 <= max, "{phase}: {latency}");
    }
}

#[test]
fn json_report_has_the_documented_shape() {
    let out = toolsearch(&[
        "bench",
        "search",
        "--sizes",
        "120,300",
        "--max-queries",
        "5",
        "--datasets",
        NO_DATASETS,
        "--hybrid-size",
        "40",
        "--offline",
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).expect("stdout is one JSON document");
    check_hybrid(&report["hybrid"]);
    let sizes = report["sizes"].as_array().expect("a `sizes` array");
    assert_eq!(sizes.len(), 2);
    for (size, tools) in sizes.iter().zip([120, 300]) {
        assert_eq!(size["tools"], tools);
        assert_eq!(size["source"], "synthetic");
        assert!(number(size, "build_ms") > 0.0);
        assert!(number(size, "replace_server_ms") > 0.0);
        assert!(number(size, "catalog_json_mb") > 0.0);
        if cfg!(target_os = "linux") {
            let start = number(size, "rss_at_start_mb");
            let peak = number(size, "peak_rss_mb");
            assert!(number(size, "rss_before_build_mb") > 0.0);
            assert!(
                start > 0.0 && peak >= start,
                "start {start} MB, peak {peak} MB"
            );
        }
        let rankers: Vec<&str> = size["rankers"]
            .as_array()
            .expect("a `rankers` array")
            .iter()
            .map(|r| r["ranker"].as_str().unwrap_or_default())
            .collect();
        // The BM25 library reference (bm25s) runs where the test peers' Python has it, which
        // only scripts/install-bench-peers.sh installs.
        let with_bm25s = rankers.len() == 4;
        let expected: &[&str] = if with_bm25s {
            &["toolsearch", "overlap", "bm25-plain", "bm25s"]
        } else {
            &["toolsearch", "overlap", "bm25-plain"]
        };
        assert_eq!(rankers, expected);
        for ratio in ["keyword_p50_over_bm25s", "keyword_p99_over_bm25s"] {
            if with_bm25s {
                assert!(number(size, ratio) > 0.0);
            } else {
                assert!(size[ratio].is_null(), "{ratio} without bm25s: {size}");
            }
        }
        for ranker in size["rankers"].as_array().into_iter().flatten() {
            let (p50, p99, max) = (
                number(ranker, "p50_us"),
                number(ranker, "p99_us"),
                number(ranker, "max_us"),
            );
            assert!(0.0 < p50 && p50 <= p99 && p99 <= max, "{ranker}");
        }
    }
}

#[test]
fn settings_are_checked_before_anything_runs() {
    let unknown = toolsearch(&[
        "bench",
        "search",
        "--hybrid-size",
        "0",
        "--sizes",
        "60",
        "--set",
        "bogus=1",
    ]);
    assert_eq!(unknown.status.code(), Some(2), "{}", stderr(&unknown));
    assert!(
        stderr(&unknown).contains("unknown key"),
        "{}",
        stderr(&unknown)
    );
    let malformed = toolsearch(&[
        "bench",
        "search",
        "--hybrid-size",
        "0",
        "--sizes",
        "60",
        "--set",
        "k1",
    ]);
    assert_eq!(malformed.status.code(), Some(2));
    assert!(stderr(&malformed).contains("expected KEY=VALUE"));
}

#[test]
fn a_valid_setting_is_accepted_by_every_measuring_process() {
    let out = toolsearch(&[
        "bench",
        "search",
        "--hybrid-size",
        "0",
        "--sizes",
        "60",
        "--max-queries",
        "3",
        "--datasets",
        NO_DATASETS,
        "--set",
        "proximity=0",
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
}

/// Without a Python that has bm25s the run goes on without the BM25 library reference, after one
/// note saying how to install it.
#[test]
fn a_missing_bm25s_is_one_note_and_no_row() {
    let out = toolsearch(&[
        "bench",
        "search",
        "--hybrid-size",
        "0",
        "--sizes",
        "60,120",
        "--max-queries",
        "3",
        "--datasets",
        NO_DATASETS,
        "--reference-python",
        "/nonexistent/toolsearch-bench-cli/python",
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let notes: Vec<String> = stderr(&out)
        .lines()
        .filter(|l| l.contains("bm25s"))
        .map(str::to_string)
        .collect();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].contains("no Python at /nonexistent/toolsearch-bench-cli/python")
            && notes[0].contains("scripts/install-bench-peers.sh"),
        "{}",
        notes[0]
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("stdout is one JSON document");
    for size in report["sizes"].as_array().expect("a `sizes` array") {
        let rankers = size["rankers"].as_array().expect("a `rankers` array");
        assert_eq!(rankers.len(), 3, "{size}");
        assert!(size["keyword_p50_over_bm25s"].is_null(), "{size}");
    }
}

/// `bench gateway` with tiny counts: every measurement runs, nothing fails, and the JSON report
/// has the documented shape (docs/BENCHMARKS.md). Times are not checked.
#[test]
fn gateway_bench_json_report_has_the_documented_shape() {
    let out = toolsearch(&[
        "bench",
        "gateway",
        "--tools",
        "40",
        "--requests",
        "6",
        "--warmup",
        "2",
        "--sessions",
        "3",
        "--rest-clients",
        "2",
        "--max-seconds",
        "120",
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).expect("stdout is one JSON document");
    assert_eq!(report["tools"], 41, "40 tools and the echo tool: {report}");
    assert_eq!(report["preset"], "search");
    assert_eq!(report["sessions"], 3);
    assert_eq!(report["rest_clients"], 2);
    assert_eq!(report["upstream"], "process", "{report}");
    for phase in [
        "mcp_search_one_session",
        "mcp_search_concurrent",
        "rest_search",
        "call_direct",
        "call_gateway",
    ] {
        let p = &report[phase];
        let requests = number(p, "requests");
        assert!((1.0..=6.0).contains(&requests), "{phase}: {p}");
        assert_eq!(number(p, "errors"), 0.0, "{phase}: {p}");
        assert!(
            number(p, "seconds") > 0.0 && number(p, "per_second") > 0.0,
            "{phase}: {p}"
        );
        let (p50, p99, max) = (
            number(p, "p50_ms"),
            number(p, "p99_ms"),
            number(p, "max_ms"),
        );
        assert!(0.0 < p50 && p50 <= p99 && p99 <= max, "{phase}: {p}");
    }
    let overhead = number(&report, "call_overhead_p50_ms");
    let difference =
        number(&report["call_gateway"], "p50_ms") - number(&report["call_direct"], "p50_ms");
    assert!((overhead - difference).abs() < 1e-9, "{report}");
    assert_eq!(report["errors"], 0);
    let targets: Vec<&str> = report["targets"]
        .as_array()
        .expect("a `targets` array")
        .iter()
        .map(|t| {
            assert!(t["met"].is_boolean() && t["measured"].is_string(), "{t}");
            t["name"].as_str().unwrap_or_default()
        })
        .collect();
    assert_eq!(
        targets,
        [
            "MCP search_tools p50, one session",
            "call_tool added p50",
            "REST searches/s, 16 clients",
            "errors"
        ]
    );
    let errors_met = &report["targets"][3]["met"];
    assert_eq!(errors_met, true);
}

/// `bench gateway --many-sessions` with tiny counts: sessions open, answer, end, the gateway's
/// memory is read at every step, and the JSON report has the documented shape
/// (docs/BENCHMARKS.md). Neither memory figures nor times are checked.
#[test]
fn gateway_bench_many_sessions_reports_memory_and_throughput() {
    let out = toolsearch(&[
        "bench",
        "gateway",
        "--many-sessions",
        "--tools",
        "40",
        "--idle-sessions",
        "20",
        "--session-rounds",
        "2",
        "--throughput-sessions",
        "4",
        "--throughput-seconds",
        "1",
        "--rest-after-secs",
        "1",
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).expect("stdout is one JSON document");
    assert_eq!(report["mode"], "sessions", "{report}");
    // The idle sessions rested, and were counted open while resting.
    assert_eq!(report["rested"]["sessions_open"], 20, "{report}");
    assert!(report["rested_per_session_kb"].is_number(), "{report}");
    assert_eq!(report["tools"], 41, "{report}");
    assert_eq!(report["idle_sessions"], 20);
    assert_eq!(report["throughput_sessions"], 4);
    assert_eq!(
        report["throughput_requests"],
        serde_json::json!(["ping", "tools/list", "search_tools"])
    );
    assert_eq!(report["errors"], 0, "{report}");
    let rounds = report["rounds"].as_array().expect("a `rounds` array");
    assert_eq!(rounds.len(), 2, "{report}");
    let open_counts: Vec<&Value> = [&report["fresh"], &report["idle"], &report["ended"]]
        .into_iter()
        .chain(rounds)
        .map(|m| {
            if cfg!(target_os = "linux") {
                assert!(number(m, "rss_mb") > 0.0, "{m}");
            }
            &m["sessions_open"]
        })
        .collect();
    // The gateway counts the sessions it holds: none, the idle ones, none again after each end.
    assert_eq!(open_counts[0], 0, "{report}");
    assert_eq!(open_counts[1], 20, "{report}");
    for ended in &open_counts[2..] {
        assert_eq!(*ended, 0, "{report}");
    }
    for (phase, expected) in [("open", 20.0), ("ping", 20.0), ("delete", 20.0)] {
        let p = &report[phase];
        assert_eq!(number(p, "requests"), expected, "{phase}: {p}");
        assert_eq!(number(p, "errors"), 0.0, "{phase}: {p}");
    }
    let throughput = &report["throughput"];
    assert!(number(throughput, "requests") >= 4.0, "{throughput}");
    assert_eq!(number(throughput, "errors"), 0.0, "{throughput}");
    let (p50, p99, max) = (
        number(throughput, "p50_ms"),
        number(throughput, "p99_ms"),
        number(throughput, "max_ms"),
    );
    assert!(0.0 < p50 && p50 <= p99 && p99 <= max, "{throughput}");
    let targets: Vec<&str> = report["targets"]
        .as_array()
        .expect("a `targets` array")
        .iter()
        .map(|t| {
            assert!(t["met"].is_boolean() && t["measured"].is_string(), "{t}");
            t["name"].as_str().unwrap_or_default()
        })
        .collect();
    assert_eq!(
        targets,
        [
            "20 idle sessions above a fresh start, once resting",
            "memory after the sessions end",
            "requests/s, 4 sessions",
            "errors"
        ]
    );
}

#[test]
fn gateway_bench_many_sessions_refuses_bad_settings() {
    for (flag, value, said) in [
        ("--idle-sessions", "0", "--idle-sessions must be at least 1"),
        (
            "--throughput-sessions",
            "0",
            "--throughput-sessions must be at least 1",
        ),
        ("--throughput-seconds", "0", "--throughput-seconds is 0"),
        ("--throughput-requests", "ping,list", "`list`"),
    ] {
        let out = toolsearch(&["bench", "gateway", "--many-sessions", flag, value]);
        assert_eq!(out.status.code(), Some(2), "{flag}: {}", stderr(&out));
        assert!(stderr(&out).contains(said), "{flag}: {}", stderr(&out));
    }
}

/// The bench's upstream process serves its tools over MCP and ends when its stdin closes, so it
/// never outlives a bench that ended without stopping it.
#[test]
fn the_bench_upstream_serves_until_its_stdin_closes() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let dir = peers::scratch("bench-upstream");
    let tools = dir.file(
        "tools.json",
        r#"[{"name": "echo", "description": "Echo", "inputSchema": {"type": "object"}}]"#,
    );
    harness_is_built();
    let mut child = peers::toolsearch()
        .args(["bench", "upstream", "--tools"])
        .arg(&tools)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("toolsearch starts");
    let stderr = child.stderr.take().expect("stderr is piped");
    let mut lines = BufReader::new(stderr).lines();
    let url = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|line| Some(line.split("listening on ").nth(1)?.trim().to_string()))
        .expect("a line names the address before stderr ends");
    let plan = serde_json::json!([
        {"op": "list"},
        {"op": "call", "name": "echo", "arguments": {"text": "ping"}}
    ]);
    let report = peers::run_client_at("mcp_client.py", &url, &plan);
    assert_eq!(
        report["steps"][0]["names"],
        serde_json::json!(["echo"]),
        "{report}"
    );
    let answer = &report["steps"][1];
    assert_eq!(answer["is_error"], false, "{report}");
    assert_eq!(
        answer["json"],
        serde_json::json!({"text": "ping"}),
        "{report}"
    );
    drop(child.stdin.take());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().expect("waitable") {
            assert!(status.success(), "{status}");
            break;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("the upstream still runs 30 s after its stdin closed");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn the_bench_upstream_refuses_a_file_that_is_not_a_tool_list() {
    let dir = peers::scratch("bench-upstream-bad");
    let tools = dir.file("tools.json", r#"{"tools": 3}"#);
    let out = toolsearch(&["bench", "upstream", "--tools", tools.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("is not a JSON array of MCP tools"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn gateway_bench_refuses_empty_counts() {
    for flag in ["--requests", "--sessions", "--rest-clients"] {
        let out = toolsearch(&["bench", "gateway", flag, "0"]);
        assert_eq!(out.status.code(), Some(2), "{flag}: {}", stderr(&out));
        assert!(stderr(&out).contains(flag), "{}", stderr(&out));
    }
    let out = toolsearch(&["bench", "gateway", "--max-seconds=0"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--max-seconds is 0"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn the_harness_check_reads_every_file_of_a_dep_info_line() {
    let line = "/t/toolsearch-bench: /w/src/main.rs /w/a\\ b.rs  /w/c.rs\n";
    assert_eq!(
        dependencies(line),
        ["/w/src/main.rs", "/w/a b.rs", "/w/c.rs"].map(PathBuf::from)
    );
    assert!(dependencies("").is_empty());
}
