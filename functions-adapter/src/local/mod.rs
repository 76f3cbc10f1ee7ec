//! The embedded `local` backend: tinyFaaS-format function folders run as warm worker
//! processes, with no container engine.
//!
//! - `python3` (`fn.py` with `fn(input, headers) -> str`) and `nodejs` (a module exporting
//!   `(req, res) => res.send(str)`) run in long-lived workers started from small bootstrap
//!   scripts embedded in this crate. No interpreter starts on a call, a function's first
//!   included: the runtime starts one Python zygote (`zygote.rs`) and a pool of generic Node.js
//!   workers (`node_pool.rs`, `node_spares` of them) in the background when it starts. A
//!   version's first `python3` instance is forked from the zygote and imports the function; the
//!   later ones are forked from the version's fork server, which the zygote forks after that
//!   first instance's first call (`fork_server.rs`, `fork.rs`; `fork_server = false` starts the
//!   interpreter each time). A new `nodejs` instance takes a generic worker, which then loads the function
//!   and serves it only (or, when none is ready, starts node and loads it; `node_spares = 0`
//!   always does).
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
mod fork_server;
pub mod logs;
mod memory;
mod node_pool;
mod pool;
mod prewarm;
mod proc;
mod scratch;
mod spec;
mod worker;
mod zygote;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use async_trait::async_trait;
use deadpool::managed::{Object, PoolError};
use geofaas_config::LocalBackend;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub use error::LocalError;
pub use logs::{FunctionLogs, LogLine, LogStream};
pub use memory::MemoryFigure;
pub use prewarm::{PrewarmStats, WarmUp};
pub use spec::{load as load_function, FunctionSpec, Runtime};

use crate::{ContainerChoice, FunctionBackend, Health, Invocation, InvokeError, InvokeOutput};
use pool::{GetError, WorkerManager, WorkerPool};
use worker::{FirstCall, InstanceSource, Launch};

const PYTHON_BOOTSTRAP: &str = include_str!("bootstrap/worker.py");
const NODE_BOOTSTRAP: &str = include_str!("bootstrap/worker.js");
/// Address space (RLIMIT_AS) node 20 needs to start at all, measured: 512 MiB fails, 1024 works.
const NODE_MIN_MEMORY_MB: u64 = 1024;
/// Most generic Node.js workers a runtime may keep (`node_spares`).
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
    /// The functions served, each with its live version (and a rollout's second one). Swapped
    /// whole when a version is activated or removed; a call holds the version it started on.
    functions: ArcSwap<HashMap<String, Entry>>,
    /// Serialises changes of `functions` (readers never wait).
    changes: parking_lot::Mutex<()>,
    launch: Arc<Launch>,
    keep_alive: Duration,
    max_instances: usize,
    /// Forks every Python process (`None` with `fork_server = false`).
    zygote: Option<Arc<zygote::Zygote>>,
    /// Generic Node.js workers (`None` with `node_spares = 0`).
    node_pool: Option<Arc<node_pool::NodePool>>,
    /// Notified whenever a call has given its instance back (or lost it), so calls that must
    /// reuse one ([`ContainerChoice::Reuse`]) wait for it instead of starting another.
    returned: tokio::sync::Notify,
    timeout: Duration,
    stop: CancellationToken,
    /// Instances started ahead of a call ([`LocalRuntime::warm_one`]) and what became of them.
    prewarm: Arc<prewarm::PrewarmCounts>,
    /// Holds the bootstrap scripts and the zygote's socket; deleted when the runtime goes away
    /// (or by the next runtime to start, when this one was killed).
    _scripts: scratch::Scratch,
}

/// What a function name serves: its live version and, during a rollout, a second version that
/// takes a stable share of the callers.
#[derive(Clone, Debug)]
struct Entry {
    live: Arc<Loaded>,
    rollout: Option<(Arc<Loaded>, u8)>,
}

