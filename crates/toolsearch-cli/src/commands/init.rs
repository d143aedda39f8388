//! `toolsearch init`: writes a gateway config to start from (a starter with two everyday servers,
//! or the servers of a Claude Desktop, Cursor or VS Code MCP file), then prints the entry to paste
//! into the client so that it starts the gateway instead.

use crate::BadInput;
use anyhow::{Context, Result};
use clap::Args;
use serde_json::{json, Map, Value};
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use toolsearch_gateway::config::{Format, GatewayConfig, ServerConfig};

/// The starter's packages, pinned as in examples/gateway.toml so that a start runs what was tried.
const FILESYSTEM_PACKAGE: &str = "@modelcontextprotocol/server-filesystem@2026.8.31";
const MEMORY_PACKAGE: &str = "@modelcontextprotocol/server-memory@2026.8.31";
/// The folder beside the starter config that its filesystem server may read and write.
const SHARED_FOLDER: &str = "files";

#[derive(Args)]
pub struct InitArgs {
    /// Import the servers of an MCP client's file: `claude` (Claude Desktop's file), `cursor`
    /// (~/.cursor/mcp.json), `vscode` (.vscode/mcp.json in this folder), or a file's path. An entry
    /// that runs toolsearch itself is left out. Without --from, a starter config is written.
    #[arg(long, value_name = "CLIENT|FILE")]
    from: Option<String>,
    /// Where to write the config [default: toolsearch/gateway.toml in the user's config folder:
    /// $XDG_CONFIG_HOME, else ~/.config on Linux, ~/Library/Application Support on macOS,
    /// %APPDATA% on Windows]. A `.toml` file is written as TOML, any other as JSON.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Replace the file at the output path if it exists.
    #[arg(long)]
    force: bool,
    /// The client whose entry to print: claude, cursor or vscode [default: the client of --from,
    /// else claude].
    #[arg(long, value_name = "CLIENT", value_parser = parse_client)]
    client: Option<Client>,
}

/// The MCP clients whose files init knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Client {
    Claude,
    Cursor,
    VsCode,
}

impl Client {
    fn from_name(name: &str) -> Option<Self> {
        match name.to_ascii_lowercase().as_str() {
            "claude" | "claude-desktop" => Some(Client::Claude),
            "cursor" => Some(Client::Cursor),
            "vscode" | "vs-code" | "code" => Some(Client::VsCode),
            _ => None,
        }
    }

    fn title(self) -> &'static str {
        match self {
            Client::Claude => "Claude Desktop",
            Client::Cursor => "Cursor",
            Client::VsCode => "VS Code",
        }
    }

    /// The top-level key that holds the client's servers.
    fn servers_key(self) -> &'static str {
        match self {
            Client::VsCode => "servers",
            Client::Claude | Client::Cursor => "mcpServers",
        }
    }

    /// Where the client keeps its MCP servers: Claude Desktop's app folder, Cursor's global
    /// file, and VS Code's workspace file (in `cwd`).
    pub fn config_file(self, os: Os, env: Env, cwd: &Path) -> Option<PathBuf> {
        match self {
            Client::Claude => {
                let folder = match os {
                    Os::Windows => PathBuf::from(non_empty(env("APPDATA"))?),
                    Os::Mac => home(os, env)?.join("Library").join("Application Support"),
                    Os::Linux => xdg_config_home(os, env)?,
                };
                Some(folder.join("Claude").join("claude_desktop_config.json"))
            }
            Client::Cursor => Some(home(os, env)?.join(".cursor").join("mcp.json")),
            Client::VsCode => Some(cwd.join(".vscode").join("mcp.json")),
        }
    }
}

fn parse_client(name: &str) -> Result<Client, String> {
    Client::from_name(name)
        .ok_or_else(|| format!("`{name}` is not a client init knows; use claude, cursor or vscode"))
}

/// The operating system whose folder conventions apply (a parameter, so that every one is tested).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Os {
    /// Linux and the other Unix systems: XDG folders.
    Linux,
    Mac,
    Windows,
}

impl Os {
    pub fn current() -> Self {
        if cfg!(windows) {
            Os::Windows
        } else if cfg!(target_os = "macos") {
            Os::Mac
        } else {
            Os::Linux
        }
    }
}

/// Reads an environment variable (a parameter, so that the path rules are tested without
/// changing the process's environment).
pub type Env<'a> = &'a dyn Fn(&str) -> Option<OsString>;

