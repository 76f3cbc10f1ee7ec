//! The embedded `local` backend: tinyFaaS-format function folders run as warm worker
//! processes, with no container engine.
//!
//! - `python3` (`fn.py` with `fn(input, headers) -> str`) and `nodejs` (a module exporting
//!   `(req, res) => res.send(str)`) run in long-lived workers started from small bootstrap
//!   scripts embedded in this crate. A new `python3` instance is forked from a per-function fork
//!   server that has already imported the function (`fork.rs`; `fork_server = false` starts the
//!   interpreter each time). A new `nodejs` instance takes a spare process that has already
//!   loaded the function (`spare.rs`, `node_spares` per function, refilled in the background),
//!   or, when none is ready, starts node and loads it.
//! - `binary` (`fn.sh`, stdin → stdout) runs one process per call; see `binary.rs` for what
//!   "warm" means there.
//!
//! Instances are pooled per function (deadpool, see `pool.rs`) up to `max_instances`, stopped
//! after `keep_alive_s` idle by a reaper task, and never reused after a timeout, a crash or an
//! oversized output. Every worker leads its own process group, which is killed when the
//! instance is dropped, on [`LocalRuntime::shutdown`] and when the runtime is dropped.
//!
//! Interpreters are `python3` and `node` from `PATH`, or the paths in `GEOFAAS_PYTHON` and
//! `GEOFAAS_NODE` (point these at the real binaries when `PATH` holds slow shims such as pyenv's).
//! Function dependencies (`requirements.txt`, `node_modules`) are not installed by the runtime.

mod binary;
mod error;
mod fork;
mod pool;
mod proc;
mod scratch;
mod spare;
mod spec;
mod worker;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use deadpool::managed::{Object, PoolError};
use geofaas_config::LocalBackend;
use http::HeaderMap;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub use error::LocalError;
pub use spec::{FunctionSpec, Runtime};

use crate::{ContainerChoice, FunctionBackend, Health, Invocation, InvokeError, InvokeOutput};
use pool::{GetContext, WorkerManager, WorkerPool, GET_CONTEXT};
use worker::{FirstCall, InstanceSource, Launch};

const PYTHON_BOOTSTRAP: &str = include_str!("bootstrap/worker.py");
const NODE_BOOTSTRAP: &str = include_str!("bootstrap/worker.js");
/// Address space (RLIMIT_AS) node 20 needs to start at all, measured: 512 MiB fails, 1024 works.
const NODE_MIN_MEMORY_MB: u64 = 1024;
/// Most spare instances a Node.js function may keep (`node_spares`).
const MAX_NODE_SPARES: usize = 16;
/// How long [`LocalRuntime::shutdown`] waits for in-flight calls to drop their workers.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// Instance counts of one function, as the scheduler's observation needs them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolStats {
    /// Warm instances waiting for a call.
    pub idle: usize,
    /// Instances serving a call or starting.
    pub busy: usize,
    /// Most instances the function may have (`max_instances`).
    pub max: usize,
}

/// The embedded runtime. Cheap to clone; clones share the same workers.
#[derive(Clone, Debug)]
pub struct LocalRuntime {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    functions: HashMap<String, WorkerPool>,
    /// Notified whenever a call has given its instance back (or lost it), so calls that must
    /// reuse one ([`ContainerChoice::Reuse`]) wait for it instead of starting another.
    returned: tokio::sync::Notify,
    timeout: Duration,
    stop: CancellationToken,
    /// Holds the bootstrap scripts; deleted when the runtime goes away (or by the next runtime
    /// to start, when this one was killed).
    _scripts: scratch::Scratch,
}

