//! The geofaas gateway node and the `geofaas` command.
//!
//! A node serves `/fn/{name}` over HTTPS: it finds the client's location ([`routing`]), hands
//! clients in other nodes' areas over with a 307, runs the call on its backends and offloads to
//! the cloud when they fail or the node is full ([`invoke`], [`offload`]).
//!
//! Modules, in the order a call meets them: [`server`] and [`tls`] (HTTPS serving), [`routes`]
//! (the HTTP API) with [`headers`] (limits, what a function sees) and [`body`] (reading and
//! finishing request bodies), [`routing`] (serve here or hand over), [`invoke`] (the call
//! pipeline) with [`directory`] (who serves what), [`schedule`], [`offload`] and [`auth`]
//! (authenticated node-to-node calls), [`idempotency`] and [`activations`]; [`node`] (a node's
//! state), [`metrics`], [`up`] (the one-machine demo), [`cli`].

#![forbid(unsafe_code)]

pub mod access;
pub mod activations;
pub mod auth;
pub mod body;
pub mod bundle;
pub mod cli;
pub mod directory;
pub mod error;
pub mod headers;
pub mod idempotency;
pub mod invoke;
pub mod limits;
pub mod metrics;
pub mod node;
pub mod offload;
pub mod routes;
pub mod routing;
pub mod schedule;
pub mod server;
pub mod tls;
pub mod up;

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
    let node = topology
        .node(id)
        .with_context(|| format!("{}: no node with id {id:?}", topology.source))?;
    node.backends
        .iter()
        .enumerate()
        .map(|(i, cfg)| {
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
    /// The node's state (for tests and `up`).
    pub state: Arc<NodeState>,
    /// The address it listens on.
    pub addr: SocketAddr,
    stop: CancellationToken,
    task: JoinHandle<std::io::Result<()>>,
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
        let router = routes::router(state.clone());
        let token = stop.clone();
        let limits = server::ServeLimits::from_topology(&state.topology);
        let task = tokio::spawn(server::serve_tls(
            listener,
            router,
            config,
            limits,
            async move { token.cancelled().await },
        ));
        Ok(Self {
            state,
            addr,
            stop,
            task,
        })
    }

    /// Stops accepting, drains in-flight calls and waits for the server to end.
    pub async fn shutdown(self) -> anyhow::Result<()> {
        self.state.ready.store(false, Ordering::Relaxed);
        self.stop.cancel();
        self.task.await??;
        Ok(())
    }
}

/// Runs node `id` of `topology` on `listener` until `shutdown` resolves.
pub async fn run_node(
    topology: Arc<Topology>,
    id: &str,
    listener: TcpListener,
    tls: &TlsMaterial,
    opts: NodeOptions,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let backends = build_backends(&topology, id)?;
    let state = Arc::new(NodeState::new(topology, id, backends, opts)?);
    let handle = NodeHandle::spawn(state, listener, tls)?;
    shutdown.await;
    handle.shutdown().await
}

/// The mmdb of the DNS crate as the gateway's IP locator.
#[derive(Debug)]
pub struct MmdbLocator(pub geofaas_dns::GeoDb);

impl GeoLocator for MmdbLocator {
    fn locate(&self, ip: std::net::IpAddr) -> Option<LatLon> {
        self.0.locate(ip).ok().and_then(|(_, loc)| loc)
    }
}
