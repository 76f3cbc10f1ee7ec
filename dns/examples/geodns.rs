//! The geo DNS server alone, as `geofaas dns` runs it; used by `bench/dns/run.sh`.
//!
//! `cargo run --release -p geofaas-dns --example geodns -- --config examples/berlin.toml --demo-mmdb /tmp/demo.mmdb`

use clap::Parser;

/// Flags: those of `geofaas dns`.
#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    dns: geofaas_dns::DnsArgs,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,geofaas_dns=info")),
        )
        .init();
    match geofaas_dns::run_cli(Cli::parse().dns).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
