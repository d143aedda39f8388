//! The jq worker: `query_large_output` filters run in a child process of the gateway's own
//! executable, so that a filter that loops or allocates without end can really be stopped. The
//! child limits its own address space and CPU time (rlimits, on Unix) before it reads the
//! output, and the gateway kills it at the call's time limit, when the call is dropped (the client
//! cancelled, or the gateway shuts down), and never waits on it past that. The child's stderr is
//! read only to tell why it stopped; nothing of it is logged.
//!
//! The executable must hand control to [`run_jq_worker`] when its first argument is
//! [`JQ_WORKER_ARG`] (the `toolsearch` binary does, first thing in `main`).
//!
//! Protocol: the gateway writes one JSON line ([`Request`]) and then the stored text to the
//! child's stdin, and closes it; the child writes one JSON line ([`Reply`]) to stdout and exits.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{ExitCode, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Semaphore;

use super::jq::{evaluate, Evaluation, QueryArgs, Refusal};
use super::output::StoredOutput;
use super::OffloadError;

/// The first argument that turns the executable into a jq worker.
pub const JQ_WORKER_ARG: &str = "__toolsearch-jq-worker";
/// Address space a worker may use: the output, its parsed form and the filter's values.
pub const JQ_MEMORY_BYTES: u64 = 1 << 30;
/// Stack of the worker's evaluation thread (part of the address space above): jaq parses and
/// evaluates recursively.
const JQ_STACK_BYTES: usize = 64 << 20;
/// Workers running at once per store; a query waits for a free one within its time limit.
const MAX_WORKERS: usize = 4;
/// The deadline of a call whose time limit the clock cannot reach.
const FAR_FUTURE: Duration = Duration::from_secs(30 * 365 * 86_400);
/// Bytes of the worker's stderr kept to tell why it stopped.
const STDERR_KEPT: usize = 4096;

/// What the gateway asks of a worker; the stored text follows this line.
#[derive(Debug, Serialize, Deserialize)]
struct Request {
    filter: String,
    max_results: usize,
    max_chars: usize,
    /// CPU seconds after which the kernel stops the worker (the wall-clock limit is the
    /// gateway's).
    cpu_secs: u64,
    memory_bytes: u64,
}

/// What a worker answers.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
enum Reply {
    Done(Evaluation),
    Refused(Refusal),
}

/// The program jq queries run in: by default the current executable with [`JQ_WORKER_ARG`].
#[derive(Debug, Clone)]
pub struct JqWorker {
    program: Option<PathBuf>,
    args: Vec<OsString>,
    envs: Vec<(OsString, OsString)>,
    slots: Arc<Semaphore>,
    /// Process ids of the workers started, for tests to check they are gone.
    #[cfg(test)]
    pub(super) started: Arc<std::sync::Mutex<Vec<u32>>>,
}

impl JqWorker {
    /// The current executable, run as `<exe> __toolsearch-jq-worker`.
    pub fn current_exe() -> Self {
        let program = std::env::current_exe()
            .map_err(|e| tracing::warn!(error = %e, "cannot locate the current executable; query_large_output will refuse every filter"))
            .ok();
        Self::with_program(program, vec![JQ_WORKER_ARG.into()], Vec::new())
    }

    /// `program` with `args` and `envs` (its environment is otherwise empty); it must serve the
    /// protocol of [`run_jq_worker`].
    pub fn new(
        program: impl Into<PathBuf>,
        args: Vec<OsString>,
        envs: Vec<(OsString, OsString)>,
    ) -> Self {
        Self::with_program(Some(program.into()), args, envs)
    }

    fn with_program(
        program: Option<PathBuf>,
        args: Vec<OsString>,
        envs: Vec<(OsString, OsString)>,
    ) -> Self {
        Self {
            program,
            args,
            envs,
            slots: Arc::new(Semaphore::new(MAX_WORKERS)),
            #[cfg(test)]
            started: Arc::default(),
        }
    }

