//! The gateway's configuration file.
//!
//! TOML or JSON (chosen by the file extension; `.toml` is TOML, anything else is tried as JSON). The
//! `mcpServers` object is the one Claude Desktop and Cursor use, accepted unchanged:
//!
//! ```toml
//! [mcpServers.everything]
//! command = "npx"
//! args = ["-y", "@modelcontextprotocol/server-everything"]
//!
//! [mcpServers.remote]
//! url = "https://example.com/mcp"
//! headers = { Authorization = "Bearer ..." }
//!
//! [toolSearch]
//! preset = "search"
//! threshold = 15
//!
//! [[categories]]                 # REST categories; tools join by server or name pattern
//! id = "code"
//! name = "Code hosting"
//! servers = ["github"]
//! tools = ["*:create_issue"]
//!
//! [rest]
//! apiTokens = ["..."]            # also TOOLSEARCH_API_TOKENS (comma-separated); every tool
//!
//! [[rest.tokens]]                # a token limited to some tools (name patterns)
//! name = "ci"
//! tokenEnv = "CI_TOOLSEARCH_TOKEN"   # or token = "..."
//! tools = ["github:*", "fs:read_*"]
//! ```
//!
//! Keys in a server entry and in `toolSearch`, `supervisor`, `rest`, `http` and `state` are checked
//! strictly, so a typo is an error that names the key and the nearest known one. Keys other MCP
//! clients write into server entries (`autoApprove`, `description`, VS Code's `envFile`, ...) are
//! read and ignored ([`FOREIGN_SERVER_KEYS`]). Unknown top-level keys are ignored too (Claude
//! Desktop files carry `globalShortcut`, `preferences`), unless they look like a misspelt known
//! one. VS Code's `servers` object is read as `mcpServers`.
//!
//! [`GatewayConfig::load`] resolves a stdio server's `cwd` against the config file's folder (see
//! [`GatewayConfig::resolve_paths`]) and refuses an entry that would start this gateway again on
//! the same file.

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use toolsearch_core::disclosure::DisclosureConfig;
use toolsearch_core::{
    CatalogPolicy, CategoryDef, NamePattern, Naming, Preset, SearchConfig, SearchEngine,
    SelectionOrder, DEFAULT_SEPARATOR,
};

/// A configuration problem: the file, the key (dotted path), the position when known, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file, or `<inline>` for text parsed without one.
    pub file: String,
    /// Dotted path of the offending key, e.g. `toolSearch.preset`; empty for the whole document.
    pub key: String,
    /// 1-based line and column, when the parser knows them.
    pub line: Option<usize>,
    pub column: Option<usize>,
    /// What was wrong and what to do.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid gateway config {}", self.file)?;
        if let (Some(line), Some(column)) = (self.line, self.column) {
            write!(f, " at line {line}, column {column}")?;
        }
        if !self.key.is_empty() {
            write!(f, ", key `{}`", self.key)?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for ConfigError {}

/// The whole gateway configuration.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewayConfig {
    /// Upstream servers in the order they appear in the file (the `server_priority` order).
    /// VS Code's `servers` object is the same thing.
    #[serde(default, alias = "servers")]
    pub mcp_servers: ServerList,
    #[serde(default)]
    pub tool_search: ToolSearchConfig,
    #[serde(default)]
    pub supervisor: SupervisorConfig,
    /// Category definitions (`[[categories]]`): id, name, description, and the tools they hold
    /// (by server glob or name pattern; the first matching definition wins).
    #[serde(default)]
    pub categories: Vec<CategoryDef>,
    /// The `rest` section: the REST API's tokens and limits.
    #[serde(default)]
    pub rest: RestConfig,
    /// The `http` section: the listener's limits and its `Host`/`Origin` rules.
    #[serde(default)]
    pub http: crate::listener_config::HttpConfig,
    /// The `state` section: where sessions live (this process, or Redis shared by replicas).
    #[serde(default)]
    pub state: StateConfig,
    /// The top-level key the servers were read from (`mcpServers` or `servers`); `None` when the
    /// file has neither (see [`GatewayConfig::require_servers`]).
    #[serde(skip)]
    pub servers_key: Option<String>,
}

/// The `state` section. Without `redis` every session lives in this process's memory; with it,
/// what a session must keep across requests (its MCP session, token, reveals and large outputs)
/// lives in Redis, so that several replicas behind a load balancer serve any request.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StateConfig {
    /// `redis://host:port/db`; credentials may sit in the URL.
    #[serde(default)]
    pub redis: Option<String>,
    /// Names the keys of this deployment start with, so that several share one Redis.
    #[serde(default = "default_state_prefix")]
    pub prefix: String,
    /// A session untouched this long is forgotten, with everything it kept.
    #[serde(default = "default_session_ttl")]
    pub session_ttl_secs: u64,
    /// How long a request waits on Redis before it fails with an error saying so.
    #[serde(default = "default_state_timeout")]
    pub timeout_ms: u64,
}

fn default_state_prefix() -> String {
    "toolsearch".to_string()
}

fn default_session_ttl() -> u64 {
    3600
}

fn default_state_timeout() -> u64 {
    2000
}

impl Default for StateConfig {
    fn default() -> Self {
        Self {
            redis: None,
            prefix: default_state_prefix(),
            session_ttl_secs: default_session_ttl(),
            timeout_ms: default_state_timeout(),
        }
    }
}

/// The `rest` section.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RestConfig {
    /// Bearer tokens accepted by the REST API and `/mcp`, each allowed every tool (added to those
    /// of `TOOLSEARCH_API_TOKENS`).
    #[serde(default)]
    pub api_tokens: Vec<String>,
    /// Bearer tokens, each with the tools it may see (`[[rest.tokens]]`).
    #[serde(default)]
    pub tokens: Vec<TokenConfig>,
    /// Largest request body accepted, in bytes.
    #[serde(default = "default_max_body_bytes")]
    pub max_body_bytes: usize,
}

fn default_max_body_bytes() -> usize {
    64 * 1024
}

impl Default for RestConfig {
    fn default() -> Self {
        Self {
            api_tokens: Vec::new(),
            tokens: Vec::new(),
            max_body_bytes: default_max_body_bytes(),
        }
    }
}

/// One API token of `[[rest.tokens]]` and the tools it may see. A request with it, and every
/// MCP session opened with it, finds, lists and calls only those tools.
#[derive(Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TokenConfig {
    /// The token itself; give this or `token_env`.
    #[serde(default)]
    pub token: Option<String>,
    /// The environment variable holding the token, read when the gateway starts.
    #[serde(default)]
    pub token_env: Option<String>,
    /// A name for the token in logs and errors (the token itself is never printed).
    #[serde(default)]
    pub name: Option<String>,
    /// The tools the token may see, as [name patterns](NamePattern); absent: every tool.
    #[serde(default)]
    pub tools: Option<Vec<NamePattern>>,
}

impl fmt::Debug for TokenConfig {
    // Never print the token.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenConfig")
            .field("token", &self.token.as_ref().map(|_| "<hidden>"))
            .field("token_env", &self.token_env)
            .field("name", &self.name)
            .field("tools", &self.tools)
            .finish()
    }
}

/// Whether `token` can be a bearer token: not empty, no whitespace.
fn usable_token(token: &str) -> bool {
    !token.is_empty() && !token.chars().any(char::is_whitespace)
}

/// The `mcpServers` object, order preserved.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServerList(pub Vec<(String, ServerConfig)>);

impl ServerList {
    pub fn iter(&self) -> impl Iterator<Item = (&str, &ServerConfig)> {
        self.0.iter().map(|(name, config)| (name.as_str(), config))
    }

    pub fn get(&self, name: &str) -> Option<&ServerConfig> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, c)| c)
    }

    pub fn names(&self) -> Vec<String> {
        self.0.iter().map(|(n, _)| n.clone()).collect()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<'de> Deserialize<'de> for ServerList {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ListVisitor;
        impl<'de> Visitor<'de> for ListVisitor {
            type Value = ServerList;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object mapping server names to server entries")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ServerList, A::Error> {
                let mut out: Vec<(String, ServerConfig)> = Vec::new();
                while let Some(name) = map.next_key::<String>()? {
                    if out.iter().any(|(n, _)| *n == name) {
                        return Err(de::Error::custom(format!(
                            "server `{name}` is defined twice; keep one entry"
                        )));
                    }
                    let config: ServerConfig = map.next_value()?;
                    out.push((name, config));
                }
                Ok(ServerList(out))
            }
        }
        deserializer.deserialize_map(ListVisitor)
    }
}

/// One upstream server entry, as Claude Desktop / Cursor / VS Code write it.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(from = "RawServerEntry")]
pub struct ServerConfig {
    /// `stdio`, `http`, `streamable-http`/`streamableHttp`; inferred from `command`/`url` when absent.
    pub transport_type: Option<String>,
    /// Program to start for a stdio server.
    pub command: Option<String>,
    pub args: Vec<String>,
    /// Variables set for a stdio server, over those it inherits.
    pub env: BTreeMap<String, String>,
    /// A stdio server's working directory. [`GatewayConfig::load`] makes it absolute: a relative
    /// one is taken from the config file's folder, and an entry without one runs in that folder.
    pub cwd: Option<PathBuf>,
    /// Endpoint of a Streamable HTTP server.
    pub url: Option<String>,
    pub headers: BTreeMap<String, String>,
    /// Cursor and others let an entry be switched off; a disabled server is not started.
    pub disabled: bool,
    /// Which of the gateway's environment variables a stdio server inherits (`inheritEnv`).
    pub inherit_env: InheritEnv,
    /// How `toolsearch auth login` signs in to an HTTP server (`oauth`).
    pub oauth: Option<OAuthSettings>,
    /// Set by [`GatewayConfig::load`] when `cwd` was written relative: the folder is created when
    /// missing, so that a config can name a folder beside itself that a fresh checkout lacks.
    pub create_cwd: bool,
    /// The gateway's own secrets' variables (`rest.tokens[].tokenEnv`), never inherited.
    pub withheld_env: Vec<String>,
    /// Why the gateway will not start this entry although it is well formed (it would start this
    /// gateway again on the same config); set by [`GatewayConfig::load`].
    pub refusal: Option<String>,
}

/// Which of the gateway's environment variables a stdio server inherits, besides its own `env`.
/// Variables named `TOOLSEARCH_*` and those holding `rest.tokens` are never inherited.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum InheritEnv {
    /// `inheritEnv` absent or `false`: the small default set the official MCP SDKs pass
    /// (`crate::upstream::child_env::DEFAULT_INHERITED`).
    #[default]
    Defaults,
    /// `inheritEnv = true`: every variable.
    All,
    /// `inheritEnv = ["NAME", "PREFIX_*"]`: the default set and these (a trailing `*` matches
    /// any end).
    Names(Vec<String>),
}

