//! `query_large_output`'s evaluation: a jq filter over a stored JSON output, run with the jaq
//! crates, its answer bounded in values and characters. This runs inside the jq worker (see
//! `worker.rs`), never in the gateway's own process: a filter can loop or allocate without end,
//! and only a process can be stopped from outside.
//!
//! jq's `env` is left out (it would reveal the environment), `halt` ends the query instead of the
//! process, and `debug`/`stderr` pass their input on without printing it anywhere: a tool's
//! output must never reach a log.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use toolsearch_core::catalog::json_depth;

use super::output::floor_char_boundary;
#[cfg(test)]
use super::output::StoredOutput;
use super::{OffloadError, OffloadTool, MAX_PATTERN_CHARS};

pub(super) const DEFAULT_MAX_RESULTS: usize = 50;
pub(super) const MAX_RESULTS: usize = 1000;
/// Deepest nesting of a JSON output the worker parses. jaq parses and walks values recursively;
/// the worker's evaluation thread has a stack sized for this depth with room to spare.
pub(super) const MAX_QUERY_DEPTH: usize = 1000;

// Arguments of `query_large_output` (not a doc comment: see `ReadArgs`).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct QueryArgs {
    /// The handle from the offloaded result.
    pub handle: String,
    /// A jq filter (jq 1.7 syntax, as implemented by jaq).
    #[schemars(length(min = 1, max = MAX_PATTERN_CHARS))]
    pub filter: String,
    /// Most output values returned.
    #[serde(default)]
    #[schemars(with = "usize", range(min = 1, max = MAX_RESULTS), extend("default" = DEFAULT_MAX_RESULTS))]
    pub max_results: Option<usize>,
}

impl QueryArgs {
    pub(super) fn max_results(&self) -> usize {
        self.max_results
            .unwrap_or(DEFAULT_MAX_RESULTS)
            .clamp(1, MAX_RESULTS)
    }
}

/// One output value of a filter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum Item {
    /// The value as jaq writes it (JSON, or a superset of it: byte strings, NaN).
    Json(String),
    /// The head of a value too large to return, as text.
    Head(String),
}

impl Item {
    fn into_value(self) -> Value {
        match self {
            // What JSON cannot hold, or what nests deeper than serde_json reads, stays text.
            Item::Json(text) => serde_json::from_str::<Value>(&text).unwrap_or(Value::String(text)),
            Item::Head(text) => Value::String(text),
        }
    }
}

/// What a filter produced, within the bounds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct Evaluation {
    pub results: Vec<Item>,
    pub truncated: bool,
    /// The exit code of `halt`/`halt_error`, when the filter halted.
    pub halted: Option<i32>,
}

impl Evaluation {
    /// The tool's answer.
    pub(super) fn into_value(
        self,
        handle: &str,
        filter: &str,
        max_results: usize,
        max_chars: usize,
    ) -> Value {
        let results: Vec<Value> = self.results.into_iter().map(Item::into_value).collect();
        let mut out = json!({
            "handle": handle,
            "filter": filter,
            "returned": results.len(),
            "truncated": self.truncated,
            "results": results,
        });
        if self.truncated {
            out["note"] = json!(format!(
                "more results than fit (at most {max_results} values and {max_chars} characters); narrow the filter, e.g. with .[0:10] or limit(10; ...)"
            ));
        }
        if let Some(code) = self.halted {
            out["halted"] = json!(code);
        }
        out
    }
}

/// Why a filter produced no answer; the worker sends this back as is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) enum Refusal {
    FilterTooLong,
    BadFilter(String),
    NotJson(String),
    TooDeep,
    FilterFailed(String),
}

