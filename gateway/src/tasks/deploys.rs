//! Deploys across a fleet (`[registry] etcd`): every node converges on the desired version of
//! each function that etcd records.
//!
//! A node that takes a deploy, rollback or removal through its admin API writes the function's
//! record (`crate::admin::deploy`; `geofaas_fleet::DesiredFunction`: live version, rollout,
//! the nodes that hold the bundles). Every node follows the records ([`follow`], here): for a
//! function whose record differs from what it serves, it fetches each version it lacks by id
//! from a node the record names (`GET /node/functions/{name}/versions/{id}`, signed with the
//! offload secret; `routes::node` answers it), checks that the bundle hashes to that id, and
//! switches to it with the same guarantees as a deploy. A node that was down during a deploy
//! reads the records when it comes back and catches up the same way. Bundles and secrets never
//! travel through etcd.

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use geofaas_config::headers::OFFLOAD;
use geofaas_fleet::{DesiredFunction, DesiredFunctions, Fleet};

use crate::deploy::store::VersionEnv;
use crate::deploy::sync::version_path;
use crate::deploy::wire::{entries, schedules, triggers, ENV_HEADER, SECRET_HEADER};
use crate::deploy::Deployer;
use crate::error::ApiError;
use crate::node::{Live, NodeState};

/// How soon a node tries again after a fetch or switch failed.
const RETRY: Duration = Duration::from_secs(1);

/// Follows the fleet's records and converges this node on them, until the task is dropped.
pub async fn follow(live: Arc<Live>, fleet: Arc<Fleet>) {
    let mut view = fleet.view();
    while !view.borrow_and_update().synced {
        if view.changed().await.is_err() {
            return;
        }
    }
    let mut desired_rx = fleet.functions();
    let mut before: Option<Arc<DesiredFunctions>> = None;
    loop {
        let desired = desired_rx.borrow_and_update().clone();
        tracing::debug!(functions = desired.len(), "the fleet's function records");
        let gone: Vec<String> = before
            .iter()
            .flat_map(|b| b.keys())
            .filter(|name| !desired.contains_key(*name))
            .cloned()
            .collect();
        let done = converge(&live.current(), &desired, &gone).await;
        before = Some(desired);
        if done {
            if desired_rx.changed().await.is_err() {
                return;
            }
        } else {
            tokio::select! {
                changed = desired_rx.changed() => if changed.is_err() { return },
                () = tokio::time::sleep(RETRY) => {}
            }
        }
    }
}

/// One pass over the records; whether everything converged.
async fn converge(state: &NodeState, desired: &DesiredFunctions, gone: &[String]) -> bool {
    let Ok((deployer, runtime)) = crate::deploy::target(state.deploys.as_deref(), &state.directory)
    else {
        return true;
    };
    let mut done = true;
    for want in desired.values() {
        let have = deployer.status(&want.name).ok().flatten();
        let serving = have.as_ref().is_some_and(|h| {
            h.live.as_deref() == Some(want.live.as_str())
                && h.rollout.as_ref().map(|r| (&r.version, r.percent))
                    == want.rollout.as_ref().map(|r| (&r.version, r.percent))
        });
        if serving {
            continue;
        }
        let ids = std::iter::once(&want.live).chain(want.rollout.iter().map(|r| &r.version));
        let mut complete = true;
        for id in ids {
            if !deployer.has_version(&want.name, id) {
                if let Err(e) = fetch(state, deployer, want, id).await {
                    tracing::warn!(function = %want.name, version = %id, error = %e, "cannot fetch the fleet's version yet");
                    complete = false;
                }
            }
        }
        let rollout = want
            .rollout
            .as_ref()
            .map(|r| (r.version.as_str(), r.percent));
        let applied = match complete {
            true => {
                deployer
                    .apply(&runtime, &want.name, &want.live, rollout)
                    .await
            }
            false => Err(ApiError::new(StatusCode::CONFLICT, "incomplete", "")),
        };
        if let Err(e) = applied {
            if complete {
                tracing::warn!(function = %want.name, error = %e, "cannot switch to the fleet's version");
            }
            done = false;
        }
    }
    for name in gone {
        if let Err(e) = deployer.remove(&runtime, name).await {
            tracing::warn!(function = %name, error = %e, "cannot remove a function the fleet removed");
        }
    }
    done
}

/// Fetches version `id` from the record's sources, then any other node, and keeps it.
async fn fetch(
    state: &NodeState,
    deployer: &Deployer,
    want: &DesiredFunction,
    id: &str,
) -> Result<(), String> {
    let (Some(key), Some(client)) = (&state.links.key, state.peer_client()) else {
        return Err("this node has no offload secret, so it cannot fetch from other nodes".into());
    };
    let path = version_path(&want.name, id);
    let others = state.place.topology.nodes.iter().map(|n| &n.id);
    let mut order: Vec<&String> = want.sources.iter().collect();
    order.extend(others.filter(|n| !want.sources.contains(n)));
    let mut last = String::from("no other node");
    for source in order.into_iter().filter(|n| **n != state.place.id) {
        let Some(node) = state.place.topology.node(source) else {
            continue;
        };
        let url = format!("{}{path}", node.public_url.as_str().trim_end_matches('/'));
        let sent = client
            .get(url)
            .header(OFFLOAD, key.sign(&state.place.id, "GET", &path))
            .timeout(Duration::from_secs(30))
            .send()
            .await;
        let resp = match sent {
            Ok(r) if r.status().is_success() => r,
            Ok(r) => {
                last = format!("{source}: {}", r.status());
                continue;
            }
            Err(e) => {
                last = format!("{source}: {e}");
                continue;
            }
        };
        let env = VersionEnv {
            env: entries(resp.headers(), ENV_HEADER).map_err(|e| e.message)?,
            secrets: entries(resp.headers(), SECRET_HEADER).map_err(|e| e.message)?,
            cron: schedules(resp.headers()).map_err(|e| e.message)?,
            on: triggers(resp.headers()).map_err(|e| e.message)?,
        };
        let body = resp.bytes().await.map_err(|e| format!("{source}: {e}"))?;
        deployer
            .import(&want.name, id, &body, env)
            .await
            .map_err(|e| format!("{source}: {}", e.message))?;
        tracing::info!(function = %want.name, version = %id, from = %source, "fetched a version");
        return Ok(());
    }
    Err(last)
}