impl<'de> Deserialize<'de> for InheritEnv {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct InheritVisitor;
        impl<'de> Visitor<'de> for InheritVisitor {
            type Value = InheritEnv;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "true (every variable), false (the default set), or a list of variable names",
                )
            }
            fn visit_bool<E: de::Error>(self, all: bool) -> Result<InheritEnv, E> {
                Ok(if all {
                    InheritEnv::All
                } else {
                    InheritEnv::Defaults
                })
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<InheritEnv, A::Error> {
                let mut names = Vec::new();
                while let Some(name) = seq.next_element::<String>()? {
                    names.push(name);
                }
                Ok(InheritEnv::Names(names))
            }
        }
        deserializer.deserialize_any(InheritVisitor)
    }
}

/// Keys other MCP clients write into server entries; read and ignored.
pub const FOREIGN_SERVER_KEYS: &[&str] = &[
    "autoApprove",   // Claude Desktop, Cline
    "alwaysAllow",   // Roo Code
    "disabledTools", // Roo Code
    "timeout",       // Cline, Gemini CLI
    "transportType", // Cline
    "description",
    "envFile",      // VS Code
    "dev",          // VS Code
    "gallery",      // VS Code
    "version",      // VS Code
    "trust",        // Gemini CLI
    "includeTools", // Gemini CLI
    "excludeTools", // Gemini CLI
];

/// The keys of a server entry the gateway reads.
pub const SERVER_KEYS: &[&str] = &[
    "type",
    "command",
    "args",
    "env",
    "cwd",
    "url",
    "headers",
    "disabled",
    "inheritEnv",
    "oauth",
];

/// A server entry as written; unknown keys are errors (see [`FOREIGN_SERVER_KEYS`]).
#[derive(Deserialize)]
#[allow(dead_code)] // the foreign keys are read only to be dropped
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawServerEntry {
    #[serde(default, rename = "type", alias = "transport")]
    transport_type: Option<String>,
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    cwd: Option<PathBuf>,
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    disabled: bool,
    #[serde(default)]
    inherit_env: InheritEnv,
    #[serde(default)]
    oauth: Option<OAuthSettings>,
    // FOREIGN_SERVER_KEYS, each read and dropped.
    #[serde(default)]
    auto_approve: de::IgnoredAny,
    #[serde(default)]
    always_allow: de::IgnoredAny,
    #[serde(default)]
    disabled_tools: de::IgnoredAny,
    #[serde(default)]
    timeout: de::IgnoredAny,
    #[serde(default, rename = "transportType")]
    transport_type_cline: de::IgnoredAny,
    #[serde(default)]
    description: de::IgnoredAny,
    #[serde(default)]
    env_file: de::IgnoredAny,
    #[serde(default)]
    dev: de::IgnoredAny,
    #[serde(default)]
    gallery: de::IgnoredAny,
    #[serde(default)]
    version: de::IgnoredAny,
    #[serde(default)]
    trust: de::IgnoredAny,
    #[serde(default)]
    include_tools: de::IgnoredAny,
    #[serde(default)]
    exclude_tools: de::IgnoredAny,
}

impl From<RawServerEntry> for ServerConfig {
    fn from(raw: RawServerEntry) -> Self {
        Self {
            transport_type: raw.transport_type,
            command: raw.command,
            args: raw.args,
            env: raw.env,
            cwd: raw.cwd,
            url: raw.url,
            headers: raw.headers,
            disabled: raw.disabled,
            inherit_env: raw.inherit_env,
            oauth: raw.oauth,
            create_cwd: false,
            withheld_env: Vec::new(),
            refusal: None,
        }
    }
}

/// An entry's `oauth` table: for a service without dynamic client registration, the client
/// registered with it beforehand; and the scopes to ask for.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OAuthSettings {
    /// The client's id, as the service issued it.
    pub client_id: Option<String>,
    /// The variable of the environment holding the client's secret (a confidential client).
    pub client_secret_env: Option<String>,
    /// Scopes to ask for; by default those the server's challenge or metadata name.
    #[serde(default)]
    pub scopes: Vec<String>,
}

/// How the gateway talks to one upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    Stdio {
        command: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
        cwd: Option<PathBuf>,
        /// What the server inherits of the gateway's environment.
        inherit_env: InheritEnv,
        /// Variables never inherited, besides `TOOLSEARCH_*`.
        withheld_env: Vec<String>,
        /// Create `cwd` when it is missing.
        create_cwd: bool,
    },
    StreamableHttp {
        url: String,
        headers: BTreeMap<String, String>,
        /// `url` as the config wrote it (`${NAME}` references unexpanded): what logs and errors
        /// show, so that a secret in the URL never reaches them.
        shown_url: String,
    },
    /// The HTTP+SSE transport of MCP 2024-11-05 (`type = "sse"`): `url` is the event stream.
    Sse {
        url: String,
        headers: BTreeMap<String, String>,
        shown_url: String,
    },
}

/// The transport a server entry asks for.
enum Kind {
    Stdio,
    StreamableHttp,
    LegacySse,
}

impl ServerConfig {
    /// Whether this entry starts a toolsearch gateway: a word of its command line (the command,
    /// an argument, or a word of a shell `-c` string) names the `toolsearch` program (`toolsearch`,
    /// `toolsearch.exe`, `toolsearch-cli` as in `cargo run -p toolsearch-cli`, or this very
    /// executable's path), and a later word is `serve`. A gateway started by a gateway is refused,
    /// so such an entry is left out of imported files and refused on the gateway's own config.
    pub fn runs_toolsearch(&self) -> bool {
        let Some(command) = &self.command else {
            return false;
        };
        let words: Vec<&str> = std::iter::once(command.as_str())
            .chain(self.args.iter().map(String::as_str))
            .flat_map(str::split_whitespace)
            .collect();
        let current = std::env::current_exe().ok();
        words
            .iter()
            .position(|word| names_toolsearch(word, current.as_deref()))
            .is_some_and(|at| words[at + 1..].contains(&"serve"))
    }

    /// Whether the entry's `--config FILE` (or `--config=FILE`) argument, taken from its `cwd`,
    /// is the file `config`.
    fn config_arg_names(&self, config: &Path) -> bool {
        let mut args = self.args.iter();
        while let Some(arg) = args.next() {
            let value = match arg.strip_prefix("--config") {
                Some("") => args.next().map(String::as_str),
                Some(rest) => rest.strip_prefix('='),
                None => None,
            };
            if let Some(value) = value {
                let path = match &self.cwd {
                    Some(cwd) => cwd.join(value),
                    None => PathBuf::from(value),
                };
                if same_file(&path, config) {
                    return true;
                }
            }
        }
        false
    }

    /// The transport this entry describes, or why it describes none.
    /// How to start or reach the server, with `${NAME}` and `${env:NAME}` in `url`, `headers`,
    /// `env`, `args` and `cwd` replaced by the gateway's environment; a variable that is not set
    /// is an error naming it and the key that uses it.
    pub fn transport(&self) -> Result<Transport, InvalidServerEntry> {
        self.checked_transport(Expand::FromEnvironment)
            .map_err(InvalidServerEntry)
    }

    /// [`ServerConfig::transport`] as the file wrote it, references unexpanded: the entry's form
    /// checked without the environment it will run in (for `init`, and for checking a file).
    pub fn transport_as_written(&self) -> Result<Transport, InvalidServerEntry> {
        self.checked_transport(Expand::No)
            .map_err(InvalidServerEntry)
    }

    fn checked_transport(&self, expand: Expand) -> Result<Transport, String> {
        if let Some(refusal) = &self.refusal {
            return Err(refusal.clone());
        }
        match self.kind()? {
            Kind::Stdio => self.stdio_transport(expand),
            Kind::StreamableHttp => self.http_transport(expand, false),
            Kind::LegacySse => self.http_transport(expand, true),
        }
    }

    /// Which transport the entry asks for: its `type`, else `command` or `url`.
    fn kind(&self) -> Result<Kind, String> {
        let kind = self
            .transport_type
            .as_deref()
            .map(|t| t.trim().to_ascii_lowercase().replace(['-', '_'], ""));
        match kind.as_deref() {
            None => match (&self.command, &self.url) {
                (Some(_), Some(_)) => Err(
                    "has both `command` and `url`; keep `command` for a stdio server or `url` for a Streamable HTTP server"
                        .into(),
                ),
                (None, None) => Err(
                    "has neither `command` (stdio server) nor `url` (Streamable HTTP server); add one"
                        .into(),
                ),
                (_, None) => Ok(Kind::Stdio),
                (_, Some(_)) => Ok(Kind::StreamableHttp),
            },
            Some("stdio") => Ok(Kind::Stdio),
            Some("http") | Some("streamablehttp") => Ok(Kind::StreamableHttp),
            Some("sse") => Ok(Kind::LegacySse),
            Some(other) => Err(format!(
                "has unknown type `{other}`; use `stdio`, `http` (Streamable HTTP) or `sse` (the legacy HTTP+SSE transport)"
            )),
        }
    }

    fn http_transport(&self, expand: Expand, legacy_sse: bool) -> Result<Transport, String> {
        let url = self.url.clone().ok_or_else(|| {
            if legacy_sse {
                "is a legacy SSE server but has no `url`; add the server's event-stream endpoint, e.g. `http://127.0.0.1:3001/sse`"
            } else {
                "is a Streamable HTTP server but has no `url`; add the server's endpoint, e.g. `http://127.0.0.1:3001/mcp`"
            }
            .to_string()
        })?;
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(format!(
                "has `url` `{url}`, which is not an http:// or https:// address"
            ));
        }
        let shown_url = url.clone();
        let url = expand.value(&url, "url")?;
        let mut headers = BTreeMap::new();
        for (name, value) in &self.headers {
            let value = expand.value(value, &format!("headers.{name}"))?;
            check_header(name, &value)?;
            headers.insert(name.clone(), value);
        }
        Ok(if legacy_sse {
            Transport::Sse {
                url,
                headers,
                shown_url,
            }
        } else {
            Transport::StreamableHttp {
                url,
                headers,
                shown_url,
            }
        })
    }

    fn stdio_transport(&self, expand: Expand) -> Result<Transport, String> {
        let command = self.command.clone().ok_or_else(|| {
            "is a stdio server but has no `command`; add the program to start".to_string()
        })?;
        if command.trim().is_empty() {
            return Err("has an empty `command`; give the program to start".into());
        }
        let args = (self.args.iter().enumerate())
            .map(|(i, arg)| expand.value(arg, &format!("args[{i}]")))
            .collect::<Result<_, _>>()?;
        let env = (self.env.iter())
            .map(|(name, value)| Ok((name.clone(), expand.value(value, &format!("env.{name}"))?)))
            .collect::<Result<_, String>>()?;
        let cwd = match &self.cwd {
            Some(cwd) => Some(PathBuf::from(expand.value(&cwd.to_string_lossy(), "cwd")?)),
            None => None,
        };
        Ok(Transport::Stdio {
            command,
            args,
            env,
            cwd,
            inherit_env: self.inherit_env.clone(),
            withheld_env: self.withheld_env.clone(),
            create_cwd: self.create_cwd,
        })
    }
}

