//! The runtime's pool of generic Node.js workers: node processes started ahead of need with the
//! worker bootstrap loaded and no function. Node has no `fork()` of a running process, so this
//! is how a new Node instance, a function's first one included, skips starting node (about
//! 190 ms here): it takes a generic worker, sends it the version's folder and environment, and
//! the worker `require`s the module and becomes an instance of that version only. It is never
//! given back to the pool (Fission's pool manager works the same way).
//!
//! The pool keeps `node_spares` workers ready, started with the runtime by one filler task, one
//! process at a time, so at most `node_spares` pool processes exist (ready or starting). The
//! filler is woken when an instance taken from the pool has answered its first call, not when
//! it is taken: starting node while the taken worker serves its first call would slow that call
//! down by milliseconds. A worker consumed by a function that failed to load wakes the filler at
//! once. A caller that finds no ready worker waits for the one being started (it is closer to
//! ready than a process the caller would start now) unless another caller already waits for
//! it; otherwise it starts its own generic worker.
//!
//! Isolation is that of any instance: a generic worker is its own process (own process group,
//! the address-space limit of the wrapper in `proc.rs`) that has loaded no function before the
//! one it serves. Environment variables that node reads only at start (`NODE_OPTIONS`, ...) are
//! set too late to act; `node_spares = 0` starts node per instance with the version's
//! environment from the start. Pool workers are not instances of any function: they serve no
//! call until taken, so [`super::PoolStats`] does not count them. They are stopped on shutdown
//! and when the runtime is dropped; one that died while waiting is dropped when next looked at.

use parking_lot::{Mutex, MutexGuard};
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::spec::FunctionSpec;
use super::worker::{Launch, ProcWorker, StartError};

/// The generic Node.js workers of one runtime.
#[derive(Debug)]
pub(crate) struct NodePool {
    launch: Arc<Launch>,
    /// The workers' folder until they load a function (the runtime's scratch folder).
    dir: PathBuf,
    /// How many workers to keep ready (at least 1).
    target: usize,
    /// Longest a worker may take to start before the filler gives up on it.
    start_timeout: Duration,
    state: Mutex<State>,
    /// Signalled when the filler added a worker or stopped.
    changed: Notify,
    /// The runtime's shutdown.
    stop: CancellationToken,
}

#[derive(Debug, Default)]
struct State {
    ready: VecDeque<ProcWorker>,
    /// The filler task is running (starting one worker).
    filling: bool,
    /// A caller waits for the worker being started.
    waiting: bool,
}

impl NodePool {
    /// A pool of `target` (at least 1) workers, stopped when `stop` fires. Call
    /// [`Self::refill`] to start filling it.
    pub(crate) fn new(
        launch: Arc<Launch>,
        dir: PathBuf,
        target: usize,
        start_timeout: Duration,
        stop: CancellationToken,
    ) -> Self {
        Self {
            launch,
            dir,
            target: target.max(1),
            start_timeout,
            state: Mutex::default(),
            changed: Notify::new(),
            stop,
        }
    }

    /// A new instance of `spec`: a pool worker (or, when none is ready or about to be, a
    /// generic worker started now) that loaded the function. The caller calls
    /// [`Self::refill`] after the instance's first call.
    pub(crate) async fn instance(
        self: &Arc<Self>,
        spec: &FunctionSpec,
    ) -> Result<ProcWorker, StartError> {
        let mut worker = match self.take().await {
            Some(worker) => {
                tracing::debug!(function = %spec.name, pid = worker.pid, "took a generic node worker");
                worker
            }
            None => self.start_one().await?,
        };
        let loaded = worker.load_function(spec, &self.launch.logs).await;
        if loaded.is_err() {
            // Consumed without a first call to wake the filler.
            self.refill();
        }
        loaded.map(|()| worker)
    }

    /// PIDs of the workers that are ready.
    pub(crate) fn pids(&self) -> Vec<u32> {
        self.lock().ready.iter().map(|w| w.pid).collect()
    }

    /// Stops every ready worker (one being started is stopped by `stop`).
    pub(crate) fn clear(&self) {
        let gone: Vec<ProcWorker> = self.lock().ready.drain(..).collect();
        // Dropping a worker kills its process group.
        drop(gone);
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock leaves only a queue of processes behind: keep going.
        self.state.lock()
    }

    async fn start_one(&self) -> Result<ProcWorker, StartError> {
        let mut args: Vec<&std::ffi::OsStr> = self
            .launch
            .node_flags
            .iter()
            .map(|f| f.as_os_str())
            .collect();
        args.extend([
            self.launch.node_bootstrap.as_os_str(),
            std::ffi::OsStr::new("--generic"),
        ]);
        let mut worker = ProcWorker::spawn(
            &self.launch.node,
            &args,
            &self.dir,
            &[],
            self.launch.memory_limit_mb,
            super::logs::Writer::internal("node worker"),
        )?;
        worker.handshake().await?;
        Ok(worker)
    }

    /// A ready worker, waiting for the one being started if nobody else does; `None` if there
    /// is nothing to wait for.
    async fn take(&self) -> Option<ProcWorker> {
        loop {
            let notified = {
                let mut state = self.lock();
                while let Some(mut worker) = state.ready.pop_front() {
                    if worker.is_alive() {
                        return Some(worker);
                    }
                    tracing::debug!(pid = worker.pid, "generic node worker died while waiting");
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

    /// Starts the filler unless it runs, the pool is full or the runtime stops.
    pub(crate) fn refill(self: &Arc<Self>) {
        let mut state = self.lock();
        if state.filling || state.ready.len() >= self.target || self.stop.is_cancelled() {
            return;
        }
        state.filling = true;
        drop(state);
        tokio::spawn(Arc::clone(self).fill());
    }

    /// Fills the pool now and returns once it is full (or a start failed, or the runtime
    /// stopped); returns at once when a filler runs already or the pool is full.
    pub(crate) async fn fill_up(self: &Arc<Self>) {
        {
            let mut state = self.lock();
            if state.filling || state.ready.len() >= self.target || self.stop.is_cancelled() {
                return;
            }
            state.filling = true;
        }
        Arc::clone(self).fill().await;
    }

    /// Starts workers one at a time until there are `target` of them.
    async fn fill(self: Arc<Self>) {
        loop {
            let started = tokio::select! {
                started = tokio::time::timeout(self.start_timeout, self.start_one()) => started,
                // Dropping the start kills the process it spawned.
                () = self.stop.cancelled() => break,
            };
            let mut state = self.lock();
            match started {
                Ok(Ok(worker)) if !self.stop.is_cancelled() => {
                    tracing::debug!(pid = worker.pid, "generic node worker ready");
                    state.ready.push_back(worker);
                }
                Ok(Ok(_)) => break,
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "generic node worker failed to start");
                    break;
                }
                Err(_) => {
                    tracing::warn!(timeout = ?self.start_timeout, "generic node worker did not start in time");
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

/// Marks the end of a caller's wait for a worker, also when the caller gives up (its deadline).
struct Waiting<'a>(&'a NodePool);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.lock().waiting = false;
    }
}