impl Entry {
    /// The version a caller gets: the rollout's when the caller's bucket (0-99, from its hash)
    /// is below its percentage.
    fn pick(&self, caller: u64) -> &Arc<Loaded> {
        match &self.rollout {
            Some((next, percent)) if rollout_bucket(caller) < *percent => next,
            _ => &self.live,
        }
    }

    fn versions(&self) -> impl Iterator<Item = &Arc<Loaded>> {
        std::iter::once(&self.live).chain(self.rollout.iter().map(|(v, _)| v))
    }
}

/// The bucket (0-99) of a caller for percentage rollouts; the same caller always gets the
/// same bucket.
pub fn rollout_bucket(caller: u64) -> u8 {
    // A fixed mix (splitmix64's finaliser), so neighbouring hashes spread over the buckets.
    let mut z = caller.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z % 100) as u8
}

/// One version of a function with its pool of instances. Dropped once no entry and no call
/// holds it any more: its instances and fork server are stopped then.
#[derive(Debug)]
struct Loaded {
    pool: WorkerPool,
}

impl Loaded {
    fn spec(&self) -> &Arc<FunctionSpec> {
        &self.pool.manager().spec
    }

    fn stop(&self) {
        self.pool.close();
        self.pool.retain(|_, _| false);
        if let InstanceSource::Fork(server) = &self.pool.manager().source {
            server.stop();
        }
    }
}

impl Drop for Loaded {
    fn drop(&mut self) {
        tracing::debug!(function = %self.spec().name, version = ?self.spec().version, "version retired");
        self.stop();
    }
}

/// A version of a function started and ready to be activated ([`LocalRuntime::prepare`]).
#[derive(Clone, Debug)]
pub struct Prepared(Arc<Loaded>);

impl Prepared {
    /// The version's spec.
    pub fn spec(&self) -> &FunctionSpec {
        self.0.spec()
    }
}

/// The versions a function serves now, as [`LocalRuntime::serving`] reports them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Serving {
    /// The live version's id (`None` for a folder of `functions_dir`).
    pub live: Option<Arc<str>>,
    /// A rollout's version and the percentage of callers it takes.
    pub rollout: Option<(Option<Arc<str>>, u8)>,
}

