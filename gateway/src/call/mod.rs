//! What a call is and what became of it: the facts every phase of the call path writes and the
//! observers of finished calls read. The request as received ([`Call`]), where and how it ran
//! ([`Outcome`], [`LocalRun`], [`Remote`], [`BackendRun`], [`Ran`], [`OffloadReason`]), the
//! per-call context the pipeline fills phase by phase ([`CallCtx`], `ctx`) with the platform's
//! headers rendered from it once, and the observers' interface ([`Observer`], `observe`).
//!
//! Below every part of the node: it depends on no other part's state, so placement, profiles,
//! the call stream and metrics can read a call without knowing the node.

mod ctx;
mod observe;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, Response, StatusCode};
use bytes::Bytes;
use geofaas_config::LatLon;
use geofaas_functions::{Context, HttpRequest, InvokeOutput};

use crate::error::ApiError;
use crate::headers::name::{COLD_START, FUNCTION_VERSION, SERVED_BY, SERVER_TIMING};

pub use ctx::{CallCtx, Done};
pub use observe::{Observer, Observers};

/// One call as received.
#[derive(Debug)]
pub struct Call {
    /// Function name.
    pub function: String,
    /// The HTTP request as the function sees it (method, sub-path, query, URL, address).
    pub http: Arc<HttpRequest>,
    /// HTTP method (forwarded on offload).
    pub method: Method,
    /// Path and query (forwarded on offload).
    pub path_and_query: String,
    /// The client's headers the function may see.
    pub headers: HeaderMap,
    /// The node's geo context and the request id, sent after them.
    pub context: Context,
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
    /// Pinned: signed by another node that sent it here (offloaded or forwarded), so it runs
    /// here or fails and never goes on.
    pub pinned: bool,
    /// A stable hash of the caller (percentage rollouts keep a caller on one version).
    pub caller: u64,
}

impl Call {
    /// The headers another node receives for it: the client's, then the context.
    pub(crate) fn sent_headers(&self) -> impl Iterator<Item = (&HeaderName, &HeaderValue)> {
        let context = self.context.iter().map(|(name, value)| (name, value));
        self.headers.iter().chain(context)
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

/// What happened to a call.
#[derive(Debug)]
pub enum Outcome {
    /// A backend of this node answered.
    Served {
        /// Its answer: the function's status, headers and body.
        answer: Response<Body>,
        /// How it ran here.
        run: LocalRun,
        /// The latency the policy expected when it placed the call.
        predicted: Option<f64>,
    },
    /// Another node (the cloud or a neighbouring edge) answered for this edge.
    Offloaded {
        /// Why the edge offloaded.
        reason: OffloadReason,
        /// Which node answered.
        ran: Ran,
        /// The policy's name when it placed the call, else the reason's label.
        why: &'static str,
        /// The other node's answer, as it came.
        answer: Response<Body>,
        /// What that answer says of the run.
        remote: Remote,
        /// The latency the policy expected when it placed the call.
        predicted: Option<f64>,
    },
    /// No node could answer; the error says why.
    Failed(ApiError),
}

/// How a call ran on this node's backend.
#[derive(Debug, Clone)]
pub struct LocalRun {
    /// In a warm or a new instance.
    pub ran: Ran,
    /// The policy's name, or one of [`why`].
    pub why: &'static str,
    /// Deciding where to serve it.
    pub route: Duration,
    /// Its wait for admission (the node's profile of the function leaves it out of a warm
    /// call's time).
    pub queued: Duration,
    /// The policy's decision, when a policy decided.
    pub sched: Option<Duration>,
    /// What the backend reported of the run (its cold start is zero when warm).
    pub backend: BackendRun,
    /// The version of the function that answered.
    pub version: Option<Arc<str>>,
    /// Other calls holding admission permits here when it got its own: what it shared the
    /// node's cores with (with [`LocalRun::others_now`], [`crate::profiles::alone_ms`]).
    pub others: usize,
    /// Calls holding permits when it ended.
    pub others_now: usize,
}

/// What another node's answer says of the run there (its `X-Served-By`, `X-Cold-Start`,
/// `X-Function-Version` and `Server-Timing`), read once when the answer arrives.
#[derive(Debug, Clone, Default)]
pub struct Remote {
    /// The node that ran it.
    pub node: Option<String>,
    /// Whether it started an instance.
    pub cold_start: Option<bool>,
    /// The version that answered.
    pub version: Option<String>,
    /// The time that node accounted for (its `Server-Timing`), ms.
    pub accounted_ms: f64,
}

impl Remote {
    /// The facts of another node's answer `answer`.
    pub fn of(answer: &Response<Body>) -> Self {
        let h = answer.headers();
        let text = |n: HeaderName| h.get(n).and_then(|v| v.to_str().ok()).map(str::to_owned);
        Self {
            node: text(SERVED_BY),
            cold_start: h.get(COLD_START).map(|v| v == "true"),
            version: text(FUNCTION_VERSION),
            accounted_ms: Timing::of(h).total(),
        }
    }
}

/// What a backend reported of a call it ran, beyond its answer.
#[derive(Debug, Clone, Copy)]
pub struct BackendRun {
    /// The backend's kind (`local`, `tinyfaas`, ...).
    pub kind: &'static str,
    /// Whether it started an instance for the call.
    pub cold_start: bool,
    /// Its start of the instance, zero when warm.
    pub cold: Duration,
    /// Its execution time.
    pub exec: Duration,
    /// Its measure of the function's memory, where it measures it.
    pub memory: Option<geofaas_functions::local::MemoryFigure>,
}

impl BackendRun {
    /// The figures of `out`, from a backend of `kind`.
    pub fn of(kind: &'static str, out: &InvokeOutput) -> Self {
        Self {
            kind,
            cold_start: out.cold_start,
            cold: out.cold,
            exec: out.exec,
            memory: out.memory,
        }
    }
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
            Self::Served { run, .. } => Some((run.ran, run.why)),
            Self::Offloaded { ran, why, .. } => Some((*ran, why)),
            Self::Failed(_) => None,
        }
    }