impl Refusal {
    pub(super) fn into_error(self, handle: &str, filter: &str) -> OffloadError {
        match self {
            Refusal::FilterTooLong => OffloadError::InvalidArguments {
                tool: OffloadTool::Query.name(),
                message: format!("the filter is longer than {MAX_PATTERN_CHARS} characters"),
            },
            Refusal::BadFilter(message) => OffloadError::BadFilter {
                filter: filter.to_string(),
                message,
            },
            Refusal::NotJson(message) => OffloadError::NotJson {
                handle: handle.to_string(),
                message,
            },
            Refusal::TooDeep => OffloadError::TooDeep {
                handle: handle.to_string(),
                limit: MAX_QUERY_DEPTH,
            },
            Refusal::FilterFailed(message) => OffloadError::FilterFailed {
                filter: filter.to_string(),
                message,
            },
        }
    }
}

/// Runs `filter` over `output` in this process, with no bound on its time or memory: for tests,
/// with filters that end. The gateway runs filters in the jq worker.
#[cfg(test)]
pub(super) fn query(
    output: &StoredOutput,
    filter: &str,
    max_results: usize,
    max_chars: usize,
) -> Result<Value, OffloadError> {
    evaluate(&output.text, filter, max_results, max_chars)
        .map(|e| e.into_value(&output.handle, filter, max_results, max_chars))
        .map_err(|r| r.into_error(&output.handle, filter))
}

/// Runs a jq filter over JSON `text` with jaq; at most `max_results` values and about
/// `max_chars` characters.
pub(super) fn evaluate(
    text: &str,
    filter: &str,
    max_results: usize,
    max_chars: usize,
) -> Result<Evaluation, Refusal> {
    use jaq_core::load::{Arena, File, Loader};
    use jaq_core::{data, Compiler, Ctx, Native, Vars};
    use jaq_json::Val;

    type Data = data::JustLut<Val>;

    /// `debug_empty` and `stderr_empty` (behind `debug`, `stderr`, `halt_error`) log their
    /// input at ERROR level in jaq-std; here they drop it.
    fn nothing(_: jaq_core::Cv<'_, Data>) -> jaq_core::ValXs<'_, Val> {
        Box::new(core::iter::empty())
    }

    if filter.chars().count() > MAX_PATTERN_CHARS {
        return Err(Refusal::FilterTooLong);
    }
    let defs = jaq_core::defs()
        .chain(jaq_std::defs())
        .chain(jaq_json::defs());
    let funs = jaq_core::funs::<Data>()
        .chain(jaq_std::funs())
        .chain(jaq_json::funs())
        // `env` would hand the environment (tokens, keys) to the model.
        .filter(|(name, _, _)| *name != "env")
        .map(|(name, arity, native)| match name {
            "debug_empty" | "stderr_empty" => (name, arity, Native::<Data>::new(nothing)),
            _ => (name, arity, native),
        });
    let loader = Loader::new(defs);
    let arena = Arena::default();
    let program = File {
        code: filter,
        path: (),
    };
    let modules = loader
        .load(&arena, program)
        .map_err(|errors| Refusal::BadFilter(describe_load_errors(filter, errors)))?;
    let compiled = Compiler::default()
        .with_funs(funs)
        .compile(modules)
        .map_err(|errors| {
            let parts: Vec<String> = errors
                .into_iter()
                .flat_map(|(_, errs)| errs)
                .map(|(name, undefined)| {
                    format!(
                        "undefined {} `{name}` at {}",
                        undefined.as_str(),
                        position(filter, name)
                    )
                })
                .collect();
            Refusal::BadFilter(parts.join("; "))
        })?;
    if json_depth(text) > MAX_QUERY_DEPTH {
        return Err(Refusal::TooDeep);
    }
    let input = jaq_json::read::parse_single(text.as_bytes())
        .map_err(|e| Refusal::NotJson(e.to_string()))?;
    let ctx = Ctx::<Data>::new(&compiled.lut, Vars::new([]));
    gather(compiled.id.run((ctx, input)), max_results, max_chars)
}

/// The values a filter yields, until `max_results` values or about `max_chars` characters; an
/// error ends it, and a `halt` stops it with its exit code.
fn gather<'a>(
    items: impl Iterator<Item = jaq_core::ValX<'a, jaq_json::Val>>,
    max_results: usize,
    max_chars: usize,
) -> Result<Evaluation, Refusal> {
    let mut results = Vec::new();
    let mut used = 0usize;
    let mut truncated = false;
    let mut halted = None;
    for item in items {
        // Not `jaq_core::unwrap_valr`: it exits the process on `halt`.
        let value = match item {
            Ok(value) => value,
            Err(exn) => match exn.get_err() {
                // A type error quotes the value it met, which may be the whole stored output:
                // cut here, or the reply outgrows what the gateway reads of it.
                Ok(err) => {
                    let message = err.to_string();
                    return Err(Refusal::FilterFailed(
                        crate::error::clipped_long(&message).into_owned(),
                    ));
                }
                Err(exn) => {
                    halted = Some(exn.get_halt().unwrap_or(-1));
                    break;
                }
            },
        };
        if results.len() >= max_results {
            truncated = true;
            break;
        }
        let text = value.to_string();
        let size = text.chars().count();
        if used + size > max_chars {
            truncated = true;
            if results.is_empty() {
                // One huge value: its head, as text, so the caller sees what it is.
                results.push(Item::Head(text.chars().take(max_chars).collect()));
            }
            break;
        }
        used += size;
        results.push(Item::Json(text));
    }
    Ok(Evaluation {
        results,
        truncated,
        halted,
    })
}

