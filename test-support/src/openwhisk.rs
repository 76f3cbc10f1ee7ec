//! A fake Apache OpenWhisk controller, faithful to the REST API in OpenWhisk's
//! `apiv1swagger.json` and to what a real controller sends:
//!
//! - every call needs HTTP Basic auth with the `uuid:key` API key, else `401`
//!   `{"error":"The supplied authentication is invalid","code":…}`; the namespace `_` stands for
//!   the key's own namespace, another one gets `403`;
//! - `GET /api/v1/namespaces` lists the key's namespaces;
//! - `GET /api/v1/namespaces/{ns}/actions` lists actions as `EntityBrief`s (a packaged action's
//!   `namespace` is `ns/pkg`);
//! - `POST /api/v1/namespaces/{ns}/actions/[{pkg}/]{name}?blocking=&result=&timeout=` invokes:
//!   non-blocking → `202 {"activationId"}`; blocking → `200` with the activation (or only its
//!   result when `result=true`), `502` when the action failed (application error), `202
//!   {"activationId"}` when the blocking wait (`timeout` ms, at most 60 000) ran out, `404` for an
//!   unknown action, `429` when throttled, `503` when the system is overloaded;
//! - `GET /api/v1/namespaces/{ns}/activations/{id}`: `404` until the activation has finished,
//!   then `200` with the activation record (`response: {status, success, result}`);
//! - `PUT /api/v1/namespaces/{ns}/actions/[{pkg}/]{name}?overwrite=` creates or replaces an
//!   action and `GET` on it shows it; such actions run for real (see [`DeployedAction`]).
//!
//! Every invoke reply carries `x-openwhisk-activation-id`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine as _;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::server::TestServer;

#[path = "openwhisk_actions.rs"]
mod actions;
pub use actions::DeployedAction;

/// The longest blocking wait a real controller grants, in milliseconds.
const MAX_BLOCKING_WAIT_MS: u64 = 60_000;

/// What a fake action does when invoked.
#[derive(Clone, Debug)]
pub enum FakeAction {
    /// Succeeds with the invocation's parameters as its result.
    Echo,
    /// Succeeds with this result.
    Reply(Value),
    /// Fails with an application error: the result is this value (e.g. `{"error": "..."}`).
    AppError(Value),
    /// Succeeds with `result` after `delay` (a blocking call past its wait gets a 202).
    Slow {
        /// How long the action runs.
        delay: Duration,
        /// Its result.
        result: Value,
    },
    /// The namespace is over its rate limit: `429`.
    Throttled,
    /// The system is overloaded: `503`.
    Unavailable,
    /// The controller never answers.
    Hang,
    /// Created or replaced through the API (`PUT`): run for real (see [`DeployedAction`]).
    Deployed(Box<DeployedAction>),
}

#[derive(Debug)]
struct Inner {
    actions: HashMap<String, FakeAction>,
    activations: HashMap<String, Value>,
    invocations: u64,
}

#[derive(Debug)]
struct Ctx {
    namespace: String,
    auth: String,
    inner: Mutex<Inner>,
    next_id: AtomicU64,
    max_wait_ms: AtomicU64,
}

type Shared = Arc<Ctx>;

/// A running fake OpenWhisk controller.
#[derive(Debug)]
pub struct FakeOpenwhisk {
    server: TestServer,
    ctx: Shared,
}

