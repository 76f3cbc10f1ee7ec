//! Running one call: this node's backends that serve the function, in order, then the cloud.
//!
//! The order of decisions, top-down in [`run`]:
//! 1. which backends here serve the function ([`crate::directory`]); none at an edge means
//!    offload (reason `not_here`), none at the cloud means `404`;
//! 2. an admission permit: an edge that has none offloads at once (`overloaded`), the cloud
//!    waits for one until the call's deadline;
//! 3. with a `[scheduler]` policy, where to run it: here (warm or new instance), on a
//!    neighbouring edge or in the cloud (`scheduler`); an edge without a permit asks too, with
//!    itself infeasible, so a saturated edge places calls elsewhere before anything queues.
//!    A call forwarded here by another node is never forwarded again: it waits for a permit
//!    like a call at the cloud, and the policy only picks warm or new;
//! 4. each backend in turn; a failure moves on to the next backend and finally to the cloud
//!    (`backend_failed`) only when the call did not run there
//!    ([`InvokeError::may_have_run`]: not deployed, no capacity, circuit open, unreachable), or
//!    on a timeout (the paper's rule, the one case where a function may run twice; the timed-out
//!    instance is stopped), or when the function opts in (`retry_on_error = true`). A function
//!    that ran and failed is answered at once with its failure (`502`), never run again. The
//!    error's [`Fault`] says what the answer is when nothing is left: "not deployed" is the
//!    client's `404`, anything else a `5xx` naming the last failure (with the backend's
//!    `Retry-After` when it was overloaded).
//!
//! [`run`] returns an [`Outcome`], whose answer says where the call ran and why
//! (`X-Placement`, `X-Placement-Reason`); [`Outcome::into_response`] turns it into the answer.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, Method, Response, StatusCode};
use axum::response::IntoResponse;
use bytes::Bytes;
use geofaas_config::LatLon;
use geofaas_functions::{
    ContainerChoice, Fault, FunctionBackend, Invocation, InvokeError, InvokeOutput,
};

use crate::error::ApiError;
use crate::headers::name::{
    COLD_START, FUNCTION_VERSION, PLACEMENT, PLACEMENT_REASON, SERVED_BY, SERVER_TIMING,
};
use crate::node::NodeState;
use crate::schedule::{LocalState, Placement};

/// One call as received.
#[derive(Debug)]
pub struct Call {
    /// Function name.
    pub function: String,
    /// HTTP method (forwarded on offload).
    pub method: Method,
    /// Path and query (forwarded on offload).
    pub path_and_query: String,
    /// Headers the function may see.
    pub headers: HeaderMap,
    /// Raw body.
    pub body: Bytes,
    /// Where the client is, when known (the scheduler's source).
    pub location: Option<LatLon>,
    /// When the gateway received the call.
    pub received: Instant,
    /// Time spent deciding where to serve it.
    pub route_time: Duration,
    /// The call's `X-Request-Id`, for the log lines it causes.
    pub request_id: HeaderValue,
    /// Signed by another node that forwarded it here: it runs here or fails, never goes on.
    pub forwarded: bool,
    /// A stable hash of the caller (percentage rollouts keep a caller on one version).
    pub caller: u64,
}

/// Why an edge sent a call to the cloud.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffloadReason {
    /// No backend here serves the function.
    NotHere,
    /// The edge had no free admission permit.
    Overloaded,
    /// The scheduler placed the call in the cloud.
    Scheduler,
    /// Every backend here that serves the function failed.
    BackendFailed,
    /// The scheduler placed the call on a neighbouring edge that could not be connected to.
    NeighborUnreachable,
}

impl OffloadReason {
    /// Metric label.
    pub fn label(self) -> &'static str {
        match self {
            Self::NotHere => "not_here",
            Self::Overloaded => "overloaded",
            Self::Scheduler => "scheduler",
            Self::BackendFailed => "backend_failed",
            Self::NeighborUnreachable => "neighbor_unreachable",
        }
    }
}

/// Where a call ran, as `X-Placement` says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ran {
    /// Here, in an instance that was already running.
    LocalWarm,
    /// Here, in a newly started instance.
    LocalNew,
    /// On a neighbouring edge.
    Neighbor,
    /// In the cloud.
    Cloud,
}

impl Ran {
    /// Header value and metric label.
    pub fn label(self) -> &'static str {
        match self {
            Self::LocalWarm => "local-warm",
            Self::LocalNew => "local-new",
            Self::Neighbor => "neighbor",
            Self::Cloud => "cloud",
        }
    }
}

