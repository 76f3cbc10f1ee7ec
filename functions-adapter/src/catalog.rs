//! A cached, periodically refreshed function list (moka), so the gateway learns which backend
//! serves which function without asking the backend on every call.
//!
//! The list lives for `refresh` and is then fetched again on the next read (concurrent readers
//! share one fetch). If a refresh fails, the last list that was fetched is served instead, so
//! a backend that is briefly unreachable keeps its functions (its breaker decides on calls).
//!
//! Every call reads the list, so a read of a list younger than `refresh` is one atomic load and
//! a clock read; moka (its hashing, clock and bookkeeping) is asked only when that list is
//! missing, expired or invalidated.
//!
//! A failed fetch is not tried again for [`RETRY_AFTER_FAILURE`] (or `refresh`, if shorter):
//! until then reads get the last list, or a copy of the failure when there is none. Without
//! this pause every call to a node whose backend or cloud is down started a fetch of its own
//! (in the gateway benchmark, whose cloud never runs, a sixth of a call's instructions).

use parking_lot::Mutex;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use moka::future::Cache;

use crate::InvokeError;

/// How long after a failed fetch the next one is tried (at most `refresh`): a backend or cloud
/// that is down is asked for its list at most once a second.
pub const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(1);

/// A backend's function list, cached.
#[derive(Debug)]
pub struct Catalog {
    cache: Cache<(), Arc<Vec<String>>>,
    refresh: Duration,
    /// The last list fetched, and when (`None` once invalidated): served while younger than
    /// `refresh`, and after a failed refresh whatever its age.
    last: ArcSwapOption<Fetched>,
    /// The last failed fetch, and when; cleared by a fetch that succeeds or an invalidation.
    failed: Mutex<Option<(Instant, InvokeError)>>,
}

#[derive(Debug)]
struct Fetched {
    list: Arc<Vec<String>>,
    at: Option<Instant>,
}

impl Catalog {
    /// A catalog whose entry is fetched again `refresh` after it was last fetched.
    pub fn new(refresh: Duration) -> Self {
        let refresh = refresh.max(Duration::from_millis(1));
        Self {
            cache: Cache::builder()
                .max_capacity(1)
                .time_to_live(refresh)
                .build(),
            refresh,
            last: ArcSwapOption::empty(),
            failed: Mutex::new(None),
        }
    }

    /// The cached list, fetched with `load` when missing or expired.
    pub async fn get<F, Fut>(&self, load: F) -> Result<Arc<Vec<String>>, InvokeError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Vec<String>, InvokeError>>,
    {
        if let Some(last) = &*self.last.load() {
            if last.at.is_some_and(|at| at.elapsed() < self.refresh) {
                return Ok(last.list.clone());
            }
        }
        if let Some(err) = self.recent_failure() {
            return match self.last.load_full() {
                Some(stale) => Ok(stale.list.clone()),
                None => Err(err),
            };
        }
        let fetched = self
            .cache
            .try_get_with((), async {
                let list = match load().await {
                    Ok(list) => Arc::new(list),
                    Err(err) => {
                        *self.failures() = Some((Instant::now(), copy_error(&err)));
                        return Err(err);
                    }
                };
                *self.failures() = None;
                self.last.store(Some(Arc::new(Fetched {
                    list: list.clone(),
                    at: Some(Instant::now()),
                })));
                Ok(list)
            })
            .await;
        match fetched {
            Ok(list) => Ok(list),
            Err(err) => match self.last.load_full() {
                Some(stale) => {
                    tracing::debug!(error = %err, "function list refresh failed; serving the last one");
                    Ok(stale.list.clone())
                }
                None => Err(copy_error(&err)),
            },
        }
    }

    /// The last list fetched, without fetching: `(list, fresh)`, fresh while younger than the
    /// refresh interval; `None` before the first fetch.
    pub fn peek(&self) -> Option<(Arc<Vec<String>>, bool)> {
        let last = self.last.load();
        let last = last.as_ref()?;
        let fresh = last.at.is_some_and(|at| at.elapsed() < self.refresh);
        Some((last.list.clone(), fresh))
    }

    /// Whether a fetch failed within the retry interval ([`RETRY_AFTER_FAILURE`]): a read until
    /// then fetches nothing. A check of a lock and the clock, for callers that would start a
    /// fetch of their own.
    pub fn paused(&self) -> bool {
        self.failures()
            .as_ref()
            .is_some_and(|(at, _)| at.elapsed() < RETRY_AFTER_FAILURE.min(self.refresh))
    }

    /// A copy of the last failure when it is younger than the retry interval.
    fn recent_failure(&self) -> Option<InvokeError> {
        let pause = RETRY_AFTER_FAILURE.min(self.refresh);
        let failed = self.failures();
        let (at, err) = failed.as_ref()?;
        (at.elapsed() < pause).then(|| copy_error(err))
    }

