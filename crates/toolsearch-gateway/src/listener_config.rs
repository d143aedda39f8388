//! The `http` section of the config: limits of the HTTP listener (shared by `/mcp` and the REST
//! API) and the `Host`/`Origin` rules that stop DNS-rebinding and cross-site requests.
//!
//! ```toml
//! [http]
//! headerReadTimeoutSecs = 10
//! bodyReadTimeoutSecs = 30
//! bodyStallTimeoutSecs = 5
//! maxConnections = 512
//! maxRequestsPerToken = 256
//! maxSessionsPerToken = 1000
//! maxStreamsPerToken = 128
//! sessionIdleTimeoutSecs = 300
//! sessionRestAfterSecs = 30
//! allowedHosts = ["tools.example.com"]
//! allowedOrigins = ["https://agent.example.com"]
//! ```
//!
//! The rules, applied by [`crate::rest::serve_with`] to every request before any route:
//!
//! - On a loopback listener (`127.0.0.1`, `::1`), the `Host` must be a loopback name or address
//!   (`localhost`, `*.localhost`, `127.x.x.x`, `[::1]`, any port) or be listed in `allowedHosts`;
//!   an `Origin`, when present, must be a loopback origin (`http(s)://localhost:*`,
//!   `http(s)://127.0.0.1:*`, `http(s)://[::1]:*`) or be listed in `allowedOrigins`.
//! - On any other listener, the `Host` must be listed in `allowedHosts`, unless the list is empty
//!   (the default: any `Host`; tokens and the network decide who connects); an `Origin`, when
//!   present, must be listed in `allowedOrigins` (default: none, so pages in a browser cannot call
//!   the gateway; `"*"` allows any).
//!
//! Anything else is refused with 403 and a JSON error naming the header and the key to change.

use std::net::IpAddr;
use std::time::Duration;

use serde::Deserialize;

/// Default of `http.headerReadTimeoutSecs`.
pub const DEFAULT_HEADER_READ_TIMEOUT_SECS: u64 = 10;
/// Default of `http.bodyReadTimeoutSecs`.
pub const DEFAULT_BODY_READ_TIMEOUT_SECS: u64 = 30;
/// Default of `http.maxConnections`.
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;
/// Default of `http.bodyStallTimeoutSecs`.
pub const DEFAULT_BODY_STALL_TIMEOUT_SECS: u64 = 5;
/// Default of `http.maxRequestsPerToken`: half the connections, so that one token never holds
/// them all.
pub const DEFAULT_MAX_REQUESTS_PER_TOKEN: usize = 256;
/// Default of `http.maxSessionsPerToken`.
pub const DEFAULT_MAX_SESSIONS_PER_TOKEN: usize = 1000;
/// Default of `http.maxStreamsPerToken`.
pub const DEFAULT_MAX_STREAMS_PER_TOKEN: usize = 128;
/// Default of `http.sessionIdleTimeoutSecs` (rmcp's own default).
pub const DEFAULT_SESSION_IDLE_TIMEOUT_SECS: u64 = 300;
/// Default of `http.sessionRestAfterSecs`.
pub const DEFAULT_SESSION_REST_AFTER_SECS: u64 = 30;

