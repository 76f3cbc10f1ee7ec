//! Which node answers a client location: the nodes' DNS addresses and their order of preference.
//!
//! For a located client the order is the edge whose area contains the point, then the other edges within
//! `dns.max_distance_km` nearest first, then the cloud; an unlocated client gets the cloud. The first
//! healthy node of that order is answered, and the cloud when none is healthy. The order depends only on
//! the location, so it is computed once per database network and cached; health is applied per query.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use geofaas_config::{LatLon, NodeConfig, Role, ServiceMap, Topology};
use url::{Host, Url};

use crate::error::DnsError;
use geofaas_geo::HealthTable;

/// A node as DNS answers it.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeAddr {
    /// Node id, also the label of `<id>.<zone>`.
    pub id: String,
    /// Edge or cloud.
    pub role: Role,
    /// IPv4 address answered for A queries, if the node has one.
    pub v4: Option<Ipv4Addr>,
    /// IPv6 address answered for AAAA queries, if the node has one.
    pub v6: Option<Ipv6Addr>,
    /// The node's `public_url`, base of its `/readyz` probe.
    pub public_url: Url,
}

/// Node indices (into [`Router::nodes`]) in order of preference for one location; ends with the cloud.
pub type Ranking = Arc<[u16]>;

/// The routing table built from a topology.
#[derive(Debug)]
pub struct Router {
    nodes: Vec<NodeAddr>,
    map: ServiceMap,
    max_distance_km: f64,
    cloud: u16,
    unlocated: Ranking,
}

/// The address DNS gives a node: the IP of its `public_url` host when that is an IP literal, else the IP
/// its gateway listens on unless that is unspecified (`0.0.0.0`, `::`).
pub fn node_address(node: &NodeConfig) -> Option<IpAddr> {
    match node.public_url.host() {
        Some(Host::Ipv4(ip)) => Some(IpAddr::V4(ip)),
        Some(Host::Ipv6(ip)) => Some(IpAddr::V6(ip)),
        _ if node.listen.ip().is_unspecified() => None,
        _ => Some(node.listen.ip()),
    }
}

impl Router {
    /// Builds the table; fails if the topology is invalid or has more nodes than a ranking can index.
    pub fn new(topology: &Topology) -> Result<Self, DnsError> {
        let map = topology
            .service_map()
            .map_err(|e| DnsError::Topology(e.to_string()))?;
        if topology.nodes.len() > usize::from(u16::MAX) {
            return Err(DnsError::Topology("more than 65535 nodes".into()));
        }
        let nodes: Vec<NodeAddr> = topology
            .nodes
            .iter()
            .map(|n| {
                let ip = node_address(n);
                if ip.is_none() {
                    tracing::warn!(node = %n.id, "node has no IP address for DNS (public_url host is a name and listen is unspecified); it is never answered");
                }
                NodeAddr {
                    id: n.id.clone(),
                    role: n.role,
                    v4: ip.and_then(|ip| match ip {
                        IpAddr::V4(v4) => Some(v4),
                        IpAddr::V6(v6) => v6.to_ipv4_mapped(),
                    }),
                    v6: ip.and_then(|ip| match ip {
                        IpAddr::V6(v6) if v6.to_ipv4_mapped().is_none() => Some(v6),
                        _ => None,
                    }),
                    public_url: n.public_url.clone(),
                }
            })
            .collect();
        let cloud = index_of(&nodes, &map.cloud().id)
            .ok_or_else(|| DnsError::Topology("no cloud node".into()))?;
        Ok(Self {
            nodes,
            map,
            max_distance_km: topology.dns.max_distance_km,
            cloud,
            unlocated: Arc::from([cloud]),
        })
    }

    /// All nodes in topology order.
    pub fn nodes(&self) -> &[NodeAddr] {
        &self.nodes
    }

    /// Index of the cloud node.
    pub fn cloud(&self) -> usize {
        usize::from(self.cloud)
    }

