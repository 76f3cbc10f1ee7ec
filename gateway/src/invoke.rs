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
//!    error's `Fault` says what the answer is when nothing is left: "not deployed" is the
//!    client's `404`, anything else a `5xx` naming the last failure (with the backend's
//!    `Retry-After` when it was overloaded).
//!
//! [`run`] returns an [`Outcome`]: the function's answer (or another node's, or the error) with
//! the facts of where and how it ran. It writes no header of the platform's and records no
//! metric: the pipeline renders the answer's headers from those facts once
//! ([`crate::pipeline::CallCtx::finish_run`]) and hands them to the observers.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::http::{header, HeaderValue, Response, StatusCode};
use geofaas_functions::{ContainerChoice, FunctionBackend, Invocation, InvokeError, InvokeOutput};

use crate::call::{BackendRun, Call, LocalRun, OffloadReason, Outcome, Ran, Remote};
use crate::error::ApiError;
use crate::node::NodeState;
use crate::placement::{self, Facts, FailedAt, Plan, Policy, Refusal};
use crate::schedule::LocalState;

/// Runs the call here or in the cloud.
pub async fn run(state: &Arc<NodeState>, call: &Call) -> Outcome {
    let mut predicted = None;
    let outcome = decide_and_run(state, call, &mut predicted).await;
    // The prediction stands beside the call only when the policy placed it.
    let policy = state.scheduling.policy.as_ref().map(|s| s.name());
    let placed_by_policy = outcome
        .placement()
        .is_some_and(|(_, why)| Some(why) == policy);
    outcome.expecting(predicted.filter(|_| placed_by_policy))
}

/// Gathers the call's facts, asks [`placement::place`] for the plan and carries it out;
/// `predicted` is set to the latency the policy expected when it placed the call.
async fn decide_and_run(
    state: &Arc<NodeState>,
    call: &Call,
    predicted: &mut Option<f64>,
) -> Outcome {
    let here = state.directory.local(&call.function).await;
    let mut facts = Facts {
        served_here: !here.is_empty(),
        cloud_serves: state.directory.cloud_serves(&call.function),
        has_cloud: state.links.outbound.is_some(),
        pinned: call.pinned,
        admitted: false,
        policy: Policy::None,
    };
    let deadline = call.received + state.call_timeout();
    let (mut permit, mut sched, mut others) = (None, None, 0);
    // A call the policy sends to another node counts there until it is back.
    let mut _sending = None;
    if facts.served_here {
        // An edge at capacity places the call elsewhere instead of queueing the client behind
        // other calls; a node that cannot hand it on queues it.
        permit = if !placement::waits_for_admission(&facts) {
            state.intake.admission.try_acquire().ok()
        } else {
            match state.intake.admission.try_acquire() {
                Ok(permit) => Some(permit),
                // Out of line, as `carry_out`: only a full node waits.
                Err(_) => Box::pin(admit_queued(state, deadline)).await,
            }
        };
        facts.admitted = permit.is_some();
        others = state
            .intake
            .running(&state.place.topology)
            .saturating_sub(1);
        if let Some(s) = &state.scheduling.policy {
            let started = Instant::now();
            let local = LocalState {
                in_flight: state
                    .place
                    .topology
                    .gateway
                    .max_concurrent_calls
                    .max(1)
                    .saturating_sub(state.intake.admission.available_permits() + 1),
                admitted: facts.admitted,
                may_forward: facts.may_forward(),
            };
            let decision = s.decide(
                &state.place.topology,
                state.directory.backends(),
                &call.function,
                call.location,
                local,
            );
            let took = started.elapsed();
            state.telemetry.metrics.decision(took);
            sched = Some(took);
            *predicted = decision.as_ref().map(|d| d.predicted_ms);
            _sending = decision.and_then(|d| s.sending(d.placement));
            facts.policy =
                decision.map_or(Policy::NoDecision, |d| Policy::Chose(d.placement, s.name()));
        }
    }
    // Waiting for admission only; the decision is reported as `sched`.
    let queued = call.received.elapsed().saturating_sub(call.route_time);
    match placement::place(&facts) {
        Plan::Serve { container, why } => {
            let served = serve_here(state, &here, &facts, call, deadline, container).await;
            drop(permit);
            match served {
                Ok((out, kind)) => {
                    let run = LocalRun {
                        ran: if out.cold_start {
                            Ran::LocalNew
                        } else {
                            Ran::LocalWarm
                        },
                        why,
                        route: call.route_time,
                        queued,
                        sched,
                        backend: BackendRun::of(kind, &out),
                        version: out.version.clone(),
                        others,
                        others_now: state.intake.running(&state.place.topology),
                    };
                    Outcome::Served {
                        answer: local_response(state, call, out),
                        run,
                        predicted: None,
                    }
                }
                Err((plan, err)) => Box::pin(carry_out(state, call, &facts, plan, &err)).await,
            }
        }
        plan => {
            drop(permit);
            let err = InvokeError::UnknownFunction(call.function.clone());
            Box::pin(carry_out(state, call, &facts, plan, &err)).await
        }
    }
}

