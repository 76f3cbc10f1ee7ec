//! The evaluation pipeline on tiny instances: seed ranges are disjoint, and the lower bound is
//! below every policy, request by request and in the per-seed mean and P99.

use super::*;
use crate::baselines::{GreedyPolicy, NearestPolicy, RandomPolicy};
use crate::milp::MilpPolicy;
use crate::policy::Policy;
use crate::ppo::PpoPolicy;
use crate::workload::WorkloadConfig;

#[test]
fn held_out_seeds_never_meet_training_or_validation_seeds() {
    let test = held_out_seeds(1000);
    assert_eq!(test.len(), 1000);
    for v in VALIDATION_SEEDS {
        assert!(!test.contains(&v), "validation seed {v} is a test seed");
    }
    for seed in [0, 1, 2, 7] {
        for it in 1..=2000 {
            for ep in 0..8 {
                let s = training_seed(seed, it, 8, ep);
                assert!(s >= TRAIN_SEED_BASE && !test.contains(&s), "{s}");
                assert!(!VALIDATION_SEEDS.contains(&s), "{s}");
            }
        }
    }
}

/// Runs each policy on `seeds` and checks the bound against every served request.
fn check_bound(topo: &Topology, functions: usize, cfg: &WorkloadConfig, warmup: usize) {
    let sim = SimConfig {
        warmup,
        ..Default::default()
    };
    let link = sim.link;
    let mut policies: Vec<Box<dyn Policy>> = vec![
        Box::new(RandomPolicy::new(1)),
        Box::new(NearestPolicy),
        Box::new(GreedyPolicy::new(link)),
        Box::new(MilpPolicy::new(link, 20.0)),
    ];
    let weights = crate::cli::shipped_weights(&topo.name).expect("shipped weights");
    policies.push(Box::new(PpoPolicy::from_bytes(weights, link).unwrap()));
    for seed in held_out_seeds(2) {
        let wl = Workload::for_topology(topo, (functions, 7), &WorkloadConfig { seed, ..*cfg });
        let bound = lower_bounds(topo, &wl, sim);
        assert_eq!(bound.len(), wl.requests.len() - warmup);
        let b = SeedStats::from_latencies(bound.clone(), 0, 0);
        for p in &policies {
            let out = Simulator::run(topo, &wl, sim, p.as_ref());
            assert_eq!(out.len(), bound.len());
            for (o, lb) in out.iter().zip(&bound) {
                assert!(o.dropped || o.latency.total() + 1e-9 >= *lb, "{}", p.name());
            }
            let s = SeedStats::from_outcomes(&out);
            assert_eq!(s.dropped, 0, "{}", p.name());
            assert!(b.mean_ms <= s.mean_ms + 1e-9, "{} seed {seed}", p.name());
            assert!(b.p99_ms <= s.p99_ms + 1e-9, "{} seed {seed}", p.name());
        }
    }
}

#[test]
fn lower_bound_is_below_every_policy_on_berlin() {
    let cfg = WorkloadConfig {
        requests: 300,
        rate_per_s: 100.0,
        ..Default::default()
    };
    check_bound(&Topology::berlin(), 20, &cfg, 150);
}

#[test]
fn lower_bound_is_below_every_policy_on_melbourne() {
    let cfg = WorkloadConfig {
        requests: 500,
        ..Default::default()
    };
    check_bound(&Topology::melbourne(), 200, &cfg, 350);
}

#[test]
fn report_ratios_are_against_the_best_reference_and_the_bound() {
    let st = |mean_ms, p99_ms| SeedStats {
        mean_ms,
        p99_ms,
        slo_violation: 0.0,
        dropped: 0,
        queue_ms: 0.0,
        cold_ms: 0.0,
    };
    let e = Evaluation {
        seeds: vec![1, 2],
        policies: vec!["greedy".into(), "milp".into(), "ppo".into()],
        stats: vec![
            vec![st(100.0, 400.0), st(90.0, 300.0)],
            vec![st(110.0, 380.0), st(80.0, 320.0)],
            vec![st(104.0, 390.0), st(88.0, 330.0)],
        ],
        bound: vec![st(50.0, 200.0), st(40.0, 150.0)],
    };
    assert_eq!(e.reference_members(), ["greedy", "milp"]);
    assert_eq!(e.reference(Metric::Mean), [100.0, 80.0]);
    assert_eq!(e.reference(Metric::P99), [380.0, 300.0]);
    let md = e.markdown();
    // PPO mean: (104/100 + 88/80) / 2 = 1.070; P99: (390/380 + 330/300) / 2 = 1.063.
    assert!(md.contains("| ppo | 96.0 | 360.0 | 1.070 ["), "{md}");
    assert!(
        md.contains("| 1.063 [") && md.contains("| 1, 1 of 2 |\n| bound"),
        "{md}"
    );
    let (m, lo, hi) = bootstrap_mean_ci(&[1.0, 2.0, 3.0, 4.0]);
    assert_eq!(m, 2.5);
    assert!(lo < m && m < hi && lo >= 1.0 && hi <= 4.0);
}

#[test]
fn train_cli_validates_on_the_validation_seeds() {
    #[derive(clap::Parser)]
    struct Wrap {
        #[command(flatten)]
        args: crate::cli::TrainArgs,
    }
    let w = <Wrap as clap::Parser>::parse_from(["train"]);
    assert_eq!(w.args.eval_seeds, VALIDATION_SEEDS);
}
