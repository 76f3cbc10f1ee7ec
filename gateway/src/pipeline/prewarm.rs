//! Pre-warming on the call path: a client about to be served here is tracked
//! ([`crate::prewarm::Prewarm`]); when its path is about to enter another node's area, that
//! node is asked to warm the function (`POST /node/warm/{function}`, signed), and the answer
//! gets the `Link: rel=preconnect` hint naming the node the client is heading to.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::HeaderValue;
use geofaas_config::headers::OFFLOAD;
use geofaas_config::LatLon;
use serde_json::Value;

use crate::geo::{ClientLocation, Source};
use crate::node::NodeState;
use crate::placement;
use crate::prewarm::{preconnect, warm, Ask};
use crate::routing::Route;

/// How long a node waits for another node's answer to a pre-warm request.
const ASK_TIMEOUT: Duration = Duration::from_secs(10);

/// The hook on the call path: a call about to be served here by `state` from a client at
/// `location`. Tracks the client and, when its path is about to enter another node's area,
/// sends that node a pre-warm request in the background (with an offload secret to sign it)
/// and returns the `Link` hint for the answer ([`hint`]). Calls another node
/// signed (forwarded or offloaded) are tracked by that node, not here, and get no hint.
pub(super) fn observe(
    state: &Arc<NodeState>,
    sent_client_id: Option<&HeaderValue>,
    key_id: Option<&str>,
    function: &str,
    location: Option<&ClientLocation>,
    signed: bool,
    at: Instant,
) -> Option<HeaderValue> {
    if signed || !state.scheduling.prewarm.enabled() {
        return None;
    }
    let location = location?;
    let id = crate::prewarm::client_id(sent_client_id, key_id);
    let seen = state.scheduling.prewarm.foresee(
        &state.place.map,
        &state.place.id,
        id.as_deref(),
        function,
        location.point,
        at,
    )?;
    if let (Some(ask), Some(_)) = (seen.ask, &state.links.key) {
        tokio::spawn(send(state.clone(), ask));
    }
    hint(state, seen.point, location.source)
}

/// Sends one pre-warm request and counts its outcome.
async fn send(state: Arc<NodeState>, ask: Ask) {
    let outcome = match request(&state, &ask.target, &ask.function, ASK_TIMEOUT).await {
        Ok(result) => result,
        Err(e) => {
            tracing::debug!(function = %ask.function, to = %ask.target, error = %e, "pre-warm request failed");
            "failed".to_owned()
        }
    };
    tracing::debug!(function = %ask.function, to = %ask.target, %outcome, "pre-warm requested");
    state
        .telemetry
        .metrics
        .prewarm_request(&ask.target, warm::outcome_label(&outcome));
}

/// The hint for a client expected at `point` (its location's `source` kept, so it routes as
/// its calls do): the `Link` value naming the node a call from there would be handed over
/// to, or `None` when `state` would serve it.
fn hint(state: &NodeState, point: LatLon, source: Source) -> Option<HeaderValue> {
    let there = ClientLocation::point(point, source, None);
    let route = placement::route(
        &state.place.map,
        &state.place.id,
        Some(&there),
        false,
        |id| state.links.health.as_ref().is_none_or(|p| p.is_up(id)),
    );
    match route {
        Route::Handover(target) => preconnect::link(target),
        Route::Serve => None,
    }
}

/// Asks node `target` to warm `function`; the answer's `result` (`started`, `already_warm`,
/// `full`) or error code (`cannot_warm`, `unknown_function`, ...).
async fn request(
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
    let path = warm::warm_path(function);
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
