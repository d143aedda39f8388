//! The gateway's errors. Each says what went wrong and what to do about it.

use std::time::Duration;

use crate::config::ConfigError;

pub type Result<T, E = GatewayError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GatewayError {
    #[error(transparent)]
    Config(Box<ConfigError>),

    /// The store replicas share sessions through did not answer.
    #[error(transparent)]
    SharedState(Box<crate::shared::SharedStateError>),

    /// Where sign-ins are kept cannot be set up (a key too short to seal them with); the
    /// sign-in module's message.
    #[error("{0}")]
    SignIns(String),

    #[error("unknown upstream server `{server}`; configured servers: {known}")]
    UnknownServer { server: String, known: String },

    #[error("server `{server}` is down ({state}); the gateway restarts it automatically: try again later, or check its logs (target `upstream`)")]
    /// `state` is the server's state as its `Display` writes it.
    ServerUnavailable { server: String, state: String },

    #[error("tool `{tool}` of server `{server}` is excluded by toolSearch.selectedServers/selectedTools; change the filter to expose it")]
    ToolNotSelected { server: String, tool: String },

    #[error("call to `{tool}` on server `{server}` timed out after {}s; the upstream was told to cancel it; raise toolSearch.callTimeoutSecs if the tool is slow", timeout.as_secs_f64())]
    CallTimeout {
        server: String,
        tool: String,
        timeout: Duration,
    },

    #[error("call to `{tool}` on server `{server}` was cancelled by the caller; the upstream was told to cancel it")]
    CallCancelled { server: String, tool: String },

    /// The upstream answered with a JSON-RPC error (unknown tool, invalid arguments, ...).
    #[error("server `{server}` rejected the call to `{tool}`: {} (code {}); check the tool name and its arguments against the tool's schema", error.message, error.code.0)]
    UpstreamRejected {
        server: String,
        tool: String,
        error: Box<rmcp::ErrorData>,
    },

    /// The connection closed while the call was in flight: the server went down.
    #[error("server `{server}` is down (its connection closed during the call to `{tool}`: {message}); the gateway restarts it automatically: try again later, or check its logs (target `upstream`)")]
    ConnectionLost {
        server: String,
        tool: String,
        message: String,
    },

    /// The upstream's answer to this call could not be read (too large, not MCP, an HTTP error
    /// page); the upstream stays connected and other calls go on.
    #[error("call to `{tool}` on server `{server}` failed: {message}")]
    AnswerRefused {
        server: String,
        tool: String,
        message: String,
    },

    /// The call failed in the MCP library for another reason.
    #[error("call to `{tool}` on server `{server}` failed: {message}; the server is restarted automatically if it went down")]
    CallFailed {
        server: String,
        tool: String,
        message: String,
    },

    /// A bearer token for the REST API that cannot be used.
    #[error("API token #{} of {source_name} is empty or contains whitespace; tokens are single words, separate several with commas", index + 1)]
    InvalidApiToken { source_name: String, index: usize },

    /// The same bearer token given twice with different tools.
    #[error("the same API token is given by {first} and by {second} with different tools; give each token once, with the tools it may use")]
    ConflictingApiToken { first: String, second: String },

    /// The environment variable a `[[rest.tokens]]` entry reads its token from is not usable.
    #[error("{key} names the environment variable `{var}`, but {why}; set it to the token before starting the gateway, or give the token in `token`")]
    TokenEnv {
        key: String,
        var: String,
        why: String,
    },

    /// A request on an MCP session opened with another API token.
    #[error("this MCP session was opened with another API token; open a session of your own (initialize) with your token")]
    SessionOfAnotherToken,

    /// A request on an MCP session the gateway no longer knows.
    #[error("MCP session `{session}` has ended; open a new one (initialize)")]
    SessionEnded { session: String },

    /// Serving the REST API without a token anywhere but on loopback.
    #[error("refusing to serve the REST API on {addr} without an API token: anyone who can reach it could use it; set rest.apiTokens in the config or TOOLSEARCH_API_TOKENS, bind a loopback address (127.0.0.1), or pass --insecure-no-auth")]
    UnauthenticatedBind { addr: std::net::SocketAddr },

    /// The engine refused a setting or a catalog.
    #[error("unknown prompt `{}`; prompts are named `server{separator}prompt`: list them with prompts/list", clipped(name))]
    UnknownPrompt { name: String, separator: String },

    #[error(
        "server `{server}` could not give prompt `{}`: {}",
        clipped(prompt),
        clipped_long(message)
    )]
    PromptFailed {
        server: String,
        prompt: String,
        message: String,
    },

    #[error("no resource `{}`: gateway resource URIs look like `toolsearch://<server>/<uri>`; take one from resources/list or resources/templates/list", clipped(uri))]
    UnknownResource { uri: String },

    #[error(
        "server `{server}` could not {action} resource `{}`: {}",
        clipped(uri),
        clipped_long(message)
    )]
    ResourceFailed {
        server: String,
        uri: String,
        action: &'static str,
        message: String,
    },

    #[error(transparent)]
    Core(#[from] toolsearch_core::Error),

    /// Serving downstream clients failed.
    #[error("{0}")]
    Downstream(String),

    /// Starting or connecting an upstream failed (used as the `last_error` of its state).
    #[error("server `{server}` failed to start: {message}")]
    Start { server: String, message: String },
}

/// Text a client or an upstream chose (a name, a URI, a message that may echo them), cut for
/// errors and logs: an error is answered to the client and logged, and a megabyte-long method
/// name would otherwise make a megabyte of log per request.
pub(crate) fn clipped(text: &str) -> std::borrow::Cow<'_, str> {
    clip_to(text, CLIPPED_CHARS)
}

/// Like [`clipped`], with room for an upstream's whole error message.
pub(crate) fn clipped_long(text: &str) -> std::borrow::Cow<'_, str> {
    clip_to(text, CLIPPED_LONG_CHARS)
}

/// Characters of a name or URI kept in an error.
const CLIPPED_CHARS: usize = 200;
/// Characters of an upstream's message kept in an error.
const CLIPPED_LONG_CHARS: usize = 2_000;

fn clip_to(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    match text.char_indices().nth(max) {
        None => std::borrow::Cow::Borrowed(text),
        Some((end, _)) => std::borrow::Cow::Owned(format!(
            "{}… ({} characters in all)",
            &text[..end],
            text.chars().count()
        )),
    }
}

impl From<ConfigError> for GatewayError {
    fn from(e: ConfigError) -> Self {
        GatewayError::Config(Box::new(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_chosen_text_is_clipped_in_errors() {
        let uri = "x".repeat(1 << 20);
        let message = GatewayError::UnknownResource { uri }.to_string();
        assert!(message.len() < 500, "{} bytes", message.len());
        assert!(message.contains("(1048576 characters in all)"), "{message}");
        let short = GatewayError::UnknownResource {
            uri: "toolsearch://a/b".into(),
        }
        .to_string();
        assert!(short.contains("`toolsearch://a/b`"), "{short}");
    }

    #[test]
    fn clipping_keeps_whole_characters() {
        let text = "é".repeat(300);
        let clipped = clipped(&text);
        assert!(clipped.starts_with(&"é".repeat(200)), "{clipped}");
        assert!(clipped.ends_with("(300 characters in all)"), "{clipped}");
    }
}
