//! Idempotent retries: a call with an `Idempotency-Key` header runs at most once per key (per
//! function, on this node); a retry within the retention time gets the first answer again, marked
//! `Idempotent-Replayed: true`, instead of running the function twice.
//!
//! Concurrent calls with the same key wait for the one that runs. Answers with a 5xx status are
//! shared with those waiters but not kept, so a later retry runs again. A key reused with a
//! different request (body or path) is refused with 422. Keys are not bound to a client: clients
//! should use unique values such as UUIDs.
//!
//! In a fleet (`[registry]`), a kept answer whose body is at most `registry.call_record_max_bytes`
//! is also shared through etcd ([`geofaas_fleet::CallRecords`]) before it is sent, so a retry at
//! another node (the cloud, after the edge that ran the call died) gets the first answer. The
//! answer waits at most `registry.call_record_wait_ms` for etcd; past that, or with etcd down,
//! it goes out and the record stays here (logged), and a retry elsewhere runs the call again.
//! Lookups read the node's in-memory copy of the shared records; a client's retry at the cloud
//! that finds nothing there asks etcd once (the watch may not have brought the record yet).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, Response, StatusCode};
use bytes::Bytes;

use crate::error::ApiError;

use geofaas_config::headers::IDEMPOTENT_REPLAYED as REPLAYED;
/// How long answers are kept.
const RETENTION: Duration = Duration::from_secs(600);
/// Most bytes of kept answers (bodies plus a fixed overhead each).
const CAPACITY_BYTES: u64 = 64 * 1024 * 1024;
/// Longest accepted key.
const MAX_KEY_LEN: usize = 255;

/// A kept answer (also what async activations keep).
#[derive(Debug)]
pub(crate) struct Stored {
    pub(crate) status: StatusCode,
    pub(crate) headers: Vec<(HeaderName, HeaderValue)>,
    pub(crate) body: Bytes,
    /// The request's fingerprint ([`fingerprint`]), 0 where none is checked.
    pub(crate) request: u64,
}

/// Why a keyed call did not produce a keepable answer.
#[derive(Debug)]
pub(crate) enum Unkept {
    Api(ApiError),
    ServerError(Stored),
}

/// The answers of keyed calls on one node.
#[derive(Debug)]
pub struct IdempotencyCache {
    answers: moka::future::Cache<String, Arc<Stored>>,
    shared: Option<Arc<geofaas_fleet::CallRecords>>,
}

impl Default for IdempotencyCache {
    fn default() -> Self {
        Self {
            shared: None,
            answers: moka::future::Cache::builder()
                .max_capacity(CAPACITY_BYTES)
                .weigher(|_, v: &Arc<Stored>| u32::try_from(v.body.len() + 256).unwrap_or(u32::MAX))
                .time_to_live(RETENTION)
                .build(),
        }
    }
}

/// The cache key of a keyed call of `function`, or `None` without the header; 400 for a bad key.
pub fn key(sent: Option<&HeaderValue>, function: &str) -> Result<Option<String>, ApiError> {
    let Some(value) = sent else {
        return Ok(None);
    };
    let text = value
        .to_str()
        .ok()
        .filter(|t| !t.is_empty() && t.len() <= MAX_KEY_LEN);
    match text {
        Some(t) => Ok(Some(format!("{function}\n{t}"))),
        None => Err(ApiError::bad_header(
            "Idempotency-Key",
            &String::from_utf8_lossy(value.as_bytes()),
            format!("1 to {MAX_KEY_LEN} visible ASCII characters"),
        )),
    }
}

/// A fingerprint of what the call asks for, to refuse a key reused for another request. SHA-256
/// (its first 8 bytes), so that every node of a fleet computes the same one.
pub fn fingerprint(path_and_query: &str, body: &[u8]) -> u64 {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    ctx.update(&(path_and_query.len() as u64).to_be_bytes());
    ctx.update(path_and_query.as_bytes());
    ctx.update(body);
    let digest = ctx.finish();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest.as_ref()[..8]);
    u64::from_be_bytes(first)
}

/// A kept answer as etcd holds it.
#[derive(serde::Serialize, serde::Deserialize)]
struct SharedRecord {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
    request: u64,
}

impl IdempotencyCache {
    /// A cache that also shares its answers through the fleet's call records.
    pub fn shared(records: Arc<geofaas_fleet::CallRecords>) -> Self {
        Self {
            shared: Some(records),
            ..Self::default()
        }
    }

