//! `geofaas up`: the paper's Berlin topology on one machine — geo DNS plus a tu-berlin, a potsdam
//! and a cloud node, each on its own loopback address with the embedded runtime.
//!
//! Without `--config` it runs the demo embedded in the binary ([`crate::bundle`]), written out
//! under the state dir, so it works from any folder. The commands it prints are made from the
//! topology that runs, and so is the demo GeoIP database the geo DNS answers from.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::Context;
use geofaas_config::{GeoLocator, LatLon, Role, Topology};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use rand::RngCore;
use tokio_util::sync::CancellationToken;

use geofaas_gateway::node::{NodeOptions, NodeState};
use geofaas_gateway::tls::TlsMaterial;
use geofaas_gateway::NodeHandle;

/// Arguments of `geofaas up`.
#[derive(Debug, clap::Args)]
pub struct UpArgs {
    /// Topology to run; every node of it is started on this machine. Default: the Berlin
    /// demo embedded in the binary (the repository's `examples/berlin.toml`).
    #[arg(long, short)]
    pub config: Option<PathBuf>,
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

/// Runs every node of the topology and the DNS server until Ctrl-C or SIGTERM, which drain
/// every node; SIGHUP reloads the topology file on every node and the DNS.
pub async fn run(args: UpArgs) -> anyhow::Result<()> {
    let config = match &args.config {
        Some(path) => path.clone(),
        None => crate::bundle::write(&args.state_dir.join("demo"))
            .context("writing the embedded demo topology and functions")?,
    };
    let topology = Arc::new(Topology::load_apart(&config)?);
    let map = topology.service_map()?;
    let places = demo_places(&topology);
    for w in map.warnings() {
        tracing::warn!("{w}");
    }
    let tls = TlsMaterial::generate(&certificate_hosts(&topology))?;
    tls.write_to(&args.state_dir)?;
    let ca_path = args.state_dir.join("ca.pem");
    let mmdb_path = args.state_dir.join("demo.mmdb");
    let entries: Vec<_> = places
        .iter()
        .map(|p| (p.node.as_str(), p.at.lat, p.at.lon))
        .collect();
    geofaas_dns::write_mmdb(
        &mmdb_path,
        &geofaas_geo::write::demo_entries_at(&entries),
        geofaas_dns::MmdbSchema::GeoIp2City,
    )
    .context("writing the demo GeoIP database")?;
    let locator: Arc<dyn GeoLocator> = Arc::new(geofaas_gateway::MmdbLocator(
        geofaas_dns::GeoDb::open(&mmdb_path)?,
    ));
    let mut secret = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut secret);
    if topology.queue.is_some() {
        tracing::warn!("[queue] is for fleets of `geofaas node`s: up keeps each node's accepted calls in its journal");
    }
    let opts = NodeOptions {
        offload_secret: Some(secret.to_vec()),
        ca_pem: Some(tls.ca_pem.clone().into_bytes()),
        locator: Some(locator),
        probe_peers: true,
        metrics: install_metrics(),
        fleet: None,
        state_dir: None,
        shared_dir: None,
        // `up` keeps each node's accepted calls in its journal; `[queue]` is for fleets of
        // `geofaas node`s.
        queue: None,
        observers: Vec::new(),
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
        let backends = geofaas_gateway::build_backends(&topology, &node.id)?;
        let opts = NodeOptions {
            state_dir: Some(node_state_dir(&args.state_dir, &node.id)),
            shared_dir: Some(args.state_dir.clone()),
            ..opts.clone()
        };
        let state = Arc::new(NodeState::new(topology.clone(), &node.id, backends, opts)?);
        nodes.push(NodeHandle::spawn(state, listener, &tls)?);
    }
    let dns_options = geofaas_dns::DnsOptions {
        mmdb: Some(mmdb_path.clone()),
        ca_pem: Some(ca_path.clone()),
        ..Default::default()
    };
    let mut dns = if args.no_dns {
        None
    } else {
        Some(Dns::start(&topology, &dns_options).await?)
    };
    let running = RunningDemo {
        ca: std::path::absolute(&ca_path)?,
        nodes: topology
            .nodes
            .iter()
            .map(|n| RunningNode {
                id: n.id.clone(),
                url: n.public_url.to_string(),
            })
            .collect(),
    };
    running.write(&args.state_dir)?;
    print_banner(&topology, &config, &args, &places, dns.is_some());
    // SIGHUP (a `kill -HUP`, or the terminal closed) reloads; SIGTERM and Ctrl-C drain.
    let mut reloads = crate::cli::reload_on_sighup(config.clone());
    let stop = crate::cli::shutdown_signal();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => break,
            Some(next) = reloads.recv() => {
                let applied = match next {
                    Ok(t) => reload(&nodes, &mut dns, &dns_options, Arc::new(t)).await,
                    Err(e) => Err(e),
                };
                match applied {
                    Ok(()) => tracing::info!(file = %config.display(), "SIGHUP: every node and the geo DNS reloaded"),
                    Err(e) => tracing::error!(error = %format!("{e:#}"), "SIGHUP: topology refused; the running one stays"),
                }
            }
        }
    }
    // `/readyz` says 503 on every node at once, calls are still answered for
    // `gateway.drain_grace_ms`, then in-flight calls get `drain_timeout_ms` to finish.
    let grace = nodes.first().map_or(Duration::ZERO, |n| {
        Duration::from_millis(n.current().place.topology.gateway.drain_grace_ms)
    });
    let drained = futures::future::join_all(nodes.into_iter().map(|n| n.drain(grace))).await;
    RunningDemo::clear(&args.state_dir);
    if let Some(dns) = dns {
        dns.stop().await?;
    }
    for result in drained {
        result?;
    }
    Ok(())
}