/// Carries out a plan that sends the call away or refuses it; `err` is the failure that led
/// here, if any (what a [`Refusal::Failed`] answers). Its callers box it: kept out of line, its
/// futures (the forwards, their retries) do not enlarge every served call's future, which is
/// moved into place on each call.
async fn carry_out(
    state: &NodeState,
    call: &Call,
    facts: &Facts,
    plan: Plan,
    err: &InvokeError,
) -> Outcome {
    match plan {
        Plan::Offload { reason, why } => offload(state, call, reason, why).await,
        Plan::Forward { neighbor, why } => {
            forward_to_neighbor(state, call, facts, neighbor, why).await
        }
        Plan::Refuse(refusal) => Outcome::Failed(refuse(refusal, &call.function, err)),
        // Never planned after a failure.
        Plan::Serve { .. } => Outcome::Failed(ApiError::from_invoke(&call.function, err)),
    }
}

fn refuse(refusal: Refusal, function: &str, err: &InvokeError) -> ApiError {
    match refusal {
        Refusal::UnknownFunction => ApiError::unknown_function(function),
        Refusal::Overloaded => overloaded(),
        Refusal::Failed => ApiError::from_invoke(function, err),
    }
}

/// Forwards the call, signed, to the neighbouring edge the scheduler chose; a failure before
/// the call reached it leaves the call to the cloud (it cannot have run twice).
async fn forward_to_neighbor(
    state: &NodeState,
    call: &Call,
    facts: &Facts,
    neighbor: usize,
    policy: &'static str,
) -> Outcome {
    let target = state
        .scheduling
        .policy
        .as_ref()
        .and_then(|s| s.neighbor(neighbor));
    let (Some(link), Some(target)) = (&state.links.outbound, target) else {
        return offload(state, call, OffloadReason::Scheduler, policy).await;
    };
    tracing::debug!(to = %target.id, "placing the call on a neighbouring edge");
    let deadline = call.received + state.call_timeout();
    let remaining = deadline.saturating_duration_since(Instant::now());
    let forward = Box::pin(link.forward_to(
        &target.url,
        &call.method,
        &call.path_and_query,
        call.sent_headers(),
        call.body.clone(),
        remaining,
    ));
    let err = match forward.await {
        Ok(answer) => {
            return Outcome::Offloaded {
                reason: OffloadReason::Scheduler,
                ran: Ran::Neighbor,
                why: policy,
                remote: Remote::of(&answer),
                answer,
                predicted: None,
            }
        }
        Err(e) => e,
    };
    let plan = placement::after_failure(facts, FailedAt::Neighbor, &err, false)
        .unwrap_or(Plan::Refuse(Refusal::Failed));
    match plan {
        Plan::Offload { reason, why } => offload(state, call, reason, why).await,
        _ => Outcome::Failed(ApiError::from_forward(&err)),
    }
}

/// A permit at a node that cannot offload: waits in a bounded queue (`limits.max_queued_calls`)
/// until the call's deadline; `None` at once when the queue is full.
async fn admit_queued(
    state: &NodeState,
    deadline: Instant,
) -> Option<tokio::sync::SemaphorePermit<'_>> {
    if let Ok(permit) = state.intake.admission.try_acquire() {
        return Some(permit);
    }
    let max = state.place.topology.limits.max_queued_calls;
    if state.intake.queued.fetch_add(1, Ordering::AcqRel) >= max {
        state.intake.queued.fetch_sub(1, Ordering::AcqRel);
        return None;
    }
    let permit = tokio::time::timeout_at(deadline.into(), state.intake.admission.acquire())
        .await
        .ok()
        .and_then(Result::ok);
    state.intake.queued.fetch_sub(1, Ordering::AcqRel);
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