impl LocalRuntime {
    /// Scans `cfg.functions_dir` (relative to `base_dir`, usually the topology file's folder),
    /// writes the worker bootstraps to a temporary folder and starts the keep-alive reaper.
    /// No worker starts until its function is first called. Must run inside a tokio runtime.
    pub fn new(cfg: &LocalBackend, base_dir: &Path) -> Result<Self, LocalError> {
        validate(cfg)?;
        let handle =
            tokio::runtime::Handle::try_current().map_err(|_| LocalError::NoTokioRuntime)?;
        let specs = spec::scan(&base_dir.join(&cfg.functions_dir), cfg.functions.as_deref())?;
        let scripts = scratch::Scratch::create().map_err(LocalError::Bootstrap)?;
        let launch = Arc::new(Launch {
            python: interpreter("GEOFAAS_PYTHON", "python3"),
            node: interpreter("GEOFAAS_NODE", "node"),
            python_bootstrap: write_script(scripts.path(), "worker.py", PYTHON_BOOTSTRAP)?,
            node_bootstrap: write_script(scripts.path(), "worker.js", NODE_BOOTSTRAP)?,
            memory_limit_mb: cfg.memory_limit_mb,
            max_output_bytes: cfg.max_output_bytes,
            fork_server: cfg.fork_server,
        });
        let keep_alive = Duration::from_secs(cfg.keep_alive_s);
        let stop = CancellationToken::new();
        let mut functions = HashMap::new();
        for spec in specs {
            let spec_arc = Arc::new(spec.clone());
            let source = match spec.runtime {
                Runtime::Python3 if launch.fork_server => InstanceSource::Fork(Arc::new(
                    fork::ForkServer::new(spec_arc.clone(), Arc::clone(&launch), scripts.path()),
                )),
                Runtime::Nodejs if cfg.node_spares > 0 => {
                    InstanceSource::Spares(Arc::new(spare::Spares::new(
                        spec_arc.clone(),
                        Arc::clone(&launch),
                        cfg.node_spares,
                        Duration::from_millis(cfg.timeout_ms),
                        stop.clone(),
                    )))
                }
                _ => InstanceSource::Spawn,
            };
            let manager = WorkerManager {
                spec: spec_arc,
                launch: Arc::clone(&launch),
                keep_alive,
                source,
            };
            let pool = pool::build(manager, cfg.max_instances).map_err(LocalError::Config)?;
            tracing::info!(function = %spec.name, runtime = %spec.runtime, dir = %spec.dir.display(), "local function");
            if spec.runtime == Runtime::Nodejs
                && (1..NODE_MIN_MEMORY_MB).contains(&cfg.memory_limit_mb)
            {
                tracing::warn!(
                    function = %spec.name,
                    memory_limit_mb = cfg.memory_limit_mb,
                    "node reserves about {NODE_MIN_MEMORY_MB} MiB of address space at start; \
                     with a lower memory_limit_mb its workers will fail to start"
                );
            }
            functions.insert(spec.name, pool);
        }
        let inner = Arc::new(Inner {
            functions,
            returned: tokio::sync::Notify::new(),
            timeout: Duration::from_millis(cfg.timeout_ms),
            stop: stop.clone(),
            _scripts: scripts,
        });
        let pools = |inner: &Inner| inner.functions.values().cloned().collect();
        handle.spawn(pool::reaper(
            Arc::downgrade(&inner),
            pools,
            keep_alive,
            stop,
        ));
        Ok(Self { inner })
    }

    /// The function's folder and runtime, if it is served here.
    pub fn spec(&self, function: &str) -> Option<&FunctionSpec> {
        self.inner
            .functions
            .get(function)
            .map(|p| p.manager().spec.as_ref())
    }

    /// Idle, busy and maximum instances of `function` (`None` if it is not served here); spare
    /// Node instances ([`Self::spare_pids`]) are not counted until a call takes one.
    pub fn stats(&self, function: &str) -> Option<PoolStats> {
        let status = self.inner.functions.get(function)?.status();
        Some(PoolStats {
            idle: status.available,
            busy: status.size.saturating_sub(status.available),
            max: status.max_size,
        })
    }

    /// PIDs of `function`'s spare instances, started and waiting for a first call (`node_spares`;
    /// empty when it has none or is not served here). Spares are not counted in [`Self::stats`].
    pub fn spare_pids(&self, function: &str) -> Vec<u32> {
        match self
            .inner
            .functions
            .get(function)
            .map(|p| &p.manager().source)
        {
            Some(InstanceSource::Spares(spares)) => spares.pids(),
            _ => Vec::new(),
        }
    }

