//! `toolsearch auth`: sign in to the OAuth-protected HTTP servers of a gateway config, see which
//! are signed in, and sign out. The flows are the gateway crate's (`upstream::sign_in`); this
//! module is the terminal around them: the page to open, the loopback address the browser comes
//! back to, or the address pasted by hand on a machine without a browser.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use toolsearch_gateway::config::{GatewayConfig, Transport};
use toolsearch_gateway::upstream::sign_in::{self, SignInError, SignInStatus, SignIns, SignedOut};

use crate::bad_input::BadInput;

#[derive(Subcommand)]
pub enum AuthCommand {
    /// Sign in to an HTTP server of the config that asks for OAuth sign-in: prints the page to
    /// sign in on (and opens it when there is a browser), then waits for the browser to come
    /// back to a loopback address, or for the address it ended on to be pasted here.
    Login(LoginArgs),
    /// Which HTTP servers of the config are signed in, and for how long their access tokens last.
    Status(ConfigArgs),
    /// Revoke the tokens kept for a server at its authorization server (when it offers
    /// revocation) and forget them.
    Logout(LogoutArgs),
}

#[derive(Args)]
pub struct ConfigArgs {
    /// The gateway config whose servers to sign in to.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
}

#[derive(Args)]
pub struct LoginArgs {
    /// The server's name in the config's mcpServers.
    server: String,
    #[command(flatten)]
    config: ConfigArgs,
    /// The loopback port the browser is sent back to (0: any free port).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Do not try to open a browser; print the page's address only.
    #[arg(long)]
    no_browser: bool,
}

#[derive(Args)]
pub struct LogoutArgs {
    /// The server's name.
    server: String,
    /// The gateway config, when its `[state] redis` shares sign-ins between replicas (the
    /// sign-in is then removed there too); without it, your own folder's.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
}

pub fn run(command: AuthCommand) -> Result<()> {
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    match command {
        AuthCommand::Login(args) => login(&runtime, args),
        AuthCommand::Status(args) => status(&runtime, &args),
        AuthCommand::Logout(args) => logout(&runtime, &args),
    }
}

/// Where the sign-ins of `config` are kept: shared through Redis when its `[state]` says so
/// and the key is set (a note says when it is not), else the user's folder.
fn sign_ins(runtime: &tokio::runtime::Runtime, config: &GatewayConfig) -> Result<SignIns> {
    if let Some(note) = sign_in::unshared(&config.state) {
        eprintln!("Note: {note}.");
    }
    // Redis is connected lazily, from within the runtime.
    let _entered = runtime.enter();
    Ok(SignIns::from_state(&config.state)?)
}

fn logout(runtime: &tokio::runtime::Runtime, args: &LogoutArgs) -> Result<()> {
    let sign_ins = match &args.config {
        Some(path) => sign_ins(runtime, &load(path)?)?,
        None => SignIns::for_user(),
    };
    let place = sign_ins.place();
    match runtime.block_on(sign_in::sign_out(&sign_ins, &args.server))? {
        SignedOut::NotSignedIn => println!("`{}` was not signed in ({place}).", args.server),
        SignedOut::Revoked => println!(
            "Signed out of `{}`: its tokens were revoked at its authorization server and removed from {place}.",
            args.server,
        ),
        SignedOut::Forgotten(why) => println!(
            "Signed out of `{}`: its tokens were removed from {place}, but not revoked ({why}); end the grant on the service's side if it must end there too.",
            args.server,
        ),
    }
    Ok(())
}

/// The URL of every HTTP server of the config, by name, in the config's order.
fn http_servers(config: &GatewayConfig) -> Vec<(String, Result<String, String>)> {
    config
        .mcp_servers
        .iter()
        .filter_map(|(name, server)| match server.transport() {
            Ok(Transport::StreamableHttp { url, .. } | Transport::Sse { url, .. }) => {
                Some((name.to_string(), Ok(url)))
            }
            Ok(Transport::Stdio { .. }) => None,
            Err(e) => server
                .url
                .is_some()
                .then(|| (name.to_string(), Err(e.to_string()))),
        })
        .collect()
}

fn load(path: &std::path::Path) -> Result<GatewayConfig> {
    GatewayConfig::load(path).map_err(|e| BadInput(e.to_string()).into())
}

