//! geofaas fleet: the node registry, load reports and shared call records on etcd
//! (DESIGN.md §7, `docs/fleet.md`).
//!
//! [`Fleet::start`] connects (lazily) and follows everything under the registry prefix in the
//! background ([`watcher`]); readers take the latest view from memory ([`Fleet::view`],
//! [`Fleet::calls`]) and never wait for etcd. Load reports are not followed: a node reads
//! those of the nodes it places calls on ([`Fleet::loads_of`]), so what a node receives does
//! not grow with the fleet. [`Fleet::join`] registers a
//! node ([`member`]). [`view::merge`] is the one place that decides which registered nodes
//! join a topology. Keys, under `registry.prefix`:
//!
//! - `nodes/<id>`: a [`NodeRecord`], under the node's lease;
//! - `load/<id>`: its latest [`LoadReport`], under the same lease;
//! - `calls/<key>`: a shared `Idempotency-Key` answer, under a lease shared by the records of one
//!   window (`calls.rs`);
//! - `functions/<name>`: the version of a deployed function every node should serve
//!   ([`DesiredFunction`], no lease; `functions.rs`).
//!
//! The etcd client is generated from `proto/etcd.proto` at build time with a vendored protoc
//! ([`etcd`]).

#![forbid(unsafe_code)]

pub mod calls;
pub mod error;
pub mod etcd;
pub mod functions;
pub mod member;
pub mod record;
pub mod usage;
pub mod view;
mod watcher;

/// The generated etcd v3 messages and clients.
#[allow(missing_docs, clippy::all)]
pub mod pb {
    tonic::include_proto!("etcdserverpb");
}

use parking_lot::RwLock;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use geofaas_config::{RegistrySettings, Topology};
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use calls::{CallRecords, Shared};
pub use error::FleetError;
pub use etcd::Etcd;
pub use functions::{DesiredFunction, DesiredFunctions, DesiredRollout};
pub use member::{LoadSource, Member, Status};
pub use record::{now_ms, Capacity, FunctionFacts, FunctionLoad, LoadReport, NodeLoad, NodeRecord};
pub use view::{merge, FleetView, Refusal, Registered};

/// A node's (or the DNS's) link to the registry.
#[derive(Debug)]
pub struct Fleet {
    etcd: Etcd,
    settings: RegistrySettings,
    view: watch::Receiver<Arc<FleetView>>,
    functions: watch::Receiver<Arc<DesiredFunctions>>,
    loads: watcher::Loads,
    calls: Arc<CallRecords>,
    watch_task: JoinHandle<()>,
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.watch_task.abort();
    }
}

impl Fleet {
    /// Starts following the registry of `settings` (needs a Tokio runtime; never waits for etcd).
    pub fn start(settings: &RegistrySettings) -> Result<Arc<Self>, FleetError> {
        let etcd = Etcd::connect(settings)?;
        let (tx, view) = watch::channel(Arc::new(FleetView::default()));
        let (functions_tx, functions) = watch::channel(Arc::new(DesiredFunctions::new()));
        let loads: watcher::Loads = Arc::new(RwLock::new(BTreeMap::new()));
        let calls = Arc::new(CallRecords::new(etcd.clone(), settings));
        let sinks = watcher::Sinks {
            prefix: settings.prefix.clone(),
            nodes: tx,
            functions: functions_tx,
            loads: loads.clone(),
            calls: calls.clone(),
            connected: calls.connected.clone(),
        };
        let watch_task = tokio::spawn(watcher::run(etcd.clone(), sinks));
        Ok(Arc::new(Self {
            etcd,
            settings: settings.clone(),
            view,
            functions,
            loads,
            calls,
            watch_task,
        }))
    }

    /// The registered nodes now, and a receiver that wakes when they change.
    pub fn view(&self) -> watch::Receiver<Arc<FleetView>> {
        self.view.clone()
    }

    /// The desired versions of deployed functions now, and a receiver that wakes when they
    /// change (read with the registered nodes: `view().borrow().synced` says whether etcd was
    /// read at all).
    pub fn functions(&self) -> watch::Receiver<Arc<DesiredFunctions>> {
        self.functions.clone()
    }

    /// Writes `desired` as the version every node should serve of its function (the last
    /// write wins).
    pub async fn set_function(&self, desired: &DesiredFunction) -> Result<(), FleetError> {
        let key = functions::key(&self.settings.prefix, &desired.name);
        let value = serde_json::to_vec(desired).map_err(|e| FleetError::Etcd(e.to_string()))?;
        self.etcd.put(key.into_bytes(), value, 0).await
    }