/// Whether a server entry's `${NAME}` references are replaced by the environment.
#[derive(Clone, Copy)]
enum Expand {
    FromEnvironment,
    No,
}

impl Expand {
    /// `value` with every `${NAME}` and `${env:NAME}` replaced by the variable (`$${` writes a
    /// literal `${`); `key` names the field in errors. Unchanged when not expanding.
    fn value(self, value: &str, key: &str) -> Result<String, String> {
        match self {
            Expand::No => Ok(value.to_string()),
            Expand::FromEnvironment => {
                expand_references(value, key, |name| std::env::var(name).ok())
            }
        }
    }
}

/// [`Expand::value`] with `lookup` standing for the environment.
fn expand_references(
    value: &str,
    key: &str,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<String, String> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(at) = rest.find("${") {
        if rest[..at].ends_with('$') {
            // `$${`: a literal `${`.
            out.push_str(&rest[..at]);
            out.push('{');
            rest = &rest[at + 2..];
            continue;
        }
        out.push_str(&rest[..at]);
        let inner_start = at + 2;
        let Some(close) = rest[inner_start..].find('}') else {
            return Err(format!(
                "has `${{` without a closing `}}` in `{key}`; write `${{NAME}}` to use a variable, or `$${{` for a literal `${{`"
            ));
        };
        let reference = &rest[inner_start..inner_start + close];
        let name = reference.strip_prefix("env:").unwrap_or(reference);
        let valid = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(format!(
                "has `${{{reference}}}` in `{key}`, which is not a variable reference; write `${{NAME}}` or `${{env:NAME}}` with a variable name (letters, digits, `_`)"
            ));
        }
        match lookup(name) {
            Some(found) => out.push_str(&found),
            None => {
                return Err(format!(
                    "uses `${{{reference}}}` in `{key}`, but `{name}` is not set in the gateway's environment; set it where the gateway starts (the client's `env` for its entry, or your shell)"
                ))
            }
        }
        rest = &rest[inner_start + close + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Whether one word of a command line names the toolsearch program.
fn names_toolsearch(word: &str, current_exe: Option<&Path>) -> bool {
    let word = word.trim_matches(|c| c == '"' || c == '\'');
    // Both separators, so that a Windows path in a file read on Unix is recognised too.
    let name = word.rsplit(['/', '\\']).next().unwrap_or(word);
    let name = name.strip_suffix(".exe").unwrap_or(name);
    if matches!(name, "toolsearch" | "toolsearch-cli") {
        return true;
    }
    let path = Path::new(word);
    current_exe.is_some_and(|exe| path.is_absolute() && same_file(path, exe))
}

/// Whether two paths name one file (after following links); false when either cannot be read.
fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

fn check_header(name: &str, value: &str) -> Result<(), String> {
    let parsed = http::HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| format!("has header name `{name}`, which is not a valid HTTP header name"))?;
    const RESERVED: [&str; 3] = ["accept", "mcp-session-id", "last-event-id"];
    if RESERVED.contains(&parsed.as_str()) {
        return Err(format!(
            "sets header `{name}`, which the MCP transport manages itself; remove it"
        ));
    }
    http::HeaderValue::from_str(value).map_err(|_| {
        format!("has a value for header `{name}` that is not a valid HTTP header value (no line breaks or control characters)")
    })?;
    Ok(())
}

/// A server entry that names no usable transport; the message says what is wrong with it and
/// what to do (it reads after "server `name`").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidServerEntry(pub String);

/// The `toolSearch` section.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolSearchConfig {
    #[serde(default)]
    pub preset: Preset,
    /// Tool count above which definitions are deferred.
    #[serde(default = "default_threshold")]
    pub threshold: usize,
    /// Cap on tools exposed at once (the `limit` preset's N, and a cap on search results).
    #[serde(default)]
    pub max_tools_limit: Option<usize>,
    /// Minimum normalised score (0..1) a search result must reach.
    #[serde(default)]
    pub search_threshold: Option<f64>,
    #[serde(default)]
    pub tool_selection_order: SelectionOrder,
    /// Tools always sent in full (name patterns: `server:tool`, `server___tool`, `tool`, globs).
    #[serde(default, rename = "never_defer", alias = "neverDefer")]
    pub never_defer: Vec<NamePattern>,
    /// Tools every session sees in full from the start (name patterns).
    #[serde(default)]
    pub pinned: Vec<NamePattern>,
    /// Category per server name.
    #[serde(default)]
    pub categories: BTreeMap<String, String>,
    /// Tags per server name.
    #[serde(default)]
    pub tags: BTreeMap<String, Vec<String>>,
    /// Only these servers are started (names or `*` globs); empty means all.
    #[serde(default)]
    pub selected_servers: Vec<NamePattern>,
    /// Only these tools are exposed (name patterns); empty means all.
    #[serde(default)]
    pub selected_tools: Vec<NamePattern>,
    #[serde(default = "default_separator")]
    pub separator: String,
    #[serde(default)]
    pub debug: bool,
    /// Timeout for a forwarded `tools/call`, in seconds.
    #[serde(default = "default_call_timeout")]
    pub call_timeout_secs: u64,
    /// Large upstream outputs kept out of the context (`[toolSearch.offload]`).
    #[serde(default)]
    pub offload: OffloadConfig,
    /// Serve `search_prompts` and `get_prompt` (the upstreams' prompts and resource templates,
    /// found by what they do). On by default.
    #[serde(default = "default_true")]
    pub search_prompts: bool,
    /// Search by meaning (`[toolSearch.semantic]`).
    #[serde(default)]
    pub semantic: SemanticConfig,
}

/// The `toolSearch.semantic` section: hybrid search with an embedding model in process.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SemanticConfig {
    /// Off: no model is loaded and search is by words only.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// The model's folder (a BERT-style sentence model: `config.json`, `tokenizer.json`,
    /// `model.safetensors`). Default: `TOOLSEARCH_MODEL_DIR`, else the user's cache folder.
    #[serde(default)]
    pub model: Option<std::path::PathBuf>,
    /// Never download the default model when it is missing (search stays keyword-only).
    #[serde(default)]
    pub offline: bool,
}

impl Default for SemanticConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            model: None,
            offline: false,
        }
    }
}

/// The `toolSearch.offload` section: upstream results whose text is larger than `thresholdBytes`
/// are stored per session and replaced by a preview and a handle, read back with the
/// `read_large_output`, `search_large_output` and `query_large_output` tools.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OffloadConfig {
    /// Off: results pass through unchanged and the three tools are not listed.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// A result whose text parts together exceed this many bytes (UTF-8) is offloaded.
    #[serde(default = "default_offload_threshold")]
    pub threshold_bytes: usize,
    /// Bytes of stored outputs one session keeps; the oldest are dropped past it.
    #[serde(default = "default_offload_max_bytes")]
    pub max_bytes_per_session: usize,
    /// Stored outputs one session keeps; the oldest are dropped past it.
    #[serde(default = "default_offload_max_outputs")]
    pub max_outputs_per_session: usize,
    /// Characters of the output's head shown in the preview.
    #[serde(default = "default_offload_preview_chars")]
    pub preview_chars: usize,
    /// Most characters one read, search or query returns.
    #[serde(default = "default_offload_max_read_chars")]
    pub max_read_chars: usize,
}

fn default_true() -> bool {
    true
}
fn default_offload_threshold() -> usize {
    16 * 1024
}
fn default_offload_max_bytes() -> usize {
    16 * 1024 * 1024
}
fn default_offload_max_outputs() -> usize {
    32
}
fn default_offload_preview_chars() -> usize {
    1000
}
fn default_offload_max_read_chars() -> usize {
    12_000
}

impl Default for OffloadConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            threshold_bytes: default_offload_threshold(),
            max_bytes_per_session: default_offload_max_bytes(),
            max_outputs_per_session: default_offload_max_outputs(),
            preview_chars: default_offload_preview_chars(),
            max_read_chars: default_offload_max_read_chars(),
        }
    }
}

fn default_threshold() -> usize {
    15
}
fn default_separator() -> String {
    DEFAULT_SEPARATOR.to_string()
}
fn default_call_timeout() -> u64 {
    60
}

impl Default for ToolSearchConfig {
    fn default() -> Self {
        Self {
            preset: Preset::default(),
            threshold: default_threshold(),
            max_tools_limit: None,
            search_threshold: None,
            tool_selection_order: SelectionOrder::default(),
            never_defer: Vec::new(),
            pinned: Vec::new(),
            categories: BTreeMap::new(),
            tags: BTreeMap::new(),
            selected_servers: Vec::new(),
            selected_tools: Vec::new(),
            separator: default_separator(),
            debug: false,
            call_timeout_secs: default_call_timeout(),
            offload: OffloadConfig::default(),
            search_prompts: true,
            semantic: SemanticConfig::default(),
        }
    }
}

impl ToolSearchConfig {
    pub fn call_timeout(&self) -> Duration {
        Duration::from_secs(self.call_timeout_secs)
    }
}

/// The `supervisor` section: how failing upstreams are restarted.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SupervisorConfig {
    /// Delay before the first restart, in milliseconds; doubles on each failure.
    #[serde(default = "default_initial_backoff_ms")]
    pub initial_backoff_ms: u64,
    /// Cap on the delay between restarts, in milliseconds.
    #[serde(default = "default_max_backoff_ms")]
    pub max_backoff_ms: u64,
    /// Consecutive failed starts after which a server is marked failed and left alone; none = forever.
    #[serde(default)]
    pub max_restarts: Option<u32>,
    /// How long starting a server (spawn or connect, initialize, first tools/list) may take, in seconds.
    #[serde(default = "default_startup_timeout_secs")]
    pub startup_timeout_secs: u64,
}

fn default_initial_backoff_ms() -> u64 {
    500
}
fn default_max_backoff_ms() -> u64 {
    30_000
}
fn default_startup_timeout_secs() -> u64 {
    60
}

impl Default for SupervisorConfig {
    fn default() -> Self {
        Self {
            initial_backoff_ms: default_initial_backoff_ms(),
            max_backoff_ms: default_max_backoff_ms(),
            max_restarts: None,
            startup_timeout_secs: default_startup_timeout_secs(),
        }
    }
}

/// File formats the gateway reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Toml,
    Json,
}

impl Format {
    /// `.toml` is TOML; anything else is JSON (Claude Desktop and Cursor configs are `.json`).
    pub fn from_path(path: &Path) -> Self {
        match path.extension().and_then(|e| e.to_str()) {
            Some(ext) if ext.eq_ignore_ascii_case("toml") => Format::Toml,
            _ => Format::Json,
        }
    }
}

