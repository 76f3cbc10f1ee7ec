//! Running one call: the local backends in order, then the cloud.
//!
//! An edge with a `[scheduler]` policy asks it first: the policy may send the call to the cloud
//! at once (offload reason `scheduler`) or pick a warm or a new instance here.
//!
//! A backend that fails for any reason but the client's (crash, timeout, unknown to this edge,
//! down, overloaded) hands the call to the next backend, then to the cloud, so the client sees
//! an answer whenever any node can give one.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, Method, Response, StatusCode};
use bytes::Bytes;
use geofaas_config::LatLon;
use geofaas_functions::{ContainerChoice, Invocation, InvokeError, InvokeOutput};

use crate::error::ApiError;
use crate::node::NodeState;
use crate::schedule::Placement;

/// Header naming the node that ran the function.
pub const SERVED_BY: &str = "x-served-by";
/// Header telling whether the call paid a cold start.
pub const COLD_START: &str = "x-cold-start";

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
}

/// Runs the call here, failing over to the next backend and then the cloud.
pub async fn run(state: &Arc<NodeState>, call: Call) -> Result<Response<Body>, ApiError> {
    let deadline = call.received + state.call_timeout();
    let permit = match state.cloud {
        // An edge at capacity offloads instead of queueing the client behind other calls.
        Some(_) => state.admission.try_acquire().ok(),
        None => tokio::time::timeout_at(deadline.into(), state.admission.acquire())
            .await
            .ok()
            .and_then(Result::ok),
    };
    let overloaded = permit.is_none();
    let mut last_err: Option<InvokeError> = None;
    // Waiting for admission only; the decision below is reported as `sched`.
    let queued = call.received.elapsed().saturating_sub(call.route_time);
    let (placement, sched_time) = match (&state.scheduler, overloaded) {
        (Some(s), false) => {
            let started = Instant::now();
            let in_flight = state
                .topology
                .gateway
                .max_concurrent_calls
                .max(1)
                .saturating_sub(state.admission.available_permits() + 1);
            let p = s.decide(
                &state.topology,
                &state.backends,
                &call.function,
                call.location,
                in_flight,
            );
            (p, Some(started.elapsed()))
        }
        _ => (None, None),
    };
    if placement == Some(Placement::Cloud) {
        tracing::debug!(function = %call.function, "scheduler: offloading");
        metrics::counter!("geofaas_offloads_total", "node" => state.id.clone(), "reason" => "scheduler").increment(1);
    } else if !overloaded {
        let choice = match placement {
            Some(Placement::Reuse) => ContainerChoice::Reuse,
            Some(Placement::New) => ContainerChoice::New,
            _ => ContainerChoice::Any,
        };
        match try_backends(state, &call, deadline, choice).await {
            Ok(out) => return Ok(local_response(state, &call, out, queued, sched_time)),
            Err(e) => last_err = e,
        }
    } else {
        tracing::info!(function = %call.function, "edge at capacity: offloading");
        metrics::counter!("geofaas_offloads_total", "node" => state.id.clone(), "reason" => "overloaded").increment(1);
    }
    drop(permit);
    if let Some(cloud) = &state.cloud {
        if last_err.is_some() {
            metrics::counter!("geofaas_offloads_total", "node" => state.id.clone(), "reason" => "backend_failed").increment(1);
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        return cloud
            .forward(
                &call.method,
                &call.path_and_query,
                &call.headers,
                call.body,
                remaining,
            )
            .await;
    }
    Err(match last_err {
        Some(e) => ApiError::from_invoke(&call.function, &e),
        None if overloaded => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "overloaded",
            "the node is at capacity; retry later",
        ),
        None => ApiError::unknown_function(&call.function),
    })
}

/// Tries each backend that serves the function; `Err(None)` when none does.
async fn try_backends(
    state: &NodeState,
    call: &Call,
    deadline: Instant,
    container: ContainerChoice,
) -> Result<InvokeOutput, Option<InvokeError>> {
    let mut last = None;
    for backend in &state.backends {
        if !backend
            .list()
            .await
            .is_ok_and(|l| l.contains(&call.function))
        {
            continue;
        }
        let inv = Invocation {
            function: call.function.clone(),
            body: call.body.clone(),
            headers: call.headers.clone(),
            deadline,
            container,
        };
        let started = Instant::now();
        let result = backend.invoke(inv).await;
        let outcome = match &result {
            Ok(_) => "ok",
            Err(e) if e.is_retryable() => "retryable",
            Err(_) => "failed",
        };
        metrics::counter!("geofaas_backend_calls_total", "node" => state.id.clone(), "backend" => backend.kind(), "outcome" => outcome).increment(1);
        match result {
            Ok(out) => return Ok(out),
            Err(e) => {
                tracing::warn!(function = %call.function, backend = backend.kind(), error = %e, elapsed_ms = started.elapsed().as_millis() as u64, "backend call failed");
                last = Some(e);
            }
        }
    }
    Err(last)
}

fn local_response(
    state: &NodeState,
    call: &Call,
    out: InvokeOutput,
    queued: Duration,
    sched: Option<Duration>,
) -> Response<Body> {
    let mut timing = String::with_capacity(96);
    for (i, (name, d)) in [
        ("route", call.route_time),
        ("queue", queued),
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
    if let Some(d) = sched {
        timing.push_str(", sched;dur=");
        push_ms(&mut timing, d);
    }
    let content_type = out
        .content_type
        .as_deref()
        .and_then(|c| HeaderValue::from_str(c).ok())
        .unwrap_or(HeaderValue::from_static("text/plain; charset=utf-8"));
    let mut resp = Response::new(Body::from(out.body));
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, content_type);
    if let Ok(v) = HeaderValue::from_str(&state.id) {
        h.insert(SERVED_BY, v);
    }
    h.insert(
        COLD_START,
        HeaderValue::from_static(if out.cold_start { "true" } else { "false" }),
    );
    if let Ok(v) = HeaderValue::try_from(timing) {
        h.insert("server-timing", v);
    }
    resp
}

/// Appends `d` in milliseconds with three decimals (`12.345`), as `{:.3}` would print it, with
/// integer arithmetic: float formatting was the costliest part of building a response.
fn push_ms(out: &mut String, d: Duration) {
    use std::fmt::Write as _;
    let micros = (d.as_nanos() + 500) / 1000;
    let _ = write!(out, "{}.{:03}", micros / 1000, micros % 1000);
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
    }
}