/// The `http` section, checked: every limit is positive, every list entry parses.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "HttpConfigFile")]
pub struct HttpConfig {
    /// Time a client has to send a request's headers, counted from the connection being accepted
    /// or from the end of its previous response (so it also closes idle kept-alive connections).
    pub header_read_timeout: Duration,
    /// Time a client has to send a request's body once its headers are in.
    pub body_read_timeout: Duration,
    /// Time a request's body may go without a byte arriving before it is given up: a body that
    /// stalled frees its connection well before `body_read_timeout`.
    pub body_stall_timeout: Duration,
    /// Open connections served at once. At the cap a new connection closes the oldest one that
    /// is waiting for a request (a slow or idle client); when every connection is busy with a
    /// request, the new one is answered 503 and closed.
    pub max_connections: usize,
    /// Requests of one API token in progress at once (from its headers to the end of its
    /// answer, `GET` streams included); past it the token's requests are answered 429. Applies
    /// to configured tokens only: without tokens every client is the same caller.
    pub max_requests_per_token: usize,
    /// MCP sessions one API token keeps open; opening one more ends the token's least recently
    /// used session (never another token's).
    pub max_sessions_per_token: usize,
    /// `GET` streams (a session's listener for server messages) one API token holds at once;
    /// past it a `GET` is answered 429.
    pub max_streams_per_token: usize,
    /// An MCP session with no request and no message for this long is closed (rmcp's session
    /// keep-alive); its client must initialize again.
    pub session_idle_timeout: Duration,
    /// An MCP session that holds nothing open (no request in progress, no `GET` stream, no
    /// subscription, no log level) for this long rests: it keeps its token, its client's
    /// `initialize`, its reveals and stored outputs, and its next request brings it back as it
    /// was. `None` (`0` in the file): sessions never rest.
    pub session_rest_after: Option<Duration>,
    /// Extra `Host` values accepted (`name` or `name:port`, any case; `*` accepts any).
    pub allowed_hosts: Vec<String>,
    /// Extra `Origin` values accepted (`scheme://host[:port]`, or `*` for any).
    pub allowed_origins: Vec<String>,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(DEFAULT_HEADER_READ_TIMEOUT_SECS),
            body_read_timeout: Duration::from_secs(DEFAULT_BODY_READ_TIMEOUT_SECS),
            body_stall_timeout: Duration::from_secs(DEFAULT_BODY_STALL_TIMEOUT_SECS),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_requests_per_token: DEFAULT_MAX_REQUESTS_PER_TOKEN,
            max_sessions_per_token: DEFAULT_MAX_SESSIONS_PER_TOKEN,
            max_streams_per_token: DEFAULT_MAX_STREAMS_PER_TOKEN,
            session_idle_timeout: Duration::from_secs(DEFAULT_SESSION_IDLE_TIMEOUT_SECS),
            session_rest_after: Some(Duration::from_secs(DEFAULT_SESSION_REST_AFTER_SECS)),
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
        }
    }
}

/// The section as written in the file.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct HttpConfigFile {
    #[serde(default = "default_header_read_timeout_secs")]
    header_read_timeout_secs: u64,
    #[serde(default = "default_body_read_timeout_secs")]
    body_read_timeout_secs: u64,
    #[serde(default = "default_body_stall_timeout_secs")]
    body_stall_timeout_secs: u64,
    #[serde(default = "default_max_connections")]
    max_connections: usize,
    #[serde(default = "default_max_requests_per_token")]
    max_requests_per_token: usize,
    #[serde(default = "default_max_sessions_per_token")]
    max_sessions_per_token: usize,
    #[serde(default = "default_max_streams_per_token")]
    max_streams_per_token: usize,
    #[serde(default = "default_session_idle_timeout_secs")]
    session_idle_timeout_secs: u64,
    #[serde(default = "default_session_rest_after_secs")]
    session_rest_after_secs: u64,
    #[serde(default)]
    allowed_hosts: Vec<String>,
    #[serde(default)]
    allowed_origins: Vec<String>,
}

fn default_header_read_timeout_secs() -> u64 {
    DEFAULT_HEADER_READ_TIMEOUT_SECS
}

fn default_body_read_timeout_secs() -> u64 {
    DEFAULT_BODY_READ_TIMEOUT_SECS
}

fn default_max_connections() -> usize {
    DEFAULT_MAX_CONNECTIONS
}

fn default_body_stall_timeout_secs() -> u64 {
    DEFAULT_BODY_STALL_TIMEOUT_SECS
}

fn default_max_requests_per_token() -> usize {
    DEFAULT_MAX_REQUESTS_PER_TOKEN
}

fn default_max_sessions_per_token() -> usize {
    DEFAULT_MAX_SESSIONS_PER_TOKEN
}

fn default_max_streams_per_token() -> usize {
    DEFAULT_MAX_STREAMS_PER_TOKEN
}

fn default_session_idle_timeout_secs() -> u64 {
    DEFAULT_SESSION_IDLE_TIMEOUT_SECS
}

fn default_session_rest_after_secs() -> u64 {
    DEFAULT_SESSION_REST_AFTER_SECS
}

impl TryFrom<HttpConfigFile> for HttpConfig {
    type Error = String;

