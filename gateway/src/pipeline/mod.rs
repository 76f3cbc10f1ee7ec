//! The data plane: one call of `/fn/{name}`, phase by phase, over one [`CallCtx`].
//!
//! The phases, in order ([`serve`]):
//! 1. **admit**: the method and the name, the client's rate limit, a peer's signature
//!    (`auth`) or the caller's API key and its rate limit, before anything else is said (a
//!    `307` never shows the topology to a stranger);
//! 2. **locate**: the client's location (`X-Client-Location`, `Sec-CH-Geohash`, the GeoIP
//!    database, or the forwarding node's);
//! 3. **route**: served here or handed over with a `307` ([`placement::route`]); a client
//!    served here is tracked and the function warmed where it heads (`prewarm`);
//! 4. **run**: the body, then [`invoke::run`] (placement, the backends in turn, on failure the
//!    facts updated and placed again), directly, through the idempotency cache, or in the
//!    background for `Prefer: respond-async` (`activations`);
//! 5. **respond**: the platform's headers rendered from the context ([`CallCtx::finish_run`],
//!    [`CallCtx::respond`]), then every observer registered with the node sees the finished
//!    call ([`Observers`]: metrics, profiles, the call stream).

mod admit;
mod background;
mod prewarm;
#[cfg(test)]
mod tests;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::request::Parts;
use axum::http::{Method, Request, Response};
use geofaas_config::function::valid_function_name;
use tracing::Instrument as _;

pub use crate::call::{CallCtx, Done, Observer, Observers};
pub use admit::here;

use crate::access::Caller;
use crate::call::Call;
use crate::error::ApiError;
use crate::headers::{self, Control};
use crate::invoke;
use crate::node::{Live, NodeState};
use crate::routing::{self, Route};
use crate::{body, geo, idempotency, placement};

/// The request as it arrived: its head, the control headers found in it, the client's address.
struct Received<'a> {
    parts: &'a Parts,
    control: Control<'a>,
    client: Option<SocketAddr>,
}

/// A call of function `name` (as the client spelled it: checked in the admit phase), answered.
/// One debug-level span per call (node, function, request id): the warnings a call can log name
/// its function and request id themselves, so the default `info` level pays nothing per call (an
/// info span cost about 10 k instructions, 12 %, of a proxied call:
/// `GW_LOG=info bench/gateway/instructions.sh`).
pub async fn serve(
    live: Arc<Live>,
    name: String,
    client: Option<SocketAddr>,
    req: Request<Body>,
) -> Response<Body> {
    let state = live.current();
    let received = std::time::Instant::now();
    let (parts, body) = req.into_parts();
    let head = parts.method == Method::HEAD;
    let control = Control::scan(&parts.headers);
    let request_id = headers::request_id(control.request_id);
    let span = tracing::debug_span!("call", node = %state.place.id, function = %name.escape_debug(), request_id = %String::from_utf8_lossy(request_id.as_bytes()));
    let mut ctx = CallCtx::new(name, request_id, received);
    let req = Received {
        parts: &parts,
        control,
        client,
    };
    let answer = phases(&state, &mut ctx, &req, body).instrument(span).await;
    let resp = ctx.respond(answer, head);
    state.telemetry.observers.finished(&ctx, resp.status());
    resp
}

/// Admit, locate, route and run.
async fn phases(
    state: &Arc<NodeState>,
    ctx: &mut CallCtx,
    req: &Received<'_>,
    body: Body,
) -> Result<Response<Body>, ApiError> {
    let (parts, control) = (req.parts, &req.control);
    let caller = admit(state, ctx, req)?;
    ctx.location = admit::locate(state, parts, control, req.client, ctx.forwarded)?;
    let path_and_query = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let pinned = ctx.forwarded || admit::retried_at_the_cloud(&state.place, control.retry);
    let route = placement::route(
        &state.place.map,
        &state.place.id,
        ctx.location.as_ref(),
        pinned,
        |id| state.links.health.as_ref().is_none_or(|p| p.is_up(id)),
    );
    let route_time = ctx.received.elapsed();
    if let Route::Handover(target) = route {
        state.telemetry.metrics.handover(&target.id);
        ctx.handover = Some(target.id.clone());
        let to = routing::handover_url(target, path_and_query);
        return admit::handover(&state.place, &to);
    }
    // Served here: track the client, warm the function where it is heading and hint the
    // client to connect there (`prewarm`).
    ctx.preconnect = prewarm::observe(
        state,
        control.client_id,
        caller.key_id(),
        &ctx.function,
        ctx.location.as_ref(),
        ctx.forwarded,
        ctx.received,
    );
    let idempotency_key = idempotency::key(control.idempotency_key, &ctx.function)?;
    let body = body::read(
        &parts.headers,
        body,
        state.place.topology.gateway.max_body_bytes,
        Duration::from_millis(state.place.topology.limits.body_timeout_ms),
    )
    .await?;
    let idempotency_key =
        idempotency_key.map(|k| (k, idempotency::fingerprint(path_and_query, &body)));
    let call = Call {
        function: ctx.function.clone(),
        http: Arc::new(admit::http_request(parts, req.client)),
        method: parts.method.clone(),
        path_and_query: path_and_query.to_owned(),
        headers: admit::function_headers(&parts.headers, ctx.forwarded),
        context: geo::context(here(&state.place), ctx.location.as_ref(), &ctx.request_id),
        body,
        location: ctx.location.as_ref().map(|l| l.point),
        received: ctx.received,
        route_time,
        request_id: ctx.request_id.clone(),
        pinned: ctx.forwarded,
        caller: admit::caller_hash(control.client_id, caller.key_id(), req.client),
    };
    if control.prefer && crate::activations::wants_async(&parts.headers) {
        let owner = caller.key_id().map(str::to_owned);
        let activations = state.kept.activations.clone();
        return activations
            .start(state.clone(), call, owner.as_deref(), idempotency_key)
            .await;
    }
    let me = &state.place.id_header;
    match idempotency_key {
        Some((key, request)) => {
            let run = async { ctx.finish_run(me, invoke::run(state, &call).await) };
            let retry = admit::retried_at_the_cloud(&state.place, control.retry);
            Box::pin(state.kept.idempotency.run(key, request, retry, run)).await
        }
        None => {
            let outcome = invoke::run(state, &call).await;
            ctx.finish_run(me, outcome)
        }
    }
}

/// The admit phase: whether the call may be made at all, and by whom.
fn admit<'s>(
    state: &'s NodeState,
    ctx: &mut CallCtx,
    req: &Received<'_>,
) -> Result<Caller<'s>, ApiError> {
    let parts = req.parts;
    if !admit::callable(&parts.method) {
        return Err(ApiError::method_not_allowed());
    }
    if !valid_function_name(&ctx.function) {
        return Err(ApiError::bad_function_name());
    }
    if let Some(addr) = req.client {
        state.intake.limits.client(addr.ip())?;
    }
    ctx.forwarded = admit::signed_by_peer(state, &parts.method, &parts.uri, req.control.offload)?;
    let caller = if ctx.forwarded {
        Caller::Node
    } else {
        state.intake.access.call(&parts.headers, &ctx.function)?
    };
    if let Some(id) = caller.key_id() {
        state.intake.limits.key(id)?;
    }
    Ok(caller)
}
