//! The fork server of one Python version: a child of the zygote that imported the function
//! once, from which the version's instances after its first are forked, so they do not pay the
//! import ([`STRATEGY`], measured in `zygote.rs`). It never runs a call, so every instance starts
//! from the freshly imported module. One that died is forked again after the next instance's
//! first call; until then instances come from the zygote, as the first one did.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::Mutex;

use super::fork::{fork_failed, Forker};
use super::spec::FunctionSpec;
use super::worker::{ProcWorker, StartError};
use super::zygote::{Mode, Zygote};

/// Where a Python version's new instances are forked from (see `zygote.rs` for the measurement
/// behind the choice).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(dead_code)] // the others are kept to measure against (`docs/deploy.md`)
pub(crate) enum Strategy {
    /// The version's first instance is forked from the zygote and imports the function itself;
    /// its fork server is forked in the background after that instance's first call, and later
    /// instances fork from it (from the zygote again while it is not ready).
    FirstDirect,
    /// Every instance is forked from the version's fork server, started on the first.
    ServerAlways,
    /// Every instance is forked from the zygote and imports the function itself.
    DirectAlways,
}

/// The strategy in use.
pub(crate) const STRATEGY: Strategy = Strategy::FirstDirect;

/// The fork server of one Python function version (a child of the zygote that imported the
/// function), and how the version's instances are forked ([`STRATEGY`]).
#[derive(Debug)]
pub(crate) struct ForkServer {
    spec: Arc<FunctionSpec>,
    zygote: Arc<Zygote>,
    running: Mutex<Option<Forker>>,
    /// A background start of the server is under way.
    starting: AtomicBool,
}

impl ForkServer {
    pub(crate) fn new(spec: Arc<FunctionSpec>, zygote: Arc<Zygote>) -> Self {
        Self {
            spec,
            zygote,
            running: Mutex::new(None),
            starting: AtomicBool::new(false),
        }
    }

    /// A new instance: forked from the server if it runs, else as [`STRATEGY`] says.
    pub(crate) async fn instance(&self) -> Result<ProcWorker, StartError> {
        let rendezvous = self.zygote.rendezvous();
        let expected = rendezvous.expect();
        let mut running = self.running.lock().await;
        if !running.as_mut().is_some_and(Forker::is_alive) {
            *running = None;
            if STRATEGY != Strategy::ServerAlways {
                drop(running);
                return self.zygote.fork(&self.spec, Mode::Instance).await;
            }
            *running = Some(self.start().await?);
        }
        let Some(server) = running.as_mut() else {
            return Err(fork_failed("the fork server did not start"));
        };
        let pid = match server.fork(expected.token().as_bytes()).await {
            Ok(pid) => pid,
            Err(e) => {
                *running = None;
                return Err(e);
            }
        };
        // Other instances may be forked while this one connects back.
        drop(running);
        let label = super::logs::Writer::function(&self.spec, self.zygote.logs());
        expected.child(pid, self.zygote.exits(), label).await
    }

    /// An instance has served its first call: with [`Strategy::FirstDirect`], the moment to
    /// fork the server in the background (not sooner, so its import does not compete with
    /// that call for the CPU).
    pub(crate) fn first_call_done(self: &Arc<Self>) {
        if STRATEGY != Strategy::FirstDirect {
            return;
        }
        // Most first calls are of instances the running server forked: nothing to start.
        if let Ok(mut running) = self.running.try_lock() {
            if running.as_mut().is_some_and(Forker::is_alive) {
                return;
            }
        }
        if self.starting.swap(true, Ordering::AcqRel) {
            return;
        }
        let server = Arc::clone(self);
        tokio::spawn(async move {
            let mut running = server.running.lock().await;
            if !running.as_mut().is_some_and(Forker::is_alive) {
                match server.start().await {
                    Ok(started) => *running = Some(started),
                    Err(e) => {
                        tracing::warn!(function = %server.spec.name, error = %e, "fork server did not start");
                    }
                }
            }
            drop(running);
            server.starting.store(false, Ordering::Release);
        });
    }

    async fn start(&self) -> Result<Forker, StartError> {
        let server = self.zygote.fork(&self.spec, Mode::Server).await?;
        tracing::debug!(function = %self.spec.name, pid = server.pid, "fork server started");
        Ok(Forker::new(server, self.zygote.exits()))
    }

    /// Stops the server (its instances are the pool's and stopped with it).
    pub(crate) fn stop(&self) {
        if let Ok(mut running) = self.running.try_lock() {
            running.take();
        }
    }
}
