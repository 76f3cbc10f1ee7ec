//! `POST /node/warm/{function}`: another node asks this one to make one instance of a function
//! warm, because a client it serves is about to cross into this node's area.
//!
//! Only another node may ask (the offload signature over this path, as for load reports and
//! version fetches). The function warms through the first backend here that serves it and has
//! a warm-up path: the embedded runtime starts one idle instance unless one is idle already
//! ([`geofaas_functions::LocalRuntime::warm_one`]). tinyFaaS, OpenWhisk and Lambda have none
//! (their only way to start an instance is to run the function), so a function served only
//! there is answered `409 cannot_warm`.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::Path;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use geofaas_config::function::valid_function_name;
use geofaas_config::headers::OFFLOAD;
use geofaas_functions::local::WarmUp;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::guard::Signed;
use crate::node::{Live, NodeState};

/// The path a node asks another to warm `function` at.
pub fn warm_path(function: &str) -> String {
    format!("/node/warm/{function}")
}

/// The route of this endpoint, for the gateway's router.
pub fn routes() -> Router<Arc<Live>> {
    Router::new().route("/node/warm/{function}", post(warm))
}

/// The metric label of an answer's `result` (bounded: anything unexpected is `other`).
pub fn outcome_label(result: &str) -> &'static str {
    match result {
        "started" => "started",
        "already_warm" => "already_warm",
        "full" => "full",
        "cannot_warm" => "cannot_warm",
        "unknown_function" => "unknown_function",
        "failed" => "failed",
        _ => "other",
    }
}

/// Asks node `target` to warm `function`; the answer's `result` (`started`, `already_warm`,
/// `full`) or error code (`cannot_warm`, `unknown_function`, ...).
pub async fn ask(
    state: &NodeState,
    target: &str,
    function: &str,
    timeout: Duration,
) -> Result<String, String> {
    let (Some(key), Some(client)) = (&state.links.key, state.peer_client()) else {
        return Err("no offload secret: this node cannot sign node-to-node requests".into());
    };
    let node = state
        .place
        .map
        .node(target)
        .ok_or_else(|| format!("no node {target:?} in the topology"))?;
    let path = warm_path(function);
    let url = format!("{}{path}", node.public_url.as_str().trim_end_matches('/'));
    let resp = client
        .post(url)
        .header(OFFLOAD, key.sign(&state.place.id, "POST", &path))
        .timeout(timeout)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = resp.status();
    let body: Value = resp.json().await.map_err(|e| e.to_string())?;
    let word = if status.is_success() {
        body["result"].as_str()
    } else {
        body["error"]["code"].as_str()
    };
    word.map(str::to_owned)
        .ok_or_else(|| format!("{status}: an answer without a result"))
}

/// The handler: `200 {"node", "function", "result"}` with `result` one of `started`,
/// `already_warm`, `full`; `401` unsigned, `400` a bad name, `404` a function no backend here
/// serves, `409 cannot_warm` one served only by backends without a warm-up path, `503` when
/// the instance did not start.
async fn warm(
    Signed { from, state }: Signed,
    Path(function): Path<String>,
) -> Result<Json<Value>, ApiError> {
    if !valid_function_name(&function) {
        return Err(ApiError::bad_function_name());
    }
    let backends = state.directory.local(&function).await;
    if backends.is_empty() {
        return Err(ApiError::unknown_function(&function));
    }
    for b in &backends {
        let Some(warmed) = b.warm_one(&function).await else {
            continue;
        };
        let warmed = warmed.map_err(|e| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "not_started",
                format!("no instance of {function:?} started: {e}"),
            )
        })?;
        if warmed == WarmUp::NotServed {
            continue;
        }
        tracing::debug!(function = %function, from = %from, result = warmed.label(), "warm instance requested");
        return Ok(Json(json!({
            "node": state.place.id,
            "function": function,
            "result": warmed.label(),
        })));
    }
    let kinds: Vec<&str> = backends.iter().map(|b| b.kind()).collect();
    Err(ApiError::new(
        StatusCode::CONFLICT,
        "cannot_warm",
        format!(
            "{function:?} is served here by {} only, which cannot start an instance without running the function",
            kinds.join(", ")
        ),
    ))
}
