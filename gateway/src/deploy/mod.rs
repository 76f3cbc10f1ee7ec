//! Deployed functions: versions installed on this node, switched without losing a call.
//!
//! A deploy ([`Deployer::deploy`]) checks the bundle ([`bundle`]), writes the version to the
//! node's state folder ([`store`]), starts one instance of it in the embedded runtime (a
//! function that cannot start fails the deploy, and the live version keeps serving), and only
//! then moves new calls to it; calls already running finish on the version they started on,
//! whose instances are stopped after them. Rollbacks and percentage rollouts are the same
//! switch to other kept versions. The admin API over it is `crate::admin::deploy`, the fleet's
//! follower `crate::tasks::deploys`; `docs/deploy.md` describes both.

pub mod bundle;
mod checks;
pub mod store;
pub mod sync;
pub mod wire;

use std::path::Path;

use axum::http::StatusCode;
use geofaas_config::DeploySettings;
use std::sync::Arc;

use geofaas_functions::local::{self, Prepared};
use geofaas_functions::{FunctionBackend, LocalRuntime, RemoteDeploy};
use serde::Serialize;

use crate::directory::Directory;
use crate::error::ApiError;
use bundle::Bundle;
use checks::{bad_request, check_env, check_name, disk_error, now_s, reason_of};
use store::{FunctionState, Rollout, Store, VersionEnv, VersionInfo};

/// One deploy as the admin API received it.
#[derive(Debug)]
pub struct DeployRequest {
    /// Function name.
    pub name: String,
    /// The gzip'd tar.
    pub bundle: bytes::Bytes,
    /// `--env` entries.
    pub env: Vec<(String, String)>,
    /// `--secret` entries with their values.
    pub secrets: Vec<(String, String)>,
    /// `--percent`: a rollout to this share of callers instead of a switch.
    pub percent: Option<u8>,
    /// `--cron` schedules, each a cron expression ([`crate::cron`]).
    pub cron: Vec<String>,
    /// `--on` queue triggers, each `nats:SUBJECT` ([`crate::triggers`]).
    pub on: Vec<String>,
}

/// A function as `GET /admin/functions` shows it (secret values never appear).
#[derive(Debug, Clone, Serialize)]
pub struct FunctionStatus {
    /// Name.
    pub name: String,
    /// The version new calls run on (`null` for a function from `functions_dir` only).
    pub live: Option<String>,
    /// A rollout in progress.
    pub rollout: Option<Rollout>,
    /// Kept versions, oldest first.
    pub versions: Vec<VersionInfo>,
    /// The live version's `--env` entries.
    pub env: Vec<(String, String)>,
    /// The names of the live version's secrets.
    pub secrets: Vec<String>,
    /// The live version's cron schedules.
    pub cron: Vec<String>,
    /// The live version's queue triggers.
    pub on: Vec<String>,
}

/// Where a node's deploys go: its embedded runtime, and the remote backends that have
/// `deploy = true` (tinyFaaS, OpenWhisk, Lambda; each through its own API).
#[derive(Clone, Debug, Default)]
pub struct Runtimes {
    /// The embedded runtime, where the node has a local backend.
    pub local: Option<LocalRuntime>,
    /// Remote backends that take deploys.
    pub remote: Vec<Arc<dyn FunctionBackend>>,
}

/// The node's deployer (`deploys`) and where its deploys go (the local runtime and the
/// remote backends with `deploy = true` among `directory`'s), or why it takes no deploys.
pub fn target<'a>(
    deploys: Option<&'a Deployer>,
    directory: &Directory,
) -> Result<(&'a Deployer, Runtimes), ApiError> {
    let deployer = deploys.ok_or_else(|| {
        ApiError::new(
            StatusCode::CONFLICT,
            "no_state_folder",
            "this node was started without a state folder and keeps no deployed functions",
        )
    })?;
    let backends = directory.backends();
    let rt = Runtimes {
        local: backends.iter().find_map(|b| b.local().cloned()),
        remote: backends.iter().filter(|b| b.deploys()).cloned().collect(),
    };
    if rt.local.is_none() && rt.remote.is_empty() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "no_local_runtime",
            "this node has no local backend and no backend with deploy = true",
        ));
    }
    Ok((deployer, rt))
}

/// The deployed functions of one node.
#[derive(Debug)]
pub struct Deployer {
    store: Store,
    settings: DeploySettings,
    /// One change at a time (two deploys of a function at once: the later one wins).
    changes: tokio::sync::Mutex<()>,
}

impl Deployer {
    /// The deployer over the state folder `dir`.
    pub fn open(dir: &Path, settings: DeploySettings) -> std::io::Result<Self> {
        Ok(Self {
            store: Store::open(dir)?,
            settings,
            changes: tokio::sync::Mutex::new(()),
        })
    }

