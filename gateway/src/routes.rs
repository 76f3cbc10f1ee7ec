//! The HTTP API of a gateway: `/fn/{name}` and the operational endpoints.
//!
//! A call, top-down in [`call_function`]: method and name checks, the client's rate limit, the
//! caller's API key (before any handover, so a `307` never tells the topology to a stranger)
//! and its rate limit, the client's location, the routing decision (serve here or `307`), the
//! body, then [`invoke::run`] (directly, through the idempotency cache, or in the background
//! for `Prefer: respond-async`). One layer, [`guard`], wraps every route: header limits
//! (`431`) and [`body::finish_unread`], which lets HTTP/2 clients receive every early answer.
//! The server runs it all as an [`Api`], which hands function calls to their handler without
//! the router.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, Method, Request, Response, StatusCode, Uri};
use axum::middleware::{from_fn_with_state, Next};
use axum::response::IntoResponse;
use axum::routing::{any, get};
use axum::{Extension, Json, Router};
use geofaas_config::function::valid_function_name;
use geofaas_config::Role;
use serde_json::json;
use tower::ServiceExt as _;
use tracing::Instrument as _;

use geofaas_functions::HttpRequest;

use crate::access::Caller;
use crate::body;
use crate::error::ApiError;
use crate::geo::{self, ClientLocation, Source};
use crate::headers::name::{REQUEST_ID, SERVED_BY};
use crate::headers::{self, HeaderLimits};
use crate::idempotency;
use crate::invoke::{self, Call};
use crate::node::{Live, NodeState, Place};
use crate::placement;
use crate::routing::{self, Route};

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
        .route(crate::loads::LOAD_PATH, axum::routing::post(load_report))
        .merge(crate::deploy::admin::routes())
        .merge(crate::activations::admin::routes())
        .merge(crate::ui::routes())
        .merge(crate::logs::routes())
        .merge(crate::profiles::routes())
        .merge(crate::prewarm::warm::routes())
        .fallback(no_route)
        .with_state(live)
        .layer(from_fn_with_state(limits, guard))
}

/// The gateway's HTTP API as the server runs it: a function call (`/fn/{name}` with a plain
/// name) goes straight to its handler behind the same [`guard`], everything else through the
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
            return guarded(self.limits, req, |req| call(live, name, Some(client), req)).await;
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

/// The path after `/fn/{name}` of a call's URI, as sent (`/` when there is none).
fn sub_path(path: &str) -> &str {
    path.strip_prefix("/fn/")
        .and_then(|rest| rest.find('/').map(|i| &rest[i..]))
        .unwrap_or("/")
}

/// The methods a function may be called with.
fn callable(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET
            | Method::HEAD
            | Method::POST
            | Method::PUT
            | Method::PATCH
            | Method::DELETE
            | Method::OPTIONS
    )
}

/// The HTTP side of the call as the function sees it.
fn http_request(parts: &Parts, client: Option<SocketAddr>) -> HttpRequest {
    let host = parts
        .uri
        .authority()
        .map(|a| a.as_str())
        .or_else(|| {
            parts
                .headers
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
        })
        .unwrap_or("localhost");
    let path_and_query = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    HttpRequest {
        method: parts.method.clone(),
        path: sub_path(parts.uri.path()).to_owned(),
        query: parts.uri.query().unwrap_or_default().to_owned(),
        url: format!("https://{host}{path_and_query}"),
        source_ip: client.map(|a| a.ip()),
    }
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

/// `/fn/{name}`: the request id in the answer, and one debug-level span per call (node,
/// function, request id). The warnings a call can log name its function and request id
/// themselves, so the default `info` level pays nothing per call (an info span cost about 10 k
/// instructions, 12 %, of a proxied call: `GW_LOG=info bench/gateway/instructions.sh`).
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
    call(live, name, client.map(|Extension(ClientAddr(a))| a), req).await
}

/// A call of function `name` (as the client spelled it: checked in [`handle_call`]).
async fn call(
    live: Arc<Live>,
    name: String,
    client: Option<SocketAddr>,
    req: Request<Body>,
) -> Response<Body> {
    let state = live.current();
    let received = Instant::now();
    let (parts, body) = req.into_parts();
    let head = parts.method == Method::HEAD;
    let control = headers::Control::scan(&parts.headers);
    let request_id = headers::request_id(control.request_id);
    let span = tracing::debug_span!("call", node = %state.place.id, function = %name.escape_debug(), request_id = %String::from_utf8_lossy(request_id.as_bytes()));
    let mut seen = crate::events::Seen::new(&state.telemetry.events, &name);
    let mut preconnect = None;
    let call = handle_call(
        state.clone(),
        name,
        client,
        &parts,
        control,
        body,
        received,
        request_id.clone(),
        &mut seen,
        &mut preconnect,
    );
    let mut resp = call
        .instrument(span)
        .await
        .unwrap_or_else(IntoResponse::into_response);
    if head {
        // The answer to a HEAD has no body, whatever the function produced (h2 would send it).
        *resp.body_mut() = Body::empty();
    }
    crate::prewarm::preconnect::add(&mut resp, preconnect);
    // The call's one event and latency sample (`/events`, `/ui/state`).
    seen.publish(&state, received, &request_id, &resp);
    resp.headers_mut()
        .insert(REQUEST_ID, headers::never_indexed(request_id));
    resp
}

