//! Simulation topologies: the 125 EUA sites of Melbourne CBD with capacities generated as in the
//! Scale paper, the GeoFaaS Berlin/Potsdam/London setup, and any geofaas topology file.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::error::{Result, SchedulerError};
use crate::model::{FunctionProfile, GeoPoint, NodeSpec};

/// The EUA Melbourne CBD edge sites (swinedge/eua-dataset, MIT; see `data/eua/LICENSE.MIT`).
pub const EUA_MELBOURNE_CSV: &str = include_str!("../data/eua/site-optus-melbCBD.csv");
/// Seed of the EUA capacity draw used for the shipped weights.
pub const EUA_DEFAULT_SEED: u64 = 2026;

/// Nodes a workload runs on, plus where requests come from.
#[derive(Debug, Clone, PartialEq)]
pub struct Topology {
    /// Short name (`melbourne`, `berlin`, or the file's zone).
    pub name: String,
    /// Candidate nodes, in a fixed order (the policy's candidate indices).
    pub nodes: Vec<NodeSpec>,
    /// Node names, parallel to `nodes`.
    pub ids: Vec<String>,
    /// Request source locations; the workload generator draws them Zipf-distributed.
    pub sources: Vec<GeoPoint>,
    /// Function profiles of a topology file (the generator draws its own when absent).
    pub functions: Option<Vec<(String, FunctionProfile)>>,
    /// How often each of `functions` is called, relative (parallel to it): a measured mix
    /// ([`crate::measured`]); `None`, Zipf popularity.
    pub popularity: Option<Vec<f64>>,
    /// The workload `train` and `simulate` use on it unless told otherwise.
    pub defaults: WorkloadDefaults,
}

/// A workload that suits a topology's size: loaded enough that policies differ, not so
/// overloaded that every policy misses the SLOs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WorkloadDefaults {
    /// Measured requests per episode.
    pub requests: usize,
    /// Warm-up requests before them.
    pub warmup: usize,
    /// Mean arrival rate, requests per second.
    pub rate: f64,
    /// Functions in the generated catalogue (when the topology has none of its own).
    pub functions: usize,
}

impl WorkloadDefaults {
    /// The paper's Melbourne setting: 125 sites, 200 functions, 400 requests/s.
    pub const MELBOURNE: Self = Self {
        requests: 2000,
        warmup: 8000,
        rate: 400.0,
        functions: 200,
    };
    /// Three nodes: 50 functions at 20 requests/s (the table in `docs/scheduler.md`).
    pub const BERLIN: Self = Self {
        requests: 1000,
        warmup: 2000,
        rate: 20.0,
        functions: 50,
    };
    /// A topology file with its own functions: 200 requests/s over its nodes.
    pub const FILE: Self = Self {
        requests: 2000,
        warmup: 8000,
        rate: 200.0,
        functions: 50,
    };
}

/// One of the paper's 10 node types.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NodeType {
    /// vCPU cores.
    pub cores: f64,
    /// Clock in GHz, in [2.4, 3.6].
    pub ghz: f64,
    /// Memory in MB, in [10, 30] GB.
    pub memory_mb: f64,
    /// Image pull bandwidth in Mbit/s.
    pub bandwidth_mbps: f64,
}

/// Draws the 10 node types of the paper: CPU 2.4-3.6 GHz, memory 10-30 GB; cores in 2..=8
/// and bandwidth 200-1000 Mbit/s (the paper gives no values: our choice, seeded).
pub fn node_types(seed: u64) -> Vec<NodeType> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..10)
        .map(|i| NodeType {
            // Spread the clocks evenly so all ten types differ, then jitter.
            ghz: 2.4 + 1.2 * (i as f64 + rng.gen::<f64>()) / 10.0,
            memory_mb: rng.gen_range(10.0..=30.0_f64).round() * 1000.0,
            cores: [2.0, 4.0, 6.0, 8.0][rng.gen_range(0..4)],
            bandwidth_mbps: (rng.gen_range(200.0..=1000.0_f64) / 50.0).round() * 50.0,
        })
        .collect()
}

