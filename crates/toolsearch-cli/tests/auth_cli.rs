//! Sign-in to an OAuth-protected upstream, against the official TypeScript SDK's example server
//! and its authorization server (an in-memory provider that approves at once): the gateway says
//! the server needs sign-in; `toolsearch auth login` discovers, registers, and finishes when the
//! browser (here, the test following the redirect) comes back; the running gateway then joins
//! the server by itself, lists and calls its tools; a gateway started afresh uses the stored
//! tokens; `auth status` and `auth logout` say and undo it. No token reaches the log, `/metrics`
//! or the console. (The example provider cannot refresh a token, so renewal is not exercised
//! here.)

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::peers::{self, toolsearch};

/// A GET over a fresh connection to `url` (http://host:port/path), its redirect not followed:
/// the status and the `Location` header.
fn get(url: &str) -> (u16, Option<String>) {
    let rest = url.strip_prefix("http://").unwrap();
    let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let addr = host.replace("localhost", "127.0.0.1");
    let mut stream = TcpStream::connect(&addr).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response.split_whitespace().nth(1).unwrap().parse().unwrap();
    let location = response
        .lines()
        .take_while(|line| !line.is_empty())
        .find_map(|line| {
            line.split_once(':')
                .filter(|(name, _)| name.eq_ignore_ascii_case("location"))
                .map(|(_, value)| value.trim().to_string())
        });
    (status, location)
}

/// A running `toolsearch auth login SERVER --no-browser` (with `extra` arguments), its stdin
/// piped or closed: the process, the rest of what it prints, and the page it said to open.
struct Login {
    process: std::process::Child,
    said: std::io::Lines<BufReader<std::process::ChildStdout>>,
    page: String,
}

impl Login {
    fn start(
        home: &std::path::Path,
        config: &std::path::Path,
        server: &str,
        extra: &[&str],
        stdin: Stdio,
    ) -> Self {
        Self::start_with(home, &[], config, server, extra, stdin)
    }

    /// [`start`](Self::start) with `envs` set too.
    fn start_with(
        home: &std::path::Path,
        envs: &[(&str, &str)],
        config: &std::path::Path,
        server: &str,
        extra: &[&str],
        stdin: Stdio,
    ) -> Self {
        let mut process = toolsearch()
            .env("XDG_CONFIG_HOME", home)
            .envs(envs.iter().copied())
            .args(["auth", "login", server, "--no-browser"])
            .args(extra)
            .arg("--config")
            .arg(config)
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut said = BufReader::new(process.stdout.take().unwrap()).lines();
        let page = said
            .by_ref()
            .map_while(Result::ok)
            .find_map(|line| {
                line.trim()
                    .starts_with("http")
                    .then(|| line.trim().to_string())
            })
            .expect("the login prints the page to sign in on");
        Self {
            process,
            said,
            page,
        }
    }

    /// Waits for the end: whether it succeeded, and what it printed after the page.
    fn finish(mut self) -> (bool, String) {
        let rest: Vec<String> = self.said.by_ref().map_while(Result::ok).collect();
        let mut errors = String::new();
        if let Some(mut stderr) = self.process.stderr.take() {
            stderr.read_to_string(&mut errors).unwrap();
        }
        let ok = self.process.wait().unwrap().success();
        (ok, format!("{}\n{errors}", rest.join("\n")))
    }
}

/// `toolsearch serve --config CONFIG` on a free port for the user whose config folder is `home`
/// (so its sign-ins), logging at info, after the upstreams' first starts when
/// `wait_for_upstreams`.
fn serve_as(
    home: &std::path::Path,
    config: &std::path::Path,
    wait_for_upstreams: bool,
) -> peers::Listening {
    serve_with(home, &[], config, wait_for_upstreams)
}

/// [`serve_as`] with `envs` set too.
fn serve_with(
    home: &std::path::Path,
    envs: &[(&str, &str)],
    config: &std::path::Path,
    wait_for_upstreams: bool,
) -> peers::Listening {
    let mut command = toolsearch();
    command
        .env("XDG_CONFIG_HOME", home)
        .envs(envs.iter().copied())
        .env("RUST_LOG", "info")
        .arg("serve");
    if wait_for_upstreams {
        command.arg("--wait-for-upstreams");
    }
    command
        .args(["--http", "127.0.0.1:0", "--config"])
        .arg(config);
    peers::spawn_listening(command)
}