/// Applies a reloaded topology to every node `up` runs and restarts the geo DNS on it. `up`
/// runs the nodes it started with: a topology that adds, drops or moves one is refused whole.
async fn reload(
    nodes: &[NodeHandle],
    dns: &mut Option<Dns>,
    options: &geofaas_dns::DnsOptions,
    topology: Arc<Topology>,
) -> anyhow::Result<()> {
    topology.service_map()?;
    let running: Vec<_> = nodes
        .iter()
        .map(|n| {
            let state = n.current();
            let place = &state.place;
            place
                .topology
                .node(&place.id)
                .map(|c| (c.id.clone(), c.listen))
        })
        .collect();
    let wanted: Vec<_> = topology
        .nodes
        .iter()
        .map(|n| Some((n.id.clone(), n.listen)))
        .collect();
    if running != wanted {
        anyhow::bail!(
            "{}: up runs the nodes it started with ({}); restart it to add, remove or move a node",
            topology.source,
            running
                .iter()
                .flatten()
                .map(|(id, listen)| format!("{id} on {listen}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    for node in nodes {
        node.reload(topology.clone())
            .with_context(|| format!("node {}", node.current().place.id))?;
    }
    if let Some(running) = dns.take() {
        running.stop().await?;
        *dns = Some(Dns::start(&topology, options).await?);
    }
    Ok(())
}

/// The geo DNS of `up`, stopped and started again on a reload.
struct Dns {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), geofaas_dns::DnsError>>,
}

impl Dns {
    async fn start(topology: &Topology, options: &geofaas_dns::DnsOptions) -> anyhow::Result<Self> {
        let server = geofaas_dns::DnsServer::new(topology, options.clone())?;
        let (udp, tcp) = server
            .bind()
            .await
            .with_context(|| format!("cannot bind the DNS server on {}", topology.dns.listen))?;
        let stop = CancellationToken::new();
        let token = stop.clone();
        let task = tokio::spawn(async move {
            server
                .run(udp, tcp, async move { token.cancelled().await })
                .await
        });
        Ok(Self { stop, task })
    }

    async fn stop(self) -> anyhow::Result<()> {
        self.stop.cancel();
        self.task.await??;
        Ok(())
    }
}

/// The state folder of node `id` under a state dir (`<dir>/nodes/<id>`): its deployed functions.
pub fn node_state_dir(state_dir: &Path, id: &str) -> PathBuf {
    state_dir.join("nodes").join(id)
}

/// What `geofaas up` writes to `<state dir>/up.json` while it runs, so `geofaas deploy` and
/// `geofaas functions` find its nodes from the same folder without flags.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct RunningDemo {
    /// The CA that signed the gateways' certificate.
    pub ca: PathBuf,
    /// Every node and its URL.
    pub nodes: Vec<RunningNode>,
}

/// One node of a running demo.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct RunningNode {
    /// Node id.
    pub id: String,
    /// Its public URL.
    pub url: String,
}

impl RunningDemo {
    const FILE: &'static str = "up.json";

    /// Writes it under `state_dir`.
    pub fn write(&self, state_dir: &Path) -> anyhow::Result<()> {
        let path = state_dir.join(Self::FILE);
        std::fs::write(&path, serde_json::to_vec_pretty(self)?)
            .with_context(|| format!("writing {}", path.display()))
    }