impl LocalRuntime {
    /// Scans `cfg.functions_dir` (relative to `base_dir`, usually the topology file's folder),
    /// writes the worker bootstraps to a temporary folder, starts the keep-alive reaper and, in
    /// the background, the Python zygote and the generic Node.js workers. No function's worker
    /// starts until the function is first called. Must run inside a tokio runtime.
    pub fn new(cfg: &LocalBackend, base_dir: &Path) -> Result<Self, LocalError> {
        validate(cfg)?;
        let handle =
            tokio::runtime::Handle::try_current().map_err(|_| LocalError::NoTokioRuntime)?;
        let specs = spec::scan(&base_dir.join(&cfg.functions_dir), cfg.functions.as_deref())?;
        let scripts = scratch::Scratch::create().map_err(LocalError::Bootstrap)?;
        let node = interpreter("GEOFAAS_NODE", "node");
        let launch = Arc::new(Launch {
            python: interpreter("GEOFAAS_PYTHON", "python3"),
            node_flags: node_flags(&node, cfg.memory_limit_mb),
            node,
            python_bootstrap: write_script(scripts.path(), "worker.py", PYTHON_BOOTSTRAP)?,
            node_bootstrap: write_script(scripts.path(), "worker.js", NODE_BOOTSTRAP)?,
            memory_limit_mb: cfg.memory_limit_mb,
            max_output_bytes: cfg.max_output_bytes,
            logs: Arc::new(FunctionLogs::default()),
        });
        let keep_alive = Duration::from_secs(cfg.keep_alive_s);
        let stop = CancellationToken::new();
        let timeout = Duration::from_millis(cfg.timeout_ms);
        let zygote = if cfg.fork_server {
            let socket = scripts.path().join("fork.sock");
            let rendezvous =
                fork::Rendezvous::bind(socket, stop.clone()).map_err(LocalError::Bootstrap)?;
            let dir = scripts.path().to_path_buf();
            Some(zygote::Zygote::new(
                Arc::clone(&launch),
                dir,
                rendezvous,
                stop.clone(),
            ))
        } else {
            None
        };
        let node_pool = (cfg.node_spares > 0).then(|| {
            Arc::new(node_pool::NodePool::new(
                Arc::clone(&launch),
                scripts.path().to_path_buf(),
                cfg.node_spares,
                timeout,
                stop.clone(),
            ))
        });
        let inner = Arc::new(Inner {
            functions: ArcSwap::from_pointee(HashMap::new()),
            changes: parking_lot::Mutex::new(()),
            launch,
            keep_alive,
            max_instances: cfg.max_instances,
            zygote,
            node_pool,
            returned: tokio::sync::Notify::new(),
            timeout,
            stop: stop.clone(),
            prewarm: Arc::default(),
            _scripts: scripts,
        });
        let runtime = Self { inner };
        let mut functions = HashMap::new();
        for spec in specs {
            tracing::info!(function = %spec.name, runtime = %spec.runtime, dir = %spec.dir.display(), "local function");
            let name = spec.name.clone();
            let live = runtime.load(spec)?;
            functions.insert(
                name,
                Entry {
                    live,
                    rollout: None,
                },
            );
        }
        runtime.inner.functions.store(Arc::new(functions));
        let pools = |inner: &Inner| {
            let functions = inner.functions.load();
            let versions = functions.values().flat_map(Entry::versions);
            versions.map(|v| v.pool.clone()).collect()
        };
        handle.spawn(pool::reaper(
            Arc::downgrade(&runtime.inner),
            pools,
            keep_alive,
            stop,
        ));
        runtime.warm_up(&handle);
        Ok(runtime)
    }

    /// Starts, in the background and one after the other, the zygote and then the generic
    /// Node.js workers, so that a node's start is not a burst of interpreters at once (the first
    /// Python call waits for the zygote only). Both start whatever functions the folder holds:
    /// a function deployed later finds them running. Health does not wait for them: peers
    /// and clients route by health from the start.
    fn warm_up(&self, handle: &tokio::runtime::Handle) {
        let zygote = self.inner.zygote.clone();
        let node_pool = self.inner.node_pool.clone();
        if zygote.is_none() && node_pool.is_none() {
            return;
        }
        handle.spawn(async move {
            if let Some(zygote) = zygote {
                zygote.warm().await;
            }
            if let Some(pool) = node_pool {
                pool.fill_up().await;
            }
        });
    }

    /// Builds the pool of one version (no instance starts yet).
    fn load(&self, spec: FunctionSpec) -> Result<Arc<Loaded>, LocalError> {
        let inner = &self.inner;
        let launch = &inner.launch;
        let spec = Arc::new(spec);
        let source = match (spec.runtime, &inner.zygote, &inner.node_pool) {
            (Runtime::Python3, Some(zygote), _) => InstanceSource::Fork(Arc::new(
                fork_server::ForkServer::new(spec.clone(), Arc::clone(zygote)),
            )),
            (Runtime::Nodejs, _, Some(node_pool)) => {
                InstanceSource::NodePool(Arc::clone(node_pool))
            }
            _ => InstanceSource::Spawn,
        };
        if spec.runtime == Runtime::Nodejs
            && (1..NODE_MIN_MEMORY_MB).contains(&launch.memory_limit_mb)
        {
            tracing::warn!(
                function = %spec.name,
                memory_limit_mb = launch.memory_limit_mb,
                "node reserves about {NODE_MIN_MEMORY_MB} MiB of address space at start; \
                 with a lower memory_limit_mb its workers will fail to start"
            );
        }
        let manager = WorkerManager {
            spec,
            launch: Arc::clone(launch),
            keep_alive: inner.keep_alive,
            source,
            prewarm: Arc::clone(&inner.prewarm),
            memory: Arc::default(),
        };
        let pool = pool::build(manager, inner.max_instances).map_err(LocalError::Config)?;
        Ok(Arc::new(Loaded { pool }))
    }

