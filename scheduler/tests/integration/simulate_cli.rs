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