    /// The answer's status.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::Served { answer: r, .. } | Self::Offloaded { answer: r, .. } => r.status(),
            Self::Failed(e) => e.status,
        }
    }

    /// The latency the policy expected, when it placed the call.
    pub fn predicted(&self) -> Option<f64> {
        match self {
            Self::Served { predicted, .. } | Self::Offloaded { predicted, .. } => *predicted,
            Self::Failed(_) => None,
        }
    }

    pub(crate) fn expecting(mut self, expected: Option<f64>) -> Self {
        if let Self::Served { predicted, .. } | Self::Offloaded { predicted, .. } = &mut self {
            *predicted = expected;
        }
        self
    }
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
    /// The backends here that serve the function failed before the function ran.
    BackendFailed,
    /// The scheduler placed the call on a neighbouring edge that did not take it.
    NeighborUnreachable,
}

impl OffloadReason {
    /// Metric label and `X-Placement-Reason`.
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

/// Why a call served here ran here, when no policy placed it.
pub mod why {
    /// No `[scheduler]` policy: served where it landed.
    pub const NO_POLICY: &str = "no_policy";
    /// The policy had no profile or no feasible placement for it.
    pub const NO_DECISION: &str = "no_decision";
    /// Another node sent it here; it is never sent on.
    pub const FORWARDED: &str = "forwarded";
}

/// The durations of a `Server-Timing` value that geofaas writes (`route`, `queue`, `cold`,
/// `exec`, `sched`), in ms; other entries are ignored.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Timing {
    /// Deciding where to serve the call.
    pub route: f64,
    /// Waiting for an admission permit.
    pub queue: f64,
    /// Starting an instance.
    pub cold: f64,
    /// Running the function.
    pub exec: f64,
    /// The scheduler's decision.
    pub sched: f64,
}

impl Timing {
    /// Parses the `Server-Timing` headers of `headers`.
    pub fn of(headers: &HeaderMap) -> Self {
        let mut t = Self::default();
        for v in headers.get_all(SERVER_TIMING) {
            let Ok(v) = v.to_str() else { continue };
            for metric in v.split(',') {
                let mut parts = metric.split(';').map(str::trim);
                let name = parts.next().unwrap_or_default();
                let dur = parts
                    .find_map(|p| p.strip_prefix("dur="))
                    .and_then(|d| d.parse::<f64>().ok())
                    .filter(|d| d.is_finite() && *d >= 0.0);
                let Some(dur) = dur else { continue };
                match name {
                    "route" => t.route = dur,
                    "queue" => t.queue = dur,
                    "cold" => t.cold = dur,
                    "exec" => t.exec = dur,
                    "sched" => t.sched = dur,
                    _ => {}
                }
            }
        }
        t
    }

    /// Everything the node accounted for.
    pub fn total(&self) -> f64 {
        self.route + self.queue + self.cold + self.exec + self.sched
    }
}

/// Appends `d` in milliseconds with three decimals (`12.345`), as `{:.3}` would print it, with
/// integer arithmetic: float formatting was the costliest part of building a response. In `u64`
/// (584 years of nanoseconds): `Duration::as_nanos` is a `u128`, whose divisions are library calls.
pub(crate) fn push_ms(out: &mut String, d: Duration) {
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

    #[test]
    fn another_nodes_server_timing_is_read() {
        let mut h = HeaderMap::new();
        h.insert(
            SERVER_TIMING,
            HeaderValue::from_static(
                "route;dur=0.100, queue;dur=1.000, cold;dur=2.5, exec;dur=10.000, sched;dur=0.004, x;desc=y",
            ),
        );
        let t = Timing::of(&h);
        assert_eq!(t.cold, 2.5);
        assert!((t.total() - 13.604).abs() < 1e-9);
        assert_eq!(Timing::of(&HeaderMap::new()), Timing::default());
    }
}
