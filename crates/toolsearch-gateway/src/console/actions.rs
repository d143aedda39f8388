//! The console's actions on one upstream: restart it, and sign in to it in the browser.
//!
//! A sign-in started here (`POST /api/console/upstreams/{name}/sign-in`, an operator's token)
//! sends the browser to the server's sign-in page and back to this listener's
//! `/oauth/callback`, which needs no token: it completes only a sign-in started here, matched by
//! the page's unguessable `state`, within ten minutes. The tokens go to the same per-user files as
//! `toolsearch auth login` writes, and the server joins as soon as they are there.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use crate::config::Transport;
use crate::gateway::Gateway;
use crate::rest::{ApiError, Grant};
use crate::upstream::sign_in::PendingSignIn;

/// Where the browser comes back to after signing in.
pub const CALLBACK_PATH: &str = "/oauth/callback";

/// How long a started sign-in waits for the browser.
const PENDING_FOR: Duration = Duration::from_secs(600);

/// Sign-ins started from the console at once, at most.
const MAX_PENDING: usize = 16;

/// The console's state: the gateway, and the sign-ins waiting for their browser.
#[derive(Clone)]
pub(super) struct Actions {
    pub gateway: Arc<Gateway>,
    pending: Arc<Mutex<HashMap<String, Pending>>>,
}

struct Pending {
    server: String,
    sign_in: PendingSignIn,
    started: Instant,
}

impl Actions {
    pub fn new(gateway: Arc<Gateway>) -> Self {
        Self {
            gateway,
            pending: Arc::default(),
        }
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, HashMap<String, Pending>> {
        // Every update is one insert or remove.
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn unknown_server(name: &str) -> ApiError {
    ApiError::Rejected {
        status: StatusCode::NOT_FOUND,
        message: format!("no upstream `{name}` in this gateway's config"),
    }
}

/// `POST /api/console/upstreams/{name}/restart`: starts the server again now.
pub(super) async fn restart(
    State(actions): State<Actions>,
    grant: Grant,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    super::require_full_scope(&grant)?;
    actions
        .gateway
        .upstreams()
        .restart_now(&name)
        .map_err(|_| unknown_server(&name))?;
    Ok(StatusCode::ACCEPTED)
}

/// `POST /api/console/upstreams/{name}/sign-in`: `{"page"}`, the page to open in the browser.
pub(super) async fn sign_in(
    State(actions): State<Actions>,
    grant: Grant,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    super::require_full_scope(&grant)?;
    let entry = actions
        .gateway
        .config()
        .mcp_servers
        .get(&name)
        .ok_or_else(|| unknown_server(&name))?;
    let url = match entry.transport() {
        Ok(Transport::StreamableHttp { url, .. } | Transport::Sse { url, .. }) => url,
        _ => {
            return Err(ApiError::BadQuery(format!(
                "`{name}` is not an HTTP server; only HTTP servers sign in"
            )))
        }
    };
    // The address the browser reached the console at (the listener has checked the Host).
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .ok_or_else(|| ApiError::BadQuery("the request has no Host header".into()))?;
    // Behind a proxy that ends TLS, the browser is at https: the proxy says so.
    let scheme = match headers
        .get("x-forwarded-proto")
        .and_then(|h| h.to_str().ok())
    {
        Some(proto) if proto.trim().eq_ignore_ascii_case("https") => "https",
        _ => "http",
    };
    let redirect_uri = format!("{scheme}://{host}{CALLBACK_PATH}");
    let sign_ins = actions.gateway.upstreams().sign_ins();
    let sign_in = PendingSignIn::begin(sign_ins, &name, &url, entry.oauth.as_ref(), &redirect_uri)
        .await
        .map_err(|e| ApiError::BadQuery(e.to_string()))?;
    let page = sign_in.page().to_string();
    let key = sign_in
        .key()
        .ok_or_else(|| ApiError::Internal("the sign-in page carries no state".into()))?;
    let mut pending = actions.pending();
    pending.retain(|_, p| p.started.elapsed() < PENDING_FOR);
    if pending.len() >= MAX_PENDING {
        return Err(ApiError::Rejected {
            status: StatusCode::TOO_MANY_REQUESTS,
            message: format!(
                "{MAX_PENDING} sign-ins are already waiting for their browser; finish one, or wait ten minutes"
            ),
        });
    }
    pending.insert(
        key,
        Pending {
            server: name,
            sign_in,
            started: Instant::now(),
        },
    );
    Ok(Json(json!({ "page": page })))
}

/// `GET /oauth/callback?code=&state=`: the browser back from the sign-in page.
pub(super) async fn callback(
    State(actions): State<Actions>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let page = |status: StatusCode, text: String| {
        let body = format!(
            "<!doctype html><meta charset=\"utf-8\"><title>toolsearch</title><p>{}</p>",
            text.replace('&', "&amp;").replace('<', "&lt;")
        );
        (status, Html(body)).into_response()
    };
    let Some(key) = query.get("state") else {
        return page(
            StatusCode::BAD_REQUEST,
            "This address is where a sign-in started from the toolsearch console comes back; it was reached without one.".into(),
        );
    };
    let pending = actions.pending().remove(key);
    let Some(pending) = pending.filter(|p| p.started.elapsed() < PENDING_FOR) else {
        return page(
            StatusCode::BAD_REQUEST,
            "No sign-in of this console is waiting for this page (it finished, expired after ten minutes, or was started elsewhere); start it again from the console.".into(),
        );
    };
    if let Some(error) = query.get("error") {
        return page(
            StatusCode::BAD_REQUEST,
            format!(
                "The sign-in to `{}` was refused ({error}); start it again from the console.",
                pending.server
            ),
        );
    }
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("localhost");
    let query: String = query
        .iter()
        .map(|(k, v)| format!("{}={}", urlencode(k), urlencode(v)))
        .collect::<Vec<_>>()
        .join("&");
    let redirected = format!("http://{host}{CALLBACK_PATH}?{query}");
    match pending.sign_in.finish(&redirected).await {
        Ok(()) => page(
            StatusCode::OK,
            format!(
                "Signed in to `{}`. It joins the gateway in a moment; you can close this page.",
                pending.server
            ),
        ),
        Err(e) => page(StatusCode::BAD_GATEWAY, e.to_string()),
    }
}

fn urlencode(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes()).collect()
}
