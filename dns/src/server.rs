//! Binding and running the geo DNS server on hickory-server's [`Server`], UDP and TCP.
//!
//! [`DnsServer::new`] builds everything from a topology (fails fast on a bad database or CA file);
//! [`DnsServer::run`] serves already-bound sockets until a shutdown future resolves, so tests bind port 0
//! and `geofaas up` co-hosts the server with its gateways. [`serve`] does both for the configured address.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use geofaas_config::Topology;
use hickory_server::net::runtime::Time;
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::Server;
use tokio::net::{TcpListener, UdpSocket};
use url::Url;

use crate::error::DnsError;
use crate::handler::GeoHandler;
use crate::route::Router;
use geofaas_geo::health::{spawn_probers, HealthTable};
use geofaas_geo::GeoDb;

/// A TCP client that sends no complete query for this long is disconnected.
const TCP_IDLE_TIMEOUT: Duration = Duration::from_secs(10);
/// Responses queued per TCP connection.
const TCP_RESPONSE_BUFFER: usize = 32;

/// Where the server gets gateway health from.
#[derive(Clone, Debug, Default)]
pub enum HealthMode {
    /// Probe every node's `<public_url>/readyz` every `dns.probe_interval_ms`. Default.
    #[default]
    Probe,
    /// The caller owns this table and sets the flags; nothing is probed.
    Manual(HealthTable),
}

/// How UDP queries are read and answered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum UdpEngine {
    /// One thread per `SO_REUSEPORT` socket ([`DnsOptions::udp_sockets`]), each with `recvmmsg`/`sendmmsg`
    /// batches of up to 32 queries, the hot query on the fast path. Default on Linux.
    #[cfg_attr(target_os = "linux", default)]
    Batched,
    /// hickory-server's own UDP loop: one task and two syscalls per query. Default elsewhere.
    #[cfg_attr(not(target_os = "linux"), default)]
    Hickory,
}

/// Settings that override or add to the topology's `[dns]` section.
#[derive(Clone, Debug, Default)]
pub struct DnsOptions {
    /// GeoIP database to use instead of the topology's `geoip.mmdb`. Default: the topology's.
    pub mmdb: Option<PathBuf>,
    /// PEM CA bundle the health probes trust, instead of the topology's `tls.ca`. Default: the topology's.
    pub ca_pem: Option<PathBuf>,
    /// UDP and TCP address for [`serve`], instead of `dns.listen`. Default: the topology's.
    pub listen: Option<SocketAddr>,
    /// Health source. Default: probing.
    pub health: HealthMode,
    /// UDP engine. Default: [`UdpEngine::Batched`] on Linux.
    pub udp: UdpEngine,
    /// UDP sockets (and threads) of the batched engine, all on the listen address with
    /// `SO_REUSEPORT`. Default (`None`): one per CPU this process may run on.
    pub udp_sockets: Option<usize>,
}

/// A ready-to-run server.
#[derive(Debug)]
pub struct DnsServer {
    handler: GeoHandler,
    health: HealthTable,
    probe: Option<Probe>,
    listen: SocketAddr,
    udp: UdpEngine,
    udp_sockets: Option<usize>,
}

/// Lets hickory's [`Server`] (TCP) and the batched UDP loop share one handler.
struct SharedHandler(Arc<GeoHandler>);

#[async_trait::async_trait]
impl RequestHandler for SharedHandler {
    async fn handle_request<R: ResponseHandler, T: Time>(
        &self,
        request: &Request,
        response_handle: R,
    ) -> ResponseInfo {
        self.0
            .handle_request::<R, T>(request, response_handle)
            .await
    }
}

#[derive(Debug)]
struct Probe {
    urls: Vec<Url>,
    interval: Duration,
    ca: Option<PathBuf>,
}

impl DnsServer {
    /// Builds the server: validates the topology, opens the database, checks the CA file.
    pub fn new(topology: &Topology, opts: DnsOptions) -> Result<Self, DnsError> {
        let router = Router::new(topology)?;
        let mmdb = opts
            .mmdb
            .or_else(|| topology.geoip.as_ref().map(|g| topology.resolve(&g.mmdb)));
        let geo = match &mmdb {
            Some(path) => Some(GeoDb::open(path)?),
            None => {
                tracing::warn!("no GeoIP database configured: every client gets the cloud");
                None
            }
        };
        let listen = opts.listen.unwrap_or(topology.dns.listen);
        let ids = router.nodes().iter().map(|n| n.id.clone());
        let (health, probe) = match opts.health {
            HealthMode::Manual(table) => (table, None),
            HealthMode::Probe => {
                let ca = opts.ca_pem.or_else(|| {
                    topology
                        .tls
                        .as_ref()
                        .and_then(|t| t.ca.as_ref())
                        .map(|ca| topology.resolve(ca))
                });
                let interval = Duration::from_millis(topology.dns.probe_interval_ms.max(1));
                // Build the client once now so that a bad CA file fails at start, not in a task.
                geofaas_geo::health::probe_client(ca.as_deref(), interval)?;
                let urls = router
                    .nodes()
                    .iter()
                    .map(|n| n.public_url.clone())
                    .collect();
                (HealthTable::new(ids), Some(Probe { urls, interval, ca }))
            }
        };
        let handler = GeoHandler::new(
            &topology.zone,
            router,
            health.clone(),
            geo,
            topology.dns.ttl_s,
            Some(listen.ip()),
        )?;
        Ok(Self {
            handler,
            health,
            probe,
            listen,
            udp: opts.udp,
            udp_sockets: opts.udp_sockets,
        })
    }

