//! The HTTP API of a gateway: `/fn/{name}` and the operational endpoints.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderName, Method, Request, Response, StatusCode, Uri};
use axum::response::IntoResponse;
use axum::routing::{any, get};
use axum::{Extension, Json, Router};
use bytes::Bytes;
use futures::StreamExt;
use serde_json::json;

use crate::activations;
use crate::auth::OFFLOAD_HEADER;
use crate::error::ApiError;
use crate::idempotency;
use crate::invoke::{self, Call};
use crate::node::NodeState;
use crate::routing::{self, Route};

/// Header with which a client retrying at the cloud asks to be served there.
pub const RETRY_HEADER: &str = "x-geofaas-retry";

/// The remote address of the connection, inserted by the server for each connection.
#[derive(Debug, Clone, Copy)]
pub struct ClientAddr(pub SocketAddr);

/// The gateway's routes over `state`.
pub fn router(state: Arc<NodeState>) -> Router {
    Router::new()
        .route("/fn/{name}", any(call_function))
        .route("/activations/{id}", get(activation))
        .route("/functions", get(functions))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/registry", get(registry))
        .route("/metrics", get(metrics))
        .fallback(|| async {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                "no such endpoint; functions are called at /fn/{name}",
            )
        })
        .with_state(state)
}

async fn call_function(
    State(state): State<Arc<NodeState>>,
    Path(name): Path<String>,
    client: Option<Extension<ClientAddr>>,
    req: Request<Body>,
) -> Result<Response<Body>, ApiError> {
    let received = Instant::now();
    let (parts, body) = req.into_parts();
    if parts.method != Method::GET && parts.method != Method::POST {
        return Err(ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "functions are called with GET or POST",
        ));
    }
    let path_and_query = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    let location = match routing::header_location(&parts.headers)? {
        Some(p) => Some(p),
        None => match (&state.locator, client) {
            (Some(loc), Some(Extension(ClientAddr(addr)))) => loc.locate(addr.ip()),
            _ => None,
        },
    };
    let pinned = is_pinned(&state, &parts.method, &parts.uri, &parts.headers);
    let route = routing::decide(&state.map, &state.id, location, pinned);
    let route_time = received.elapsed();
    if let Route::Handover(target) = route {
        metrics::counter!("geofaas_handovers_total", "node" => state.id.clone(), "to" => target.id.clone()).increment(1);
        let location = routing::handover_url(target, &path_and_query);
        return Response::builder()
            .status(StatusCode::TEMPORARY_REDIRECT)
            .header(header::LOCATION, location)
            .header(invoke::SERVED_BY, &state.id)
            .body(Body::empty())
            .map_err(|_| {
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "could not build the redirect",
                )
            });
    }
    if !state.knows(&name).await {
        return Err(ApiError::unknown_function(&name));
    }
    let idempotency_key = idempotency::key(&parts.headers, &name)?;
    let limit = state.topology.gateway.max_body_bytes;
    let body = read_body(&parts.headers, body, limit).await?;
    let idempotency_key =
        idempotency_key.map(|k| (k, idempotency::fingerprint(&path_and_query, &body)));
    let call = Call {
        function: name,
        method: parts.method,
        path_and_query,
        headers: function_headers(&parts.headers),
        body,
        location,
        received,
        route_time,
    };
    if activations::wants_async(&parts.headers) {
        return state.activations.start(state.clone(), call);
    }
    let resp = match idempotency_key {
        Some((key, request)) => {
            state
                .idempotency
                .run(key, request, invoke::run(&state, call))
                .await
        }
        None => invoke::run(&state, call).await,
    };
    let outcome = match &resp {
        Ok(r) if r.headers().contains_key(crate::offload::OFFLOADED_FROM) => "offloaded",
        Ok(_) => "served",
        Err(_) => "error",
    };
    metrics::counter!("geofaas_calls_total", "node" => state.id.clone(), "outcome" => outcome)
        .increment(1);
    resp
}