fn non_empty(value: Option<OsString>) -> Option<OsString> {
    value.filter(|v| !v.is_empty())
}

fn home(os: Os, env: Env) -> Option<PathBuf> {
    let var = if os == Os::Windows {
        "USERPROFILE"
    } else {
        "HOME"
    };
    non_empty(env(var)).map(PathBuf::from)
}

/// `$XDG_CONFIG_HOME`, else `~/.config`.
fn xdg_config_home(os: Os, env: Env) -> Option<PathBuf> {
    match non_empty(env("XDG_CONFIG_HOME")) {
        Some(dir) => Some(PathBuf::from(dir)),
        None => Some(home(os, env)?.join(".config")),
    }
}

/// The default output: `toolsearch/gateway.toml` in the user's config folder, which is
/// `$XDG_CONFIG_HOME` when set (as the model's cache folder follows `$XDG_CACHE_HOME`), else
/// `%APPDATA%` on Windows, `~/Library/Application Support` on macOS and `~/.config` elsewhere.
pub fn default_config_path(os: Os, env: Env) -> Option<PathBuf> {
    let root = match non_empty(env("XDG_CONFIG_HOME")) {
        Some(dir) => PathBuf::from(dir),
        None => match os {
            Os::Windows => PathBuf::from(non_empty(env("APPDATA"))?),
            Os::Mac => home(os, env)?.join("Library").join("Application Support"),
            Os::Linux => home(os, env)?.join(".config"),
        },
    };
    Some(root.join("toolsearch").join("gateway.toml"))
}

/// Where the servers to import come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    pub path: PathBuf,
    /// The client named by `--from`, when a name was given rather than a path.
    pub client: Option<Client>,
}

/// `--from`: a client's name (`claude`, `cursor`, `vscode`) or a file's path, relative to `cwd`.
/// A file that happens to be called `cursor` is reached as `./cursor`.
pub fn resolve_source(from: &str, os: Os, env: Env, cwd: &Path) -> Result<Source, String> {
    match Client::from_name(from) {
        Some(client) => {
            let path = client.config_file(os, env, cwd).ok_or_else(|| {
                format!(
                    "cannot tell where {}'s file is ({} is not set); pass the file's path: --from FILE",
                    client.title(),
                    if os == Os::Windows { "APPDATA or USERPROFILE" } else { "HOME" }
                )
            })?;
            Ok(Source {
                path,
                client: Some(client),
            })
        }
        None => Ok(Source {
            path: cwd.join(from),
            client: None,
        }),
    }
}

