//! A circuit breaker and [`Guarded`], the wrapper that puts one (and a cached function list,
//! see [`crate::catalog`]) in front of any [`FunctionBackend`].
//!
//! Closed: calls pass; `failure_threshold` consecutive backend or network failures open it.
//! Open: calls fail at once with [`InvokeError::CircuitOpen`] until `cool_down` has passed.
//! Half-open: one probe call (or a healthy health probe) is let through; success closes the
//! breaker, failure opens it for another cool-down. A function's own failure or a client's
//! mistake says the backend is alive and counts as success.

use parking_lot::{Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;
use tracing::Instrument as _;

use crate::catalog::Catalog;
use crate::{Fault, FunctionBackend, Health, Invocation, InvokeError, InvokeOutput};

/// Breaker tuning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BreakerSettings {
    /// Consecutive failures that open the breaker (at least 1).
    pub failure_threshold: u32,
    /// How long an open breaker rejects calls before letting one probe through.
    pub cool_down: Duration,
}

impl Default for BreakerSettings {
    fn default() -> Self {
        Self {
            failure_threshold: 5,
            cool_down: Duration::from_secs(5),
        }
    }
}

/// The breaker's state, for logs, metrics and health reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BreakerState {
    /// Calls pass.
    Closed,
    /// Calls are rejected until the cool-down ends.
    Open,
    /// One probe call is in flight or may start.
    HalfOpen,
}

#[derive(Debug)]
enum State {
    Closed { failures: u32 },
    Open { until: Instant },
    HalfOpen { probing: bool },
}

/// What a reported outcome did to the breaker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transition {
    /// Its state (closed, open or half-open) stays.
    Stayed,
    /// It opened: calls skip the backend for the cool-down.
    Opened,
    /// It closed after being open or half-open: calls pass again.
    Closed,
}

/// A consecutive-failure circuit breaker (tokio clock, so tests can pause time).
#[derive(Debug)]
pub struct CircuitBreaker {
    settings: BreakerSettings,
    state: Mutex<State>,
}

/// Leave to make one call; report its outcome with [`Permit::record`]. A probe permit dropped
/// without a report (the call was cancelled) re-opens the breaker.
#[derive(Debug)]
#[must_use]
pub struct Permit<'a> {
    breaker: &'a CircuitBreaker,
    probe: bool,
    recorded: bool,
}

impl CircuitBreaker {
    /// A closed breaker.
    pub fn new(settings: BreakerSettings) -> Self {
        Self {
            settings,
            state: Mutex::new(State::Closed { failures: 0 }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock()
    }

    /// Current state (an open breaker whose cool-down ended reads as half-open).
    pub fn state(&self) -> BreakerState {
        match *self.lock() {
            State::Closed { .. } => BreakerState::Closed,
            State::Open { until } if Instant::now() < until => BreakerState::Open,
            State::Open { .. } | State::HalfOpen { .. } => BreakerState::HalfOpen,
        }
    }

    /// A permit to call, or [`InvokeError::CircuitOpen`] if the backend is being skipped.
    pub fn admit(&self) -> Result<Permit<'_>, InvokeError> {
        let mut state = self.lock();
        let probe = match *state {
            State::Closed { .. } => false,
            State::Open { until } if Instant::now() < until => {
                return Err(InvokeError::CircuitOpen)
            }
            State::Open { .. } | State::HalfOpen { probing: false } => {
                *state = State::HalfOpen { probing: true };
                true
            }
            State::HalfOpen { probing: true } => return Err(InvokeError::CircuitOpen),
        };
        Ok(Permit {
            breaker: self,
            probe,
            recorded: false,
        })
    }

    /// The breaker's tuning.
    pub fn settings(&self) -> BreakerSettings {
        self.settings
    }

    /// Records a success seen outside a call (e.g. a healthy health probe after the cool-down).
    pub fn on_success(&self) -> Transition {
        let mut state = self.lock();
        let was_closed = matches!(*state, State::Closed { .. });
        *state = State::Closed { failures: 0 };
        if was_closed {
            Transition::Stayed
        } else {
            Transition::Closed
        }
    }

    /// Records a failure seen outside a call.
    pub fn on_failure(&self) -> Transition {
        let mut state = self.lock();
        let (failures, was_open) = match *state {
            State::Closed { failures } => (failures + 1, false),
            State::Open { until } => (u32::MAX, Instant::now() < until),
            State::HalfOpen { .. } => (u32::MAX, false),
        };
        if failures >= self.settings.failure_threshold.max(1) {
            *state = State::Open {
                until: Instant::now() + self.settings.cool_down,
            };
            if was_open {
                Transition::Stayed
            } else {
                Transition::Opened
            }
        } else {
            *state = State::Closed { failures };
            Transition::Stayed
        }
    }
}

/// Whether an error says the backend itself is in trouble (as opposed to the function or the
/// request).
pub fn counts_against_backend(err: &InvokeError) -> bool {
    matches!(err.fault(), Fault::Backend | Fault::Network)
}

impl Permit<'_> {
    /// Reports the call's outcome; what it did to the breaker.
    pub fn record<T>(mut self, outcome: &Result<T, InvokeError>) -> Transition {
        self.recorded = true;
        match outcome {
            Err(err) if counts_against_backend(err) => self.breaker.on_failure(),
            _ => self.breaker.on_success(),
        }
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        if self.probe && !self.recorded {
            let opened = self.breaker.on_failure();
            if opened == Transition::Opened {
                tracing::warn!(
                    cool_down_ms = self.breaker.settings.cool_down.as_millis() as u64,
                    "circuit opened again: the probe call was cancelled before it was answered"
                );
            }
        }
    }
}

