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

#[test]
fn run_train_writes_weights_that_load_and_a_metrics_csv() {
    use clap::Parser;
    use geofaas_scheduler::cli::{run_train, TrainArgs};
    #[derive(Parser)]
    struct Wrap {
        #[command(flatten)]
        args: TrainArgs,
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("w.safetensors");
    let w = Wrap::parse_from([
        "train",
        "--topology",
        "berlin",
        "--iterations",
        "2",
        "--episodes",
        "1",
        "--eval-every",
        "1",
        "--eval-seeds",
        "77",
        "--requests",
        "100",
        "--warmup",
        "100",
        "--functions",
        "10",
        "--rate",
        "20",
        "--quiet",
        "--out",
        out.to_str().unwrap(),
    ]);
    run_train(w.args).unwrap();
    let p = geofaas_scheduler::ppo::PpoPolicy::load(&out, Default::default()).unwrap();
    assert_eq!(p.actor().layers.len(), 3);
    let csv = std::fs::read_to_string(dir.path().join("w.metrics.csv")).unwrap();
    assert_eq!(csv.lines().count(), 3, "{csv}");
    assert!(csv.starts_with("iteration,steps,mean_return"));
}