/// Why a call served here ran here, when no policy placed it.
pub mod why {
    /// No `[scheduler]` policy: served where it landed.
    pub const NO_POLICY: &str = "no_policy";
    /// The policy had no profile or no feasible placement for it.
    pub const NO_DECISION: &str = "no_decision";
    /// Another node forwarded it here; it is never forwarded again.
    pub const FORWARDED: &str = "forwarded";
}

/// What happened to a call.
#[derive(Debug)]
pub enum Outcome {
    /// A backend of this node answered.
    Served {
        /// Its answer.
        answer: Response<Body>,
        /// In a warm or a new instance.
        ran: Ran,
        /// The policy's name, or one of [`why`].
        why: &'static str,
    },
    /// Another node (the cloud or a neighbouring edge) answered for this edge.
    Offloaded {
        /// Why the edge offloaded.
        reason: OffloadReason,
        /// Which node answered.
        ran: Ran,
        /// The policy's name when it placed the call, else the reason's label.
        why: &'static str,
        /// The other node's answer, marked `X-Offloaded-From`.
        answer: Response<Body>,
    },
    /// No node could answer; the error says why.
    Failed(ApiError),
}

impl Outcome {
    /// `served`, `offloaded` or `error` (metric label).
    pub fn label(&self) -> &'static str {
        match self {
            Self::Served { .. } => "served",
            Self::Offloaded { .. } => "offloaded",
            Self::Failed(_) => "error",
        }
    }

    /// Where the call ran: `local`, `offloaded` or `none` (metric label).
    pub fn ran(&self) -> &'static str {
        match self {
            Self::Served { .. } => "local",
            Self::Offloaded { .. } => "offloaded",
            Self::Failed(_) => "none",
        }
    }

    /// Where it ran and why, for `X-Placement` and the placement counter; `None` when it ran
    /// nowhere: a failure, or the cloud's `404` for a function no node serves.
    pub fn placement(&self) -> Option<(Ran, &'static str)> {
        match self {
            Self::Offloaded { answer, .. } if answer.status() == StatusCode::NOT_FOUND => None,
            Self::Served { ran, why, .. } | Self::Offloaded { ran, why, .. } => Some((*ran, why)),
            Self::Failed(_) => None,
        }
    }

    /// Puts `X-Placement` and `X-Placement-Reason` on the answer of a call that ran.
    fn mark(&mut self) {
        let Some((ran, why)) = self.placement() else {
            return;
        };
        let (Self::Served { answer, .. } | Self::Offloaded { answer, .. }) = self else {
            return;
        };
        let h = answer.headers_mut();
        h.insert(PLACEMENT, HeaderValue::from_static(ran.label()));
        h.insert(PLACEMENT_REASON, HeaderValue::from_static(why));
    }

    /// The answer's status.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::Served { answer: r, .. } | Self::Offloaded { answer: r, .. } => r.status(),
            Self::Failed(e) => e.status,
        }
    }

    /// The answer to send.
    pub fn into_response(self) -> Response<Body> {
        match self {
            Self::Served { answer: r, .. } | Self::Offloaded { answer: r, .. } => r,
            Self::Failed(e) => e.into_response(),
        }
    }

    /// The answer as the idempotency cache and activations keep it.
    pub fn into_result(self) -> Result<Response<Body>, ApiError> {
        match self {
            Self::Served { answer: r, .. } | Self::Offloaded { answer: r, .. } => Ok(r),
            Self::Failed(e) => Err(e),
        }
    }
}

/// Runs the call here or in the cloud and records its metrics.
pub async fn run(state: &Arc<NodeState>, call: Call) -> Outcome {
    let function = call.function.clone();
    let received = call.received;
    let mut predicted = None;
    let mut outcome = decide_and_run(state, call, &mut predicted).await;
    outcome.mark();
    crate::profiles::settle(
        state,
        &function,
        &mut outcome,
        predicted,
        received.elapsed(),
    );
    if let Some((ran, why)) = outcome.placement() {
        state.metrics.placement(ran.label(), why);
    }
    // A name no node serves (404, here or from the cloud) is whatever the client sent: keep it
    // out of the labels.
    let known = outcome.status() != StatusCode::NOT_FOUND;
    state.metrics.call(
        if known { &function } else { "_unknown" },
        outcome.label(),
        outcome.ran(),
        received.elapsed(),
    );
    outcome
}

