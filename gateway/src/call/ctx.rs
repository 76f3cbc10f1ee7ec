//! The per-call context: what the pipeline learnt of one call, phase by phase, and the platform's
//! headers of its answer, rendered from it once when the run phase ends.
//!
//! Nothing on the call path writes a platform header before [`CallCtx::finish_run`], and nothing
//! reads one back: the observers ([`super::observe`]) get the context itself. The only headers
//! read are another node's, once, as its answer arrives ([`Remote::of`]).

use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Response, StatusCode};
use axum::response::IntoResponse;

use super::{push_ms, LocalRun, Outcome, Ran, Remote};
use crate::error::ApiError;
use crate::geo::ClientLocation;
use crate::headers::name::{
    COLD_START, FUNCTION_VERSION, OFFLOADED_FROM, PLACEMENT, PLACEMENT_REASON, SERVED_BY,
    SERVER_TIMING,
};

/// One call, from its arrival to its answer.
#[derive(Debug)]
pub struct CallCtx {
    /// The function, as the client spelled it (a name no node serves is whatever it sent).
    pub function: String,
    /// The call's `X-Request-Id`.
    pub request_id: HeaderValue,
    /// When the gateway received it.
    pub received: Instant,
    /// Where the client is, and how that was found.
    pub location: Option<ClientLocation>,
    /// Another node signed it: offloaded or forwarded here.
    pub forwarded: bool,
    /// The node the client was handed over to with a `307`.
    pub handover: Option<String>,
    /// The `Link: rel=preconnect` hint for the answer (`prewarm`).
    pub preconnect: Option<HeaderValue>,
    /// Run in the background (an accepted async call's try), not answered to a client waiting.
    pub background: bool,
    /// What the run phase found; `None` when the call never got there (a refusal, a handover,
    /// an answer replayed from the idempotency cache).
    pub done: Option<Done>,
}

/// What became of a call that was run.
#[derive(Debug)]
pub struct Done {
    /// `served`, `offloaded` or `error` ([`Outcome::label`]).
    pub outcome: &'static str,
    /// `local`, `offloaded` or `none` ([`Outcome::ran`]).
    pub ran_at: &'static str,
    /// Where it ran and why; `None` when it ran nowhere.
    pub placement: Option<(Ran, &'static str)>,
    /// The answer's status.
    pub status: StatusCode,
    /// From its arrival to the end of the run phase.
    pub elapsed: Duration,
    /// How it ran here, when it did.
    pub local: Option<LocalRun>,
    /// What the other node said of its run, when offloaded.
    pub remote: Option<Remote>,
    /// The latency the policy expected when it placed the call, ms.
    pub predicted: Option<f64>,
}

impl Done {
    /// The node that ran the call: this one (`here`), the other node that answered, or none.
    pub fn node<'a>(&'a self, here: &'a str) -> Option<&'a str> {
        match (&self.local, &self.remote) {
            (Some(_), _) => Some(here),
            (None, Some(r)) => r.node.as_deref(),
            (None, None) => None,
        }
    }

    /// Whether the instance was started for the call.
    pub fn cold_start(&self) -> Option<bool> {
        match (&self.local, &self.remote) {
            (Some(l), _) => Some(l.backend.cold_start),
            (None, Some(r)) => r.cold_start,
            (None, None) => None,
        }
    }

    /// The version that answered.
    pub fn version(&self) -> Option<&str> {
        match (&self.local, &self.remote) {
            (Some(l), _) => l.version.as_deref(),
            (None, Some(r)) => r.version.as_deref(),
            (None, None) => None,
        }
    }
}

impl CallCtx {
    /// A call of `function` received at `received`.
    pub fn new(function: String, request_id: HeaderValue, received: Instant) -> Self {
        Self {
            function,
            request_id,
            received,
            location: None,
            forwarded: false,
            handover: None,
            preconnect: None,
            background: false,
            done: None,
        }
    }

    /// Ends the run phase: keeps what `outcome` says of the run and renders the answer, with the
    /// platform's headers, for node `me` (`X-Served-By` value).
    pub fn finish_run(
        &mut self,
        me: &HeaderValue,
        outcome: Outcome,
    ) -> Result<Response<Body>, ApiError> {
        let mut done = Done {
            outcome: outcome.label(),
            ran_at: outcome.ran(),
            placement: outcome.placement(),
            status: outcome.status(),
            elapsed: self.received.elapsed(),
            local: None,
            remote: None,
            predicted: outcome.predicted(),
        };
        let answer = match outcome {
            Outcome::Served {
                mut answer, run, ..
            } => {
                served_headers(answer.headers_mut(), me, &run, done.predicted);
                done.local = Some(run);
                Ok(answer)
            }
            Outcome::Offloaded {
                mut answer, remote, ..
            } => {
                offloaded_headers(answer.headers_mut(), me, done.predicted);
                done.remote = Some(remote);
                Ok(answer)
            }
            Outcome::Failed(e) => Err(e),
        };
        let answer = answer.map(|mut a| {
            if let Some((ran, why)) = done.placement {
                let h = a.headers_mut();
                h.insert(PLACEMENT, HeaderValue::from_static(ran.label()));
                h.insert(PLACEMENT_REASON, HeaderValue::from_static(why));
            }
            a
        });
        self.done = Some(done);
        answer
    }