fn upstream(addr: &str, name: &str) -> Value {
    peers::upstream_view(addr, name)
}

/// Waits (at most `secs`) for server `name` of the gateway at `addr` to be in `state`; what the
/// console says of it last.
fn state_within(addr: &str, name: &str, state: &str, secs: u64) -> Value {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let seen = upstream(addr, name);
        if seen["state"] == state || Instant::now() > deadline {
            return seen;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_gateway_signs_in_to_an_oauth_server_and_joins_it() {
    let dir = peers::scratch("auth-cli");
    let (server, _auth_port) = peers::start_sdk_oauth_server();
    let config = dir.file(
        "gateway.toml",
        &format!(
            "[mcpServers.demo]\nurl = \"http://localhost:{}/mcp\"\n\n[supervisor]\ninitialBackoffMs = 50\n",
            server.port
        ),
    );
    let home = dir.join("config-home");
    let auth = |args: &[&str]| {
        let mut command = toolsearch();
        command.env("XDG_CONFIG_HOME", &home).arg("auth").args(args);
        if args[0] == "status" {
            command.arg("--config").arg(&config);
        }
        let out = command.output().unwrap();
        assert!(out.status.success(), "{}", peers::stderr_of(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };

    // Before sign-in: a state that says what to run, not a failure loop.
    let gateway = serve_as(&home, &config, false);
    let before = state_within(&gateway.addr, "demo", "needs_authorization", 30);
    assert_eq!(before["state"], "needs_authorization", "{before}");
    assert!(
        before["lastError"]
            .as_str()
            .unwrap()
            .contains("run `toolsearch auth login demo`"),
        "{before}"
    );
    assert!(auth(&["status"]).contains("demo: not signed in"));
    // A search says it too, so the model can tell the user.
    let report = peers::run_client_at(
        "mcp_client.py",
        &gateway.url,
        &json!([{"op": "call", "name": "search_tools", "arguments": {"query": "greet someone"}}]),
    );
    let not_ready = report["steps"][0]["structured"]["serversNotReady"].to_string();
    assert!(
        not_ready.contains("demo") && not_ready.contains("toolsearch auth login demo"),
        "{not_ready}"
    );

    // Sign in: the test is the browser.
    let login = Login::start(&home, &config, "demo", &[], Stdio::null());
    let page = login.page.clone();
    assert!(
        page.contains("code_challenge_method=S256") && page.contains("resource="),
        "PKCE and the resource parameter: {page}"
    );
    let (status, back) = get(&page);
    assert_eq!(status, 302, "the provider approves at once");
    let back = back.expect("the provider sends the browser back");
    assert!(back.starts_with("http://127.0.0.1:"), "{back}");
    assert_eq!(get(&back).0, 200);
    let (ok, said) = login.finish();
    assert!(ok && said.contains("Signed in to `demo`"), "{said}");
    assert!(auth(&["status"]).contains("demo: signed in"));

    // The tokens: one file, the user's alone; their value never in what the gateway shows.
    let files: Vec<_> = std::fs::read_dir(home.join("toolsearch/auth"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&files[0]).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(&files[0]).unwrap()).unwrap();
    let token = saved["credentials"]["token_response"]["access_token"]
        .as_str()
        .unwrap()
        .to_string();

    // The running gateway joins the server once the tokens exist, without a restart.
    let after = state_within(&gateway.addr, "demo", "ready", 30);
    assert_eq!(after["state"], "ready", "{after}");
    let report = peers::run_client_at(
        "mcp_client.py",
        &gateway.url,
        &json!([
            {"op": "call", "name": "search_tools", "arguments": {"query": "greet someone by name"}},
            {"op": "call", "name": "call_tool", "arguments": {"name": "demo___greet", "arguments": {"name": "Ada"}}}
        ]),
    );
    let steps = report["steps"].as_array().unwrap();
    assert!(
        steps[0]["structured"]["tools"]
            .to_string()
            .contains("demo___greet"),
        "{}",
        steps[0]
    );
    assert!(steps[1].to_string().contains("Hello, Ada!"), "{}", steps[1]);
    let (_, metrics) = peers::http_raw(&gateway.addr, "GET", "/metrics", None, None);
    let (_, console) = peers::http_raw(&gateway.addr, "GET", "/api/console/upstreams", None, None);
    for (what, text) in [
        ("the log", gateway.log()),
        ("/metrics", metrics),
        ("the console", console),
    ] {
        assert!(!text.contains(&token), "{what} holds the access token");
    }
    drop(gateway);

    // A gateway started afresh uses the stored tokens from its first start.
    let restarted = |home: &std::path::Path| serve_as(home, &config, true);
    let again = restarted(&home);
    assert_eq!(upstream(&again.addr, "demo")["state"], "ready");
    drop(again);

    // A token past its end that cannot be renewed (this provider gives no refresh token): the
    // server needs sign-in again, and says so.
    let kept = std::fs::read_to_string(&files[0]).unwrap();
    let mut expired: Value = serde_json::from_str(&kept).unwrap();
    expired["credentials"]["token_received_at"] = json!(1);
    std::fs::write(&files[0], expired.to_string()).unwrap();
    let stale = restarted(&home);
    let state = upstream(&stale.addr, "demo");
    assert_eq!(state["state"], "needs_authorization", "{state}");
    assert!(
        state["lastError"]
            .as_str()
            .unwrap()
            .contains("cannot be renewed; run `toolsearch auth login demo`"),
        "{state}"
    );
    drop(stale);
    std::fs::write(&files[0], kept).unwrap();

    // Signed out: the file is gone, and a new gateway needs sign-in again.
    assert!(auth(&["logout", "demo"]).contains("Signed out of `demo`"));
    assert!(auth(&["status"]).contains("demo: not signed in"));
    assert!(!files[0].exists());
    let signed_out = restarted(&home);
    assert_eq!(
        upstream(&signed_out.addr, "demo")["state"],
        "needs_authorization"
    );
    drop(signed_out);

    // Without a browser on this machine: the page is opened elsewhere, and the address it ends
    // on is pasted into the terminal (the loopback listener never hears from the browser).
    let mut login = Login::start(&home, &config, "demo", &[], Stdio::piped());
    let page = login.page.clone();
    let (_, back) = get(&page);
    let mut stdin = login.process.stdin.take().unwrap();
    writeln!(stdin, "not an address").unwrap();
    writeln!(stdin, "{}", back.unwrap()).unwrap();
    let (ok, said) = login.finish();
    assert!(
        ok && said.contains("That is not the address") && said.contains("Signed in to `demo`"),
        "{said}"
    );
    assert!(auth(&["status"]).contains("demo: signed in"));
}

/// A POST of `body` (JSON) to `url`; the status and the body.
fn post_json(url: &str, body: &Value) -> (u16, Value) {
    let rest = url.strip_prefix("http://").unwrap();
    let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let (status, text) = peers::http_raw(
        &host.replace("localhost", "127.0.0.1"),
        "POST",
        path,
        None,
        Some(&body.to_string()),
    );
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// A service without dynamic registration is reached with the client registered beforehand
/// (`oauth.clientId`): the sign-in page names that client and the sign-in completes; a
/// `clientSecretEnv` that is unset stops the sign-in naming the variable.
#[test]
fn a_configured_client_signs_in_without_registering() {
    let dir = peers::scratch("auth-cli-client");
    let (server, auth_port) = peers::start_sdk_oauth_server();
    let port = peers::free_port();
    let redirect = format!("http://127.0.0.1:{port}/callback");
    // Registered beforehand, as a user does on the service's developer page.
    let (status, client) = post_json(
        &format!("http://localhost:{auth_port}/register"),
        &json!({"redirect_uris": [redirect], "client_name": "registered by hand",
                "token_endpoint_auth_method": "none"}),
    );
    assert_eq!(status, 201, "{client}");
    let client_id = client["client_id"].as_str().unwrap().to_string();
    let config = dir.file(
        "gateway.toml",
        &format!(
            "[mcpServers.demo]\nurl = \"http://localhost:{}/mcp\"\noauth = {{ clientId = \"{client_id}\", scopes = [\"mcp:tools\"] }}\n\n\
             [mcpServers.secret]\nurl = \"http://localhost:{}/mcp\"\noauth = {{ clientId = \"{client_id}\", clientSecretEnv = \"TS_UNSET_CLIENT_SECRET\" }}\n\n\
             [mcpServers.own]\nurl = \"http://localhost:{}/mcp\"\nheaders = {{ Authorization = \"Bearer a-token-of-its-own\" }}\n",
            server.port, server.port, server.port
        ),
    );
    let home = dir.join("config-home");
    let port_arg = port.to_string();
    let login = Login::start(
        &home,
        &config,
        "demo",
        &["--port", &port_arg],
        Stdio::null(),
    );
    let page = login.page.clone();
    assert!(
        page.contains(&format!("client_id={client_id}")) && page.contains("scope=mcp%3Atools"),
        "{page}"
    );
    let (_, back) = get(&page);
    assert_eq!(get(&back.unwrap()).0, 200);
    let (ok, said) = login.finish();
    assert!(ok, "{said}");

    let out = toolsearch()
        .env("XDG_CONFIG_HOME", &home)
        .env_remove("TS_UNSET_CLIENT_SECRET")
        .args(["auth", "login", "secret", "--no-browser", "--config"])
        .arg(&config)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let error = peers::stderr_of(&out);
    assert!(
        error.contains("`TS_UNSET_CLIENT_SECRET`") && error.contains("server `secret`"),
        "{error}"
    );

    // `auth status`: signed in, not signed in, and an entry that sends its own credentials.
    let out = toolsearch()
        .env("XDG_CONFIG_HOME", &home)
        .args(["auth", "status", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let status = String::from_utf8_lossy(&out.stdout);
    assert!(
        status.contains("demo: signed in")
            && status.contains("secret: not signed in")
            && status.contains("own: sends the entry's own `Authorization` header"),
        "{status}"
    );
}

/// The console signs in too: its "sign in" action answers the page to open, the browser comes
/// back to the gateway's own `/oauth/callback`, and the server joins; that address completes a
/// sign-in once, and only one the console started. The console also restarts a server.
#[test]
fn the_console_signs_in_to_a_server_in_the_browser() {
    let dir = peers::scratch("auth-cli-console");
    let (server, _auth_port) = peers::start_sdk_oauth_server();
    let config = dir.file(
        "gateway.toml",
        &format!(
            "[mcpServers.demo]\nurl = \"http://localhost:{}/mcp\"\n",
            server.port
        ),
    );
    let home = dir.join("config-home");
    let gateway = serve_as(&home, &config, true);
    let addr = gateway.addr.clone();
    assert_eq!(upstream(&addr, "demo")["state"], "needs_authorization");

    let (status, answer) = peers::http(
        &addr,
        "POST",
        "/api/console/upstreams/demo/sign-in",
        None,
        None,
    );
    assert_eq!(status, 200, "{answer}");
    let page = answer["page"].as_str().unwrap();
    let callback = format!(
        "http%3A%2F%2F{}%2Foauth%2Fcallback",
        addr.replace(':', "%3A")
    );
    assert!(page.contains(&callback), "{page}");
    // Behind a proxy that ends TLS (and says so), the browser comes back over https.
    let mut stream = TcpStream::connect(&addr).unwrap();
    write!(
        stream,
        "POST /api/console/upstreams/demo/sign-in HTTP/1.1\r\nHost: {addr}\r\nX-Forwarded-Proto: https\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut proxied = String::new();
    stream.read_to_string(&mut proxied).unwrap();
    assert!(
        proxied.contains(&format!("https{}", &callback[4..])),
        "{proxied}"
    );
    let (status, back) = get(page);
    assert_eq!(status, 302);
    let back = back.unwrap();
    let (status, body) = peers::http_raw(
        &addr,
        "GET",
        back.trim_start_matches(&format!("http://{addr}")),
        None,
        None,
    );
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("Signed in to `demo`"), "{body}");
    let ready = state_within(&addr, "demo", "ready", 30);
    assert_eq!(ready["state"], "ready", "{ready}");
    // The same address again, or one the console never gave: nothing to complete.
    let (status, body) = peers::http_raw(
        &addr,
        "GET",
        back.trim_start_matches(&format!("http://{addr}")),
        None,
        None,
    );
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("No sign-in of this console is waiting"),
        "{body}"
    );

    let (status, _) = peers::http_raw(
        &addr,
        "POST",
        "/api/console/upstreams/demo/restart",
        None,
        None,
    );
    assert_eq!(status, 202);
    let (status, body) = peers::http_raw(
        &addr,
        "POST",
        "/api/console/upstreams/nosuch/restart",
        None,
        None,
    );
    assert_eq!(status, 404, "{body}");
}

/// The grants and revocations `oauth_server.py` logged.
fn events(log: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// A sign-in to the Python SDK's authorization server (`oauth_server.py`) whose tokens last
/// `lifetime` seconds, and a gateway over it: the server, its log, the gateway and where tokens
/// are kept.
struct PythonSignIn {
    server: peers::Service,
    log: std::path::PathBuf,
    config: std::path::PathBuf,
    home: std::path::PathBuf,
    gateway: peers::Listening,
    _dir: peers::Scratch,
}

impl PythonSignIn {
    fn start(name: &str, lifetime: u64) -> Self {
        let dir = peers::scratch(name);
        let log = dir.join("grants.jsonl");
        let server = peers::start_python_oauth_server(lifetime, &log);
        let config = dir.file(
            "gateway.toml",
            &format!(
                "[mcpServers.py]\nurl = \"http://localhost:{}/mcp\"\n",
                server.port
            ),
        );
        let home = dir.join("config-home");
        sign_in_by_loopback(&home, &config);
        let gateway = serve_as(&home, &config, true);
        assert_eq!(upstream(&gateway.addr, "py")["state"], "ready");
        Self {
            server,
            log,
            config,
            home,
            gateway,
            _dir: dir,
        }
    }

    fn count(&self, event: &str) -> usize {
        events(&self.log)
            .iter()
            .filter(|e| e["event"] == event)
            .count()
    }

    /// The credentials kept in the user's file.
    fn kept(&self) -> Value {
        let path = std::fs::read_dir(self.home.join("toolsearch/auth"))
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        serde_json::from_str::<Value>(&std::fs::read_to_string(path).unwrap()).unwrap()
            ["credentials"]
            .clone()
    }

    /// Revokes `token` at the server, as the service would on its side.
    fn revoke(&self, token: &str) {
        let form = format!(
            "token={token}&client_id={}&client_secret=",
            self.kept()["client_id"].as_str().unwrap()
        );
        let mut stream = TcpStream::connect(("127.0.0.1", self.server.port)).unwrap();
        write!(
            stream,
            "POST /revoke HTTP/1.1\r\nHost: localhost:{}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{form}",
            self.server.port,
            form.len()
        )
        .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }

    /// Whether a call of `py___greet` through the gateway is served.
    fn greets(&self) -> bool {
        let report = peers::run_client_at(
            "mcp_client.py",
            &self.gateway.url,
            &json!([{"op": "call", "name": "call_tool", "arguments": {"name": "py___greet", "arguments": {"name": "Ada"}}}]),
        );
        report["steps"][0].to_string().contains("Hello, Ada!")
    }

    /// Waits (at most 30 s) for the server's state in the console to be `state`.
    fn wait_for(&self, state: &str) -> Value {
        state_within(&self.gateway.addr, "py", state, 30)
    }
}

/// Signs in to `py` of `config` through the loopback callback, the test as the browser.
fn sign_in_by_loopback(home: &std::path::Path, config: &std::path::Path) {
    let login = Login::start(home, config, "py", &[], Stdio::null());
    let (_, back) = get(&login.page);
    assert_eq!(get(&back.unwrap()).0, 200);
    let (ok, said) = login.finish();
    assert!(ok, "{said}");
}

/// With tokens that last 70 s, the gateway renews the access token with the refresh token a
/// minute before it expires and connects again with it, still serving calls, with no token in
/// its log.
#[test]
fn tokens_are_renewed_before_they_expire() {
    let signed = PythonSignIn::start("auth-cli-renew", 70);
    // The renewal is due 10 s in (70 s less the minute); the wait is for it.
    let deadline = Instant::now() + Duration::from_secs(45);
    while signed.count("refresh_token") == 0 {
        assert!(
            Instant::now() < deadline,
            "no renewal: {:?}",
            events(&signed.log)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    while !signed
        .gateway
        .log()
        .contains("renewing the sign-in's access token")
        || upstream(&signed.gateway.addr, "py")["state"] != "ready"
    {
        assert!(Instant::now() < deadline, "{}", signed.gateway.log());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(signed.greets());
    let renewed = signed.kept()["token_response"]["access_token"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        !signed.gateway.log().contains(&renewed),
        "the log holds a token"
    );
}

/// With tokens that last an hour: the service revokes the access token the gateway holds, the
/// call it refuses makes the gateway connect again, which renews the token, and calls are served
/// again; the service ends the grant, and the server needs sign-in and says so; `auth logout`
/// revokes the tokens at the server (RFC 7009), and a gateway started then needs sign-in.
#[test]
fn revoked_tokens_are_renewed_or_ask_for_sign_in_and_logout_revokes() {
    let signed = PythonSignIn::start("auth-cli-revoke", 3600);
    assert!(signed.greets());
    signed.revoke(
        signed.kept()["token_response"]["access_token"]
            .as_str()
            .unwrap(),
    );
    assert!(!signed.greets(), "the revoked token's call is refused");
    let ready = signed.wait_for("ready");
    assert_eq!(ready["state"], "ready", "{ready}");
    assert!(signed.greets());
    assert_eq!(signed.count("refresh_token"), 1);
    assert!(
        signed
            .gateway
            .log()
            .contains("the sign-in's access token was refused; renewing it"),
        "{}",
        signed.gateway.log()
    );

    let tokens = signed.kept()["token_response"].clone();
    signed.revoke(tokens["refresh_token"].as_str().unwrap());
    signed.revoke(tokens["access_token"].as_str().unwrap());
    assert!(!signed.greets());
    let state = signed.wait_for("needs_authorization");
    assert_eq!(state["state"], "needs_authorization", "{state}");
    assert!(
        state["lastError"]
            .as_str()
            .unwrap()
            .contains("run `toolsearch auth login py`"),
        "{state}"
    );

    // Signed in again, then out: both tokens are revoked at the server.
    sign_in_by_loopback(&signed.home, &signed.config);
    let revoked_before = signed.count("revoked");
    let out = toolsearch()
        .env("XDG_CONFIG_HOME", &signed.home)
        .args(["auth", "logout", "py"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && said.contains("revoked at its authorization server"),
        "{said} {}",
        peers::stderr_of(&out)
    );
    assert_eq!(
        signed.count("revoked"),
        revoked_before + 2,
        "{:?}",
        events(&signed.log)
    );
    let fresh = serve_as(&signed.home, &signed.config, true);
    assert_eq!(upstream(&fresh.addr, "py")["state"], "needs_authorization");
}

/// Every value a Redis on `port` holds, as its keys and the bytes of their values (strings only).
/// Values need not be text (sealed sign-ins, tool vectors shared by replicas): bytes that are not
/// UTF-8 read as U+FFFD, and text in the clear still reads as itself.
fn redis_contents(port: u16) -> String {
    let ask = |commands: &str| {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        write!(stream, "{commands}QUIT\r\n").unwrap();
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).unwrap();
        String::from_utf8_lossy(&answer).into_owned()
    };
    let keys: Vec<String> = ask("KEYS *\r\n")
        .lines()
        .filter(|line| !line.starts_with(['*', '$', '+']))
        .map(str::to_string)
        .collect();
    let gets: String = keys.iter().map(|key| format!("GET {key}\r\n")).collect();
    format!("{}\n{}", keys.join("\n"), ask(&gets))
}

/// Replicas that share sessions through Redis share sign-ins too, sealed with the key in
/// `TOOLSEARCH_TOKEN_KEY`: a sign-in made once (here by `auth login` on another machine's
/// folder) brings every running replica to the server, a replica started later joins it from
/// the start, renewals are the deployment's (one renewal for both replicas; the authorization
/// server's refresh tokens are good for one use), Redis never holds a token in the clear,
/// `auth logout --config` signs every replica out, and a sign-in kept in a folder before moves to
/// Redis. A key too short is refused at start.
#[test]
fn replicas_share_one_sign_in_through_redis_sealed() {
    let dir = peers::scratch("auth-cli-replicas");
    let log = dir.join("grants.jsonl");
    let server = peers::start_python_oauth_server(70, &log);
    let redis = peers::start_redis();
    let config = dir.file(
        "gateway.toml",
        &format!(
            "[mcpServers.py]\nurl = \"http://localhost:{}/mcp\"\n\n[state]\nredis = \"redis://127.0.0.1:{}\"\n",
            server.port, redis.port
        ),
    );
    let key = [(
        "TOOLSEARCH_TOKEN_KEY",
        "a-test-key-that-is-long-enough-0123456789",
    )];
    // Each replica on a machine of its own: no config folder shared.
    let replica = |name: &str, wait: bool| serve_with(&dir.join(name), &key, &config, wait);
    let (one, two) = (replica("one", false), replica("two", false));
    for gateway in [&one, &two] {
        let seen = state_within(&gateway.addr, "py", "needs_authorization", 30);
        assert_eq!(seen["state"], "needs_authorization", "{seen}");
    }

    let elsewhere = dir.join("operator");
    let login = Login::start_with(&elsewhere, &key, &config, "py", &[], Stdio::null());
    let (_, back) = get(&login.page);
    assert_eq!(get(&back.unwrap()).0, 200);
    let (ok, said) = login.finish();
    assert!(ok && said.contains("Redis at redis://127.0.0.1"), "{said}");
    let greets = |gateway: &peers::Listening| {
        peers::run_client_at(
            "mcp_client.py",
            &gateway.url,
            &json!([{"op": "call", "name": "call_tool", "arguments": {"name": "py___greet", "arguments": {"name": "Ada"}}}]),
        )["steps"][0]
            .to_string()
            .contains("Hello, Ada!")
    };
    for gateway in [&one, &two] {
        let seen = state_within(&gateway.addr, "py", "ready", 30);
        assert_eq!(seen["state"], "ready", "{seen}");
        assert!(greets(gateway));
    }

    // One renewal serves both (due 10 s in: 70 s less the minute; the next is 10 s after it).
    let refreshes = || {
        events(&log)
            .iter()
            .filter(|e| e["event"] == "refresh_token")
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(45);
    while refreshes() == 0
        || ![&one, &two]
            .iter()
            .all(|g| g.log().contains("renewing the sign-in's access token"))
    {
        assert!(Instant::now() < deadline, "{:?}", events(&log));
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(refreshes(), 1, "{:?}", events(&log));
    for gateway in [&one, &two] {
        let seen = state_within(&gateway.addr, "py", "ready", 15);
        assert_eq!(seen["state"], "ready", "{seen}");
        assert!(greets(gateway));
    }

    // What Redis holds is sealed; no replica, nor the login, wrote a token file.
    let contents = redis_contents(redis.port);
    assert!(contents.contains("toolsearch:signin:py-"), "{contents}");
    for event in events(&log) {
        if let Some(token) = event["access"].as_str() {
            assert!(
                !contents.contains(token),
                "Redis holds a token in the clear"
            );
            for gateway in [&one, &two] {
                assert!(!gateway.log().contains(token), "the log holds a token");
            }
        }
    }
    for folder in ["one", "two", "operator"] {
        assert!(
            !dir.join(folder).join("toolsearch/auth").exists(),
            "{folder}"
        );
    }

    // A replica started now is served from its first start.
    let three = replica("three", true);
    assert_eq!(upstream(&three.addr, "py")["state"], "ready");
    drop(three);

    // Signed out for the deployment: a replica started then needs sign-in again.
    let out = toolsearch()
        .env("XDG_CONFIG_HOME", &elsewhere)
        .envs(key)
        .args(["auth", "logout", "py", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && said.contains("revoked"), "{said}");
    assert!(!redis_contents(redis.port).contains("toolsearch:signin:py-"));
    let four = replica("four", true);
    assert_eq!(upstream(&four.addr, "py")["state"], "needs_authorization");
    drop(four);

    // A sign-in made in a folder before sharing (no key then) moves to Redis on first use.
    let login = Login::start(&elsewhere, &config, "py", &[], Stdio::null());
    let (_, back) = get(&login.page);
    assert_eq!(get(&back.unwrap()).0, 200);
    assert!(login.finish().0);
    let kept_before = elsewhere.join("toolsearch/auth");
    assert_eq!(std::fs::read_dir(&kept_before).unwrap().count(), 1);
    let moved = serve_with(&elsewhere, &key, &config, true);
    assert_eq!(upstream(&moved.addr, "py")["state"], "ready");
    assert_eq!(std::fs::read_dir(&kept_before).unwrap().count(), 0);
    assert!(redis_contents(redis.port).contains("toolsearch:signin:py-"));
    drop(moved);

    // Without the key, the status says sign-ins are per replica; with one too short, the
    // gateway does not start.
    let out = toolsearch()
        .env("XDG_CONFIG_HOME", &elsewhere)
        .env_remove("TOOLSEARCH_TOKEN_KEY")
        .args(["auth", "status", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let noted = peers::stderr_of(&out);
    assert!(noted.contains("kept per replica"), "{noted}");
    let out = toolsearch()
        .env("XDG_CONFIG_HOME", dir.join("five"))
        .env("TOOLSEARCH_TOKEN_KEY", "short")
        .args(["serve", "--http", "127.0.0.1:0", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let said = peers::stderr_of(&out);
    assert!(
        !out.status.success() && said.contains("TOOLSEARCH_TOKEN_KEY is 5 characters long"),
        "{said}"
    );
}
