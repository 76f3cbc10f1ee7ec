//! Stand-alone `train` / `simulate` until the `geofaas` binary wires them:
//! `cargo run --release -p geofaas-scheduler --features cbc --example scheduler_cli -- simulate --help`

use clap::{Parser, Subcommand};
use geofaas_scheduler::cli::{run_simulate, run_train, SimulateArgs, TrainArgs};

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Train a PPO policy.
    Train(TrainArgs),
    /// Compare policies on held-out workloads.
    Simulate(SimulateArgs),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().cmd {
        Cmd::Train(a) => run_train(a),
        Cmd::Simulate(a) => run_simulate(a),
    }
}
