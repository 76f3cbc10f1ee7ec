//! Asynchronous calls: with `Prefer: respond-async` the gateway accepts the call (`202 Accepted`,
//! `Location: /activations/{id}`), runs it in the background exactly as it would a synchronous
//! one (failover and offload included), and keeps the answer for `GET /activations/{id}`.
//!
//! With API keys configured, an activation is readable only with the key that started it (or
//! an admin key); to any other key it does not exist.
//!
//! An accepted call always runs to completion, even if the client goes away; only when too many
//! are running already is a new one refused, with 503, before it is accepted.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, Response, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use rand::RngCore;

use crate::error::ApiError;
use crate::idempotency::Stored;
use crate::invoke::{self, Call};
use crate::node::NodeState;

/// How long finished answers are kept.
const RETENTION: Duration = Duration::from_secs(600);
/// Most calls running in the background at once on one node.
const MAX_RUNNING: usize = 1024;
/// Most bytes of kept answers.
const CAPACITY_BYTES: u64 = 64 * 1024 * 1024;

/// One background call.
#[derive(Debug)]
enum Activation {
    Running,
    Done(Stored),
}

/// The background calls of one node.
#[derive(Debug)]
pub struct Activations {
    entries: moka::sync::Cache<String, Arc<Activation>>,
    /// The API key id that started each activation, where there was one.
    owners: moka::sync::Cache<String, String>,
    running: Arc<AtomicUsize>,
}

impl Default for Activations {
    fn default() -> Self {
        Self {
            entries: moka::sync::Cache::builder()
                .max_capacity(CAPACITY_BYTES)
                .weigher(|_, v: &Arc<Activation>| match v.as_ref() {
                    Activation::Running => 256,
                    Activation::Done(s) => u32::try_from(s.body_len() + 256).unwrap_or(u32::MAX),
                })
                .time_to_live(RETENTION)
                .build(),
            owners: moka::sync::Cache::builder().time_to_live(RETENTION).build(),
            running: Arc::new(AtomicUsize::new(0)),
        }
    }
}

/// Whether the client asked for an asynchronous answer (`Prefer: respond-async`, RFC 7240).
pub fn wants_async(headers: &HeaderMap) -> bool {
    // A `HeaderName` constant: a `&str` name is parsed on every call.
    const PREFER: axum::http::HeaderName = axum::http::HeaderName::from_static("prefer");
    headers
        .get_all(PREFER)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|p| p.trim().eq_ignore_ascii_case("respond-async"))
}

impl Activations {
    /// Accepts `call` and runs it in the background; the 202 names where to fetch the answer.
    pub fn start(
        &self,
        state: Arc<NodeState>,
        call: Call,
        owner: Option<&str>,
    ) -> Result<Response<Body>, ApiError> {
        if self.running.fetch_add(1, Ordering::AcqRel) >= MAX_RUNNING {
            self.running.fetch_sub(1, Ordering::AcqRel);
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "overloaded",
                "too many asynchronous calls are running; retry later",
            ));
        }
        let mut raw = [0u8; 16];
        rand::thread_rng().fill_bytes(&mut raw);
        let id: String = raw.iter().map(|b| format!("{b:02x}")).collect();
        self.entries
            .insert(id.clone(), Arc::new(Activation::Running));
        if let Some(owner) = owner {
            self.owners.insert(id.clone(), owner.to_owned());
        }
        let (entries, running, task_id) = (self.entries.clone(), self.running.clone(), id.clone());
        tokio::spawn(async move {
            let stored = match invoke::run(&state, call).await.into_result() {
                Ok(resp) => match Stored::collect(resp, 0).await {
                    Ok(s) => s,
                    Err(_) => Stored::from_error(&ApiError::new(
                        StatusCode::BAD_GATEWAY,
                        "backend_failed",
                        "the answer was cut off",
                    )),
                },
                Err(e) => Stored::from_error(&e),
            };
            entries.insert(task_id, Arc::new(Activation::Done(stored)));
            running.fetch_sub(1, Ordering::AcqRel);
        });
        let location = format!("/activations/{id}");
        let mut resp = (
            StatusCode::ACCEPTED,
            Json(serde_json::json!({"activationId": id, "status": "running"})),
        )
            .into_response();
        let h = resp.headers_mut();
        h.insert(
            "preference-applied",
            HeaderValue::from_static("respond-async"),
        );
        if let Ok(v) = HeaderValue::from_str(&location) {
            h.insert(header::LOCATION, v);
        }
        Ok(resp)
    }

    /// The answer of activation `id`: 202 while it runs, then the call's own answer.
    /// `reader` is the caller's key id; `admin` callers read every activation.
    pub fn get(
        &self,
        id: &str,
        reader: Option<&str>,
        admin: bool,
    ) -> Result<Response<Body>, ApiError> {
        let owner = self.owners.get(id);
        let hidden = !admin && owner.is_some() && owner.as_deref() != reader;
        let entry = if hidden { None } else { self.entries.get(id) };
        match entry.as_deref() {
            None => Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "unknown_activation",
                format!(
                    "no activation {id:?} on this node (answers are kept for {} s)",
                    RETENTION.as_secs()
                ),
            )),
            Some(Activation::Running) => {
                let mut resp = (
                    StatusCode::ACCEPTED,
                    Json(serde_json::json!({"activationId": id, "status": "running"})),
                )
                    .into_response();
                resp.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                Ok(resp)
            }
            Some(Activation::Done(stored)) => Ok(stored.response(false)),
        }
    }
}