// `preconnect` is filled in for the answer, whichever way it is built below.
#[allow(clippy::too_many_arguments)]
async fn handle_call(
    state: Arc<NodeState>,
    name: String,
    client: Option<SocketAddr>,
    parts: &Parts,
    control: headers::Control<'_>,
    body: Body,
    received: Instant,
    request_id: HeaderValue,
    seen: &mut crate::events::Seen,
    preconnect: &mut Option<HeaderValue>,
) -> Result<Response<Body>, ApiError> {
    if !callable(&parts.method) {
        return Err(ApiError::method_not_allowed());
    }
    if !valid_function_name(&name) {
        return Err(ApiError::bad_function_name());
    }
    if let Some(addr) = client {
        state.intake.limits.client(addr.ip())?;
    }
    let signed = signed_by_peer(&state, &parts.method, &parts.uri, control.offload)?;
    let caller = if signed {
        Caller::Node
    } else {
        state.intake.access.call(&parts.headers, &name)?
    };
    if let Some(id) = caller.key_id() {
        state.intake.limits.key(id)?;
    }
    let path_and_query = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    let location = locate(&state, parts, &control, client, signed)?;
    seen.located(location.as_ref(), signed);
    let pinned = signed || retried_at_the_cloud(&state.place, control.retry);
    let route = placement::route(
        &state.place.map,
        &state.place.id,
        location.as_ref(),
        pinned,
        |id| state.links.health.as_ref().is_none_or(|p| p.is_up(id)),
    );
    let route_time = received.elapsed();
    if let Route::Handover(target) = route {
        state.telemetry.metrics.handover(&target.id);
        seen.handed_over(&target.id);
        return handover(
            &state.place,
            &routing::handover_url(target, &path_and_query),
        );
    }
    // Served here: track the client, warm the function where it is heading and hint the
    // client to connect there (`prewarm`).
    let (key_id, loc) = (caller.key_id(), location.as_ref());
    *preconnect = crate::prewarm::observe_call(
        &state,
        control.client_id,
        key_id,
        &name,
        loc,
        signed,
        received,
    );
    let idempotency_key = idempotency::key(control.idempotency_key, &name)?;
    let body = body::read(
        &parts.headers,
        body,
        state.place.topology.gateway.max_body_bytes,
        Duration::from_millis(state.place.topology.limits.body_timeout_ms),
    )
    .await?;
    let idempotency_key =
        idempotency_key.map(|k| (k, idempotency::fingerprint(&path_and_query, &body)));
    let call = Call {
        function: name,
        http: Arc::new(http_request(parts, client)),
        method: parts.method.clone(),
        path_and_query,
        headers: function_headers(&parts.headers, signed),
        context: geo::context(here(&state.place), location.as_ref(), &request_id),
        body,
        location: location.map(|l| l.point),
        received,
        route_time,
        request_id,
        pinned: signed,
        caller: caller_hash(control.client_id, caller.key_id(), client),
    };
    if control.prefer && crate::activations::wants_async(&parts.headers) {
        let owner = caller.key_id().map(str::to_owned);
        let activations = state.kept.activations.clone();
        return activations
            .start(state, call, owner.as_deref(), idempotency_key)
            .await;
    }
    match idempotency_key {
        Some((key, request)) => {
            let run = async { invoke::run(&state, call).await.into_result() };
            let retry = retried_at_the_cloud(&state.place, control.retry);
            Box::pin(state.kept.idempotency.run(key, request, retry, run)).await
        }
        None => Ok(invoke::run(&state, call).await.into_response()),
    }
}

/// The client's headers the function receives; the trigger headers only from another node
/// (an offloaded cron call), never from a client.
fn function_headers(sent: &HeaderMap, signed: bool) -> HeaderMap {
    let mut out = headers::for_function(sent);
    if !signed {
        out.remove(geofaas_config::headers::TRIGGER);
        out.remove(geofaas_config::headers::TICK);
        out.remove(geofaas_config::headers::SUBJECT);
    }
    out
}

/// Who calls, as a stable hash for percentage rollouts: the client's `X-Client-Id`, else its
/// API key, else its address.
fn caller_hash(
    client_id: Option<&HeaderValue>,
    key: Option<&str>,
    client: Option<SocketAddr>,
) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = fnv::FnvHasher::default();
    match (client_id, key, client) {
        (Some(id), _, _) => id.as_bytes().hash(&mut h),
        (None, Some(key), _) => key.hash(&mut h),
        (None, None, Some(addr)) => addr.ip().hash(&mut h),
        (None, None, None) => {}
    }
    h.finish()
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