/// Sends the call, signed, to the cloud; `why` is the answer's `X-Placement-Reason`.
async fn offload(
    state: &NodeState,
    call: &Call,
    reason: OffloadReason,
    why: &'static str,
) -> Outcome {
    let Some(cloud) = state.links.outbound.as_ref() else {
        return Outcome::Failed(unreachable_cloud());
    };
    state.telemetry.metrics.offload(reason.label());
    tracing::debug!(reason = reason.label(), "offloading to the cloud");
    let deadline = call.received + state.call_timeout();
    let remaining = deadline.saturating_duration_since(Instant::now());
    // Boxed: the forward's future is large, and keeping it out of line keeps every call's
    // future small (it is moved into place on each call).
    let forward = Box::pin(cloud.forward_to(
        cloud.base(),
        &call.method,
        &call.path_and_query,
        call.sent_headers(),
        call.body.clone(),
        remaining,
    ));
    match forward.await {
        Ok(answer) => Outcome::Offloaded {
            reason,
            ran: Ran::Cloud,
            why,
            remote: Remote::of(&answer),
            answer,
            predicted: None,
        },
        Err(e) => Outcome::Failed(match placement::cloud_failed(reason) {
            // A full edge whose cloud is unreachable sheds the call at once.
            Refusal::Overloaded => overloaded(),
            Refusal::Failed | Refusal::UnknownFunction => ApiError::from_forward(&e),
        }),
    }
}

fn unreachable_cloud() -> ApiError {
    ApiError::new(
        StatusCode::BAD_GATEWAY,
        "offload_failed",
        "the scheduler placed the call in the cloud, which this node cannot reach",
    )
}

/// Runs the call on each backend of `here` in turn until one answers (its output and kind);
/// when none does, the plan for what comes next ([`placement::after_failure`]) with the last
/// failure.
async fn serve_here(
    state: &NodeState,
    here: &[&Arc<dyn FunctionBackend>],
    facts: &Facts,
    call: &Call,
    deadline: Instant,
    container: ContainerChoice,
) -> Result<(InvokeOutput, &'static str), (Plan, InvokeError)> {
    let retry_on_error = state
        .place
        .topology
        .function(&call.function)
        .is_some_and(|f| f.retry_on_error);
    let mut last = None;
    for (i, backend) in here.iter().enumerate() {
        let inv = Invocation {
            function: call.function.clone(),
            http: call.http.clone(),
            body: call.body.clone(),
            headers: call.headers.clone(),
            context: call.context.clone(),
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
            .telemetry
            .metrics
            .backend_call(backend.kind(), outcome, started.elapsed());
        let e = match result {
            Ok(out) => {
                if out.cold_start {
                    state.telemetry.metrics.cold_start(&call.function, out.cold);
                }
                return Ok((out, backend.kind()));
            }
            Err(e) => e,
        };
        tracing::warn!(function = %call.function, request_id = ?call.request_id, backend = backend.kind(), error = %e, fault = ?e.fault(), ran = e.may_have_run(), elapsed_ms = started.elapsed().as_millis() as u64, "backend call failed");
        let at = if i + 1 == here.len() {
            FailedAt::LastBackend
        } else {
            FailedAt::Backend
        };
        if let Some(plan) = placement::after_failure(facts, at, &e, retry_on_error) {
            return Err((plan, e));
        }
        last = Some(e);
    }
    let e = last.unwrap_or_else(|| InvokeError::UnknownFunction(call.function.clone()));
    Err((Plan::Refuse(Refusal::Failed), e))
}

/// The function's answer as the client receives it, before the platform's headers: its status,
/// its own headers (a `Content-Type` when it named none) and its body, streamed.
fn local_response(state: &NodeState, call: &Call, out: InvokeOutput) -> Response<Body> {
    let metrics = &state.telemetry.metrics;
    let mut resp = Response::new(crate::stream::body(
        out.body,
        &call.function,
        call.received,
        metrics,
    ));
    *resp.status_mut() = out.status;
    let h = resp.headers_mut();
    // Room for the platform's headers ([`crate::pipeline`]): the map does not grow.
    *h = out.headers;
    h.reserve(13);
    h.entry(header::CONTENT_TYPE)
        .or_insert(HeaderValue::from_static(
            geofaas_functions::http_fn::DEFAULT_CONTENT_TYPE,
        ));
    resp
}
