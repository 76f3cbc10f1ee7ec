//! The runtime's Python zygote: one interpreter, started with the runtime, that holds the worker
//! bootstrap and the modules it imports (json, inspect, os, socket, ...) but no function, and
//! forks every Python process the runtime needs, so no function's first call waits for an
//! interpreter to start (about 200 ms here).
//!
//! How a version's instances are forked ([`super::fork_server::STRATEGY`]): its first instance is a
//! child of the zygote that sets the version's environment (`FunctionSpec::env`), changes to
//! its folder, imports `fn.py` and serves ([`Mode::Instance`]): one fork and the import, the
//! least a fresh process that runs the function can cost. After that instance's first call the
//! zygote forks the version's fork server in the background, a child that imports the function
//! once and forks every later instance ([`Mode::Server`], `fork_server.rs`), so an instance after an
//! eviction or a scale-out costs one fork and no import. Both other ways were built and
//! measured in the same run (`docs/deploy.md`, "Cold starts"): every instance from the
//! version's fork server makes the first call pay a second fork and a round trip to the host
//! (first call P50 7.8-11.5 ms against 5.1-5.3 ms here); every instance from the zygote makes
//! each one pay the import again, which for a function that imports `http.client` made the
//! first call after an eviction 24-34 ms instead of 3.5-5 ms. The cost of the choice is the
//! function imported twice per version (once in the first instance, once in the server, off the
//! call path) and one idle server process per loaded Python version, most of its memory shared
//! with the zygote (copy on write).
//!
//! Isolation: the zygote never imports a function and a fork server never runs a call, so no
//! instance sees anything another instance (of any function) did. Every child starts its own
//! session, so each process group is killed on its own, and inherits the zygote's address-space
//! limit (`proc.rs`). Environment variables that Python reads only at start (`PYTHONPATH`,
//! `PYTHONHASHSEED`, ...) are set too late to act in a forked child; `fork_server = false`
//! starts an interpreter per instance with the version's environment from the start. A zygote
//! that died is started again on the next fork; [`Zygote::stop`] stops it (shutdown, drop).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use super::fork::{Exits, Forker, Rendezvous};
use super::spec::FunctionSpec;
use super::worker::{Launch, ProcWorker, StartError};

/// What a child of the zygote becomes once it has imported its function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// The function's fork server: it forks the function's instances.
    Server,
    /// An instance that serves calls itself.
    Instance,
}

/// The zygote of one runtime.
#[derive(Debug)]
pub(crate) struct Zygote {
    launch: Arc<Launch>,
    /// The zygote's working folder (the runtime's scratch folder).
    dir: PathBuf,
    rendezvous: Arc<Rendezvous>,
    exits: Arc<Exits>,
    running: Mutex<Option<Forker>>,
    /// The running zygote's pid (0: none), readable while a fork holds `running`.
    pid: AtomicU32,
    stop: CancellationToken,
}

impl Zygote {
    /// Where the lines of the processes it forks go.
    pub(crate) fn logs(&self) -> &Arc<super::logs::FunctionLogs> {
        &self.launch.logs
    }

    /// A zygote whose children connect back to `rendezvous`; not started yet.
    pub(crate) fn new(
        launch: Arc<Launch>,
        dir: PathBuf,
        rendezvous: Arc<Rendezvous>,
        stop: CancellationToken,
    ) -> Arc<Self> {
        Arc::new(Self {
            launch,
            dir,
            rendezvous,
            exits: Arc::default(),
            running: Mutex::new(None),
            pid: AtomicU32::new(0),
            stop,
        })
    }

    /// Starts the zygote unless it runs, and returns once it runs (or failed to start, or the
    /// runtime stopped); a fork asked for meanwhile waits for it.
    pub(crate) async fn warm(&self) {
        let mut running = self.running.lock().await;
        let started = tokio::select! {
            started = self.ensure(&mut running) => started,
            // Dropping the start kills the process it spawned.
            () = self.stop.cancelled() => return,
        };
        if let Err(e) = started {
            tracing::warn!(error = %e, "python zygote did not start (python3 functions will retry on their first call)");
        }
    }

    pub(crate) fn rendezvous(&self) -> &Rendezvous {
        &self.rendezvous
    }

    pub(crate) fn exits(&self) -> Arc<Exits> {
        Arc::clone(&self.exits)
    }

    /// The running zygote's pid.
    pub(crate) fn pid(&self) -> Option<u32> {
        Some(self.pid.load(Ordering::Relaxed)).filter(|&p| p != 0)
    }

    /// A child that imported `spec`'s function and became `mode`, ready.
    pub(crate) async fn fork(
        &self,
        spec: &FunctionSpec,
        mode: Mode,
    ) -> Result<ProcWorker, StartError> {
        let expected = self.rendezvous.expect();
        let env: serde_json::Map<String, serde_json::Value> = spec
            .env
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
            .collect();
        let request = serde_json::json!({
            "token": expected.token(),
            "dir": spec.dir,
            "env": env,
            "mode": match mode { Mode::Server => "server", Mode::Instance => "instance" },
        });
        let request = serde_json::to_vec(&request).unwrap_or_default();
        let mut running = self.running.lock().await;
        if self.stop.is_cancelled() {
            return Err(StartError::Spawn {
                program: "python zygote".into(),
                source: std::io::Error::other("the runtime is shutting down"),
            });
        }
        self.ensure(&mut running).await?;
        let Some(zygote) = running.as_mut() else {
            return Err(super::fork::fork_failed("the zygote did not start"));
        };
        let pid = match zygote.fork(&request).await {
            Ok(pid) => pid,
            Err(e) => {
                self.clear(&mut running);
                return Err(e);
            }
        };
        drop(running);
        let label = super::logs::Writer::function(spec, &self.launch.logs);
        expected.child(pid, self.exits(), label).await
    }

    /// Starts the zygote unless it runs.
    async fn ensure(&self, running: &mut Option<Forker>) -> Result<(), StartError> {
        if running.as_mut().is_some_and(Forker::is_alive) {
            return Ok(());
        }
        if let Some(dead) = running.as_ref() {
            tracing::info!(pid = dead.pid(), "python zygote is gone: starting another");
        }
        self.clear(running);
        let socket = self.rendezvous.path().as_os_str();
        let args = [
            self.launch.python_bootstrap.as_os_str(),
            std::ffi::OsStr::new("--zygote"),
            socket,
        ];
        let started = std::time::Instant::now();
        let process = ProcWorker::spawn(
            &self.launch.python,
            &args,
            &self.dir,
            &[],
            self.launch.memory_limit_mb,
            super::logs::Writer::internal("python zygote"),
        )?;
        let mut process = process;
        process.handshake().await?;
        tracing::debug!(pid = process.pid, took = ?started.elapsed(), "python zygote started");
        self.pid.store(process.pid, Ordering::Relaxed);
        *running = Some(Forker::new(process, self.exits()));
        Ok(())
    }

    fn clear(&self, running: &mut Option<Forker>) {
        self.pid.store(0, Ordering::Relaxed);
        running.take();
    }

    /// Stops the zygote, once a fork asked of it now has its answer (a start under way is
    /// stopped by the runtime's stop token).
    pub(crate) async fn stop(&self) {
        let mut running = self.running.lock().await;
        self.clear(&mut running);
    }

    /// Stops the zygote unless a fork holds it (then it stops when the last owner drops it).
    pub(crate) fn stop_now(&self) {
        if let Ok(mut running) = self.running.try_lock() {
            self.clear(&mut running);
        }
    }
}