    /// Stops the idle instances of every function that outlived `keep_alive` now, instead of
    /// waiting for the reaper; returns how many were stopped.
    pub fn evict_idle(&self, keep_alive: Duration) -> usize {
        let pools = self.inner.functions.values();
        pools.map(|p| pool::evict_idle(p, keep_alive)).sum()
    }

    /// Stops every worker: idle ones at once, busy ones by failing their calls with
    /// [`InvokeError::Unavailable`]. Later calls fail the same way. Waits (up to 2 s) until
    /// in-flight calls have let go of their workers.
    pub async fn shutdown(&self) {
        self.inner.stop.cancel();
        for pool in self.inner.functions.values() {
            pool.close();
        }
        let deadline = Instant::now() + SHUTDOWN_GRACE;
        while Instant::now() < deadline
            && self.inner.functions.values().any(|p| p.status().size > 0)
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        for pool in self.inner.functions.values() {
            pool.retain(|_, _| false);
        }
        self.inner.clear_spares();
    }

    /// Resolves once `pool` has an idle instance, or has none at all (nothing to wait for).
    /// Another call may take the idle one first; this one then starts an instance.
    async fn until_reusable(&self, pool: &WorkerPool) {
        loop {
            let returned = self.inner.returned.notified();
            tokio::pin!(returned);
            returned.as_mut().enable();
            let s = pool.status();
            if s.available > 0 || s.size == 0 {
                return;
            }
            returned.await;
        }
    }

    async fn run(&self, pool: &WorkerPool, call: Invocation) -> Result<InvokeOutput, InvokeError> {
        let name = call.function.as_str();
        let budget = self.inner.timeout.min(call.remaining());
        if budget.is_zero() {
            return Err(InvokeError::Timeout(budget));
        }
        let started = Instant::now();
        if call.container == ContainerChoice::Reuse
            && tokio::time::timeout(budget, self.until_reusable(pool))
                .await
                .is_err()
        {
            return Err(InvokeError::Overloaded { retry_after: None });
        }
        let ctx = GetContext {
            force_new: call.container == ContainerChoice::New,
            ..GetContext::default()
        };
        let admitted = Arc::clone(&ctx.admitted);
        let got = tokio::time::timeout(budget, GET_CONTEXT.scope(ctx, pool.get())).await;
        let mut worker = match got {
            Ok(got) => got.map_err(|e| pool_error(e, name))?,
            // Still queueing for a free instance: the pool was full the whole time.
            Err(_) if !admitted.load(Ordering::Relaxed) => {
                return Err(InvokeError::Overloaded { retry_after: None })
            }
            Err(_) => return Err(InvokeError::Timeout(budget)),
        };
        let cold = worker.cold.take();
        let manager = pool.manager();
        let _first_call = cold.is_some().then(|| FirstCall(&manager.source));
        let headers = headers_json(&call.headers);
        let exec_started = Instant::now();
        let left = budget.saturating_sub(started.elapsed());
        let call_fut = worker.call(&manager.spec, &manager.launch, &headers, &call.body);
        let outcome = tokio::select! {
            outcome = tokio::time::timeout(left, call_fut) => outcome,
            () = self.inner.stop.cancelled() => {
                drop(Object::take(worker));
                return Err(InvokeError::Unavailable("local runtime shut down".into()));
            }
        };
        let elapsed = exec_started.elapsed();
        let Ok(done) = outcome else {
            tracing::debug!(function = name, pid = ?worker.pid(), "call timed out: killing worker");
            drop(Object::take(worker));
            return Err(InvokeError::Timeout(budget));
        };
        if done.keep && !self.inner.stop.is_cancelled() {
            worker.idle_since = std::time::Instant::now();
        } else {
            drop(Object::take(worker));
        }
        let body = done.result?;
        let cold_start = cold.is_some();
        let (cold, exec) = match cold {
            Some(start) => (start + done.startup, elapsed.saturating_sub(done.startup)),
            None => (Duration::ZERO, elapsed),
        };
        Ok(InvokeOutput {
            body,
            content_type: None,
            cold_start,
            cold,
            exec,
        })
    }
}

