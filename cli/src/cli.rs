//! Command-line interface of the `geofaas` binary.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};
use geofaas_config::Topology;

use geofaas_gateway::node::NodeOptions;
use geofaas_gateway::tls::TlsMaterial;

/// geofaas: a geo-aware edge-to-cloud Function-as-a-Service platform.
#[derive(Debug, Parser)]
#[command(name = "geofaas", version, about = "geofaas: a geo-aware edge-to-cloud Function-as-a-Service platform", long_about = None)]
pub struct Cli {
    /// What to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the whole Berlin demo on this machine: geo DNS plus a tu-berlin, a potsdam and a cloud node.
    Up(crate::up::UpArgs),
    /// Run one node of a topology (for real multi-machine deployments).
    Node(NodeArgs),
    /// Run the geo DNS server of a topology alone.
    Dns(geofaas_dns::DnsArgs),
    /// Train the PPO scheduling policy in the simulator.
    Train(geofaas_scheduler::cli::TrainArgs),
    /// Compare scheduling policies on the same simulated workloads.
    Simulate(geofaas_scheduler::cli::SimulateArgs),
    /// Inspect a fleet's etcd registry.
    Fleet(crate::fleet_cli::FleetArgs),
    /// Reproduce the paper's experiments (mobility, highload, outage) against a topology.
    Loadtest(geofaas_loadtest::cli::LoadtestArgs),
    /// Deploy a function folder (tinyFaaS format) to every node, as a new version.
    Deploy(crate::deploy_cli::DeployArgs),
    /// Switch a function back to an earlier version on every node.
    Rollback(crate::deploy_cli::RollbackArgs),
    /// List or remove deployed functions.
    #[command(subcommand)]
    Functions(crate::deploy_cli::FunctionsCommand),
    /// What functions wrote to stdout and stderr, from every node, in time order.
    Logs(crate::logs_cli::LogsArgs),
    /// Asynchronous calls (`Prefer: respond-async`): list them, show one, retry a dead letter.
    #[command(subcommand)]
    Activations(crate::activations_cli::ActivationsCommand),
}

/// Arguments of `geofaas node`.
#[derive(Debug, clap::Args)]
pub struct NodeArgs {
    /// Topology file (TOML).
    #[arg(long, short)]
    pub config: PathBuf,
    /// Id of the node to run, as in the topology.
    #[arg(long, short)]
    pub node: String,
    /// Folder of the node's own state: deployed functions are kept under
    /// `STATE_DIR/nodes/NODE` and survive a restart.
    #[arg(long, default_value = ".geofaas")]
    pub state_dir: PathBuf,
}

/// Runs the parsed command.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Up(args) => crate::up::run(args).await,
        Command::Node(args) => run_node(args).await,
        Command::Dns(args) => geofaas_dns::run_cli(args).await,
        // Training and simulation are CPU-bound and synchronous: keep them off the async workers.
        Command::Train(args) => {
            tokio::task::spawn_blocking(move || geofaas_scheduler::cli::run_train(args)).await?
        }
        Command::Simulate(args) => {
            tokio::task::spawn_blocking(move || geofaas_scheduler::cli::run_simulate(args)).await?
        }
        Command::Loadtest(args) => geofaas_loadtest::cli::run(args).await,
        Command::Fleet(args) => crate::fleet_cli::run(args).await,
        Command::Deploy(args) => crate::deploy_cli::deploy(args).await,
        Command::Activations(cmd) => crate::activations_cli::run(cmd).await,
        Command::Rollback(args) => crate::deploy_cli::rollback(args).await,
        Command::Functions(cmd) => crate::deploy_cli::functions(cmd).await,
        Command::Logs(args) => crate::logs_cli::run(args).await,
    }
}

