//! One running node: its place in the topology, its backends, and its link to the other nodes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::http::HeaderValue;
use geofaas_config::{GeoLocator, Role, ServiceMap, Topology};
use geofaas_functions::{FunctionBackend, Health};
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::sync::Semaphore;

use crate::access::Access;
use crate::auth::OffloadKey;
use crate::directory::Directory;
use crate::limits::RateLimits;
use crate::metrics::NodeMetrics;
use crate::offload::NodeLink;
use crate::schedule::EdgeScheduler;

/// What a node needs besides the topology.
#[derive(Clone, Default)]
pub struct NodeOptions {
    /// Shared secret for offloaded calls; without it this node neither sends nor accepts offloads.
    pub offload_secret: Option<Vec<u8>>,
    /// PEM of the CA that signed the other gateways' certificates (node-to-node calls trust it).
    pub ca_pem: Option<Vec<u8>>,
    /// IP geolocation for clients that send no location header.
    pub locator: Option<Arc<dyn GeoLocator>>,
    /// Probe the other nodes' `/readyz` and never hand a client over to one that is down
    /// (`geofaas node` and `up` turn it on).
    pub probe_peers: bool,
    /// The process-wide Prometheus handle (series not of one node, such as the co-hosted geo
    /// DNS), rendered at `/metrics` after the node's own.
    pub metrics: Option<PrometheusHandle>,
    /// The fleet registry (`[registry]`): answers of keyed calls are shared through it, and
    /// [`crate::run_node`] registers the node and follows the other nodes.
    pub fleet: Option<Arc<geofaas_fleet::Fleet>>,
    /// The node's own state folder, where deployed functions are kept (`geofaas deploy`);
    /// without one the node takes no deploys.
    pub state_dir: Option<std::path::PathBuf>,
    /// A folder the nodes on this machine share (`up`'s and `geofaas node`'s `--state-dir`):
    /// where they claim cron ticks when there is no registry ([`crate::cron`]). Without one a
    /// node claims them in its own state folder.
    pub shared_dir: Option<std::path::PathBuf>,
    /// The fleet's queue (`[queue]`): accepted asynchronous calls go there, and the node runs
    /// calls from it ([`crate::activations::queue`]).
    pub queue: Option<Arc<crate::activations::queue::Queue>>,
    /// Observers of finished calls beside the node's own (tests' fakes).
    pub observers: Vec<Arc<dyn crate::call::Observer>>,
}

/// Who and where this node is: its place in the topology.
pub struct Place {
    /// This node's id.
    pub id: String,
    /// The id as an `X-Served-By` value.
    pub id_header: HeaderValue,
    /// Edge or cloud.
    pub role: Role,
    /// The whole topology (functions and settings).
    pub topology: Arc<Topology>,
    /// Area lookup for handovers.
    pub map: ServiceMap,
    /// IP geolocation, when configured.
    pub locator: Option<Arc<dyn GeoLocator>>,
    /// This node's `cores`: what its calls share (a warm call's measured time is divided by
    /// how many calls shared them, [`crate::profiles::alone_ms`]).
    pub cores: f64,
}

impl Place {
    fn new(topology: Arc<Topology>, id: &str, opts: &NodeOptions) -> anyhow::Result<Self> {
        let node = topology
            .node(id)
            .ok_or_else(|| anyhow::anyhow!("{}: no node with id {id:?}", topology.source))?;
        Ok(Self {
            id: id.to_owned(),
            id_header: HeaderValue::from_str(id)?,
            role: node.role,
            map: topology.service_map()?,
            locator: opts.locator.clone(),
            cores: node.cores(),
            topology,
        })
    }

    /// Deadline of one call.
    pub fn call_timeout(&self) -> Duration {
        Duration::from_millis(self.topology.gateway.call_timeout_ms)
    }
}

/// Who may call, and how many calls run at once: the node's front door.
pub struct Intake {
    /// Callers' API keys.
    pub access: Access,
    /// Rate limits per client address and per key.
    pub limits: RateLimits,
    /// Calls running here; an edge that cannot get a permit offloads instead of queueing.
    pub admission: Semaphore,
    /// Calls waiting for an admission permit (at a node that cannot offload).
    pub queued: std::sync::atomic::AtomicUsize,
    /// Cleared when the node starts shutting down, so `/readyz` tells DNS to stop sending clients.
    pub ready: Arc<AtomicBool>,
}

impl Intake {
    fn new(topology: &Topology, id: &str, before: Option<&Intake>) -> Self {
        let access = Access::new(&topology.auth);
        if access.is_open() && before.is_none_or(|b| !b.access.is_open()) {
            tracing::warn!(
                node = id,
                "no [[auth.key]] in the topology: this node serves every caller"
            );
        }
        Self {
            access,
            limits: RateLimits::new(&topology.limits),
            admission: Semaphore::new(topology.gateway.max_concurrent_calls.max(1)),
            queued: Default::default(),
            ready: before.map_or_else(|| Arc::new(AtomicBool::new(true)), |b| b.ready.clone()),
        }
    }