/// The client's location: its headers (`X-Client-Location`, else `Sec-CH-Geohash`), else its
/// address in the GeoIP database, else unknown. A call signed by a peer carries the location
/// that node found ([`geo::from_peer`]): the address here is the peer's, not the client's.
fn locate(
    state: &NodeState,
    parts: &Parts,
    control: &headers::Control<'_>,
    client: Option<SocketAddr>,
    signed: bool,
) -> Result<Option<ClientLocation>, ApiError> {
    if signed {
        return Ok(geo::from_peer(&parts.headers));
    }
    if let Some(l) = routing::header_location(control)? {
        return Ok(Some(l));
    }
    Ok(match (&state.place.locator, client) {
        (Some(loc), Some(addr)) => loc
            .locate(addr.ip())
            .map(|p| ClientLocation::point(p, Source::GeoIp, None)),
        _ => None,
    })
}

/// This node as a function's geo context names it.
pub(crate) fn here(place: &Place) -> geo::Here<'_> {
    geo::Here {
        id: &place.id_header,
        role: place.role,
        location: place.map.node(&place.id).map(|n| n.location),
    }
}

fn handover(place: &Place, location: &str) -> Result<Response<Body>, ApiError> {
    Response::builder()
        .status(StatusCode::TEMPORARY_REDIRECT)
        .header(header::LOCATION, location)
        .header(SERVED_BY, place.id_header.clone())
        .body(Body::empty())
        .map_err(|_| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "could not build the redirect",
            )
        })
}

/// A client's explicit retry at the cloud, served there. Only the cloud honours it: an edge
/// serving it would serve any client outside its area.
fn retried_at_the_cloud(place: &Place, retry: Option<&HeaderValue>) -> bool {
    place.role == Role::Cloud && retry.is_some_and(|v| v == "1")
}

/// Offloaded by a peer with a valid, fresh signature: served where it lands. A signature
/// that is not one is ignored (the call is routed as a client's); a real one made at a time
/// outside the window is refused, `403 clock_skew` naming the node whose clock is off.
fn signed_by_peer(
    state: &NodeState,
    method: &Method,
    uri: &Uri,
    offload: Option<&HeaderValue>,
) -> Result<bool, ApiError> {
    let (Some(key), Some(v)) = (&state.links.key, offload) else {
        return Ok(false);
    };
    let checked = v
        .to_str()
        .map_err(|_| crate::auth::Refusal::Signature)
        .and_then(|v| key.check(v, method.as_str(), uri.path()));
    match checked {
        Ok(from) => {
            tracing::debug!(from, "serving an offloaded call");
            Ok(true)
        }
        Err(crate::auth::Refusal::Signature) => {
            state.telemetry.metrics.signature_refused("signature");
            tracing::warn!(
                path = %uri.path().escape_debug(),
                "offload credential did not verify; routing the call normally"
            );
            Ok(false)
        }
        Err(crate::auth::Refusal::Clock { node, skew_s }) => {
            state.telemetry.metrics.signature_refused("clock");
            let ahead = if skew_s > 0 { "ahead of" } else { "behind" };
            tracing::error!(
                node = %node,
                skew_s,
                "node {node}'s clock is {} s {ahead} this node's: its signed calls are refused (window ±60 s); check both clocks (NTP)",
                skew_s.unsigned_abs()
            );
            Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "clock_skew",
                format!(
                    "the call was signed by node {node:?} at a time {} s {ahead} node {:?}'s clock, outside the ±60 s window: refused; check both nodes' clocks (NTP)",
                    skew_s.unsigned_abs(),
                    state.place.id
                ),
            ))
        }
    }
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

async fn registry(
    State(live): State<Arc<Live>>,
    headers: HeaderMap,
) -> Result<Json<serde_json::Value>, ApiError> {
    let state = live.current();
    state.intake.access.admin(&headers)?;
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
    Ok(Json(
        json!({"self": state.place.id, "ready": state.intake.ready.load(Ordering::Relaxed), "nodes": nodes}),
    ))
}

/// `POST /node/load`: another node's load report ([`crate::loads::receive`]).
async fn load_report(
    State(live): State<Arc<Live>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<StatusCode, ApiError> {
    crate::loads::receive(&live.current(), &headers, &body)?;
    Ok(StatusCode::NO_CONTENT)
}

async fn metrics(State(live): State<Arc<Live>>, headers: HeaderMap) -> Response<Body> {
    let state = live.current();
    if let Err(e) = state.intake.access.admin(&headers) {
        return e.into_response();
    }
    crate::prewarm::publish(&state);
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
