//! `geofaas dns`: run the geo DNS server alone.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use geofaas_config::Topology;

use crate::health::HealthTable;
use crate::server::{serve, DnsOptions, HealthMode, UdpEngine};

/// Flags of `geofaas dns`.
#[derive(Clone, Debug, clap::Args)]
pub struct DnsArgs {
    /// Topology file.
    #[arg(long, short = 'c', env = "GEOFAAS_CONFIG")]
    pub config: PathBuf,
    /// GeoIP database (GeoLite2/DB-IP City `.mmdb`) instead of the topology's `geoip.mmdb`.
    #[arg(long)]
    pub mmdb: Option<PathBuf>,
    /// UDP and TCP address to serve on instead of the topology's `dns.listen`.
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// PEM CA the gateway health probes trust instead of the topology's `tls.ca`.
    #[arg(long)]
    pub ca: Option<PathBuf>,
    /// Write the demo database (RFC 5737 ranges in Berlin, Potsdam, London) to this path and use it.
    #[arg(long, conflicts_with = "mmdb")]
    pub demo_mmdb: Option<PathBuf>,
    /// Do not probe the gateways: answer as if all were healthy (benchmarks, DNS-only demos).
    #[arg(long)]
    pub no_health_checks: bool,
    /// UDP engine: `batched` (recvmmsg/sendmmsg, default on Linux) or `hickory` (hickory-server's loop).
    #[arg(long, value_enum, default_value_t = UdpEngine::default())]
    pub udp_engine: UdpEngine,
    /// UDP sockets of the batched engine, each with its own thread, on the same port with
    /// `SO_REUSEPORT`. Default: the number of CPUs this process may run on.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    pub udp_sockets: Option<u16>,
}

/// Loads the topology and serves until Ctrl-C.
pub async fn run_cli(args: DnsArgs) -> anyhow::Result<()> {
    let topology = Topology::load(&args.config)?;
    let mut mmdb = args.mmdb;
    if let Some(path) = args.demo_mmdb {
        crate::demo::write_demo_mmdb(&path)?;
        mmdb = Some(path);
    }
    let opts = DnsOptions {
        mmdb,
        ca_pem: args.ca,
        listen: args.listen,
        health: if args.no_health_checks {
            HealthMode::Manual(HealthTable::new(
                topology.nodes.iter().map(|n| n.id.clone()),
            ))
        } else {
            HealthMode::Probe
        },
        udp: args.udp_engine,
        udp_sockets: args.udp_sockets.map(usize::from),
    };
    let shutdown = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    serve(&topology, opts, shutdown)
        .await
        .with_context(|| format!("geo DNS for {}", args.config.display()))
}
