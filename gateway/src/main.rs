//! The `geofaas` binary: parses flags, sets up logging, runs the command.

use clap::Parser;

// mimalloc: measured 13-14% fewer instructions and 5-6% less CPU per proxied call than the
// system allocator (bench/gateway/run.sh with BIN_BASE, docs/benchmarks.md).
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
    let cli = geofaas_gateway::cli::Cli::parse();
    match geofaas_gateway::cli::run(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", geofaas_gateway::cli::error_report(&e));
            std::process::ExitCode::FAILURE
        }
    }
}