    fn try_from(file: HttpConfigFile) -> Result<Self, String> {
        for (key, secs, default) in [
            (
                "headerReadTimeoutSecs",
                file.header_read_timeout_secs,
                DEFAULT_HEADER_READ_TIMEOUT_SECS,
            ),
            (
                "bodyReadTimeoutSecs",
                file.body_read_timeout_secs,
                DEFAULT_BODY_READ_TIMEOUT_SECS,
            ),
            (
                "bodyStallTimeoutSecs",
                file.body_stall_timeout_secs,
                DEFAULT_BODY_STALL_TIMEOUT_SECS,
            ),
            (
                "sessionIdleTimeoutSecs",
                file.session_idle_timeout_secs,
                DEFAULT_SESSION_IDLE_TIMEOUT_SECS,
            ),
        ] {
            if secs == 0 {
                return Err(format!(
                    "http.{key} is 0, which would drop every request; give a time in seconds (the default is {default})"
                ));
            }
        }
        for (key, value, default) in [
            (
                "maxConnections",
                file.max_connections,
                DEFAULT_MAX_CONNECTIONS,
            ),
            (
                "maxRequestsPerToken",
                file.max_requests_per_token,
                DEFAULT_MAX_REQUESTS_PER_TOKEN,
            ),
            (
                "maxSessionsPerToken",
                file.max_sessions_per_token,
                DEFAULT_MAX_SESSIONS_PER_TOKEN,
            ),
            (
                "maxStreamsPerToken",
                file.max_streams_per_token,
                DEFAULT_MAX_STREAMS_PER_TOKEN,
            ),
        ] {
            if value == 0 {
                return Err(format!(
                    "http.{key} is 0, which would refuse every client; give a positive number (the default is {default})"
                ));
            }
        }
        check_allowed(&file.allowed_hosts, &file.allowed_origins)?;
        Ok(Self {
            header_read_timeout: Duration::from_secs(file.header_read_timeout_secs),
            body_read_timeout: Duration::from_secs(file.body_read_timeout_secs),
            body_stall_timeout: Duration::from_secs(file.body_stall_timeout_secs),
            max_connections: file.max_connections,
            max_requests_per_token: file.max_requests_per_token,
            max_sessions_per_token: file.max_sessions_per_token,
            max_streams_per_token: file.max_streams_per_token,
            session_idle_timeout: Duration::from_secs(file.session_idle_timeout_secs),
            session_rest_after: (file.session_rest_after_secs > 0)
                .then(|| Duration::from_secs(file.session_rest_after_secs)),
            allowed_hosts: file.allowed_hosts,
            allowed_origins: file.allowed_origins,
        })
    }
}

/// Every `allowedHosts` entry is a host (`name` or `name:port`) and every `allowedOrigins` entry
/// an origin, or `*`.
fn check_allowed(hosts: &[String], origins: &[String]) -> Result<(), String> {
    for host in hosts {
        if host != "*" && parse_authority(host).is_none() {
            return Err(format!(
                "http.allowedHosts: `{host}` is not a host name; write `name` or `name:port` (e.g. `tools.example.com`), or `*` for any"
            ));
        }
    }
    for origin in origins {
        if origin != "*" && parse_origin(origin).is_none() {
            return Err(format!(
                "http.allowedOrigins: `{origin}` is not an origin; write `scheme://host[:port]` (e.g. `https://agent.example.com`), or `*` for any"
            ));
        }
    }
    Ok(())
}

/// Why a request's `Host` or `Origin` was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The `Host`, and whether the listener is on loopback (the advice differs).
    Host(String, bool),
    Origin(String),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Host(host, true) => write!(
                f,
                "Host `{host}` is not allowed on this loopback listener (a guard against DNS rebinding); connect by a loopback name such as 127.0.0.1 or localhost, or add the name to http.allowedHosts"
            ),
            Refusal::Host(host, false) => write!(
                f,
                "Host `{host}` is not in http.allowedHosts; connect by one of the listed names, or add this one"
            ),
            Refusal::Origin(origin) => write!(
                f,
                "Origin `{origin}` is not allowed (a guard against requests from other web pages); add it to http.allowedOrigins if this page may call the gateway"
            ),
        }
    }
}

