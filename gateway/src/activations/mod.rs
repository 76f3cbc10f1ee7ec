//! Asynchronous calls: with `Prefer: respond-async` the gateway accepts the call (`202 Accepted`,
//! `Location: /activations/{id}`), runs it in the background exactly as it would a synchronous
//! one (failover and offload included), and keeps the answer for `GET /activations/{id}`.
//!
//! **Durable**: a node with a state folder (every `geofaas node` and `up` node) writes the
//! accepted call to its journal (`journal`), synced to disk, before it answers `202`; a node
//! that restarts runs again every call it had accepted and not finished. A call that was running
//! when the node died therefore runs a second time (at least once, never lost); with an
//! `Idempotency-Key` the function receives the same key both times, and a client that submits
//! the call again with the same key gets the first activation instead of a second call.
//!
//! **Retries and dead letters** (`[activations]`): a try that failed in a way that may be
//! retried (the call did not run: no capacity, unreachable, circuit open; or it timed out; or it
//! ran and failed where the function has `retry_on_error`) is tried again after a doubling
//! backoff, up to `max_attempts`; a call that still failed, failed in a way that may not be
//! retried, or grew older than `max_age_s`, is dead-lettered: kept with every try's error for
//! `dead_letter_retention_s`, for `geofaas activations ls --failed`, `show` and `retry`
//! (`crate::admin::activations`). An answer the function gave (any status) is the call's answer, not a failure.
//!
//! With API keys configured, an activation is readable only with the key that started it (or
//! an admin key); to any other key it does not exist.
//!
//! Activations know the node only as a [`Host`]: its settings now, its metrics, and one try of
//! a call (the node's state implements it in `pipeline`, where calls run).

pub mod callback;
mod journal;
pub mod queue;
mod saved;

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use axum::body::Body;
use axum::http::{header, HeaderValue, Response, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use futures::future::BoxFuture;
use geofaas_config::ActivationSettings;
use rand::RngCore;

use crate::call::Call;
use crate::error::ApiError;
use crate::idempotency::Stored;
use crate::metrics::NodeMetrics;
use journal::Journal;
use saved::{Record, SavedAnswer, SavedCall, SavedError};

use geofaas_config::headers::IDEMPOTENT_REPLAYED;

/// Most calls waiting or running in the background at once on one node.
const MAX_RUNNING: usize = 1024;
/// Most bytes of kept answers, and separately of dead letters.
const CAPACITY_BYTES: u64 = 64 * 1024 * 1024;

/// Whether the client asked for an asynchronous answer (`Prefer: respond-async`, RFC 7240).
pub fn wants_async(headers: &axum::http::HeaderMap) -> bool {
    // A `HeaderName` constant: a `&str` name is parsed on every call.
    const PREFER: axum::http::HeaderName = axum::http::HeaderName::from_static("prefer");
    headers
        .get_all(PREFER)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|p| p.trim().eq_ignore_ascii_case("respond-async"))
}

/// The node a background call runs on, as activations see it.
pub trait Host: Send + Sync + 'static {
    /// The node's id (the queue's subject for the calls it accepts).
    fn node_id(&self) -> &str;
    /// The `[activations]` settings now.
    fn settings(&self) -> &ActivationSettings;
    /// Whether a try of `function` that ran and failed is tried again (its `retry_on_error`).
    fn retry_on_error(&self, function: &str) -> bool;
    /// The node's metrics.
    fn metrics(&self) -> &NodeMetrics;
    /// Whether `function` can run from here: this node serves it, or the cloud may.
    fn serves<'a>(&'a self, function: &'a str) -> BoxFuture<'a, bool>;
    /// One try of `call`, as a call from this node runs (placement, failover, offload), with
    /// the node's observers told.
    fn run(self: Arc<Self>, call: Call) -> BoxFuture<'static, Result<Response<Body>, ApiError>>;
}

/// The node's host now, or `None` once it stopped ([`Activations::attach`]).
type Current = Box<dyn Fn() -> Option<Arc<dyn Host>> + Send + Sync>;

