//! Which node is responsible for a location: the edge whose area contains it, else the cloud.

use url::Url;

use crate::area::Area;
use crate::location::LatLon;
use crate::topology::Role;

/// A node as the routing decision sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeEntry {
    /// Node id.
    pub id: String,
    /// Edge or cloud.
    pub role: Role,
    /// Where the node stands; also the tie-breaker inside overlap slivers.
    pub location: LatLon,
    /// Service area (the world for the cloud).
    pub area: Area,
    /// Public HTTPS URL, the base of handover `Location` headers.
    pub public_url: Url,
}

/// The area lookup built from a validated topology.
#[derive(Clone, Debug)]
pub struct ServiceMap {
    nodes: Vec<NodeEntry>,
    cloud: usize,
    warnings: Vec<String>,
}

impl ServiceMap {
    /// Builds the map; an overlap of two edges wider than `sliver_tolerance_m` is returned as
    /// `(node a, node b, width in metres)`.
    pub fn new(
        nodes: Vec<NodeEntry>,
        sliver_tolerance_m: f64,
    ) -> Result<Self, (String, String, f64)> {
        let cloud = nodes
            .iter()
            .position(|n| n.role == Role::Cloud)
            .ok_or_else(|| (String::new(), String::new(), 0.0))?;
        let mut warnings = Vec::new();
        for (i, a) in nodes.iter().enumerate() {
            for b in nodes.iter().skip(i + 1) {
                if a.role != Role::Edge || b.role != Role::Edge {
                    continue;
                }
                if let Some(width) = a.area.overlap_width_m(&b.area) {
                    if width > sliver_tolerance_m {
                        return Err((a.id.clone(), b.id.clone(), width));
                    }
                    warnings.push(format!(
                        "areas of {} and {} overlap in a sliver {width:.1} m wide; points in it go to the nearer node",
                        a.id, b.id
                    ));
                }
            }
        }
        Ok(Self {
            nodes,
            cloud,
            warnings,
        })
    }

    /// Tolerated overlaps, one sentence each, for the caller to log.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// All nodes in topology order.
    pub fn nodes(&self) -> &[NodeEntry] {
        &self.nodes
    }

    /// The node with this id.
    pub fn node(&self, id: &str) -> Option<&NodeEntry> {
        self.nodes.iter().find(|n| n.id == id)
    }

    /// The cloud node.
    pub fn cloud(&self) -> &NodeEntry {
        &self.nodes[self.cloud]
    }

    /// The node responsible for `p`: the edge whose area contains it (the one with the nearer
    /// centre inside an overlap sliver, then the first in file order), else the cloud.
    pub fn responsible(&self, p: LatLon) -> &NodeEntry {
        let mut best: Option<(&NodeEntry, f64)> = None;
        for node in &self.nodes {
            if node.role != Role::Edge || !node.area.contains(p) {
                continue;
            }
            let d = p.distance_km(node.location);
            if best.is_none_or(|(_, bd)| d < bd) {
                best = Some((node, d));
            }
        }
        best.map_or_else(|| self.cloud(), |(n, _)| n)
    }

    /// Edges ordered by great-circle distance from `p`, nearest first, with their distance in km.
    pub fn edges_by_distance(&self, p: LatLon) -> Vec<(&NodeEntry, f64)> {
        let mut edges: Vec<_> = self
            .nodes
            .iter()
            .filter(|n| n.role == Role::Edge)
            .map(|n| (n, p.distance_km(n.location)))
            .collect();
        edges.sort_by(|a, b| a.1.total_cmp(&b.1));
        edges
    }
}