pub fn run(args: InitArgs) -> Result<()> {
    let os = Os::current();
    let env = |key: &str| std::env::var_os(key);
    let cwd = std::env::current_dir()
        .context("cannot read the current folder; run toolsearch init from a folder that exists")?;
    let out = match &args.out {
        Some(out) => cwd.join(out),
        None => default_config_path(os, &env).ok_or_else(|| {
            BadInput(
                "cannot tell where the user's config folder is (neither XDG_CONFIG_HOME nor HOME is set); choose the file with --out FILE"
                    .into(),
            )
        })?,
    };
    let out = std::path::absolute(&out).unwrap_or(out);
    if out.exists() && !args.force {
        return Err(exists(&out).into());
    }
    let format = Format::from_path(&out);
    let folder = out
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| cwd.clone());

    let source = match &args.from {
        Some(from) => Some(resolve_source(from, os, &env, &cwd).map_err(BadInput)?),
        None => None,
    };
    let plan = match &source {
        Some(source) => import(source, format)?,
        None => starter(&folder, format),
    };
    // What init writes must be what `serve` reads: the gateway's own parser checks it first.
    if let Err(err) = GatewayConfig::parse(&plan.text, format, &out.display().to_string()) {
        let place = if err.key.is_empty() {
            String::new()
        } else {
            format!(
                "the key `{}`: ",
                err.key.replacen("mcpServers", plan.servers_key, 1)
            )
        };
        return Err(BadInput(format!(
            "cannot import {}: {place}{} (fix it there, then run toolsearch init again)",
            plan.from_label, err.message
        ))
        .into());
    }

    std::fs::create_dir_all(&folder).with_context(|| {
        format!(
            "cannot create the folder {}; choose another place with --out FILE",
            folder.display()
        )
    })?;
    if source.is_none() {
        let shared = folder.join(SHARED_FOLDER);
        std::fs::create_dir_all(&shared).with_context(|| {
            format!(
                "cannot create {}, the filesystem server's folder; choose another place with --out FILE",
                shared.display()
            )
        })?;
    }
    write_file(&folder, &out, &plan.text, args.force)?;

    eprintln!(
        "wrote {} with the servers {}",
        out.display(),
        plan.kept.join(", ")
    );
    if source.is_none() {
        eprintln!(
            "the filesystem server may read and write {} only; add folders to its args to share more",
            folder.join(SHARED_FOLDER).display()
        );
    }
    for (name, why) in &plan.left_out {
        eprintln!("left out `{name}`: {why}");
    }

    let client = args
        .client
        .or(source.as_ref().and_then(|s| s.client))
        .or(plan.detected_client)
        .unwrap_or(Client::Claude);
    // A client's own file was read when importing; otherwise it is where the client keeps it.
    let client_file = match (&args.client, &source) {
        (None, Some(source)) => Some(source.path.clone()),
        _ => client.config_file(os, &env, &cwd),
    };
    let exe = std::env::current_exe()
        .ok()
        .and_then(|exe| std::path::absolute(&exe).ok())
        .unwrap_or_else(|| PathBuf::from("toolsearch"));
    let where_ = match &client_file {
        Some(file) => format!("{}'s file {}", client.title(), file.display()),
        None => format!("{}'s MCP config file", client.title()),
    };
    eprintln!(
        "\nTo use it from {}: add this \"toolsearch\" entry to \"{}\" in {where_}, then restart {}:",
        client.title(),
        client.servers_key(),
        client.title()
    );
    let snippet = serde_json::to_string_pretty(&client_entry(client, &exe, &out))
        .context("cannot print the client's entry")?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{snippet}")
        .and_then(|()| stdout.flush())
        .context("cannot print the client's entry")?;
    drop(stdout);
    if source.is_some() {
        eprintln!(
            "Then remove the servers the gateway now starts ({}) from that file, or each runs twice.",
            plan.kept.join(", ")
        );
    }
    if exe.components().any(|part| part.as_os_str() == "target") {
        eprintln!(
            "note: {} is inside a cargo build folder, which `cargo clean` empties; an installed toolsearch (see the README's Install section) is a steadier command for the client",
            exe.display()
        );
    }
    Ok(())
}

fn exists(out: &Path) -> BadInput {
    BadInput(format!(
        "{} already exists; pass --force to replace it, or --out FILE to write elsewhere",
        out.display()
    ))
}

/// Writes through a temporary file in the same folder, so that a failed write leaves no half file
/// and, without `force`, a file that appeared meanwhile is not replaced. The file is readable by
/// its owner only, as imported entries may carry tokens in `env` or `headers`.
fn write_file(folder: &Path, out: &Path, text: &str, force: bool) -> Result<()> {
    let cannot = || {
        format!(
            "cannot write {}; choose another place with --out FILE",
            out.display()
        )
    };
    let mut file = tempfile::NamedTempFile::new_in(folder).with_context(cannot)?;
    file.write_all(text.as_bytes()).with_context(cannot)?;
    let persisted = if force {
        file.persist(out)
    } else {
        file.persist_noclobber(out)
    };
    match persisted {
        Ok(_) => Ok(()),
        Err(err) if err.error.kind() == std::io::ErrorKind::AlreadyExists => {
            Err(exists(out).into())
        }
        Err(err) => Err(anyhow::Error::new(err.error).context(cannot())),
    }
}

/// The entry that makes a client start this gateway on `config`, in the client's own shape.
pub fn client_entry(client: Client, exe: &Path, config: &Path) -> Value {
    let mut entry = Map::new();
    if client == Client::VsCode {
        entry.insert("type".into(), json!("stdio"));
    }
    entry.insert("command".into(), json!(exe.to_string_lossy()));
    entry.insert(
        "args".into(),
        json!(["serve", "--stdio", "--config", config.to_string_lossy()]),
    );
    json!({ client.servers_key(): { "toolsearch": entry } })
}

/// The config to write, and what to say about it.
struct Plan {
    text: String,
    /// The servers it holds.
    kept: Vec<String>,
    /// Servers of the imported file left out, and why.
    left_out: Vec<(String, String)>,
    /// The imported file's servers key (`mcpServers`, or VS Code's `servers`), to name keys the
    /// way the user's file spells them.
    servers_key: &'static str,
    from_label: String,
    /// The client the imported file's shape points to (VS Code's `servers`).
    detected_client: Option<Client>,
}

