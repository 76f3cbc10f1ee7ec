//! Decision time per request on the 125-site Melbourne topology, from warm simulator states.
//!
//! Run: `cargo bench -p geofaas-scheduler --bench decide`
//! (one core: `taskset -c 0 cargo bench -p geofaas-scheduler --bench decide`)

use criterion::{criterion_group, criterion_main, Criterion};
use geofaas_scheduler::baselines::{GreedyPolicy, NearestPolicy};
use geofaas_scheduler::cli::shipped_weights;
use geofaas_scheduler::ppo::PpoPolicy;
use geofaas_scheduler::sim::{SimConfig, Simulator};
use geofaas_scheduler::topology::Topology;
use geofaas_scheduler::workload::{Workload, WorkloadConfig};
use geofaas_scheduler::{Observation, Policy};

/// 256 observations taken from a greedy run after an 8000-request warm-up.
fn observations(topo: &Topology) -> Vec<Observation> {
    let cfg = WorkloadConfig {
        requests: 8256,
        ..Default::default()
    };
    let wl = Workload::for_topology(topo, (200, 7), &cfg);
    let sim_cfg = SimConfig {
        warmup: 8000,
        ..Default::default()
    };
    let mut sim = Simulator::new(topo, &wl, sim_cfg);
    sim.warm_up();
    let greedy = GreedyPolicy::new(sim_cfg.link);
    let mut out = Vec::new();
    while let Some(obs) = sim.next_observation() {
        let a = greedy.decide(&obs);
        out.push(obs);
        sim.step(a, 0);
    }
    out
}

fn bench(c: &mut Criterion) {
    let topo = Topology::melbourne();
    let obs = observations(&topo);
    let link = SimConfig::default().link;
    let ppo = PpoPolicy::from_bytes(shipped_weights("melbourne").expect("shipped"), link)
        .expect("weights parse");
    let policies: Vec<Box<dyn Policy>> = vec![
        Box::new(ppo),
        Box::new(GreedyPolicy::new(link)),
        Box::new(NearestPolicy),
    ];
    for p in &policies {
        let mut i = 0;
        c.bench_function(&format!("decide/{}/melbourne-125", p.name()), |b| {
            b.iter(|| {
                i = (i + 1) % obs.len();
                std::hint::black_box(p.decide(std::hint::black_box(&obs[i])))
            })
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