/// A call not finished yet.
#[derive(Debug)]
struct Pending {
    function: String,
    owner: Option<String>,
    accepted_ms: u64,
    call: Arc<SavedCall>,
    /// The failed tries so far.
    errors: Vec<SavedError>,
    /// Between tries (after a failure, until the backoff ends) rather than running.
    waiting: bool,
    /// Where to post the answer.
    callback: Option<String>,
}

/// A call that ended: its answer, or a dead letter.
#[derive(Debug)]
struct Finished {
    function: String,
    owner: Option<String>,
    accepted_ms: u64,
    finished_ms: u64,
    answer: Stored,
    errors: Vec<SavedError>,
    /// Kept until then.
    keep_until: SystemTime,
    /// A dead letter's call, to retry it.
    dead: Option<Arc<SavedCall>>,
    /// Where the answer is posted.
    callback: Option<String>,
}

/// Entries expire at their own `keep_until`.
struct KeepUntil;

impl moka::Expiry<String, Arc<Finished>> for KeepUntil {
    fn expire_after_create(
        &self,
        _key: &String,
        value: &Arc<Finished>,
        _created_at: Instant,
    ) -> Option<Duration> {
        Some(
            value
                .keep_until
                .duration_since(SystemTime::now())
                .unwrap_or_default(),
        )
    }
}

fn finished_cache() -> moka::sync::Cache<String, Arc<Finished>> {
    moka::sync::Cache::builder()
        .max_capacity(CAPACITY_BYTES)
        .weigher(|_, v: &Arc<Finished>| {
            u32::try_from(v.answer.body.len() + 512).unwrap_or(u32::MAX)
        })
        .expire_after(KeepUntil)
        .build()
}

/// The background calls of one node.
pub struct Activations {
    /// The journal, with a state folder; without one accepted calls live in memory only.
    journal: Option<Journal>,
    pending: Mutex<HashMap<String, Pending>>,
    running: AtomicUsize,
    answers: moka::sync::Cache<String, Arc<Finished>>,
    dead: moka::sync::Cache<String, Arc<Finished>>,
    /// Idempotency keys of accepted calls: key → (activation id, request fingerprint).
    keys: moka::sync::Cache<String, (String, u64)>,
    /// The node's host now, for tries after the first (a reload may replace it).
    node: OnceLock<Current>,
    /// Calls read back from the journal, run once the node serves ([`Activations::attach`]).
    recovered: Mutex<Vec<(String, u32)>>,
    /// The functions whose gauges [`Activations::report`] set last time.
    reported: Mutex<Vec<String>>,
    /// Answers read back from the journal whose callback was not delivered yet.
    undelivered: Mutex<Vec<String>>,
    /// The client callbacks are posted with.
    callbacks: OnceLock<reqwest::Client>,
    /// The fleet's queue (`[queue]`): accepted calls go there instead of the journal.
    queue: OnceLock<Arc<queue::Queue>>,
}

impl std::fmt::Debug for Activations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Activations")
            .field("durable", &self.journal.is_some())
            .field("running", &self.running.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Default for Activations {
    /// In memory only (no state folder).
    fn default() -> Self {
        Self {
            journal: None,
            pending: Mutex::default(),
            running: AtomicUsize::new(0),
            answers: finished_cache(),
            dead: finished_cache(),
            keys: moka::sync::Cache::builder()
                .time_to_live(Duration::from_secs(24 * 3600))
                .max_capacity(100_000)
                .build(),
            node: OnceLock::new(),
            recovered: Mutex::default(),
            reported: Mutex::default(),
            undelivered: Mutex::default(),
            callbacks: OnceLock::new(),
            queue: OnceLock::new(),
        }
    }
}

/// A new activation id: 32 hex digits.
fn new_id() -> String {
    let mut raw = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut raw);
    raw.iter().map(|b| format!("{b:02x}")).collect()
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn at_ms(ms: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(ms)
}

/// Why a call could not be accepted durably: `503`, naming the folder and the cause.
fn not_durable(e: &std::io::Error) -> ApiError {
    let why = if e.kind() == std::io::ErrorKind::StorageFull {
        "the disk is full".to_owned()
    } else {
        e.to_string()
    };
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "not_durable",
        format!("the call was not accepted: the node could not write it to its state folder ({why}); retry later"),
    )
    .retry_after(5)
}

