//! Replays the corpora of the gateway's fuzz targets (fuzz/corpus/, grown by
//! `cargo +nightly fuzz run gateway_config`, `... rest_requests` and `... offload_args`) on stable,
//! through the same checks the targets run (fuzz/harness/): every input is accepted or refused
//! as the properties there say, never a panic.

use std::path::PathBuf;

#[path = "../../../fuzz/harness/gateway_config.rs"]
mod gateway_config;
#[path = "../../../fuzz/harness/offload_args.rs"]
mod offload_args;
#[path = "../../../fuzz/harness/rest_requests.rs"]
mod rest_requests;

use offload_args::Outcome;
use toolsearch_gateway::offload::OffloadTool;

fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let inputs: Vec<_> = entries
        .map(|entry| {
            let path = entry.unwrap().path();
            let bytes = std::fs::read(&path).unwrap();
            (path, bytes)
        })
        .collect();
    assert!(
        inputs.len() >= 6,
        "the corpus at {} is missing",
        dir.display()
    );
    inputs
}

/// Runs `check` on every input of `target`, naming the input that fails.
fn replay<T>(target: &str, check: impl Fn(&[u8]) -> T) -> Vec<T> {
    corpus(target)
        .into_iter()
        .map(|(path, bytes)| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&bytes)))
                .unwrap_or_else(|_| panic!("{} fails its checks (see above)", path.display()))
        })
        .collect()
}

#[test]
fn every_config_input_reads_or_is_refused_with_a_position() {
    let read: usize = replay("gateway_config", gateway_config::check)
        .into_iter()
        .sum();
    // The seeds hold a full TOML config and a Claude Desktop JSON config.
    assert!(read >= 2, "only {read} corpus inputs read as configs");
}

#[test]
fn every_rest_request_gets_a_json_answer_and_no_server_error() {
    let statuses = replay("rest_requests", rest_requests::check);
    let answered = statuses.iter().flatten().filter(|s| s.is_success()).count();
    let refused = statuses
        .iter()
        .flatten()
        .filter(|s| s.is_client_error())
        .count();
    assert!(
        answered >= 3 && refused >= 5,
        "{answered} answered, {refused} refused"
    );
}

#[test]
fn every_offload_call_answers_or_is_refused_as_invalid() {
    let outcomes = replay("offload_args", offload_args::check);
    for tool in [OffloadTool::Read, OffloadTool::Search] {
        assert!(
            outcomes.contains(&Outcome::Answered(tool)),
            "no {} in the corpus answers",
            tool.name()
        );
    }
    assert!(outcomes.contains(&Outcome::Parsed(OffloadTool::Query)));
    assert!(outcomes.contains(&Outcome::Invalid));
}
