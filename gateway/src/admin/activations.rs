//! The admin API of asynchronous calls, with the admin key where keys exist
//! (`geofaas activations ls|show|retry`):
//!
//! - `GET /admin/activations[?failed=true]`: every activation this node keeps (or only the
//!   dead letters), newest first;
//! - `GET /admin/activations/{id}`: one, with every failed try's error;
//! - `POST /admin/activations/{id}/retry`: a dead letter runs again (`202`, as when accepted).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query};
use axum::http::{Response, StatusCode};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

use crate::error::ApiError;
use crate::guard::Admin;
use crate::node::Live;

/// The admin routes of activations.
pub fn routes() -> Router<Arc<Live>> {
    Router::new()
        .route("/admin/activations", get(list))
        .route("/admin/activations/{id}", get(show))
        .route("/admin/activations/{id}/retry", post(retry))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    #[serde(default)]
    failed: bool,
}

async fn list(
    Admin(state): Admin,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let Query(query) = query.map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_query",
            format!("{}; the query takes failed=true|false", e.body_text()),
        )
    })?;
    let activations = state.kept.activations.list(query.failed);
    Ok(Json(
        json!({"node": state.place.id, "activations": activations}),
    ))
}

async fn show(
    Admin(state): Admin,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let activation = state.kept.activations.show(&id)?;
    Ok(Json(
        json!({"node": state.place.id, "activation": activation}),
    ))
}

async fn retry(Admin(state): Admin, Path(id): Path<String>) -> Result<Response<Body>, ApiError> {
    let activations = state.kept.activations.clone();
    activations.retry(state, &id).await
}
