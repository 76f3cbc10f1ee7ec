//! How a version travels over HTTP, to a node's admin API (`geofaas deploy`) and from one node
//! to another (`GET /node/functions/{name}/versions/{id}`): the bundle as the body, its
//! environment, secrets, schedules and queue triggers in headers, one entry each.

use axum::http::HeaderMap;

use crate::error::ApiError;

/// Request header: one `--env` entry, `KEY=VALUE`.
pub const ENV_HEADER: &str = "x-function-env";
/// Request header: one `--secret` entry, `KEY=VALUE`.
pub const SECRET_HEADER: &str = "x-function-secret";
/// Request header: one `--cron` schedule.
pub const CRON_HEADER: &str = "x-function-cron";
/// Request header: one `--on` queue trigger, `nats:SUBJECT`.
pub const ON_HEADER: &str = "x-function-on";

/// The `KEY=VALUE` entries of every `name` header.
pub fn entries(headers: &HeaderMap, name: &str) -> Result<Vec<(String, String)>, ApiError> {
    let mut out = Vec::new();
    for v in headers.get_all(name) {
        let text = v
            .to_str()
            .map_err(|_| ApiError::bad_header(name, "(not text)", "not visible ASCII"))?;
        let Some((k, v)) = text.split_once('=') else {
            let shown = if name == SECRET_HEADER {
                "(hidden)"
            } else {
                text
            };
            return Err(ApiError::bad_header(name, shown, "expected KEY=VALUE"));
        };
        out.push((k.to_owned(), v.to_owned()));
    }
    Ok(out)
}

/// The schedules of every `X-Function-Cron` header, one expression each (checked by the deploy).
pub fn schedules(headers: &HeaderMap) -> Result<Vec<String>, ApiError> {
    values(headers, CRON_HEADER)
}

/// The `--on` triggers a deploy request carries.
pub fn triggers(headers: &HeaderMap) -> Result<Vec<String>, ApiError> {
    values(headers, ON_HEADER)
}

fn values(headers: &HeaderMap, name: &'static str) -> Result<Vec<String>, ApiError> {
    headers
        .get_all(name)
        .iter()
        .map(|v| {
            v.to_str()
                .map(|s| s.trim().to_owned())
                .map_err(|_| ApiError::bad_header(name, "(not text)", "not visible ASCII"))
        })
        .collect()
}