    /// Deletes the record of `name`: every node stops serving the deployed function.
    pub async fn remove_function(&self, name: &str) -> Result<(), FleetError> {
        let key = functions::key(&self.settings.prefix, name);
        self.etcd.delete(key.into_bytes()).await
    }

    /// Claims the tick at `at_ms` of the cron schedule `schedule` for this node: `Ok(true)` when
    /// no node claimed it or a later tick before. One key per schedule,
    /// `{prefix}cron/{schedule}`, holds the last claimed tick; it moves forward only, in a
    /// transaction that fails when another node moved it since it was read.
    pub async fn claim_tick(&self, schedule: &str, at_ms: u64) -> Result<bool, FleetError> {
        let key = format!("{}cron/{schedule}", self.settings.prefix).into_bytes();
        loop {
            let (kvs, revision) = self.etcd.range_prefix(&key).await?;
            let last = kvs
                .iter()
                .find(|kv| kv.key == key)
                .and_then(|kv| std::str::from_utf8(&kv.value).ok()?.parse::<u64>().ok());
            if last.is_some_and(|last| last >= at_ms) {
                return Ok(false);
            }
            let value = at_ms.to_string().into_bytes();
            if self
                .etcd
                .put_if_unchanged(&key, revision, key.clone(), value, 0)
                .await?
            {
                return Ok(true);
            }
        }
    }

    /// The last claimed tick of `schedule` (ms since the Unix epoch), if any.
    pub async fn last_tick(&self, schedule: &str) -> Result<Option<u64>, FleetError> {
        let key = format!("{}cron/{schedule}", self.settings.prefix);
        let value = self.etcd.get(key.as_bytes()).await?;
        Ok(value.and_then(|v| std::str::from_utf8(&v).ok()?.parse().ok()))
    }

    /// The latest load reports of nodes `ids`, read from etcd now (one get per node, all at
    /// once), leaving out a node whose report is gone (its lease expired) and one whose report
    /// did not change for three report intervals. While etcd does not answer, the last report
    /// read of each node stands until it is that old.
    pub async fn loads_of(&self, ids: &[&str]) -> BTreeMap<String, LoadReport> {
        let reads = ids.iter().map(|&id| async move {
            let key = format!("{}load/{id}", self.settings.prefix);
            (id, self.etcd.get(key.as_bytes()).await)
        });
        let read = futures::future::join_all(reads).await;
        let stale = Duration::from_millis(self.settings.load_interval_ms.saturating_mul(3));
        let mut loads = self.loads.write();
        for (id, got) in read {
            match got {
                Ok(Some(value)) => {
                    let Ok(report) = serde_json::from_slice::<LoadReport>(&value) else {
                        continue;
                    };
                    // A report that did not change keeps the time it first arrived.
                    if loads
                        .get(id)
                        .is_none_or(|(old, _)| old.at_ms != report.at_ms)
                    {
                        loads.insert(id.to_owned(), (report, Instant::now()));
                    }
                }
                Ok(None) => {
                    loads.remove(id);
                }
                Err(e) => tracing::debug!(node = id, error = %e, "load report not read"),
            }
        }
        ids.iter()
            .filter_map(|&id| loads.get(id).map(|l| (id, l)))
            .filter(|(_, (_, at))| at.elapsed() <= stale)
            .map(|(id, (r, _))| (id.to_owned(), r.clone()))
            .collect()
    }

    /// Whether the registry watch follows etcd now (false before the first read and while etcd
    /// does not answer; call records are then kept on the node only).
    pub fn is_following(&self) -> bool {
        self.calls
            .connected
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Shared call records.
    pub fn calls(&self) -> &Arc<CallRecords> {
        &self.calls
    }

    /// The etcd client (for `geofaas fleet ls`).
    pub fn etcd(&self) -> &Etcd {
        &self.etcd
    }

    /// Registers `record` (checked against `file` and the registered nodes) and keeps it
    /// registered, publishing `load` every `registry.load_interval_ms`.
    pub fn join(
        &self,
        record: NodeRecord,
        file: Arc<Topology>,
        load: Arc<dyn LoadSource>,
    ) -> Member {
        Member::start(member::Joining {
            etcd: self.etcd.clone(),
            settings: self.settings.clone(),
            record,
            file,
            load,
        })
    }
}
