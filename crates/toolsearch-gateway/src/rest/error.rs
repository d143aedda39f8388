//! Errors of the REST API, each answered as `{"error": {"code", "message"}}` with its HTTP status.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApiError {
    #[error("missing or invalid bearer token; send `Authorization: Bearer <token>` with a token from rest.apiTokens or TOOLSEARCH_API_TOKENS")]
    Unauthorized,

    /// The request's `Host` or `Origin` is not allowed on this listener; the message says which
    /// and what to change.
    #[error("{0}")]
    Forbidden(String),

    /// The body did not arrive within `http.bodyReadTimeoutSecs`.
    #[error("{0}")]
    BodyTimeout(String),

    #[error("the request body is larger than {limit} bytes; send a smaller body")]
    PayloadTooLarge { limit: usize },

    #[error("the request body must be JSON: send `Content-Type: application/json` (got {got})")]
    UnsupportedMediaType { got: String },

    /// Malformed JSON or a body of the wrong shape.
    #[error("invalid request body: {0}")]
    InvalidBody(String),

    /// A field the endpoint does not know; the message names it and lists the accepted ones.
    #[error("invalid request body: {0}")]
    UnknownField(String),

    #[error("`{field}` is {value}, but must be between {min} and {max}")]
    OutOfRange {
        field: &'static str,
        value: usize,
        min: usize,
        max: usize,
    },

    /// The engine rejected the query (invalid regex, unknown mode, over-long query).
    #[error("{0}")]
    BadQuery(String),

    #[error("unknown category `{category}`; known categories: {known}")]
    UnknownCategory { category: String, known: String },

    #[error("no route {method} {path}; the API is described at GET /api/openapi.json")]
    NotFound { method: String, path: String },

    #[error("{path} does not accept {method}; use {allowed}")]
    MethodNotAllowed {
        method: String,
        path: String,
        allowed: String,
    },

    /// Any other rejection of the request by the HTTP layer.
    #[error("{message}")]
    Rejected { status: StatusCode, message: String },

    #[error("internal error: {0}; this is a bug in toolsearch, please report it")]
    Internal(String),
}

impl ApiError {
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::BodyTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            ApiError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::UnsupportedMediaType { .. } => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::InvalidBody(_)
            | ApiError::UnknownField(_)
            | ApiError::OutOfRange { .. }
            | ApiError::BadQuery(_) => StatusCode::BAD_REQUEST,
            ApiError::UnknownCategory { .. } | ApiError::NotFound { .. } => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Rejected { status, .. } => *status,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// A stable, machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::Unauthorized => "unauthorized",
            ApiError::Forbidden(_) => "forbidden",
            ApiError::BodyTimeout(_) => "request_timeout",
            ApiError::PayloadTooLarge { .. } => "payload_too_large",
            ApiError::UnsupportedMediaType { .. } => "unsupported_media_type",
            ApiError::InvalidBody(_) => "invalid_body",
            ApiError::UnknownField(_) => "unknown_field",
            ApiError::OutOfRange { .. } => "out_of_range",
            ApiError::BadQuery(_) => "invalid_query",
            ApiError::UnknownCategory { .. } => "unknown_category",
            ApiError::NotFound { .. } => "not_found",
            ApiError::MethodNotAllowed { .. } => "method_not_allowed",
            ApiError::Rejected { .. } => "bad_request",
            ApiError::Internal(_) => "internal",
        }
    }

    /// Every code, for the OpenAPI document.
    pub const CODES: [&'static str; 14] = [
        "unauthorized",
        "forbidden",
        "request_timeout",
        "payload_too_large",
        "unsupported_media_type",
        "invalid_body",
        "unknown_field",
        "out_of_range",
        "invalid_query",
        "unknown_category",
        "not_found",
        "method_not_allowed",
        "bad_request",
        "internal",
    ];
}

impl From<toolsearch_core::Error> for ApiError {
    fn from(e: toolsearch_core::Error) -> Self {
        if let toolsearch_core::Error::UnknownCategory { name, known } = e {
            return ApiError::UnknownCategory {
                category: name,
                known,
            };
        }
        if e.is_bad_input() {
            ApiError::BadQuery(e.to_string())
        } else {
            ApiError::Internal(e.to_string())
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        if status.is_server_error() {
            tracing::error!(target: "rest", error = %self, "request failed");
        } else {
            tracing::debug!(target: "rest", status = status.as_u16(), error = %self, "request rejected");
        }
        let body = json!({"error": {"code": self.code(), "message": self.to_string()}});
        let mut response = (status, Json(body)).into_response();
        if matches!(self, ApiError::Unauthorized) {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"toolsearch\""),
            );
        }
        response
    }
}
