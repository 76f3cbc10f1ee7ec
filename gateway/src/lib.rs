//! The geofaas node: the HTTPS gateway and its call path (the `geofaas` command is the `geofaas`
//! crate, `cli/`).
//!
//! A node serves `/fn/{name}` over HTTPS: it finds the client's location ([`routing`]), and
//! [`placement`] decides where the call goes: a 307 to the node responsible for the client, this
//! node's backends, a neighbouring edge or the cloud ([`invoke`] carries it out, [`offload`]).
//!
//! Modules, in the order a call meets them: [`server`] and [`tls`] (HTTPS serving), [`routes`]
//! (the HTTP API) with [`headers`] (limits, what a function sees) and [`body`] (reading and
//! finishing request bodies), [`routing`] (locations and areas), [`placement`] (every
//! routing decision, pure), [`invoke`] (the call pipeline) with [`directory`] (who serves what), [`schedule`], [`offload`] and [`auth`]
//! (authenticated node-to-node calls), [`idempotency`] and [`activations`]; [`node`] (a node's
//! state), [`metrics`], [`events`] and [`ui`] (the call stream and the operator's page).

#![forbid(unsafe_code)]

pub mod access;
pub mod activations;
pub mod admin;
pub mod auth;
pub mod body;
pub mod call;
pub mod cron;
pub mod deploy;
pub mod directory;
pub mod error;
pub mod events;
pub mod events_api;
pub mod fleet;
pub mod geo;
pub mod guard;
pub mod headers;
pub mod idempotency;
pub mod invoke;
pub mod limits;
pub mod loads;
pub mod logs;
pub mod metrics;
pub mod node;
pub mod offload;
pub mod peers;
pub mod pipeline;
pub mod placement;
pub mod prewarm;
pub mod profiles;
pub mod routes;
pub mod routing;
pub mod schedule;
pub mod server;
pub mod stream;
pub mod tasks;
pub mod tls;
pub mod triggers;
pub mod ui;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use anyhow::Context;
use geofaas_config::{GeoLocator, LatLon, Topology};
use geofaas_functions::FunctionBackend;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use node::{NodeOptions, NodeState};
pub use tls::TlsMaterial;

/// Builds the backends of node `id` as the topology lists them.
pub fn build_backends(
    topology: &Topology,
    id: &str,
) -> anyhow::Result<Vec<Arc<dyn FunctionBackend>>> {
    rebuild_backends(topology, id, None)
}

/// Like [`build_backends`], but a backend whose configuration (and functions) did not change
/// from `before` is kept as it is, warm instances included.
fn rebuild_backends(
    topology: &Topology,
    id: &str,
    before: Option<&NodeState>,
) -> anyhow::Result<Vec<Arc<dyn FunctionBackend>>> {
    let node = topology
        .node(id)
        .with_context(|| format!("{}: no node with id {id:?}", topology.source))?;
    let old = before.and_then(|b| {
        let same_base = b.place.topology.base_dir == topology.base_dir
            && b.place.topology.functions == topology.functions;
        same_base.then(|| (b.place.topology.node(id), b.directory.backends()))
    });
    node.backends
        .iter()
        .enumerate()
        .map(|(i, cfg)| {
            if let Some((Some(old_node), old_backends)) = &old {
                if old_node.backends.get(i) == Some(cfg) {
                    if let Some(b) = old_backends.get(i) {
                        return Ok(b.clone());
                    }
                }
            }
            geofaas_functions::build_backend(cfg, &topology.base_dir, &topology.functions)
                .with_context(|| {
                    format!(
                        "{}: node[{id}].backend[{i}] ({})",
                        topology.source,
                        cfg.kind()
                    )
                })
        })
        .collect()
}

