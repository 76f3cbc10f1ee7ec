//! Breaker and `Guarded` behaviour on tokio's paused clock.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::*;

/// A backend that is down (connection refused) or up, counting the calls that reach it.
#[derive(Debug, Default)]
struct Flaky {
    down: AtomicBool,
    calls: AtomicUsize,
}

#[async_trait]
impl FunctionBackend for Flaky {
    fn kind(&self) -> &'static str {
        "flaky"
    }
    async fn invoke(&self, call: Invocation) -> Result<InvokeOutput, InvokeError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.down.load(Ordering::SeqCst) {
            return Err(InvokeError::Unavailable("connection refused".into()));
        }
        if call.function == "throws" {
            return Err(InvokeError::FunctionFailed {
                message: "boom".into(),
                body: None,
            });
        }
        Ok(InvokeOutput::default())
    }
    async fn list(&self) -> Result<Vec<String>, InvokeError> {
        Ok(vec!["f".into()])
    }
    async fn health(&self) -> Health {
        if self.down.load(Ordering::SeqCst) {
            Health::Unhealthy("down".into())
        } else {
            Health::Healthy
        }
    }
}

fn guarded() -> Guarded<Flaky> {
    let settings = BreakerSettings {
        failure_threshold: 3,
        cool_down: Duration::from_secs(10),
    };
    Guarded::new(Flaky::default(), settings, Duration::from_secs(30))
}

fn call(name: &str) -> Invocation {
    Invocation::new(name, "", Duration::from_secs(5))
}

#[tokio::test(start_paused = true)]
async fn dead_backend_is_skipped_after_threshold_then_probed_after_cool_down() {
    let g = guarded();
    g.inner().down.store(true, Ordering::SeqCst);
    for _ in 0..3 {
        assert!(matches!(
            g.invoke(call("f")).await,
            Err(InvokeError::Unavailable(_))
        ));
    }
    // Open: skipped without reaching the backend.
    assert!(matches!(
        g.invoke(call("f")).await,
        Err(InvokeError::CircuitOpen)
    ));
    assert_eq!(g.inner().calls.load(Ordering::SeqCst), 3);
    assert_eq!(g.breaker().state(), BreakerState::Open);
    assert!(matches!(g.health().await, Health::Unhealthy(_)));

    // Cool-down over, backend still down: the probe fails and the breaker opens again.
    tokio::time::advance(Duration::from_secs(11)).await;
    assert!(matches!(
        g.invoke(call("f")).await,
        Err(InvokeError::Unavailable(_))
    ));
    assert!(matches!(
        g.invoke(call("f")).await,
        Err(InvokeError::CircuitOpen)
    ));

    // Backend back: after the next cool-down one probe succeeds and calls flow again.
    g.inner().down.store(false, Ordering::SeqCst);
    tokio::time::advance(Duration::from_secs(11)).await;
    assert!(g.invoke(call("f")).await.is_ok());
    assert_eq!(g.breaker().state(), BreakerState::Closed);
    assert!(g.invoke(call("f")).await.is_ok());
}

#[tokio::test(start_paused = true)]
async fn healthy_probe_after_cool_down_closes_the_breaker() {
    let g = guarded();
    g.inner().down.store(true, Ordering::SeqCst);
    for _ in 0..3 {
        let _ = g.invoke(call("f")).await;
    }
    g.inner().down.store(false, Ordering::SeqCst);
    assert!(matches!(g.health().await, Health::Unhealthy(_)));
    tokio::time::advance(Duration::from_secs(11)).await;
    assert_eq!(g.health().await, Health::Healthy);
    assert_eq!(g.breaker().state(), BreakerState::Closed);
}

#[tokio::test(start_paused = true)]
async fn function_failures_do_not_open_the_breaker() {
    let g = guarded();
    for _ in 0..10 {
        assert!(matches!(
            g.invoke(call("throws")).await,
            Err(InvokeError::FunctionFailed { .. })
        ));
    }
    assert_eq!(g.breaker().state(), BreakerState::Closed);
}

#[tokio::test(start_paused = true)]
async fn only_one_probe_at_a_time_while_half_open() {
    let breaker = CircuitBreaker::new(BreakerSettings {
        failure_threshold: 1,
        cool_down: Duration::from_secs(1),
    });
    breaker.on_failure();
    tokio::time::advance(Duration::from_secs(2)).await;
    let probe = breaker
        .admit()
        .expect("first call after cool-down is the probe");
    assert!(matches!(breaker.admit(), Err(InvokeError::CircuitOpen)));
    // A cancelled probe (dropped unrecorded) re-opens the breaker.
    drop(probe);
    assert_eq!(breaker.state(), BreakerState::Open);
}

#[tokio::test(start_paused = true)]
async fn each_opening_and_closing_is_reported_once() {
    let breaker = CircuitBreaker::new(BreakerSettings {
        failure_threshold: 2,
        cool_down: Duration::from_secs(1),
    });
    assert_eq!(breaker.on_failure(), Transition::Stayed);
    assert_eq!(breaker.on_failure(), Transition::Opened);
    // More failures while open (calls that were already under way) open nothing new.
    assert_eq!(breaker.on_failure(), Transition::Stayed);
    tokio::time::advance(Duration::from_secs(2)).await;
    // The failed probe opens it again.
    let probe = breaker.admit().expect("the probe");
    assert_eq!(
        probe.record(&Err::<(), _>(InvokeError::Unavailable("refused".into()))),
        Transition::Opened
    );
    tokio::time::advance(Duration::from_secs(2)).await;
    let probe = breaker.admit().expect("the next probe");
    assert_eq!(probe.record(&Ok(())), Transition::Closed);
    assert_eq!(breaker.on_success(), Transition::Stayed);
}