    /// The limits it applies.
    pub fn settings(&self) -> &DeploySettings {
        &self.settings
    }

    /// Puts every kept live version (and rollout) into `runtime`, where it does not serve
    /// them already: after a restart, or a reload that built a new runtime. Instances start
    /// on the first call. A version that cannot be loaded is logged and left out.
    pub fn restore(&self, runtime: &LocalRuntime) {
        let names = match self.store.names() {
            Ok(names) => names,
            Err(e) => {
                tracing::error!(error = %e, "cannot read the deployed functions");
                return;
            }
        };
        for name in names {
            let state = match self.store.state(&name) {
                Ok(s) => s,
                Err(e) => {
                    tracing::error!(function = %name, error = %e, "cannot read its state");
                    continue;
                }
            };
            let Some(live) = &state.live else { continue };
            let serving = runtime.serving(&name);
            let wanted = (
                Some(live.as_str()),
                state
                    .rollout
                    .as_ref()
                    .map(|r| (r.version.as_str(), r.percent)),
            );
            let have = serving.as_ref().map(|s| {
                let rollout = s
                    .rollout
                    .as_ref()
                    .map(|(v, p)| (v.as_deref().unwrap_or(""), *p));
                (s.live.as_deref(), rollout)
            });
            if have == Some(wanted) {
                continue;
            }
            let loaded = self.cold(runtime, &name, live).and_then(|live| {
                let rollout = match &state.rollout {
                    Some(r) => Some((self.cold(runtime, &name, &r.version)?, r.percent)),
                    None => None,
                };
                Ok((live, rollout))
            });
            match loaded {
                Ok((live, rollout)) => {
                    runtime.activate(live, rollout);
                    tracing::info!(function = %name, version = %state.live.as_deref().unwrap_or(""), "deployed function restored");
                }
                Err(e) => {
                    tracing::error!(function = %name, error = %e.message, "cannot restore it")
                }
            }
        }
    }