impl GatewayConfig {
    /// The core's disclosure settings from the `toolSearch` section.
    pub fn disclosure_config(&self) -> DisclosureConfig {
        let ts = &self.tool_search;
        let defaults = DisclosureConfig::default();
        DisclosureConfig {
            preset: ts.preset,
            threshold: ts.threshold,
            max_tools_limit: ts.max_tools_limit.unwrap_or(defaults.max_tools_limit),
            tool_selection_order: ts.tool_selection_order,
            // "Server priority" is the order the config lists the servers in.
            server_priority: self
                .active_servers()
                .map(|(name, _)| name.to_string())
                .collect(),
            ..defaults
        }
    }

    /// The engine settings from the `toolSearch` section: the score threshold.
    pub fn search_config(&self) -> SearchConfig {
        let defaults = SearchConfig::default();
        SearchConfig {
            threshold: self
                .tool_search
                .search_threshold
                .map_or(defaults.threshold, |t| t as f32),
            ..defaults
        }
    }

    /// An engine whose servers' tools enter through the config's catalog policy.
    pub fn search_engine(&self) -> toolsearch_core::Result<SearchEngine> {
        SearchEngine::with_policy(self.search_config(), self.catalog_policy())
    }

    /// Reads and checks a config file.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: file.clone(),
            key: String::new(),
            line: None,
            column: None,
            message: format!("cannot read the file: {e}; check the path given with --config"),
        })?;
        let mut config = Self::parse(&text, Format::from_path(path), &file)?;
        config.resolve_paths(path);
        Ok(config)
    }

    /// Parses and checks config text; `file` names it in errors.
    pub fn parse(text: &str, format: Format, file: &str) -> Result<Self, ConfigError> {
        // The top-level keys first, so that a misspelt `mcpServers` is named rather than ignored;
        // text that does not parse at all is left to the full parse below, which says where.
        let top_keys = top_level_keys(text, format);
        if let Some(keys) = &top_keys {
            check_top_level(keys, text, format, file)?;
        }
        let mut config: GatewayConfig = match format {
            Format::Toml => parse_toml(text, file)?,
            Format::Json => parse_json(text, file)?,
        };
        config.validate().map_err(|(key, message)| ConfigError {
            file: file.to_string(),
            key,
            line: None,
            column: None,
            message,
        })?;
        let top_keys = top_keys.unwrap_or_default();
        config.servers_key = top_keys
            .into_iter()
            .find(|key| key == "mcpServers" || key == "servers");
        let withheld: Vec<String> = self_token_vars(&config.rest);
        for (_, server) in &mut config.mcp_servers.0 {
            server.withheld_env.clone_from(&withheld);
        }
        Ok(config)
    }

    /// For a gateway over upstreams: fails when the file has neither `mcpServers` nor `servers`,
    /// which is a misspelt key, an empty file or another program's file: a gateway started
    /// from it would serve no tool and say nothing. An empty `mcpServers` is a choice, and
    /// accepted (`--rest-only` takes any file).
    /// Whether every server that will start finds the variables its `${NAME}` references name:
    /// the first one that does not is an error naming the variable and the key using it.
    pub fn require_environment(&self, file: &Path) -> Result<(), ConfigError> {
        // An entry refused for another reason says so when it is started.
        let servers = self.active_servers().filter(|(_, s)| s.refusal.is_none());
        for (name, server) in servers {
            if let Err(why) = server.transport() {
                return Err(ConfigError {
                    file: file.display().to_string(),
                    key: format!("mcpServers.{name}"),
                    line: None,
                    column: None,
                    message: format!("server `{name}` {}", why.0),
                });
            }
        }
        Ok(())
    }

    pub fn require_servers(&self, file: &Path) -> Result<(), ConfigError> {
        if self.servers_key.is_some() {
            return Ok(());
        }
        Err(ConfigError {
            file: file.display().to_string(),
            key: String::new(),
            line: None,
            column: None,
            message: "has neither `mcpServers` (as Claude Desktop and Cursor write it) nor `servers` (as VS Code writes it), so the gateway has no server to start; list the servers under one of them (see examples/gateway.toml), or serve a catalog file with `--rest-only --catalog FILE`".into(),
        })
    }

    /// Makes each stdio server's working directory absolute against the folder of the config
    /// file `file`: a relative `cwd` is joined to that folder (and created at start when missing),
    /// and an entry without `cwd` runs in that folder, so that relative paths in its arguments
    /// mean paths beside the config whatever folder the gateway was started from. An entry that
    /// would start this gateway again on `file` is marked refused (see
    /// [`ServerConfig::runs_toolsearch`]).
    pub fn resolve_paths(&mut self, file: &Path) {
        let Ok(file) = std::path::absolute(file) else {
            return;
        };
        let Some(folder) = file.parent().map(Path::to_path_buf) else {
            return;
        };
        for (_, server) in &mut self.mcp_servers.0 {
            if !matches!(server.transport_as_written(), Ok(Transport::Stdio { .. })) {
                continue;
            }
            match &server.cwd {
                None => server.cwd = Some(folder.clone()),
                Some(cwd) if cwd.is_relative() => {
                    let joined = folder.join(cwd);
                    server.cwd = Some(std::path::absolute(&joined).unwrap_or(joined));
                    server.create_cwd = true;
                }
                Some(_) => {}
            }
            if server.runs_toolsearch() && server.config_arg_names(&file) {
                server.refusal = Some(format!(
                    "starts this toolsearch gateway again on its own config file ({}), and each copy would start another; remove the entry from that file, or give `--config` a file without it",
                    file.display()
                ));
            }
        }
    }

    /// The servers to start: enabled and selected, in config order.
    pub fn active_servers(&self) -> impl Iterator<Item = (&str, &ServerConfig)> {
        let policy = self.catalog_policy();
        self.mcp_servers
            .iter()
            .filter(move |(name, s)| !s.disabled && policy.server_selected(name))
    }

    /// Whether some server to start is reached over HTTP (and so may ask for sign-in).
    pub fn has_http_servers(&self) -> bool {
        self.active_servers()
            .any(|(_, server)| server.url.is_some())
    }

    /// Every name rule of the config, as the engine applies them when tools arrive.
    pub fn catalog_policy(&self) -> CatalogPolicy {
        let ts = &self.tool_search;
        CatalogPolicy {
            naming: Naming::new(ts.separator.clone()),
            selected_servers: ts.selected_servers.clone(),
            selected_tools: ts.selected_tools.clone(),
            category_defs: self.categories.clone(),
            server_categories: ts.categories.clone(),
            server_tags: ts.tags.clone(),
            never_defer: ts.never_defer.clone(),
            pinned: ts.pinned.clone(),
            always_visible_categories: Vec::new(),
        }
    }

    /// The first problem of the file's values (the key and why), in the order a reader meets them.
    fn validate(&self) -> Result<(), (String, String)> {
        self.validate_tool_search()?;
        self.validate_categories()?;
        self.validate_rest()?;
        self.validate_supervisor()?;
        self.validate_servers()
    }

    fn validate_tool_search(&self) -> Result<(), (String, String)> {
        let ts = &self.tool_search;
        if ts.separator.is_empty() {
            return Err((
                "toolSearch.separator".into(),
                "must not be empty; the default is `___`".into(),
            ));
        }
        if let Some(t) = ts.search_threshold {
            if !(0.0..=1.0).contains(&t) || t.is_nan() {
                return Err((
                    "toolSearch.searchThreshold".into(),
                    format!("is {t}, but must be between 0 and 1 (a normalised score)"),
                ));
            }
        }
        if ts.max_tools_limit == Some(0) {
            return Err((
                "toolSearch.maxToolsLimit".into(),
                "is 0, which would expose no tools; use a positive number or remove the key".into(),
            ));
        }
        if ts.call_timeout_secs == 0 {
            return Err((
                "toolSearch.callTimeoutSecs".into(),
                "is 0; give a timeout in seconds (the default is 60)".into(),
            ));
        }
        validate_offload(&ts.offload)?;
        validate_state(&self.state)?;
        for (section, names) in [
            ("categories", ts.categories.keys().collect::<Vec<_>>()),
            ("tags", ts.tags.keys().collect::<Vec<_>>()),
        ] {
            for name in names {
                if self.mcp_servers.get(name).is_none() {
                    return Err((
                        format!("toolSearch.{section}.{name}"),
                        format!(
                            "names server `{name}`, which is not in mcpServers (servers: {})",
                            list_or_none(&self.mcp_servers.names())
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    fn validate_categories(&self) -> Result<(), (String, String)> {
        let mut ids = std::collections::HashSet::new();
        for (i, def) in self.categories.iter().enumerate() {
            let key = format!("categories[{i}]");
            if def.id.trim().is_empty() {
                return Err((format!("{key}.id"), "must not be empty".into()));
            }
            if !ids.insert(def.id.to_lowercase()) {
                return Err((
                    format!("{key}.id"),
                    format!("category `{}` is defined twice; keep one entry", def.id),
                ));
            }
        }
        Ok(())
    }

    fn validate_rest(&self) -> Result<(), (String, String)> {
        for (i, token) in self.rest.api_tokens.iter().enumerate() {
            if !usable_token(token) {
                return Err((
                    format!("rest.apiTokens[{i}]"),
                    "must be a non-empty token without spaces".into(),
                ));
            }
        }
        for (i, entry) in self.rest.tokens.iter().enumerate() {
            let key = format!("rest.tokens[{i}]");
            match (&entry.token, &entry.token_env) {
                (Some(_), Some(_)) => {
                    return Err((
                        key,
                        "gives both `token` and `tokenEnv`; keep one".into(),
                    ))
                }
                (None, None) => {
                    return Err((
                        key,
                        "needs `token` (the secret) or `tokenEnv` (the environment variable holding it)".into(),
                    ))
                }
                (Some(token), None) if !usable_token(token) => {
                    return Err((
                        format!("{key}.token"),
                        "must be a non-empty token without spaces".into(),
                    ))
                }
                (None, Some(var)) if var.trim().is_empty() || var.contains('=') => {
                    return Err((
                        format!("{key}.tokenEnv"),
                        "must name an environment variable, e.g. `CI_TOOLSEARCH_TOKEN`".into(),
                    ))
                }
                _ => {}
            }
            if entry.tools.as_ref().is_some_and(Vec::is_empty) {
                return Err((
                    format!("{key}.tools"),
                    "is empty, which would allow no tool; list name patterns such as `github:*`, or remove the key to allow every tool".into(),
                ));
            }
        }
        if self.rest.max_body_bytes == 0 {
            return Err((
                "rest.maxBodyBytes".into(),
                "is 0, which would reject every request; the default is 65536".into(),
            ));
        }
        Ok(())
    }

    fn validate_supervisor(&self) -> Result<(), (String, String)> {
        let sup = &self.supervisor;
        if sup.initial_backoff_ms == 0 {
            return Err((
                "supervisor.initialBackoffMs".into(),
                "is 0; a restart loop needs a delay (the default is 500)".into(),
            ));
        }
        if sup.max_backoff_ms < sup.initial_backoff_ms {
            return Err((
                "supervisor.maxBackoffMs".into(),
                format!(
                    "is {} ms, below initialBackoffMs ({} ms); make it at least as large",
                    sup.max_backoff_ms, sup.initial_backoff_ms
                ),
            ));
        }
        if sup.startup_timeout_secs == 0 {
            return Err((
                "supervisor.startupTimeoutSecs".into(),
                "is 0; give a timeout in seconds (the default is 60)".into(),
            ));
        }
        Ok(())
    }

    fn validate_servers(&self) -> Result<(), (String, String)> {
        let ts = &self.tool_search;
        for (name, server) in self.mcp_servers.iter() {
            let key = format!("mcpServers.{name}");
            if name.is_empty() {
                return Err((key, "a server name must not be empty".into()));
            }
            if name.contains(ts.separator.as_str()) {
                return Err((
                    key,
                    format!(
                        "server name `{name}` contains the separator `{}`, so its tools' public names would be ambiguous; rename the server or change toolSearch.separator",
                        ts.separator
                    ),
                ));
            }
            // `x_` + `___` + `tool` reads back as server `x`, tool `_tool`: public names split at
            // the first separator, so a name may not end with the separator's start either.
            let public = format!("{name}{}", ts.separator);
            if public.find(ts.separator.as_str()) != Some(name.len()) {
                return Err((
                    key,
                    format!(
                        "server name `{name}` ends with the start of the separator `{sep}`, so its tools' public names (`{name}{sep}tool`) would split at the wrong place; rename the server or change toolSearch.separator",
                        sep = ts.separator
                    ),
                ));
            }
            if let InheritEnv::Names(names) = &server.inherit_env {
                for (i, var) in names.iter().enumerate() {
                    let stem = var.strip_suffix('*').unwrap_or(var);
                    if stem.is_empty() || var.contains('=') || stem.contains('*') {
                        return Err((
                            format!("{key}.inheritEnv[{i}]"),
                            format!("`{var}` is not a variable name; give names such as `AWS_PROFILE`, or a prefix with a trailing `*` such as `npm_config_*`"),
                        ));
                    }
                    if var.starts_with(GATEWAY_VAR_PREFIX) {
                        return Err((
                            format!("{key}.inheritEnv[{i}]"),
                            format!("names `{var}`, one of the gateway's own variables, which no server inherits; if this server needs it, write it into the entry's `env`"),
                        ));
                    }
                }
            }
            server
                .transport_as_written()
                .map_err(|why| (key, format!("server `{name}` {why}")))?;
        }
        Ok(())
    }
}

fn validate_state(state: &StateConfig) -> Result<(), (String, String)> {
    if let Some(url) = &state.redis {
        if url.starts_with("rediss://") {
            return Err((
                "state.redis".into(),
                "is a TLS URL (`rediss://`), which this build does not speak; reach Redis over a private network or a TLS tunnel (stunnel, a sidecar) with a `redis://` URL".into(),
            ));
        }
        if !url.starts_with("redis://") {
            return Err((
                "state.redis".into(),
                "must be a URL like `redis://127.0.0.1:6379/0` (a password may sit in it: `redis://:secret@host:6379`)".into(),
            ));
        }
    }
    if state.prefix.is_empty() || state.prefix.contains(char::is_whitespace) {
        return Err((
            "state.prefix".into(),
            "must be a non-empty word without spaces; the default is `toolsearch`".into(),
        ));
    }
    for (key, value) in [
        ("state.sessionTtlSecs", state.session_ttl_secs),
        ("state.timeoutMs", state.timeout_ms),
    ] {
        if value == 0 {
            return Err((key.into(), "is 0; give a positive number".into()));
        }
    }
    Ok(())
}

fn validate_offload(o: &OffloadConfig) -> Result<(), (String, String)> {
    let key = |k: &str| format!("toolSearch.offload.{k}");
    if o.threshold_bytes == 0 {
        return Err((
            key("thresholdBytes"),
            "is 0, which would offload every result; the default is 16384 (set enabled = false to turn offloading off)".into(),
        ));
    }
    if o.max_outputs_per_session == 0 {
        return Err((
            key("maxOutputsPerSession"),
            "is 0, which could store nothing; the default is 32".into(),
        ));
    }
    if o.max_bytes_per_session < o.threshold_bytes {
        return Err((
            key("maxBytesPerSession"),
            format!(
                "is {}, below thresholdBytes ({}), so no offloaded output would fit; make it larger",
                o.max_bytes_per_session, o.threshold_bytes
            ),
        ));
    }
    if o.max_read_chars == 0 {
        return Err((
            key("maxReadChars"),
            "is 0, which would make every read empty; the default is 12000".into(),
        ));
    }
    Ok(())
}

/// Variables with this prefix are the gateway's own (`TOOLSEARCH_API_TOKENS`, ...); no upstream
/// inherits them.
pub const GATEWAY_VAR_PREFIX: &str = "TOOLSEARCH_";

/// The variables `[[rest.tokens]]` reads its secrets from; no upstream inherits them.
fn self_token_vars(rest: &RestConfig) -> Vec<String> {
    rest.tokens
        .iter()
        .filter_map(|t| t.token_env.clone())
        .collect()
}

/// The keys the gateway reads at the top level of a file.
const TOP_LEVEL_KEYS: &[&str] = &[
    "mcpServers",
    "servers",
    "toolSearch",
    "supervisor",
    "categories",
    "rest",
    "http",
    "state",
];

/// A key folded for comparison: lower case, without `_` and `-`.
fn folded(key: &str) -> String {
    key.chars()
        .filter(|c| *c != '_' && *c != '-')
        .flat_map(char::to_lowercase)
        .collect()
}

/// The known key `key` most likely misspells, if any: other common names first (`environment`
/// for `env`), then the closest by Jaro-Winkler similarity.
fn did_you_mean<'a>(key: &str, known: &[&'a str]) -> Option<&'a str> {
    const OTHER_NAMES: &[(&str, &str)] = &[
        ("environment", "env"),
        ("enviroment", "env"),
        ("envs", "env"),
        ("arguments", "args"),
        ("argv", "args"),
        ("cmd", "command"),
        ("workingdirectory", "cwd"),
        ("workingdir", "cwd"),
        ("directory", "cwd"),
        ("dir", "cwd"),
        ("endpoint", "url"),
        ("uri", "url"),
        ("httpurl", "url"),
        ("serverurl", "url"),
        ("inheritenvironment", "inheritEnv"),
    ];
    let wanted = folded(key);
    if let Some((_, name)) = OTHER_NAMES.iter().find(|(other, _)| *other == wanted) {
        if let Some(found) = known.iter().find(|k| *k == name) {
            return Some(found);
        }
    }
    known
        .iter()
        .map(|k| (*k, strsim::jaro_winkler(&wanted, &folded(k))))
        .filter(|(_, score)| *score >= 0.8)
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(k, _)| k)
}

/// The top-level keys of a file, or `None` when it does not parse as an object.
fn top_level_keys(text: &str, format: Format) -> Option<Vec<String>> {
    match format {
        Format::Toml => text
            .parse::<toml::Table>()
            .ok()
            .map(|table| table.keys().cloned().collect()),
        Format::Json => serde_json::from_str::<BTreeMap<String, de::IgnoredAny>>(text)
            .ok()
            .map(|map| map.into_keys().collect()),
    }
}

/// The known top-level key `key` misspells: one that differs only in case, `_` or `-`, or a long
/// key (6 letters and more) at most two edits away. Other unknown keys are other clients' own.
fn misspelt_top_level(key: &str) -> Option<&'static str> {
    let wanted = folded(key);
    TOP_LEVEL_KEYS.iter().copied().find(|known| {
        let known = folded(known);
        known == wanted || (known.len() >= 6 && strsim::levenshtein(&known, &wanted) <= 2)
    })
}

/// Where `key` is first written as a top-level key, 1-based.
fn key_position(text: &str, key: &str, format: Format) -> Option<(usize, usize)> {
    let offset = match format {
        Format::Json => text.find(&format!("\"{key}\""))?,
        Format::Toml => {
            let mut offset = 0;
            let mut found = None;
            for line in text.split_inclusive('\n') {
                let start = line.trim_start_matches([' ', '\t', '[']);
                if start.starts_with(key) {
                    found = Some(offset + (line.len() - start.len()));
                    break;
                }
                offset += line.len();
            }
            found?
        }
    };
    Some(line_col(text, offset))
}

fn check_top_level(
    keys: &[String],
    text: &str,
    format: Format,
    file: &str,
) -> Result<(), ConfigError> {
    let error = |key: &str, message: String| {
        let position = key_position(text, key, format);
        ConfigError {
            file: file.to_string(),
            key: key.to_string(),
            line: position.map(|p| p.0),
            column: position.map(|p| p.1),
            message,
        }
    };
    let has = |name: &str| keys.iter().any(|k| k == name);
    if has("mcpServers") && has("servers") {
        return Err(error(
            "servers",
            "is given beside `mcpServers`; both list the servers to start (`servers` is VS Code's name), so keep one".into(),
        ));
    }
    for key in keys {
        if TOP_LEVEL_KEYS.contains(&key.as_str()) {
            continue;
        }
        if let Some(known) = misspelt_top_level(key) {
            return Err(error(
                key,
                format!("unknown top-level key `{key}`; did you mean `{known}`? (other unknown top-level keys are ignored, as other clients write their own)"),
            ));
        }
    }
    Ok(())
}

/// serde's "unknown field `x`, expected one of `a`, `b`" made into a message that says which key
/// was meant; `path` is where the error was found. Returns the error's key and message; other
/// errors pass through unchanged.
fn explain_unknown_key(path: String, message: String) -> (String, String) {
    let Some(rest) = message.strip_prefix("unknown field `") else {
        return (path, message);
    };
    let Some((name, expected)) = rest.split_once('`') else {
        return (path, message);
    };
    let parent = path
        .strip_suffix(name)
        .map(|p| p.trim_end_matches('.'))
        .unwrap_or(&path)
        .to_string();
    let in_server = ["mcpServers.", "servers."]
        .iter()
        .any(|prefix| parent.starts_with(prefix));
    let listed: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
    let known: &[&str] = if in_server { SERVER_KEYS } else { &listed };
    let key = if parent.is_empty() {
        name.to_string()
    } else {
        format!("{parent}.{name}")
    };
    let place = if in_server {
        format!(
            " in server `{}`",
            parent.split_once('.').map_or("", |(_, server)| server)
        )
    } else if parent.is_empty() {
        String::new()
    } else {
        format!(" in `{parent}`")
    };
    let hint = match did_you_mean(name, known) {
        Some(meant) => format!("did you mean `{meant}`?"),
        None if known.is_empty() => "remove it".to_string(),
        None => format!("the keys here are {}", known.join(", ")),
    };
    (key, format!("unknown key `{name}`{place}; {hint}"))
}

fn list_or_none(names: &[String]) -> String {
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

/// 1-based line and column of a byte offset.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before
        .rsplit_once('\n')
        .map_or(before, |(_, rest)| rest)
        .chars()
        .count()
        + 1;
    (line, column)
}

fn path_string(path: &serde_path_to_error::Path) -> String {
    let s = path.to_string();
    if s == "." {
        String::new()
    } else {
        s
    }
}

fn parse_toml(text: &str, file: &str) -> Result<GatewayConfig, ConfigError> {
    let toml_error = |e: &toml::de::Error, key: String| {
        let (line, column) = match e.span() {
            Some(span) => {
                let (l, c) = line_col(text, span.start);
                (Some(l), Some(c))
            }
            None => (None, None),
        };
        let (key, message) = explain_unknown_key(key, e.message().trim().to_string());
        ConfigError {
            file: file.to_string(),
            key,
            line,
            column,
            message,
        }
    };
    let de = toml::Deserializer::parse(text).map_err(|e| toml_error(&e, String::new()))?;
    serde_path_to_error::deserialize(de).map_err(|e| toml_error(e.inner(), path_string(e.path())))
}

fn parse_json(text: &str, file: &str) -> Result<GatewayConfig, ConfigError> {
    let mut de = serde_json::Deserializer::from_str(text);
    let config: GatewayConfig =
        serde_path_to_error::deserialize(&mut de).map_err(|e| json_error(&e, file))?;
    de.end().map_err(|e| ConfigError {
        file: file.to_string(),
        key: String::new(),
        line: Some(e.line()),
        column: Some(e.column().max(1)),
        message: format!("{e}; the file must hold one JSON object"),
    })?;
    Ok(config)
}

fn json_error(e: &serde_path_to_error::Error<serde_json::Error>, file: &str) -> ConfigError {
    let inner = e.inner();
    // serde_json appends " at line L column C" to its messages; the position is reported apart.
    let raw = inner.to_string();
    let message = match raw.rfind(" at line ") {
        Some(i) => raw[..i].to_string(),
        None => raw,
    };
    let (key, message) = explain_unknown_key(path_string(e.path()), message);
    ConfigError {
        file: file.to_string(),
        key,
        line: (inner.line() > 0).then_some(inner.line()),
        // serde_json says column 0 before the first character of a line (an empty file).
        column: (inner.line() > 0).then_some(inner.column().max(1)),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_to_the_environment_are_expanded_or_named_when_missing() {
        let env = |name: &str| match name {
            "TOKEN" => Some("s3cret".to_string()),
            "EMPTY" => Some(String::new()),
            _ => None,
        };
        let expand = |value: &str| expand_references(value, "headers.Authorization", env);
        assert_eq!(expand("Bearer ${TOKEN}").unwrap(), "Bearer s3cret");
        assert_eq!(expand("${env:TOKEN}/${TOKEN}").unwrap(), "s3cret/s3cret");
        assert_eq!(expand("a${EMPTY}b").unwrap(), "ab", "set but empty is set");
        assert_eq!(expand("cost: $5, $${TOKEN}").unwrap(), "cost: $5, ${TOKEN}");
        assert_eq!(expand("no references").unwrap(), "no references");
        let missing = expand("Bearer ${GH_TOKEN}").unwrap_err();
        assert!(
            missing.contains("`GH_TOKEN`") && missing.contains("headers.Authorization"),
            "{missing}"
        );
        assert!(!missing.contains("s3cret"));
        assert!(expand("${not a name}")
            .unwrap_err()
            .contains("not a variable reference"));
        assert!(expand("${TOKEN").unwrap_err().contains("closing"));
    }

    fn toml(text: &str) -> Result<GatewayConfig, ConfigError> {
        GatewayConfig::parse(text, Format::Toml, "gateway.toml")
    }
    fn json(text: &str) -> Result<GatewayConfig, ConfigError> {
        GatewayConfig::parse(text, Format::Json, "claude_desktop_config.json")
    }

    /// An entry's `oauth` table: the client registered beforehand, its secret's variable, the
    /// scopes; a misspelt key in it is an error naming it.
    #[test]
    fn an_entry_names_its_oauth_client_and_scopes() {
        let config = toml(
            "[mcpServers.gh]\nurl = \"https://x/mcp\"\noauth = { clientId = \"abc\", clientSecretEnv = \"GH_SECRET\", scopes = [\"repo\"] }\n",
        )
        .unwrap();
        assert_eq!(
            config.mcp_servers.get("gh").unwrap().oauth,
            Some(OAuthSettings {
                client_id: Some("abc".into()),
                client_secret_env: Some("GH_SECRET".into()),
                scopes: vec!["repo".into()],
            })
        );
        let err =
            toml("[mcpServers.gh]\nurl = \"https://x/mcp\"\noauth = { clientID = \"abc\" }\n")
                .unwrap_err();
        assert!(err.to_string().contains("clientID"), "{err}");
    }

    #[test]
    fn unknown_keys_in_a_server_entry_say_what_was_meant() {
        for (text, key, meant, line) in [
            (
                "{\n  \"mcpServers\": {\n    \"fs\": {\"command\": \"npx\", \"arg\": [\"-y\"]}\n  }\n}",
                "mcpServers.fs.arg",
                "`args`",
                3,
            ),
            (
                "{\"mcpServers\": {\"fs\": {\"command\": \"npx\", \"enviroment\": {}}}}",
                "mcpServers.fs.enviroment",
                "`env`",
                1,
            ),
            (
                "{\"servers\": {\"fs\": {\"command\": \"npx\", \"workingDirectory\": \"x\"}}}",
                "servers.fs.workingDirectory",
                "`cwd`",
                1,
            ),
        ] {
            let err = json(text).unwrap_err();
            assert_eq!(err.key, key, "{err}");
            assert!(err.message.contains(&format!("did you mean {meant}?")), "{err}");
            assert!(err.message.contains("in server `fs`"), "{err}");
            assert_eq!(err.line, Some(line), "{err}");
            assert!(err.to_string().contains("claude_desktop_config.json"), "{err}");
        }
        let err = toml("[mcpServers.fs]\ncommand = \"npx\"\nargz = []\n").unwrap_err();
        assert_eq!(err.key, "mcpServers.fs.argz");
        assert_eq!(err.line, Some(3));
        assert!(err.message.contains("did you mean `args`?"), "{err}");
        let err = json(r#"{"mcpServers": {"fs": {"command": "npx", "zzz": 1}}}"#).unwrap_err();
        assert!(
            err.message
                .contains("the keys here are type, command, args"),
            "{err}"
        );
        // Keys other clients write are read and ignored.
        let ok = json(
            r#"{"mcpServers": {"a": {"command": "x", "autoApprove": [], "alwaysAllow": ["t"], "timeout": 60,
                "description": "d", "envFile": "${workspaceFolder}/.env", "transportType": "stdio", "trust": true}}}"#,
        );
        assert!(ok.is_ok(), "{ok:?}");
    }

    #[test]
    fn unknown_keys_in_sections_say_what_was_meant() {
        for (text, key, meant) in [
            (
                "[toolSearch]\nthreshhold = 3\n",
                "toolSearch.threshhold",
                "threshold",
            ),
            ("[rest]\napiToken = []\n", "rest.apiToken", "apiTokens"),
            (
                "[state]\nredis_url = \"redis://h\"\n",
                "state.redis_url",
                "redis",
            ),
            (
                "[supervisor]\nmaxRestart = 3\n",
                "supervisor.maxRestart",
                "maxRestarts",
            ),
        ] {
            let err = toml(text).unwrap_err();
            assert_eq!(err.key, key, "{text}: {err}");
            assert!(
                err.message.contains(&format!("did you mean `{meant}`?")),
                "{text}: {err}"
            );
            assert_eq!(err.line, Some(2), "{text}: {err}");
        }
        let err = json(r#"{"http": {"allowedHost": []}}"#).unwrap_err();
        assert!(err.key.starts_with("http."), "{err}");
        assert!(err.message.contains("did you mean"), "{err}");
    }

    #[test]
    fn top_level_keys_servers_and_typos() {
        // VS Code's file: `servers`, typed entries, `inputs` beside them.
        let config = json(
            r#"{"inputs": [], "servers": {"time": {"type": "stdio", "command": "uvx", "args": ["mcp-server-time"]},
                "remote": {"type": "http", "url": "https://example.com/mcp"}}}"#,
        )
        .unwrap();
        assert_eq!(config.mcp_servers.names(), ["time", "remote"]);
        assert_eq!(config.servers_key.as_deref(), Some("servers"));
        assert!(config.require_servers(Path::new("mcp.json")).is_ok());

        let err = json(
            "{\n  \"globalShortcut\": \"\",\n  \"mcpServer\": {\"a\": {\"command\": \"x\"}}\n}",
        )
        .unwrap_err();
        assert_eq!(err.key, "mcpServer");
        assert_eq!(err.line, Some(3));
        assert!(err.message.contains("did you mean `mcpServers`?"), "{err}");
        for (text, meant) in [
            ("[mcp_servers.a]\ncommand = \"x\"\n", "mcpServers"),
            ("[toolsearch]\npreset = \"search\"\n", "toolSearch"),
            ("[Rest]\napiTokens = []\n", "rest"),
        ] {
            let err = toml(text).unwrap_err();
            assert!(
                err.message.contains(&format!("did you mean `{meant}`?")),
                "{text}: {err}"
            );
            assert_eq!(err.line, Some(1), "{text}: {err}");
        }
        let err = json(r#"{"mcpServers": {}, "servers": {}}"#).unwrap_err();
        assert!(err.message.contains("keep one"), "{err}");

        // Other clients' own top-level keys are tolerated; a file without servers parses (for
        // --rest-only) but cannot start a gateway.
        let config = json(r#"{"globalShortcut": "", "preferences": {"x": 1}}"#).unwrap();
        assert_eq!(config.servers_key, None);
        let err = config
            .require_servers(Path::new("claude_desktop_config.json"))
            .unwrap_err();
        assert!(
            err.message.contains("`mcpServers`") && err.message.contains("`servers`"),
            "{err}"
        );
        assert!(
            err.to_string().contains("claude_desktop_config.json"),
            "{err}"
        );
        let err = json(r#"{"context_servers": {"a": {"command": "x"}}}"#)
            .unwrap()
            .require_servers(Path::new("settings.json"))
            .unwrap_err();
        assert!(err.message.contains("`servers`"), "{err}");
        assert!(toml("")
            .unwrap()
            .require_servers(Path::new("g.toml"))
            .is_err());
        // The gateway's own sections without a server key are refused too; an empty
        // `mcpServers` is accepted.
        assert!(toml("[toolSearch]\npreset = \"search\"\n")
            .unwrap()
            .require_servers(Path::new("g.toml"))
            .is_err());
        assert!(toml("[mcpServers]\n")
            .unwrap()
            .require_servers(Path::new("g.toml"))
            .is_ok());
    }

    #[test]
    fn inherit_env_takes_true_or_names() {
        let config = json(
            r#"{"mcpServers": {"a": {"command": "x", "inheritEnv": true},
                "b": {"command": "x", "inheritEnv": ["AWS_PROFILE", "npm_config_*"]},
                "c": {"command": "x", "inheritEnv": false}, "d": {"command": "x"}},
                "rest": {"tokens": [{"tokenEnv": "CI_TOKEN"}]}}"#,
        )
        .unwrap();
        let inherit = |name: &str| config.mcp_servers.get(name).unwrap().inherit_env.clone();
        assert_eq!(inherit("a"), InheritEnv::All);
        assert_eq!(
            inherit("b"),
            InheritEnv::Names(vec!["AWS_PROFILE".into(), "npm_config_*".into()])
        );
        assert_eq!(inherit("c"), InheritEnv::Defaults);
        assert_eq!(inherit("d"), InheritEnv::Defaults);
        assert_eq!(
            config.mcp_servers.get("a").unwrap().withheld_env,
            ["CI_TOKEN"]
        );
        for (value, says) in [
            (r#"["A=B"]"#, "not a variable name"),
            (r#"["*"]"#, "not a variable name"),
            (r#"["TOOLSEARCH_API_TOKENS"]"#, "`env`"),
            (r#""yes""#, "true"),
        ] {
            let err = json(&format!(
                r#"{{"mcpServers": {{"a": {{"command": "x", "inheritEnv": {value}}}}}}}"#
            ))
            .unwrap_err();
            assert!(err.key.starts_with("mcpServers.a.inheritEnv"), "{err}");
            assert!(err.message.contains(says), "{value}: {err}");
        }
    }

    #[test]
    fn paths_are_taken_from_the_config_files_folder() {
        let dir =
            std::env::temp_dir().join(format!("toolsearch-config-paths-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("gateway.json");
        std::fs::write(
            &file,
            r#"{"mcpServers": {
                "plain": {"command": "x", "args": ["."]},
                "relative": {"command": "x", "cwd": "./files"},
                "absolute": {"command": "x", "cwd": "/tmp"},
                "remote": {"url": "http://127.0.0.1:1/mcp"},
                "itself": {"command": "toolsearch", "args": ["serve", "--stdio", "--config", "gateway.json"]},
                "itself-abs": {"command": "/opt/bin/toolsearch", "args": ["serve", "--config=../gateway.json"], "cwd": "files"},
                "other": {"command": "toolsearch", "args": ["serve", "--config", "other.json"]}
            }}"#,
        )
        .unwrap();
        std::fs::write(dir.join("other.json"), "{}").unwrap();
        std::fs::create_dir_all(dir.join("files")).unwrap();
        let config = GatewayConfig::load(&file).unwrap();
        let server = |name: &str| config.mcp_servers.get(name).unwrap();
        assert_eq!(server("plain").cwd.as_deref(), Some(dir.as_path()));
        assert!(!server("plain").create_cwd);
        assert_eq!(server("relative").cwd, Some(dir.join("files")));
        assert!(server("relative").create_cwd);
        assert_eq!(server("absolute").cwd, Some(PathBuf::from("/tmp")));
        assert_eq!(server("remote").cwd, None);
        for name in ["itself", "itself-abs"] {
            let why = server(name).transport().unwrap_err().to_string();
            assert!(why.contains("own config file"), "{name}: {why}");
        }
        assert!(server("other").transport().is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_entry_that_starts_a_gateway_is_recognised() {
        let entry = |command: &str, args: &[&str]| ServerConfig {
            command: Some(command.into()),
            args: args.iter().map(|a| a.to_string()).collect(),
            ..ServerConfig::default()
        };
        for (command, args) in [
            (
                "toolsearch",
                &["serve", "--stdio", "--config", "a.json"][..],
            ),
            (
                "/usr/local/bin/toolsearch",
                &["--log", "debug", "serve"][..],
            ),
            ("C:\\bin\\toolsearch.exe", &["serve"][..]),
            (
                "cargo",
                &["run", "-p", "toolsearch-cli", "--", "serve", "--stdio"][..],
            ),
            ("sh", &["-c", "exec toolsearch serve --stdio"][..]),
            ("env", &["FOO=1", "toolsearch", "serve"][..]),
        ] {
            assert!(entry(command, args).runs_toolsearch(), "{command} {args:?}");
        }
        let exe = std::env::current_exe().unwrap();
        assert!(entry(&exe.display().to_string(), &["serve"]).runs_toolsearch());
        for (command, args) in [
            ("toolsearch", &["search", "--catalog", "x.json"][..]),
            (
                "npx",
                &["-y", "@modelcontextprotocol/server-everything"][..],
            ),
            ("serve", &["toolsearch"][..]),
            ("mytoolsearch", &["serve"][..]),
        ] {
            assert!(
                !entry(command, args).runs_toolsearch(),
                "{command} {args:?}"
            );
        }
        assert!(!ServerConfig::default().runs_toolsearch());
    }

    #[test]
    fn the_state_section_names_redis_and_is_checked() {
        let config = toml("[state]\nredis = \"redis://:pw@10.0.0.5:6379/0\"\n").unwrap();
        assert_eq!(
            config.state.redis.as_deref(),
            Some("redis://:pw@10.0.0.5:6379/0")
        );
        assert_eq!(config.state.prefix, "toolsearch");
        assert_eq!(config.state.session_ttl_secs, 3600);
        assert_eq!(toml("").unwrap().state.redis, None);
        for (text, key, says) in [
            (
                "[state]\nredis = \"10.0.0.5:6379\"",
                "state.redis",
                "redis://",
            ),
            ("[state]\nredis = \"rediss://h:6379\"", "state.redis", "TLS"),
            (
                "[state]\nprefix = \"a b\"",
                "state.prefix",
                "without spaces",
            ),
            ("[state]\ntimeoutMs = 0", "state.timeoutMs", "positive"),
            ("[state]\nredis = \"redis://h\"\nttl = 5", "ttl", "unknown"),
        ] {
            let error = toml(text).unwrap_err();
            assert!(error.key.contains(key), "{text}: {error}");
            assert!(error.to_string().contains(says), "{text}: {error}");
        }
    }

    #[test]
    fn claude_desktop_config_is_accepted_unchanged() {
        let config = json(
            r#"{
              "globalShortcut": "",
              "mcpServers": {
                "filesystem": {
                  "command": "npx",
                  "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"],
                  "env": {"DEBUG": "1"}
                },
                "remote": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer x"}},
                "typed": {"type": "stdio", "command": "uvx", "args": ["mcp-server-time"], "autoApprove": []}
              }
            }"#,
        )
        .unwrap();
        assert_eq!(
            config.mcp_servers.names(),
            ["filesystem", "remote", "typed"]
        );
        let fs = config.mcp_servers.get("filesystem").unwrap();
        assert_eq!(
            fs.transport().unwrap(),
            Transport::Stdio {
                command: "npx".into(),
                args: vec![
                    "-y".into(),
                    "@modelcontextprotocol/server-filesystem".into(),
                    "/tmp".into()
                ],
                env: [("DEBUG".to_string(), "1".to_string())].into(),
                cwd: None,
                inherit_env: InheritEnv::Defaults,
                withheld_env: Vec::new(),
                create_cwd: false,
            }
        );
        let remote = config
            .mcp_servers
            .get("remote")
            .unwrap()
            .transport()
            .unwrap();
        assert!(
            matches!(remote, Transport::StreamableHttp { ref url, ref headers, .. }
            if url == "https://example.com/mcp" && headers["Authorization"] == "Bearer x")
        );
        assert!(config.mcp_servers.get("typed").is_some());
        assert_eq!(config.tool_search, ToolSearchConfig::default());
        assert_eq!(config.tool_search.separator, "___");
        assert_eq!(config.tool_search.threshold, 15);
        assert_eq!(config.tool_search.call_timeout(), Duration::from_secs(60));
    }

    #[test]
    fn toml_keeps_server_order_and_reads_tool_search() {
        let config = toml(
            r#"
            [mcpServers.zeta]
            command = "z"
            [mcpServers.alpha]
            url = "http://127.0.0.1:1/mcp"
            transport = "streamable-http"
            [toolSearch]
            preset = "limit"
            threshold = 3
            maxToolsLimit = 5
            searchThreshold = 0.4
            toolSelectionOrder = "alphabetical"
            never_defer = ["zeta__a"]
            pinned = ["alpha___b"]
            categories = { zeta = "dev" }
            tags = { alpha = ["web", "net"] }
            selectedTools = ["zeta:*", "alpha:b*"]
            separator = "__"
            debug = true
            callTimeoutSecs = 5
            [supervisor]
            initialBackoffMs = 10
            maxBackoffMs = 20
            maxRestarts = 3
            "#,
        )
        .unwrap();
        assert_eq!(config.mcp_servers.names(), ["zeta", "alpha"]);
        let ts = &config.tool_search;
        assert_eq!(ts.preset, Preset::Limit);
        assert_eq!(ts.max_tools_limit, Some(5));
        assert_eq!(ts.tool_selection_order, SelectionOrder::Alphabetical);
        assert_eq!(ts.categories["zeta"], "dev");
        assert_eq!(ts.tags["alpha"], ["web", "net"]);
        let policy = config.catalog_policy();
        let id = |server: &str, name: &str| toolsearch_core::ToolId::new(server, name);
        assert!(policy.tool_selected(&id("zeta", "anything")));
        assert!(policy.tool_selected(&id("alpha", "beta")));
        assert!(!policy.tool_selected(&id("alpha", "gamma")));
        let never = |server: &str, name: &str| {
            ts.never_defer
                .iter()
                .any(|p| p.matches(&id(server, name), &policy.naming))
        };
        assert!(never("zeta", "a"));
        assert!(!never("alpha", "a"));
        assert_eq!(config.supervisor.max_restarts, Some(3));
        assert!(matches!(
            config.mcp_servers.get("alpha").unwrap().transport(),
            Ok(Transport::StreamableHttp { .. })
        ));
    }

    #[test]
    fn typo_in_tool_search_names_file_key_and_position() {
        let err = toml("[toolSearch]\npreset = \"search\"\nthreshhold = 3\n").unwrap_err();
        assert_eq!(err.file, "gateway.toml");
        assert_eq!(err.line, Some(3));
        assert!(err.message.contains("threshhold"), "{err}");
        let text = err.to_string();
        assert!(
            text.contains("gateway.toml") && text.contains("line 3"),
            "{text}"
        );

        let err = json(r#"{"toolSearch": {"preset": "search", "pinnd": []}}"#).unwrap_err();
        assert!(err.message.contains("pinnd"), "{err}");
        assert_eq!(err.line, Some(1));
    }

    #[test]
    fn bad_value_names_its_key() {
        let err = toml("[toolSearch]\npreset = \"everything\"\n").unwrap_err();
        assert_eq!(err.key, "toolSearch.preset");
        assert_eq!(err.line, Some(2));
        assert!(err.message.contains("everything"), "{err}");

        let err = json("{\n  \"mcpServers\": {\"a\": {\"command\": \"x\", \"args\": \"-y\"}}\n}")
            .unwrap_err();
        assert_eq!(err.key, "mcpServers.a.args");
        assert_eq!(err.line, Some(2));
    }

    #[test]
    fn syntax_errors_carry_line_and_column() {
        let err =
            json("{\n  \"mcpServers\": {\n    \"a\": {\"command\": \"x\",}\n  }\n}").unwrap_err();
        assert_eq!(err.line, Some(3));
        assert!(err.column.is_some());
        let err = toml("[mcpServers.a]\ncommand = \"x\n").unwrap_err();
        assert_eq!(err.line, Some(2));
        assert!(err.to_string().contains("line 2, column"), "{err}");
        // Found by the gateway_config fuzz target: positions are 1-based, an empty file too.
        for text in ["", "\n\n", "{}\n}"] {
            let err = json(text).unwrap_err();
            assert!(err.column.is_some_and(|c| c >= 1), "{text:?}: {err}");
        }
    }

    #[test]
    fn semantic_errors_say_what_to_do() {
        let err = json(r#"{"mcpServers": {"a": {"args": ["x"]}}}"#).unwrap_err();
        assert_eq!(err.key, "mcpServers.a");
        assert!(err.message.contains("neither `command`"), "{err}");

        let sse = json(r#"{"mcpServers": {"a": {"type": "sse", "url": "http://x/sse"}}}"#).unwrap();
        assert!(
            matches!(sse.mcp_servers.get("a").unwrap().transport(), Ok(Transport::Sse { ref url, .. }) if url == "http://x/sse")
        );
        let err = json(r#"{"mcpServers": {"a": {"type": "sse"}}}"#).unwrap_err();
        assert!(err.message.contains("legacy SSE"), "{err}");

        let err = json(r#"{"mcpServers": {"a___b": {"command": "x"}}}"#).unwrap_err();
        assert!(err.message.contains("separator"), "{err}");

        // Found by the gateway_config fuzz target's property that public names split back.
        for (name, separator) in [("x_", "___"), ("x__", "___"), ("xa", "aa")] {
            let err = json(&format!(
                r#"{{"mcpServers": {{"{name}": {{"command": "x"}}}}, "toolSearch": {{"separator": "{separator}"}}}}"#
            ))
            .unwrap_err();
            assert_eq!(err.key, format!("mcpServers.{name}"));
            assert!(err.message.contains("wrong place"), "{err}");
        }
        let ok = json(r#"{"mcpServers": {"_x": {"command": "x"}, "x-": {"command": "x"}}}"#);
        assert!(ok.is_ok(), "{ok:?}");

        let err = json(r#"{"mcpServers": {"a": {"url": "ftp://x"}}}"#).unwrap_err();
        assert!(err.message.contains("http://"), "{err}");

        let err = json(r#"{"mcpServers": {"a": {"url": "http://x", "headers": {"Accept": "y"}}}}"#)
            .unwrap_err();
        assert!(err.message.contains("Accept"), "{err}");

        let err = json(r#"{"toolSearch": {"searchThreshold": 1.5}}"#).unwrap_err();
        assert_eq!(err.key, "toolSearch.searchThreshold");

        let err = json(r#"{"mcpServers": {}, "toolSearch": {"categories": {"ghost": "x"}}}"#)
            .unwrap_err();
        assert_eq!(err.key, "toolSearch.categories.ghost");

        let err =
            json(r#"{"supervisor": {"initialBackoffMs": 100, "maxBackoffMs": 10}}"#).unwrap_err();
        assert_eq!(err.key, "supervisor.maxBackoffMs");

        let err =
            json(r#"{"mcpServers": {"a": {"command": "x"}, "a": {"command": "y"}}}"#).unwrap_err();
        assert!(err.message.contains("twice"), "{err}");
    }

    #[test]
    fn missing_file_is_named() {
        let err = GatewayConfig::load("/nonexistent/gateway.toml").unwrap_err();
        assert_eq!(err.file, "/nonexistent/gateway.toml");
        assert!(err.message.contains("cannot read"), "{err}");
    }

    #[test]
    fn disabled_and_unselected_servers_are_not_active() {
        let config = json(
            r#"{"mcpServers": {"a": {"command": "x"}, "b": {"command": "y", "disabled": true}, "c": {"command": "z"}},
                "toolSearch": {"selectedServers": ["a", "d*"]}}"#,
        )
        .unwrap();
        let active: Vec<_> = config.active_servers().map(|(n, _)| n).collect();
        assert_eq!(active, ["a"]);
    }

    #[test]
    fn categories_and_rest_section() {
        let config = toml(
            r#"
            [[categories]]
            id = "code"
            name = "Code hosting"
            description = "Repositories and issues"
            servers = ["github"]
            tools = ["*:create_issue"]
            [[categories]]
            id = "chat"
            [rest]
            apiTokens = ["s3cret-token"]
            maxBodyBytes = 1024
            "#,
        )
        .unwrap();
        assert_eq!(config.categories.len(), 2);
        assert_eq!(config.categories[0].display_name(), "Code hosting");
        assert_eq!(config.categories[1].display_name(), "chat");
        assert_eq!(config.rest.api_tokens, ["s3cret-token"]);
        assert_eq!(config.rest.max_body_bytes, 1024);
        assert_eq!(RestConfig::default().max_body_bytes, 65536);

        let err = toml("[[categories]]\nid = \"a\"\n[[categories]]\nid = \"A\"\n").unwrap_err();
        assert_eq!(err.key, "categories[1].id");
        let err = toml("[[categories]]\nid = \"a\"\nservrs = []\n").unwrap_err();
        assert!(err.message.contains("servrs"), "{err}");
        let err = toml("[rest]\napiTokens = [\"\"]\n").unwrap_err();
        assert_eq!(err.key, "rest.apiTokens[0]");
        let err = toml("[rest]\napiToken = []\n").unwrap_err();
        assert!(err.message.contains("apiToken"), "{err}");
    }

    #[test]
    fn scoped_tokens() {
        let config = toml(
            r#"
            [[rest.tokens]]
            name = "ci"
            token = "ci-token"
            tools = ["github:*", "fs:read_*"]
            [[rest.tokens]]
            tokenEnv = "SOME_TOKEN"
            "#,
        )
        .unwrap();
        let tokens = &config.rest.tokens;
        assert_eq!(tokens.len(), 2);
        assert_eq!(tokens[0].name.as_deref(), Some("ci"));
        let tools: Vec<&str> = tokens[0]
            .tools
            .iter()
            .flatten()
            .map(NamePattern::as_str)
            .collect();
        assert_eq!(tools, ["github:*", "fs:read_*"]);
        assert_eq!(tokens[1].token_env.as_deref(), Some("SOME_TOKEN"));
        assert!(tokens[1].tools.is_none());
        assert!(
            !format!("{config:?}").contains("ci-token"),
            "a token is never printed"
        );

        let json_config =
            json(r#"{"rest": {"tokens": [{"token": "t", "tools": ["weather:*"]}]}}"#).unwrap();
        assert_eq!(json_config.rest.tokens[0].token.as_deref(), Some("t"));

        for (text, key, says) in [
            (
                "[[rest.tokens]]\ntoken = \"a\"\ntokenEnv = \"B\"\n",
                "rest.tokens[0]",
                "both",
            ),
            (
                "[[rest.tokens]]\nname = \"x\"\n",
                "rest.tokens[0]",
                "tokenEnv",
            ),
            (
                "[[rest.tokens]]\ntoken = \"a b\"\n",
                "rest.tokens[0].token",
                "spaces",
            ),
            (
                "[[rest.tokens]]\ntokenEnv = \" \"\n",
                "rest.tokens[0].tokenEnv",
                "variable",
            ),
            (
                "[[rest.tokens]]\ntoken = \"a\"\ntools = []\n",
                "rest.tokens[0].tools",
                "no tool",
            ),
        ] {
            let err = toml(text).unwrap_err();
            assert_eq!(err.key, key, "{text}: {err}");
            assert!(err.message.contains(says), "{text}: {err}");
        }
        let err = toml("[[rest.tokens]]\ntoken = \"a\"\ntools = [\"a:b:c\"]\n").unwrap_err();
        assert!(err.message.contains("not a name pattern"), "{err}");
        let err = toml("[[rest.tokens]]\ntoken = \"a\"\nscope = []\n").unwrap_err();
        assert!(err.message.contains("scope"), "{err}");
    }

    #[test]
    fn offload_section() {
        assert_eq!(
            ToolSearchConfig::default().offload,
            OffloadConfig::default()
        );
        assert!(OffloadConfig::default().enabled);
        assert_eq!(OffloadConfig::default().threshold_bytes, 16384);
        let config = toml(
            "[toolSearch.offload]\nenabled = false\nthresholdBytes = 100\nmaxBytesPerSession = 1000\nmaxOutputsPerSession = 2\npreviewChars = 10\nmaxReadChars = 50\n",
        )
        .unwrap();
        let o = &config.tool_search.offload;
        assert!(!o.enabled);
        assert_eq!(
            (
                o.threshold_bytes,
                o.max_bytes_per_session,
                o.max_outputs_per_session
            ),
            (100, 1000, 2)
        );
        assert_eq!((o.preview_chars, o.max_read_chars), (10, 50));

        let err = toml("[toolSearch.offload]\nthreshold = 100\n").unwrap_err();
        assert!(err.message.contains("threshold"), "{err}");
        assert_eq!(err.line, Some(2));
        let err = json(r#"{"toolSearch": {"offload": {"thresholdBytes": 0}}}"#).unwrap_err();
        assert_eq!(err.key, "toolSearch.offload.thresholdBytes");
        let err = json(
            r#"{"toolSearch": {"offload": {"thresholdBytes": 100, "maxBytesPerSession": 10}}}"#,
        )
        .unwrap_err();
        assert_eq!(err.key, "toolSearch.offload.maxBytesPerSession");
        let err = json(r#"{"toolSearch": {"offload": {"maxOutputsPerSession": 0}}}"#).unwrap_err();
        assert_eq!(err.key, "toolSearch.offload.maxOutputsPerSession");
    }
}
