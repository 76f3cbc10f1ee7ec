//! The registry as one node sees it, and the one place that decides which registered nodes join
//! the topology: [`merge`] (also what a node checks itself against before it registers).

use std::collections::BTreeMap;
use std::path::Path;

use geofaas_config::{Area, NodeConfig, Role, Topology};

use crate::record::NodeRecord;

/// A registered node with what etcd says about its key.
#[derive(Clone, Debug, PartialEq)]
pub struct Registered {
    /// The record the node wrote.
    pub record: NodeRecord,
    /// Revision its key was created at: on a conflict, the earlier registration wins.
    pub create_revision: i64,
    /// The lease the key lives under.
    pub lease: i64,
}

/// The registered nodes, by id.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FleetView {
    /// Nodes whose lease is alive.
    pub nodes: BTreeMap<String, Registered>,
    /// Whether the view was read from etcd at least once (false: nothing known yet).
    pub synced: bool,
}

/// A registered node that [`merge`] left out, with the reason.
#[derive(Clone, Debug, PartialEq)]
pub struct Refusal {
    /// The node's id.
    pub id: String,
    /// Why it is not in the topology.
    pub reason: String,
}

/// `file` with the registered nodes added: a registered node with the id of one in the file
/// replaces it (the registry is the fresher word), except `me`, whose own entry (with its
/// backends) always stands. Registered nodes are taken in order of registration; one whose area
/// overlaps an already accepted edge's beyond `areas.sliver_tolerance_m`, a second cloud, or one
/// whose record does not form a valid node is left out with the reason.
pub fn merge(file: &Topology, me: Option<&str>, view: &FleetView) -> (Topology, Vec<Refusal>) {
    let mut out = file.clone();
    let mut refusals = Vec::new();
    let mut regs: Vec<&Registered> = view.nodes.values().collect();
    regs.sort_by_key(|r| r.create_revision);
    for reg in regs {
        let rec = &reg.record;
        if Some(rec.id.as_str()) == me {
            continue;
        }
        match admit(&out, &rec.to_node_config()) {
            Ok(node) => match out.nodes.iter_mut().find(|n| n.id == node.id) {
                Some(slot) => *slot = node,
                None => out.nodes.push(node),
            },
            Err(reason) => refusals.push(Refusal {
                id: rec.id.clone(),
                reason,
            }),
        }
    }
    (out, refusals)
}

/// Whether `node` may join `topology` (replacing a node of the same id): its fields are valid,
/// it is not a second cloud, and its area overlaps no other edge's beyond the sliver tolerance.
pub fn admit(topology: &Topology, node: &NodeConfig) -> Result<NodeConfig, String> {
    let area = node
        .area
        .as_ref()
        .map_or(Ok(Area::World), |a| a.build(Path::new(".")))
        .map_err(|e| format!("area: {e}"))?;
    let others = topology.nodes.iter().filter(|n| n.id != node.id);
    let tolerance = topology.areas.sliver_tolerance_m;
    for other in others {
        if node.role == Role::Cloud && other.role == Role::Cloud {
            return Err(format!("a second cloud (the topology's is {})", other.id));
        }
        if node.role != Role::Edge || other.role != Role::Edge {
            continue;
        }
        let Some(theirs) = other
            .area
            .as_ref()
            .and_then(|a| a.build(&topology.base_dir).ok())
        else {
            continue;
        };
        if let Some(width) = area.overlap_width_m(&theirs) {
            if width > tolerance {
                return Err(format!(
                    "its area overlaps {}'s by {width:.0} m (areas.sliver_tolerance_m = {tolerance} m)",
                    other.id
                ));
            }
        }
    }
    // The rest of the checks (id, URL, location, area kind) as the file's own nodes get them.
    let mut trial = topology.clone();
    trial.nodes.retain(|n| n.id != node.id);
    trial.nodes.push(node.clone());
    trial.service_map().map_err(|e| e.to_string())?;
    Ok(node.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn berlin() -> Topology {
        let text = include_str!("../../examples/berlin.toml");
        Topology::parse(text, "berlin.toml", Path::new("../examples")).unwrap()
    }

    fn reg(t: &Topology, id: &str, new_id: &str, rev: i64) -> Registered {
        let node = t.node(id).unwrap();
        let wkt = t.service_map().unwrap().node(id).unwrap().area.to_wkt();
        let mut record = NodeRecord::of(node, wkt, vec![]);
        record.id = new_id.to_owned();
        Registered {
            record,
            create_revision: rev,
            lease: 1,
        }
    }

    #[test]
    fn registered_nodes_join_and_an_overlapping_one_is_refused() {
        let full = berlin();
        let mut file = full.clone();
        file.nodes.retain(|n| n.id != "potsdam");
        let mut view = FleetView::default();
        view.nodes
            .insert("potsdam".into(), reg(&full, "potsdam", "potsdam", 5));
        // A second node claiming tu-berlin's hexagon, registered later.
        view.nodes
            .insert("copycat".into(), reg(&full, "tu-berlin", "copycat", 9));
        let (merged, refused) = merge(&file, Some("tu-berlin"), &view);
        let ids: Vec<&str> = merged.nodes.iter().map(|n| n.id.as_str()).collect();
        assert_eq!(ids, ["tu-berlin", "cloud", "potsdam"]);
        assert_eq!(refused.len(), 1);
        assert_eq!(refused[0].id, "copycat");
        assert!(
            refused[0].reason.contains("overlaps tu-berlin's"),
            "{:?}",
            refused[0]
        );
        let map = merged.service_map().unwrap();
        assert_eq!(
            map.responsible("52.40,13.06".parse().unwrap()).id,
            "potsdam"
        );
    }

    #[test]
    fn a_second_cloud_is_refused() {
        let full = berlin();
        let mut view = FleetView::default();
        view.nodes
            .insert("cloud2".into(), reg(&full, "cloud", "cloud2", 3));
        let (merged, refused) = merge(&full, None, &view);
        assert_eq!(merged.nodes.len(), 3);
        assert!(refused[0].reason.contains("second cloud"), "{refused:?}");
    }
}
