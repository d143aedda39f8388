//! The JSON body extractor: every way a body can be wrong becomes an [`ApiError`], so clients always
//! get `{"error": {"code", "message"}}` rather than axum's plain-text rejections.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::header::CONTENT_TYPE;
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

use super::error::ApiError;
use super::listener::BodyReadTimeout;
use super::RestState;

/// A JSON request body. An empty body reads as `{}` whatever its content type, so endpoints without
/// required fields can be called with a bare POST.
pub struct ApiJson<T>(pub T);

fn is_json(content_type: &str) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

impl<T: DeserializeOwned> FromRequest<RestState> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &RestState) -> Result<Self, ApiError> {
        let content_type = request
            .headers()
            .get(CONTENT_TYPE)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        let bytes = Bytes::from_request(request, state)
            .await
            .map_err(|rejection| {
                let status = rejection.status();
                if let Some(timeout) = body_timeout(&rejection) {
                    ApiError::BodyTimeout(timeout.to_string())
                } else if status == StatusCode::PAYLOAD_TOO_LARGE {
                    ApiError::PayloadTooLarge {
                        limit: state.max_body_bytes,
                    }
                } else {
                    ApiError::Rejected {
                        status,
                        message: rejection.body_text(),
                    }
                }
            })?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return serde_json::from_slice(b"{}")
                .map(ApiJson)
                .map_err(|e| classify(&e));
        }
        match content_type.as_deref() {
            Some(ct) if is_json(ct) => {}
            other => {
                return Err(ApiError::UnsupportedMediaType {
                    got: other.map_or_else(|| "no Content-Type".into(), |ct| format!("`{ct}`")),
                })
            }
        }
        serde_json::from_slice(&bytes)
            .map(ApiJson)
            .map_err(|e| classify(&e))
    }
}

/// The listener's body deadline, when that is why the body could not be read.
fn body_timeout<'a>(
    rejection: &'a (dyn std::error::Error + 'static),
) -> Option<&'a BodyReadTimeout> {
    let mut error = Some(rejection);
    while let Some(e) = error {
        if let Some(timeout) = e.downcast_ref::<BodyReadTimeout>() {
            return Some(timeout);
        }
        error = e.source();
    }
    None
}

/// Unknown fields get their own code: the message already names the field and the accepted ones.
fn classify(e: &serde_json::Error) -> ApiError {
    let message = e.to_string();
    if message.starts_with("unknown field") {
        ApiError::UnknownField(message)
    } else {
        ApiError::InvalidBody(message)
    }
}
