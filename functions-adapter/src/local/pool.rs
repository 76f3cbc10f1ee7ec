//! Warm instances of one function, pooled with deadpool, and the keep-alive reaper.
//!
//! deadpool hands out an idle instance when there is one and creates one (a cold start) when
//! none is idle and the pool is below `max_instances`; otherwise the caller queues until an
//! instance is returned or its deadline passes. Recycling checks that the worker is still
//! alive and has not outlived its keep-alive. A call that must run on a fresh instance
//! ([`crate::ContainerChoice::New`]) says so in a task-local [`GetContext`] for the duration of
//! its `get`: if deadpool offers an idle instance, recycling replaces it with a newly started
//! one (the idle process is stopped), so a forced cold start never grows the pool past its
//! maximum. The same context records whether the caller got past the queue, so a deadline that
//! expires while queueing is reported as overload and one that expires while starting an
//! instance as a timeout.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use deadpool::managed::{self, Metrics, RecycleError, RecycleResult};

use super::spec::FunctionSpec;
use super::worker::{InstanceSource, Launch, StartError, Worker};

tokio::task_local! {
    /// Set while a call is getting its instance from the pool.
    pub(crate) static GET_CONTEXT: GetContext;
}

/// What a caller of `Pool::get` tells the manager, and learns back from it.
#[derive(Clone, Debug, Default)]
pub(crate) struct GetContext {
    /// The call must run on a newly started instance.
    pub force_new: bool,
    /// Set once the pool admitted the caller (it is creating or recycling an instance for it).
    pub admitted: Arc<AtomicBool>,
}

impl GetContext {
    fn admit() -> bool {
        GET_CONTEXT
            .try_with(|ctx| {
                ctx.admitted.store(true, Ordering::Relaxed);
                ctx.force_new
            })
            .unwrap_or(false)
    }
}

/// The pool of one function's instances.
pub(crate) type WorkerPool = managed::Pool<WorkerManager>;

/// Creates and recycles instances of one function.
#[derive(Debug)]
pub(crate) struct WorkerManager {
    pub spec: Arc<FunctionSpec>,
    pub launch: Arc<Launch>,
    pub keep_alive: Duration,
    /// Where new instances come from (a process each, the fork server, or spares).
    pub source: InstanceSource,
    /// Counts pre-warmed instances stopped before serving a call.
    pub prewarm: Arc<super::prewarm::PrewarmCounts>,
    /// The measured memory of this version's instances.
    pub memory: Arc<super::memory::MemoryBook>,
}

impl managed::Manager for WorkerManager {
    type Type = Worker;
    type Error = StartError;

    async fn create(&self) -> Result<Worker, StartError> {
        GetContext::admit();
        let worker = Worker::start(&self.spec, &self.launch, &self.source).await?;
        tracing::debug!(function = %self.spec.name, pid = ?worker.pid(), "instance started");
        Ok(worker)
    }

    async fn recycle(&self, worker: &mut Worker, _: &Metrics) -> RecycleResult<StartError> {
        let force_new = GetContext::admit();
        let unusable = if !worker.is_alive() {
            Some("worker exited")
        } else if worker.idle_since.elapsed() >= self.keep_alive {
            Some("keep-alive expired")
        } else {
            None
        };
        if let Some(why) = unusable {
            if worker.prewarmed {
                self.prewarm.wasted(1);
            }
            return Err(RecycleError::message(why));
        }
        if force_new {
            if worker.prewarmed {
                self.prewarm.wasted(1);
            }
            let fresh = Worker::start(&self.spec, &self.launch, &self.source).await?;
            tracing::debug!(
                function = %self.spec.name,
                old = ?worker.pid(),
                new = ?fresh.pid(),
                "new instance requested: replacing an idle one"
            );
            // The replaced worker is dropped here, which kills its process group.
            *worker = fresh;
        }
        Ok(())
    }
}

/// Builds the pool of one function.
pub(crate) fn build(manager: WorkerManager, max_instances: usize) -> Result<WorkerPool, String> {
    managed::Pool::builder(manager)
        .max_size(max_instances)
        .runtime(deadpool::Runtime::Tokio1)
        .build()
        .map_err(|e| e.to_string())
}

/// Stops idle instances that outlived `keep_alive`; returns how many were stopped.
pub(crate) fn evict_idle(pool: &WorkerPool, keep_alive: Duration) -> usize {
    let removed = pool.retain(|worker, _| worker.idle_since.elapsed() < keep_alive);
    let count = removed.removed.len();
    let prewarmed = removed.removed.iter().filter(|w| w.prewarmed).count();
    if prewarmed > 0 {
        pool.manager().prewarm.wasted(prewarmed);
    }
    if count > 0 {
        tracing::debug!(function = %pool.manager().spec.name, count, "idle instances stopped");
    }
    count
}

/// How often the reaper looks for expired instances: a quarter of the keep-alive, clamped.
pub(crate) fn reap_interval(keep_alive: Duration) -> Duration {
    (keep_alive / 4).clamp(Duration::from_millis(20), Duration::from_secs(5))
}

/// Runs until `owner` is gone or `stop` fires, evicting expired idle instances of `pools`.
pub(crate) async fn reaper<T: Send + Sync + 'static>(
    owner: Weak<T>,
    pools: impl Fn(&T) -> Vec<WorkerPool> + Send + 'static,
    keep_alive: Duration,
    stop: tokio_util::sync::CancellationToken,
) {
    let mut tick = tokio::time::interval(reap_interval(keep_alive));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = stop.cancelled() => return,
        }
        let Some(owner) = owner.upgrade() else {
            return;
        };
        for pool in pools(&owner) {
            evict_idle(&pool, keep_alive);
        }
    }
}
