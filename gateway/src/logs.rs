//! `GET /admin/logs`: what functions wrote to stdout and stderr on this node's embedded
//! runtimes (the rings of [`geofaas_functions::local::logs`]), one JSON object per line
//! (`application/x-ndjson`), with the admin key when keys are configured.
//!
//! Query: `function=NAME` (default: every function), `since=` an RFC 3339 time or a duration
//! back from now (`30s`, `5m`, `2h`; default: everything kept), `follow=1` to keep the answer
//! open and send each new line as it is read. A follow answer marks the end of the kept lines
//! with `{"caught_up":true}`, and says `{"lost":N}` when the reader fell so far behind that
//! `N` lines were dropped for it (a slow reader never slows a call). It ends when the node
//! starts draining.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::rejection::QueryRejection;
use axum::extract::Query;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use geofaas_config::function::valid_function_name;
use geofaas_functions::local::{FunctionLogs, LogLine};
use serde::Deserialize;
use serde_json::json;
use tokio::sync::{broadcast, mpsc};

use crate::directory::Directory;
use crate::error::ApiError;
use crate::guard::Admin;
use crate::node::{Live, NodeState};

/// The path of the endpoint.
pub const LOGS_PATH: &str = "/admin/logs";
/// How often a follow answer checks that its reader is still there and the node not draining.
const FOLLOW_CHECK: Duration = Duration::from_millis(500);

/// The route of `GET /admin/logs`.
pub fn routes() -> Router<Arc<Live>> {
    Router::new().route(LOGS_PATH, get(logs))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LogsQuery {
    function: Option<String>,
    since: Option<String>,
    follow: Option<String>,
}

/// What a request asks for, checked.
struct Wanted {
    function: Option<String>,
    since_us: u64,
    follow: bool,
}

async fn logs(
    Admin(state): Admin,
    query: Result<Query<LogsQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query.map_err(|e| bad(e.body_text()))?;
    let wanted = check(query, SystemTime::now())?;
    let rings = rings(&state.directory);
    // Subscribe before reading the rings, so no line falls between the two.
    let followers: Vec<_> = if wanted.follow {
        rings.iter().map(|r| r.follow()).collect()
    } else {
        Vec::new()
    };
    let per_ring: Vec<Vec<Arc<LogLine>>> = rings
        .iter()
        .map(|r| r.lines(wanted.function.as_deref(), wanted.since_us))
        .collect();
    // The last line each ring gave: its followers skip what was sent already.
    let seen: Vec<u64> = per_ring
        .iter()
        .map(|lines| lines.last().map_or(0, |l| l.seq))
        .collect();
    let mut kept: Vec<Arc<LogLine>> = per_ring.into_iter().flatten().collect();
    kept.sort_by_key(|l| (l.at_us, l.seq));
    let mut text = String::new();
    for line in &kept {
        push_line(&mut text, &state.place.id, line);
    }
    let ndjson = [(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson"),
    )];
    if !wanted.follow {
        return Ok((ndjson, text).into_response());
    }
    text.push_str("{\"caught_up\":true}\n");
    let (tx, rx) = mpsc::channel::<Bytes>(64);
    // The kept lines fit: the channel is empty.
    let _ = tx.try_send(Bytes::from(text));
    for (rx, seen) in followers.into_iter().zip(seen) {
        let function = wanted.function.clone();
        tokio::spawn(forward(state.clone(), rx, tx.clone(), function, seen));
    }
    drop(tx);
    let body = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<_, Infallible>(b), rx))
    });
    Ok((ndjson, Body::from_stream(body)).into_response())
}

/// Sends the lines of one runtime newer than `seen` to `tx` until the reader goes away or the
/// node drains.
async fn forward(
    state: Arc<NodeState>,
    mut lines: broadcast::Receiver<Arc<LogLine>>,
    tx: mpsc::Sender<Bytes>,
    function: Option<String>,
    seen: u64,
) {
    let mut check = tokio::time::interval(FOLLOW_CHECK);
    loop {
        let text = tokio::select! {
            got = lines.recv() => match got {
                Ok(line) if line.seq <= seen => continue,
                Ok(line) if function.as_deref().is_some_and(|f| f != &*line.function) => continue,
                Ok(line) => {
                    let mut text = String::new();
                    push_line(&mut text, &state.place.id, &line);
                    text
                }
                Err(broadcast::error::RecvError::Lagged(n)) => format!("{{\"lost\":{n}}}\n"),
                Err(broadcast::error::RecvError::Closed) => return,
            },
            _ = check.tick() => {
                if tx.is_closed() || !state.intake.ready.load(std::sync::atomic::Ordering::Relaxed) {
                    return;
                }
                continue;
            }
        };
        if tx.send(Bytes::from(text)).await.is_err() {
            return;
        }
    }
}