    /// Gets a version of a function ready to take calls: its pool and, with `warm`, one
    /// instance started (forked through the zygote, or a generic Node.js worker that loaded
    /// it) and idle, so the version's first call is a warm one. A function that cannot start (no interpreter, an import that fails)
    /// is an error, and nothing that serves calls changes.
    pub async fn prepare(&self, spec: FunctionSpec, warm: bool) -> Result<Prepared, LocalError> {
        let name = spec.name.clone();
        let loaded = self.load(spec)?;
        if warm {
            let started = tokio::time::timeout(self.inner.timeout, loaded.pool.get()).await;
            let mut worker = match started {
                Ok(Ok(worker)) => worker,
                Ok(Err(e)) => {
                    let reason = match e {
                        PoolError::Backend(start) => start.to_string(),
                        other => pool_error(other, &name).to_string(),
                    };
                    return Err(LocalError::Start { name, reason });
                }
                Err(_) => {
                    return Err(LocalError::Start {
                        name,
                        reason: format!(
                            "no instance started within {} ms",
                            self.inner.timeout.as_millis()
                        ),
                    })
                }
            };
            // Warmed: the first call to take it is a warm one, and a generic worker taken is
            // replaced.
            if worker.cold.take().is_some() {
                loaded.pool.manager().source.first_call_done();
            }
            worker.idle_since = std::time::Instant::now();
        }
        Ok(Prepared(loaded))
    }

    /// A version of a function loaded without starting anything: its first call starts an
    /// instance (a node restoring its deployed versions at start).
    pub fn prepare_cold(&self, spec: FunctionSpec) -> Result<Prepared, LocalError> {
        self.load(spec).map(Prepared)
    }

    /// The live version of `function` as it is loaded now.
    pub fn loaded_live(&self, function: &str) -> Option<Prepared> {
        let functions = self.inner.functions.load();
        functions.get(function).map(|e| Prepared(e.live.clone()))
    }

    /// The loaded version `version` of `function` (live or in a rollout), to activate again
    /// without starting anything.
    pub fn loaded(&self, function: &str, version: &str) -> Option<Prepared> {
        let functions = self.inner.functions.load();
        let entry = functions.get(function)?;
        let found = entry
            .versions()
            .find(|v| v.spec().version.as_deref() == Some(version));
        found.map(|v| Prepared(v.clone()))
    }

    /// Makes `live` the version new calls of its function run on, and `rollout` the version
    /// a stable `percent` of callers get instead. Calls already running finish on the version
    /// they started on; a version no longer named is stopped once they have.
    pub fn activate(&self, live: Prepared, rollout: Option<(Prepared, u8)>) {
        let _changing = self.inner.changes.lock();
        let name = live.spec().name.clone();
        let mut functions = HashMap::clone(&self.inner.functions.load());
        let entry = Entry {
            live: live.0,
            rollout: rollout.map(|(v, p)| (v.0, p.min(100))),
        };
        functions.insert(name, entry);
        self.inner.functions.store(Arc::new(functions));
    }

    /// Stops serving `function`; calls running finish first. Whether it was served.
    pub fn remove(&self, function: &str) -> bool {
        let _changing = self.inner.changes.lock();
        let mut functions = HashMap::clone(&self.inner.functions.load());
        let removed = functions.remove(function).is_some();
        self.inner.functions.store(Arc::new(functions));
        removed
    }

    /// Whether `function` is served here (one lookup: every call asks).
    pub fn serves(&self, function: &str) -> bool {
        self.inner.functions.load().contains_key(function)
    }

