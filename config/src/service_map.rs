//! Which node is responsible for a location: the edge whose area contains it, else the cloud.
//!
//! The edges' areas are indexed by their bounding boxes in an R-tree (`rstar`), so finding the
//! responsible node and checking the areas for overlaps at start cost a tree walk, not a scan
//! of every node: a fleet of ten thousand edges routes as fast as one of three. The edges'
//! locations are indexed too, as points on the unit sphere, for a node's neighbours
//! ([`ServiceMap::neighbours`]): the few nodes it watches closely in a large fleet.

use std::collections::HashMap;

use rstar::primitives::{GeomWithData, Rectangle};
use rstar::{RTree, AABB};
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

/// An edge's bounding box (x = lon, y = lat) with its index in the node list.
type Indexed = GeomWithData<Rectangle<[f64; 2]>, usize>;
/// An edge's location on the unit sphere with its index in the node list: the chord between two
/// such points grows with their great-circle distance, so the nearest point is the nearest edge.
type Located = GeomWithData<[f64; 3], usize>;

/// `p` on the unit sphere.
fn on_sphere(p: LatLon) -> [f64; 3] {
    let (lat, lon) = (p.lat.to_radians(), p.lon.to_radians());
    [lat.cos() * lon.cos(), lat.cos() * lon.sin(), lat.sin()]
}

/// The area lookup built from a validated topology.
#[derive(Clone, Debug)]
pub struct ServiceMap {
    nodes: Vec<NodeEntry>,
    cloud: usize,
    warnings: Vec<String>,
    /// Node index by id.
    by_id: HashMap<String, usize>,
    /// Edges with a bounded area, by bounding box.
    index: RTree<Indexed>,
    /// Edges whose area is the whole world (no box to index), in file order.
    unbounded: Vec<usize>,
    /// Edges by location.
    located: RTree<Located>,
}

