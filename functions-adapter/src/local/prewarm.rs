//! Warming an instance ahead of a call: a gateway that expects a client soon (a predicted
//! handover) asks the runtime for one idle instance of a function, and the runtime counts
//! what became of the instances it started that way.
//!
//! A pre-warmed instance is an ordinary pooled instance started before any call needed it, so
//! the first call to take it is a warm one. It is counted once when started, once when a call
//! takes it ([`PrewarmCounts::used`]) and once when it is stopped without having served a
//! call ([`PrewarmCounts::wasted`]: its keep-alive expired, its process died, or a call that
//! wanted a fresh instance replaced it).

use std::sync::atomic::{AtomicU64, Ordering};

use deadpool::managed::PoolError;

use super::{pool_error, LocalError, LocalRuntime};

/// What [`LocalRuntime::warm_one`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WarmUp {
    /// A new instance started and waits idle for a call.
    Started,
    /// An instance was idle already: nothing started.
    AlreadyWarm,
    /// The function has `max_instances` instances already, all busy: nothing started.
    Full,
    /// The runtime does not serve the function.
    NotServed,
}

impl WarmUp {
    /// A short word for answers and logs.
    pub fn label(self) -> &'static str {
        match self {
            Self::Started => "started",
            Self::AlreadyWarm => "already_warm",
            Self::Full => "full",
            Self::NotServed => "not_served",
        }
    }
}

/// Instances this runtime started ahead of a call, and what became of them.
#[derive(Debug, Default)]
pub struct PrewarmCounts {
    started: AtomicU64,
    used: AtomicU64,
    wasted: AtomicU64,
}

/// A snapshot of [`PrewarmCounts`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrewarmStats {
    /// Instances started by [`LocalRuntime::warm_one`].
    pub started: u64,
    /// Of those, the ones a call took.
    pub used: u64,
    /// Of those, the ones stopped before any call took them (started in vain).
    pub wasted: u64,
}

impl PrewarmCounts {
    pub(crate) fn used(&self) {
        self.used.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn wasted(&self, n: usize) {
        self.wasted.fetch_add(n as u64, Ordering::Relaxed);
    }

    fn snapshot(&self) -> PrewarmStats {
        PrewarmStats {
            started: self.started.load(Ordering::Relaxed),
            used: self.used.load(Ordering::Relaxed),
            wasted: self.wasted.load(Ordering::Relaxed),
        }
    }
}

impl LocalRuntime {
    /// Makes one instance of `function`'s live version warm: when none is idle and the pool has
    /// room, starts one (as a call would) and leaves it idle, so the next call is a warm one.
    /// It is stopped after `keep_alive_s` like any idle instance.
    pub async fn warm_one(&self, function: &str) -> Result<WarmUp, LocalError> {
        let version = {
            let functions = self.inner.functions.load();
            match functions.get(function) {
                Some(entry) => entry.live.clone(),
                None => return Ok(WarmUp::NotServed),
            }
        };
        if self.inner.stop.is_cancelled() {
            return Err(LocalError::Start {
                name: function.to_owned(),
                reason: "the local runtime shut down".into(),
            });
        }
        let pool = &version.pool;
        let status = pool.status();
        if status.available > 0 {
            return Ok(WarmUp::AlreadyWarm);
        }
        if status.size >= status.max_size {
            return Ok(WarmUp::Full);
        }
        let started = tokio::time::timeout(self.inner.timeout, pool.get()).await;
        let mut worker = match started {
            Ok(Ok(worker)) => worker,
            Ok(Err(PoolError::Backend(start))) => {
                return Err(LocalError::Start {
                    name: function.to_owned(),
                    reason: start.to_string(),
                })
            }
            Ok(Err(other)) => {
                return Err(LocalError::Start {
                    name: function.to_owned(),
                    reason: pool_error(other, function).to_string(),
                })
            }
            Err(_) => {
                return Err(LocalError::Start {
                    name: function.to_owned(),
                    reason: format!(
                        "no instance started within {} ms",
                        self.inner.timeout.as_millis()
                    ),
                })
            }
        };
        // Another call's instance came back meanwhile and the pool handed that one out.
        if worker.cold.take().is_none() {
            worker.idle_since = std::time::Instant::now();
            return Ok(WarmUp::AlreadyWarm);
        }
        // As for a warmed version ([`LocalRuntime::prepare`]): its start-up is done, so a
        // generic worker taken is replaced, and the fork server may start.
        pool.manager().source.first_call_done();
        worker.prewarmed = true;
        worker.idle_since = std::time::Instant::now();
        self.inner.prewarm.started.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(function, pid = ?worker.pid(), "instance pre-warmed");
        Ok(WarmUp::Started)
    }

    /// Instances started by [`Self::warm_one`] so far, and what became of them.
    pub fn prewarm_stats(&self) -> PrewarmStats {
        self.inner.prewarm.snapshot()
    }
}