    /// The order of preference for a client at `location` (`None`: unknown location, the cloud only).
    pub fn ranking(&self, location: Option<LatLon>) -> Ranking {
        let Some(p) = location else {
            return self.unlocated.clone();
        };
        let mut order: Vec<u16> = Vec::new();
        let responsible = self.map.responsible(p);
        let first = self.map.position(&responsible.id);
        if responsible.role == Role::Edge {
            order.extend(first.and_then(|i| u16::try_from(i).ok()));
        }
        // The map's nodes are the topology's, in its order: the same indices as `self.nodes`.
        for (i, _) in self.map.edges_within(p, self.max_distance_km) {
            if Some(i) != first {
                order.extend(u16::try_from(i).ok());
            }
        }
        order.retain(|&i| self.has_address(usize::from(i)));
        order.push(self.cloud);
        order.into()
    }

    /// The first healthy node of `ranking`, else the cloud.
    pub fn pick(&self, ranking: &[u16], health: &HealthTable) -> usize {
        ranking
            .iter()
            .map(|&i| usize::from(i))
            .find(|&i| health.is_healthy(i))
            .unwrap_or(usize::from(self.cloud))
    }

    fn has_address(&self, i: usize) -> bool {
        self.nodes
            .get(i)
            .is_some_and(|n| n.v4.is_some() || n.v6.is_some())
    }
}

fn index_of(nodes: &[NodeAddr], id: &str) -> Option<u16> {
    nodes
        .iter()
        .position(|n| n.id == id)
        .and_then(|i| u16::try_from(i).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOPO: &str = include_str!("../../examples/berlin.toml");

    fn router(extra: &str) -> Router {
        let text = format!("{TOPO}\n{extra}");
        let topo = Topology::parse(&text, "berlin.toml", std::path::Path::new("."))
            .expect("example topology parses");
        Router::new(&topo).expect("router builds")
    }

    fn ids(r: &Router, ranking: &[u16]) -> Vec<String> {
        ranking
            .iter()
            .map(|&i| r.nodes()[usize::from(i)].id.clone())
            .collect()
    }

    #[test]
    fn berlin_prefers_its_edge_then_potsdam_then_cloud() {
        let r = router("");
        let berlin = LatLon::new(52.51, 13.32).expect("valid");
        assert_eq!(
            ids(&r, &r.ranking(Some(berlin))),
            ["tu-berlin", "potsdam", "cloud"]
        );
        let potsdam = LatLon::new(52.40, 13.06).expect("valid");
        assert_eq!(
            ids(&r, &r.ranking(Some(potsdam))),
            ["potsdam", "tu-berlin", "cloud"]
        );
        let london = LatLon::new(51.50, -0.12).expect("valid");
        assert_eq!(ids(&r, &r.ranking(Some(london))), ["cloud"]);
        assert_eq!(ids(&r, &r.ranking(None)), ["cloud"]);
    }

    #[test]
    fn outside_every_area_but_near_an_edge_gets_that_edge() {
        let r = router("");
        // East of the tu-berlin hexagon (which ends near 13.50 E), about 20 km from its centre.
        let east = LatLon::new(52.51, 13.60).expect("valid");
        assert_eq!(ids(&r, &r.ranking(Some(east)))[0], "tu-berlin");
    }

    #[test]
    fn health_skips_withdrawn_nodes_and_falls_back_to_the_cloud() {
        let r = router("");
        let health = HealthTable::new(r.nodes().iter().map(|n| n.id.clone()));
        let berlin = r.ranking(LatLon::new(52.51, 13.32).ok());
        assert_eq!(r.nodes()[r.pick(&berlin, &health)].id, "tu-berlin");
        health.set("tu-berlin", false);
        assert_eq!(r.nodes()[r.pick(&berlin, &health)].id, "potsdam");
        health.set("potsdam", false);
        health.set("cloud", false);
        assert_eq!(r.nodes()[r.pick(&berlin, &health)].id, "cloud");
        assert_eq!(r.nodes()[0].v4, Some(Ipv4Addr::new(127, 0, 0, 11)));
        assert_eq!(r.nodes()[0].v6, None);
    }
}