/// Offloaded by a peer with a valid signature, or a client's explicit retry at the cloud.
fn is_pinned(state: &NodeState, method: &Method, uri: &Uri, headers: &HeaderMap) -> bool {
    if let (Some(key), Some(v)) = (&state.key, headers.get(OFFLOAD_HEADER)) {
        if let Some(from) = v
            .to_str()
            .ok()
            .and_then(|v| key.verify(v, method.as_str(), uri.path()))
        {
            tracing::debug!(from, "serving an offloaded call");
            return true;
        }
        tracing::warn!("offload credential did not verify; routing the call normally");
    }
    state.cloud.is_none() && headers.get(RETRY_HEADER).is_some_and(|v| v == "1")
}

/// Reads the body, refusing (413) more than `limit` bytes whether announced or streamed.
async fn read_body(headers: &HeaderMap, body: Body, limit: usize) -> Result<Bytes, ApiError> {
    let announced = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let mut body = body.into_data_stream();
    let mut buf = bytes::BytesMut::new();
    let mut too_large = announced.is_some_and(|n| n > limit as u64);
    while !too_large {
        match body.next().await {
            None => return Ok(buf.freeze()),
            Some(Ok(chunk)) if buf.len() + chunk.len() <= limit => buf.extend_from_slice(&chunk),
            Some(Ok(_)) => too_large = true,
            Some(Err(_)) => {
                return Err(ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "bad_body",
                    "the request body could not be read",
                ))
            }
        }
    }
    // Read on (bounded in bytes and time) so HTTP/2 clients get the 413 instead of a reset stream.
    let drain = async {
        let mut drained = 0usize;
        while let Some(Ok(chunk)) = body.next().await {
            drained += chunk.len();
            if drained > 2 * limit {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), drain).await;
    Err(ApiError::body_too_large(limit))
}

/// Headers a function (and the cloud, on offload) may see: no hop-by-hop, credential or framing headers.
fn function_headers(headers: &HeaderMap) -> HeaderMap {
    // `prefer` is the gateway's own business: an offloaded async call must run synchronously at the cloud.
    const DROP: [&str; 12] = [
        "host",
        "connection",
        "content-length",
        "transfer-encoding",
        "te",
        "upgrade",
        "keep-alive",
        "authorization",
        "proxy-authorization",
        "cookie",
        "prefer",
        OFFLOAD_HEADER,
    ];
    headers
        .iter()
        .filter(|(n, _)| !DROP.contains(&n.as_str()) && !n.as_str().starts_with("proxy-"))
        .map(|(n, v)| (HeaderName::clone(n), v.clone()))
        .collect()
}

async fn activation(
    State(state): State<Arc<NodeState>>,
    Path(id): Path<String>,
) -> Result<Response<Body>, ApiError> {
    state.activations.get(&id)
}

async fn functions(State(state): State<Arc<NodeState>>) -> Json<serde_json::Value> {
    let mut list = Vec::new();
    for f in &state.topology.functions {
        list.push(json!({"name": f.name, "profile": f}));
    }
    let mut local = Vec::new();
    for b in &state.backends {
        if let Ok(names) = b.list().await {
            local.push(json!({"backend": b.kind(), "functions": names}));
        }
    }
    Json(json!({"node": state.id, "functions": list, "backends": local}))
}

async fn readyz(State(state): State<Arc<NodeState>>) -> impl IntoResponse {
    if state.is_ready().await {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
    }
}

async fn registry(State(state): State<Arc<NodeState>>) -> Json<serde_json::Value> {
    let nodes: Vec<_> = state
        .map
        .nodes()
        .iter()
        .map(|n| {
            json!({
                "id": n.id,
                "role": n.role,
                "location": n.location,
                "area": n.area.to_wkt(),
                "public_url": n.public_url,
            })
        })
        .collect();
    Json(json!({"self": state.id, "ready": state.ready.load(Ordering::Relaxed), "nodes": nodes}))
}

async fn metrics(State(state): State<Arc<NodeState>>) -> Response<Body> {
    match &state.metrics {
        Some(handle) => (
            [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
            handle.render(),
        )
            .into_response(),
        None => ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            "metrics are not enabled on this node",
        )
        .into_response(),
    }
}