    /// Calls running here now.
    pub fn running(&self, topology: &Topology) -> usize {
        let max = topology.gateway.max_concurrent_calls.max(1);
        max.saturating_sub(self.admission.available_permits())
    }
}

/// The node's links to the other nodes, all signed with the offload secret (without one,
/// there are none).
pub struct Links {
    /// At an edge, the signed HTTPS link that sends calls to the other nodes: the cloud it
    /// offloads to and the neighbouring edges the scheduler places calls on.
    pub outbound: Option<NodeLink>,
    /// Verifies the signatures of calls and requests from other nodes.
    pub key: Option<OffloadKey>,
    /// The other nodes' health, when probed ([`NodeOptions::probe_peers`]).
    pub health: Option<Arc<crate::peers::PeerHealth>>,
    /// HTTPS client for node-to-node requests other than calls (load reports, versions,
    /// warm-ups).
    pub client: Option<reqwest::Client>,
    /// The edges this node's load reports go to without a registry: at an edge those that
    /// count it as a neighbour ([`geofaas_config::ServiceMap::watchers`]), at the cloud every
    /// edge (each one places calls on it).
    pub report_to: Vec<String>,
}

impl Links {
    fn new(
        place: &Place,
        opts: &NodeOptions,
        profiles: &Arc<crate::profiles::ProfileBook>,
        before: Option<&Links>,
    ) -> anyhow::Result<Self> {
        let key = opts.offload_secret.as_deref().map(OffloadKey::new);
        let outbound = match (place.role, &key) {
            (Role::Edge, Some(key)) => Some(NodeLink::new(
                place.map.cloud(),
                &place.id,
                key.clone(),
                opts.ca_pem.as_deref(),
            )?),
            _ => None,
        };
        let client = match (before, &key) {
            (Some(b), Some(_)) if b.client.is_some() => b.client.clone(),
            (_, Some(_)) => Some(https_client(opts)?),
            (_, None) => None,
        };
        let health = if opts.probe_peers && tokio::runtime::Handle::try_current().is_ok() {
            let interval = Duration::from_millis(place.topology.dns.probe_interval_ms.max(50));
            // The probes share the node-to-node client's connections, which a reload (in a
            // fleet: every node that joins or leaves) keeps: no new handshakes with each.
            let probes = match &client {
                Some(c) => c.clone(),
                None => https_client(opts)?,
            };
            Some(crate::peers::PeerHealth::start(
                &place.map,
                &place.id,
                place.topology.gateway.neighbours,
                probes,
                interval,
                profiles.clone(),
                opts.fleet.as_ref().map(|f| f.view()),
            ))
        } else {
            None
        };
        let report_to = match (&key, place.role) {
            (None, _) => Vec::new(),
            (Some(_), Role::Cloud) => place
                .map
                .nodes()
                .iter()
                .filter(|n| n.role == Role::Edge)
                .map(|n| n.id.clone())
                .collect(),
            (Some(_), Role::Edge) => place
                .map
                .watchers(&place.id, place.topology.gateway.neighbours)
                .into_iter()
                .map(|n| n.id.clone())
                .collect(),
        };
        Ok(Self {
            outbound,
            key,
            health,
            client,
            report_to,
        })
    }
}

/// An HTTPS client that trusts the fleet's CA.
fn https_client(opts: &NodeOptions) -> anyhow::Result<reqwest::Client> {
    let mut client = reqwest::Client::builder();
    if let Some(pem) = &opts.ca_pem {
        client = client.add_root_certificate(reqwest::Certificate::from_pem(pem)?);
    }
    Ok(client.build()?)
}

/// What placement decisions are made from, besides the directory: the policy, the other
/// nodes' load reports, what this node measured, and where tracked clients are heading.
pub struct Scheduling {
    /// The placement policy an edge that offloads asks before each call (`[scheduler]`).
    pub policy: Option<EdgeScheduler>,
    /// The other nodes' latest load reports (kept across reloads).
    pub loads: Arc<crate::loads::LoadBoard>,
    /// What this node measured of its calls and links (kept across reloads).
    pub profiles: Arc<crate::profiles::ProfileBook>,
    /// Clients tracked for pre-warming where they are heading (`[prewarm]`).
    pub prewarm: Arc<crate::prewarm::Prewarm>,
}