    /// Runs `args.filter` over `output` in a worker, stopped at `limit`.
    pub(super) async fn run(
        &self,
        output: Arc<StoredOutput>,
        args: &QueryArgs,
        max_chars: usize,
        limit: Duration,
    ) -> Result<Value, OffloadError> {
        let filter = args.filter.as_str();
        let max_results = args.max_results();
        // `toolSearch.callTimeoutSecs` may be any number: a limit past what the clock can count
        // waits as long as tokio's own "never" (30 years).
        let now = tokio::time::Instant::now();
        let deadline = now.checked_add(limit).unwrap_or_else(|| now + FAR_FUTURE);
        let timed_out = || OffloadError::FilterTimeout {
            filter: filter.to_string(),
            limit,
        };
        let unavailable = |message: String| OffloadError::JqUnavailable { message };

        let Ok(slot) = tokio::time::timeout_at(deadline, self.slots.acquire()).await else {
            return Err(timed_out());
        };
        let _slot = slot.map_err(|_| unavailable("the worker pool is closed".into()))?;
        let mut child = self.spawn()?;
        let pid = child.id();

        let request = Request {
            filter: filter.to_string(),
            max_results,
            max_chars,
            cpu_secs: limit.as_secs().saturating_add(1),
            memory_bytes: JQ_MEMORY_BYTES,
        };
        let mut header = serde_json::to_string(&request)
            .map_err(|e| unavailable(format!("cannot encode the request: {e}")))?;
        header.push('\n');
        // The answer is at most max_results values of about max_chars characters in all; each
        // value's JSON text travels inside a JSON string, so a character takes at most 12 bytes
        // (`\\u` escapes of escapes), plus a little per value and for the envelope.
        let max_reply = (max_chars as u64 + max_results as u64 * 64) * 12 + (64 << 10);
        let finished = exchange(&mut child, header, output.clone(), max_reply);
        let outcome = tokio::time::timeout_at(deadline, finished).await;
        let Ok((reply, stderr, status)) = outcome else {
            // The filter is still running: stop it, and reap it so that nothing of it remains.
            let _ = child.start_kill();
            let _ = child.wait().await;
            tracing::debug!(pid, "stopped a jq worker at the call's time limit");
            return Err(timed_out());
        };
        match parse_reply(&reply) {
            Some(Reply::Done(evaluation)) => {
                Ok(evaluation.into_value(&output.handle, filter, max_results, max_chars))
            }
            Some(Reply::Refused(refusal)) => Err(refusal.into_error(&output.handle, filter)),
            None => {
                let reason = why_stopped(status.ok(), &stderr, limit);
                tracing::debug!(pid, %reason, "a jq worker stopped without an answer");
                Err(OffloadError::FilterStopped {
                    filter: filter.to_string(),
                    reason,
                })
            }
        }
    }
}

impl JqWorker {
    /// Starts a worker with a cleared environment (but for what it needs); dropping it kills it.
    fn spawn(&self) -> Result<tokio::process::Child, OffloadError> {
        let unavailable = |message: String| OffloadError::JqUnavailable { message };
        let program = self.program.as_ref().ok_or_else(|| {
            unavailable("the gateway cannot locate its own executable to run them in".into())
        })?;
        let child = tokio::process::Command::new(program)
            .args(&self.args)
            .env_clear()
            .envs(self.envs.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Dropping the call (a cancelled request, a shutdown) kills the worker.
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| {
                unavailable(format!(
                    "cannot start the jq worker `{}`: {e}",
                    program.display()
                ))
            })?;
        #[cfg(test)]
        self.started
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(child.id());
        Ok(child)
    }
}

