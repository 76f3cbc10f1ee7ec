//! The fleet's side of the deployer (`[registry] etcd`): a version another node sent
//! ([`Deployer::import`](super::Deployer::import)), one sent to another
//! ([`Deployer::export`](super::Deployer::export)), and switching to what the fleet's records say
//! ([`Deployer::apply`](super::Deployer::apply)). The follower that drives them is
//! `crate::tasks::deploys`; the admin API (`crate::admin::deploy`) writes the records.

use axum::http::StatusCode;
use geofaas_config::function::valid_function_name;
use geofaas_functions::local;

use super::bundle::Bundle;
use super::checks::{bad_request, check_name, disk_error, now_s, reason_of};
use super::store::{self, Rollout, VersionEnv, VersionInfo};
use super::{FunctionStatus, Runtimes};
use crate::error::ApiError;

/// The path another node fetches a version at.
pub fn version_path(name: &str, id: &str) -> String {
    format!("/node/functions/{name}/versions/{id}")
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