impl Inner {
    /// Stops every ready spare (call after `stop` fired, so that no filler adds one back).
    fn clear_spares(&self) {
        for pool in self.functions.values() {
            if let InstanceSource::Spares(spares) = &pool.manager().source {
                spares.clear();
            }
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.stop.cancel();
        for pool in self.functions.values() {
            pool.close();
            pool.retain(|_, _| false);
        }
        self.clear_spares();
    }
}

#[async_trait]
impl FunctionBackend for LocalRuntime {
    fn kind(&self) -> &'static str {
        "local"
    }

    async fn invoke(&self, call: Invocation) -> Result<InvokeOutput, InvokeError> {
        let pool = self
            .inner
            .functions
            .get(&call.function)
            .ok_or_else(|| InvokeError::UnknownFunction(call.function.clone()))?;
        if self.inner.stop.is_cancelled() {
            return Err(InvokeError::Unavailable("local runtime shut down".into()));
        }
        let result = self.run(pool, call).await;
        self.inner.returned.notify_waiters();
        result
    }

    async fn list(&self) -> Result<Vec<String>, InvokeError> {
        let mut names: Vec<String> = self.inner.functions.keys().cloned().collect();
        names.sort();
        Ok(names)
    }

    async fn health(&self) -> Health {
        if self.inner.stop.is_cancelled() {
            Health::Unhealthy("local runtime shut down".into())
        } else {
            Health::Healthy
        }
    }
    fn stats(&self, function: &str) -> Option<PoolStats> {
        LocalRuntime::stats(self, function)
    }
}

fn validate(cfg: &LocalBackend) -> Result<(), LocalError> {
    if cfg.max_instances == 0 {
        return Err(LocalError::Config(
            "max_instances must be at least 1".into(),
        ));
    }
    if cfg.node_spares > MAX_NODE_SPARES {
        return Err(LocalError::Config(format!(
            "node_spares must be at most {MAX_NODE_SPARES} (each spare is an idle node process), \
             not {}",
            cfg.node_spares
        )));
    }
    if cfg.timeout_ms == 0 {
        return Err(LocalError::Config("timeout_ms must be positive".into()));
    }
    if cfg.max_output_bytes == 0 || u32::try_from(cfg.max_output_bytes).is_err() {
        return Err(LocalError::Config(
            "max_output_bytes must be between 1 and 4294967295".into(),
        ));
    }
    Ok(())
}

fn interpreter(env: &str, default: &str) -> PathBuf {
    std::env::var_os(env).map_or_else(|| PathBuf::from(default), PathBuf::from)
}

fn write_script(dir: &Path, name: &str, text: &str) -> Result<PathBuf, LocalError> {
    let path = dir.join(name);
    std::fs::write(&path, text).map_err(LocalError::Bootstrap)?;
    Ok(path)
}

/// Request headers as the JSON object the bootstraps pass to the function (repeated headers
/// joined with `, `, values that are not UTF-8 replaced lossily).
fn headers_json(headers: &HeaderMap) -> Vec<u8> {
    let mut map = serde_json::Map::new();
    for (name, value) in headers {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        match map.get_mut(name.as_str()) {
            Some(serde_json::Value::String(prev)) => {
                prev.push_str(", ");
                prev.push_str(&value);
            }
            _ => {
                map.insert(name.as_str().to_owned(), serde_json::Value::String(value));
            }
        }
    }
    serde_json::to_vec(&map).unwrap_or_else(|_| b"{}".to_vec())
}

fn pool_error(e: PoolError<worker::StartError>, function: &str) -> InvokeError {
    match e {
        PoolError::Backend(start) => start.into_invoke(function),
        PoolError::Closed => InvokeError::Unavailable("local runtime shut down".into()),
        other => InvokeError::Unavailable(format!("local runtime, function {function}: {other}")),
    }
}