fn starter(folder: &Path, format: Format) -> Plan {
    let files = folder.join(SHARED_FOLDER);
    let memory = folder.join("memory.jsonl");
    let text = match format {
        Format::Toml => format!(
            r#"# A toolsearch gateway config, from `toolsearch init`. The gateway starts each server below and
# shows the client search_tools and call_tool over all their tools. Add servers in the same shape
# (the `mcpServers` object of Claude Desktop and Cursor). Run: toolsearch serve --config FILE

[mcpServers.filesystem]
command = "npx"
# The one folder the server may read and write, beside this file; add paths to share more.
args = ["-y", "{FILESYSTEM_PACKAGE}", {files}]

[mcpServers.memory]
command = "npx"
args = ["-y", "{MEMORY_PACKAGE}"]
# The knowledge graph lives beside this file, not in npx's package cache.
env = {{ MEMORY_FILE_PATH = {memory} }}

[toolSearch]
preset = "search"
"#,
            files = toml_string(&files.to_string_lossy()),
            memory = toml_string(&memory.to_string_lossy()),
        ),
        Format::Json => pretty(&json!({
            "mcpServers": {
                "filesystem": {
                    "command": "npx",
                    "args": ["-y", FILESYSTEM_PACKAGE, files.to_string_lossy()],
                },
                "memory": {
                    "command": "npx",
                    "args": ["-y", MEMORY_PACKAGE],
                    "env": {"MEMORY_FILE_PATH": memory.to_string_lossy()},
                },
            },
            "toolSearch": {"preset": "search"},
        })),
    };
    Plan {
        text,
        kept: vec!["filesystem".into(), "memory".into()],
        left_out: Vec::new(),
        servers_key: "mcpServers",
        from_label: "the starter config".into(),
        detected_client: None,
    }
}

fn import(source: &Source, format: Format) -> Result<Plan, BadInput> {
    let path = &source.path;
    let label = match source.client {
        Some(client) => format!("{}'s file {}", client.title(), path.display()),
        None => path.display().to_string(),
    };
    let text = std::fs::read_to_string(path).map_err(|e| {
        BadInput(format!(
            "cannot read {label}: {e}; pass the file's path with --from FILE, or run toolsearch init without --from for a starter config"
        ))
    })?;
    let document: Value = serde_json::from_str(&strip_jsonc(&text)).map_err(|e| {
        BadInput(format!(
            "cannot read {label} as JSON: {e}; fix the file (an MCP client's file is JSON), or pass another with --from FILE"
        ))
    })?;
    let Value::Object(mut document) = document else {
        return Err(BadInput(format!(
            "{label} is not a JSON object; an MCP client's file holds {{\"mcpServers\": {{...}}}} (VS Code: {{\"servers\": {{...}}}})"
        )));
    };
    // Claude Desktop and Cursor say `mcpServers`, VS Code `servers`; other top-level keys
    // (`globalShortcut`, `preferences`, `inputs`) belong to the client and stay out.
    let (servers_key, servers) = match (document.remove("mcpServers"), document.remove("servers")) {
        (Some(servers), _) => ("mcpServers", servers),
        (None, Some(servers)) => ("servers", servers),
        (None, None) => {
            return Err(BadInput(format!(
                "{label} has neither `mcpServers` (Claude Desktop, Cursor) nor `servers` (VS Code); pass the MCP client's file that lists its servers"
            )))
        }
    };
    let Value::Object(servers) = servers else {
        return Err(BadInput(format!(
            "`{servers_key}` in {label} is not an object of server entries; fix the file, or pass another with --from FILE"
        )));
    };

    let mut kept = Vec::new();
    let mut left_out = Vec::new();
    for (name, entry) in servers {
        if !entry.is_object() {
            return Err(BadInput(format!(
                "the entry `{servers_key}.{name}` in {label} is not an object with `command` or `url`; fix it there and run toolsearch init again"
            )));
        }
        // An entry the gateway's parser rejects is kept, so that the check of the whole file
        // below names the key and the fix.
        if let Ok(server) = serde_json::from_value::<ServerConfig>(entry.clone()) {
            if server.runs_toolsearch() {
                left_out.push((
                    name,
                    "it runs toolsearch itself, and a gateway started by the gateway would start its servers again".into(),
                ));
                continue;
            }
            if let Err(why) = server.transport_as_written() {
                left_out.push((
                    name,
                    format!("the gateway cannot start it: it {why}; it stays in the client's file"),
                ));
                continue;
            }
        }
        kept.push((name, entry));
    }
    if kept.is_empty() {
        return Err(BadInput(format!(
            "{label} lists no server to import{}; run toolsearch init without --from for a starter config",
            if left_out.is_empty() {
                String::new()
            } else {
                format!(
                    " (left out: {})",
                    left_out
                        .iter()
                        .map(|(n, why)| format!("`{n}`: {why}"))
                        .collect::<Vec<_>>()
                        .join("; ")
                )
            }
        )));
    }
    let text = match format {
        Format::Toml => toml_document(&path.to_string_lossy(), &left_out, &kept)
            .map_err(|why| BadInput(format!("cannot import {label}: {why}")))?,
        Format::Json => {
            let servers: Map<String, Value> = kept.iter().cloned().collect();
            pretty(&json!({ "mcpServers": servers }))
        }
    };
    Ok(Plan {
        text,
        kept: kept.into_iter().map(|(name, _)| name).collect(),
        left_out,
        servers_key,
        from_label: label,
        detected_client: (servers_key == "servers").then_some(Client::VsCode),
    })
}

