//! Keeps the registry in memory: reads everything under the prefix, then follows the watch of
//! everything but the load reports (which change every interval at every node, and which a node
//! reads only of the few nodes it places calls on: [`crate::Fleet::loads_of`]); when the watch
//! breaks (etcd down, compaction) it keeps the last view and starts over once etcd answers
//! again. Readers never wait for etcd.

use parking_lot::RwLock;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use tokio::sync::watch;

use crate::calls::CallRecords;
use crate::etcd::Etcd;
use crate::functions::{DesiredFunction, DesiredFunctions};
use crate::pb;
use crate::record::{LoadReport, NodeRecord};
use crate::view::{FleetView, Registered};

/// Latest load report of each node, with when it arrived here.
pub(crate) type Loads = Arc<RwLock<BTreeMap<String, (LoadReport, Instant)>>>;

/// Where the watch puts what it reads.
pub(crate) struct Sinks {
    pub prefix: String,
    pub nodes: watch::Sender<Arc<FleetView>>,
    pub functions: watch::Sender<Arc<DesiredFunctions>>,
    pub loads: Loads,
    pub calls: Arc<CallRecords>,
    /// Set while the watch follows etcd.
    pub connected: Arc<AtomicBool>,
}

/// Follows the registry until the task is dropped.
pub(crate) async fn run(etcd: Etcd, sinks: Sinks) {
    let mut backoff = Duration::from_millis(100);
    let mut failing = false;
    loop {
        match follow(&etcd, &sinks).await {
            Ok(()) => backoff = Duration::from_millis(100),
            Err(e) => {
                sinks.connected.store(false, Ordering::Relaxed);
                if !failing {
                    tracing::warn!(error = %e, "registry watch lost: serving with the last view until etcd answers");
                }
                failing = true;
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
                continue;
            }
        }
        failing = false;
    }
}

async fn follow(etcd: &Etcd, sinks: &Sinks) -> Result<(), crate::FleetError> {
    let prefix = sinks.prefix.as_bytes();
    let (kvs, revision) = etcd.range_prefix(prefix).await?;
    let mut view = FleetView {
        synced: true,
        ..Default::default()
    };
    let mut loads = BTreeMap::new();
    let mut functions = DesiredFunctions::new();
    for kv in &kvs {
        match apply_put(sinks, kv) {
            Some(Entry::Node(id, reg)) => {
                view.nodes.insert(id, *reg);
            }
            Some(Entry::Function(name, desired)) => {
                functions.insert(name, *desired);
            }
            Some(Entry::Load(id, report)) => {
                loads.insert(id, (report, Instant::now()));
            }
            None => {}
        }
    }
    *sinks.loads.write() = loads;
    publish_functions(sinks, functions.clone());
    publish(sinks, view.clone());
    tracing::debug!(nodes = view.nodes.len(), revision, "registry read");
    // Two watches, below and above the load reports' keys.
    let load = format!("{}load/", sinks.prefix).into_bytes();
    let below = etcd.watch_range(prefix, &load, revision + 1).await?;
    let above = etcd
        .watch_range(
            &crate::etcd::prefix_end(&load),
            &crate::etcd::prefix_end(prefix),
            revision + 1,
        )
        .await?;
    let mut events = futures::stream::select(Box::pin(below), Box::pin(above));
    sinks.connected.store(true, Ordering::Relaxed);
    while let Some(resp) = events.next().await {
        let resp = resp?;
        if resp.canceled || resp.compact_revision > 0 {
            return Err(crate::FleetError::Etcd(format!(
                "watch cancelled: {}",
                resp.cancel_reason
            )));
        }
        let mut changed = false;
        let mut functions_changed = false;
        for ev in &resp.events {
            let Some(kv) = &ev.kv else { continue };
            if ev.r#type == pb::event::EventType::Delete as i32 {
                changed |= apply_delete(sinks, &mut view, &kv.key);
                if let Some(name) = function_name(sinks, &kv.key) {
                    functions_changed |= functions.remove(name).is_some();
                }
                continue;
            }
            match apply_put(sinks, kv) {
                Some(Entry::Node(id, reg)) => {
                    changed |= view.nodes.get(&id) != Some(&*reg);
                    view.nodes.insert(id, *reg);
                }
                Some(Entry::Function(name, desired)) => {
                    functions_changed |= functions.get(&name) != Some(&*desired);
                    functions.insert(name, *desired);
                }
                Some(Entry::Load(id, report)) => {
                    let mut loads = sinks.loads.write();
                    loads.insert(id, (report, Instant::now()));
                }
                None => {}
            }
        }
        if functions_changed {
            publish_functions(sinks, functions.clone());
        }
        if changed {
            publish(sinks, view.clone());
        }
    }
    Err(crate::FleetError::Unavailable("watch stream ended".into()))
}

