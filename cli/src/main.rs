//! The `geofaas` command: the node (`geofaas node`), the geo DNS, the one-machine demo (`up`),
//! deploys, the fleet, and the scheduler's and the loadtest's commands.
//!
//! A thin crate over the libraries: [`cli`] parses the flags and runs the command, [`up`] runs
//! the demo (embedded in the binary by [`bundle`]), [`deploy_cli`] and [`fleet_cli`] are the
//! clients of the nodes' admin API and of the registry (`fleet_health` asks each node itself,
//! `logs_cli` merges every node's function output). Only this crate links the trainer
//! (dfdx) and the plots (plotters); a node is `geofaas_gateway`.

mod activations_cli;
mod bundle;
mod cli;
mod deploy_cli;
mod fleet_cli;
mod fleet_health;
mod logs_cli;
mod up;

use clap::Parser;

// mimalloc: measured 13-14% fewer instructions and 5-6% less CPU per proxied call than the
// system allocator (bench/gateway/run.sh with BIN_BASE, docs/lab/benchmarks-history.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    // On one core (e.g. pinned with `taskset`), a single-threaded scheduler: no work-stealing
    // machinery, no cross-thread wake-ups.
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let mut builder = if cores == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    match builder.enable_all().build() {
        Ok(runtime) => runtime.block_on(run()),
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,hickory_server=warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = cli::Cli::parse();
    match cli::run(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", geofaas_gateway::error::error_report(&e));
            std::process::ExitCode::FAILURE
        }
    }
}