    /// The versions `function` serves now (`None` if it is not served here).
    pub fn serving(&self, function: &str) -> Option<Serving> {
        let functions = self.inner.functions.load();
        let entry = functions.get(function)?;
        Some(Serving {
            live: entry.live.spec().version.clone(),
            rollout: entry
                .rollout
                .as_ref()
                .map(|(v, p)| (v.spec().version.clone(), *p)),
        })
    }

    /// The live version's folder and runtime, if the function is served here.
    pub fn spec(&self, function: &str) -> Option<Arc<FunctionSpec>> {
        let functions = self.inner.functions.load();
        functions.get(function).map(|e| e.live.spec().clone())
    }

    /// Idle, busy and maximum instances of `function` (`None` if it is not served here), over
    /// its live version and a rollout's; generic Node.js workers ([`Self::spare_pids`]) are not
    /// counted until a call takes one.
    pub fn stats(&self, function: &str) -> Option<PoolStats> {
        let functions = self.inner.functions.load();
        let entry = functions.get(function)?;
        let mut stats = PoolStats {
            idle: 0,
            busy: 0,
            max: 0,
        };
        for v in entry.versions() {
            let status = v.pool.status();
            stats.idle += status.available;
            stats.busy += status.size.saturating_sub(status.available);
            stats.max += status.max_size;
        }
        Some(stats)
    }

    /// The measured memory of an instance of `function`'s live version (see `memory.rs`):
    /// `None` before a call left one of its workers idle, or when `function` is not served.
    pub fn memory(&self, function: &str) -> Option<MemoryFigure> {
        let functions = self.inner.functions.load();
        functions.get(function)?.live.pool.manager().memory.figure()
    }

    /// PIDs of the started processes a new instance of `function` would be taken from: the
    /// runtime's generic Node.js workers ([`Self::node_worker_pids`]) for a `nodejs` function
    /// that uses them, none otherwise or when `function` is not served here. They belong to no
    /// function until taken and are not counted in [`Self::stats`].
    pub fn spare_pids(&self, function: &str) -> Vec<u32> {
        let functions = self.inner.functions.load();
        match functions
            .get(function)
            .map(|e| &e.live.pool.manager().source)
        {
            Some(InstanceSource::NodePool(pool)) => pool.pids(),
            _ => Vec::new(),
        }
    }

    /// PIDs of the generic Node.js workers that are started and wait to become an instance of
    /// some function (`node_spares` of them once filled; empty with `node_spares = 0`).
    pub fn node_worker_pids(&self) -> Vec<u32> {
        self.inner
            .node_pool
            .as_ref()
            .map(|p| p.pids())
            .unwrap_or_default()
    }

    /// PID of the Python zygote that forks every Python process, once it runs (`None` while it
    /// starts, after it died until the next fork starts another, and with `fork_server = false`).
    pub fn zygote_pid(&self) -> Option<u32> {
        self.inner.zygote.as_ref().and_then(|z| z.pid())
    }

    /// What the functions of this runtime wrote to stdout and stderr, newest lines kept.
    pub fn logs(&self) -> &Arc<FunctionLogs> {
        &self.inner.launch.logs
    }

    /// Stops the idle instances of every function that outlived `keep_alive` now, instead of
    /// waiting for the reaper; returns how many were stopped.
    pub fn evict_idle(&self, keep_alive: Duration) -> usize {
        let functions = self.inner.functions.load();
        let versions = functions.values().flat_map(Entry::versions);
        versions
            .map(|v| pool::evict_idle(&v.pool, keep_alive))
            .sum()
    }