/// The log rings of this node's embedded runtimes.
fn rings(directory: &Directory) -> Vec<Arc<FunctionLogs>> {
    let backends = directory.backends();
    backends.iter().filter_map(|b| b.logs()).cloned().collect()
}

/// Appends `line` as one JSON object and a newline.
fn push_line(out: &mut String, node: &str, line: &LogLine) {
    let value = json!({
        "ts": rfc3339(line.at_us),
        "node": node,
        "function": &*line.function,
        "version": line.version.as_deref(),
        "request_id": line.request_id.as_deref(),
        "stream": line.stream.as_str(),
        "line": line.text,
    });
    out.push_str(&value.to_string());
    out.push('\n');
}

/// `at_us` (microseconds since the epoch) as an RFC 3339 UTC time with microseconds.
pub fn rfc3339(at_us: u64) -> String {
    let at = UNIX_EPOCH + Duration::from_micros(at_us);
    humantime::format_rfc3339_micros(at).to_string()
}

/// Checks the query against the clock `now`.
fn check(query: LogsQuery, now: SystemTime) -> Result<Wanted, ApiError> {
    if let Some(f) = &query.function {
        if !valid_function_name(f) {
            return Err(bad(format!(
                "function {f:?}: not a function name (1-64 letters, digits, '-', '_')"
            )));
        }
    }
    let follow = match query.follow.as_deref() {
        None | Some("0" | "false") => false,
        Some("" | "1" | "true") => true,
        Some(other) => return Err(bad(format!("follow {other:?}: expected 1 or 0"))),
    };
    let since_us = match query.since.as_deref() {
        None => 0,
        Some(text) => since(text, now).map_err(bad)?,
    };
    Ok(Wanted {
        function: query.function,
        since_us,
        follow,
    })
}

/// `text`, an RFC 3339 time or a duration back from `now`, in microseconds since the epoch.
pub fn since(text: &str, now: SystemTime) -> Result<u64, String> {
    let at = match humantime::parse_duration(text) {
        Ok(back) => now.checked_sub(back).unwrap_or(UNIX_EPOCH),
        Err(_) => humantime::parse_rfc3339_weak(text).map_err(|_| {
            format!(
                "since {text:?}: expected an RFC 3339 time (2026-12-02T10:00:00Z) or a \
                 duration (30s, 5m, 2h)"
            )
        })?,
    };
    let us = at
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_micros();
    Ok(u64::try_from(us).unwrap_or(u64::MAX))
}

fn bad(message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "bad_query", message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(function: Option<&str>, since: Option<&str>, follow: Option<&str>) -> LogsQuery {
        LogsQuery {
            function: function.map(str::to_owned),
            since: since.map(str::to_owned),
            follow: follow.map(str::to_owned),
        }
    }

    #[test]
    fn since_takes_a_duration_back_or_a_time_and_names_a_bad_value() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert_eq!(since("30s", now), Ok(999_970_000_000));
        assert_eq!(since("1h 1s", now), Ok((1_000_000 - 3601) * 1_000_000));
        assert_eq!(since("1970-01-01T00:00:10Z", now), Ok(10_000_000));
        assert_eq!(since("1970-01-01T00:00:10.5Z", now), Ok(10_500_000));
        let e = since("yesterday", now).unwrap_err();
        assert!(e.contains("\"yesterday\""), "{e}");
        assert_eq!(rfc3339(10_500_000), "1970-01-01T00:00:10.500000Z");
    }

    #[test]
    fn bad_fields_are_400_naming_field_and_value() {
        let now = SystemTime::now();
        let e = check(query(Some("../x"), None, None), now).err().unwrap();
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert!(e.message.contains("function \"../x\""), "{e}");
        let e = check(query(None, None, Some("maybe")), now).err().unwrap();
        assert!(e.message.contains("follow \"maybe\""), "{e}");
        let e = check(query(None, Some("later"), None), now).err().unwrap();
        assert!(e.message.contains("since \"later\""), "{e}");
        let ok = check(query(Some("talk"), Some("5m"), Some("1")), now).unwrap();
        assert!(ok.follow && ok.function.as_deref() == Some("talk") && ok.since_us > 0);
    }
}
