//! The operator's page: `GET /ui`, a live map of the fleet (docs/operations.md).
//!
//! Everything it loads is embedded in the binary and served from `/ui/*` (no CDN, works
//! offline): the page, its script and style, and the base map (Natural Earth 1:110m land,
//! public domain, written by `cli/tests/browser/land.js`). The page reads
//! `GET /ui/state`, a snapshot of every node (its area from the topology, and what
//! the node itself reports at `GET /ui/node`: readiness, load, functions and versions, recent
//! latency percentiles), and follows `GET /events?scope=fleet` ([`crate::events`]).
//!
//! Who may look ([`crate::guard::Operator`]): anyone on an open node (`geofaas up`); with `[[auth.key]]`
//! an admin key, as `Authorization: Bearer KEY` or as the password of HTTP Basic auth (what
//! a browser can send; `/ui` asks for it with `WWW-Authenticate: Basic`), or another node's
//! signature (the offload credential over the path).

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, Response, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use geofaas_config::headers::OFFLOAD;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::guard::Operator;
use crate::node::{Live, NodeState};

const INDEX: &str = include_str!("ui/index.html");
const SCRIPT: &str = include_str!("ui/app.js");
const STYLE: &str = include_str!("ui/app.css");
const LAND: &str = include_str!("ui/land.json");

/// The path each node answers its own status at (for `/ui/state` of another node).
pub const NODE_PATH: &str = "/ui/node";
/// How long `/ui/state` waits for another node's status.
const PEER_TIMEOUT: Duration = Duration::from_millis(1500);

/// The page's routes and the call stream.
pub fn routes() -> Router<Arc<Live>> {
    Router::new()
        .route("/ui", get(page))
        .route("/ui/", get(page))
        .route("/ui/app.js", get(script))
        .route("/ui/app.css", get(style))
        .route("/ui/land.json", get(land))
        .route("/ui/state", get(state))
        .route(NODE_PATH, get(node))
        .route(crate::events::PATH, get(crate::events_api::events))
}

/// The answer for an asset: the operator check, then `body` as `content_type`.
fn asset(
    live: &Live,
    headers: &HeaderMap,
    path: &str,
    content_type: &'static str,
    body: &'static str,
) -> Response<Body> {
    let state = live.current();
    if let Err(e) = crate::guard::operator(&state, &axum::http::Method::GET, path, headers) {
        let mut resp = e.into_response();
        if resp.status() == StatusCode::UNAUTHORIZED {
            // A browser asks its user for the key on this, and sends it with every later
            // request of the page (EventSource included, which cannot set headers itself).
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static(r#"Basic realm="geofaas operator", charset="UTF-8""#),
            );
        }
        return resp;
    }
    let mut resp = Response::new(Body::from(body));
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // Nothing but this node: the page works offline and loads nothing from elsewhere.
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
        ),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    resp
}

async fn page(State(live): State<Arc<Live>>, headers: HeaderMap) -> Response<Body> {
    asset(&live, &headers, "/ui", "text/html; charset=utf-8", INDEX)
}

async fn script(State(live): State<Arc<Live>>, headers: HeaderMap) -> Response<Body> {
    asset(
        &live,
        &headers,
        "/ui/app.js",
        "text/javascript; charset=utf-8",
        SCRIPT,
    )
}

async fn style(State(live): State<Arc<Live>>, headers: HeaderMap) -> Response<Body> {
    asset(
        &live,
        &headers,
        "/ui/app.css",
        "text/css; charset=utf-8",
        STYLE,
    )
}

async fn land(State(live): State<Arc<Live>>, headers: HeaderMap) -> Response<Body> {
    asset(&live, &headers, "/ui/land.json", "application/json", LAND)
}

/// `GET /ui/node`: this node's own status.
async fn node(Operator(state): Operator) -> Result<Json<Value>, ApiError> {
    Ok(Json(own_status(&state).await))
}

/// What this node says about itself: readiness, load, functions and versions, latencies.
pub async fn own_status(state: &NodeState) -> Value {
    let load = state.load();
    let view = state.directory.view().await;
    let versions: serde_json::Map<String, Value> = state
        .deploys
        .as_ref()
        .and_then(|d| d.list().ok())
        .unwrap_or_default()
        .into_iter()
        .map(|f| (f.name, json!(f.live)))
        .collect();
    json!({
        "node": state.place.id,
        "ready": state.is_ready().await,
        "load": {
            "running": load.running,
            "queued": load.queued,
            "max_concurrent": state.place.topology.gateway.max_concurrent_calls.max(1),
            "functions": load.functions,
        },
        "functions": view.served_here,
        "versions": versions,
        "latency_ms": state.telemetry.events.percentiles(),
        "subscribers": state.telemetry.events.subscribers(),
    })
}

/// `GET /ui/state`: every node of the topology with its area, location and status; another
/// node's status is asked of it (`GET /ui/node`, signed), and `{"error"}` when it did not
/// answer within [`PEER_TIMEOUT`].
async fn state(Operator(state): Operator) -> Result<Json<Value>, ApiError> {
    let asks = state.place.map.nodes().iter().map(|n| {
        let state = state.clone();
        async move {
            if n.id == state.place.id {
                own_status(&state).await
            } else {
                peer_status(&state, &n.id, &n.public_url).await
            }
        }
    });
    let statuses = futures::future::join_all(asks).await;
    let nodes: Vec<Value> = state
        .place
        .map
        .nodes()
        .iter()
        .zip(statuses)
        .map(|(n, status)| {
            let area = n.area.shape().map(|mp| {
                mp.0.iter()
                    .map(|p| {
                        p.exterior()
                            .coords()
                            .map(|c| [round6(c.x), round6(c.y)])
                            .collect::<Vec<_>>()
                    })
                    .collect::<Vec<_>>()
            });
            json!({
                "id": n.id,
                "role": n.role,
                "location": {"lat": n.location.lat, "lon": n.location.lon},
                "area": area,
                "public_url": n.public_url,
                "status": status,
            })
        })
        .collect();
    Ok(Json(
        json!({"self": state.place.id, "zone": state.place.topology.zone, "nodes": nodes}),
    ))
}

fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

async fn peer_status(state: &NodeState, id: &str, base: &url::Url) -> Value {
    let error = |e: String| json!({"node": id, "error": e});
    let (Some(client), Some(key)) = (state.peer_client(), &state.links.key) else {
        return error("this node has no offload secret, so it cannot ask its peers".into());
    };
    let Ok(url) = base.join(NODE_PATH) else {
        return error("its public_url cannot be joined with /ui/node".into());
    };
    let resp = client
        .get(url)
        .header(OFFLOAD, key.sign(&state.place.id, "GET", NODE_PATH))
        .timeout(PEER_TIMEOUT)
        .send()
        .await
        .and_then(reqwest::Response::error_for_status);
    match resp {
        Ok(r) => r
            .json::<Value>()
            .await
            .unwrap_or_else(|e| error(format!("its answer was not JSON: {e}"))),
        Err(e) => error(format!("unreachable: {e}")),
    }
}
