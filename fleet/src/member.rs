//! A node's membership: it checks itself against the registry, registers under a lease, renews
//! the lease every third of its TTL and publishes a load report every interval under the same
//! lease. It registers again when the lease is lost (etcd was down longer than the TTL) and
//! revokes it on [`Member::leave`], which deletes its keys at once.

use std::sync::Arc;
use std::time::Duration;

use geofaas_config::{RegistrySettings, Topology};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::error::FleetError;
use crate::etcd::Etcd;
use crate::record::{now_ms, LoadReport, NodeLoad, NodeRecord};
use crate::view::{merge, FleetView};

/// What a node reports of its own load.
pub trait LoadSource: Send + Sync + 'static {
    /// The load now.
    fn load(&self) -> NodeLoad;
}

/// A node's running membership.
#[derive(Debug)]
pub struct Member {
    stop: CancellationToken,
    task: JoinHandle<()>,
    status: watch::Receiver<Status>,
}

/// Where a membership stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Status {
    /// Not registered yet: etcd has not answered.
    Joining,
    /// Registered under this lease.
    Registered(i64),
    /// Refused, with the reason; the node serves alone and checks again every third of the TTL.
    Refused(String),
    /// Not registered because etcd did not answer or refused the request (credentials, TLS),
    /// with the error; tried again every third of the TTL.
    Failing(String),
}

pub(crate) struct Joining {
    pub etcd: Etcd,
    pub settings: RegistrySettings,
    pub record: NodeRecord,
    pub file: Arc<Topology>,
    pub load: Arc<dyn LoadSource>,
}

impl Member {
    pub(crate) fn start(j: Joining) -> Self {
        let stop = CancellationToken::new();
        let (tx, status) = watch::channel(Status::Joining);
        let task = tokio::spawn(run(j, stop.clone(), tx));
        Self { stop, task, status }
    }

    /// The membership's status now, and a receiver that wakes when it changes.
    pub fn status(&self) -> watch::Receiver<Status> {
        self.status.clone()
    }

