//! The one error type of the HTTP API: a status and a stable JSON body
//! `{"error": {"code", "message"}}` that names the bad input and leaks no internals.

use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use geofaas_functions::InvokeError;

/// An error answered to an HTTP client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Stable machine-readable code, e.g. `unknown_function`.
    pub code: &'static str,
    /// Human-readable message.
    pub message: String,
    /// Headers the answer carries besides the JSON body (`Retry-After`, `WWW-Authenticate`).
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

impl ApiError {
    /// An error with this status, code and message.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            headers: Vec::new(),
        }
    }

    /// The same error with one more header on the answer.
    pub fn with_header(mut self, name: HeaderName, value: HeaderValue) -> Self {
        self.headers.push((name, value));
        self
    }

    /// The same error telling the client when to retry, in whole seconds (at least 1).
    pub fn retry_after(self, seconds: u64) -> Self {
        self.with_header(
            axum::http::header::RETRY_AFTER,
            HeaderValue::from(seconds.max(1)),
        )
    }

    /// No node serves the function.
    pub fn unknown_function(name: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "unknown_function",
            format!("no node serves a function named {name:?}; GET /functions lists them"),
        )
    }

    /// A function name the platform can never serve (not 1-64 letters, digits, `-`, `_`).
    pub fn bad_function_name() -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "bad_function_name",
            "a function name is 1 to 64 ASCII letters, digits, '-' and '_'",
        )
    }

    /// `/fn/{name}` with a method other than GET and POST.
    pub fn method_not_allowed() -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "functions are called with GET, HEAD, POST, PUT, PATCH, DELETE or OPTIONS",
        )
    }

    /// The request body could not be read (the client reset or broke the stream).
    pub fn bad_body() -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "bad_body",
            "the request body could not be read",
        )
    }

    /// A request header that could not be used.
    pub fn bad_header(header: &str, value: &str, why: impl std::fmt::Display) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "bad_header",
            format!("header {header}: {value:?}: {why}"),
        )
    }

    /// The request body exceeds the configured limit.
    pub fn body_too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!("request body exceeds the limit of {limit} bytes"),
        )
    }

    /// The answer when a call sent to another node (the cloud, a neighbour) failed there.
    pub fn from_forward(err: &InvokeError) -> Self {
        match err {
            InvokeError::Timeout(d) => Self::new(
                StatusCode::GATEWAY_TIMEOUT,
                "timeout",
                format!("the other node did not answer within {} ms", d.as_millis()),
            ),
            InvokeError::Refused(why) => {
                Self::new(StatusCode::BAD_REQUEST, "bad_path", why.clone())
            }
            // Nothing was sent: safe to try again.
            InvokeError::Unavailable(why) => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unreachable",
                format!("the other node could not be reached, nothing was sent ({why}); retry later"),
            )
            .retry_after(1),
            InvokeError::Network(why) => Self::new(
                StatusCode::BAD_GATEWAY,
                "offload_failed",
                format!("the connection to the other node broke after the call was sent; it may have run there ({why})"),
            ),
            e => Self::new(
                StatusCode::BAD_GATEWAY,
                "offload_failed",
                format!("the call could not be handed to the other node: {e}"),
            ),
        }
    }

    /// A call that failed on every backend that could take it (and on the cloud).
    pub fn from_invoke(function: &str, err: &InvokeError) -> Self {
        match err {
            InvokeError::UnknownFunction(_) => Self::unknown_function(function),
            InvokeError::Timeout(d) => Self::new(
                StatusCode::GATEWAY_TIMEOUT,
                "timeout",
                format!(
                    "function {function:?} did not answer within {} ms",
                    d.as_millis()
                ),
            ),
            InvokeError::FunctionFailed { message, .. } => Self::new(
                StatusCode::BAD_GATEWAY,
                "function_failed",
                format!("function {function:?} failed: {message}"),
            ),
            InvokeError::OutputTooLarge { limit } => Self::new(
                StatusCode::BAD_GATEWAY,
                "output_too_large",
                format!("function {function:?} returned more than {limit} bytes"),
            ),
            InvokeError::BadAnswer(what) => {
                Self::new(StatusCode::BAD_GATEWAY, "bad_function_answer", what.clone())
            }
            // The backend cannot take the call as it was made (a sub-path on tinyFaaS).
            InvokeError::Refused(why) => {
                Self::new(StatusCode::BAD_REQUEST, "not_supported", why.clone())
            }
            InvokeError::Overloaded { retry_after } => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "overloaded",
                format!("no backend can take {function:?} now; retry later"),
            )
            // The backend's own word on when to come back, else a second.
            .retry_after(retry_after.map_or(1, |d| d.as_secs_f64().ceil() as u64)),
            InvokeError::CircuitOpen => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "overloaded",
                format!("no backend can take {function:?} now; retry later"),
            )
            .retry_after(1),
            _ => Self::new(
                StatusCode::BAD_GATEWAY,
                "backend_failed",
                format!("the backends of {function:?} failed"),
            ),
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.status.as_u16(),
            self.code,
            self.message
        )
    }
}

impl std::error::Error for ApiError {}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({"error": {"code": self.code, "message": self.message}});
        let mut resp = (self.status, Json(body)).into_response();
        resp.headers_mut().extend(self.headers);
        resp
    }
}

/// The error and its causes on one line, each cause once: many errors already print their
/// cause in their own message (`file: cannot read: No such file...`), and anyhow's `{:#}` would
/// repeat it.
pub fn error_report(err: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}
