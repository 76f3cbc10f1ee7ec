//! The observers of finished calls: metrics, the node's profiles, the call stream. Each is built
//! with the node from the parts it writes to and registered once ([`Observers`]); the pipeline
//! hands every call's context to each, in turn, when its answer is ready. None of them sees the
//! node's state or another observer, and none may wait: they run on the call's task.

use std::fmt;
use std::sync::Arc;

use axum::http::StatusCode;

use super::CallCtx;

/// Something that learns from every finished call.
pub trait Observer: Send + Sync {
    /// `call` was answered with `status`.
    fn finished(&self, call: &CallCtx, status: StatusCode);
}

/// The node's observers, in the order they run.
#[derive(Clone, Default)]
pub struct Observers(Vec<Arc<dyn Observer>>);

impl Observers {
    /// These observers.
    pub fn new(list: Vec<Arc<dyn Observer>>) -> Self {
        Self(list)
    }

    /// Adds one after the others.
    pub fn push(&mut self, observer: Arc<dyn Observer>) {
        self.0.push(observer);
    }

    /// Hands the finished call to each.
    pub fn finished(&self, call: &CallCtx, status: StatusCode) {
        for o in &self.0 {
            o.finished(call, status);
        }
    }
}

impl fmt::Debug for Observers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Observers({})", self.0.len())
    }
}

/// The call and placement counters as an observer of finished calls: every call that reached
/// the run phase counts once, where it ran and why beside it.
impl Observer for crate::metrics::NodeMetrics {
    fn finished(&self, call: &CallCtx, _status: StatusCode) {
        let Some(done) = &call.done else { return };
        if let Some((ran, why)) = done.placement {
            self.placement(ran.label(), why);
        }
        // A name no node serves (404, here or from the cloud) is whatever the client sent: keep
        // it out of the labels.
        let known = done.status != StatusCode::NOT_FOUND;
        self.call(
            if known { &call.function } else { "_unknown" },
            done.outcome,
            done.ran_at,
            done.elapsed,
        );
    }
}