fn publish(sinks: &Sinks, view: FleetView) {
    sinks.nodes.send_if_modified(|old| {
        let changed = **old != view;
        if changed {
            *old = Arc::new(view);
        }
        changed
    });
}

fn publish_functions(sinks: &Sinks, functions: DesiredFunctions) {
    sinks.functions.send_if_modified(|old| {
        let changed = **old != functions;
        if changed {
            *old = Arc::new(functions);
        }
        changed
    });
}

enum Entry {
    Node(String, Box<Registered>),
    Load(String, LoadReport),
    Function(String, Box<DesiredFunction>),
}

/// The function name of a `functions/<name>` key.
fn function_name<'k>(sinks: &Sinks, key: &'k [u8]) -> Option<&'k str> {
    let key = key.strip_prefix(sinks.prefix.as_bytes())?;
    std::str::from_utf8(key).ok()?.strip_prefix("functions/")
}

/// Decodes one key-value; a record that does not parse is logged and skipped.
fn apply_put(sinks: &Sinks, kv: &pb::KeyValue) -> Option<Entry> {
    let key = kv.key.strip_prefix(sinks.prefix.as_bytes())?;
    let key = std::str::from_utf8(key).ok()?;
    if let Some(id) = key.strip_prefix("nodes/") {
        match serde_json::from_slice::<NodeRecord>(&kv.value) {
            Ok(record) if record.id == id => {
                return Some(Entry::Node(
                    id.to_owned(),
                    Box::new(Registered {
                        record,
                        create_revision: kv.create_revision,
                        lease: kv.lease,
                    }),
                ))
            }
            Ok(_) => tracing::warn!(key, "registry record names another node: ignored"),
            Err(e) => tracing::warn!(key, error = %e, "registry record does not parse: ignored"),
        }
    } else if let Some(id) = key.strip_prefix("load/") {
        if let Ok(report) = serde_json::from_slice::<LoadReport>(&kv.value) {
            return Some(Entry::Load(id.to_owned(), report));
        }
    } else if let Some(call) = key.strip_prefix("calls/") {
        sinks.calls.remember(call, &kv.value);
    } else if let Some(name) = key.strip_prefix("functions/") {
        match serde_json::from_slice::<DesiredFunction>(&kv.value) {
            Ok(d) if d.name == name => return Some(Entry::Function(name.to_owned(), Box::new(d))),
            Ok(_) => tracing::warn!(key, "function record names another function: ignored"),
            Err(e) => tracing::warn!(key, error = %e, "function record does not parse: ignored"),
        }
    }
    None
}

fn apply_delete(sinks: &Sinks, view: &mut FleetView, key: &[u8]) -> bool {
    let Some(key) = key.strip_prefix(sinks.prefix.as_bytes()) else {
        return false;
    };
    let Ok(key) = std::str::from_utf8(key) else {
        return false;
    };
    if let Some(id) = key.strip_prefix("nodes/") {
        return view.nodes.remove(id).is_some();
    }
    if let Some(id) = key.strip_prefix("load/") {
        sinks.loads.write().remove(id);
    } else if let Some(call) = key.strip_prefix("calls/") {
        sinks.calls.forget(call);
    }
    false
}