/// A node running in the background.
#[derive(Debug)]
pub struct NodeHandle {
    /// The node's state when it started (for tests and `up`; [`NodeHandle::current`] after a
    /// reload).
    pub state: Arc<NodeState>,
    live: Arc<node::Live>,
    /// The address it listens on.
    pub addr: SocketAddr,
    stop: CancellationToken,
    task: JoinHandle<std::io::Result<()>>,
    /// Sends and collects load reports for the scheduler ([`tasks::exchange::exchange`]).
    exchange: JoinHandle<()>,
    /// Folds queued metric samples into the histograms ([`metrics_upkeep`]).
    upkeep: JoinHandle<()>,
    /// Runs the cron ticks this node claims ([`tasks::cron::run`]).
    cron: JoinHandle<()>,
    /// Runs calls from the fleet's queue ([`activations::queue::serve`]) and turns queue
    /// triggers' messages into calls ([`tasks::triggers::run`]), with a queue.
    queue: Option<(JoinHandle<()>, JoinHandle<()>)>,
}

impl NodeHandle {
    /// Starts serving `state` on `listener` with TLS.
    pub fn spawn(
        state: Arc<NodeState>,
        listener: TcpListener,
        tls: &TlsMaterial,
    ) -> anyhow::Result<Self> {
        let addr = listener.local_addr()?;
        let config = tls.server_config()?;
        let stop = CancellationToken::new();
        let live = node::Live::new(state.clone());
        // Calls accepted before a restart run again, now that the node serves.
        let weak = Arc::downgrade(&live);
        state.kept.activations.attach(move || {
            weak.upgrade()
                .map(|l| l.current() as Arc<dyn activations::Host>)
        });
        let api = routes::Api::new(live.clone());
        let token = stop.clone();
        let limits = server::ServeLimits::from_topology(&state.place.topology);
        let task = tokio::spawn(server::serve_tls(
            listener,
            api,
            config,
            limits,
            async move { token.cancelled().await },
        ));
        let exchange = tokio::spawn(tasks::exchange::exchange(live.clone()));
        let upkeep = tokio::spawn(metrics_upkeep(live.clone()));
        let cron = tokio::spawn(tasks::cron::run(live.clone()));
        let activations = state.kept.activations.clone();
        let queue = activations.queue().cloned().map(|q| {
            (
                tokio::spawn(activations::queue::serve(
                    activations,
                    q,
                    state.place.id.clone(),
                    state.place.role == geofaas_config::Role::Cloud,
                )),
                tokio::spawn(tasks::triggers::run(live.clone())),
            )
        });
        Ok(Self {
            state,
            live,
            addr,
            stop,
            task,
            exchange,
            upkeep,
            cron,
            queue,
        })
    }

    /// The state new calls use.
    pub fn current(&self) -> Arc<NodeState> {
        self.live.current()
    }

    /// The node's live load, for the fleet's load reports.
    pub(crate) fn live_source(&self) -> Arc<dyn geofaas_fleet::LoadSource> {
        self.live.clone()
    }

    /// Switches the node to `topology` without dropping a call: calls in flight finish on the
    /// state they started with; backends whose configuration did not change are kept warm.
    /// An invalid topology (or one without this node) is refused and the old one stays.
    pub fn reload(&self, topology: Arc<Topology>) -> anyhow::Result<()> {
        let before = self.live.current();
        let backends = rebuild_backends(&topology, &before.place.id, Some(&before))?;
        let next = before.reloaded(topology, backends)?;
        self.live.replace(Arc::new(next));
        Ok(())
    }

    /// A graceful stop: `/readyz` says "not ready" at once (so the geo DNS withdraws the
    /// node), calls are still answered for `grace`, then the node stops accepting and in-flight
    /// calls get `gateway.drain_timeout_ms` to finish.
    pub async fn drain(self, grace: std::time::Duration) -> anyhow::Result<()> {
        self.state.intake.ready.store(false, Ordering::Relaxed);
        self.live
            .current()
            .intake
            .ready
            .store(false, Ordering::Relaxed);
        tracing::info!(
            grace_ms = grace.as_millis() as u64,
            "draining: not ready, still answering"
        );
        tokio::time::sleep(grace).await;
        self.shutdown().await
    }

