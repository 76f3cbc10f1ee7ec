//! A cached, periodically refreshed function list (moka), so the gateway learns which backend
//! serves which function without asking the backend on every call.
//!
//! The list lives for `refresh` and is then fetched again on the next read (concurrent readers
//! share one fetch). If a refresh fails, the last list that was fetched is served instead, so
//! a backend that is briefly unreachable keeps its functions (its breaker decides on calls).

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use moka::future::Cache;

use crate::InvokeError;

/// A backend's function list, cached.
#[derive(Debug)]
pub struct Catalog {
    cache: Cache<(), Arc<Vec<String>>>,
    last_good: Mutex<Option<Arc<Vec<String>>>>,
}

impl Catalog {
    /// A catalog whose entry is fetched again `refresh` after it was last fetched.
    pub fn new(refresh: Duration) -> Self {
        Self {
            cache: Cache::builder()
                .max_capacity(1)
                .time_to_live(refresh.max(Duration::from_millis(1)))
                .build(),
            last_good: Mutex::new(None),
        }
    }

    /// The cached list, fetched with `load` when missing or expired.
    pub async fn get<F, Fut>(&self, load: F) -> Result<Arc<Vec<String>>, InvokeError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Vec<String>, InvokeError>>,
    {
        let fetched = self
            .cache
            .try_get_with((), async { load().await.map(Arc::new) })
            .await;
        match fetched {
            Ok(list) => {
                *self.last_good.lock().unwrap_or_else(|p| p.into_inner()) = Some(list.clone());
                Ok(list)
            }
            Err(err) => {
                let stale = self
                    .last_good
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone();
                match stale {
                    Some(list) => {
                        tracing::debug!(error = %err, "function list refresh failed; serving the last one");
                        Ok(list)
                    }
                    None => Err(copy_error(&err)),
                }
            }
        }
    }

    /// Forgets the cached list (the next read fetches it).
    pub async fn invalidate(&self) {
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
        InvokeError::CircuitOpen => InvokeError::CircuitOpen,
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
    async fn a_first_fetch_that_fails_is_an_error() {
        let catalog = Catalog::new(Duration::from_secs(30));
        let failing = || async { Err(InvokeError::Auth("bad key".into())) };
        assert!(matches!(
            catalog.get(failing).await,
            Err(InvokeError::Auth(_))
        ));
    }
}