async fn run_node(args: NodeArgs) -> anyhow::Result<()> {
    let topology = Arc::new(Topology::load_apart(&args.config)?);
    let node = topology.node(&args.node).with_context(|| {
        format!(
            "{}: no node {:?}; nodes are {:?}",
            topology.source,
            args.node,
            topology.nodes.iter().map(|n| &n.id).collect::<Vec<_>>()
        )
    })?;
    let tls_cfg = topology.tls.as_ref().with_context(|| {
        format!(
            "{}: [tls] cert and key are required to run a node",
            topology.source
        )
    })?;
    let tls = TlsMaterial::load(
        &topology.resolve(&tls_cfg.cert),
        &topology.resolve(&tls_cfg.key),
        tls_cfg.ca.as_ref().map(|p| topology.resolve(p)).as_deref(),
    )?;
    let env = &topology.security.offload_secret_env;
    let secret = std::env::var(env).ok().filter(|s| !s.is_empty());
    if secret.is_none() {
        tracing::warn!("{env} is not set: this node will neither offload to nor accept offloads from other nodes");
    }
    let locator = match &topology.geoip {
        Some(g) => {
            let db = geofaas_dns::GeoDb::open(&topology.resolve(&g.mmdb))?;
            Some(Arc::new(geofaas_gateway::MmdbLocator(db)) as Arc<dyn geofaas_config::GeoLocator>)
        }
        None => None,
    };
    let fleet = match &topology.registry {
        Some(r) => Some(
            geofaas_fleet::Fleet::start(r)
                .with_context(|| format!("{}: [registry]", topology.source))?,
        ),
        None => None,
    };
    let queue = match &topology.queue {
        Some(q) => Some(
            geofaas_gateway::activations::queue::Queue::connect(q, &topology.activations, &node.id)
                .await
                .with_context(|| format!("{}: [queue]", topology.source))?,
        ),
        None => None,
    };
    let opts = NodeOptions {
        offload_secret: secret.map(String::into_bytes),
        ca_pem: Some(tls.ca_pem.clone().into_bytes()),
        locator,
        probe_peers: true,
        metrics: crate::up::install_metrics(),
        fleet,
        state_dir: Some(crate::up::node_state_dir(&args.state_dir, &node.id)),
        shared_dir: Some(args.state_dir.clone()),
        queue,
        observers: Vec::new(),
    };
    let listener = tokio::net::TcpListener::bind(node.listen)
        .await
        .with_context(|| {
            format!(
                "cannot listen on {} (node[{}].listen)",
                node.listen, node.id
            )
        })?;
    tracing::info!(node = %node.id, listen = %node.listen, url = %node.public_url, "node up");
    geofaas_gateway::run_node(
        topology.clone(),
        &args.node,
        listener,
        &tls,
        opts,
        reload_on_sighup(args.config.clone()),
        shutdown_signal(),
    )
    .await
}

/// On every SIGHUP, the topology file read and validated again (what `run_node` applies).
pub(crate) fn reload_on_sighup(
    path: PathBuf,
) -> tokio::sync::mpsc::Receiver<anyhow::Result<Topology>> {
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    #[cfg(unix)]
    tokio::spawn(async move {
        let Ok(mut hup) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        else {
            tracing::warn!("cannot listen for SIGHUP: reloads are off");
            return;
        };
        while hup.recv().await.is_some() {
            tracing::info!(file = %path.display(), "SIGHUP: reloading the topology");
            let next = Topology::load(&path).map_err(anyhow::Error::from);
            if tx.send(next).await.is_err() {
                return;
            }
        }
    });
    #[cfg(not(unix))]
    drop((path, tx));
    rx
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    tracing::info!("shutting down");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_cause_is_printed_once() {
        let err = Topology::load_apart("/nonexistent/berlin.toml").unwrap_err();
        let err = anyhow::Error::new(err).context("starting the demo");
        let report = geofaas_gateway::error::error_report(&err);
        assert_eq!(
            report.matches("No such file or directory").count(),
            1,
            "{report}"
        );
        assert!(report.starts_with("starting the demo: /nonexistent/berlin.toml: cannot read"));
    }
}
