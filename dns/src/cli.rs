//! `geofaas dns`: run the geo DNS server alone.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use geofaas_config::Topology;

use crate::health::HealthTable;
use crate::server::{DnsOptions, DnsServer, HealthMode, UdpEngine};

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

/// Loads the topology and serves until Ctrl-C or SIGTERM.
///
/// On SIGHUP the topology file is read again. A valid one replaces the running server: the
/// sockets are closed and bound again (a gap of milliseconds, which resolvers cover with their
/// retries) and the health probes start afresh. An invalid one is logged with its reason and
/// the running server keeps answering.
pub async fn run_cli(args: DnsArgs) -> anyhow::Result<()> {
    let mut mmdb = args.mmdb.clone();
    if let Some(path) = &args.demo_mmdb {
        crate::demo::write_demo_mmdb(path)?;
        mmdb = Some(path.clone());
    }
    let context = || format!("geo DNS for {}", args.config.display());
    let build = |mmdb: Option<PathBuf>| -> anyhow::Result<DnsServer> {
        let topology = Topology::load(&args.config)?;
        Ok(DnsServer::new(&topology, options(&args, mmdb, &topology))?)
    };
    let mut server = build(mmdb.clone()).with_context(context)?;
    let mut reloads = Signals::hangup();
    let stop = shutdown_signal();
    tokio::pin!(stop);
    loop {
        let (udp, tcp) = server.bind().await.with_context(context)?;
        let (end, ended) = tokio::sync::oneshot::channel::<()>();
        let mut running = tokio::spawn(server.run(udp, tcp, async move {
            let _ = ended.await;
        }));
        let next = loop {
            tokio::select! {
                () = &mut stop => {
                    let _ = end.send(());
                    return running.await?.with_context(context);
                }
                ended = &mut running => return ended?.with_context(context),
                () = reloads.next() => match build(mmdb.clone()) {
                    Ok(next) => break next,
                    Err(e) => tracing::error!(error = %format!("{e:#}"), "SIGHUP: topology refused; the running one stays"),
                },
            }
        };
        let _ = end.send(());
        running.await?.with_context(context)?;
        tracing::info!(file = %args.config.display(), "SIGHUP: topology reloaded");
        server = next;
    }
}

fn options(args: &DnsArgs, mmdb: Option<PathBuf>, topology: &Topology) -> DnsOptions {
    DnsOptions {
        mmdb,
        ca_pem: args.ca.clone(),
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
    }
}

/// SIGHUP deliveries (none where there are no Unix signals).
struct Signals(Option<tokio::signal::unix::Signal>);

impl Signals {
    fn hangup() -> Self {
        Self(tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok())
    }

    async fn next(&mut self) {
        match &mut self.0 {
            Some(s) => {
                if s.recv().await.is_none() {
                    std::future::pending::<()>().await;
                }
            }
            None => std::future::pending().await,
        }
    }
}

/// Resolves on Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        r = tokio::signal::ctrl_c() => if r.is_err() { std::future::pending::<()>().await },
        () = term => {},
    }
}
