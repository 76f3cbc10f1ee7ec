//! `geofaas dns`: run the geo DNS server alone.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use geofaas_config::Topology;

use crate::server::{DnsOptions, DnsServer, HealthMode, UdpEngine};
use geofaas_geo::HealthTable;

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
/// With `[registry]`, the nodes registered in etcd are answered too, and a change of them
/// applies like a SIGHUP (a node whose lease expires is no longer answered).
///
/// On SIGHUP the topology file is read again. A valid one replaces the running server: the
/// sockets are closed and bound again (a gap of milliseconds, which resolvers cover with their
/// retries) and the health probes start afresh. An invalid one is logged with its reason and
/// the running server keeps answering.
pub async fn run_cli(args: DnsArgs) -> anyhow::Result<()> {
    let mut mmdb = args.mmdb.clone();
    if let Some(path) = &args.demo_mmdb {
        geofaas_geo::write::write_demo_mmdb(path)?;
        mmdb = Some(path.clone());
    }
    let context = || format!("geo DNS for {}", args.config.display());
    // In a fleet, the registered nodes join the file's (the watch keeps them in memory).
    let first = Topology::load_apart(&args.config).with_context(context)?;
    let fleet = match &first.registry {
        Some(r) => Some(geofaas_fleet::Fleet::start(r).with_context(context)?),
        None => None,
    };
    let mut view = fleet.as_ref().map(|f| f.view());
    let build = |mut topology: Topology,
                 mmdb: Option<PathBuf>,
                 view: Option<&FleetWatch>|
     -> anyhow::Result<DnsServer> {
        if let Some(v) = view {
            let current = v.borrow().clone();
            let (merged, refusals) = geofaas_fleet::merge(&topology, None, &current);
            for r in refusals {
                tracing::warn!(node = %r.id, reason = %r.reason, "registered node not answered");
            }
            topology = merged;
        }
        Ok(DnsServer::new(&topology, options(&args, mmdb, &topology))?)
    };
    let mut server = build(first, mmdb.clone(), view.as_ref()).with_context(context)?;
    let rebuild = |mmdb: Option<PathBuf>, view: Option<&FleetWatch>| {
        build(Topology::load(&args.config)?, mmdb, view)
    };
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
                () = reloads.next() => match rebuild(mmdb.clone(), view.as_ref()) {
                    Ok(next) => break next,
                    Err(e) => tracing::error!(error = %format!("{e:#}"), "SIGHUP: topology refused; the running one stays"),
                },
                Some(()) = fleet_changed(view.as_mut()) => match rebuild(mmdb.clone(), view.as_ref()) {
                    Ok(next) => {
                        tracing::info!("fleet changed: answering for the registered nodes");
                        break next;
                    }
                    Err(e) => tracing::error!(error = %format!("{e:#}"), "fleet change refused; the running answers stay"),
                },
            }
        };
        let _ = end.send(());
        running.await?.with_context(context)?;
        tracing::info!(file = %args.config.display(), "SIGHUP: topology reloaded");
        server = next;
    }
}

type FleetWatch = tokio::sync::watch::Receiver<std::sync::Arc<geofaas_fleet::FleetView>>;

/// Resolves when the registered nodes change (never without a fleet).
async fn fleet_changed(view: Option<&mut FleetWatch>) -> Option<()> {
    match view {
        Some(v) => v.changed().await.ok(),
        None => std::future::pending().await,
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
