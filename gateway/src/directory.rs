//! Which node serves which function: the one place that decides whether a call can run here.
//!
//! This node's own backends answer from their cached function lists. What the other nodes
//! serve comes from the topology (backend `functions` lists), in a fleet from the registry (the
//! functions each node's backends served when it registered, which replace the file's word),
//! and, at an edge, from the cloud's `GET /functions`, fetched and cached for
//! `gateway.peer_refresh_s`. A function this node does
//! not serve is offloaded by an edge and is a `404` at the cloud (see [`crate::invoke`]).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use geofaas_config::Topology;
use geofaas_fleet::FleetView;
use geofaas_functions::catalog::Catalog;
use geofaas_functions::{FunctionBackend, InvokeError};
use serde::Serialize;
use tokio::sync::watch;

use crate::offload::NodeLink;
use crate::placement::Knows;

/// What this node knows about where functions run.
pub struct Directory {
    backends: Vec<Arc<dyn FunctionBackend>>,
    /// Functions other nodes' backends list in the topology, by node id.
    declared: BTreeMap<String, Vec<String>>,
    /// The cloud's own list, at an edge that can reach it (shared with its refresh task).
    cloud: Option<Arc<(NodeLink, Catalog)>>,
    /// A refresh of the cloud's list is under way.
    refreshing: Arc<AtomicBool>,
    /// The registry's records, in a fleet, and the nodes of the topology they may speak for.
    registry: Option<(watch::Receiver<Arc<FleetView>>, Vec<String>)>,
}

impl std::fmt::Debug for Directory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Directory")
            .field("declared", &self.declared)
            .finish_non_exhaustive()
    }
}

/// Where functions run, as `GET /functions` reports it.
#[derive(Debug, Serialize)]
pub struct View {
    /// Functions this node's backends serve now.
    pub served_here: Vec<String>,
    /// Functions each other node serves, as far as this node knows, with where it learned it.
    pub nodes: BTreeMap<String, NodeView>,
}

/// What one other node serves.
#[derive(Debug, Serialize)]
pub struct NodeView {
    /// Function names.
    pub functions: Vec<String>,
    /// `topology` (backend `functions` lists), `registry` (the node's record in etcd) or
    /// `fetched` (the node's own `/functions`).
    pub source: &'static str,
}

impl Directory {
    /// The directory of node `me`; an edge passes its link to the cloud, a node in a fleet the
    /// registry's view.
    pub fn new(
        topology: &Topology,
        me: &str,
        backends: Vec<Arc<dyn FunctionBackend>>,
        cloud: Option<NodeLink>,
        registry: Option<watch::Receiver<Arc<FleetView>>>,
    ) -> Self {
        let others = topology
            .nodes
            .iter()
            .filter(|n| n.id != me)
            .map(|n| n.id.clone())
            .collect();
        let declared = topology
            .nodes
            .iter()
            .filter(|n| n.id != me)
            .filter_map(|n| {
                let lists: Vec<&[String]> =
                    n.backends.iter().filter_map(|b| b.functions()).collect();
                // A node with a backend that is asked at run time may serve more than it lists.
                (!lists.is_empty() && lists.len() == n.backends.len())
                    .then(|| (n.id.clone(), sorted(lists.concat())))
            })
            .collect();
        let refresh = Duration::from_secs(topology.gateway.peer_refresh_s.max(1));
        Self {
            backends,
            declared,
            cloud: cloud.map(|link| Arc::new((link, Catalog::new(refresh)))),
            refreshing: Arc::new(AtomicBool::new(false)),
            registry: registry.map(|view| (view, others)),
        }
    }

    /// This node's backends, in order of preference.
    pub fn backends(&self) -> &[Arc<dyn FunctionBackend>] {
        &self.backends
    }

    /// The backends of this node that serve `function`, in order; empty when none does.
    pub async fn local(&self, function: &str) -> Vec<&Arc<dyn FunctionBackend>> {
        let mut here = Vec::new();
        for b in &self.backends {
            if b.serves(function).await {
                here.push(b);
            }
        }
        here
    }

    /// Whether the cloud serves `function`, from its last list, without waiting: an old or
    /// missing list is refreshed in the background (one fetch at a time) and counts as
    /// [`Knows::Unknown`] when missing. [`Knows::Unknown`] at the cloud itself.
    pub fn cloud_serves(&self, function: &str) -> Knows {
        let Some(cloud) = &self.cloud else {
            return Knows::Unknown;
        };
        let last = cloud.1.peek();
        let stale = !last.as_ref().is_some_and(|(_, fresh)| *fresh);
        // After a failed fetch the catalog waits before the next (a cloud that is down is
        // not asked on every call).
        if stale && !cloud.1.paused() && !self.refreshing.swap(true, Ordering::AcqRel) {
            let (cloud, refreshing) = (cloud.clone(), self.refreshing.clone());
            tokio::spawn(async move {
                let (link, catalog) = &*cloud;
                if let Err(e) = catalog.get(|| fetch(link)).await {
                    tracing::debug!(error = %e, "cannot fetch the cloud's functions");
                }
                refreshing.store(false, Ordering::Release);
            });
        }
        match last {
            Some((list, _)) if list.binary_search_by(|f| f.as_str().cmp(function)).is_ok() => {
                Knows::Yes
            }
            Some(_) => Knows::No,
            None => Knows::Unknown,
        }
    }

    /// Functions this node's backends serve now (a backend that cannot list adds none).
    pub async fn served_here(&self) -> Vec<String> {
        let mut served_here = Vec::new();
        for b in &self.backends {
            served_here.extend(b.list().await.unwrap_or_default());
        }
        sorted(served_here)
    }

    /// Where functions run, for `GET /functions`.
    pub async fn view(&self) -> View {
        let served_here = self.served_here().await;
        let mut nodes: BTreeMap<String, NodeView> = self
            .declared
            .iter()
            .map(|(id, functions)| {
                let view = NodeView {
                    functions: functions.clone(),
                    source: "topology",
                };
                (id.clone(), view)
            })
            .collect();
        if let Some((view, others)) = &self.registry {
            let view = view.borrow().clone();
            for reg in view
                .nodes
                .values()
                .filter(|r| others.contains(&r.record.id))
            {
                let listed = NodeView {
                    functions: sorted(reg.record.functions.clone()),
                    source: "registry",
                };
                nodes.insert(reg.record.id.clone(), listed);
            }
        }
        if let Some(cloud) = &self.cloud {
            let (link, catalog) = &**cloud;
            match catalog.get(|| fetch(link)).await {
                Ok(list) => {
                    let view = NodeView {
                        functions: list.as_ref().clone(),
                        source: "fetched",
                    };
                    nodes.insert(link.cloud_id().to_owned(), view);
                }
                Err(e) => tracing::debug!(error = %e, "cannot fetch the cloud's functions"),
            }
        }
        View { served_here, nodes }
    }
}

async fn fetch(link: &NodeLink) -> Result<Vec<String>, InvokeError> {
    link.functions().await.map(sorted)
}

fn sorted(mut names: Vec<String>) -> Vec<String> {
    names.sort();
    names.dedup();
    names
}
