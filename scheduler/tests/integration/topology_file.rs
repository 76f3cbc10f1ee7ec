//! Simulating a geofaas topology file (`examples/berlin.toml`, loaded with geofaas-config).

use std::path::Path;

use geofaas_scheduler::baselines::GreedyPolicy;
use geofaas_scheduler::sim::{SimConfig, Simulator};
use geofaas_scheduler::topology::Topology;
use geofaas_scheduler::workload::{Workload, WorkloadConfig};

#[test]
fn the_berlin_topology_file_simulates_with_its_own_functions() {
    let path =
        std::path::PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"))
            .join("../examples/berlin.toml");
    let topo = Topology::load_config(&path).unwrap();
    assert_eq!(topo.ids, ["tu-berlin", "potsdam", "cloud"]);
    assert_eq!(topo.nodes[2].access_ms, 12.5, "the cloud is remote");
    let functions = topo.functions.as_ref().expect("the file lists functions");
    assert!(functions
        .iter()
        .any(|(name, p)| name == "sieve" && p.cpu_ms == 6.0));
    let cfg = WorkloadConfig {
        requests: 300,
        rate_per_s: 20.0,
        ..Default::default()
    };
    let wl = Workload::for_topology(&topo, (0, 0), &cfg);
    assert!(wl
        .requests
        .iter()
        .all(|r| r.slo_ms == wl.functions[r.function].slo_ms));
    let out = Simulator::run(&topo, &wl, SimConfig::default(), &GreedyPolicy::default());
    assert_eq!(out.len(), 300);
    assert!(out.iter().all(|o| !o.dropped));
    assert!(Topology::load_config(Path::new("/nonexistent.toml")).is_err());
}