fn pretty(value: &Value) -> String {
    // A `Value` built here always serializes.
    let mut text = serde_json::to_string_pretty(value).unwrap_or_default();
    text.push('\n');
    text
}

/// The imported servers as TOML, each entry as written (a `null` value is left out, as the
/// gateway reads a missing key and a null alike).
fn toml_document(
    from: &str,
    left_out: &[(String, String)],
    servers: &[(String, Value)],
) -> Result<String, String> {
    let mut text = format!(
        "# A toolsearch gateway config, from `toolsearch init --from {}`.\n",
        comment_safe(from)
    );
    for (name, why) in left_out {
        text.push_str(&format!(
            "# Left out `{}`: {}.\n",
            comment_safe(name),
            comment_safe(why)
        ));
    }
    text.push_str("# Run: toolsearch serve --config FILE\n");
    for (name, entry) in servers {
        text.push_str(&format!("\n[mcpServers.{}]\n", toml_key(name)));
        if let Value::Object(fields) = entry {
            for (key, value) in fields {
                if value.is_null() {
                    continue;
                }
                let value = toml_value(value).map_err(|why| {
                    format!("the key `{name}.{key}` {why}; write JSON instead with --out FILE.json")
                })?;
                text.push_str(&format!("{} = {value}\n", toml_key(key)));
            }
        }
    }
    Ok(text)
}

fn toml_value(value: &Value) -> Result<String, String> {
    Ok(match value {
        Value::Null => return Err("holds a null inside a list, which TOML cannot hold".into()),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => toml_string(s),
        Value::Array(items) => {
            let items: Result<Vec<_>, _> = items.iter().map(toml_value).collect();
            format!("[{}]", items?.join(", "))
        }
        Value::Object(fields) => {
            let fields: Result<Vec<_>, String> = fields
                .iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| Ok(format!("{} = {}", toml_key(k), toml_value(v)?)))
                .collect();
            let fields = fields?;
            if fields.is_empty() {
                "{}".into()
            } else {
                format!("{{ {} }}", fields.join(", "))
            }
        }
    })
}

/// A TOML basic string: JSON's string syntax, which TOML shares, except that TOML wants DEL
/// escaped.
fn toml_string(s: &str) -> String {
    serde_json::to_string(s)
        .unwrap_or_default()
        .replace('\u{7f}', "\\u007F")
}

fn toml_key(key: &str) -> String {
    let bare = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if bare {
        key.to_string()
    } else {
        toml_string(key)
    }
}