    /// Reads it from `state_dir`: `None` when no `geofaas up` runs from there.
    pub fn read(state_dir: &Path) -> anyhow::Result<Option<Self>> {
        let path = state_dir.join(Self::FILE);
        match std::fs::read(&path) {
            Ok(bytes) => Ok(Some(serde_json::from_slice(&bytes).with_context(|| {
                format!("{} is not what `geofaas up` writes", path.display())
            })?)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
        }
    }

    /// Removes it (on stop).
    pub fn clear(state_dir: &Path) {
        let _ = std::fs::remove_file(state_dir.join(Self::FILE));
    }
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

/// A point the demo's commands use: a client there is served by `node`.
#[derive(Debug, Clone)]
struct Place {
    node: String,
    at: LatLon,
}

/// Up to three demo places: the first edge's centre, the second edge's centre, and a point
/// outside every edge area (the cloud's), each checked against the area lookup.
fn demo_places(topology: &Topology) -> Vec<Place> {
    let Ok(map) = topology.service_map() else {
        return Vec::new();
    };
    let mut places: Vec<Place> = map
        .nodes()
        .iter()
        .filter(|n| n.role == Role::Edge && map.responsible(n.location).id == n.id)
        .take(2)
        .map(|n| Place {
            node: n.id.clone(),
            at: n.location,
        })
        .collect();
    let cloud = map.cloud();
    let outside = [
        cloud.location,
        LatLon { lat: 0.0, lon: 0.0 },
        LatLon {
            lat: -45.0,
            lon: -150.0,
        },
    ]
    .into_iter()
    .find(|p| map.responsible(*p).id == cloud.id);
    if let Some(at) = outside {
        places.push(Place {
            node: cloud.id.clone(),
            at,
        });
    }
    places
}

fn print_banner(topology: &Topology, config: &Path, args: &UpArgs, places: &[Place], dns: bool) {
    let ca = args.state_dir.join("ca.pem");
    let ca = ca.display();
    println!(
        "\ngeofaas is up: {} nodes from {}",
        topology.nodes.len(),
        config.display()
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
    let Some(entry) = places.first().and_then(|p| topology.node(&p.node)) else {
        println!("\nCtrl-C stops everything.");
        return;
    };
    let url = entry.public_url.as_str().trim_end_matches('/');
    let function = topology
        .functions
        .first()
        .map_or("sieve", |f| f.name.as_str());
    let loc = |p: &Place| format!("{:.4},{:.4}", p.at.lat, p.at.lon);
    println!("\nTry:");
    for (i, p) in places.iter().enumerate() {
        let l = loc(p);
        if i == 0 {
            println!("  curl --cacert {ca} -H 'X-Client-Location: {l}' {url}/fn/{function}      # served by {}", p.node);
        } else {
            println!("  curl --cacert {ca} -i -H 'X-Client-Location: {l}' {url}/fn/{function}   # 307 to {}", p.node);
            if i == 1 && topology.function("echo").is_some() {
                println!("  curl --cacert {ca} -L -H 'X-Client-Location: {l}' -d 'hello' {url}/fn/echo   # the POST body follows it");
            }
        }
    }
    println!("  curl --cacert {ca} {url}/functions");
    println!("  geofaas deploy ./myfn      # from this folder: a function folder (fn.py, index.js or fn.sh) on every node");
    if dns {
        let dns_addr = topology.dns.listen;
        let zone = topology.zone.trim_end_matches('.');
        for (net, p) in ["192.0.2.1", "198.51.100.1", "203.0.113.1"]
            .iter()
            .zip(places)
        {
            println!(
                "  dig @{} -p {} gw.{zone} +subnet={net}/24   # {}",
                dns_addr.ip(),
                dns_addr.port(),
                p.node
            );
        }
    }
    println!(
        "\nCtrl-C stops everything; kill -HUP {} reloads {}.",
        std::process::id(),
        config.display()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demo_places_lie_in_the_areas_they_name() {
        let topology = Topology::parse(
            crate::bundle::TOPOLOGY,
            "berlin.toml",
            Path::new("examples"),
        )
        .unwrap();
        let places = demo_places(&topology);
        let map = topology.service_map().unwrap();
        let names: Vec<_> = places.iter().map(|p| p.node.as_str()).collect();
        assert_eq!(names, ["tu-berlin", "potsdam", "cloud"]);
        for p in &places {
            assert_eq!(map.responsible(p.at).id, p.node);
        }
    }
}
