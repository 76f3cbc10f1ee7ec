//! What the nodes of a fleet ask of each other, each signed with the offload secret
//! ([`Signed`]), and what an operator asks of a node's scheduling (`/node/profiles`):
//!
//! - `POST /node/load`: another node's load report ([`crate::loads::receive`]);
//! - `POST /node/warm/{function}`: make one instance of a function warm, because a client the
//!   asking node serves is about to cross into this node's area;
//! - `GET /node/functions/{name}/versions/{id}`: a kept version, for a node that follows the
//!   fleet's records (`tasks::deploys`);
//! - `GET /node/profiles`: what this node measured of its functions and links.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::Path;
use axum::http::{header, HeaderValue, Response, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};
use geofaas_config::function::valid_function_name;
use geofaas_functions::local::WarmUp;
use serde_json::{json, Value};

use crate::deploy::wire::{CRON_HEADER, ENV_HEADER, ON_HEADER, SECRET_HEADER};
use crate::error::ApiError;
use crate::guard::{Admin, Signed};
use crate::node::Live;

/// The node-to-node routes, for the gateway's router.
pub(super) fn routes() -> Router<Arc<Live>> {
    Router::new()
        .route(crate::loads::LOAD_PATH, post(load_report))
        .route("/node/warm/{function}", post(warm))
        .route(crate::profiles::PROFILES_PATH, get(profiles))
        .route("/node/functions/{name}/versions/{id}", get(serve_version))
}

/// `GET /node/profiles`: what this node measured of its functions and links.
async fn profiles(Admin(state): Admin) -> Response<Body> {
    Json(
        state
            .scheduling
            .profiles
            .snapshot(&state.place.id, &state.place.topology),
    )
    .into_response()
}

/// `POST /node/load`: another node's load report ([`crate::loads::receive`]).
async fn load_report(
    Signed { from, state }: Signed,
    body: axum::body::Bytes,
) -> Result<StatusCode, ApiError> {
    crate::loads::receive(
        &state.scheduling.loads,
        &state.place.topology,
        &state.place.id,
        &from,
        &body,
    )?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /node/warm/{function}`: another node asks this one to make one instance of a function
/// warm, because a client it serves is about to cross into this node's area.
///
/// Only another node may ask (the offload signature over this path, as for load reports and
/// version fetches). The function warms through the first backend here that serves it and has
/// a warm-up path: the embedded runtime starts one idle instance unless one is idle already
/// ([`geofaas_functions::LocalRuntime::warm_one`]). tinyFaaS, OpenWhisk and Lambda have none
/// (their only way to start an instance is to run the function), so a function served only
/// there is answered `409 cannot_warm`.
///
/// The answer: `200 {"node", "function", "result"}` with `result` one of `started`,
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

/// `GET /node/functions/{name}/versions/{id}`: a kept version's bundle (`application/gzip`)
/// with its environment in `X-Function-Env` / `X-Function-Secret`, for another node of the
/// fleet only (offload signature).
async fn serve_version(
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