    /// Stops every worker: idle ones at once, busy ones by failing their calls with
    /// [`InvokeError::Unavailable`]. Later calls fail the same way. Waits (up to 2 s) until
    /// in-flight calls have let go of their workers.
    pub async fn shutdown(&self) {
        self.inner.stop.cancel();
        let functions = self.inner.functions.load_full();
        let versions = || functions.values().flat_map(Entry::versions);
        for v in versions() {
            v.pool.close();
        }
        let deadline = Instant::now() + SHUTDOWN_GRACE;
        while Instant::now() < deadline && versions().any(|v| v.pool.status().size > 0) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        for v in versions() {
            v.stop();
        }
        if let Some(zygote) = &self.inner.zygote {
            zygote.stop().await;
        }
        if let Some(node_pool) = &self.inner.node_pool {
            node_pool.clear();
        }
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
        let get_error = |e| match e {
            // Still queueing for a free instance: the pool was full the whole time.
            GetError::Full => InvokeError::Overloaded { retry_after: None },
            GetError::Timeout => InvokeError::Timeout(budget),
            GetError::Pool(e) => pool_error(e, name),
        };
        let mut worker = pool::get(pool, budget).await.map_err(get_error)?;
        if call.container == ContainerChoice::New && worker.cold.is_none() {
            let left = budget.saturating_sub(started.elapsed());
            pool::renew(&mut worker, pool.manager(), left)
                .await
                .map_err(get_error)?;
        }
        let cold = worker.cold.take();
        let manager = pool.manager();
        if std::mem::take(&mut worker.prewarmed) {
            manager.prewarm.used();
        }
        let _first_call = cold.is_some().then(|| FirstCall(&manager.source));
        let request_id = call.request_id();
        let headers = request_head(&call, request_id.unwrap_or_default());
        let exec_started = Instant::now();
        let left = budget.saturating_sub(started.elapsed());
        // Until the call's answer is read, the instance is in the call: if this future is
        // dropped (the client hung up), the guard stops it instead of handing an instance
        // with an abandoned call's answer still to come to the next caller.
        let mut guard = InCall(Some(worker));
        let Some(in_call) = guard.0.as_mut() else {
            return Err(InvokeError::Unavailable("no instance".into()));
        };
        let call_fut = in_call.call(
            &manager.spec,
            &manager.launch,
            &headers,
            &call.body,
            request_id,
        );
        let outcome = tokio::select! {
            outcome = tokio::time::timeout(left, call_fut) => outcome,
            () = self.inner.stop.cancelled() => {
                // The guard stops the instance. The function had started: a lost call, not
                // one that never ran.
                return Err(InvokeError::Network("the local runtime shut down during the call".into()));
            }
        };
        let Some(worker) = guard.0.take() else {
            return Err(InvokeError::Unavailable("no instance".into()));
        };
        let elapsed = exec_started.elapsed();
        let Ok(done) = outcome else {
            tracing::debug!(function = name, pid = ?worker.pid(), "call timed out: killing worker");
            drop(Object::take(worker));
            return Err(InvokeError::Timeout(budget));
        };
        let streaming = matches!(done.result, Ok(worker::Reply::Streaming(..)));
        let mut worker = Some(worker);
        if streaming {
            // The instance stays in the call until its stream ends ([`stream_rest`]).
        } else if done.keep && !self.inner.stop.is_cancelled() {
            if let Some(w) = worker.as_mut() {
                w.idle_since = std::time::Instant::now();
                manager.memory.after_call(w.pid());
            }
        } else if let Some(w) = worker.take() {
            drop(Object::take(w));
        }
        let (status, headers, body) = match done.result? {
            worker::Reply::Raw(body) => (http::StatusCode::OK, http::HeaderMap::new(), body.into()),
            worker::Reply::Whole(head, body) => {
                let (status, headers) = answer_head(name, head)?;
                (status, headers, body.into())
            }
            worker::Reply::Streaming(head, first) => {
                let (status, headers) = answer_head(name, head)?;
                let rest = StreamRest {
                    worker: worker.take(),
                    inner: self.inner.clone(),
                    left: manager.launch.max_output_bytes.saturating_sub(first.len()),
                    limit: manager.launch.max_output_bytes,
                    deadline: started + budget,
                    budget,
                };
                (status, headers, stream_rest(first, rest))
            }
        };
        let cold_start = cold.is_some();
        let (cold, exec) = match cold {
            Some(start) => (start + done.startup, elapsed.saturating_sub(done.startup)),
            None => (Duration::ZERO, elapsed),
        };
        Ok(InvokeOutput {
            status,
            headers,
            body,
            cold_start,
            cold,
            exec,
            version: manager.spec.version.clone(),
            memory: manager.memory.figure(),
        })
    }
}

