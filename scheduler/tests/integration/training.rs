//! A short PPO run on a tiny instance learns a policy that clearly beats random placement on
//! held-out workloads.

use geofaas_scheduler::baselines::RandomPolicy;
use geofaas_scheduler::sim::SimConfig;
use geofaas_scheduler::topology::Topology;
use geofaas_scheduler::train::{evaluate, train, PpoConfig};
use geofaas_scheduler::workload::WorkloadConfig;

fn tiny() -> (Topology, PpoConfig) {
    let topo = Topology::berlin();
    let cfg = PpoConfig {
        seed: 3,
        iterations: 8,
        episodes_per_iter: 2,
        minibatch: 128,
        eval_every: 4,
        eval_seeds: vec![901],
        workload: WorkloadConfig {
            requests: 500,
            rate_per_s: 100.0,
            ..Default::default()
        },
        functions: (20, 7),
        sim: SimConfig {
            warmup: 200,
            ..Default::default()
        },
        ..Default::default()
    };
    (topo, cfg)
}

#[test]
fn ppo_beats_random_on_held_out_seeds() {
    let (topo, cfg) = tiny();
    let mut iters = 0;
    let report = train(&topo, &cfg, |_| iters += 1).unwrap();
    assert_eq!(iters, cfg.iterations);
    assert_eq!(report.metrics.len(), cfg.iterations);
    let test_seeds = [11, 12];
    let ppo = evaluate(&topo, &cfg, &report.policy, &test_seeds);
    let random = evaluate(&topo, &cfg, &RandomPolicy::new(1), &test_seeds);
    assert!(
        ppo.mean_ms < 0.8 * random.mean_ms,
        "ppo {:.1} ms vs random {:.1} ms",
        ppo.mean_ms,
        random.mean_ms
    );
}

#[test]
fn training_is_reproducible_for_a_seed() {
    let (topo, mut cfg) = tiny();
    cfg.iterations = 2;
    cfg.eval_every = 2;
    let a = train(&topo, &cfg, |_| {}).unwrap();
    let b = train(&topo, &cfg, |_| {}).unwrap();
    assert_eq!(a.policy.actor(), b.policy.actor());
    assert_eq!(a.metrics[1].mean_return, b.metrics[1].mean_return);
}