/// Whether a failed try may be tried again: the same classes as failover.
fn retryable(e: &ApiError, retry_on_error: bool) -> bool {
    match e.code {
        // It did not run (no capacity, circuit open, unreachable) or may not have finished.
        "overloaded" | "timeout" | "backend_failed" | "offload_failed" | "not_durable" => true,
        "function_failed" | "output_too_large" | "bad_function_answer" => retry_on_error,
        _ => e.status == StatusCode::SERVICE_UNAVAILABLE,
    }
}

/// The `202` naming where the answer will be.
fn accepted(id: &str, replayed: bool) -> Response<Body> {
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
    if let Ok(v) = HeaderValue::from_str(&format!("/activations/{id}")) {
        h.insert(header::LOCATION, v);
    }
    if replayed {
        h.insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
    }
    resp
}

impl Activations {
    /// The activations kept in the journal under `dir`: finished answers and dead letters
    /// within their retention are served again; accepted calls not finished run again once
    /// [`Activations::attach`] is called.
    pub fn open(dir: &std::path::Path) -> std::io::Result<Self> {
        let (journal, records) = Journal::open(dir)?;
        let mut a = Self {
            journal: Some(journal),
            ..Self::default()
        };
        a.replay(records);
        Ok(a)
    }

    /// Folds the journal's records, in order, into the node's view.
    fn replay(&mut self, records: Vec<Record>) {
        let now = SystemTime::now();
        let pending = self.pending.get_mut();
        let mut undelivered = Vec::new();
        for r in records {
            match r {
                Record::Accepted {
                    id,
                    accepted_ms,
                    owner,
                    key,
                    call,
                    callback,
                } => {
                    self.answers.invalidate(&id);
                    self.dead.invalidate(&id);
                    if let Some((key, fingerprint)) = key {
                        self.keys.insert(key, (id.clone(), fingerprint));
                    }
                    pending.insert(
                        id,
                        Pending {
                            function: call.function.clone(),
                            owner,
                            accepted_ms,
                            call: Arc::new(call),
                            errors: Vec::new(),
                            waiting: true,
                            callback,
                        },
                    );
                }
                Record::Attempt { id, error } => {
                    if let Some(p) = pending.get_mut(&id) {
                        p.errors.push(error);
                    }
                }
                Record::Finished {
                    id,
                    function,
                    owner,
                    accepted_ms,
                    finished_ms,
                    keep_until_ms,
                    answer,
                    attempts,
                    call,
                    callback,
                } => {
                    pending.remove(&id);
                    undelivered.retain(|u| *u != id);
                    let keep_until = at_ms(keep_until_ms);
                    let Some(answer) = answer.to_stored() else {
                        continue;
                    };
                    if keep_until <= now {
                        continue;
                    }
                    let dead = call.map(Arc::new);
                    if callback.is_some() {
                        undelivered.push(id.clone());
                    }
                    let f = Arc::new(Finished {
                        function,
                        owner,
                        accepted_ms,
                        finished_ms,
                        answer,
                        errors: attempts,
                        keep_until,
                        dead,
                        callback,
                    });
                    match f.dead {
                        Some(_) => self.dead.insert(id, f),
                        None => self.answers.insert(id, f),
                    }
                }
                Record::Delivered { id } => undelivered.retain(|u| *u != id),
            }
        }
        *self.undelivered.get_mut() = undelivered;
        let recovered: Vec<(String, u32)> = pending
            .iter()
            .map(|(id, p)| (id.clone(), p.errors.len() as u32))
            .collect();
        self.running.store(recovered.len(), Ordering::Relaxed);
        if !recovered.is_empty() {
            tracing::info!(
                calls = recovered.len(),
                "activations: running again the calls accepted before the node stopped"
            );
        }
        *self.recovered.get_mut() = recovered;
    }

    /// Sends accepted calls to the fleet's queue from now on (`[queue]`).
    pub fn use_queue(&self, queue: Arc<queue::Queue>) {
        let _ = self.queue.set(queue);
    }

    /// The fleet's queue, when the node uses one.
    pub fn queue(&self) -> Option<&Arc<queue::Queue>> {
        self.queue.get()
    }

