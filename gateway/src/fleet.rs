//! A gateway in a fleet: its registration record and the topology it routes with, the file's
//! nodes plus the registered ones ([`geofaas_fleet::merge`] decides which).

use std::sync::Arc;

use geofaas_config::Topology;
use geofaas_fleet::{Fleet, FleetView, Member, NodeRecord};
use tokio::sync::watch;

use crate::NodeHandle;

/// Registers the node `handle` runs: its area as it starts and the functions its backends
/// serve then.
pub(crate) async fn join(
    fleet: &Arc<Fleet>,
    handle: &NodeHandle,
    file: &Arc<Topology>,
) -> Option<Member> {
    let state = handle.current();
    // `NodeState::new` checked that the node is in its topology.
    let node = state.place.topology.node(&state.place.id)?;
    let wkt = state.place.map.node(&state.place.id)?.area.to_wkt();
    let functions = state.directory.served_here().await;
    let record = NodeRecord::of(node, wkt, functions);
    Some(fleet.join(record, file.clone(), handle.live_source()))
}

/// The topology node `me` routes with: `file` plus the registered nodes, refusals logged.
pub(crate) fn merged(
    file: &Arc<Topology>,
    me: &str,
    view: Option<&watch::Receiver<Arc<FleetView>>>,
) -> Arc<Topology> {
    let Some(view) = view else {
        return file.clone();
    };
    let current = view.borrow().clone();
    let (topology, refusals) = geofaas_fleet::merge(file, Some(me), &current);
    for r in refusals {
        tracing::warn!(node = %r.id, reason = %r.reason, "registered node left out of the routing");
    }
    Arc::new(topology)
}

/// Resolves when the registered nodes change (never without a fleet, or once it is gone).
pub(crate) async fn changed(view: Option<&mut watch::Receiver<Arc<FleetView>>>) -> Option<()> {
    match view {
        Some(v) => v.changed().await.ok(),
        None => std::future::pending().await,
    }
}