impl Scheduling {
    fn new(
        place: &Place,
        links: &Links,
        profiles: Arc<crate::profiles::ProfileBook>,
        before: Option<&Scheduling>,
    ) -> anyhow::Result<Self> {
        let loads = before.map(|b| b.loads.clone()).unwrap_or_default();
        let policy = match links.outbound {
            Some(_) => EdgeScheduler::from_topology(
                &place.topology,
                &place.map,
                &place.id,
                loads.clone(),
                profiles.clone(),
            )?,
            None => None,
        };
        Ok(Self {
            policy,
            loads,
            profiles,
            prewarm: crate::prewarm::Prewarm::carried(
                before.map(|b| &b.prewarm),
                &place.topology.prewarm,
            ),
        })
    }
}

/// What the node tells its operators: metrics and the call stream (both kept across reloads).
pub struct Telemetry {
    /// This node's metrics, served at `/metrics`.
    pub metrics: Arc<NodeMetrics>,
    /// The call stream's subscribers and recent latencies.
    pub events: Arc<crate::events::EventBus>,
    /// What sees every finished call: the metrics, the profiles, the call stream, and any
    /// the options add ([`NodeOptions::observers`]).
    pub observers: crate::call::Observers,
}

/// Answers kept after their call (both kept across reloads).
pub struct Kept {
    /// Answers of calls made with an `Idempotency-Key`.
    pub idempotency: Arc<crate::idempotency::IdempotencyCache>,
    /// Calls running in the background for `Prefer: respond-async` clients.
    pub activations: Arc<crate::activations::Activations>,
}

/// The shared state of one gateway node: its components, each built from what it depends on.
pub struct NodeState {
    /// Who and where this node is.
    pub place: Place,
    /// This node's backends and what every node serves.
    pub directory: Directory,
    /// Who may call, and how many at once.
    pub intake: Intake,
    /// The signed links to the other nodes.
    pub links: Links,
    /// The inputs of placement decisions besides the directory.
    pub scheduling: Scheduling,
    /// Metrics and the call stream.
    pub telemetry: Telemetry,
    /// Answers kept after their call.
    pub kept: Kept,
    /// Deployed functions, with a state folder ([`NodeOptions::state_dir`]).
    pub deploys: Option<Arc<crate::deploy::Deployer>>,
    /// What the node was started with, for reloads.
    opts: NodeOptions,
}

impl std::fmt::Debug for NodeState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeState")
            .field("id", &self.place.id)
            .field("role", &self.place.role)
            .finish_non_exhaustive()
    }
}

impl NodeState {
    /// Builds the state of node `id` with already-built backends.
    pub fn new(
        topology: Arc<Topology>,
        id: &str,
        backends: Vec<Arc<dyn FunctionBackend>>,
        opts: NodeOptions,
    ) -> anyhow::Result<Self> {
        Self::build(topology, id, backends, opts, None)
    }

    /// The state of this node under a new topology (a reload): readiness, metrics, kept
    /// idempotent answers and activations carry over; everything else is built anew.
    pub fn reloaded(
        &self,
        topology: Arc<Topology>,
        backends: Vec<Arc<dyn FunctionBackend>>,
    ) -> anyhow::Result<Self> {
        Self::build(
            topology,
            &self.place.id,
            backends,
            self.opts.clone(),
            Some(self),
        )
    }

    fn build(
        topology: Arc<Topology>,
        id: &str,
        backends: Vec<Arc<dyn FunctionBackend>>,
        opts: NodeOptions,
        before: Option<&NodeState>,
    ) -> anyhow::Result<Self> {
        let place = Place::new(topology, id, &opts)?;
        let profiles = before
            .map(|b| b.scheduling.profiles.clone())
            .unwrap_or_default();
        let links = Links::new(&place, &opts, &profiles, before.map(|b| &b.links))?;
        let scheduling = Scheduling::new(&place, &links, profiles, before.map(|b| &b.scheduling))?;
        let deploys = match (before, &opts.state_dir) {
            (Some(b), _) if b.deploys.is_some() => b.deploys.clone(),
            (_, Some(dir)) => Some(Arc::new(
                crate::deploy::Deployer::open(dir, place.topology.deploy.clone()).map_err(|e| {
                    anyhow::anyhow!("cannot open the state folder {}: {e}", dir.display())
                })?,
            )),
            _ => None,
        };
        if let Some(d) = &deploys {
            for local in backends.iter().filter_map(|b| b.local()) {
                d.restore(local);
            }
        }
        let directory = Directory::new(
            &place.topology,
            id,
            backends,
            links.outbound.clone(),
            opts.fleet.as_ref().map(|f| f.view()),
        );
        let (metrics, events) = match before {
            Some(b) => (b.telemetry.metrics.clone(), b.telemetry.events.clone()),
            None => (
                Arc::new(NodeMetrics::new(id, opts.metrics.clone())),
                Arc::default(),
            ),
        };
        let mut observers = crate::call::Observers::new(vec![
            metrics.clone(),
            Arc::new(crate::profiles::Learner::new(
                scheduling.profiles.clone(),
                metrics.clone(),
                id,
                place.cores,
            )),
            Arc::new(crate::events::CallStream::new(
                events.clone(),
                metrics.clone(),
                id,
            )),
        ]);
        for o in &opts.observers {
            observers.push(o.clone());
        }
        let telemetry = Telemetry {
            metrics,
            events,
            observers,
        };
        let kept = match before {
            Some(b) => Kept {
                idempotency: b.kept.idempotency.clone(),
                activations: b.kept.activations.clone(),
            },
            None => Kept {
                idempotency: match &opts.fleet {
                    Some(f) => Arc::new(crate::idempotency::IdempotencyCache::shared(
                        f.calls().clone(),
                    )),
                    None => Arc::default(),
                },
                activations: match &opts.state_dir {
                    Some(dir) => {
                        let dir = dir.join("activations");
                        Arc::new(crate::activations::Activations::open(&dir).map_err(|e| {
                            anyhow::anyhow!(
                                "cannot open the activation journal {}: {e}",
                                dir.display()
                            )
                        })?)
                    }
                    None => Arc::default(),
                },
            },
        };
        if let Some(q) = &opts.queue {
            kept.activations.use_queue(q.clone());
        }
        Ok(Self {
            intake: Intake::new(&place.topology, id, before.map(|b| &b.intake)),
            place,
            directory,
            links,
            scheduling,
            telemetry,
            kept,
            deploys,
            opts,
        })
    }

