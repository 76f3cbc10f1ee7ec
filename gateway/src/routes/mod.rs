//! The HTTP API of a gateway: `/fn/{name}` and the operational endpoints.
//!
//! A call goes to [`crate::pipeline::serve`], the data plane's phases over one per-call
//! context. One layer, `guard`, wraps every route: header limits
//! (`431`) and [`body::finish_unread`], which lets HTTP/2 clients receive every early answer.
//! The server runs it all as an [`Api`], which hands function calls to their handler without
//! the router.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, Request, Response, StatusCode, Uri};
use axum::middleware::{from_fn_with_state, Next};
use axum::response::IntoResponse;
use axum::routing::{any, get};
use axum::{Extension, Json, Router};
use serde_json::json;
use tower::ServiceExt as _;

mod node;

use crate::access::Caller;
use crate::body;
use crate::error::ApiError;
use crate::guard::Admin;
use crate::headers::{self, HeaderLimits};
use crate::node::{Live, NodeState};

/// The remote address of the connection, inserted by the server for each connection.
#[derive(Debug, Clone, Copy)]
pub struct ClientAddr(pub SocketAddr);

/// The gateway's routes over a fixed `state`.
pub fn router(state: Arc<NodeState>) -> Router {
    router_live(Live::new(state))
}

/// The gateway's routes over a state that reloads may replace. Header limits and the body
/// drain bound are taken once, here (they change with a restart).
pub fn router_live(live: Arc<Live>) -> Router {
    let limits = RequestLimits::of(&live.current());
    router_with(live, limits)
}

fn router_with(live: Arc<Live>, limits: RequestLimits) -> Router {
    Router::new()
        .route("/fn/{name}", any(call_function))
        .route("/fn/{name}/{*rest}", any(call_function))
        .route("/activations/{id}", get(activation))
        .route("/functions", get(functions))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/registry", get(registry))
        .route("/metrics", get(metrics))
        .merge(crate::admin::routes())
        .merge(crate::ui::routes())
        .merge(crate::logs::routes())
        .merge(node::routes())
        .fallback(no_route)
        .with_state(live)
        .layer(from_fn_with_state(limits, guard))
}

/// The gateway's HTTP API as the server runs it: a function call (`/fn/{name}` with a plain
/// name) goes straight to its handler behind the same `guard`, everything else through the
/// [`Router`], which answers both alike. The direct path spares every call the router's
/// matching, boxed services and request extensions (about a fifth of a proxied call's
/// allocations).
#[derive(Clone, Debug)]
pub struct Api {
    live: Arc<Live>,
    limits: RequestLimits,
    router: Router,
}

impl Api {
    /// The API over a state that reloads may replace.
    pub fn new(live: Arc<Live>) -> Self {
        let limits = RequestLimits::of(&live.current());
        Self {
            router: router_with(live.clone(), limits),
            live,
            limits,
        }
    }

    /// Answers one request from `client`.
    pub async fn serve(&self, mut req: Request<Body>, client: SocketAddr) -> Response<Body> {
        if let Some((name, _)) = function_target(req.uri().path()) {
            let (live, name) = (self.live.clone(), name.to_owned());
            return guarded(self.limits, req, |req| {
                crate::pipeline::serve(live, name, Some(client), req)
            })
            .await;
        }
        req.extensions_mut().insert(ClientAddr(client));
        match self.router.clone().oneshot(req).await {
            Ok(resp) => resp,
            Err(never) => match never {},
        }
    }
}

/// The name in `/fn/{name}[/sub/path]` when the router would pass it on unchanged (no
/// percent-encoding in the name: those take the router, which decodes them), and the path after
/// it as sent (`/` when there is none).
fn function_target(path: &str) -> Option<(&str, &str)> {
    let rest = path.strip_prefix("/fn/")?;
    let (name, sub) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, "/"),
    };
    (!name.is_empty() && !name.contains('%')).then_some((name, sub))
}

/// Limits every request is held to before and around its handler.
#[derive(Debug, Clone, Copy)]
struct RequestLimits {
    headers: HeaderLimits,
    body: usize,
}

impl RequestLimits {
    fn of(state: &NodeState) -> Self {
        let settings = &state.place.topology.gateway;
        Self {
            headers: HeaderLimits {
                total: settings.max_header_bytes,
                line: settings.max_header_line_bytes,
                count: state.place.topology.limits.max_headers,
            },
            body: settings.max_body_bytes,
        }
    }
}