fn login(runtime: &tokio::runtime::Runtime, args: LoginArgs) -> Result<()> {
    let config = load(&args.config.config)?;
    let sign_ins = sign_ins(runtime, &config)?;
    let servers = http_servers(&config);
    let settings = config
        .mcp_servers
        .get(&args.server)
        .and_then(|server| server.oauth.clone());
    let url = match servers.iter().find(|(name, _)| *name == args.server) {
        Some((_, Ok(url))) => url.clone(),
        Some((_, Err(problem))) => {
            return Err(BadInput(format!("server `{}` {problem}", args.server)).into())
        }
        None => {
            let names: Vec<&str> = servers.iter().map(|(name, _)| name.as_str()).collect();
            return Err(BadInput(format!(
                "`{}` is not an HTTP server of {}; the HTTP servers there are: {}",
                args.server,
                args.config.config.display(),
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            ))
            .into());
        }
    };
    runtime.block_on(async {
        let listener = TcpListener::bind(("127.0.0.1", args.port))
            .await
            .with_context(|| format!("cannot listen on 127.0.0.1:{}", args.port))?;
        let port = listener.local_addr()?.port();
        let redirect_uri = format!("http://127.0.0.1:{port}/callback");
        let server = args.server.clone();
        let show = |page: &str| {
            println!("Sign in to `{server}` on this page:\n\n  {page}\n");
            println!(
                "Waiting for the browser to come back to {redirect_uri}; on a machine without a \
                 browser, open the page elsewhere and paste here the address it ends on."
            );
            if !args.no_browser {
                open_browser(page);
            }
        };
        sign_in::sign_in(
            &sign_ins,
            &args.server,
            &url,
            settings.as_ref(),
            &redirect_uri,
            show,
            redirected(listener, port),
        )
        .await?;
        anyhow::Ok(())
    })?;
    let (kept, joins) = if sign_ins.is_shared() {
        (
            format!(
                "{}, which every replica of this config reads",
                sign_ins.place()
            ),
            "Running replicas join the server within a second",
        )
    } else {
        (
            format!("{} (readable by you alone)", sign_ins.place()),
            "A running gateway of yours joins the server within a second",
        )
    };
    println!(
        "Signed in to `{}`; its tokens are kept in {kept}. {joins}; one started later uses them \
         from the start.",
        args.server,
    );
    Ok(())
}

/// Opens `page` in the user's browser when the session has a display; silent otherwise.
fn open_browser(page: &str) {
    let opener = if cfg!(target_os = "macos") {
        Some("open")
    } else if std::env::var_os("DISPLAY").is_some() || std::env::var_os("WAYLAND_DISPLAY").is_some()
    {
        Some("xdg-open")
    } else {
        None
    };
    if let Some(opener) = opener {
        let _ = std::process::Command::new(opener)
            .arg(page)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
    }
}

/// The address the browser was sent back to: the first request for `/callback` on `listener`,
/// or a line pasted on stdin holding `code=`, whichever comes first.
async fn redirected(listener: TcpListener, port: u16) -> Result<String, SignInError> {
    let pasted = async {
        let mut lines = BufReader::new(tokio::io::stdin()).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let line = line.trim();
            if line.starts_with("http") && line.contains("code=") {
                return Some(line.to_string());
            }
            if !line.is_empty() {
                println!("That is not the address the sign-in ended on (it holds `code=`); paste that one.");
            }
        }
        None
    };
    let callback = async {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                continue;
            };
            // The request line and headers, read to their end (or 8 KiB), so that nothing the
            // browser sent is left unread when the connection closes (which would reset it).
            let mut request = Vec::with_capacity(1024);
            let mut chunk = [0u8; 1024];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < 8192 {
                match stream.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => request.extend_from_slice(&chunk[..n]),
                }
            }
            let request = String::from_utf8_lossy(&request);
            let target = request
                .lines()
                .next()
                .and_then(|line| line.split_whitespace().nth(1))
                .unwrap_or("/");
            let (status, body) = if target.starts_with("/callback?") {
                ("200 OK", "Signed in. You can close this page.")
            } else {
                ("404 Not Found", "Not the sign-in callback.")
            };
            let reply = format!(
                "HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(reply.as_bytes()).await;
            let _ = stream.shutdown().await;
            if target.starts_with("/callback?") {
                return format!("http://127.0.0.1:{port}{target}");
            }
        }
    };
    tokio::select! {
        url = callback => Ok(url),
        Some(url) = pasted => Ok(url),
    }
}

fn status(runtime: &tokio::runtime::Runtime, args: &ConfigArgs) -> Result<()> {
    let config = load(&args.config)?;
    let sign_ins = sign_ins(runtime, &config)?;
    let servers = http_servers(&config);
    if servers.is_empty() {
        println!(
            "{} has no HTTP servers; stdio servers need no sign-in.",
            args.config.display()
        );
        return Ok(());
    }
    for (name, url) in servers {
        let own_header = config.mcp_servers.get(&name).is_some_and(|entry| {
            entry
                .headers
                .keys()
                .any(|header| header.eq_ignore_ascii_case("authorization"))
        });
        let said = match url {
            Err(problem) => format!("cannot tell: the entry {problem}"),
            Ok(_) if own_header => {
                "sends the entry's own `Authorization` header; no sign-in is used".to_string()
            }
            Ok(url) => match runtime.block_on(sign_ins.status(&name, &url))? {
                SignInStatus::SignedOut => "not signed in".to_string(),
                SignInStatus::OtherUrl { url } => format!(
                    "signed in for another address ({url}), so not used; run `toolsearch auth login {name}`"
                ),
                SignInStatus::SignedIn {
                    expires_in,
                    refreshable,
                } => {
                    let lasts = match expires_in {
                        Some(0) => "the access token has expired".to_string(),
                        Some(secs) if secs < 120 => format!("the access token lasts {secs} more s"),
                        Some(secs) => format!("the access token lasts {} more min", secs.div_ceil(60)),
                        None => "the access token gave no expiry".to_string(),
                    };
                    let renew = if refreshable {
                        "renewed when it runs out"
                    } else {
                        "sign in again when it runs out"
                    };
                    format!("signed in; {lasts}, {renew}")
                }
            },
        };
        println!("{name}: {said}");
    }
    Ok(())
}