impl Topology {
    /// Parses the EUA site CSV (`SITE_ID,LATITUDE,LONGITUDE,...`, CRLF or LF) into nodes; each
    /// site gets one of the 10 node types uniformly at random (seeded). Sources = the sites.
    pub fn eua(csv: &str, seed: u64) -> Result<Self> {
        let types = node_types(seed);
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed);
        let mut nodes = Vec::new();
        let mut ids = Vec::new();
        for (i, line) in csv.lines().enumerate().skip(1) {
            let line = line.trim_end_matches('\r');
            if line.is_empty() {
                continue;
            }
            let cols: Vec<&str> = line.split(',').collect();
            let bad = |m: &str| SchedulerError::parse(format!("EUA csv line {}", i + 1), m);
            if cols.len() < 3 {
                return Err(bad("fewer than 3 columns"));
            }
            let lat: f64 = cols[1].parse().map_err(|_| bad("LATITUDE"))?;
            let lon: f64 = cols[2].parse().map_err(|_| bad("LONGITUDE"))?;
            let t = types[rng.gen_range(0..types.len())];
            ids.push(cols[0].to_owned());
            nodes.push(NodeSpec {
                location: GeoPoint::new(lat, lon),
                cores: t.cores,
                ghz: t.ghz,
                memory_mb: t.memory_mb,
                bandwidth_mbps: t.bandwidth_mbps,
                access_ms: 0.0,
            });
        }
        if nodes.is_empty() {
            return Err(SchedulerError::Invalid("EUA csv has no sites".into()));
        }
        let sources = nodes.iter().map(|n| n.location).collect();
        Ok(Self {
            name: "melbourne".into(),
            nodes,
            ids,
            sources,
            functions: None,
            popularity: None,
            defaults: WorkloadDefaults::MELBOURNE,
        })
    }

    /// The embedded 125-site Melbourne CBD topology with the default capacity seed.
    pub fn melbourne() -> Self {
        Self::eua(EUA_MELBOURNE_CSV, EUA_DEFAULT_SEED).expect("embedded EUA csv parses")
    }

    /// The GeoFaaS experiment topology (`data/geofaas-berlin/areas.json`): edges at TU Berlin and
    /// Potsdam, the cloud in London (25 ms client RTT, so 12.5 ms one-way access delay).
    /// Sources: 8 points on a 6 km ring around each edge centre.
    pub fn berlin() -> Self {
        let edge = |lat, lon| NodeSpec {
            location: GeoPoint::new(lat, lon),
            cores: 8.0,
            ghz: 3.0,
            memory_mb: 16_000.0,
            bandwidth_mbps: 1_000.0,
            access_ms: 0.0,
        };
        let mut cloud = edge(51.498593, -0.176959);
        cloud.cores = 64.0;
        cloud.memory_mb = 256_000.0;
        cloud.bandwidth_mbps = 10_000.0;
        cloud.access_ms = 12.5;
        let nodes = vec![
            edge(52.510057, 13.325043),
            edge(52.354199, 13.055874),
            cloud,
        ];
        Self {
            name: "berlin".into(),
            sources: ring_sources(&nodes[..2], 6.0, 8),
            nodes,
            ids: vec!["tu-berlin".into(), "potsdam".into(), "cloud".into()],
            functions: None,
            popularity: None,
            defaults: WorkloadDefaults::BERLIN,
        }
    }

    /// Builds a topology from a geofaas topology file: each node's `cores`, `memory_gb` and
    /// `bandwidth` (defaults: an edge 8 cores / 16 GB / 1 Gbit/s, the cloud 64 cores / 256 GB /
    /// 10 Gbit/s), 3 GHz, and 12.5 ms access delay for the cloud; functions keep their
    /// profiles (1 core per request).
    pub fn from_config(cfg: &geofaas_config::Topology) -> Result<Self> {
        use geofaas_config::Role;
        let nodes: Vec<NodeSpec> = cfg
            .nodes
            .iter()
            .map(|n| NodeSpec {
                location: GeoPoint::new(n.location.lat, n.location.lon),
                cores: n.cores(),
                ghz: 3.0,
                memory_mb: n.memory_gb() * 1000.0,
                bandwidth_mbps: n.bandwidth(),
                access_ms: if n.role == Role::Cloud { 12.5 } else { 0.0 },
            })
            .collect();
        let edges: Vec<NodeSpec> = cfg
            .nodes
            .iter()
            .zip(&nodes)
            .filter(|(c, _)| c.role == Role::Edge)
            .map(|(_, n)| *n)
            .collect();
        if nodes.is_empty() {
            return Err(SchedulerError::Invalid("topology has no nodes".into()));
        }
        let functions = cfg
            .functions
            .iter()
            .map(|f| (f.name.clone(), FunctionProfile::from(f)))
            .collect::<Vec<_>>();
        let around = if edges.is_empty() { &nodes } else { &edges };
        Ok(Self {
            name: cfg.zone.trim_end_matches('.').to_owned(),
            sources: ring_sources(around, 6.0, 8),
            nodes,
            ids: cfg.nodes.iter().map(|n| n.id.clone()).collect(),
            functions: (!functions.is_empty()).then_some(functions),
            popularity: None,
            defaults: WorkloadDefaults::FILE,
        })
    }

    /// Loads a geofaas topology file (TOML) with `geofaas_config::Topology::load`.
    pub fn load_config(path: &std::path::Path) -> Result<Self> {
        let cfg = geofaas_config::Topology::load(path)
            .map_err(|e| SchedulerError::parse(path.display().to_string(), e.to_string()))?;
        Self::from_config(&cfg)
    }

    /// Resolves a CLI name: `melbourne`, `berlin`, or a path to a topology file.
    pub fn by_name(name: &str) -> Result<Self> {
        match name {
            "melbourne" | "eua" => Ok(Self::melbourne()),
            "berlin" => Ok(Self::berlin()),
            path => Self::load_config(std::path::Path::new(path)),
        }
    }
}