/// Sends a worker its request line (`header`) and the stored output, and reads its reply (at
/// most `max_reply` bytes) and the start of its stderr until it exits.
async fn exchange(
    child: &mut tokio::process::Child,
    header: String,
    output: Arc<StoredOutput>,
    max_reply: u64,
) -> (Vec<u8>, Vec<u8>, std::io::Result<ExitStatus>) {
    let (stdin, stdout, stderr) = (child.stdin.take(), child.stdout.take(), child.stderr.take());
    let write = async move {
        if let Some(mut stdin) = stdin {
            // A worker that has already answered (a bad filter) closes its end early.
            let _ = stdin.write_all(header.as_bytes()).await;
            let _ = stdin.write_all(output.text.as_bytes()).await;
        }
    };
    let read_reply = async move {
        let mut reply = Vec::new();
        if let Some(stdout) = stdout {
            let _ = stdout.take(max_reply).read_to_end(&mut reply).await;
        }
        reply
    };
    let read_stderr = async move {
        let mut kept = Vec::new();
        if let Some(mut stderr) = stderr {
            let mut buf = [0u8; 1024];
            while let Ok(n @ 1..) = stderr.read(&mut buf).await {
                let room = STDERR_KEPT.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
        kept
    };
    let ((), reply, stderr) = tokio::join!(write, read_reply, read_stderr);
    let status = child.wait().await;
    (reply, stderr, status)
}

/// The reply on the last non-empty line of the worker's stdout (a test harness may print
/// before it).
fn parse_reply(stdout: &[u8]) -> Option<Reply> {
    let text = std::str::from_utf8(stdout).ok()?;
    let line = text.lines().rev().find(|l| !l.trim().is_empty())?;
    serde_json::from_str(line).ok()
}

/// Why a worker stopped without answering, from its exit and the Rust runtime's last words.
fn why_stopped(status: Option<ExitStatus>, stderr: &[u8], limit: Duration) -> String {
    let stderr = String::from_utf8_lossy(stderr);
    if stderr.contains("memory allocation of") {
        return format!(
            "it needed more than {} MiB of memory",
            JQ_MEMORY_BYTES >> 20
        );
    }
    if stderr.contains("overflowed its stack") {
        return "it nested values too deeply".into();
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.and_then(|s| s.signal()) {
            if signal == libc::SIGXCPU || signal == libc::SIGKILL {
                return format!(
                    "it used more than {}s of CPU time",
                    limit.as_secs().saturating_add(1)
                );
            }
            return format!("the jq worker was ended by signal {signal}");
        }
    }
    let _ = limit;
    match status {
        Some(status) => format!("the jq worker exited without an answer ({status})"),
        None => "the jq worker exited without an answer".into(),
    }
}

/// The jq worker's `main`: reads one `Request` and the stored text from stdin, limits its own
/// memory and CPU time, runs the filter and writes one `Reply` to stdout. Nothing is logged
/// and panics print nothing (their messages could quote the stored text).
pub fn run_jq_worker() -> ExitCode {
    std::panic::set_hook(Box::new(|_| {}));
    let served = serve(&mut std::io::stdin().lock(), &mut std::io::stdout().lock());
    if served {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// One request from `input`, its reply to `output`; false when the request is unreadable.
fn serve(input: &mut impl Read, output: &mut impl Write) -> bool {
    let mut bytes = Vec::new();
    if input.read_to_end(&mut bytes).is_err() {
        return false;
    }
    let Some(newline) = bytes.iter().position(|&b| b == b'\n') else {
        return false;
    };
    let Ok(request) = serde_json::from_slice::<Request>(&bytes[..newline]) else {
        return false;
    };
    limit_resources(&request);
    bytes.drain(..=newline);
    let Ok(text) = String::from_utf8(bytes) else {
        return false;
    };
    let evaluation = std::thread::Builder::new()
        .name("jq".into())
        .stack_size(JQ_STACK_BYTES)
        .spawn(move || {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                evaluate(
                    &text,
                    &request.filter,
                    request.max_results,
                    request.max_chars,
                )
            }))
        })
        .ok()
        .and_then(|thread| thread.join().ok());
    let reply = match evaluation {
        Some(Ok(Ok(evaluation))) => Reply::Done(evaluation),
        Some(Ok(Err(refusal))) => Reply::Refused(refusal),
        Some(Err(_)) | None => Reply::Refused(Refusal::FilterFailed(
            "jaq stopped on an internal error while running it".into(),
        )),
    };
    let Ok(line) = serde_json::to_string(&reply) else {
        return false;
    };
    writeln!(output, "\n{line}")
        .and_then(|()| output.flush())
        .is_ok()
}

/// The worker's own limits: address space and CPU time. Past the first, allocations fail and
/// the worker aborts; past the second, the kernel stops it.
#[cfg(unix)]
fn limit_resources(request: &Request) {
    let limit = |value: u64, hard: u64| libc::rlimit {
        rlim_cur: value as libc::rlim_t,
        rlim_max: hard as libc::rlim_t,
    };
    let memory = limit(request.memory_bytes, request.memory_bytes);
    let cpu = limit(request.cpu_secs, request.cpu_secs.saturating_add(1));
    // SAFETY: setrlimit reads the struct it is given and changes only this process's limits.
    #[allow(unsafe_code)]
    unsafe {
        libc::setrlimit(libc::RLIMIT_AS, &memory);
        libc::setrlimit(libc::RLIMIT_CPU, &cpu);
    }
}

/// Without rlimits, the gateway's kill at the time limit is the only bound.
#[cfg(not(unix))]
fn limit_resources(_: &Request) {}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::offload::tests::config;
    use crate::offload::{OffloadStore, OffloadTool};

    const TEST_WORKER_ENV: &str = "TOOLSEARCH_TEST_JQ_WORKER";

    /// This test binary as the worker program: it runs only [`jq_worker_entry`], which serves
    /// the worker protocol when [`TEST_WORKER_ENV`] is set.
    fn test_worker() -> JqWorker {
        let args = [
            "offload::worker::tests::jq_worker_entry",
            "--exact",
            "--include-ignored",
            "--nocapture",
            "--test-threads=1",
        ];
        JqWorker::new(
            std::env::current_exe().unwrap(),
            args.into_iter().map(OsString::from).collect(),
            vec![(TEST_WORKER_ENV.into(), "1".into())],
        )
    }

    #[test]
    #[ignore = "the jq worker's entry point: the other tests here run it as a child process"]
    fn jq_worker_entry() {
        if std::env::var_os(TEST_WORKER_ENV).is_some() {
            std::panic::set_hook(Box::new(|_| {}));
            let served = serve(&mut std::io::stdin().lock(), &mut std::io::stdout().lock());
            std::process::exit(if served { 0 } else { 1 });
        }
    }

    fn store() -> OffloadStore {
        OffloadStore::with_jq_worker(config(10, 10_000_000, 8), test_worker())
    }

    async fn query(
        store: &OffloadStore,
        handle: &str,
        filter: &str,
        limit: Duration,
    ) -> Result<Value, OffloadError> {
        store
            .call(
                "a",
                OffloadTool::Query,
                json!({"handle": handle, "filter": filter}),
                limit,
            )
            .await
    }

    /// Whether process `pid` still exists and has not ended (a zombie waiting to be reaped has
    /// ended: it holds no memory and runs nothing).
    fn exists(pid: u32) -> bool {
        // SAFETY: signal 0 only checks that the process exists and may be signalled.
        #[allow(unsafe_code)]
        let signalable = unsafe { libc::kill(pid as libc::pid_t, 0) == 0 };
        let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| {
                let state = stat.rsplit_once(") ")?.1.chars().next()?;
                Some(state == 'Z')
            })
            .unwrap_or(false);
        signalable && !zombie
    }

    #[tokio::test]
    async fn filters_run_in_a_worker_process() {
        let store = store();
        let t = Duration::from_secs(60);
        let h = store
            .put("a", "t", json!({"items": [1, 2, 3]}).to_string())
            .output
            .handle
            .clone();
        let r = query(&store, &h, ".items | add", t).await.unwrap();
        assert_eq!(r["results"], json!([6]), "{r}");
        assert_eq!(r["handle"], h);
        let err = query(&store, &h, ".items[", t).await.unwrap_err();
        assert!(matches!(err, OffloadError::BadFilter { .. }), "{err}");
        let err = query(&store, &h, ".items + 1", t).await.unwrap_err();
        assert!(matches!(err, OffloadError::FilterFailed { .. }), "{err}");

        // 300 levels deep: parsed and walked in the worker without overflowing its stack.
        let deep = format!("{}{}", "[".repeat(300), "]".repeat(300));
        let h = store.put("a", "t", deep).output.handle.clone();
        let r = query(&store, &h, "[..] | length", t).await.unwrap();
        assert_eq!(r["results"], json!([300]), "{r}");

        let started = store.jq.started.lock().unwrap().clone();
        assert_eq!(started.len(), 4);
        assert!(
            started.iter().all(|&pid| !exists(pid)),
            "every worker ended"
        );
    }

    /// The query of #13: it would run for ever and grow without bound. At the time limit the
    /// worker is killed and reaped, and the next query gets a worker of its own.
    #[tokio::test]
    async fn an_abandoned_query_is_stopped() {
        let store = store();
        let h = store
            .put("a", "t", json!({"items": [1, 2, 3]}).to_string())
            .output
            .handle
            .clone();
        let filter = "[limit(100000000; repeat(.items))] | length";
        let err = query(&store, &h, filter, Duration::from_secs(2))
            .await
            .unwrap_err();
        assert!(matches!(err, OffloadError::FilterTimeout { .. }), "{err}");
        assert!(err.to_string().contains("stopped"), "{err}");
        let started = store.jq.started.lock().unwrap().clone();
        assert_eq!(started.len(), 1);
        assert!(!exists(started[0]), "the worker was killed and reaped");

        let r = query(&store, &h, ".items | length", Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(r["results"], json!([3]));
    }

    /// Any `toolSearch.callTimeoutSecs` the config accepts, up to `u64::MAX` seconds, is a time
    /// limit a query runs under (it panicked adding the limit to the clock).
    #[tokio::test]
    async fn a_limit_past_what_the_clock_counts_still_answers() {
        let store = store();
        let h = store.put("a", "t", "[1, 2]".into()).output.handle.clone();
        for limit in [Duration::from_secs(u64::MAX), Duration::MAX] {
            let r = query(&store, &h, "length", limit).await.unwrap();
            assert_eq!(r["results"], json!([2]), "{r}");
        }
    }

    /// Past its memory budget the worker fails, and the answer says why, not what it held.
    #[tokio::test]
    async fn a_query_past_the_memory_budget_is_stopped() {
        let store = store();
        let h = store.put("a", "t", "\"x\"".into()).output.handle.clone();
        let err = query(&store, &h, ". * 100000000000", Duration::from_secs(60))
            .await
            .unwrap_err();
        assert!(matches!(err, OffloadError::FilterStopped { .. }), "{err}");
        assert!(err.to_string().contains("MiB of memory"), "{err}");
    }

    /// A filter that builds a value nested millions deep overflows the worker's stack, not the
    /// gateway's: the call answers that the filter was stopped.
    #[tokio::test]
    async fn a_value_nested_too_deep_stops_the_worker_not_the_gateway() {
        let store = store();
        let h = store.put("a", "t", "0".into()).output.handle.clone();
        let filter = "reduce range(5000000) as $i (.; [.]) | tojson | length";
        let err = query(&store, &h, filter, Duration::from_secs(120))
            .await
            .unwrap_err();
        assert!(matches!(err, OffloadError::FilterStopped { .. }), "{err}");
        assert!(
            err.to_string().contains("nested values too deeply"),
            "{err}"
        );
    }

    /// Dropping the call (a client's cancel, a shutdown) kills the worker too.
    #[tokio::test]
    async fn a_dropped_query_kills_its_worker() {
        let store = store();
        let h = store
            .put("a", "t", json!({"items": [1]}).to_string())
            .output
            .handle
            .clone();
        let call = query(
            &store,
            &h,
            "[repeat(.items)] | length",
            Duration::from_secs(600),
        );
        // Give up on the call once its worker has started.
        tokio::select! {
            _ = call => panic!("the filter never ends"),
            _ = async {
                while store.jq.started.lock().unwrap().is_empty() {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            } => {}
        }
        let pid = store.jq.started.lock().unwrap()[0];
        // kill_on_drop sends SIGKILL at once; tokio reaps the process in the background.
        let mut gone = false;
        for _ in 0..500 {
            if !exists(pid) {
                gone = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(gone, "the worker of a dropped call was killed");
    }
}