/// Text for a `#` comment: one line.
fn comment_safe(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// JSON with comments and trailing commas, as VS Code writes its files, made plain JSON. Comments
/// become spaces and newlines, so that a parse error's line and column stay those of the file.
fn strip_jsonc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    let mut in_string = false;
    let mut pending_comma: Option<usize> = None;
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            if c == '\\' {
                if let Some(escaped) = chars.next() {
                    out.push(escaped);
                }
            } else if c == '"' {
                in_string = false;
            }
            continue;
        }
        match c {
            '/' if chars.peek() == Some(&'/') => {
                while let Some(&next) = chars.peek() {
                    if next == '\n' {
                        break;
                    }
                    chars.next();
                    out.push(' ');
                }
                out.push(' ');
            }
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                out.push_str("  ");
                let mut last = ' ';
                for next in chars.by_ref() {
                    out.push(if next == '\n' { '\n' } else { ' ' });
                    if last == '*' && next == '/' {
                        break;
                    }
                    last = next;
                }
            }
            ',' => {
                pending_comma = Some(out.len());
                out.push(',');
            }
            '}' | ']' => {
                if let Some(at) = pending_comma.take() {
                    out.replace_range(at..at + 1, " ");
                }
                out.push(c);
            }
            c if c.is_whitespace() => out.push(c),
            c => {
                pending_comma = None;
                in_string = c == '"';
                out.push(c);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
        let map: HashMap<String, OsString> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        move |key| map.get(key).cloned()
    }

    #[test]
    fn default_output_is_in_the_users_config_folder() {
        let home = env(&[("HOME", "/home/u")]);
        assert_eq!(
            default_config_path(Os::Linux, &home),
            Some(PathBuf::from("/home/u/.config/toolsearch/gateway.toml"))
        );
        assert_eq!(
            default_config_path(Os::Mac, &home),
            Some(PathBuf::from(
                "/home/u/Library/Application Support/toolsearch/gateway.toml"
            ))
        );
        let xdg = env(&[("HOME", "/home/u"), ("XDG_CONFIG_HOME", "/xdg")]);
        assert_eq!(
            default_config_path(Os::Linux, &xdg),
            Some(PathBuf::from("/xdg/toolsearch/gateway.toml"))
        );
        let windows = env(&[
            ("APPDATA", r"C:\Users\u\AppData\Roaming"),
            ("XDG_CONFIG_HOME", ""),
        ]);
        assert_eq!(
            default_config_path(Os::Windows, &windows),
            Some(
                PathBuf::from(r"C:\Users\u\AppData\Roaming")
                    .join("toolsearch")
                    .join("gateway.toml")
            )
        );
        assert_eq!(default_config_path(Os::Linux, &env(&[("HOME", "")])), None);
        assert_eq!(default_config_path(Os::Windows, &env(&[])), None);
    }

    #[test]
    fn clients_files_are_where_each_client_keeps_them() {
        let cwd = Path::new("/work/project");
        let home = env(&[("HOME", "/home/u")]);
        let claude =
            |os, vars: &dyn Fn(&str) -> Option<OsString>| Client::Claude.config_file(os, vars, cwd);
        assert_eq!(
            claude(Os::Linux, &home),
            Some(PathBuf::from(
                "/home/u/.config/Claude/claude_desktop_config.json"
            ))
        );
        assert_eq!(
            claude(
                Os::Linux,
                &env(&[("HOME", "/home/u"), ("XDG_CONFIG_HOME", "/xdg")])
            ),
            Some(PathBuf::from("/xdg/Claude/claude_desktop_config.json"))
        );
        assert_eq!(
            claude(Os::Mac, &home),
            Some(PathBuf::from(
                "/home/u/Library/Application Support/Claude/claude_desktop_config.json"
            ))
        );
        let appdata = r"C:\Users\u\AppData\Roaming";
        assert_eq!(
            claude(
                Os::Windows,
                &env(&[("APPDATA", appdata), ("HOME", "/ignored")])
            ),
            Some(
                PathBuf::from(appdata)
                    .join("Claude")
                    .join("claude_desktop_config.json")
            )
        );
        assert_eq!(
            Client::Cursor.config_file(Os::Linux, &home, cwd),
            Some(PathBuf::from("/home/u/.cursor/mcp.json"))
        );
        assert_eq!(
            Client::Cursor.config_file(Os::Windows, &env(&[("USERPROFILE", r"C:\Users\u")]), cwd),
            Some(
                PathBuf::from(r"C:\Users\u")
                    .join(".cursor")
                    .join("mcp.json")
            )
        );
        assert_eq!(
            Client::VsCode.config_file(Os::Linux, &env(&[]), cwd),
            Some(PathBuf::from("/work/project/.vscode/mcp.json"))
        );
    }

    #[test]
    fn from_takes_a_client_name_or_a_path() {
        let cwd = Path::new("/work/project");
        let home = env(&[("HOME", "/home/u")]);
        let source = resolve_source("Claude", Os::Linux, &home, cwd).unwrap();
        assert_eq!(source.client, Some(Client::Claude));
        assert_eq!(
            source.path,
            PathBuf::from("/home/u/.config/Claude/claude_desktop_config.json")
        );
        let source = resolve_source("vscode", Os::Linux, &home, cwd).unwrap();
        assert_eq!(source.client, Some(Client::VsCode));
        let source = resolve_source("./cursor", Os::Linux, &home, cwd).unwrap();
        assert_eq!(source.client, None);
        assert_eq!(source.path, cwd.join("./cursor"));
        let source = resolve_source("/etc/mcp.json", Os::Linux, &home, cwd).unwrap();
        assert_eq!(source.path, PathBuf::from("/etc/mcp.json"));
        let err = resolve_source("cursor", Os::Linux, &env(&[]), cwd).unwrap_err();
        assert!(
            err.contains("HOME is not set") && err.contains("--from FILE"),
            "{err}"
        );
    }

    #[test]
    fn the_client_entry_has_the_clients_shape() {
        let exe = Path::new("/opt/bin/toolsearch");
        let config = Path::new("/home/u/.config/toolsearch/gateway.toml");
        let args = json!([
            "serve",
            "--stdio",
            "--config",
            "/home/u/.config/toolsearch/gateway.toml"
        ]);
        assert_eq!(
            client_entry(Client::Claude, exe, config),
            json!({"mcpServers": {"toolsearch": {"command": "/opt/bin/toolsearch", "args": args}}})
        );
        assert_eq!(
            client_entry(Client::VsCode, exe, config),
            json!({"servers": {"toolsearch": {"type": "stdio", "command": "/opt/bin/toolsearch", "args": args}}})
        );
    }

    #[test]
    fn comments_and_trailing_commas_are_dropped_but_not_inside_strings() {
        let text =
            "{\n  // a comment\n  \"a\": \"x // y, /* z */\", /* b */\n  \"b\": [1, 2,],\n}\n";
        let value: Value = serde_json::from_str(&strip_jsonc(text)).unwrap();
        assert_eq!(value, json!({"a": "x // y, /* z */", "b": [1, 2]}));
        assert_eq!(strip_jsonc(text).lines().count(), text.lines().count());
        let escaped = r#"{"a": "quote \" // not a comment"}"#;
        assert_eq!(strip_jsonc(escaped), escaped);
    }

    #[test]
    fn imported_entries_are_written_as_toml_the_gateway_reads() {
        let servers = vec![
            (
                "my server".to_string(),
                json!({"command": "npx", "args": ["-y", "pkg", "a \"quoted\"\tpath"],
                       "env": {"API_KEY": "k", "odd key": "v"}, "cwd": null, "disabled": false}),
            ),
            (
                "remote".to_string(),
                json!({"url": "https://example.com/mcp", "headers": {}}),
            ),
        ];
        let left_out = [("toolsearch".to_string(), "it runs toolsearch".to_string())];
        let text = toml_document("x.json", &left_out, &servers).unwrap();
        let config = GatewayConfig::parse(&text, Format::Toml, "out.toml").unwrap();
        let server = config.mcp_servers.get("my server").unwrap();
        assert_eq!(server.args, ["-y", "pkg", "a \"quoted\"\tpath"]);
        assert_eq!(server.env.get("odd key").map(String::as_str), Some("v"));
        assert_eq!(config.mcp_servers.names(), ["my server", "remote"]);
        assert!(
            text.contains("# Left out `toolsearch`: it runs toolsearch."),
            "{text}"
        );

        let err =
            toml_document("x.json", &[], &[("a".into(), json!({"args": [null]}))]).unwrap_err();
        assert!(err.contains("--out FILE.json"), "{err}");
    }

    #[test]
    fn the_starter_is_a_config_the_gateway_reads() {
        for format in [Format::Toml, Format::Json] {
            let plan = starter(Path::new("/home/u/.config/toolsearch"), format);
            let config = GatewayConfig::parse(&plan.text, format, "starter").unwrap();
            assert_eq!(config.mcp_servers.names(), ["filesystem", "memory"]);
            let fs = config.mcp_servers.get("filesystem").unwrap();
            assert_eq!(
                fs.args.last().map(String::as_str),
                Some("/home/u/.config/toolsearch/files")
            );
        }
    }
}