impl HttpConfig {
    /// Checks a request's `Host` and `Origin` header values against the rules of a listener on a
    /// loopback address (`loopback`) or not. `host` is `None` when the request carries none.
    pub fn check_request(
        &self,
        loopback: bool,
        host: Option<&str>,
        origin: Option<&str>,
    ) -> Result<(), Refusal> {
        let host_ok = match host {
            // HTTP/1.1 requires Host; HTTP/1.0 requests may lack it, and so cannot be rebound.
            None => true,
            Some(host) => {
                let listed = self.host_listed(host);
                if loopback {
                    listed || parse_authority(host).is_some_and(|(name, _)| is_loopback_name(&name))
                } else {
                    self.allowed_hosts.is_empty() || listed
                }
            }
        };
        if !host_ok {
            return Err(Refusal::Host(
                host.unwrap_or_default().to_string(),
                loopback,
            ));
        }
        if let Some(origin) = origin {
            let listed = self.origin_listed(origin);
            let ok = if loopback {
                listed
                    || parse_origin(origin).is_some_and(|(scheme, name, _)| {
                        matches!(scheme.as_str(), "http" | "https") && is_loopback_name(&name)
                    })
            } else {
                listed
            };
            if !ok {
                return Err(Refusal::Origin(origin.to_string()));
            }
        }
        Ok(())
    }

    fn host_listed(&self, host: &str) -> bool {
        let Some((name, port)) = parse_authority(host) else {
            return false;
        };
        self.allowed_hosts.iter().any(|allowed| {
            allowed == "*"
                || parse_authority(allowed).is_some_and(|(a_name, a_port)| {
                    a_name == name && (a_port.is_none() || a_port == port)
                })
        })
    }

    fn origin_listed(&self, origin: &str) -> bool {
        let Some((scheme, name, port)) = parse_origin(origin) else {
            return false;
        };
        self.allowed_origins.iter().any(|allowed| {
            allowed == "*"
                || parse_origin(allowed).is_some_and(|(a_scheme, a_name, a_port)| {
                    a_scheme == scheme
                        && a_name == name
                        && (a_port.is_none() || a_port == port.or_else(|| default_port(&scheme)))
                })
        })
    }
}

fn default_port(scheme: &str) -> Option<u16> {
    match scheme {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    }
}