/// The one layer over every route: `431` when the headers are over the limits, else the
/// handler; either way the body the answer left unread is finished in the background
/// ([`body::finish_unread`]), so HTTP/2 clients get the answer instead of a reset stream.
async fn guard(
    State(limits): State<RequestLimits>,
    req: Request<Body>,
    next: Next,
) -> Response<Body> {
    guarded(limits, req, |req| next.run(req)).await
}

/// [`guard`] around any handler.
async fn guarded<F, Fut>(limits: RequestLimits, req: Request<Body>, handler: F) -> Response<Body>
where
    F: FnOnce(Request<Body>) -> Fut,
    Fut: Future<Output = Response<Body>>,
{
    if let Err(e) = headers::check(req.headers(), limits.headers) {
        body::finish(req.into_body(), limits.body);
        return e.into_response();
    }
    body::finish_unread(limits.body, req, handler).await
}

/// `/fn/{name}` through the router (a percent-encoded name): [`crate::pipeline::serve`].
async fn call_function(
    State(live): State<Arc<Live>>,
    params: Result<Path<Vec<(String, String)>>, PathRejection>,
    client: Option<Extension<ClientAddr>>,
    req: Request<Body>,
) -> Response<Body> {
    // `{name}`, decoded; the sub-path (`{*rest}`) is read from the URI as sent.
    let name = params
        .ok()
        .and_then(|Path(p)| p.into_iter().find(|(k, _)| k == "name"))
        .map(|(_, v)| v)
        .unwrap_or_default();
    crate::pipeline::serve(live, name, client.map(|Extension(ClientAddr(a))| a), req).await
}

/// No route: `/fn/` without a name is a bad function name, the rest a `404`.
async fn no_route(uri: Uri) -> ApiError {
    if uri.path().starts_with("/fn/") {
        return ApiError::bad_function_name();
    }
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        "no such endpoint; functions are called at /fn/{name}",
    )
}

async fn activation(
    State(live): State<Arc<Live>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response<Body>, ApiError> {
    let state = live.current();
    let caller = state.intake.access.caller(&headers)?;
    let admin = state.intake.access.is_open() || matches!(caller, Caller::Key(k) if k.admin);
    state
        .kept
        .activations
        .get(&id, caller.key_id(), admin)
        .await
}

/// The topology's functions with their profiles, what this node serves, and what it knows
/// the other nodes serve.
async fn functions(State(live): State<Arc<Live>>) -> Json<serde_json::Value> {
    let state = live.current();
    let profiles: Vec<_> = state
        .place
        .topology
        .functions
        .iter()
        .map(|f| json!({"name": f.name, "profile": f}))
        .collect();
    let view = state.directory.view().await;
    Json(json!({
        "node": state.place.id,
        "functions": profiles,
        "served_here": view.served_here,
        "nodes": view.nodes,
    }))
}

async fn readyz(State(live): State<Arc<Live>>) -> impl IntoResponse {
    let state = live.current();
    if state.is_ready().await {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
    }
}

async fn registry(Admin(state): Admin) -> Result<Json<serde_json::Value>, ApiError> {
    let nodes: Vec<_> = state
        .place
        .map
        .nodes()
        .iter()
        .map(|n| {
            json!({
                "id": n.id,
                "role": n.role,
                "location": n.location,
                "area": n.area.to_wkt(),
                "public_url": n.public_url,
            })
        })
        .collect();
    // With a registry, the nodes registered there now (a far node not among them counts as down).
    let registered: Option<Vec<String>> = state
        .fleet()
        .map(|f| f.view().borrow().nodes.keys().cloned().collect());
    Ok(Json(json!({
        "self": state.place.id,
        "ready": state.intake.ready.load(Ordering::Relaxed),
        "nodes": nodes,
        "registered": registered,
    })))
}

async fn metrics(Admin(state): Admin) -> Response<Body> {
    crate::prewarm::publish(
        &state.directory,
        &state.scheduling.prewarm,
        &state.telemetry.metrics,
    );
    state.kept.activations.report(&state.telemetry.metrics);
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4"),
        )],
        state.telemetry.metrics.render(),
    )
        .into_response()
}