    /// The answer another node shared for `key`, if its record parses; `ask_etcd` looks in
    /// etcd too when the node's copy has none.
    async fn shared_answer(&self, key: &str, ask_etcd: bool) -> Option<Stored> {
        let records = self.shared.as_ref()?;
        let raw = match ask_etcd {
            true => records.fetch(key).await?,
            false => records.get(key)?,
        };
        let rec: SharedRecord = serde_json::from_slice(&raw).ok()?;
        use base64::Engine;
        let body = base64::engine::general_purpose::STANDARD
            .decode(rec.body)
            .ok()?;
        Some(Stored {
            status: StatusCode::from_u16(rec.status).ok()?,
            headers: rec
                .headers
                .iter()
                .filter_map(|(n, v)| Some((n.parse().ok()?, v.parse().ok()?)))
                .collect(),
            body: Bytes::from(body),
            request: rec.request,
        })
    }

    /// Shares `stored` (when small enough) for a retry at another node; returns once etcd has
    /// it or after the bounded wait ([`geofaas_fleet::CallRecords::put`]).
    async fn share(&self, key: &str, stored: &Stored) {
        let Some(records) = &self.shared else { return };
        if stored.body.len() > records.max_bytes() {
            return;
        }
        use base64::Engine;
        let rec = SharedRecord {
            status: stored.status.as_u16(),
            headers: stored
                .headers
                .iter()
                .filter_map(|(n, v)| Some((n.to_string(), v.to_str().ok()?.to_owned())))
                .collect(),
            body: base64::engine::general_purpose::STANDARD.encode(&stored.body),
            request: stored.request,
        };
        if let Ok(bytes) = serde_json::to_vec(&rec) {
            records.put(key, bytes).await;
        }
    }

    /// Runs `call` unless an answer for `key` is kept (or being made), and returns that answer.
    /// `retry` marks a client's retry at another node: a shared answer is then also looked up
    /// in etcd. In a fleet the answer is returned only once its record is shared (or the wait
    /// for etcd is over).
    pub async fn run(
        &self,
        key: String,
        request: u64,
        retry: bool,
        call: impl std::future::Future<Output = Result<Response<Body>, ApiError>>,
    ) -> Result<Response<Body>, ApiError> {
        let ran = AtomicBool::new(false);
        let result = self
            .answers
            .try_get_with(key.clone(), async {
                if let Some(stored) = self.shared_answer(&key, retry).await {
                    return Ok(Arc::new(stored));
                }
                ran.store(true, Ordering::Relaxed);
                let stored = Stored::collect(call.await.map_err(Unkept::Api)?, request).await?;
                if stored.status.is_server_error() {
                    return Err(Unkept::ServerError(stored));
                }
                // Before the answer leaves: an edge killed right after answering leaves its
                // record behind for the retry at the cloud.
                self.share(&key, &stored).await;
                Ok(Arc::new(stored))
            })
            .await;
        let replayed = !ran.load(Ordering::Relaxed);
        let stored: &Stored = match &result {
            Ok(stored) => stored,
            Err(unkept) => match unkept.as_ref() {
                Unkept::Api(e) => return Err(e.clone()),
                Unkept::ServerError(stored) => stored,
            },
        };
        if stored.request != request {
            return Err(ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "idempotency_key_reused",
                "this Idempotency-Key was used for a different request",
            ));
        }
        Ok(stored.response(replayed))
    }
}

impl Stored {
    pub(crate) async fn collect(resp: Response<Body>, request: u64) -> Result<Self, Unkept> {
        let (parts, body) = resp.into_parts();
        let body = axum::body::to_bytes(body, usize::MAX).await.map_err(|_| {
            Unkept::Api(ApiError::new(
                StatusCode::BAD_GATEWAY,
                "backend_failed",
                "the answer was cut off",
            ))
        })?;
        Ok(Self {
            status: parts.status,
            headers: parts
                .headers
                .into_iter()
                .filter_map(|(n, v)| Some((n?, v)))
                .collect(),
            body,
            request,
        })
    }

    /// An error answer, kept like any other.
    pub(crate) fn from_error(e: &ApiError) -> Self {
        let body = serde_json::json!({"error": {"code": e.code, "message": e.message}});
        Self {
            status: e.status,
            headers: vec![(
                axum::http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            body: Bytes::from(body.to_string()),
            request: 0,
        }
    }

    /// The kept answer as a response, marked replayed if asked.
    pub(crate) fn response(&self, replayed: bool) -> Response<Body> {
        let mut resp = Response::new(Body::from(self.body.clone()));
        *resp.status_mut() = self.status;
        let headers = resp.headers_mut();
        for (n, v) in &self.headers {
            headers.append(n.clone(), v.clone());
        }
        if replayed {
            headers.insert(REPLAYED, HeaderValue::from_static("true"));
        }
        resp
    }
}
