//! The process's log on stderr: text or JSON lines, colours only for a person at a terminal.
//!
//! By default `serve` talks as it goes: each upstream starting, ready with its tools or failing
//! with the reason, the embedding model's install, where it listens. These are INFO events of a
//! few targets; everything else logs at WARN and above. `--quiet` keeps only warnings and errors;
//! `--log` or `RUST_LOG` replace the whole filter.

use std::io::IsTerminal;
use std::sync::OnceLock;

use clap::ValueEnum;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum LogFormat {
    /// One line of text per event (the level, the target, the message and its fields).
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `message` and the fields.
    Json,
}

/// Off unless the user's own filter turns it on: rmcp's transport worker writes, on an upstream's
/// failure, the request's error with its full URL (which may hold a `${NAME}` the config expanded,
/// such as a key); the gateway says the same in its own warning, with the URL as written.
const QUIETED: &str = "rmcp::transport::worker=off";

/// The targets of the progress lines: the upstreams' lives (and their own stderr), the embedding
/// model's install and load, and `serve` itself (addresses, stop).
pub const PROGRESS_TARGETS: [&str; 3] = [
    "upstream",
    "toolsearch_gateway::semantic",
    "toolsearch::commands::serve",
];

/// What the command line and the environment say about logging.
#[derive(Debug, Clone, Default)]
pub struct LogSettings {
    /// `--log`, else a valid `RUST_LOG`: replaces the default filter.
    pub filter: Option<String>,
    pub quiet: bool,
    pub format: LogFormat,
}

static SETTINGS: OnceLock<LogSettings> = OnceLock::new();

impl LogSettings {
    /// `--log`, `--quiet` and `--log-format`, with `RUST_LOG` when `--log` is not given.
    pub fn from_args(log: Option<&str>, quiet: bool, format: LogFormat) -> Self {
        let filter = log.map(str::to_string).or_else(|| {
            std::env::var("RUST_LOG")
                .ok()
                .filter(|value| EnvFilter::try_new(value).is_ok())
        });
        Self {
            filter,
            quiet,
            format,
        }
    }

    /// The filter's directives: the user's, or WARN plus the progress targets at INFO, without
    /// [`QUIETED`].
    fn directives(&self) -> String {
        match &self.filter {
            Some(filter) => filter.clone(),
            None if self.quiet => format!("warn,{QUIETED}"),
            None => std::iter::once(format!("warn,{QUIETED}"))
                .chain(PROGRESS_TARGETS.iter().map(|t| format!("{t}=info")))
                .collect::<Vec<_>>()
                .join(","),
        }
    }

    /// A stderr logger with these settings and `extra` directives added to the filter.
    fn dispatch(&self, extra: Option<&str>) -> tracing::Dispatch {
        let mut directives = self.directives();
        if let Some(extra) = extra {
            directives.push(',');
            directives.push_str(extra);
        }
        let filter = EnvFilter::new(directives);
        let builder = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr);
        match self.format {
            LogFormat::Text => tracing::Dispatch::new(builder.with_ansi(colours()).finish()),
            LogFormat::Json => {
                tracing::Dispatch::new(builder.json().flatten_event(true).with_ansi(false).finish())
            }
        }
    }
}

/// Colour codes only for a person at a terminal: a log file (a desktop client's stderr log, a
/// redirect) must stay plain text, and `NO_COLOR` (any non-empty value) turns them off anywhere.
pub fn colours() -> bool {
    colours_for(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    )
}

fn colours_for(terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    terminal && no_color.is_none_or(|value| value.is_empty())
}

/// Installs the process's logger.
pub fn init(settings: LogSettings) {
    let dispatch = settings.dispatch(None);
    let _ = SETTINGS.set(settings);
    // Fails only when a logger is already set, which leaves that one in place.
    let _ = dispatch.try_init();
}

/// A logger like the process's, with `extra` directives (e.g. `toolsearch_core=debug`), for the
/// threads of a runtime that needs more detail.
pub fn dispatch_with(extra: &str) -> tracing::Dispatch {
    SETTINGS
        .get()
        .cloned()
        .unwrap_or_default()
        .dispatch(Some(extra))
}

/// Writes `line` on stderr whatever the filter says: the one line scripts read an address from.
/// As text it is the bare line; with `--log-format json` it is a JSON log line like the others.
pub fn announce(line: &str) {
    let json = SETTINGS.get().is_some_and(|s| s.format == LogFormat::Json);
    if !json {
        eprintln!("{line}");
        return;
    }
    let always = tracing::Dispatch::new(
        tracing_subscriber::fmt()
            .json()
            .flatten_event(true)
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .with_writer(std::io::stderr)
            .finish(),
    );
    tracing::dispatcher::with_default(&always, || tracing::info!(target: "toolsearch", "{line}"));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn colours_only_on_a_terminal_without_no_color() {
        assert!(colours_for(true, None));
        assert!(!colours_for(false, None));
        assert!(!colours_for(true, Some(OsStr::new("1"))));
        // NO_COLOR set but empty does not count, as the convention says.
        assert!(colours_for(true, Some(OsStr::new(""))));
    }

    #[test]
    fn progress_targets_are_on_unless_quiet_or_replaced() {
        let talk = LogSettings::default();
        assert_eq!(
            talk.directives(),
            "warn,rmcp::transport::worker=off,upstream=info,toolsearch_gateway::semantic=info,toolsearch::commands::serve=info"
        );
        let quiet = LogSettings {
            quiet: true,
            ..LogSettings::default()
        };
        assert_eq!(quiet.directives(), "warn,rmcp::transport::worker=off");
        let own = LogSettings {
            filter: Some("debug".into()),
            ..LogSettings::default()
        };
        assert_eq!(own.directives(), "debug");
    }
}