    fn failures(&self) -> parking_lot::MutexGuard<'_, Option<(Instant, InvokeError)>> {
        self.failed.lock()
    }

    /// Forgets the cached list (the next read fetches it; it is still served if that fails).
    pub async fn invalidate(&self) {
        *self.failures() = None;
        if let Some(last) = self.last.load_full() {
            self.last.store(Some(Arc::new(Fetched {
                list: last.list.clone(),
                at: None,
            })));
        }
        self.cache.invalidate(&()).await;
    }
}

/// moka hands a shared loader error to every waiter; each needs its own.
fn copy_error(err: &InvokeError) -> InvokeError {
    match err {
        InvokeError::UnknownFunction(f) => InvokeError::UnknownFunction(f.clone()),
        InvokeError::FunctionFailed { message, body } => InvokeError::FunctionFailed {
            message: message.clone(),
            body: body.clone(),
        },
        InvokeError::Timeout(d) => InvokeError::Timeout(*d),
        InvokeError::OutputTooLarge { limit } => InvokeError::OutputTooLarge { limit: *limit },
        InvokeError::Overloaded { retry_after } => InvokeError::Overloaded {
            retry_after: *retry_after,
        },
        InvokeError::Auth(m) => InvokeError::Auth(m.clone()),
        InvokeError::Unavailable(m) => InvokeError::Unavailable(m.clone()),
        InvokeError::Network(m) => InvokeError::Network(m.clone()),
        InvokeError::Protocol(m) => InvokeError::Protocol(m.clone()),
        InvokeError::Refused(m) => InvokeError::Refused(m.clone()),
        InvokeError::CircuitOpen => InvokeError::CircuitOpen,
        InvokeError::BadAnswer(m) => InvokeError::BadAnswer(m.clone()),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[tokio::test]
    async fn list_is_fetched_once_then_served_from_cache_and_survives_a_failed_refresh() {
        let catalog = Catalog::new(Duration::from_millis(50));
        let fetches = AtomicUsize::new(0);
        let load = || async {
            fetches.fetch_add(1, Ordering::SeqCst);
            Ok(vec!["sieve".to_owned()])
        };
        assert_eq!(*catalog.get(load).await.unwrap(), ["sieve"]);
        assert_eq!(*catalog.get(load).await.unwrap(), ["sieve"]);
        assert_eq!(fetches.load(Ordering::SeqCst), 1);

        catalog.invalidate().await;
        let failing = || async { Err(InvokeError::Unavailable("down".into())) };
        assert_eq!(*catalog.get(failing).await.unwrap(), ["sieve"]);
    }

    #[tokio::test]
    async fn a_list_older_than_the_refresh_is_fetched_again() {
        let catalog = Catalog::new(Duration::from_millis(20));
        let fetches = AtomicUsize::new(0);
        let load = || async {
            let n = fetches.fetch_add(1, Ordering::SeqCst);
            Ok(vec![format!("v{n}")])
        };
        assert_eq!(*catalog.get(load).await.unwrap(), ["v0"]);
        tokio::time::sleep(Duration::from_millis(40)).await;
        assert_eq!(*catalog.get(load).await.unwrap(), ["v1"]);
        assert_eq!(*catalog.get(load).await.unwrap(), ["v1"]);
        assert_eq!(fetches.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_failed_fetch_is_not_tried_again_until_the_retry_interval_has_passed() {
        let catalog = Catalog::new(Duration::from_secs(30));
        let fetches = AtomicUsize::new(0);
        let failing = || async {
            fetches.fetch_add(1, Ordering::SeqCst);
            Err(InvokeError::Network("connection refused".into()))
        };
        for _ in 0..5 {
            assert!(matches!(
                catalog.get(failing).await,
                Err(InvokeError::Network(_))
            ));
        }
        assert_eq!(
            fetches.load(Ordering::SeqCst),
            1,
            "one fetch for five reads"
        );
        assert!(catalog.paused(), "no fetch during the pause");

        tokio::time::sleep(RETRY_AFTER_FAILURE + Duration::from_millis(20)).await;
        assert!(!catalog.paused());
        let load = || async {
            fetches.fetch_add(1, Ordering::SeqCst);
            Ok(vec!["sieve".to_owned()])
        };
        assert_eq!(*catalog.get(load).await.unwrap(), ["sieve"]);
        assert_eq!(fetches.load(Ordering::SeqCst), 2);
        assert!(!catalog.paused(), "a fetch that succeeds ends the pause");

        // A failed refresh keeps the last list through the pause; an invalidation ends it.
        catalog.invalidate().await;
        assert_eq!(*catalog.get(failing).await.unwrap(), ["sieve"]);
        assert_eq!(*catalog.get(failing).await.unwrap(), ["sieve"]);
        assert_eq!(fetches.load(Ordering::SeqCst), 3);
        assert!(catalog.paused());
        catalog.invalidate().await;
        assert!(!catalog.paused());
    }

    #[tokio::test]
    async fn a_first_fetch_that_fails_is_an_error() {
        let catalog = Catalog::new(Duration::from_secs(30));
        let failing = || async { Err(InvokeError::Auth("bad key".into())) };
        assert!(matches!(
            catalog.get(failing).await,
            Err(InvokeError::Auth(_))
        ));
    }
}