    /// Stops accepting, drains in-flight calls and waits for the server to end.
    pub async fn shutdown(self) -> anyhow::Result<()> {
        self.state.intake.ready.store(false, Ordering::Relaxed);
        self.exchange.abort();
        self.upkeep.abort();
        self.cron.abort();
        if let Some((calls, triggers)) = &self.queue {
            calls.abort();
            triggers.abort();
        }
        self.stop.cancel();
        self.task.await??;
        Ok(())
    }
}

/// Runs node `id` of `topology` on `listener` until `shutdown` resolves, then drains
/// ([`NodeHandle::drain`] with `gateway.drain_grace_ms`). Each topology `reloads` yields is
/// applied with [`NodeHandle::reload`]; one that fails is logged and the old one kept.
///
/// With a fleet ([`NodeOptions::fleet`]) the node registers itself, and every change of the
/// registered nodes is applied as a reload of the file's topology with them added
/// ([`geofaas_fleet::merge`]); a drain leaves the registry first.
pub async fn run_node(
    topology: Arc<Topology>,
    id: &str,
    listener: TcpListener,
    tls: &TlsMaterial,
    opts: NodeOptions,
    mut reloads: tokio::sync::mpsc::Receiver<anyhow::Result<Topology>>,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let fleet = opts.fleet.clone();
    let backends = build_backends(&topology, id)?;
    let state = Arc::new(NodeState::new(topology.clone(), id, backends, opts)?);
    for w in state.place.map.warnings() {
        tracing::warn!("{w}");
    }
    let handle = NodeHandle::spawn(state, listener, tls)?;
    let mut file = topology;
    let member = match &fleet {
        Some(f) => fleet::join(f, &handle, &file).await,
        None => None,
    };
    let mut view = fleet.as_ref().map(|f| f.view());
    // Deployed functions follow the registry's records (`tasks::deploys`).
    let deploys = match (&fleet, &handle.state.deploys) {
        (Some(f), Some(_)) => Some(tokio::spawn(tasks::deploys::follow(
            handle.live.clone(),
            f.clone(),
        ))),
        _ => None,
    };
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            Some(next) = reloads.recv() => {
                let applied = next.and_then(|t| {
                    let t = Arc::new(t);
                    handle.reload(fleet::merged(&t, id, view.as_ref()))?;
                    Ok(t)
                });
                match applied {
                    Ok(t) => { file = t; tracing::info!("topology reloaded") }
                    Err(e) => tracing::error!(error = %error::error_report(&e), "reload refused; keeping the running topology"),
                }
            }
            Some(()) = fleet::changed(view.as_mut()) => {
                let next = fleet::merged(&file, id, view.as_ref());
                if next.nodes != handle.current().place.topology.nodes {
                    match handle.reload(next) {
                        Ok(()) => tracing::info!(nodes = handle.current().place.topology.nodes.len(), "fleet changed: routing to the registered nodes"),
                        Err(e) => tracing::error!(error = %error::error_report(&e), "fleet change refused; keeping the running topology"),
                    }
                }
            }
        }
    }
    if let Some(task) = deploys {
        task.abort();
    }
    if let Some(m) = member {
        m.leave().await;
    }
    let grace =
        std::time::Duration::from_millis(handle.current().place.topology.gateway.drain_grace_ms);
    handle.drain(grace).await
}

/// The mmdb of the DNS crate as the gateway's IP locator.
#[derive(Debug)]
pub struct MmdbLocator(pub geofaas_geo::GeoDb);

impl GeoLocator for MmdbLocator {
    fn locate(&self, ip: std::net::IpAddr) -> Option<LatLon> {
        self.0.locate(ip).ok().and_then(|(_, loc)| loc)
    }
}

/// How often queued metric samples are folded into the histograms.
const UPKEEP_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

/// Runs until aborted: [`metrics::NodeMetrics::run_upkeep`] every few seconds, on the metrics of the
/// node's current state (a reload may replace them).
async fn metrics_upkeep(live: Arc<node::Live>) {
    loop {
        tokio::time::sleep(UPKEEP_INTERVAL).await;
        live.current().telemetry.metrics.run_upkeep();
    }
}
