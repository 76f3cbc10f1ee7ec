//! Warm instances of one function, pooled with deadpool, and the keep-alive reaper.
//!
//! deadpool hands out an idle instance when there is one and creates one (a cold start) when
//! none is idle and the pool is below `max_instances`; otherwise the caller queues until an
//! instance is returned or its deadline passes. Recycling checks that the worker is still
//! alive and has not outlived its keep-alive. A call that must run on a fresh instance
//! ([`crate::ContainerChoice::New`]) gets its pool slot like any other and, when deadpool
//! hands it an idle instance, replaces that one with a newly started one ([`renew`]; the idle
//! process is stopped), so a forced cold start never grows the pool past its maximum.
//! [`get`] tells a deadline that passes while queueing (overload) from one that passes while
//! an instance starts (a timeout) by deadpool's own timeout kinds.

use std::sync::{Arc, Weak};
use std::time::Duration;

use deadpool::managed::{self, Metrics, PoolError, RecycleError, RecycleResult, Timeouts};

use super::spec::FunctionSpec;
use super::worker::{InstanceSource, Launch, StartError, Worker};

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
        let worker = Worker::start(&self.spec, &self.launch, &self.source).await?;
        tracing::debug!(function = %self.spec.name, pid = ?worker.pid(), "instance started");
        Ok(worker)
    }

    async fn recycle(&self, worker: &mut Worker, _: &Metrics) -> RecycleResult<StartError> {
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
        Ok(())
    }
}

/// Why getting an instance failed.
#[derive(Debug)]
pub(crate) enum GetError {
    /// The deadline passed while waiting for a free slot: the pool was full the whole time.
    Full,
    /// The deadline passed while an instance was starting.
    Timeout,
    /// The pool is closed or the instance could not start.
    Pool(PoolError<StartError>),
}

/// An instance of `pool` within `budget`: an idle one, or one started now.
pub(crate) async fn get(
    pool: &WorkerPool,
    budget: Duration,
) -> Result<managed::Object<WorkerManager>, GetError> {
    // The wait ends a little before the whole budget, so a caller still queueing when the
    // budget runs out learns that it never got a slot (deadpool's `Wait` timeout), and one
    // whose instance is still starting is cut off by the outer timeout.
    let timeouts = Timeouts {
        wait: Some(
            budget
                .saturating_sub(Duration::from_millis(2))
                .max(Duration::from_micros(1)),
        ),
        create: None,
        recycle: None,
    };
    match tokio::time::timeout(budget, pool.timeout_get(&timeouts)).await {
        Ok(Ok(worker)) => Ok(worker),
        Ok(Err(PoolError::Timeout(managed::TimeoutType::Wait))) => Err(GetError::Full),
        Ok(Err(e)) => Err(GetError::Pool(e)),
        Err(_) => Err(GetError::Timeout),
    }
}

/// Replaces an idle instance handed out by the pool with a newly started one, for a call
/// that must run on a fresh instance; the old process is stopped. Takes at most `budget`.
pub(crate) async fn renew(
    worker: &mut managed::Object<WorkerManager>,
    manager: &WorkerManager,
    budget: Duration,
) -> Result<(), GetError> {
    if worker.prewarmed {
        manager.prewarm.wasted(1);
    }
    let start = Worker::start(&manager.spec, &manager.launch, &manager.source);
    let fresh = match tokio::time::timeout(budget, start).await {
        Ok(started) => started.map_err(|e| GetError::Pool(PoolError::Backend(e)))?,
        Err(_) => return Err(GetError::Timeout),
    };
    tracing::debug!(
        function = %manager.spec.name,
        old = ?worker.pid(),
        new = ?fresh.pid(),
        "new instance requested: replacing an idle one"
    );
    // The replaced worker is dropped here, which kills its process group.
    **worker = fresh;
    Ok(())
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