    /// Leaves the registry: the lease is revoked (its keys go at once) if etcd answers.
    pub async fn leave(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

async fn run(j: Joining, stop: CancellationToken, status: watch::Sender<Status>) {
    let ttl = j.settings.lease_ttl_s.max(1);
    let retry = Duration::from_millis((ttl * 1000 / 3).clamp(200, 5000));
    let mut last_error = String::new();
    loop {
        let lease = tokio::select! {
            () = stop.cancelled() => return,
            r = register(&j) => r,
        };
        match lease {
            Ok(lease) => {
                last_error.clear();
                status.send_replace(Status::Registered(lease));
                tracing::info!(node = %j.record.id, lease, ttl_s = ttl, "registered in the fleet");
                let outcome = tokio::select! {
                    () = stop.cancelled() => None,
                    e = keep(&j, lease) => Some(e),
                };
                match outcome {
                    None => {
                        match j.etcd.revoke(lease).await {
                            Ok(()) => tracing::info!(node = %j.record.id, "left the fleet"),
                            Err(e) => {
                                tracing::warn!(error = %e, "cannot revoke the lease: the registration ends with its TTL")
                            }
                        }
                        return;
                    }
                    Some(e) => tracing::warn!(error = %e, "registration lost: registering again"),
                }
            }
            Err(e) => {
                let text = e.to_string();
                match &e {
                    FleetError::Refused(reason) => {
                        status.send_replace(Status::Refused(reason.clone()))
                    }
                    _ => status.send_replace(Status::Failing(text.clone())),
                };
                if text != last_error {
                    match &e {
                        FleetError::Refused(_) => {
                            tracing::error!(node = %j.record.id, error = %text, "not registered: this node keeps serving alone")
                        }
                        FleetError::Credentials(_) | FleetError::Setting { .. } => {
                            tracing::error!(node = %j.record.id, error = %text, "cannot register: fix the etcd credentials or TLS settings; serving meanwhile")
                        }
                        _ => {
                            tracing::warn!(error = %text, "cannot register yet: serving meanwhile")
                        }
                    }
                    last_error = text;
                }
            }
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(retry) => {}
        }
    }
}

/// How often a registration is tried again at once when another node registered between the
/// read and the write (each try reads the registry anew, so a conflict ends in a refusal or a
/// registration; the bound only stops a registry that changes without pause).
const CONFLICT_RETRIES: usize = 8;

/// Checks the node against the registered ones and puts its record under a new lease, in one
/// transaction: the put happens only if no node record was created or changed since the read
/// the check used, so two overlapping nodes joining at once cannot both get in.
async fn register(j: &Joining) -> Result<i64, FleetError> {
    let nodes_prefix = format!("{}nodes/", j.settings.prefix).into_bytes();
    let key = [nodes_prefix.as_slice(), j.record.id.as_bytes()].concat();
    let (lease, _) = j.etcd.grant(j.settings.lease_ttl_s).await?;
    let outcome = async {
        for _ in 0..CONFLICT_RETRIES {
            let (kvs, revision) = j.etcd.range_prefix(&nodes_prefix).await?;
            check(j, kvs)?;
            let mut record = j.record.clone();
            record.registered_ms = now_ms();
            let value =
                serde_json::to_vec(&record).map_err(|e| FleetError::Etcd(e.to_string()))?;
            let put = j
                .etcd
                .put_if_unchanged(&nodes_prefix, revision, key.clone(), value, lease)
                .await?;
            if put {
                return Ok(());
            }
            tracing::debug!(node = %j.record.id, "the registry changed during the check: checking again");
        }
        Err(FleetError::Unavailable(
            "the registry kept changing during the check".into(),
        ))
    }
    .await;
    match outcome {
        Ok(()) => Ok(lease),
        Err(e) => {
            // The lease would expire anyway; revoking it keeps etcd tidy.
            let _ = j.etcd.revoke(lease).await;
            Err(e)
        }
    }
}

/// Checks the node against the registered nodes `kvs` and the file (the one rule: [`merge`]
/// then [`crate::view::admit`]).
fn check(j: &Joining, kvs: Vec<crate::pb::KeyValue>) -> Result<(), FleetError> {
    let mut view = FleetView {
        synced: true,
        ..Default::default()
    };
    for kv in kvs {
        if let Ok(record) = serde_json::from_slice::<NodeRecord>(&kv.value) {
            let reg = crate::view::Registered {
                record,
                create_revision: kv.create_revision,
                lease: kv.lease,
            };
            view.nodes.insert(reg.record.id.clone(), reg);
        }
    }
    // Registered nodes are checked first, so that a node already in the fleet wins over this one.
    let mut file = (*j.file).clone();
    file.nodes.retain(|n| n.id != j.record.id);
    let (others, _) = merge(&file, None, &view);
    crate::view::admit(&others, &j.record.to_node_config()).map_err(FleetError::Refused)?;
    Ok(())
}

/// Renews `lease` and publishes load reports until something fails.
async fn keep(j: &Joining, lease: i64) -> FleetError {
    let ttl = Duration::from_secs(j.settings.lease_ttl_s.max(1));
    let mut renew = tokio::time::interval(ttl / 3);
    renew.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let interval = Duration::from_millis(j.settings.load_interval_ms.max(50));
    let mut report = tokio::time::interval(interval);
    report.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let load_key = format!("{}load/{}", j.settings.prefix, j.record.id).into_bytes();
    let mut keep_alive = match j.etcd.keep_alive(lease).await {
        Ok(k) => k,
        Err(e) => return e,
    };
    let mut cpu = CpuMeter::new(interval);
    loop {
        tokio::select! {
            _ = renew.tick() => match keep_alive.renew().await {
                Ok(true) => {}
                Ok(false) => return FleetError::Unavailable("the lease expired".into()),
                Err(e) => return e,
            },
            _ = report.tick() => {
                let (cpu_percent, memory_bytes) = cpu.sample();
                let r = LoadReport { node: j.record.id.clone(), at_ms: now_ms(), load: j.load.load(), cpu_percent, memory_bytes };
                if let Ok(value) = serde_json::to_vec(&r) {
                    // A lost report is replaced by the next one; readers ignore stale ones.
                    if let Err(e) = j.etcd.put(load_key.clone(), value, lease).await {
                        tracing::debug!(error = %e, "load report not published");
                    }
                }
            }
        }
    }
}

/// CPU use of this process and its function processes between samples ([`crate::usage`]).
struct CpuMeter {
    tree: crate::usage::Tree,
    last: (u64, std::time::Instant),
}

/// Clock ticks per second of `/proc/self/stat` (USER_HZ, 100 on every Linux ABI).
const TICKS_PER_S: f64 = 100.0;

impl CpuMeter {
    fn new(_interval: Duration) -> Self {
        let mut tree = crate::usage::Tree::default();
        let ticks = tree.sample().ticks;
        Self {
            tree,
            last: (ticks, std::time::Instant::now()),
        }
    }

    fn sample(&mut self) -> (f64, u64) {
        let usage = self.tree.sample();
        let (ticks, memory) = (usage.ticks, usage.memory_bytes);
        let now = std::time::Instant::now();
        let dt = now.duration_since(self.last.1).as_secs_f64();
        let used = ticks.saturating_sub(self.last.0) as f64 / TICKS_PER_S;
        self.last = (ticks, now);
        let pct = if dt > 0.0 { 100.0 * used / dt } else { 0.0 };
        (pct, memory)
    }
}