/// `name[:port]` or `[v6][:port]`, the name lowercased and without brackets or a trailing dot.
fn parse_authority(text: &str) -> Option<(String, Option<u16>)> {
    let text = text.trim();
    if text.is_empty() || text.contains(['/', '@', ' ', '?', '#']) {
        return None;
    }
    let (name, port) = if let Some(rest) = text.strip_prefix('[') {
        let (v6, after) = rest.split_once(']')?;
        let port = match after {
            "" => None,
            _ => Some(after.strip_prefix(':')?.parse().ok()?),
        };
        v6.parse::<std::net::Ipv6Addr>().ok()?;
        (v6.to_string(), port)
    } else {
        match text.rsplit_once(':') {
            Some((name, port)) if !name.contains(':') => {
                (name.to_string(), Some(port.parse().ok()?))
            }
            Some(_) => return None,
            None => (text.to_string(), None),
        }
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    (!name.is_empty()).then_some((name, port))
}

/// `scheme://authority` with nothing after it (a path of `/` is tolerated).
fn parse_origin(text: &str) -> Option<(String, String, Option<u16>)> {
    let (scheme, rest) = text.trim().split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    if scheme.is_empty()
        || !scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
    {
        return None;
    }
    let (name, port) = parse_authority(rest.strip_suffix('/').unwrap_or(rest))?;
    Some((scheme, name, port))
}

/// `localhost`, `*.localhost` (RFC 6761), or a loopback IP address.
fn is_loopback_name(name: &str) -> bool {
    name == "localhost"
        || name.ends_with(".localhost")
        || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(hosts: &[&str], origins: &[&str]) -> HttpConfig {
        HttpConfig {
            allowed_hosts: hosts.iter().map(|s| s.to_string()).collect(),
            allowed_origins: origins.iter().map(|s| s.to_string()).collect(),
            ..HttpConfig::default()
        }
    }

    #[test]
    fn loopback_listener_accepts_only_loopback_hosts_and_origins() {
        let c = HttpConfig::default();
        for host in [
            "127.0.0.1:8787",
            "127.0.0.1",
            "localhost:1",
            "LOCALHOST",
            "[::1]:80",
            "127.1.2.3",
            "app.localhost:3000",
        ] {
            assert_eq!(c.check_request(true, Some(host), None), Ok(()), "{host}");
        }
        for host in [
            "evil.example:8787",
            "evil.example",
            "127.0.0.1.evil.example",
            "localhost.evil",
            "10.0.0.1",
            "",
            "a b",
        ] {
            assert!(
                matches!(
                    c.check_request(true, Some(host), None),
                    Err(Refusal::Host(..))
                ),
                "{host}"
            );
        }
        for origin in [
            "http://localhost:3000",
            "https://127.0.0.1",
            "http://[::1]:9",
        ] {
            assert_eq!(
                c.check_request(true, Some("localhost"), Some(origin)),
                Ok(()),
                "{origin}"
            );
        }
        for origin in [
            "http://evil.example",
            "null",
            "file://",
            "http://localhost.evil.example",
            "chrome-extension://abc",
        ] {
            assert!(
                matches!(
                    c.check_request(true, Some("localhost"), Some(origin)),
                    Err(Refusal::Origin(_))
                ),
                "{origin}"
            );
        }
    }

    #[test]
    fn lists_extend_a_loopback_listener() {
        let c = config(&["tools.internal"], &["https://agent.example.com"]);
        assert_eq!(
            c.check_request(true, Some("tools.internal:8787"), None),
            Ok(())
        );
        assert_eq!(
            c.check_request(true, Some("localhost"), Some("https://agent.example.com")),
            Ok(())
        );
        assert_eq!(
            c.check_request(
                true,
                Some("localhost"),
                Some("https://agent.example.com:443")
            ),
            Ok(())
        );
        assert!(c
            .check_request(true, Some("localhost"), Some("http://agent.example.com"))
            .is_err());
    }

    #[test]
    fn other_listeners_use_the_lists() {
        let open = HttpConfig::default();
        assert_eq!(open.check_request(false, Some("anything:1"), None), Ok(()));
        assert!(open
            .check_request(false, Some("anything"), Some("http://localhost:3000"))
            .is_err());
        let strict = config(&["tools.example.com:8443"], &["*"]);
        assert_eq!(
            strict.check_request(false, Some("TOOLS.example.com:8443"), Some("https://x.y")),
            Ok(())
        );
        assert!(strict
            .check_request(false, Some("tools.example.com:9000"), None)
            .is_err());
        assert!(strict.check_request(false, Some("other"), None).is_err());
    }

    #[test]
    fn the_section_is_checked() {
        let parse = |text: &str| toml::from_str::<HttpConfig>(text);
        assert_eq!(parse("").unwrap(), HttpConfig::default());
        let c = parse("headerReadTimeoutSecs = 2\nmaxConnections = 8\nmaxStreamsPerToken = 3\nsessionIdleTimeoutSecs = 60").unwrap();
        assert_eq!(c.header_read_timeout, Duration::from_secs(2));
        assert_eq!(c.max_connections, 8);
        assert_eq!(c.max_streams_per_token, 3);
        assert_eq!(c.session_idle_timeout, Duration::from_secs(60));
        assert_eq!(c.session_rest_after, Some(Duration::from_secs(30)));
        assert_eq!(
            parse("sessionRestAfterSecs = 0")
                .unwrap()
                .session_rest_after,
            None
        );
        for (text, says) in [
            ("maxConnections = 0", "http.maxConnections is 0"),
            (
                "headerReadTimeoutSecs = 0",
                "http.headerReadTimeoutSecs is 0",
            ),
            ("bodyReadTimeoutSecs = 0", "http.bodyReadTimeoutSecs is 0"),
            ("bodyStallTimeoutSecs = 0", "http.bodyStallTimeoutSecs is 0"),
            (
                "sessionIdleTimeoutSecs = 0",
                "http.sessionIdleTimeoutSecs is 0",
            ),
            ("maxSessionsPerToken = 0", "http.maxSessionsPerToken is 0"),
            ("maxStreamsPerToken = 0", "http.maxStreamsPerToken is 0"),
            ("maxRequestsPerToken = 0", "http.maxRequestsPerToken is 0"),
            ("allowedHosts = [\"a/b\"]", "http.allowedHosts"),
            ("allowedOrigins = [\"example.com\"]", "http.allowedOrigins"),
            ("maxConnection = 3", "unknown field"),
        ] {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.contains(says), "{text}: {e}");
        }
    }
}