    /// Installs a new version and switches to it (or starts a rollout to it).
    pub async fn deploy(
        &self,
        rt: &Runtimes,
        req: DeployRequest,
    ) -> Result<(String, FunctionStatus), ApiError> {
        check_name(&req.name)?;
        for (k, v) in req.env.iter().chain(&req.secrets) {
            check_env(k, v)?;
        }
        for expr in &req.cron {
            crate::cron::parse(expr).map_err(|e| bad_request("bad_cron", e))?;
        }
        for spec in &req.on {
            crate::triggers::parse(spec).map_err(|e| bad_request("bad_trigger", e))?;
        }
        if req.percent.is_some_and(|p| !(1..=100).contains(&p)) {
            return Err(bad_request(
                "bad_percent",
                "percent must be between 1 and 100".into(),
            ));
        }
        if req.percent.is_some_and(|p| p < 100) && rt.local.is_none() {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "no_local_runtime",
                "percentage rollouts run in the embedded runtime, and this node has no local backend",
            ));
        }
        let bundle = Bundle::unpack(&req.bundle, self.settings.max_bundle_bytes)
            .map_err(|e| bad_request("bad_bundle", e.to_string()))?;
        let env = VersionEnv {
            env: req.env,
            secrets: req.secrets,
            cron: req.cron,
            on: req.on,
        };
        let id = bundle.version(&env);
        let _one = self.changes.lock().await;
        let name = &req.name;
        let fresh = !self.store.has_version(name, &id);
        self.store
            .put_version(name, &id, &bundle, &env, |dir| {
                local::load_function(name, dir).map(|_| ())
            })
            .map_err(|e| match e {
                store::PutError::Check(e) => bad_request("bad_function", reason_of(&e)),
                store::PutError::Io(e) => disk_error(&e),
            })?;
        let cleanup = |e: ApiError| {
            if fresh {
                let _ = self.store.delete_version(name, &id);
            }
            e
        };
        let prepared = match &rt.local {
            Some(local) => Some(self.warm(local, name, &id).await.map_err(cleanup)?),
            None => None,
        };
        let mut state = self.store.state(name).map_err(|e| disk_error(&e))?;
        let known = state.versions.iter().any(|v| v.id == id);
        let rollout = req
            .percent
            .filter(|p| *p < 100 && state.live.as_deref() != Some(id.as_str()));
        match (rollout, &rt.local, prepared) {
            // A rollout needs a version to split with: the live deployed one, else the
            // function's folder from `functions_dir`.
            (Some(percent), Some(local), Some(prepared)) if local.serving(name).is_some() => {
                let live = match &state.live {
                    Some(live) => self.warm(local, name, live).await?,
                    None => local
                        .loaded_live(name)
                        .ok_or_else(|| ApiError::unknown_function(name))?,
                };
                local.activate(live, Some((prepared, percent)));
                state.rollout = Some(Rollout {
                    version: id.clone(),
                    percent,
                });
            }
            (_, local, prepared) => {
                self.deploy_remote(rt, name, &id).await.map_err(|e| {
                    if known {
                        e
                    } else {
                        cleanup(e)
                    }
                })?;
                if let (Some(local), Some(prepared)) = (local, prepared) {
                    local.activate(prepared, None);
                }
                state.live = Some(id.clone());
                state.rollout = None;
            }
        }
        if !known {
            state.versions.push(VersionInfo {
                id: id.clone(),
                deployed_at: now_s(),
            });
        }
        self.prune(name, &mut state);
        self.store
            .set_state(name, &state)
            .map_err(|e| disk_error(&e))?;
        tracing::info!(function = %name, version = %id, live = ?state.live, rollout = ?state.rollout, "deployed");
        Ok((id, self.status_of(name, state)))
    }

    /// Switches back: ends a rollout (its version stops taking callers), else makes `to` (by
    /// default the version deployed before the live one) live again.
    pub async fn rollback(
        &self,
        rt: &Runtimes,
        name: &str,
        to: Option<&str>,
    ) -> Result<FunctionStatus, ApiError> {
        check_name(name)?;
        let _one = self.changes.lock().await;
        let mut state = self.store.state(name).map_err(|e| disk_error(&e))?;
        let Some(live) = state.live.clone() else {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "not_deployed",
                format!("function {name:?} has no deployed version on this node"),
            ));
        };
        let target = match (to, &state.rollout) {
            (None, Some(_)) => live.clone(),
            (Some(to), _) => to.to_owned(),
            (None, None) => {
                let at = state.versions.iter().position(|v| v.id == live);
                let before = at.and_then(|i| i.checked_sub(1));
                match before.and_then(|i| state.versions.get(i)) {
                    Some(v) => v.id.clone(),
                    None => {
                        return Err(ApiError::new(
                            StatusCode::CONFLICT,
                            "no_previous_version",
                            format!(
                                "function {name:?} has no version before {live} to roll back to"
                            ),
                        ))
                    }
                }
            }
        };
        if !state.versions.iter().any(|v| v.id == target) {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "unknown_version",
                format!(
                    "function {name:?} has no kept version {target:?}; kept: {}",
                    ids(&state)
                ),
            ));
        }
        let prepared = match &rt.local {
            Some(local) => Some(self.warm(local, name, &target).await?),
            None => None,
        };
        if state.live.as_deref() != Some(target.as_str()) {
            self.deploy_remote(rt, name, &target).await?;
        }
        if let (Some(local), Some(prepared)) = (&rt.local, prepared) {
            local.activate(prepared, None);
        }
        state.live = Some(target);
        state.rollout = None;
        self.store
            .set_state(name, &state)
            .map_err(|e| disk_error(&e))?;
        tracing::info!(function = %name, live = ?state.live, "rolled back");
        Ok(self.status_of(name, state))
    }

    /// Stops serving the deployed function and deletes its versions. Whether it had any.
    pub async fn remove(&self, rt: &Runtimes, name: &str) -> Result<bool, ApiError> {
        check_name(name)?;
        let _one = self.changes.lock().await;
        let state = self.store.state(name).map_err(|e| disk_error(&e))?;
        if state.live.is_none() {
            return Ok(false);
        }
        if let Some(local) = &rt.local {
            local.remove(name);
        }
        self.store
            .delete_function(name)
            .map_err(|e| disk_error(&e))?;
        tracing::info!(function = %name, "removed");
        Ok(true)
    }

    /// Every deployed function.
    pub fn list(&self) -> Result<Vec<FunctionStatus>, ApiError> {
        let names = self.store.names().map_err(|e| disk_error(&e))?;
        let mut out = Vec::new();
        for name in names {
            let state = self.store.state(&name).map_err(|e| disk_error(&e))?;
            if state.live.is_some() {
                out.push(self.status_of(&name, state));
            }
        }
        Ok(out)
    }

    /// One deployed function.
    pub fn status(&self, name: &str) -> Result<Option<FunctionStatus>, ApiError> {
        check_name(name)?;
        let state = self.store.state(name).map_err(|e| disk_error(&e))?;
        Ok(state.live.is_some().then(|| self.status_of(name, state)))
    }

    fn status_of(&self, name: &str, state: FunctionState) -> FunctionStatus {
        let env = state
            .live
            .as_deref()
            .and_then(|id| self.store.version_env(name, id).ok())
            .unwrap_or_default();
        FunctionStatus {
            name: name.to_owned(),
            live: state.live,
            rollout: state.rollout,
            versions: state.versions,
            env: env.env,
            secrets: env.secrets.into_iter().map(|(k, _)| k).collect(),
            cron: env.cron,
            on: env.on,
        }
    }

    /// Each deployed function's live cron schedules (read from the state folder, so a switch
    /// by any path, deploy, rollback, removal or the fleet's sync, counts at once). A
    /// function in a percentage rollout keeps its live version's schedules.
    pub fn schedules(&self) -> Vec<(String, Vec<String>)> {
        self.live_lists(|env| env.cron)
    }

    /// Each deployed function's live queue triggers, read as [`Deployer::schedules`] reads
    /// the schedules.
    pub fn subscriptions(&self) -> Vec<(String, Vec<String>)> {
        self.live_lists(|env| env.on)
    }

    /// `list` of each deployed function's live version's environment, where not empty.
    fn live_lists(&self, list: impl Fn(VersionEnv) -> Vec<String>) -> Vec<(String, Vec<String>)> {
        let Ok(names) = self.store.names() else {
            return Vec::new();
        };
        names
            .into_iter()
            .filter_map(|name| {
                let live = self.store.state(&name).ok()?.live?;
                let items = list(self.store.version_env(&name, &live).ok()?);
                (!items.is_empty()).then_some((name, items))
            })
            .collect()
    }

    /// Installs version `id` on every remote backend that takes deploys, in turn; the first
    /// refusal is the error (naming the backend), and the versions already installed stay.
    async fn deploy_remote(&self, rt: &Runtimes, name: &str, id: &str) -> Result<(), ApiError> {
        if rt.remote.is_empty() {
            return Ok(());
        }
        let spec = self.spec(name, id)?;
        let fun = RemoteDeploy {
            name: name.to_owned(),
            version: id.to_owned(),
            runtime: spec.runtime,
            dir: spec.dir.clone(),
            env: spec.env.clone(),
        };
        for backend in &rt.remote {
            backend.deploy(&fun).await.map_err(|e| {
                ApiError::new(
                    StatusCode::BAD_GATEWAY,
                    "remote_deploy_failed",
                    format!(
                        "the {} backend did not take version {id} of {name:?}: {e}",
                        backend.kind()
                    ),
                )
            })?;
            tracing::info!(function = %name, version = %id, backend = backend.kind(), "deployed to a remote backend");
        }
        Ok(())
    }

    /// Version `id` ready to take calls, with one instance started (or as loaded already).
    async fn warm(
        &self,
        runtime: &LocalRuntime,
        name: &str,
        id: &str,
    ) -> Result<Prepared, ApiError> {
        if let Some(p) = runtime.loaded(name, id) {
            return Ok(p);
        }
        let spec = self.spec(name, id)?;
        runtime.prepare(spec, true).await.map_err(|e| {
            ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "function_failed_to_start",
                format!("version {id} of {name:?} was not switched to: {e}"),
            )
        })
    }

    /// Version `id` loaded without starting an instance (restores).
    fn cold(&self, runtime: &LocalRuntime, name: &str, id: &str) -> Result<Prepared, ApiError> {
        if let Some(p) = runtime.loaded(name, id) {
            return Ok(p);
        }
        let spec = self.spec(name, id)?;
        runtime
            .prepare_cold(spec)
            .map_err(|e| bad_request("bad_function", e.to_string()))
    }

    fn spec(&self, name: &str, id: &str) -> Result<local::FunctionSpec, ApiError> {
        let dir = self.store.version_dir(name, id);
        let spec = local::load_function(name, &dir)
            .map_err(|e| bad_request("bad_function", reason_of(&e)))?;
        let env = self
            .store
            .version_env(name, id)
            .map_err(|e| disk_error(&e))?;
        Ok(spec.deployed(id, env.env.into_iter().chain(env.secrets).collect()))
    }

    /// Drops the oldest versions beyond `keep_versions`, never the live one or a rollout's.
    fn prune(&self, name: &str, state: &mut FunctionState) {
        let keep = self.settings.keep_versions.max(2);
        while state.versions.len() > keep {
            let in_use = |id: &str| {
                state.live.as_deref() == Some(id)
                    || state.rollout.as_ref().is_some_and(|r| r.version == id)
            };
            let Some(i) = state.versions.iter().position(|v| !in_use(&v.id)) else {
                break;
            };
            let old = state.versions.remove(i);
            if let Err(e) = self.store.delete_version(name, &old.id) {
                tracing::warn!(function = %name, version = %old.id, error = %e, "cannot delete an old version");
            }
        }
    }
}

fn ids(state: &FunctionState) -> String {
    let ids: Vec<&str> = state.versions.iter().map(|v| v.id.as_str()).collect();
    ids.join(", ")
}