    /// The answer as the client receives it: `answer` with the request id and the preconnect
    /// hint, and no body for a `HEAD`.
    pub fn respond(
        &mut self,
        answer: Result<Response<Body>, ApiError>,
        head: bool,
    ) -> Response<Body> {
        let mut resp = answer.unwrap_or_else(IntoResponse::into_response);
        if head {
            // The answer to a HEAD has no body, whatever the function produced (h2 would send it).
            *resp.body_mut() = Body::empty();
        }
        // The preconnect hint, added to any `Link` the function set.
        if let Some(hint) = self.preconnect.take() {
            resp.headers_mut().append(axum::http::header::LINK, hint);
        }
        resp.headers_mut().insert(
            crate::headers::name::REQUEST_ID,
            crate::headers::never_indexed(self.request_id.clone()),
        );
        resp
    }
}

/// `X-Served-By`, `X-Cold-Start`, `Server-Timing` and `X-Function-Version` of a call run here.
fn served_headers(h: &mut HeaderMap, me: &HeaderValue, run: &LocalRun, predicted: Option<f64>) {
    let mut timing = String::with_capacity(112);
    let b = &run.backend;
    for (i, (name, d)) in [
        ("route", run.route),
        ("queue", run.queued),
        ("cold", b.cold),
        ("exec", b.exec),
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
    if let Some(d) = run.sched {
        timing.push_str(", sched;dur=");
        push_ms(&mut timing, d);
    }
    push_predicted(&mut timing, predicted);
    h.insert(SERVED_BY, me.clone());
    h.insert(
        COLD_START,
        HeaderValue::from_static(if b.cold_start { "true" } else { "false" }),
    );
    if let Ok(v) = HeaderValue::try_from(timing) {
        h.insert(SERVER_TIMING, crate::headers::never_indexed(v));
    }
    if let Some(v) = run
        .version
        .as_deref()
        .and_then(|v| HeaderValue::from_str(v).ok())
    {
        h.insert(FUNCTION_VERSION, v);
    }
}

/// `X-Offloaded-From` on another node's answer, and this node's prediction after that node's
/// own `Server-Timing` entries.
fn offloaded_headers(h: &mut HeaderMap, me: &HeaderValue, predicted: Option<f64>) {
    h.insert(OFFLOADED_FROM, me.clone());
    if predicted.is_none() {
        return;
    }
    let mut timing = h
        .get(SERVER_TIMING)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .unwrap_or_default();
    push_predicted(&mut timing, predicted);
    if let Ok(v) = HeaderValue::try_from(timing) {
        h.insert(SERVER_TIMING, crate::headers::never_indexed(v));
    }
}

fn push_predicted(timing: &mut String, predicted: Option<f64>) {
    let Some(p) = predicted else { return };
    if !timing.is_empty() {
        timing.push_str(", ");
    }
    timing.push_str(&format!("predicted;dur={:.3}", p.max(0.001)));
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::header::LINK;

    #[test]
    fn the_preconnect_hint_is_added_beside_the_functions_links() {
        let respond = |hint: Option<&'static str>| {
            let mut ctx = CallCtx::new("f".into(), HeaderValue::from_static("r1"), Instant::now());
            ctx.preconnect = hint.map(HeaderValue::from_static);
            let mut answer = Response::new(Body::empty());
            answer
                .headers_mut()
                .insert(LINK, HeaderValue::from_static("</doc>; rel=help"));
            ctx.respond(Ok(answer), false)
        };
        let links = |r: &Response<Body>| -> Vec<String> {
            r.headers()
                .get_all(LINK)
                .iter()
                .map(|v| v.to_str().unwrap().to_owned())
                .collect()
        };
        assert_eq!(links(&respond(None)), ["</doc>; rel=help"]);
        assert_eq!(
            links(&respond(Some("<https://127.0.0.1:2>; rel=preconnect"))),
            ["</doc>; rel=help", "<https://127.0.0.1:2>; rel=preconnect"]
        );
    }
}