/// The bounding box of an edge's area, `None` for the world.
fn bounds(area: &Area) -> Option<AABB<[f64; 2]>> {
    match area {
        Area::World => None,
        Area::Shape { bbox, .. } => {
            let (min, max) = (bbox.min(), bbox.max());
            Some(AABB::from_corners([min.x, min.y], [max.x, max.y]))
        }
    }
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
        let mut unbounded = Vec::new();
        let mut boxes = Vec::new();
        for (i, n) in nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.role == Role::Edge)
        {
            match bounds(&n.area) {
                Some(b) => boxes.push(Indexed::new(
                    Rectangle::from_corners(b.lower(), b.upper()),
                    i,
                )),
                None => unbounded.push(i),
            }
        }
        let index = RTree::bulk_load(boxes);
        // Only edges whose boxes meet can overlap: those pairs, checked in file order.
        let mut pairs: Vec<(usize, usize)> = Vec::new();
        for (i, a) in nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.role == Role::Edge)
        {
            match bounds(&a.area) {
                Some(b) => pairs.extend(
                    index
                        .locate_in_envelope_intersecting(&b)
                        .map(|o| o.data)
                        .chain(unbounded.iter().copied())
                        .filter(|&j| j > i)
                        .map(|j| (i, j)),
                ),
                None => pairs.extend(
                    nodes
                        .iter()
                        .enumerate()
                        .skip(i + 1)
                        .filter(|(_, n)| n.role == Role::Edge)
                        .map(|(j, _)| (i, j)),
                ),
            }
        }
        pairs.sort_unstable();
        pairs.dedup();
        let mut warnings = Vec::new();
        for (i, j) in pairs {
            let (a, b) = (&nodes[i], &nodes[j]);
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
        let by_id = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.id.clone(), i))
            .collect();
        let located = RTree::bulk_load(
            nodes
                .iter()
                .enumerate()
                .filter(|(_, n)| n.role == Role::Edge)
                .map(|(i, n)| Located::new(on_sphere(n.location), i))
                .collect(),
        );
        Ok(Self {
            nodes,
            cloud,
            warnings,
            by_id,
            index,
            unbounded,
            located,
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
        self.by_id.get(id).map(|&i| &self.nodes[i])
    }

    /// The cloud node.
    pub fn cloud(&self) -> &NodeEntry {
        &self.nodes[self.cloud]
    }

    /// The node responsible for `p`: the edge whose area contains it (the one with the nearer
    /// centre inside an overlap sliver, then the first in file order), else the cloud.
    pub fn responsible(&self, p: LatLon) -> &NodeEntry {
        let boxed = self
            .index
            .locate_all_at_point(&[p.lon, p.lat])
            .map(|e| e.data);
        let mut best: Option<(usize, f64)> = None;
        for i in boxed.chain(self.unbounded.iter().copied()) {
            let node = &self.nodes[i];
            if !node.area.contains(p) {
                continue;
            }
            let d = p.distance_km(node.location);
            // The nearer centre, then the first in file order (the index's order is its own).
            if best.is_none_or(|(bi, bd)| d < bd || (d == bd && i < bi)) {
                best = Some((i, d));
            }
        }
        best.map_or_else(|| self.cloud(), |(i, _)| &self.nodes[i])
    }

    /// [`ServiceMap::responsible`] by scanning every node: the rule the index must agree with.
    #[cfg(test)]
    pub(crate) fn responsible_by_scan(&self, p: LatLon) -> &NodeEntry {
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

    /// The edges node `id` watches closely, nearest first: the `nearest` other edges by
    /// great-circle distance (file order among equals) and every other edge whose area's
    /// bounding box meets its own (a handover across a border goes there). The cloud is not
    /// listed: every node watches it anyway. Empty for an unknown id.
    pub fn neighbours(&self, id: &str, nearest: usize) -> Vec<&NodeEntry> {
        let Some(&me) = self.by_id.get(id) else {
            return Vec::new();
        };
        let node = &self.nodes[me];
        let ranked = |j: usize| (node.location.distance_km(self.nodes[j].location), j);
        // The tree walks by chord, which orders as the great-circle distance up to rounding:
        // everything within a millimetre of the `nearest`-th is read, then cut in file order.
        let mut near: Vec<(f64, usize)> = Vec::new();
        if nearest > 0 {
            let mut cut = f64::INFINITY;
            for e in self
                .located
                .nearest_neighbor_iter(&on_sphere(node.location))
            {
                if e.data == me {
                    continue;
                }
                let r = ranked(e.data);
                if r.0 > cut + 1e-6 {
                    break;
                }
                near.push(r);
                if near.len() == nearest {
                    cut = r.0;
                }
            }
            near.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            near.truncate(nearest);
        }
        let touching: Vec<usize> = match (node.role, bounds(&node.area)) {
            (Role::Edge, Some(b)) => self
                .index
                .locate_in_envelope_intersecting(&b)
                .map(|o| o.data)
                .chain(self.unbounded.iter().copied())
                .collect(),
            (Role::Edge, None) => (0..self.nodes.len())
                .filter(|&j| self.nodes[j].role == Role::Edge)
                .collect(),
            (Role::Cloud, _) => Vec::new(),
        };
        near.extend(touching.into_iter().filter(|&j| j != me).map(ranked));
        near.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        near.dedup_by_key(|r| r.1);
        near.into_iter().map(|(_, j)| &self.nodes[j]).collect()
    }

    /// The edges that count node `id` among their [`ServiceMap::neighbours`] (with the same
    /// `nearest`), in file order: the ones that place calls on it and want its load reports.
    pub fn watchers(&self, id: &str, nearest: usize) -> Vec<&NodeEntry> {
        self.nodes
            .iter()
            .filter(|n| n.role == Role::Edge && n.id != id)
            .filter(|n| self.neighbours(&n.id, nearest).iter().any(|m| m.id == id))
            .collect()
    }

    /// The edges within `max_km` of `p` (great-circle), nearest first (file order among
    /// equals), as their index in [`ServiceMap::nodes`] with their distance in km: a walk of
    /// the location index that stops at the first edge farther away.
    pub fn edges_within(&self, p: LatLon, max_km: f64) -> Vec<(usize, f64)> {
        let mut out: Vec<(usize, f64)> = Vec::new();
        for e in self.located.nearest_neighbor_iter(&on_sphere(p)) {
            let d = p.distance_km(self.nodes[e.data].location);
            // Chord and great-circle order agree up to rounding: a millimetre of slack.
            if d > max_km + 1e-6 {
                break;
            }
            if d <= max_km {
                out.push((e.data, d));
            }
        }
        out.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
        out
    }

    /// The index of node `id` in [`ServiceMap::nodes`].
    pub fn position(&self, id: &str) -> Option<usize> {
        self.by_id.get(id).copied()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use rstar::Envelope;

    use super::*;
    use crate::area::AreaConfig;

    fn node(id: String, role: Role, lat: f64, lon: f64, area: Area) -> NodeEntry {
        NodeEntry {
            id,
            role,
            location: LatLon { lat, lon },
            area,
            public_url: Url::parse("https://127.0.0.1:8443").unwrap(),
        }
    }

    /// Edges as (lat, lon, radius km, hexagon?), the cloud last; overlaps allowed.
    fn map_of(edges: &[(f64, f64, f64, bool)]) -> ServiceMap {
        let mut nodes: Vec<NodeEntry> = edges
            .iter()
            .enumerate()
            .map(|(i, &(lat, lon, r, hex))| {
                let center = LatLon { lat, lon };
                let area = if hex {
                    AreaConfig::Hexagon {
                        center,
                        circumradius_deg: r / 111.0,
                    }
                } else {
                    AreaConfig::Circle {
                        center,
                        radius_km: r,
                    }
                };
                let area = area.build(std::path::Path::new(".")).unwrap();
                node(format!("e{i}"), Role::Edge, lat, lon, area)
            })
            .collect();
        nodes.push(node("cloud".into(), Role::Cloud, 50.1, 8.7, Area::World));
        ServiceMap::new(nodes, f64::INFINITY).unwrap()
    }

    /// The overlap warnings as the pairwise scan over every two edges gives them.
    fn warnings_by_scan(map: &ServiceMap) -> Vec<String> {
        let nodes = map.nodes();
        let mut out = Vec::new();
        for (i, a) in nodes.iter().enumerate() {
            for b in nodes.iter().skip(i + 1) {
                if a.role != Role::Edge || b.role != Role::Edge {
                    continue;
                }
                if let Some(width) = a.area.overlap_width_m(&b.area) {
                    out.push(format!(
                        "areas of {} and {} overlap in a sliver {width:.1} m wide; points in it go to the nearer node",
                        a.id, b.id
                    ));
                }
            }
        }
        out
    }

    /// [`ServiceMap::neighbours`]' rule over a sort of every node.
    fn neighbours_by_scan<'m>(map: &'m ServiceMap, id: &str, nearest: usize) -> Vec<&'m str> {
        let nodes = map.nodes();
        let me = nodes.iter().position(|n| n.id == id).unwrap();
        let boxes = |n: &NodeEntry| bounds(&n.area);
        let meets = |a: &Option<AABB<[f64; 2]>>, b: &Option<AABB<[f64; 2]>>| match (a, b) {
            (Some(a), Some(b)) => a.intersects(b),
            _ => true,
        };
        let mut ranked: Vec<(f64, usize)> = (0..nodes.len())
            .filter(|&j| j != me && nodes[j].role == Role::Edge)
            .map(|j| (nodes[me].location.distance_km(nodes[j].location), j))
            .collect();
        ranked.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let mine = boxes(&nodes[me]);
        ranked
            .iter()
            .enumerate()
            .filter(|&(rank, &(_, j))| {
                rank < nearest || (nodes[me].role == Role::Edge && meets(&mine, &boxes(&nodes[j])))
            })
            .map(|(_, &(_, j))| nodes[j].id.as_str())
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// The index gives the node the scan over every node gives, on random fleets of
        /// circles and hexagons that overlap and nest, for points in, between and outside
        /// them; the overlap check finds the pairs the scan finds, in the same order.
        #[test]
        fn the_index_agrees_with_the_scan_over_every_node(
            edges in prop::collection::vec(
                (52.0f64..53.0, 13.0f64..14.5, 0.5f64..25.0, any::<bool>()),
                1..40,
            ),
            points in prop::collection::vec((51.7f64..53.3, 12.6f64..14.9), 50),
        ) {
            let map = map_of(&edges);
            for (lat, lon) in points {
                let p = LatLon { lat, lon };
                prop_assert_eq!(&map.responsible(p).id, &map.responsible_by_scan(p).id, "at {:?}", p);
            }
            for (i, &(lat, lon, _, _)) in edges.iter().enumerate() {
                // Each edge's own centre: inside it, and perhaps inside others.
                let p = LatLon { lat, lon };
                prop_assert_eq!(&map.responsible(p).id, &map.responsible_by_scan(p).id);
                prop_assert_eq!(&map.node(&format!("e{i}")).unwrap().id, &format!("e{i}"));
            }
            prop_assert_eq!(map.warnings(), &warnings_by_scan(&map)[..]);
            prop_assert!(map.node("nosuch").is_none());
        }

        /// A node's neighbours are what the rule says, read off a sort of every edge: the
        /// `nearest` other edges (file order among equals) and every edge whose box meets its
        /// own, nearest first; for the cloud only the nearest. Fleets spread wide and packed
        /// tight, so both parts decide.
        #[test]
        fn neighbours_are_the_nearest_and_the_touching(
            edges in prop::collection::vec(
                (48.0f64..55.0, 5.0f64..20.0, 0.5f64..40.0, any::<bool>()),
                1..60,
            ),
            nearest in 0usize..10,
        ) {
            let map = map_of(&edges);
            for node in map.nodes() {
                let got: Vec<&str> = map.neighbours(&node.id, nearest).iter().map(|n| n.id.as_str()).collect();
                prop_assert_eq!(got, neighbours_by_scan(&map, &node.id, nearest), "of {}", node.id);
            }
            prop_assert!(map.neighbours("nosuch", nearest).is_empty());
            let p = map.nodes()[0].location;
            let km = nearest as f64 * 30.0;
            let mut by_scan: Vec<(usize, f64)> = (0..map.nodes().len())
                .filter(|&j| map.nodes()[j].role == Role::Edge)
                .map(|j| (j, p.distance_km(map.nodes()[j].location)))
                .filter(|&(_, d)| d <= km)
                .collect();
            by_scan.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
            prop_assert_eq!(map.edges_within(p, km), by_scan);
            for node in map.nodes() {
                let watchers: Vec<&str> = map.watchers(&node.id, nearest).iter().map(|n| n.id.as_str()).collect();
                let by_scan: Vec<&str> = map.nodes().iter()
                    .filter(|n| n.role == Role::Edge && n.id != node.id)
                    .filter(|n| neighbours_by_scan(&map, &n.id, nearest).contains(&node.id.as_str()))
                    .map(|n| n.id.as_str())
                    .collect();
                prop_assert_eq!(watchers, by_scan, "of {}", node.id);
            }
        }
    }

    #[test]
    fn equal_distances_go_to_the_first_in_file_order() {
        // Two identical areas with the same centre: the first one listed wins, as before.
        let map = map_of(&[(52.5, 13.4, 3.0, false), (52.5, 13.4, 3.0, false)]);
        let p = LatLon {
            lat: 52.51,
            lon: 13.4,
        };
        assert_eq!(map.responsible(p).id, "e0");
        assert_eq!(map.responsible_by_scan(p).id, "e0");
        let far = LatLon { lat: 0.0, lon: 0.0 };
        assert_eq!(map.responsible(far).id, "cloud");
    }
}
