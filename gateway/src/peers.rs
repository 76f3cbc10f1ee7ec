//! The other nodes' health as this gateway sees it: each one's `/readyz`, probed every
//! `dns.probe_interval_ms` (the probes the geo DNS runs), so that a handover never sends a
//! client to a node known to be dead. A node counts as dead after [`FAILURES_TO_DOWN`] failed
//! probes in a row (one lost probe, or a peer still starting, is not a death) and as alive
//! again after one good probe. What a dead node means for a handover is
//! [`crate::placement::route`]'s to decide.
//!
//! A node's cost must not grow with its fleet, so it does not probe every other node: it
//! probes its neighbours ([`geofaas_config::ServiceMap::neighbours`]: the nearest edges and
//! those whose areas touch its own) and the cloud all the time, and any other node only while
//! it hands clients over to it: the first handover starts that node's probes, which stop
//! [`FAR_WATCH`] after the last one. A far node never probed counts as up, as every node does
//! before its first probe. With a registry, a far node counts as down while it is not
//! registered (a dead node's key goes when its lease expires), so its area goes to the cloud
//! even if nobody probed it; its neighbours' probes usually see the death sooner.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use geofaas_config::ServiceMap;
use geofaas_fleet::FleetView;
use tokio::sync::watch;
use url::Url;

use crate::profiles::ProfileBook;

/// Failed probes in a row after which a peer counts as dead.
pub const FAILURES_TO_DOWN: u32 = 2;
/// How long a far node is still probed after the last handover to it.
pub const FAR_WATCH: Duration = Duration::from_secs(60);

/// Probed health of the other nodes.
#[derive(Debug)]
pub struct PeerHealth {
    peers: HashMap<String, Arc<Peer>>,
    probe: Arc<Probe>,
    /// The registered nodes, with a registry.
    registry: Option<watch::Receiver<Arc<FleetView>>>,
}

/// What every prober shares.
#[derive(Debug)]
struct Probe {
    client: reqwest::Client,
    interval: Duration,
    rtt: Arc<ProfileBook>,
    started: Instant,
}

/// One other node.
#[derive(Debug)]
struct Peer {
    id: String,
    readyz: Url,
    /// A neighbour or the cloud: probed all the time.
    close: bool,
    up: AtomicBool,
    /// Whether a prober runs for it now.
    probing: AtomicBool,
    /// When a handover last asked about it, in ms since [`Probe::started`] (far nodes only).
    asked_ms: AtomicU64,
}

impl PeerHealth {
    /// Starts probing the `neighbours` nearest edges of `me` in `map` (and those whose areas
    /// touch its own) and the cloud with `client` (which trusts the platform CA); each
    /// answered probe's round trip goes into `rtt` ([`ProfileBook::probed`]). With a
    /// `registry`, far nodes not registered there count as down.
    pub fn start(
        map: &ServiceMap,
        me: &str,
        neighbours: usize,
        client: reqwest::Client,
        interval: Duration,
        rtt: Arc<ProfileBook>,
        registry: Option<watch::Receiver<Arc<FleetView>>>,
    ) -> Arc<Self> {
        let close: std::collections::HashSet<&str> = map
            .neighbours(me, neighbours)
            .into_iter()
            .chain(std::iter::once(map.cloud()))
            .map(|n| n.id.as_str())
            .collect();
        let peers: HashMap<String, Arc<Peer>> = map
            .nodes()
            .iter()
            .filter(|n| n.id != me)
            .filter_map(|n| {
                let readyz = n.public_url.join("/readyz").ok()?;
                let peer = Peer {
                    id: n.id.clone(),
                    readyz,
                    close: close.contains(n.id.as_str()),
                    up: AtomicBool::new(true),
                    probing: AtomicBool::new(false),
                    asked_ms: AtomicU64::new(0),
                };
                Some((n.id.clone(), Arc::new(peer)))
            })
            .collect();
        let probe = Arc::new(Probe {
            client,
            interval,
            rtt,
            started: Instant::now(),
        });
        for peer in peers.values().filter(|p| p.close) {
            peer.probing.store(true, Ordering::Relaxed);
            tokio::spawn(probe.clone().run(Arc::downgrade(peer)));
        }
        Arc::new(Self {
            peers,
            probe,
            registry,
        })
    }

    /// Whether node `id` is up as far as the probes know (a node never probed counts as up).
    /// Asking about a far node starts its probes, or keeps them going.
    pub fn is_up(&self, id: &str) -> bool {
        let Some(peer) = self.peers.get(id) else {
            return true;
        };
        if !peer.close {
            if let Some(registry) = &self.registry {
                let view = registry.borrow();
                if view.synced && !view.nodes.contains_key(id) {
                    return false;
                }
            }
            peer.asked_ms.store(self.probe.now_ms(), Ordering::Relaxed);
            if !peer.probing.swap(true, Ordering::AcqRel) {
                if let Ok(rt) = tokio::runtime::Handle::try_current() {
                    rt.spawn(self.probe.clone().run(Arc::downgrade(peer)));
                } else {
                    peer.probing.store(false, Ordering::Release);
                }
            }
        }
        peer.up.load(Ordering::Relaxed)
    }