/// `line L, column C` of a slice of `code` (jaq reports errors as slices of the filter).
fn position(code: &str, part: &str) -> String {
    let start = (part.as_ptr() as usize).wrapping_sub(code.as_ptr() as usize);
    if start > code.len() {
        return "an unknown position".into();
    }
    let before = &code[..floor_char_boundary(code, start)];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
    format!("line {line}, column {column}")
}

fn describe_load_errors(code: &str, errors: jaq_core::load::Errors<&str, ()>) -> String {
    use jaq_core::load::{lex, Error};
    let found = |s: &str| {
        let token: String = s.chars().take(20).collect();
        if token.is_empty() {
            "the end of the filter".to_string()
        } else {
            format!("`{token}`")
        }
    };
    let mut parts = Vec::new();
    for (_, error) in errors {
        match error {
            Error::Io(errs) => {
                for (path, message) in errs {
                    parts.push(format!("cannot load module `{path}`: {message}"));
                }
            }
            Error::Lex(errs) => {
                for (expect, at) in errs {
                    // `Expect::as_str` panics on delimiters it does not know.
                    let expected = match &expect {
                        lex::Expect::Delim(d) if !["(", "[", "{", "\""].contains(d) => {
                            format!("closing `{d}`")
                        }
                        other => other.as_str().to_string(),
                    };
                    parts.push(format!(
                        "expected {expected}, found {} at {}",
                        found(at),
                        position(code, at)
                    ));
                }
            }
            Error::Parse(errs) => {
                for (expect, at) in errs {
                    parts.push(format!(
                        "expected {}, found {} at {}",
                        expect.as_str(),
                        found(at),
                        position(code, at)
                    ));
                }
            }
        }
    }
    if parts.is_empty() {
        "the filter cannot be parsed".into()
    } else {
        parts.join("; ")
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::offload::tests::stored;

    #[test]
    fn jq_queries_and_their_errors() {
        let output = stored(
            r#"{"items": [{"id": 1, "tag": "a"}, {"id": 2, "tag": "b"}, {"id": 3, "tag": "a"}]}"#,
        );
        let r = query(
            &output,
            r#"[.items[] | select(.tag == "a") | .id]"#,
            10,
            1000,
        )
        .unwrap();
        assert_eq!(r["results"], json!([[1, 3]]));
        let r = query(&output, ".items[].id", 2, 1000).unwrap();
        assert_eq!(r["results"], json!([1, 2]));
        assert_eq!(r["truncated"], true);
        let r = query(&output, "(.items | length), (keys | length)", 10, 1000).unwrap();
        assert_eq!(r["results"], json!([3, 1]));
        let r = query(&output, ".items", 10, 10).unwrap();
        assert_eq!(r["truncated"], true);
        assert_eq!(r["results"][0].as_str().unwrap().chars().count(), 10);

        let err = query(&output, ".items[", 10, 1000).unwrap_err();
        assert!(matches!(err, OffloadError::BadFilter { .. }), "{err}");
        assert!(err.to_string().contains("column"), "{err}");
        let err = query(&output, "nosuchfunction(1)", 10, 1000).unwrap_err();
        assert!(
            err.to_string()
                .contains("undefined filter `nosuchfunction`"),
            "{err}"
        );
        let err = query(&output, "env", 10, 1000).unwrap_err();
        assert!(
            err.to_string().contains("undefined"),
            "env is not offered: {err}"
        );
        let err = query(&output, ".items + 1", 10, 1000).unwrap_err();
        assert!(matches!(err, OffloadError::FilterFailed { .. }), "{err}");
        // halt ends the query instead of the process.
        let r = query(&output, "1, halt", 10, 1000).unwrap();
        assert_eq!(r["results"], json!([1]));
        assert_eq!(r["halted"], 0);

        let err = query(&stored("not json"), ".", 10, 1000).unwrap_err();
        assert!(matches!(err, OffloadError::NotJson { .. }), "{err}");
    }

    #[test]
    fn a_type_error_over_a_large_value_says_what_failed_in_few_words() {
        let items: Vec<Value> = (0..50_000).map(|i| json!({"id": i})).collect();
        let output = stored(&json!({ "items": items }).to_string());
        let err = query(&output, ".items + 1", 10, 1000).unwrap_err();
        let OffloadError::FilterFailed { message, .. } = &err else {
            panic!("not a filter failure: {err}");
        };
        assert!(message.contains("cannot"), "{message}");
        assert!(message.contains("characters in all"), "{message}");
        assert!(message.len() < 3_000, "{} bytes", message.len());
    }

    #[test]
    fn nesting_depth_counts_without_recursing() {
        assert_eq!(json_depth(r#"{"a": [1, {"b": "[[[{{"}], "c\"[": []}"#), 3);
        assert_eq!(json_depth("42"), 0);
        let deep = format!("{}{}", "[".repeat(200_000), "]".repeat(200_000));
        assert_eq!(json_depth(&deep), 200_000);
        // Refused before jaq parses it.
        let err = query(&stored(&deep), "length", 10, 1000).unwrap_err();
        assert!(matches!(err, OffloadError::TooDeep { .. }), "{err}");
        assert!(err.to_string().contains("search_large_output"), "{err}");
    }

    /// A writer into a shared buffer, for capturing the log.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// `debug`, `stderr`, `debug(msg)` and `halt_error` leave their input alone and write none of
    /// the stored text to the log, even with every level on and `log` records forwarded (as the
    /// binary's subscriber forwards them).
    #[test]
    fn jq_debug_and_stderr_never_reach_the_log() {
        use tracing_subscriber::util::SubscriberInitExt;

        let captured = Captured::default();
        let writer = captured.clone();
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_writer(move || writer.clone())
            .finish()
            .try_init()
            .expect("this test installs the only global subscriber of the test binary");
        // The capture works, for records from `log` too.
        log::error!("probe from log");
        let secret = "SECRET-7f3a9c";
        let output = stored(&json!({ "token": secret, "n": [1, 2] }).to_string());
        for (filter, results) in [
            (".token | debug", json!([secret])),
            (".token | stderr", json!([secret])),
            (". | debug(.token) | .token", json!([secret])),
            (
                "([.n[] | debug] | length), (.token | debug | stderr)",
                json!([2, secret]),
            ),
            (".token | halt_error", json!([])),
        ] {
            let r = query(&output, filter, 10, 1000).unwrap();
            assert_eq!(r["results"], results, "{filter}: {r}");
        }
        let log = String::from_utf8_lossy(&captured.0.lock().unwrap()).to_string();
        assert!(log.contains("probe from log"), "the capture works: {log}");
        assert!(!log.contains(secret), "tool output reached the log: {log}");
    }
}