/// An instance running a call: dropped before the call's answer was read, it is taken out of
/// the pool and stopped (its process group killed).
struct InCall(Option<Object<WorkerManager>>);

impl Drop for InCall {
    fn drop(&mut self) {
        if let Some(w) = self.0.take() {
            tracing::debug!(pid = ?w.pid(), "call abandoned mid-run: stopping its instance");
            drop(Object::take(w));
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.stop.cancel();
        for v in self.functions.load().values().flat_map(Entry::versions) {
            v.stop();
        }
        if let Some(zygote) = &self.zygote {
            zygote.stop_now();
        }
        if let Some(node_pool) = &self.node_pool {
            node_pool.clear();
        }
    }
}

#[async_trait]
impl FunctionBackend for LocalRuntime {
    fn kind(&self) -> &'static str {
        "local"
    }

    async fn invoke(&self, call: Invocation) -> Result<InvokeOutput, InvokeError> {
        let version = {
            let functions = self.inner.functions.load();
            let entry = functions
                .get(&call.function)
                .ok_or_else(|| InvokeError::UnknownFunction(call.function.clone()))?;
            entry.pick(call.caller).clone()
        };
        if self.inner.stop.is_cancelled() {
            return Err(InvokeError::Unavailable("local runtime shut down".into()));
        }
        let result = self.run(&version.pool, call).await;
        self.inner.returned.notify_waiters();
        result
    }