    /// Binds the activations to the node (`current` gives its host now, `None` once it
    /// stopped) and starts the calls read back from the journal. Called once the node serves.
    pub fn attach(
        self: &Arc<Self>,
        current: impl Fn() -> Option<Arc<dyn Host>> + Send + Sync + 'static,
    ) {
        if self.node.set(Box::new(current)).is_err() {
            return;
        }
        let Some(host) = self.host() else {
            return;
        };
        let recovered = std::mem::take(&mut *self.recovered.lock());
        for (id, _) in &recovered {
            if let Some(p) = self.pending.lock().get(id) {
                host.metrics().activation(&p.function, "recovered");
            }
        }
        for (id, tries) in recovered {
            let (this, host) = (self.clone(), host.clone());
            tokio::spawn(async move { this.drive(id, tries, host).await });
        }
        let undelivered = std::mem::take(&mut *self.undelivered.lock());
        for id in undelivered {
            if let Some(f) = self.finished(&id) {
                self.post(id, f);
            }
        }
    }

    /// Accepts `call` and runs it in the background; the 202 names where to fetch the answer.
    /// `key` is the call's idempotency key and request fingerprint, where it had one.
    pub async fn start(
        self: &Arc<Self>,
        host: Arc<dyn Host>,
        call: Call,
        owner: Option<&str>,
        key: Option<(String, u64)>,
    ) -> Result<Response<Body>, ApiError> {
        if let Some((key, fingerprint)) = &key {
            if let Some((id, first)) = self.keys.get(key) {
                if first != *fingerprint {
                    return Err(ApiError::new(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        "idempotency_key_reused",
                        "this Idempotency-Key was used for a different request",
                    ));
                }
                return Ok(accepted(&id, true));
            }
        }
        let callback = callback::requested(&call.headers, host.settings())?;
        // A function no node serves is refused now, not accepted and dead-lettered.
        if !host.serves(&call.function).await {
            return Err(ApiError::unknown_function(&call.function));
        }
        if let Some(queue) = self.queue.get() {
            return self
                .enqueue(queue, &*host, call, owner, key, callback)
                .await;
        }
        if self.running.fetch_add(1, Ordering::AcqRel) >= MAX_RUNNING {
            self.running.fetch_sub(1, Ordering::AcqRel);
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "overloaded",
                "too many asynchronous calls are waiting or running; retry later",
            )
            .retry_after(1));
        }
        let id = new_id();
        let saved = Arc::new(SavedCall::of(&call));
        let accepted_ms = now_ms();
        if let Some(journal) = &self.journal {
            let record = Record::Accepted {
                id: id.clone(),
                accepted_ms,
                owner: owner.map(str::to_owned),
                key: key.clone(),
                call: (*saved).clone(),
                callback: callback.clone(),
            };
            if let Err(e) = journal.write_synced(&record).await {
                self.running.fetch_sub(1, Ordering::AcqRel);
                return Err(not_durable(&e));
            }
        }
        if let Some((key, fingerprint)) = key {
            self.keys.insert(key, (id.clone(), fingerprint));
        }
        self.pending.lock().insert(
            id.clone(),
            Pending {
                function: call.function.clone(),
                owner: owner.map(str::to_owned),
                accepted_ms,
                call: saved,
                errors: Vec::new(),
                waiting: false,
                callback,
            },
        );
        host.metrics().activation(&call.function, "accepted");
        let (this, task_id) = (self.clone(), id.clone());
        tokio::spawn(async move {
            let result = attempt(&host, call).await;
            if let Some(tries) = this.settle(&*host, &task_id, 0, result) {
                this.drive(task_id, tries, host).await;
            }
        });
        Ok(accepted(&id, false))
    }

    /// Accepts `call` into the fleet's queue: `202` once JetStream acknowledged it; the
    /// node's consumer (or another node's, [`queue::serve`]) runs it.
    async fn enqueue(
        &self,
        queue: &queue::Queue,
        host: &dyn Host,
        call: Call,
        owner: Option<&str>,
        key: Option<(String, u64)>,
        callback: Option<String>,
    ) -> Result<Response<Body>, ApiError> {
        let id = new_id();
        let accepted_ms = now_ms();
        let record = Record::Accepted {
            id: id.clone(),
            accepted_ms,
            owner: owner.map(str::to_owned),
            key: key.clone(),
            call: SavedCall::of(&call),
            callback,
        };
        let waiting = queue::Entry::Waiting {
            function: call.function.clone(),
            owner: owner.map(str::to_owned),
            accepted_ms,
        };
        queue.accept(host.node_id(), &id, &record, waiting).await?;
        if let Some((key, fingerprint)) = key {
            self.keys.insert(key, (id.clone(), fingerprint));
        }
        host.metrics().activation(&call.function, "accepted");
        Ok(accepted(&id, false))
    }

    /// Runs accepted call `record`, delivered by the fleet's queue as `msg`: holds it while it
    /// runs (and between its tries), writes its ending to the queue, then acknowledges it. A
    /// node that stops first leaves it unacknowledged, so it is delivered again.
    pub(crate) fn adopt(
        self: &Arc<Self>,
        record: Record,
        msg: async_nats::jetstream::Message,
        host: Arc<dyn Host>,
        queue: Arc<queue::Queue>,
    ) {
        let Record::Accepted {
            id,
            accepted_ms,
            owner,
            key,
            call,
            callback,
        } = record
        else {
            return;
        };
        let Some(run) = call.to_call() else {
            tracing::error!(
                activation = id,
                "queue: a call that could not be read back; dropped"
            );
            tokio::spawn(async move { msg.ack_with(async_nats::jetstream::AckKind::Term).await });
            return;
        };
        {
            let mut pending = self.pending.lock();
            if pending.contains_key(&id) {
                // Delivered again while it still runs here: the first delivery finishes it.
                return;
            }
            pending.insert(
                id.clone(),
                Pending {
                    function: call.function.clone(),
                    owner,
                    accepted_ms,
                    call: Arc::new(call),
                    errors: Vec::new(),
                    waiting: false,
                    callback,
                },
            );
        }
        if let Some((key, fingerprint)) = key {
            self.keys.insert(key, (id.clone(), fingerprint));
        }
        self.running.fetch_add(1, Ordering::AcqRel);
        let this = self.clone();
        tokio::spawn(async move {
            let msg = Arc::new(msg);
            let hold = tokio::spawn(queue::keep_alive(msg.clone(), queue.ack_wait_s()));
            let result = attempt(&host, run).await;
            if let Some(tries) = this.settle(&*host, &id, 0, result) {
                this.clone().drive(id.clone(), tries, host).await;
            }
            hold.abort();
            let Some(f) = this.finished(&id) else {
                // The node stopped between tries: the queue delivers the call again.
                return;
            };
            if let Err(e) = queue.finish(&id, f.record(&id)).await {
                tracing::warn!(activation = id, error = %e, "queue: the ending was not written; the call will be delivered again");
                return;
            }
            if let Err(e) = msg.double_ack().await {
                tracing::warn!(activation = id, error = %e, "queue: the call was not acknowledged; it may run again");
            }
        });
    }

    /// The node's host now, once attached.
    pub fn host(&self) -> Option<Arc<dyn Host>> {
        (self.node.get()?)()
    }

    /// The node's host now (a reload may have replaced `fallback`, the one that took the
    /// call); `None` once the node stopped: the call stays in the journal for its restart.
    fn current(&self, fallback: &Arc<dyn Host>) -> Option<Arc<dyn Host>> {
        match self.node.get() {
            Some(current) => current(),
            // Not attached: a node state served without a handle (tests).
            None => Some(fallback.clone()),
        }
    }

    /// Tries the pending call `id`, which failed `tries` times already, until it ends.
    async fn drive(self: Arc<Self>, id: String, mut tries: u32, fallback: Arc<dyn Host>) {
        loop {
            let Some(host) = self.current(&fallback) else {
                return;
            };
            if tries > 0 {
                let wait = host.settings().backoff_before(tries + 1);
                drop(host);
                tokio::time::sleep(wait).await;
            }
            let Some(host) = self.current(&fallback) else {
                return;
            };
            let saved = match self.pending.lock().get_mut(&id) {
                Some(p) => {
                    p.waiting = false;
                    p.call.clone()
                }
                None => return,
            };
            let result = match saved.to_call() {
                Some(call) => attempt(&host, call).await,
                None => Err(ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "damaged_record",
                    "the journal's record of this call could not be read back",
                )),
            };
            match self.settle(&*host, &id, tries, result) {
                Some(t) => tries = t,
                None => return,
            }
        }
    }

    /// Records a try's result: the call's end (`None`), or the count of failed tries when it
    /// is to be tried again.
    fn settle(
        self: &Arc<Self>,
        host: &dyn Host,
        id: &str,
        tries: u32,
        result: Result<Stored, ApiError>,
    ) -> Option<u32> {
        let settings = host.settings();
        let metrics = host.metrics();
        let now = now_ms();
        let (answer, dead) = match result {
            Ok(answer) => (answer, false),
            Err(e) => {
                let error = SavedError::of(&e, now);
                let mut pending = self.pending.lock();
                let p = pending.get_mut(id)?;
                p.errors.push(error.clone());
                let tries = tries + 1;
                let retry_on_error = host.retry_on_error(&p.function);
                let young = now.saturating_sub(p.accepted_ms) < settings.max_age_s * 1000;
                if retryable(&e, retry_on_error) && tries < settings.max_attempts && young {
                    p.waiting = true;
                    let function = p.function.clone();
                    drop(pending);
                    if let Some(j) = &self.journal {
                        j.write(&Record::Attempt {
                            id: id.to_owned(),
                            error,
                        });
                    }
                    metrics.activation(&function, "retried");
                    tracing::info!(activation = id, function, tries, error = %e, "async call failed; trying again after the backoff");
                    return Some(tries);
                }
                (Stored::from_error(&e), true)
            }
        };
        // Held until the answer is kept: a reader never finds the call in neither place (seen:
        // `GET /activations/ID` answering 404 right after a retry by hand ran).
        let mut pending = self.pending.lock();
        let p = pending.remove(id)?;
        self.running.fetch_sub(1, Ordering::AcqRel);
        let retention = match dead {
            true => settings.dead_letter_retention_s,
            false => settings.retention_s,
        };
        let keep_until_ms = now + retention * 1000;
        if let Some(j) = &self.journal {
            j.write(&Record::Finished {
                id: id.to_owned(),
                function: p.function.clone(),
                owner: p.owner.clone(),
                accepted_ms: p.accepted_ms,
                finished_ms: now,
                keep_until_ms,
                answer: SavedAnswer::of(&answer),
                attempts: p.errors.clone(),
                call: dead.then(|| (*p.call).clone()),
                callback: p.callback.clone(),
            });
        }
        if dead {
            metrics.activation(&p.function, "dead_lettered");
            tracing::warn!(
                activation = id,
                function = p.function,
                tries = p.errors.len(),
                "async call dead-lettered"
            );
        }
        let f = Arc::new(Finished {
            function: p.function,
            owner: p.owner,
            accepted_ms: p.accepted_ms,
            finished_ms: now,
            answer,
            errors: p.errors,
            keep_until: at_ms(keep_until_ms),
            dead: dead.then_some(p.call),
            callback: p.callback,
        });
        if f.callback.is_some() {
            self.post(id.to_owned(), f.clone());
        }
        match dead {
            true => self.dead.insert(id.to_owned(), f),
            false => self.answers.insert(id.to_owned(), f),
        }
        drop(pending);
        None
    }

    /// Posts finished call `id`'s answer to its callback URL in the background; once delivered,
    /// the journal says so (else a restart posts it again).
    fn post(self: &Arc<Self>, id: String, f: Arc<Finished>) {
        let Some(url) = f.callback.clone() else {
            return;
        };
        let this = self.clone();
        tokio::spawn(async move {
            let client = this.callbacks.get_or_init(callback::client);
            if callback::deliver(client, &url, &id, &f.function, &f.answer).await {
                if let Some(j) = &this.journal {
                    j.write(&Record::Delivered { id });
                }
            }
        });
    }

    /// The answer of activation `id`: 202 while it runs, then the call's own answer (a dead
    /// letter's: its last error). `reader` is the caller's key id; `admin` callers read every
    /// activation.
    /// With the fleet's queue, an activation this node does not hold is read from there.
    pub async fn get(
        &self,
        id: &str,
        reader: Option<&str>,
        admin: bool,
    ) -> Result<Response<Body>, ApiError> {
        let visible =
            |owner: &Option<String>| admin || owner.is_none() || owner.as_deref() == reader;
        let running = self
            .pending
            .lock()
            .get(id)
            .is_some_and(|p| visible(&p.owner));
        if running {
            return Ok(still_running(id));
        }
        if let Some(f) = self.finished(id).filter(|f| visible(&f.owner)) {
            return Ok(f.answer.response(false));
        }
        let Some(queue) = self.queue.get() else {
            return Err(self.unknown(id));
        };
        match queue.entry(id).await {
            Some(queue::Entry::Waiting { owner, .. }) if visible(&owner) => Ok(still_running(id)),
            Some(queue::Entry::Ended { record }) => match *record {
                Record::Finished {
                    owner,
                    answer,
                    keep_until_ms,
                    ..
                } if visible(&owner) && keep_until_ms > now_ms() => answer
                    .to_stored()
                    .map(|a| a.response(false))
                    .ok_or_else(|| self.unknown(id)),
                _ => Err(self.unknown(id)),
            },
            _ => Err(self.unknown(id)),
        }
    }

    fn finished(&self, id: &str) -> Option<Arc<Finished>> {
        self.answers.get(id).or_else(|| self.dead.get(id))
    }

    fn unknown(&self, id: &str) -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_activation",
            format!("no activation {id:?} on this node (answers are kept for their retention, [activations] retention_s)"),
        )
    }

    /// Every activation this node keeps (only dead letters with `failed_only`), newest first.
    pub fn list(&self, failed_only: bool) -> Vec<serde_json::Value> {
        let mut out: Vec<(u64, serde_json::Value)> = Vec::new();
        if !failed_only {
            for (id, p) in self.pending.lock().iter() {
                out.push((p.accepted_ms, pending_summary(id, p)));
            }
            for (id, f) in self.answers.iter() {
                out.push((f.accepted_ms, finished_summary(&id, &f)));
            }
        }
        for (id, f) in self.dead.iter() {
            out.push((f.accepted_ms, finished_summary(&id, &f)));
        }
        out.sort_by_key(|e| std::cmp::Reverse(e.0));
        out.into_iter().map(|(_, v)| v).collect()
    }

    /// One activation with every try's error.
    pub fn show(&self, id: &str) -> Result<serde_json::Value, ApiError> {
        if let Some(p) = self.pending.lock().get(id) {
            let mut v = pending_summary(id, p);
            v["attempts"] = errors_json(&p.errors);
            return Ok(v);
        }
        let f = self.finished(id).ok_or_else(|| self.unknown(id))?;
        let mut v = finished_summary(id, &f);
        v["attempts"] = errors_json(&f.errors);
        v["answer"] = serde_json::json!({
            "status": f.answer.status.as_u16(),
            "body": String::from_utf8_lossy(&f.answer.body[..f.answer.body.len().min(4096)]),
        });
        Ok(v)
    }

    /// Puts dead letter `id` back to run (its tries count from zero again).
    pub async fn retry(
        self: &Arc<Self>,
        host: Arc<dyn Host>,
        id: &str,
    ) -> Result<Response<Body>, ApiError> {
        let f = self.dead.get(id).ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "unknown_dead_letter",
                format!("no dead-lettered activation {id:?} on this node"),
            )
        })?;
        let call = f.dead.clone().ok_or_else(|| self.unknown(id))?;
        if self.running.fetch_add(1, Ordering::AcqRel) >= MAX_RUNNING {
            self.running.fetch_sub(1, Ordering::AcqRel);
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "overloaded",
                "too many asynchronous calls are waiting or running; retry later",
            )
            .retry_after(1));
        }
        if let Some(journal) = &self.journal {
            let record = Record::Accepted {
                id: id.to_owned(),
                accepted_ms: now_ms(),
                owner: f.owner.clone(),
                key: None,
                call: (*call).clone(),
                callback: f.callback.clone(),
            };
            if let Err(e) = journal.write_synced(&record).await {
                self.running.fetch_sub(1, Ordering::AcqRel);
                return Err(not_durable(&e));
            }
        }
        self.dead.invalidate(id);
        self.pending.lock().insert(
            id.to_owned(),
            Pending {
                function: f.function.clone(),
                owner: f.owner.clone(),
                accepted_ms: now_ms(),
                call,
                errors: Vec::new(),
                waiting: true,
                callback: f.callback.clone(),
            },
        );
        let (this, task_id) = (self.clone(), id.to_owned());
        tokio::spawn(async move { this.drive(task_id, 0, host).await });
        Ok(accepted(id, false))
    }

    /// Sets the gauges of waiting and running calls and the oldest one's age, per function.
    pub fn report(&self, metrics: &NodeMetrics) {
        let now = now_ms();
        let mut per: HashMap<&str, (u64, u64, u64)> = HashMap::new();
        let pending = self.pending.lock();
        for p in pending.values() {
            let e = per.entry(p.function.as_str()).or_default();
            match p.waiting {
                true => e.0 += 1,
                false => e.1 += 1,
            }
            e.2 = e.2.max(now.saturating_sub(p.accepted_ms));
        }
        // A function whose calls all ended reads 0, not its last count.
        let mut reported = self.reported.lock();
        for gone in reported.iter().filter(|f| !per.contains_key(f.as_str())) {
            metrics.activations_now(gone, 0, 0, Duration::ZERO);
        }
        reported.clear();
        for (function, (waiting, running, oldest)) in per {
            metrics.activations_now(function, waiting, running, Duration::from_millis(oldest));
            reported.push(function.to_owned());
        }
    }
}