/// A backend behind a circuit breaker and a cached function list. Use it for every backend
/// the gateway calls, local or remote.
#[derive(Debug)]
pub struct Guarded<B> {
    inner: B,
    breaker: CircuitBreaker,
    catalog: Catalog,
}

impl<B: FunctionBackend> Guarded<B> {
    /// Wraps `inner`; its function list is cached for `list_refresh`.
    pub fn new(inner: B, breaker: BreakerSettings, list_refresh: Duration) -> Self {
        Self {
            inner,
            breaker: CircuitBreaker::new(breaker),
            catalog: Catalog::new(list_refresh),
        }
    }

    /// The wrapped backend.
    pub fn inner(&self) -> &B {
        &self.inner
    }

    /// The breaker.
    pub fn breaker(&self) -> &CircuitBreaker {
        &self.breaker
    }

    /// Logs the breaker's opening (a warning naming the last failure) and closing.
    fn report(&self, transition: Transition, last: Option<&InvokeError>) {
        let backend = self.inner.kind();
        let cool_down_ms = self.breaker.settings.cool_down.as_millis() as u64;
        match transition {
            Transition::Stayed => {}
            Transition::Opened => {
                let last = last
                    .map(|e| e.to_string())
                    .unwrap_or_else(|| "its health probe failed".to_owned());
                tracing::warn!(
                    backend,
                    cool_down_ms,
                    failures = self.breaker.settings.failure_threshold,
                    "circuit opened: backend {backend} is skipped for {cool_down_ms} ms (calls go to the next backend or the cloud), then one call probes it; last failure: {last}"
                );
            }
            Transition::Closed => {
                tracing::info!(backend, "circuit closed: backend {backend} answers again");
            }
        }
    }
}

#[async_trait]
impl<B: FunctionBackend> FunctionBackend for Guarded<B> {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }

    async fn invoke(&self, call: Invocation) -> Result<InvokeOutput, InvokeError> {
        let span = tracing::debug_span!("backend_call", backend = self.inner.kind(), function = %call.function);
        let permit = self.breaker.admit().inspect_err(|_| {
            tracing::debug!(parent: &span, "skipped: circuit open");
        })?;
        let outcome = self.inner.invoke(call).instrument(span.clone()).await;
        if let Err(err) = &outcome {
            tracing::debug!(parent: &span, error = %err, fault = ?err.fault(), "backend call failed");
        }
        let transition = permit.record(&outcome);
        self.report(transition, outcome.as_ref().err());
        if matches!(outcome, Err(InvokeError::UnknownFunction(_))) {
            // The cached list may be stale; ask again next time. Boxed: the cache's future
            // would otherwise be part of, and copied with, every call's.
            Box::pin(self.catalog.invalidate()).await;
        }
        outcome
    }

    async fn list(&self) -> Result<Vec<String>, InvokeError> {
        if self.inner.lists_live() {
            return self.inner.list().await;
        }
        Ok(self
            .catalog
            .get(|| self.inner.list())
            .await?
            .as_ref()
            .clone())
    }

    async fn serves(&self, function: &str) -> bool {
        if self.inner.lists_live() {
            return self.inner.serves(function).await;
        }
        if let Some((list, true)) = self.catalog.peek() {
            return list.iter().any(|f| f == function);
        }
        // A missing or old list: fetched out of line (the cache's future is large, and every
        // call's future would carry it).
        Box::pin(self.catalog.get(|| self.inner.list()))
            .await
            .is_ok_and(|l| l.iter().any(|f| f == function))
    }

    fn stats(&self, function: &str) -> Option<crate::PoolStats> {
        self.inner.stats(function)
    }

    fn lists_live(&self) -> bool {
        self.inner.lists_live()
    }

    async fn warm_one(
        &self,
        function: &str,
    ) -> Option<Result<crate::local::WarmUp, crate::LocalError>> {
        self.inner.warm_one(function).await
    }

    fn prewarm_stats(&self) -> Option<crate::local::PrewarmStats> {
        self.inner.prewarm_stats()
    }

    fn logs(&self) -> Option<&std::sync::Arc<crate::local::FunctionLogs>> {
        self.inner.logs()
    }

    fn local(&self) -> Option<&crate::LocalRuntime> {
        self.inner.local()
    }

    fn deploys(&self) -> bool {
        self.inner.deploys()
    }

    async fn deploy(&self, fun: &crate::RemoteDeploy) -> Result<(), InvokeError> {
        let span = tracing::info_span!("backend_deploy", backend = self.inner.kind(), function = %fun.name, version = %fun.version);
        let outcome = self.inner.deploy(fun).instrument(span.clone()).await;
        match &outcome {
            // The function list changed: the next read asks the backend.
            Ok(()) => self.catalog.invalidate().await,
            Err(err) => tracing::warn!(parent: &span, error = %err, "deploy failed"),
        }
        outcome
    }

    async fn health(&self) -> Health {
        if self.breaker.state() == BreakerState::Open {
            return Health::Unhealthy("circuit open after repeated failures".to_owned());
        }
        let health = self.inner.health().await;
        match &health {
            Health::Healthy if self.breaker.state() == BreakerState::HalfOpen => {
                self.report(self.breaker.on_success(), None)
            }
            Health::Unhealthy(_) if self.breaker.state() == BreakerState::HalfOpen => {
                self.report(self.breaker.on_failure(), None)
            }
            _ => {}
        }
        health
    }
}

#[cfg(test)]
#[path = "breaker_tests.rs"]
mod tests;
