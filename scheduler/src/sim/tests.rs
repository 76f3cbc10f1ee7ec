//! Simulator determinism and capacity invariants.

use super::*;
use crate::baselines::{GreedyPolicy, NearestPolicy, RandomPolicy};
use crate::workload::{function_catalogue, WorkloadConfig};

fn setup(seed: u64) -> (Topology, Workload) {
    let topo = Topology::melbourne();
    let cfg = WorkloadConfig {
        requests: 600,
        seed,
        ..Default::default()
    };
    let wl = Workload::generate(function_catalogue(200, 7), &topo.sources, &cfg);
    (topo, wl)
}

#[test]
fn same_seed_same_outcomes() {
    let (topo, wl) = setup(3);
    let strip = |v: Vec<Outcome>| {
        v.into_iter()
            .map(|o| Outcome {
                decision_ns: 0,
                ..o
            })
            .collect::<Vec<_>>()
    };
    let a = strip(Simulator::run(
        &topo,
        &wl,
        SimConfig::default(),
        &RandomPolicy::new(5),
    ));
    let b = strip(Simulator::run(
        &topo,
        &wl,
        SimConfig::default(),
        &RandomPolicy::new(5),
    ));
    assert_eq!(a, b);
    let (_, wl2) = setup(4);
    let c = strip(Simulator::run(
        &topo,
        &wl2,
        SimConfig::default(),
        &RandomPolicy::new(5),
    ));
    assert_ne!(a, c);
}

#[test]
fn no_decision_violates_a_capacity() {
    // A small, crowded topology: 2 Berlin edges + cloud with few cores and little memory.
    let mut topo = Topology::berlin();
    for n in &mut topo.nodes {
        n.cores = 2.0;
        n.memory_mb = 3000.0;
    }
    let cfg = WorkloadConfig {
        requests: 800,
        rate_per_s: 200.0,
        seed: 9,
        ..Default::default()
    };
    let wl = Workload::generate(function_catalogue(30, 7), &topo.sources, &cfg);
    let policies: Vec<Box<dyn Policy>> = vec![
        Box::new(RandomPolicy::new(1)),
        Box::new(NearestPolicy),
        Box::new(GreedyPolicy::default()),
    ];
    for p in &policies {
        let mut sim = Simulator::new(&topo, &wl, SimConfig::default());
        let mut served = 0;
        while let Some(obs) = sim.next_observation() {
            let a = p.decide(&obs);
            if let Some(a) = a {
                assert!(obs.is_feasible(a), "{} chose a masked action", p.name());
            }
            let o = sim.step(a, 0);
            assert!(!o.fallback, "{}", p.name());
            assert!(sim.within_capacity(), "{} broke a capacity", p.name());
            served += usize::from(!o.dropped);
        }
        assert!(served > 0);
    }
}

#[test]
fn warm_containers_are_reused_and_expire() {
    let (topo, wl) = setup(5);
    let out = Simulator::run(&topo, &wl, SimConfig::default(), &GreedyPolicy::default());
    let cold = out.iter().filter(|o| o.cold).count();
    assert!(
        cold > 0 && cold < out.len() - 50,
        "{cold} cold of {}",
        out.len()
    );
    // With a keep-alive of 0 every request after a completion is cold again.
    let none = SimConfig {
        keep_alive_ms: 0.0,
        ..Default::default()
    };
    let out0 = Simulator::run(&topo, &wl, none, &GreedyPolicy::default());
    assert!(out0.iter().filter(|o| o.cold).count() > cold);
}

#[test]
fn a_request_that_takes_the_last_cores_reports_the_warm_containers_it_blocks() {
    // One 2-core node; function 0 needs 1 core, function 1 needs 2.
    let node = NodeSpec {
        location: crate::model::GeoPoint::new(0.0, 0.0),
        cores: 2.0,
        ghz: 3.0,
        memory_mb: 8000.0,
        bandwidth_mbps: 500.0,
        access_ms: 0.0,
    };
    let topo = Topology {
        name: "one".into(),
        nodes: vec![node],
        ids: vec!["n".into()],
        sources: vec![node.location],
        functions: None,
        popularity: None,
        defaults: crate::topology::WorkloadDefaults::FILE,
    };
    let mut functions = function_catalogue(2, 7);
    functions[0].cores = 1.0;
    functions[1].cores = 2.0;
    let req = |id: usize, t: f64, function: usize| Request {
        id,
        arrival_ms: t,
        function,
        source: node.location,
        input_kb: 1.0,
        slo_ms: 300.0,
    };
    let wl = Workload {
        requests: vec![req(0, 0.0, 0), req(1, 60_000.0, 1), req(2, 60_001.0, 0)],
        functions,
    };
    let mut sim = Simulator::new(&topo, &wl, SimConfig::default());
    let new = Action {
        candidate: 0,
        new_container: true,
    };
    // Nothing warm yet: nothing to block.
    let o = sim.next_observation().unwrap();
    assert_eq!(o.candidates[0].blocked_cold_ms, 0.0);
    sim.step(Some(new), 0);
    // Function 0 is idle and warm; function 1's two cores would leave it none.
    let o = sim.next_observation().unwrap();
    let cold0 = model::cold_start_ms(&wl.functions[0], node.bandwidth_mbps);
    assert_eq!(o.candidates[0].blocked_cold_ms, cold0);
    sim.step(Some(new), 0);
    // While function 1 runs, function 0's warm container cannot be reused.
    let o = sim.next_observation().unwrap();
    let c = &o.candidates[0];
    assert_eq!((c.idle, c.free_cores), (1, 0.0));
    assert!(!o.is_feasible(Action {
        candidate: 0,
        new_container: false
    }));
}