/// `per_node` points on a circle of `radius_km` around each node (plus the centre).
pub(crate) fn ring_sources(nodes: &[NodeSpec], radius_km: f64, per_node: usize) -> Vec<GeoPoint> {
    let mut out = Vec::new();
    for n in nodes {
        out.push(n.location);
        for k in 0..per_node {
            let a = std::f64::consts::TAU * k as f64 / per_node as f64;
            let dlat = radius_km * a.cos() / 111.195;
            let dlon = radius_km * a.sin() / (111.195 * n.location.lat.to_radians().cos());
            out.push(GeoPoint::new(n.location.lat + dlat, n.location.lon + dlon));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn melbourne_has_125_sites_with_paper_capacities() {
        let t = Topology::melbourne();
        assert_eq!(t.nodes.len(), 125);
        assert_eq!(t.ids[0], "10003026");
        for n in &t.nodes {
            assert!((2.4..=3.6).contains(&n.ghz), "{}", n.ghz);
            assert!((10_000.0..=30_000.0).contains(&n.memory_mb));
            assert!((-37.83..-37.80).contains(&n.location.lat));
        }
        let mut kinds: Vec<u64> = t.nodes.iter().map(|n| (n.ghz * 1e6) as u64).collect();
        kinds.sort_unstable();
        kinds.dedup();
        assert_eq!(kinds.len(), 10, "10 node types in use");
    }

    #[test]
    fn a_topology_file_sets_capacities_and_defaults_are_the_old_ones() {
        let text = include_str!("../../examples/berlin.toml").replacen(
            "role = \"edge\"",
            "role = \"edge\"\ncores = 2\nmemory_gb = 4.5\nbandwidth = 100",
            1,
        );
        let cfg =
            geofaas_config::Topology::parse(&text, "t.toml", std::path::Path::new(".")).unwrap();
        let t = Topology::from_config(&cfg).unwrap();
        assert_eq!(t.ids, ["tu-berlin", "potsdam", "cloud"]);
        let n = t.nodes[0];
        assert_eq!(
            (n.cores, n.memory_mb, n.bandwidth_mbps),
            (2.0, 4500.0, 100.0)
        );
        let n = t.nodes[1];
        assert_eq!(
            (n.cores, n.memory_mb, n.bandwidth_mbps),
            (8.0, 16_000.0, 1000.0)
        );
        let n = t.nodes[2];
        assert_eq!(
            (n.cores, n.memory_mb, n.bandwidth_mbps),
            (64.0, 256_000.0, 10_000.0)
        );
        assert_eq!(n.access_ms, 12.5);
    }

    #[test]
    fn berlin_has_two_edges_and_a_remote_cloud() {
        let t = Topology::berlin();
        assert_eq!(t.nodes.len(), 3);
        assert_eq!(t.nodes[2].access_ms, 12.5);
        assert_eq!(t.sources.len(), 18);
    }
}