impl FakeOpenwhisk {
    /// Starts a controller for namespace `namespace`, accepting the API key `api_key`
    /// (`uuid:key`). Action names are `name` or `pkg/name`.
    pub async fn start(
        namespace: &str,
        api_key: &str,
        actions: impl IntoIterator<Item = (impl Into<String>, FakeAction)>,
    ) -> anyhow::Result<Self> {
        let ctx = Arc::new(Ctx {
            namespace: namespace.to_owned(),
            auth: format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(api_key)
            ),
            inner: Mutex::new(Inner {
                actions: actions.into_iter().map(|(n, a)| (n.into(), a)).collect(),
                activations: HashMap::new(),
                invocations: 0,
            }),
            next_id: AtomicU64::new(1),
            max_wait_ms: AtomicU64::new(MAX_BLOCKING_WAIT_MS),
        });
        let server = TestServer::start(router(ctx.clone())).await?;
        Ok(Self { server, ctx })
    }

    /// The API host (`http://127.0.0.1:<port>`).
    pub fn api_host(&self) -> String {
        self.server.url()
    }

    /// Kills the controller: the port refuses connections.
    pub fn stop(&mut self) {
        self.server.stop();
    }

    /// Caps the blocking wait (a real controller's is 60 s), so tests reach the 202 quickly.
    pub fn set_max_blocking_wait(&self, wait: Duration) {
        let ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
        self.ctx.max_wait_ms.store(ms, Ordering::Relaxed);
    }

    /// The action `name` (`pkg/name` in a package) as the last `PUT` created it.
    pub fn deployed(&self, name: &str) -> Option<DeployedAction> {
        match lock(&self.ctx).actions.get(name) {
            Some(FakeAction::Deployed(action)) => Some((**action).clone()),
            _ => None,
        }
    }

    /// Number of invoke requests that passed authentication.
    pub fn invocations(&self) -> u64 {
        lock(&self.ctx).invocations
    }
}

fn lock(ctx: &Ctx) -> MutexGuard<'_, Inner> {
    ctx.inner
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn router(ctx: Shared) -> Router {
    Router::new()
        .route("/api/v1/namespaces", get(namespaces))
        .route("/api/v1/namespaces/{ns}/actions", get(list_actions))
        .route(
            "/api/v1/namespaces/{ns}/actions/{*action}",
            post(invoke).put(actions::put).get(actions::get),
        )
        .route("/api/v1/namespaces/{ns}/activations/{id}", get(activation))
        .with_state(ctx)
}

fn error(status: StatusCode, message: &str) -> Response {
    (status, Json(json!({"error": message, "code": "fake0000"}))).into_response()
}

/// Checks credentials and the namespace; `Some` is the rejection to send.
fn reject(ctx: &Ctx, headers: &HeaderMap, ns: Option<&str>) -> Option<Response> {
    let given = headers.get("authorization").and_then(|v| v.to_str().ok());
    if given != Some(ctx.auth.as_str()) {
        return Some(error(
            StatusCode::UNAUTHORIZED,
            "The supplied authentication is invalid",
        ));
    }
    match ns {
        Some(ns) if ns != "_" && ns != ctx.namespace => Some(error(
            StatusCode::FORBIDDEN,
            "The supplied authentication is not authorized to access this resource.",
        )),
        _ => None,
    }
}

async fn namespaces(State(ctx): State<Shared>, headers: HeaderMap) -> Response {
    if let Some(reply) = reject(&ctx, &headers, None) {
        return reply;
    }
    Json(json!([ctx.namespace])).into_response()
}

async fn list_actions(
    State(ctx): State<Shared>,
    Path(ns): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Some(reply) = reject(&ctx, &headers, Some(&ns)) {
        return reply;
    }
    let mut names: Vec<String> = lock(&ctx).actions.keys().cloned().collect();
    names.sort();
    let briefs: Vec<Value> = names
        .iter()
        .map(|full| {
            let (namespace, name) = match full.split_once('/') {
                Some((pkg, name)) => (format!("{}/{pkg}", ctx.namespace), name),
                None => (ctx.namespace.clone(), full.as_str()),
            };
            json!({"namespace": namespace, "name": name, "version": "0.0.1", "publish": false})
        })
        .collect();
    Json(Value::Array(briefs)).into_response()
}

#[derive(Deserialize)]
struct InvokeQuery {
    blocking: Option<String>,
    result: Option<String>,
    timeout: Option<u64>,
}

