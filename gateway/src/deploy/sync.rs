//! Deploys across a fleet (`[registry] etcd`): every node converges on the desired version of
//! each function that etcd records.
//!
//! A node that takes a deploy, rollback or removal through its admin API writes the function's
//! record ([`publish`], [`unpublish`]; `geofaas_fleet::DesiredFunction`: live version, rollout,
//! the nodes that hold the bundles). Every node follows the records ([`follow`]): for a
//! function whose record differs from what it serves, it fetches each version it lacks by id
//! from a node the record names (`GET /node/functions/{name}/versions/{id}`, signed with the
//! offload secret; [`serve_version`] answers it), checks that the bundle hashes to that id, and
//! switches to it with the same guarantees as a deploy. A node that was down during a deploy
//! reads the records when it comes back and catches up the same way. Bundles and secrets never
//! travel through etcd.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::Path;
use axum::http::{header, HeaderValue, Response, StatusCode};
use geofaas_config::function::valid_function_name;
use geofaas_config::headers::OFFLOAD;
use geofaas_fleet::{DesiredFunction, DesiredFunctions, DesiredRollout, Fleet};
use geofaas_functions::local;

use super::admin::{
    entries, schedules, triggers, CRON_HEADER, ENV_HEADER, ON_HEADER, SECRET_HEADER,
};
use super::bundle::Bundle;
use super::checks::{bad_request, check_name, disk_error, now_s, reason_of};
use super::store::{self, Rollout, VersionEnv, VersionInfo};
use super::{FunctionStatus, Runtimes};
use crate::error::ApiError;
use crate::guard::Signed;
use crate::node::{Live, NodeState};

/// How soon a node tries again after a fetch or switch failed.
const RETRY: Duration = Duration::from_secs(1);

/// The path another node fetches a version at.
pub fn version_path(name: &str, id: &str) -> String {
    format!("/node/functions/{name}/versions/{id}")
}

/// Records `status` as the version every node should serve, when the node is in a fleet; the
/// error's words when etcd did not take it (this node serves it anyway).
pub async fn publish(state: &NodeState, status: &FunctionStatus) -> Option<String> {
    let fleet = state.fleet()?;
    let live = status.live.clone()?;
    let desired = DesiredFunction {
        name: status.name.clone(),
        live,
        rollout: status.rollout.as_ref().map(|r| DesiredRollout {
            version: r.version.clone(),
            percent: r.percent,
        }),
        sources: vec![state.place.id.clone()],
        updated_ms: geofaas_fleet::now_ms(),
    };
    match fleet.set_function(&desired).await {
        Ok(()) => None,
        Err(e) => {
            tracing::warn!(function = %status.name, error = %e, "the registry did not take the function's record");
            Some(format!("the registry did not take the record: {e}"))
        }
    }
}

/// Deletes the function's record, when the node is in a fleet.
pub async fn unpublish(state: &NodeState, name: &str) -> Option<String> {
    let fleet = state.fleet()?;
    match fleet.remove_function(name).await {
        Ok(()) => None,
        Err(e) => Some(format!("the registry did not delete the record: {e}")),
    }
}

