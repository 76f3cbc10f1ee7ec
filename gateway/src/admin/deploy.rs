//! The admin API of deployed functions (`docs/deploy.md`), with the admin key when keys exist:
//!
//! - `PUT /admin/functions/{name}` (`application/gzip` body, the function folder as a tar;
//!   `?percent=P` for a rollout; `X-Function-Env: KEY=VALUE` and `X-Function-Secret:
//!   KEY=VALUE` headers, one entry each): installs and switches, answers the function's status;
//! - `GET /admin/functions`, `GET /admin/functions/{name}`: live version, rollout, kept versions;
//! - `POST /admin/functions/{name}/rollback[?to=VERSION]`;
//! - `DELETE /admin/functions/{name}`.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query};
use axum::http::{header, HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::{Json, Router};
use geofaas_fleet::{DesiredFunction, DesiredRollout};
use serde::Deserialize;
use serde_json::json;

use crate::deploy::wire::{entries, schedules, triggers, ENV_HEADER, SECRET_HEADER};
use crate::deploy::{DeployRequest, FunctionStatus};
use crate::error::ApiError;
use crate::guard::Admin;
use crate::node::{Live, NodeState};

/// The admin routes of deployed functions.
pub fn routes() -> Router<Arc<Live>> {
    Router::new()
        .route("/admin/functions", get(list))
        .route(
            "/admin/functions/{name}",
            get(show).put(deploy).delete(remove),
        )
        .route("/admin/functions/{name}/rollback", post(rollback))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeployQuery {
    percent: Option<u8>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RollbackQuery {
    to: Option<String>,
}

async fn deploy(
    Admin(state): Admin,
    Path(name): Path<String>,
    query: Result<Query<DeployQuery>, QueryRejection>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<serde_json::Value>, ApiError> {
    let Query(query) = query.map_err(|e| bad_query(&e))?;
    let (deployer, runtime) = crate::deploy::target(state.deploys.as_deref(), &state.directory)?;
    if let Some(ct) = headers.get(header::CONTENT_TYPE) {
        let ct = ct.to_str().unwrap_or_default();
        let ok = [
            "application/gzip",
            "application/x-gzip",
            "application/octet-stream",
        ];
        if !ok.iter().any(|t| ct.starts_with(t)) {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "bad_content_type",
                format!("Content-Type {ct:?}: a bundle is sent as application/gzip (a gzip'd tar)"),
            ));
        }
    }
    let limit = deployer.settings().max_bundle_bytes;
    let timeout = Duration::from_millis(state.place.topology.limits.body_timeout_ms);
    let bundle = crate::body::read(&headers, body, limit, timeout)
        .await
        .map_err(|e| {
            if e.status == StatusCode::PAYLOAD_TOO_LARGE {
                let too_large = crate::deploy::bundle::BundleError::TooLarge { limit };
                ApiError::new(StatusCode::BAD_REQUEST, "bad_bundle", too_large.to_string())
            } else {
                e
            }
        })?;
    let req = DeployRequest {
        name,
        bundle,
        env: entries(&headers, ENV_HEADER)?,
        secrets: entries(&headers, SECRET_HEADER)?,
        percent: query.percent,
        cron: schedules(&headers)?,
        on: triggers(&headers)?,
    };
    if !req.on.is_empty() && state.kept.activations.queue().is_none() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "no_queue",
            "queue triggers (--on) need the fleet's queue: add a [queue] section naming the NATS servers to the topology",
        ));
    }
    let (version, status) = deployer.deploy(&runtime, req).await?;
    let registry = publish(&state, &status).await;
    Ok(Json(json!({
        "node": state.place.id,
        "version": version,
        "function": status,
        "registry_error": registry,
    })))
}

async fn list(Admin(state): Admin) -> Result<Json<serde_json::Value>, ApiError> {
    let functions = match &state.deploys {
        Some(d) => d.list()?,
        None => Vec::new(),
    };
    Ok(Json(
        json!({"node": state.place.id, "functions": functions}),
    ))
}

async fn show(
    Admin(state): Admin,
    Path(name): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let (deployer, _) = crate::deploy::target(state.deploys.as_deref(), &state.directory)?;
    match deployer.status(&name)? {
        Some(status) => Ok(Json(json!({"node": state.place.id, "function": status}))),
        None => Err(not_deployed(&name)),
    }
}

async fn rollback(
    Admin(state): Admin,
    Path(name): Path<String>,
    query: Result<Query<RollbackQuery>, QueryRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let Query(query) = query.map_err(|e| bad_query(&e))?;
    let (deployer, runtime) = crate::deploy::target(state.deploys.as_deref(), &state.directory)?;
    let status = deployer
        .rollback(&runtime, &name, query.to.as_deref())
        .await?;
    let registry = publish(&state, &status).await;
    Ok(Json(
        json!({"node": state.place.id, "function": status, "registry_error": registry}),
    ))
}

async fn remove(Admin(state): Admin, Path(name): Path<String>) -> Result<StatusCode, ApiError> {
    let (deployer, runtime) = crate::deploy::target(state.deploys.as_deref(), &state.directory)?;
    if deployer.remove(&runtime, &name).await? {
        if let Some(e) = unpublish(&state, &name).await {
            tracing::warn!(function = %name, error = %e, "removed here only");
        }
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(not_deployed(&name))
    }
}

fn not_deployed(name: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_deployed",
        format!("function {name:?} has no deployed version on this node"),
    )
}

fn bad_query(e: &QueryRejection) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "bad_query", e.body_text())
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
