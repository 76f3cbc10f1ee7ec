//! What a node writes into etcd: its registration and its load reports, as JSON.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use geofaas_config::{AreaConfig, LatLon, NodeConfig, Role};
use serde::{Deserialize, Serialize};
use url::Url;

/// A node's registration, at `<prefix>nodes/<id>` under its lease.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeRecord {
    /// Node id (a DNS label).
    pub id: String,
    /// Edge or cloud.
    pub role: Role,
    /// Where the node stands.
    pub location: LatLon,
    /// Service area as WKT in lon-lat order, or `world` for the cloud.
    pub area: String,
    /// The URL clients and nodes reach its gateway at.
    pub public_url: Url,
    /// The address its gateway listens on (the DNS answer when the URL's host is a name).
    pub listen: SocketAddr,
    /// Functions its backends serve (at registration).
    pub functions: Vec<String>,
    /// The geofaas version it runs.
    pub version: String,
    /// When it registered, in milliseconds since the Unix epoch.
    pub registered_ms: u64,
    /// Its `cores`, `memory_gb` and `bandwidth` as its file sets them (none: the defaults);
    /// absent in records of older nodes.
    #[serde(default, skip_serializing_if = "Capacity::is_default")]
    pub capacity: Capacity,
}

/// A node's capacities as its topology file sets them (see [`NodeConfig`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Capacity {
    /// vCPU cores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cores: Option<f64>,
    /// Memory in GB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_gb: Option<f64>,
    /// Image-pull bandwidth in Mbit/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth: Option<f64>,
}

impl Capacity {
    fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

impl NodeRecord {
    /// The record of `node` (its area as built from the file), serving `functions`.
    pub fn of(node: &NodeConfig, area_wkt: String, functions: Vec<String>) -> Self {
        Self {
            id: node.id.clone(),
            role: node.role,
            location: node.location,
            area: if node.role == Role::Cloud {
                "world".to_owned()
            } else {
                area_wkt
            },
            public_url: node.public_url.clone(),
            listen: node.listen,
            functions,
            version: env!("CARGO_PKG_VERSION").to_owned(),
            registered_ms: now_ms(),
            capacity: Capacity {
                cores: node.cores,
                memory_gb: node.memory_gb,
                bandwidth: node.bandwidth,
            },
        }
    }

    /// The node as a topology entry (without backends: another node's are not ours to run).
    pub fn to_node_config(&self) -> NodeConfig {
        NodeConfig {
            id: self.id.clone(),
            role: self.role,
            location: self.location,
            area: Some(if self.area == "world" {
                AreaConfig::World
            } else {
                AreaConfig::Wkt(self.area.clone())
            }),
            public_url: self.public_url.clone(),
            listen: self.listen,
            backends: Vec::new(),
            cores: self.capacity.cores,
            memory_gb: self.capacity.memory_gb,
            bandwidth: self.capacity.bandwidth,
        }
    }
}

/// Instances of one function on a node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FunctionLoad {
    /// Warm instances waiting for a call.
    pub idle: usize,
    /// Instances serving a call or starting.
    pub busy: usize,
}

/// What a node's gateway reports of its own load (the fleet adds CPU, memory and the time).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeLoad {
    /// Calls waiting for an admission permit.
    pub queued: usize,
    /// Calls running now.
    pub running: usize,
    /// Warm instances per function, for backends that keep them.
    pub functions: BTreeMap<String, FunctionLoad>,
    /// What the node measured of each function's calls there (its live profiles).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub profiles: BTreeMap<String, FunctionFacts>,
    /// Round trip to each other node, in milliseconds, as the node measured it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub links: BTreeMap<String, f64>,
    /// Calls it served at once per core, on average over its last seconds (`running` is
    /// the instant): how busy it is most of the time. 0 in reports that do not say.
    #[serde(default)]
    pub calls_per_core: f64,
}

/// What a node measured of one function's calls (gateway `profiles`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FunctionFacts {
    /// Calls measured.
    pub calls: u64,
    /// Time of a warm call there, from its arrival to its answer, in milliseconds.
    pub warm_ms: f64,
    /// Extra time of a call that started a new instance, in milliseconds (none seen: `None`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cold_ms: Option<f64>,
    /// Measured memory of one instance in MB (none yet, or not measured there: `None`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<f64>,
}

/// A load report, at `<prefix>load/<id>` under the node's lease, about once a second.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoadReport {
    /// The node.
    pub node: String,
    /// When it was measured, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// Queue, calls and instances.
    #[serde(flatten)]
    pub load: NodeLoad,
    /// CPU the node's process and its function processes used over the last interval, in
    /// percent of one core ([`crate::usage`]).
    pub cpu_percent: f64,
    /// Memory (proportional set size) of the node's process and its function processes in
    /// bytes.
    pub memory_bytes: u64,
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// CPU time (user + system) of this process in clock ticks and its resident set in bytes, from
/// `/proc/self` (zeros where there is no `/proc`).
pub fn process_usage() -> (u64, u64) {
    let ticks = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            // Fields after the command name, which is in parentheses and may hold spaces.
            let rest = s.rsplit_once(')')?.1;
            let f: Vec<&str> = rest.split_whitespace().collect();
            Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
        })
        .unwrap_or(0);
    let rss = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096);
    (ticks, rss)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_become_topology_entries() {
        let text = include_str!("../../examples/berlin.toml");
        let t = geofaas_config::Topology::parse(
            text,
            "berlin.toml",
            std::path::Path::new("../examples"),
        )
        .unwrap();
        let map = t.service_map().unwrap();
        for node in &t.nodes {
            let wkt = map.node(&node.id).unwrap().area.to_wkt();
            let r = NodeRecord::of(node, wkt, vec!["echo".into()]);
            let back: NodeRecord =
                serde_json::from_slice(&serde_json::to_vec(&r).unwrap()).unwrap();
            assert_eq!(back, r);
            let cfg = r.to_node_config();
            let area = cfg
                .area
                .as_ref()
                .unwrap()
                .build(std::path::Path::new("."))
                .unwrap();
            assert_eq!(area.is_world(), node.role == Role::Cloud, "{}", node.id);
        }
        let (ticks, rss) = process_usage();
        assert!(rss > 0 && ticks < u64::MAX);
    }

    #[test]
    fn a_load_report_carries_the_average_load_and_older_ones_read_as_none() {
        let r = LoadReport {
            node: "potsdam".into(),
            at_ms: 1,
            load: NodeLoad {
                running: 1,
                calls_per_core: 0.75,
                ..Default::default()
            },
            cpu_percent: 0.0,
            memory_bytes: 0,
        };
        let back: LoadReport = serde_json::from_slice(&serde_json::to_vec(&r).unwrap()).unwrap();
        assert_eq!(back, r);
        let older = r#"{"node":"potsdam","at_ms":1,"queued":0,"running":1,"functions":{},
            "cpu_percent":0.0,"memory_bytes":0}"#;
        let back: LoadReport = serde_json::from_str(older).unwrap();
        assert_eq!(back.load.calls_per_core, 0.0);
        assert_eq!(back.load.running, 1);
    }
}