    /// The fleet registry, when `[registry]` is configured.
    pub fn fleet(&self) -> Option<&Arc<geofaas_fleet::Fleet>> {
        self.opts.fleet.as_ref()
    }

    /// Where this node claims cron ticks without a registry: the shared folder, else its own.
    pub fn claims_dir(&self) -> Option<std::path::PathBuf> {
        let dir = self
            .opts
            .shared_dir
            .as_ref()
            .or(self.opts.state_dir.as_ref())?;
        Some(dir.join("cron"))
    }

    /// The client for node-to-node requests (with an offload secret only).
    pub fn peer_client(&self) -> Option<&reqwest::Client> {
        self.links.client.as_ref()
    }

    /// Deadline of one call.
    pub fn call_timeout(&self) -> Duration {
        self.place.call_timeout()
    }

    /// Its queue, calls in flight and warm instances per function, for the fleet's load reports:
    /// of the configured functions and of every other one called here (deployed or generated:
    /// without its instances in the report, another edge took this node for one with none, and
    /// predicted a new instance for every call it sent here).
    pub fn load(&self) -> geofaas_fleet::NodeLoad {
        let mut names: std::collections::BTreeSet<String> = self.scheduling.profiles.names();
        names.extend(self.place.topology.functions.iter().map(|f| f.name.clone()));
        let mut functions = std::collections::BTreeMap::new();
        for name in names {
            for b in self.directory.backends() {
                if let Some(s) = b.stats(&name) {
                    let e: &mut geofaas_fleet::FunctionLoad =
                        functions.entry(name.clone()).or_default();
                    e.idle += s.idle;
                    e.busy += s.busy;
                }
            }
        }
        let (profiles, links) = self.scheduling.profiles.report();
        geofaas_fleet::NodeLoad {
            queued: self.intake.queued.load(Ordering::Relaxed),
            running: self.intake.running(&self.place.topology),
            functions,
            profiles,
            links,
            calls_per_core: self.scheduling.profiles.calls_per_core(self.place.cores),
        }
    }

    /// Whether the node takes calls: not shutting down and at least one backend healthy.
    pub async fn is_ready(&self) -> bool {
        if !self.intake.ready.load(Ordering::Relaxed) {
            return false;
        }
        for b in self.directory.backends() {
            if b.health().await == Health::Healthy {
                return true;
            }
        }
        false
    }
}

/// A node's current state, swapped whole when the topology is reloaded; a call keeps the state
/// it started with until it is answered, so a reload drops nothing.
pub struct Live(arc_swap::ArcSwap<NodeState>);

impl std::fmt::Debug for Live {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Live")
            .field(&self.current().place.id)
            .finish()
    }
}

impl geofaas_fleet::LoadSource for Live {
    fn load(&self) -> geofaas_fleet::NodeLoad {
        self.current().load()
    }
}

impl Live {
    /// Starts with `state`.
    pub fn new(state: Arc<NodeState>) -> Arc<Self> {
        Arc::new(Self(arc_swap::ArcSwap::new(state)))
    }

    /// The state new calls use.
    pub fn current(&self) -> Arc<NodeState> {
        self.0.load_full()
    }

    /// Makes `state` the one new calls use.
    pub fn replace(&self, state: Arc<NodeState>) {
        self.0.store(state);
    }
}
