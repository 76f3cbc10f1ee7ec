//! Spare Node.js instances: worker processes started ahead of need, so that a new instance
//! takes one that has node, the worker and the function module loaded instead of starting node
//! (about 80 ms on a small VM). Node has no `fork()` of a running process, so this is how a
//! new Node instance gets under 10 ms (Python forks instead, see `fork.rs`).
//!
//! Each function keeps up to `node_spares` spares. Spares are started by one filler task per
//! function, one process at a time, so at most `node_spares` spare processes exist (ready or
//! starting). The filler is woken when a new instance has answered its first call (the
//! function's very first instance, or one taken from the spares), not when the spare is taken:
//! starting node while the taken spare serves its first call would slow that call down by
//! milliseconds. A caller that finds no ready spare waits for the one being started (it is
//! closer to ready than a process the caller would start now) unless another caller already
//! waits for it; otherwise it starts its own process, as without spares.
//!
//! Isolation is that of any instance: a spare is its own process (own process group, the
//! address-space limit of the wrapper in `proc.rs`) that has never run a call, so it sees
//! nothing another instance did. Spares are not pool instances: they serve no call until taken,
//! so [`super::PoolStats`] does not count them. They are stopped on shutdown and when the
//! runtime is dropped; a spare that died while waiting is dropped when it is next looked at.
//! A spare that fails to start (the module throws on import) stops the filler; only a later
//! first call wakes it again, so a function that does not load never starts spares in a loop.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::spec::FunctionSpec;
use super::worker::{Launch, ProcWorker, StartError};

/// The spare instances of one Node.js function.
#[derive(Debug)]
pub(crate) struct Spares {
    spec: Arc<FunctionSpec>,
    launch: Arc<Launch>,
    /// How many spares to keep (at least 1).
    target: usize,
    /// Longest a spare may take to start before the filler gives up on it.
    start_timeout: Duration,
    state: Mutex<State>,
    /// Signalled when the filler added a spare or stopped.
    changed: Notify,
    /// The runtime's shutdown.
    stop: CancellationToken,
}

#[derive(Debug, Default)]
struct State {
    ready: VecDeque<ProcWorker>,
    /// The filler task is running (starting one spare).
    filling: bool,
    /// A caller waits for the spare being started.
    waiting: bool,
}

impl Spares {
    /// Spares of `spec`, `target` of them (at least 1), stopped when `stop` fires.
    pub(crate) fn new(
        spec: Arc<FunctionSpec>,
        launch: Arc<Launch>,
        target: usize,
        start_timeout: Duration,
        stop: CancellationToken,
    ) -> Self {
        Self {
            spec,
            launch,
            target: target.max(1),
            start_timeout,
            state: Mutex::default(),
            changed: Notify::new(),
            stop,
        }
    }

    /// A new instance: a spare if one is ready (or about to be), else a process started now.
    /// Either way the caller calls [`Self::refill`] after the instance's first call.
    pub(crate) async fn instance(self: &Arc<Self>) -> Result<ProcWorker, StartError> {
        if let Some(spare) = self.take().await {
            tracing::debug!(function = %self.spec.name, pid = spare.pid, "took a spare instance");
            return Ok(spare);
        }
        ProcWorker::start_with(&self.spec, &self.launch, &[]).await
    }

    /// PIDs of the spares that are ready.
    pub(crate) fn pids(&self) -> Vec<u32> {
        self.lock().ready.iter().map(|w| w.pid).collect()
    }

    /// Stops every ready spare (a spare being started is stopped by `stop`).
    pub(crate) fn clear(&self) {
        let gone: Vec<ProcWorker> = self.lock().ready.drain(..).collect();
        // Dropping a worker kills its process group.
        drop(gone);
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock leaves only a queue of processes behind: keep going.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A ready spare, waiting for the one being started if nobody else does; `None` if there is
    /// nothing to wait for.
    async fn take(&self) -> Option<ProcWorker> {
        loop {
            let notified = {
                let mut state = self.lock();
                while let Some(mut spare) = state.ready.pop_front() {
                    if spare.is_alive() {
                        return Some(spare);
                    }
                    tracing::debug!(function = %self.spec.name, pid = spare.pid, "spare instance died while waiting");
                }
                if !state.filling || state.waiting {
                    return None;
                }
                state.waiting = true;
                let mut notified = Box::pin(self.changed.notified());
                notified.as_mut().enable();
                notified
            };
            let _waiting = Waiting(self);
            notified.await;
        }
    }

    /// Starts the filler unless it runs, the spares are full or the runtime stops. Called when
    /// a new instance has answered its first call (starting node at the same time would slow
    /// that call down by milliseconds).
    pub(crate) fn refill(self: &Arc<Self>) {
        let mut state = self.lock();
        if state.filling || state.ready.len() >= self.target || self.stop.is_cancelled() {
            return;
        }
        state.filling = true;
        drop(state);
        tokio::spawn(Arc::clone(self).fill());
    }

    /// Starts spares one at a time until there are `target` of them.
    async fn fill(self: Arc<Self>) {
        loop {
            let start = ProcWorker::start_with(&self.spec, &self.launch, &[]);
            let started = tokio::select! {
                started = tokio::time::timeout(self.start_timeout, start) => started,
                // Dropping the start kills the process it spawned.
                () = self.stop.cancelled() => break,
            };
            let mut state = self.lock();
            match started {
                Ok(Ok(spare)) if !self.stop.is_cancelled() => {
                    tracing::debug!(function = %self.spec.name, pid = spare.pid, "spare instance ready");
                    state.ready.push_back(spare);
                }
                Ok(Ok(_)) => break,
                Ok(Err(e)) => {
                    tracing::warn!(function = %self.spec.name, error = %e, "spare instance failed to start");
                    break;
                }
                Err(_) => {
                    tracing::warn!(function = %self.spec.name, timeout = ?self.start_timeout, "spare instance did not start in time");
                    break;
                }
            }
            let full = state.ready.len() >= self.target;
            state.filling = !full;
            drop(state);
            self.changed.notify_waiters();
            if full {
                return;
            }
        }
        self.lock().filling = false;
        self.changed.notify_waiters();
    }
}

/// Marks the end of a caller's wait for a spare, also when the caller gives up (its deadline).
struct Waiting<'a>(&'a Spares);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.lock().waiting = false;
    }
}