async fn invoke(
    State(ctx): State<Shared>,
    Path((ns, action)): Path<(String, String)>,
    Query(query): Query<InvokeQuery>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Some(reply) = reject(&ctx, &headers, Some(&ns)) {
        return reply;
    }
    let behaviour = {
        let mut inner = lock(&ctx);
        inner.invocations += 1;
        inner.actions.get(&action).cloned()
    };
    let Some(behaviour) = behaviour else {
        return error(
            StatusCode::NOT_FOUND,
            "The requested resource does not exist.",
        );
    };
    let params: Value = if body.is_empty() {
        json!({})
    } else {
        match serde_json::from_slice(&body) {
            Ok(v @ Value::Object(_)) => v,
            _ => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "The request content was malformed.",
                )
            }
        }
    };
    let id = format!("{:032x}", ctx.next_id.fetch_add(1, Ordering::Relaxed));
    let outcome = match behaviour {
        FakeAction::Throttled => {
            return error(
                StatusCode::TOO_MANY_REQUESTS,
                "Too many requests in the last minute (count: 61, allowed: 60).",
            )
        }
        FakeAction::Unavailable => {
            return error(
                StatusCode::SERVICE_UNAVAILABLE,
                "System is overloaded, try again later.",
            )
        }
        FakeAction::Hang => return std::future::pending().await,
        FakeAction::Echo => (Duration::ZERO, true, params),
        FakeAction::Reply(v) => (Duration::ZERO, true, v),
        FakeAction::AppError(v) => (Duration::ZERO, false, v),
        FakeAction::Slow { delay, result } => (delay, true, result),
        FakeAction::Deployed(action) => {
            if let Some(reply) = actions::refuse_overrides(&action, &params) {
                return reply;
            }
            let (success, result) = actions::run(&action, params).await;
            (Duration::ZERO, success, result)
        }
    };
    let blocking = query.blocking.as_deref() == Some("true");
    let only_result = query.result.as_deref() == Some("true");
    let max_wait = ctx.max_wait_ms.load(Ordering::Relaxed);
    let wait = Duration::from_millis(query.timeout.unwrap_or(max_wait).min(max_wait));
    let record = activation_record(&ctx.namespace, &action, &id, outcome.1, outcome.2);
    let finish = finish_later(ctx.clone(), id.clone(), record.clone(), outcome.0);
    if !blocking || outcome.0 > wait {
        if blocking {
            tokio::time::sleep(wait).await;
        }
        return accepted(&id);
    }
    let _ = finish.await;
    let status = if outcome.1 {
        StatusCode::OK
    } else {
        StatusCode::BAD_GATEWAY
    };
    let payload = if only_result {
        record["response"]["result"].clone()
    } else {
        record
    };
    with_id(&id, (status, Json(payload)).into_response())
}

/// Stores the finished activation after `delay`, as the invoker would.
fn finish_later(
    ctx: Shared,
    id: String,
    record: Value,
    delay: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        lock(&ctx).activations.insert(id, record);
    })
}

fn accepted(id: &str) -> Response {
    with_id(
        id,
        (StatusCode::ACCEPTED, Json(json!({"activationId": id}))).into_response(),
    )
}

fn with_id(id: &str, mut response: Response) -> Response {
    if let Ok(value) = id.parse() {
        response
            .headers_mut()
            .insert("x-openwhisk-activation-id", value);
    }
    response
}

fn activation_record(ns: &str, action: &str, id: &str, success: bool, result: Value) -> Value {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    let (status, code) = if success {
        ("success", 0)
    } else {
        ("application error", 1)
    };
    json!({
        "namespace": ns,
        "name": action.rsplit('/').next().unwrap_or(action),
        "version": "0.0.1",
        "publish": false,
        "subject": ns,
        "activationId": id,
        "start": now,
        "end": now,
        "duration": 0,
        "response": {"status": status, "statusCode": code, "success": success, "result": result},
        "logs": [],
        "annotations": [],
    })
}

async fn activation(
    State(ctx): State<Shared>,
    Path((ns, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    if let Some(reply) = reject(&ctx, &headers, Some(&ns)) {
        return reply;
    }
    match lock(&ctx).activations.get(&id).cloned() {
        Some(record) => Json(record).into_response(),
        None => error(
            StatusCode::NOT_FOUND,
            "The requested resource does not exist.",
        ),
    }
}