    async fn list(&self) -> Result<Vec<String>, InvokeError> {
        let mut names: Vec<String> = self.inner.functions.load().keys().cloned().collect();
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

    async fn serves(&self, function: &str) -> bool {
        LocalRuntime::serves(self, function)
    }

    fn lists_live(&self) -> bool {
        true
    }

    async fn warm_one(&self, function: &str) -> Option<Result<WarmUp, LocalError>> {
        Some(LocalRuntime::warm_one(self, function).await)
    }

    fn prewarm_stats(&self) -> Option<PrewarmStats> {
        Some(LocalRuntime::prewarm_stats(self))
    }

    fn logs(&self) -> Option<&Arc<FunctionLogs>> {
        Some(LocalRuntime::logs(self))
    }

    fn local(&self) -> Option<&LocalRuntime> {
        Some(self)
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
            "node_spares must be at most {MAX_NODE_SPARES} (each is an idle node process), \
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

/// The flags node runs with. Under an address-space limit V8's Wasm trap handler, which
/// reserves about 10 GiB of address space for each Wasm memory, makes every Wasm instance fail
/// with "Cannot allocate Wasm memory"; Node's own `Request`, `Response` and `fetch` (undici)
/// instantiate one (llhttp) on first use. `--disable-wasm-trap-handler` (Node 20.15 and later)
/// makes V8 bounds-check instead; an older node, which refuses the flag, runs without it.
fn node_flags(node: &Path, memory_limit_mb: u64) -> Vec<std::ffi::OsString> {
    const FLAG: &str = "--disable-wasm-trap-handler";
    if memory_limit_mb == 0 {
        return Vec::new();
    }
    let accepted = std::process::Command::new(node)
        .args([FLAG, "-e", ""])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if accepted {
        vec![FLAG.into()]
    } else {
        Vec::new()
    }
}

fn write_script(dir: &Path, name: &str, text: &str) -> Result<PathBuf, LocalError> {
    let path = dir.join(name);
    std::fs::write(&path, text).map_err(LocalError::Bootstrap)?;
    Ok(path)
}

/// Request headers as the JSON object the bootstraps pass to the function (repeated headers
/// joined with `, `, values that are not UTF-8 replaced lossily).
/// The request head a worker reads ([`worker::RequestHead`]).
fn request_head(call: &Invocation, request_id: &str) -> Vec<u8> {
    let head = worker::RequestHead {
        method: call.http.method.as_str(),
        path: &call.http.path,
        query: &call.http.query,
        url: &call.http.url,
        source_ip: call.http.source_ip,
        request_id,
        headers: call
            .sent_headers()
            .map(|(name, value)| (name.as_str(), String::from_utf8_lossy(value.as_bytes())))
            .collect(),
    };
    serde_json::to_vec(&head).unwrap_or_else(|_| b"{}".to_vec())
}

/// A worker's answer head as the contract allows it ([`crate::http_fn`]).
fn answer_head(
    function: &str,
    head: worker::AnswerHead,
) -> Result<(http::StatusCode, http::HeaderMap), InvokeError> {
    let status = crate::http_fn::answer_status(function, head.status)?;
    let pairs = head.headers.iter().map(|(n, v)| (n.as_str(), v.as_bytes()));
    Ok((status, crate::http_fn::answer_headers(function, pairs)?))
}

/// The rest of a streamed body: the instance producing it, the bytes it may still send, and
/// the call's deadline.
struct StreamRest {
    worker: Option<Object<WorkerManager>>,
    inner: Arc<Inner>,
    left: usize,
    limit: usize,
    deadline: Instant,
    budget: Duration,
}

impl Drop for StreamRest {
    /// A stream dropped before its end (the client went away, a failure, the deadline) stops
    /// the instance: it is in the middle of a call, so it never goes back to the pool.
    fn drop(&mut self) {
        if let Some(w) = self.worker.take() {
            drop(Object::take(w));
        }
        self.inner.returned.notify_waiters();
    }
}

/// `first`, then each chunk the instance of `rest` produces, until its end; then the instance
/// goes back to its pool.
fn stream_rest(first: bytes::Bytes, rest: StreamRest) -> crate::Payload {
    use futures::StreamExt as _;
    let first = futures::stream::once(async move { Ok(first) });
    let more = futures::stream::unfold(rest, |mut rest| async move {
        let worker = rest.worker.as_mut()?;
        let read = tokio::time::timeout_at(rest.deadline, worker.next_chunk(rest.left)).await;
        match read {
            Ok(Ok(Some(chunk))) => {
                rest.left = rest.left.saturating_sub(chunk.len());
                Some((Ok(chunk), rest))
            }
            Ok(Ok(None)) => {
                // Done: the instance is free again.
                if let Some(mut w) = rest.worker.take() {
                    w.idle_since = std::time::Instant::now();
                    if rest.inner.stop.is_cancelled() {
                        drop(Object::take(w));
                    }
                }
                None
            }
            Ok(Err((e, keep))) => {
                let e = match e {
                    InvokeError::OutputTooLarge { .. } => {
                        InvokeError::OutputTooLarge { limit: rest.limit }
                    }
                    e => e,
                };
                // An error ends the stream. An instance whose function raised after its head
                // may serve again; any other is stopped.
                if let Some(mut w) = rest.worker.take() {
                    w.idle_since = std::time::Instant::now();
                    if !keep {
                        drop(Object::take(w));
                    }
                }
                Some((Err(e), rest))
            }
            Err(_) => {
                if let Some(w) = rest.worker.take() {
                    drop(Object::take(w));
                }
                Some((Err(InvokeError::Timeout(rest.budget)), rest))
            }
        }
    });
    crate::Payload::Stream(Box::pin(first.chain(more)))
}

fn pool_error(e: PoolError<worker::StartError>, function: &str) -> InvokeError {
    match e {
        PoolError::Backend(start) => start.into_invoke(function),
        PoolError::Closed => InvokeError::Unavailable("local runtime shut down".into()),
        other => InvokeError::Unavailable(format!("local runtime, function {function}: {other}")),
    }
}
