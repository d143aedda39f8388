//! Where an upstream server is in its life: shared by the supervisor, which sets it, and by
//! the errors and results that report it.

use std::fmt;
use std::time::Duration;

/// Where an upstream server is in its life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerState {
    /// Being started or connected; `attempt` counts from 1 since it was last ready.
    Starting {
        attempt: u32,
        /// Why the previous attempt failed, after a failure.
        last_error: Option<String>,
    },
    /// Connected, tools fetched, taking calls.
    Ready,
    /// Down; the next start comes after `retry_in`.
    Restarting {
        attempt: u32,
        last_error: String,
        retry_in: Duration,
    },
    /// Given up after `attempts` failed starts (supervisor.maxRestarts); restart it by hand.
    Failed { attempts: u32, last_error: String },
    /// The server refused the gateway's credentials (HTTP 401 or 403): `reason` says what to
    /// set. Tried again only now and then (supervisor.maxBackoffMs), never in a retry storm.
    NeedsAuthorization { reason: String },
    /// Shut down with the gateway.
    Stopped,
}

impl ServerState {
    pub fn is_ready(&self) -> bool {
        matches!(self, ServerState::Ready)
    }

    /// One word for the state: the `state` label of the metrics and the console's.
    pub fn label(&self) -> &'static str {
        match self {
            ServerState::Starting { .. } => "starting",
            ServerState::Ready => "ready",
            ServerState::Restarting { .. } => "restarting",
            ServerState::Failed { .. } => "failed",
            ServerState::NeedsAuthorization { .. } => "needs_authorization",
            ServerState::Stopped => "stopped",
        }
    }
}

impl fmt::Display for ServerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServerState::Starting {
                attempt,
                last_error: None,
            } => write!(f, "starting, attempt {attempt}"),
            ServerState::Starting {
                attempt,
                last_error: Some(last_error),
            } => write!(f, "starting, attempt {attempt}; last error: {last_error}"),
            ServerState::Ready => f.write_str("ready"),
            ServerState::Restarting {
                attempt,
                last_error,
                retry_in,
            } => write!(
                f,
                "restarting after failure {attempt}, next try in {:.1}s; last error: {last_error}",
                retry_in.as_secs_f64()
            ),
            ServerState::Failed {
                attempts,
                last_error,
            } => write!(
                f,
                "failed, gave up after {attempts} attempts; last error: {last_error}"
            ),
            ServerState::NeedsAuthorization { reason } => {
                write!(f, "needs authorization: {reason}")
            }
            ServerState::Stopped => f.write_str("stopped"),
        }
    }
}