/// The `202` of an activation that has not ended.
fn still_running(id: &str) -> Response<Body> {
    let mut resp = (
        StatusCode::ACCEPTED,
        Json(serde_json::json!({"activationId": id, "status": "running"})),
    )
        .into_response();
    resp.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    resp
}

impl Finished {
    /// The journal's (and the queue's) record of this ending.
    fn record(&self, id: &str) -> Record {
        Record::Finished {
            id: id.to_owned(),
            function: self.function.clone(),
            owner: self.owner.clone(),
            accepted_ms: self.accepted_ms,
            finished_ms: self.finished_ms,
            keep_until_ms: self
                .keep_until
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            answer: SavedAnswer::of(&self.answer),
            attempts: self.errors.clone(),
            call: self.dead.as_ref().map(|c| (**c).clone()),
            callback: self.callback.clone(),
        }
    }
}

/// One try: the call's answer, collected, or the error the client would have got.
async fn attempt(host: &Arc<dyn Host>, call: Call) -> Result<Stored, ApiError> {
    let resp = host.clone().run(call).await?;
    Stored::collect(resp, 0).await.map_err(|_| {
        ApiError::new(
            StatusCode::BAD_GATEWAY,
            "backend_failed",
            "the answer was cut off",
        )
    })
}

fn ms_text(ms: u64) -> String {
    humantime::format_rfc3339_millis(at_ms(ms)).to_string()
}

fn pending_summary(id: &str, p: &Pending) -> serde_json::Value {
    serde_json::json!({
        "id": id,
        "function": p.function,
        "status": if p.waiting { "waiting" } else { "running" },
        "accepted": ms_text(p.accepted_ms),
        "tries": p.errors.len() + usize::from(!p.waiting),
    })
}

fn finished_summary(id: &str, f: &Finished) -> serde_json::Value {
    let tries = f.errors.len() + usize::from(f.dead.is_none());
    serde_json::json!({
        "id": id,
        "function": f.function,
        "status": if f.dead.is_some() { "failed" } else { "done" },
        "accepted": ms_text(f.accepted_ms),
        "finished": ms_text(f.finished_ms),
        "tries": tries,
        "answer_status": f.answer.status.as_u16(),
        "last_error": f.errors.last().map(|e| format!("{} {}: {}", e.status, e.code, e.message)),
    })
}

fn errors_json(errors: &[SavedError]) -> serde_json::Value {
    errors
        .iter()
        .map(|e| {
            serde_json::json!({
                "at": ms_text(e.at_ms),
                "status": e.status,
                "code": e.code,
                "message": e.message,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests;