/// `predicted` is set to the latency the policy expected when it placed the call.
async fn decide_and_run(
    state: &Arc<NodeState>,
    call: Call,
    predicted: &mut Option<f64>,
) -> Outcome {
    let here = state.directory.local(&call.function).await;
    if here.is_empty() {
        let reason = OffloadReason::NotHere;
        return offload_or(
            state,
            call,
            reason,
            reason.label(),
            ApiError::unknown_function,
        )
        .await;
    }
    let deadline = call.received + state.call_timeout();
    let may_forward = state.cloud.is_some() && !call.forwarded;
    let permit = if may_forward {
        // An edge at capacity places the call elsewhere instead of queueing the client
        // behind other calls.
        state.admission.try_acquire().ok()
    } else {
        admit_queued(state, deadline).await
    };
    // Waiting for admission only; the decision below is reported as `sched`.
    let queued = call.received.elapsed().saturating_sub(call.route_time);
    let (placement, sched) = match &state.scheduler {
        Some(s) => {
            let started = Instant::now();
            let local = LocalState {
                in_flight: state
                    .topology
                    .gateway
                    .max_concurrent_calls
                    .max(1)
                    .saturating_sub(state.admission.available_permits() + 1),
                admitted: permit.is_some(),
                may_forward,
            };
            let placement = s.decide(
                &state.topology,
                state.directory.backends(),
                &call.function,
                call.location,
                local,
            );
            let took = started.elapsed();
            state.metrics.decision(took);
            *predicted = placement.map(|d| d.predicted_ms);
            (placement.map(|d| (d.placement, s.name())), Some(took))
        }
        None => (None, None),
    };
    let choice = match placement {
        Some((Placement::Cloud, policy)) => {
            drop(permit);
            return offload_or(state, call, OffloadReason::Scheduler, policy, |_| {
                unreachable_cloud()
            })
            .await;
        }
        Some((Placement::Neighbor(i), policy)) => {
            drop(permit);
            return forward_to_neighbor(state, call, i, policy).await;
        }
        Some((Placement::Reuse, _)) => ContainerChoice::Reuse,
        Some((Placement::New, _)) => ContainerChoice::New,
        None => ContainerChoice::Any,
    };
    let Some(permit) = permit else {
        tracing::info!(function = %call.function, request_id = ?call.request_id, "at capacity: offloading");
        let reason = OffloadReason::Overloaded;
        return offload_or(state, call, reason, reason.label(), |_| overloaded()).await;
    };
    let why = match (call.forwarded, placement, &state.scheduler) {
        (true, _, _) => why::FORWARDED,
        (false, Some((_, policy)), _) => policy,
        (false, None, Some(_)) => why::NO_DECISION,
        (false, None, None) => why::NO_POLICY,
    };
    let err = match try_backends(state, &here, &call, deadline, choice).await {
        Ok(out) => {
            if out.cold_start {
                state.metrics.cold_start(&call.function, out.cold);
            }
            let ran = if out.cold_start {
                Ran::LocalNew
            } else {
                Ran::LocalWarm
            };
            let timing = Timing {
                route: call.route_time,
                queue: queued,
                sched,
            };
            let answer = local_response(state, out, timing);
            return Outcome::Served { answer, ran, why };
        }
        Err(e) => e,
    };
    drop(permit);
    if !may_move_on(state, &call.function, &err) {
        return Outcome::Failed(ApiError::from_invoke(&call.function, &err));
    }
    let reason = match err.fault() {
        // Every backend here said "not deployed" after all: the lists were stale.
        Fault::Client => OffloadReason::NotHere,
        Fault::Function | Fault::Backend | Fault::Network => OffloadReason::BackendFailed,
    };
    offload_or(state, call, reason, reason.label(), |f| {
        ApiError::from_invoke(f, &err)
    })
    .await
}

