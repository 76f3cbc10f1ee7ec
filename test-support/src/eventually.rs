//! Waiting for a condition with a deadline: the one way tests wait for something that happens
//! on its own (a probe noticing, a process exiting), instead of sleeping for a guessed time or
//! polling without end.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

/// How often a condition is checked again.
pub const EVERY: Duration = Duration::from_millis(20);

/// Checks `cond` until it holds, at most for `bound`: how long it took, or `None` when it did
/// not hold by then (checked once more at the deadline).
pub async fn within<F, Fut>(bound: Duration, mut cond: F) -> Option<Duration>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    loop {
        if cond().await {
            return Some(start.elapsed());
        }
        if start.elapsed() >= bound {
            return None;
        }
        tokio::time::sleep(EVERY).await;
    }
}

/// [`within`] for a condition that needs no waiting of its own.
pub async fn holds_within(bound: Duration, mut cond: impl FnMut() -> bool) -> bool {
    within(bound, || std::future::ready(cond())).await.is_some()
}

/// Asserts that `cond` holds within `bound`, naming `what` when it does not; how long it took.
pub async fn assert_within<F, Fut>(bound: Duration, what: &str, cond: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    within(bound, cond)
        .await
        .unwrap_or_else(|| panic!("{what}: not within {bound:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[tokio::test(start_paused = true)]
    async fn a_condition_that_comes_true_is_seen_and_timed() {
        let n = AtomicU32::new(0);
        let took = within(Duration::from_secs(1), || async {
            n.fetch_add(1, Ordering::Relaxed) == 5
        })
        .await;
        assert_eq!(took, Some(EVERY * 5));
    }

    #[tokio::test(start_paused = true)]
    async fn one_that_never_does_gives_up_at_the_deadline() {
        let checks = AtomicU32::new(0);
        let start = tokio::time::Instant::now();
        assert!(
            !holds_within(Duration::from_millis(100), || {
                checks.fetch_add(1, Ordering::Relaxed);
                false
            })
            .await
        );
        assert!(start.elapsed() >= Duration::from_millis(100));
        assert!(checks.load(Ordering::Relaxed) >= 5);
    }

    #[tokio::test(start_paused = true)]
    #[should_panic(expected = "the probe noticed: not within")]
    async fn the_assertion_names_what_did_not_happen() {
        assert_within(Duration::from_millis(50), "the probe noticed", || async {
            false
        })
        .await;
    }
}