    /// The nodes probed now, sorted: the neighbours, the cloud and the far nodes handed over
    /// to in the last [`FAR_WATCH`].
    pub fn probed(&self) -> Vec<&str> {
        let mut ids: Vec<&str> = self
            .peers
            .values()
            .filter(|p| p.probing.load(Ordering::Relaxed))
            .map(|p| p.id.as_str())
            .collect();
        ids.sort_unstable();
        ids
    }
}

impl Probe {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Probes `peer` every interval until it is dropped (the topology changed) or, for a far
    /// node, until nobody asked about it for [`FAR_WATCH`].
    async fn run(self: Arc<Self>, peer: Weak<Peer>) {
        let mut failures = 0u32;
        let mut ticks = tokio::time::interval(self.interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let Some(peer) = peer.upgrade() else {
                return;
            };
            if !peer.close && self.idle(&peer) {
                peer.probing.store(false, Ordering::Release);
                // A handover that asked between the look and the store saw a prober running:
                // keep going for it.
                if self.idle(&peer) || peer.probing.swap(true, Ordering::AcqRel) {
                    return;
                }
            }
            let sent = Instant::now();
            let probe = self
                .client
                .get(peer.readyz.clone())
                .timeout(self.interval.mul_f64(0.75))
                .send()
                .await;
            let answered = matches!(&probe, Ok(r) if r.status().is_success());
            if answered {
                self.rtt.probed(&peer.id, sent.elapsed());
            }
            failures = if answered { 0 } else { failures + 1 };
            let ok = answered || failures < FAILURES_TO_DOWN;
            if peer.up.swap(ok, Ordering::Relaxed) != ok {
                if ok {
                    tracing::info!(node = %peer.id, "peer ready again: handovers to it resume");
                } else {
                    tracing::warn!(node = %peer.id, "peer not ready: its clients go to the cloud");
                }
            }
        }
    }

    /// Whether nobody asked about far node `peer` for [`FAR_WATCH`].
    fn idle(&self, peer: &Peer) -> bool {
        let asked = peer.asked_ms.load(Ordering::Relaxed);
        self.now_ms().saturating_sub(asked) > FAR_WATCH.as_millis() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use geofaas_config::area::AreaConfig;
    use geofaas_config::{LatLon, NodeEntry, Role};

    /// `n` edges of 5 km on a grid 0.2° apart and a cloud, every one at `url`.
    fn grid(n: usize, url: &str) -> ServiceMap {
        let side = (n as f64).sqrt().ceil() as usize;
        let mut nodes: Vec<NodeEntry> = (0..n)
            .map(|i| {
                let center = LatLon {
                    lat: 45.0 + (i / side) as f64 * 0.2,
                    lon: 5.0 + (i % side) as f64 * 0.2,
                };
                NodeEntry {
                    id: format!("edge-{i}"),
                    role: Role::Edge,
                    location: center,
                    area: AreaConfig::Circle {
                        center,
                        radius_km: 5.0,
                    }
                    .build(std::path::Path::new("."))
                    .unwrap(),
                    public_url: url.parse().unwrap(),
                }
            })
            .collect();
        nodes.push(NodeEntry {
            id: "cloud".into(),
            role: Role::Cloud,
            location: LatLon {
                lat: 50.1,
                lon: 8.7,
            },
            area: geofaas_config::Area::World,
            public_url: url.parse().unwrap(),
        });
        ServiceMap::new(nodes, 50.0).unwrap()
    }

    /// A port nothing listens on: every probe is refused at once.
    fn closed_port() -> String {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        drop(l);
        url
    }

    /// In a 100-edge fleet an edge in the middle probes its 8 nearest edges and the cloud, not
    /// the other 91; a handover's question about a far node starts that node's probes, which
    /// find it dead within two intervals; the cloud probes its own nearest 8.
    #[tokio::test]
    async fn a_node_probes_its_neighbours_and_far_nodes_only_while_asked() {
        let map = grid(100, &closed_port());
        let interval = Duration::from_millis(50);
        let health = PeerHealth::start(
            &map,
            "edge-55",
            8,
            reqwest::Client::new(),
            interval,
            Arc::default(),
            None,
        );
        let mut want: Vec<&str> = map
            .neighbours("edge-55", 8)
            .iter()
            .map(|n| n.id.as_str())
            .chain(["cloud"])
            .collect();
        want.sort_unstable();
        assert_eq!(want.len(), 9, "{want:?}");
        assert_eq!(health.probed(), want);
        for id in [
            "edge-44", "edge-45", "edge-46", "edge-54", "edge-56", "edge-65",
        ] {
            assert!(want.contains(&id), "{id} is next to edge-55: {want:?}");
        }
        assert!(
            health.is_up("edge-0"),
            "a far node never probed counts as up"
        );
        assert!(health.probed().contains(&"edge-0"));
        let dead = geofaas_test_support::eventually::holds_within(Duration::from_secs(5), || {
            !health.is_up("edge-0")
        })
        .await;
        assert!(dead, "edge-0 refuses every probe");
        assert!(
            !health.is_up("edge-56"),
            "a neighbour's probes find it dead too"
        );
        assert!(health.is_up("nosuch"));

        let cloud = PeerHealth::start(
            &map,
            "cloud",
            8,
            reqwest::Client::new(),
            interval,
            Arc::default(),
            None,
        );
        assert_eq!(cloud.probed().len(), 8);
    }
}