/// Forwards the call, signed, to the neighbouring edge the scheduler chose; one that cannot be
/// connected to leaves the call to the cloud (it never arrived, so it cannot run twice).
async fn forward_to_neighbor(
    state: &NodeState,
    call: Call,
    neighbor: usize,
    policy: &'static str,
) -> Outcome {
    let target = state.scheduler.as_ref().and_then(|s| s.neighbor(neighbor));
    let (Some(link), Some(target)) = (&state.cloud, target) else {
        return offload_or(state, call, OffloadReason::Scheduler, policy, |_| {
            unreachable_cloud()
        })
        .await;
    };
    tracing::debug!(to = %target.id, "placing the call on a neighbouring edge");
    let deadline = call.received + state.call_timeout();
    let remaining = deadline.saturating_duration_since(Instant::now());
    let forward = Box::pin(link.forward_to(
        &target.url,
        &call.method,
        &call.path_and_query,
        &call.headers,
        call.body.clone(),
        remaining,
    ));
    match forward.await {
        Ok(answer) => Outcome::Offloaded {
            reason: OffloadReason::Scheduler,
            ran: Ran::Neighbor,
            why: policy,
            answer,
        },
        Err(e) if !e.sent => {
            let reason = OffloadReason::NeighborUnreachable;
            offload_or(state, call, reason, reason.label(), |_| e.error).await
        }
        Err(e) => Outcome::Failed(e.error),
    }
}

/// A permit at a node that cannot offload: waits in a bounded queue (`limits.max_queued_calls`)
/// until the call's deadline; `None` at once when the queue is full.
async fn admit_queued(
    state: &NodeState,
    deadline: Instant,
) -> Option<tokio::sync::SemaphorePermit<'_>> {
    if let Ok(permit) = state.admission.try_acquire() {
        return Some(permit);
    }
    let max = state.topology.limits.max_queued_calls;
    if state.queued.fetch_add(1, Ordering::AcqRel) >= max {
        state.queued.fetch_sub(1, Ordering::AcqRel);
        return None;
    }
    let permit = tokio::time::timeout_at(deadline.into(), state.admission.acquire())
        .await
        .ok()
        .and_then(Result::ok);
    state.queued.fetch_sub(1, Ordering::AcqRel);
    permit
}

/// `503` with `Retry-After`: the node is full and nothing else can take the call.
fn overloaded() -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "overloaded",
        "the node is at capacity and cannot hand the call on; retry later",
    )
    .retry_after(1)
}

/// Offloads the call if this is an edge with a link to the cloud and the call was not
/// forwarded here, else answers `otherwise(function)`; `why` is the answer's
/// `X-Placement-Reason`.
async fn offload_or(
    state: &NodeState,
    call: Call,
    reason: OffloadReason,
    why: &'static str,
    otherwise: impl FnOnce(&str) -> ApiError,
) -> Outcome {
    let Some(cloud) = state.cloud.as_ref().filter(|_| !call.forwarded) else {
        return Outcome::Failed(otherwise(&call.function));
    };
    state.metrics.offload(reason.label());
    tracing::debug!(reason = reason.label(), "offloading to the cloud");
    let deadline = call.received + state.call_timeout();
    let remaining = deadline.saturating_duration_since(Instant::now());
    // Boxed: the forward's future is large, and keeping it out of line keeps every call's
    // future small (it is moved into place on each call).
    let forward = Box::pin(cloud.forward(
        &call.method,
        &call.path_and_query,
        &call.headers,
        call.body,
        remaining,
    ));
    match forward.await {
        Ok(answer) => Outcome::Offloaded {
            reason,
            ran: Ran::Cloud,
            why,
            answer,
        },
        // A full edge whose cloud is unreachable sheds the call at once.
        Err(_) if reason == OffloadReason::Overloaded => Outcome::Failed(overloaded()),
        Err(e) => Outcome::Failed(e),
    }
}

fn unreachable_cloud() -> ApiError {
    ApiError::new(
        StatusCode::BAD_GATEWAY,
        "offload_failed",
        "the scheduler placed the call in the cloud, which this node cannot reach",
    )
}

/// Tries each backend of `here` in turn; the last error when all fail.
async fn try_backends(
    state: &NodeState,
    here: &[&Arc<dyn FunctionBackend>],
    call: &Call,
    deadline: Instant,
    container: ContainerChoice,
) -> Result<InvokeOutput, InvokeError> {
    let mut last = None;
    for backend in here {
        let inv = Invocation {
            function: call.function.clone(),
            body: call.body.clone(),
            headers: call.headers.clone(),
            deadline,
            container,
            caller: call.caller,
        };
        let started = Instant::now();
        let result = backend.invoke(inv).await;
        let outcome = match &result {
            Ok(_) => "ok",
            Err(e) if e.is_retryable() => "retryable",
            Err(_) => "failed",
        };
        state
            .metrics
            .backend_call(backend.kind(), outcome, started.elapsed());
        match result {
            Ok(out) => {
                state
                    .profiles
                    .backend_call(&call.function, backend.kind(), &out);
                return Ok(out);
            }
            Err(e) => {
                tracing::warn!(function = %call.function, request_id = ?call.request_id, backend = backend.kind(), error = %e, fault = ?e.fault(), ran = e.may_have_run(), elapsed_ms = started.elapsed().as_millis() as u64, "backend call failed");
                let stop = !may_move_on(state, &call.function, &e);
                last = Some(e);
                if stop {
                    break;
                }
            }
        }
    }
    Err(last.unwrap_or_else(|| InvokeError::UnknownFunction(call.function.clone())))
}

