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
use serde::Deserialize;
use serde_json::json;

use super::{DeployRequest, Deployer, Runtimes};
use crate::error::ApiError;
use crate::guard::Admin;
use crate::node::{Live, NodeState};

/// Request header: one `--env` entry, `KEY=VALUE`.
pub const ENV_HEADER: &str = "x-function-env";
/// Request header: one `--secret` entry, `KEY=VALUE`.
pub const SECRET_HEADER: &str = "x-function-secret";
/// Request header: one `--cron` schedule.
pub const CRON_HEADER: &str = "x-function-cron";
/// Request header: one `--on` queue trigger, `nats:SUBJECT`.
pub const ON_HEADER: &str = "x-function-on";

/// The admin routes of deployed functions.
pub fn routes() -> Router<Arc<Live>> {
    Router::new()
        .route("/admin/functions", get(list))
        .route(
            "/admin/functions/{name}",
            get(show).put(deploy).delete(remove),
        )
        .route("/admin/functions/{name}/rollback", post(rollback))
        .route(
            "/node/functions/{name}/versions/{id}",
            get(super::sync::serve_version),
        )
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
    let (deployer, runtime) = target(&state)?;
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
                let too_large = super::bundle::BundleError::TooLarge { limit };
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
    let registry = super::sync::publish(&state, &status).await;
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
    let (deployer, _) = target(&state)?;
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
    let (deployer, runtime) = target(&state)?;
    let status = deployer
        .rollback(&runtime, &name, query.to.as_deref())
        .await?;
    let registry = super::sync::publish(&state, &status).await;
    Ok(Json(
        json!({"node": state.place.id, "function": status, "registry_error": registry}),
    ))
}

async fn remove(Admin(state): Admin, Path(name): Path<String>) -> Result<StatusCode, ApiError> {
    let (deployer, runtime) = target(&state)?;
    if deployer.remove(&runtime, &name).await? {
        if let Some(e) = super::sync::unpublish(&state, &name).await {
            tracing::warn!(function = %name, error = %e, "removed here only");
        }
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(not_deployed(&name))
    }
}

/// The node's deployer and where its deploys go, or why it takes no deploys.
pub(crate) fn target(state: &NodeState) -> Result<(&Deployer, Runtimes), ApiError> {
    let deployer = state.deploys.as_deref().ok_or_else(|| {
        ApiError::new(
            StatusCode::CONFLICT,
            "no_state_folder",
            "this node was started without a state folder and keeps no deployed functions",
        )
    })?;
    let backends = state.directory.backends();
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

/// The `KEY=VALUE` entries of every `name` header.
pub(crate) fn entries(headers: &HeaderMap, name: &str) -> Result<Vec<(String, String)>, ApiError> {
    let mut out = Vec::new();
    for v in headers.get_all(name) {
        let text = v
            .to_str()
            .map_err(|_| ApiError::bad_header(name, "(not text)", "not visible ASCII"))?;
        let Some((k, v)) = text.split_once('=') else {
            let shown = if name == SECRET_HEADER {
                "(hidden)"
            } else {
                text
            };
            return Err(ApiError::bad_header(name, shown, "expected KEY=VALUE"));
        };
        out.push((k.to_owned(), v.to_owned()));
    }
    Ok(out)
}

/// The schedules of every `X-Function-Cron` header, one expression each (checked by the deploy).
pub(crate) fn schedules(headers: &HeaderMap) -> Result<Vec<String>, ApiError> {
    values(headers, CRON_HEADER)
}

/// The `--on` triggers a deploy request carries.
pub(crate) fn triggers(headers: &HeaderMap) -> Result<Vec<String>, ApiError> {
    values(headers, ON_HEADER)
}

fn values(headers: &HeaderMap, name: &'static str) -> Result<Vec<String>, ApiError> {
    headers
        .get_all(name)
        .iter()
        .map(|v| {
            v.to_str()
                .map(|s| s.trim().to_owned())
                .map_err(|_| ApiError::bad_header(name, "(not text)", "not visible ASCII"))
        })
        .collect()
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