    /// The health flags the server answers from (set them in [`HealthMode::Manual`]).
    pub fn health(&self) -> HealthTable {
        self.health.clone()
    }

    /// The configured listen address.
    pub fn listen_addr(&self) -> SocketAddr {
        self.listen
    }

    /// Binds UDP (with `SO_REUSEPORT` on Linux, so that [`DnsServer::run`] can add sockets on the same
    /// port) and TCP on the configured listen address.
    pub async fn bind(&self) -> Result<(UdpSocket, TcpListener), DnsError> {
        let io = |source| DnsError::Io {
            addr: self.listen.to_string(),
            source,
        };
        #[cfg(target_os = "linux")]
        let udp = crate::udp_batch::bind_reuseport(self.listen)
            .and_then(|s| {
                s.set_nonblocking(true)?;
                UdpSocket::from_std(s)
            })
            .map_err(io)?;
        #[cfg(not(target_os = "linux"))]
        let udp = UdpSocket::bind(self.listen).await.map_err(io)?;
        let tcp = TcpListener::bind(self.listen).await.map_err(io)?;
        Ok((udp, tcp))
    }

    /// Serves `udp` and `tcp` until `shutdown` resolves, probing gateways meanwhile (unless manual). With
    /// the batched engine, `udp` is joined by more sockets on its port when it was bound with
    /// `SO_REUSEPORT` (as [`DnsServer::bind`] does), up to [`DnsOptions::udp_sockets`].
    pub async fn run(
        self,
        udp: UdpSocket,
        tcp: TcpListener,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), DnsError> {
        let _probers = match &self.probe {
            Some(p) => Some(spawn_probers(
                p.urls.clone(),
                self.health.clone(),
                p.interval,
                p.ca.as_deref(),
            )?),
            None => None,
        };
        let local = udp.local_addr().map(|a| a.to_string()).unwrap_or_default();
        let handler = Arc::new(self.handler);
        let mut server = Server::new(SharedHandler(handler.clone()));
        #[cfg(target_os = "linux")]
        let io = |source| DnsError::Io {
            addr: local.clone(),
            source,
        };
        let _udp_threads: Option<UdpGuard> = match self.udp {
            #[cfg(target_os = "linux")]
            UdpEngine::Batched => {
                let first = udp.into_std().map_err(io)?;
                let count = self.udp_sockets.unwrap_or_else(cpus).max(1);
                let mut sockets = crate::udp_batch::join(&first, count - 1).map_err(io)?;
                sockets.insert(0, first);
                tracing::info!(sockets = sockets.len(), "batched UDP engine");
                Some(crate::udp_batch::spawn(sockets, handler.clone()).map_err(io)?)
            }
            _ => {
                server.register_socket(udp);
                None
            }
        };
        server.register_listener(tcp, TCP_IDLE_TIMEOUT, TCP_RESPONSE_BUFFER);
        tracing::info!(addr = %local, "geo DNS serving (UDP and TCP)");
        tokio::select! {
            result = server.block_until_done() => result.map_err(|e| DnsError::Server(e.to_string())),
            () = shutdown => server
                .shutdown_gracefully()
                .await
                .map_err(|e| DnsError::Server(e.to_string())),
        }
    }
}

/// Stops the batched engine's threads when dropped.
#[cfg(target_os = "linux")]
type UdpGuard = crate::udp_batch::UdpThreads;
#[cfg(not(target_os = "linux"))]
type UdpGuard = ();

/// CPUs this process may run on (its affinity mask), the default number of UDP sockets.
#[cfg(target_os = "linux")]
fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// Runs the geo DNS server for `topology` on its configured (or overridden) address until `shutdown`
/// resolves. This is what `geofaas up` and `geofaas dns` call.
pub async fn serve(
    topology: &Topology,
    opts: DnsOptions,
    shutdown: impl Future<Output = ()>,
) -> Result<(), DnsError> {
    let server = DnsServer::new(topology, opts)?;
    let (udp, tcp) = server.bind().await?;
    server.run(udp, tcp, shutdown).await
}
