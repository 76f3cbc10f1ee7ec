//! The other nodes' health as this gateway sees it: each one's `/readyz`, probed every
//! `dns.probe_interval_ms` (the probes the geo DNS runs), so that a handover never sends a
//! client to a node known to be dead. A node counts as dead after [`FAILURES_TO_DOWN`] failed
//! probes in a row (one lost probe, or a peer still starting, is not a death) and as alive
//! again after one good probe. What a dead node means for a handover is
//! [`crate::placement::route`]'s to decide.

use std::sync::Arc;
use std::time::Duration;

use geofaas_config::{NodeEntry, ServiceMap};
use geofaas_geo::HealthTable;
use tokio::task::JoinSet;

use crate::profiles::ProfileBook;

/// Failed probes in a row after which a peer counts as dead.
pub const FAILURES_TO_DOWN: u32 = 2;

/// Probed health of the other nodes.
#[derive(Debug)]
pub struct PeerHealth {
    table: HealthTable,
    _probes: JoinSet<()>,
}

impl PeerHealth {
    /// Probes every node of `map` but `me` with `client` (which trusts the platform CA); each
    /// answered probe's round trip goes into `rtt` ([`ProfileBook::probed`]).
    pub fn start(
        map: &ServiceMap,
        me: &str,
        client: reqwest::Client,
        interval: Duration,
        rtt: Arc<ProfileBook>,
    ) -> Arc<Self> {
        let peers: Vec<&NodeEntry> = map.nodes().iter().filter(|n| n.id != me).collect();
        let table = HealthTable::new(peers.iter().map(|n| n.id.clone()));
        let mut probes = JoinSet::new();
        for (i, node) in peers.iter().enumerate() {
            let Ok(readyz) = node.public_url.join("/readyz") else {
                continue;
            };
            let (client, table, id) = (client.clone(), table.clone(), node.id.clone());
            let rtt = rtt.clone();
            probes.spawn(async move {
                let mut failures = 0u32;
                let mut ticks = tokio::time::interval(interval);
                ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    ticks.tick().await;
                    let sent = std::time::Instant::now();
                    let probe = client
                        .get(readyz.clone())
                        .timeout(interval.mul_f64(0.75))
                        .send()
                        .await;
                    let answered = matches!(&probe, Ok(r) if r.status().is_success());
                    if answered {
                        rtt.probed(&id, sent.elapsed());
                    }
                    failures = if answered { 0 } else { failures + 1 };
                    let ok = answered || failures < FAILURES_TO_DOWN;
                    if table.set_index(i, ok) != ok {
                        if ok {
                            tracing::info!(node = %id, "peer ready again: handovers to it resume");
                        } else {
                            tracing::warn!(node = %id, "peer not ready: its clients go to the cloud");
                        }
                    }
                }
            });
        }
        Arc::new(Self {
            table,
            _probes: probes,
        })
    }

    /// Whether node `id` is up as far as the probes know (a node never probed counts as up).
    pub fn is_up(&self, id: &str) -> bool {
        self.table.is_healthy_id(id)
    }
}
