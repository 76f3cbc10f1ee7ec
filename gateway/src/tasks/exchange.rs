//! The exchange of load reports, run by every node until it stops ([`exchange`]): what
//! [`crate::loads`] keeps, brought in from the registry or sent to the nodes that use it.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use geofaas_config::headers::OFFLOAD;
use geofaas_fleet::{now_ms, LoadReport};

use crate::loads::{interval_ms, LOAD_PATH};
use crate::node::{Live, NodeState};

/// Runs until aborted: each interval, with a scheduler configured, reads the reports of the
/// nodes it places calls on from the registry into the board, or (without a registry) sends this node's report to the edges
/// that place calls on it. Each send is its own task, so a dead peer delays nothing.
pub async fn exchange(live: Arc<Live>) {
    loop {
        let state = live.current();
        let interval = Duration::from_millis(interval_ms(&state.place.topology));
        if state.place.topology.scheduler.policy != geofaas_config::SchedulerPolicy::None {
            match (state.fleet(), &state.scheduling.policy) {
                (Some(fleet), Some(policy)) => {
                    let watched = policy.watched();
                    let read = tokio::time::timeout(interval, fleet.loads_of(&watched));
                    for (_, report) in read.await.unwrap_or_default() {
                        state.scheduling.loads.put(report);
                    }
                }
                (Some(_), None) => {}
                (None, _) => send_reports(&state, interval),
            }
        }
        drop(state);
        tokio::time::sleep(interval).await;
    }
}

fn send_reports(state: &NodeState, interval: Duration) {
    let (Some(key), Some(client)) = (&state.links.key, state.peer_client()) else {
        return;
    };
    let report = LoadReport {
        node: state.place.id.clone(),
        at_ms: now_ms(),
        load: state.load(),
        cpu_percent: 0.0,
        memory_bytes: 0,
    };
    let Ok(body) = serde_json::to_vec(&report) else {
        return;
    };
    let body = Bytes::from(body);
    for node in state
        .links
        .report_to
        .iter()
        .filter_map(|id| state.place.map.node(id))
    {
        let Ok(url) = node.public_url.join(LOAD_PATH) else {
            continue;
        };
        let req = client
            .post(url)
            .timeout(interval)
            .header(OFFLOAD, key.sign(&state.place.id, "POST", LOAD_PATH))
            .header("content-type", "application/json")
            .body(body.clone());
        let to = node.id.clone();
        let rtt = state.scheduling.profiles.clone();
        tokio::spawn(async move {
            let sent = std::time::Instant::now();
            match req.send().await {
                Ok(r) if r.status().is_success() => rtt.probed(&to, sent.elapsed()),
                Ok(r) => tracing::debug!(to, status = %r.status(), "load report refused"),
                Err(e) => tracing::debug!(to, error = %e, "load report not delivered"),
            }
        });
    }
}
