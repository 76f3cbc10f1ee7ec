//! `geofaas up`: the paper's Berlin topology on one machine — geo DNS plus a tu-berlin, a potsdam
//! and a cloud node, each on its own loopback address with the embedded runtime.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use anyhow::Context;
use geofaas_config::{GeoLocator, Role, Topology};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use rand::RngCore;
use tokio_util::sync::CancellationToken;

use crate::node::{NodeOptions, NodeState};
use crate::tls::TlsMaterial;
use crate::NodeHandle;

/// Arguments of `geofaas up`.
#[derive(Debug, clap::Args)]
pub struct UpArgs {
    /// Topology to run; every node of it is started on this machine.
    #[arg(long, short, default_value = "examples/berlin.toml")]
    pub config: PathBuf,
    /// Where the CA, certificate, key and demo GeoIP database are written.
    #[arg(long, default_value = ".geofaas")]
    pub state_dir: PathBuf,
    /// Do not start the geo DNS server.
    #[arg(long)]
    pub no_dns: bool,
}

/// Installs the process-wide Prometheus recorder once and returns its handle.
pub fn install_metrics() -> Option<PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| PrometheusBuilder::new().install_recorder().ok())
        .clone()
}

/// Runs every node of the topology and the DNS server until Ctrl-C.
pub async fn run(args: UpArgs) -> anyhow::Result<()> {
    let topology = Arc::new(Topology::load(&args.config)?);
    let map = topology.service_map()?;
    for w in map.warnings() {
        tracing::warn!("{w}");
    }
    let tls = TlsMaterial::generate(&certificate_hosts(&topology))?;
    tls.write_to(&args.state_dir)?;
    let ca_path = args.state_dir.join("ca.pem");
    let mmdb_path = args.state_dir.join("demo.mmdb");
    geofaas_dns::write_demo_mmdb(&mmdb_path).context("writing the demo GeoIP database")?;
    let locator: Arc<dyn GeoLocator> =
        Arc::new(crate::MmdbLocator(geofaas_dns::GeoDb::open(&mmdb_path)?));
    let mut secret = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut secret);
    let opts = NodeOptions {
        offload_secret: Some(secret.to_vec()),
        ca_pem: Some(tls.ca_pem.clone().into_bytes()),
        locator: Some(locator),
        metrics: install_metrics(),
    };
    let mut nodes = Vec::new();
    for node in &topology.nodes {
        let listener = tokio::net::TcpListener::bind(node.listen)
            .await
            .with_context(|| {
                format!(
                    "cannot listen on {} (node[{}].listen); is another `geofaas up` running?",
                    node.listen, node.id
                )
            })?;
        let backends = crate::build_backends(&topology, &node.id)?;
        let state = Arc::new(NodeState::new(
            topology.clone(),
            &node.id,
            backends,
            opts.clone(),
        )?);
        nodes.push(NodeHandle::spawn(state, listener, &tls)?);
    }
    let dns_stop = CancellationToken::new();
    let dns_task = if args.no_dns {
        None
    } else {
        let server = geofaas_dns::DnsServer::new(
            &topology,
            geofaas_dns::DnsOptions {
                mmdb: Some(mmdb_path.clone()),
                ca_pem: Some(ca_path.clone()),
                ..Default::default()
            },
        )?;
        let (udp, tcp) = server
            .bind()
            .await
            .with_context(|| format!("cannot bind the DNS server on {}", topology.dns.listen))?;
        let token = dns_stop.clone();
        Some(tokio::spawn(async move {
            server
                .run(udp, tcp, async move { token.cancelled().await })
                .await
        }))
    };
    print_banner(&topology, &args, dns_task.is_some());
    crate::cli::shutdown_signal().await;
    dns_stop.cancel();
    if let Some(task) = dns_task {
        task.await??;
    }
    for result in futures::future::join_all(nodes.into_iter().map(NodeHandle::shutdown)).await {
        result?;
    }
    Ok(())
}

/// Every host name and IP the gateways are reached at, for the certificate's SANs.
fn certificate_hosts(topology: &Topology) -> Vec<String> {
    let mut hosts = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
    for node in &topology.nodes {
        if let Some(h) = node.public_url.host_str() {
            hosts.push(h.trim_start_matches('[').trim_end_matches(']').to_owned());
        }
        if !node.listen.ip().is_unspecified() {
            hosts.push(node.listen.ip().to_string());
        }
        hosts.push(format!(
            "{}.{}",
            node.id,
            topology.zone.trim_end_matches('.')
        ));
    }
    hosts.push(format!("gw.{}", topology.zone.trim_end_matches('.')));
    hosts.sort();
    hosts.dedup();
    hosts
}

fn print_banner(topology: &Topology, args: &UpArgs, dns: bool) {
    let ca = args.state_dir.join("ca.pem");
    let ca = ca.display();
    println!(
        "\ngeofaas is up: {} nodes from {}",
        topology.nodes.len(),
        args.config.display()
    );
    println!("\n  {:<12} {:<6} {:<28} area", "node", "role", "url");
    for node in &topology.nodes {
        let area = match node.role {
            Role::Cloud => "the rest of the world".to_owned(),
            Role::Edge => format!("around {:.3},{:.3}", node.location.lat, node.location.lon),
        };
        let role = match node.role {
            Role::Edge => "edge",
            Role::Cloud => "cloud",
        };
        println!(
            "  {:<12} {:<6} {:<28} {area}",
            node.id,
            role,
            node.public_url.as_str()
        );
    }
    let first = topology
        .nodes
        .iter()
        .find(|n| n.role == Role::Edge)
        .unwrap_or(&topology.nodes[0]);
    let url = first.public_url.as_str().trim_end_matches('/');
    println!("\nTry:");
    println!("  curl --cacert {ca} -H 'X-Client-Location: 52.51,13.32' {url}/fn/sieve");
    println!("  curl --cacert {ca} -i -H 'X-Client-Location: 52.40,13.06' {url}/fn/sieve      # 307 to potsdam");
    println!(
        "  curl --cacert {ca} -L -H 'X-Client-Location: 52.40,13.06' -d 'hello' {url}/fn/echo"
    );
    println!("  curl --cacert {ca} -i -H 'X-Client-Location: 51.50,-0.12' {url}/fn/sieve      # 307 to the cloud");
    println!("  curl --cacert {ca} {url}/functions");
    if dns {
        let dns_addr = topology.dns.listen;
        let zone = topology.zone.trim_end_matches('.');
        println!(
            "  dig @{} -p {} gw.{zone} +subnet=192.0.2.1/24       # tu-berlin",
            dns_addr.ip(),
            dns_addr.port()
        );
        println!(
            "  dig @{} -p {} gw.{zone} +subnet=198.51.100.1/24    # potsdam",
            dns_addr.ip(),
            dns_addr.port()
        );
        println!(
            "  dig @{} -p {} gw.{zone} +subnet=203.0.113.1/24     # cloud",
            dns_addr.ip(),
            dns_addr.port()
        );
    }
    println!("\nCtrl-C stops everything.");
}