/// `GET /node/functions/{name}/versions/{id}`: a kept version's bundle (`application/gzip`)
/// with its environment in `X-Function-Env` / `X-Function-Secret`, for another node of the
/// fleet only (offload signature).
pub async fn serve_version(
    Signed { from, state }: Signed,
    Path((name, id)): Path<(String, String)>,
) -> Result<Response<Body>, ApiError> {
    let deployer = state
        .deploys
        .as_deref()
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, "not_deployed", "no deploys here"))?;
    let (bundle, env) = deployer.export(&name, &id)?;
    tracing::debug!(function = %name, version = %id, to = %from, "sending a version");
    let mut resp = Response::new(Body::from(bundle));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/gzip"),
    );
    for (list, name) in [(&env.env, ENV_HEADER), (&env.secrets, SECRET_HEADER)] {
        for (k, v) in list {
            if let Ok(mut value) = HeaderValue::from_str(&format!("{k}={v}")) {
                value.set_sensitive(name == SECRET_HEADER);
                h.append(name, value);
            }
        }
    }
    for (list, name) in [(&env.cron, CRON_HEADER), (&env.on, ON_HEADER)] {
        for v in list {
            if let Ok(value) = HeaderValue::from_str(v) {
                h.append(name, value);
            }
        }
    }
    Ok(resp)
}

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
    let Ok((deployer, runtime)) = super::admin::target(state) else {
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
    deployer: &super::Deployer,
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

/// The fleet's side of the deployer: versions sent by other nodes, and switching to what the
/// records say.
impl super::Deployer {
    /// Makes `live` (and a rollout of `rollout`) what the function serves, as the fleet's
    /// record says; every version must be kept here already ([`Self::import`]).
    pub async fn apply(
        &self,
        rt: &Runtimes,
        name: &str,
        live: &str,
        rollout: Option<(&str, u8)>,
    ) -> Result<FunctionStatus, ApiError> {
        check_name(name)?;
        let _one = self.changes.lock().await;
        let mut state = self.store.state(name).map_err(|e| disk_error(&e))?;
        if let Some(local) = &rt.local {
            let live_p = self.warm(local, name, live).await?;
            let rollout_p = match rollout {
                Some((id, percent)) => Some((self.warm(local, name, id).await?, percent)),
                None => None,
            };
            if state.live.as_deref() != Some(live) {
                self.deploy_remote(rt, name, live).await?;
            }
            local.activate(live_p, rollout_p);
        } else if state.live.as_deref() != Some(live) {
            self.deploy_remote(rt, name, live).await?;
        }
        for id in std::iter::once(live).chain(rollout.map(|(id, _)| id)) {
            if !state.versions.iter().any(|v| v.id == id) {
                state.versions.push(VersionInfo {
                    id: id.to_owned(),
                    deployed_at: now_s(),
                });
            }
        }
        state.live = Some(live.to_owned());
        state.rollout = rollout.map(|(version, percent)| Rollout {
            version: version.to_owned(),
            percent,
        });
        self.prune(name, &mut state);
        self.store
            .set_state(name, &state)
            .map_err(|e| disk_error(&e))?;
        tracing::info!(function = %name, live, rollout = ?state.rollout, "converged on the fleet's version");
        Ok(self.status_of(name, state))
    }

    /// Keeps version `id` of `name` that another node sent: refused unless its files and
    /// environment hash to `id`, and checked like a deployed bundle.
    pub async fn import(
        &self,
        name: &str,
        id: &str,
        gzip: &[u8],
        env: VersionEnv,
    ) -> Result<(), ApiError> {
        check_name(name)?;
        let bundle = Bundle::unpack(gzip, self.settings.max_bundle_bytes)
            .map_err(|e| bad_request("bad_bundle", e.to_string()))?;
        let actual = bundle.version(&env);
        if actual != id {
            return Err(bad_request(
                "version_mismatch",
                format!("the bundle sent as version {id} of {name:?} is version {actual}"),
            ));
        }
        let _one = self.changes.lock().await;
        self.store
            .put_version(name, id, &bundle, &env, |dir| {
                local::load_function(name, dir).map(|_| ())
            })
            .map_err(|e| match e {
                store::PutError::Check(e) => bad_request("bad_function", reason_of(&e)),
                store::PutError::Io(e) => disk_error(&e),
            })
    }

    /// A kept version as another node fetches it: the gzip'd tar and its environment.
    pub fn export(&self, name: &str, id: &str) -> Result<(Vec<u8>, VersionEnv), ApiError> {
        check_name(name)?;
        let missing = || {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "unknown_version",
                format!("this node keeps no version {id:?} of {name:?}"),
            )
        };
        if !id.bytes().all(|b| b.is_ascii_hexdigit()) || !self.store.has_version(name, id) {
            return Err(missing());
        }
        let bundle = Bundle::from_version_dir(&self.store.version_dir(name, id))
            .map_err(|e| disk_error(&e))?;
        let env = self
            .store
            .version_env(name, id)
            .map_err(|e| disk_error(&e))?;
        let packed = bundle.pack().map_err(|e| disk_error(&e))?;
        Ok((packed, env))
    }

    /// Whether version `id` of `name` is kept here.
    pub fn has_version(&self, name: &str, id: &str) -> bool {
        valid_function_name(name) && self.store.has_version(name, id)
    }
}