/// Whether a call that failed with `err` may run elsewhere: when it never ran there, after a
/// timeout, or when the function's profile says `retry_on_error = true`.
fn may_move_on(state: &NodeState, function: &str, err: &InvokeError) -> bool {
    !err.may_have_run()
        || matches!(err, InvokeError::Timeout(_))
        || state
            .topology
            .function(function)
            .is_some_and(|f| f.retry_on_error)
}

/// Durations the gateway measured itself, for `Server-Timing`.
struct Timing {
    route: Duration,
    queue: Duration,
    sched: Option<Duration>,
}

fn local_response(state: &NodeState, out: InvokeOutput, t: Timing) -> Response<Body> {
    let mut timing = String::with_capacity(96);
    for (i, (name, d)) in [
        ("route", t.route),
        ("queue", t.queue),
        ("cold", out.cold),
        ("exec", out.exec),
    ]
    .into_iter()
    .enumerate()
    {
        if i > 0 {
            timing.push_str(", ");
        }
        timing.push_str(name);
        timing.push_str(";dur=");
        push_ms(&mut timing, d);
    }
    if let Some(d) = t.sched {
        timing.push_str(", sched;dur=");
        push_ms(&mut timing, d);
    }
    let content_type = out
        .content_type
        .unwrap_or(HeaderValue::from_static("text/plain; charset=utf-8"));
    let mut resp = Response::new(Body::from(out.body));
    let h = resp.headers_mut();
    // Room for these, the placement headers and the request id: the map does not grow.
    h.reserve(13);
    h.insert(header::CONTENT_TYPE, content_type);
    h.insert(SERVED_BY, state.id_header.clone());
    h.insert(
        COLD_START,
        HeaderValue::from_static(if out.cold_start { "true" } else { "false" }),
    );
    if let Ok(v) = HeaderValue::try_from(timing) {
        h.insert(SERVER_TIMING, crate::headers::never_indexed(v));
    }
    if let Some(v) = out.version.and_then(|v| HeaderValue::from_str(&v).ok()) {
        h.insert(FUNCTION_VERSION, v);
    }
    resp
}

/// Appends `d` in milliseconds with three decimals (`12.345`), as `{:.3}` would print it, with
/// integer arithmetic: float formatting was the costliest part of building a response. In `u64`
/// (584 years of nanoseconds): `Duration::as_nanos` is a `u128`, whose divisions are library calls.
fn push_ms(out: &mut String, d: Duration) {
    let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    let micros = nanos / 1000 + u64::from(nanos % 1000 >= 500);
    let (ms, frac) = (micros / 1000, micros % 1000);
    out.push_str(itoa::Buffer::new().format(ms));
    let frac = [
        b'.',
        b'0' + (frac / 100) as u8,
        b'0' + (frac / 10 % 10) as u8,
        b'0' + (frac % 10) as u8,
    ];
    // ASCII digits and a dot.
    out.push_str(std::str::from_utf8(&frac).unwrap_or_default());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_print_as_milliseconds_with_three_decimals() {
        for (d, want) in [
            (Duration::ZERO, "0.000"),
            (Duration::from_nanos(1_499), "0.001"),
            (Duration::from_micros(12_345), "12.345"),
            (Duration::from_nanos(999_999_600), "1000.000"),
            (Duration::from_secs(30), "30000.000"),
        ] {
            let mut s = String::new();
            push_ms(&mut s, d);
            assert_eq!(s, want);
            assert_eq!(s, format!("{:.3}", d.as_secs_f64() * 1000.0));
        }
        // Beyond u64 nanoseconds: clamped, not a panic.
        let mut s = String::new();
        push_ms(&mut s, Duration::MAX);
        assert_eq!(s, "18446744073709.552");
    }
}
