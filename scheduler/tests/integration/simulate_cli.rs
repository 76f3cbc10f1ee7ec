//! `run_simulate` end to end on a small Berlin run: table, CSV and PNG.

use clap::Parser;
use geofaas_scheduler::cli::{run_simulate, SimulateArgs};

#[derive(Parser)]
struct Wrap {
    #[command(flatten)]
    args: SimulateArgs,
}

#[test]
fn simulate_writes_csv_and_plot() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("s.csv");
    let png = dir.path().join("s.png");
    let w = Wrap::parse_from([
        "simulate",
        "--topology",
        "berlin",
        "--policies",
        "random,nearest,greedy,milp,ppo",
        "--seeds",
        "1",
        "--requests",
        "150",
        "--warmup",
        "150",
        "--functions",
        "20",
        "--rate",
        "100",
        "--csv",
        csv.to_str().unwrap(),
        "--plot",
        png.to_str().unwrap(),
    ]);
    run_simulate(w.args).unwrap();
    let text = std::fs::read_to_string(&csv).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 6, "{text}");
    assert!(lines[0].starts_with("policy,requests,mean_ms"));
    assert!(lines.iter().any(|l| l.starts_with("milp,150,")));
    assert!(std::fs::metadata(&png).unwrap().len() > 1000);
}

#[test]
fn held_out_evaluation_writes_per_seed_rows_with_the_bound_below_each_policy() {
    let dir = tempfile::tempdir().unwrap();
    let per_seed = dir.path().join("seeds.csv");
    let w = Wrap::parse_from([
        "simulate",
        "--topology",
        "berlin",
        "--policies",
        "greedy,milp:50,ppo",
        "--held-out",
        "2",
        "--requests",
        "150",
        "--warmup",
        "150",
        "--functions",
        "20",
        "--rate",
        "100",
        "--per-seed-csv",
        per_seed.to_str().unwrap(),
        "--csv",
        dir.path().join("s.csv").to_str().unwrap(),
        "--plot",
        dir.path().join("s.png").to_str().unwrap(),
    ]);
    run_simulate(w.args).unwrap();
    let text = std::fs::read_to_string(&per_seed).unwrap();
    let rows: Vec<Vec<&str>> = text
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    assert_eq!(rows.len(), 2 * 4, "{text}");
    for seed in ["7001", "7002"] {
        let of = |p: &str, col: usize| -> f64 {
            let r = rows.iter().find(|r| r[0] == seed && r[1] == p).unwrap();
            r[col].parse().unwrap()
        };
        for p in ["greedy", "milp:50", "ppo"] {
            assert!(of("bound", 2) <= of(p, 2), "mean of {p} on {seed}: {text}");
            assert!(of("bound", 3) <= of(p, 3), "P99 of {p} on {seed}: {text}");
        }
    }
}
