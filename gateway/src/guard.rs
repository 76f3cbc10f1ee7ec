//! Who may call a route, checked once per kind of caller: the extractors every handler takes
//! instead of checking headers itself.
//!
//! - [`Admin`]: an admin API key (bearer token), or anyone on a node without `[[auth.key]]`;
//!   `401` or `403` otherwise ([`crate::access::Access::admin`]).
//! - [`Signed`]: a request another node of the fleet signed for this method and path
//!   (`X-Geofaas-Offload`, [`crate::auth`]); `401` otherwise.
//! - [`Operator`]: either of the two, or an admin key as the password of HTTP Basic auth (a
//!   browser's prompt for `/ui`).
//!
//! [`peer`] is the one reading of a node signature, shared with the call pipeline (where an
//! unsigned call is simply a client's): a good one names the node; one not made with the
//! fleet's secret is counted and ignored; a real one made outside the clock window is
//! `403 clock_skew` naming the node whose clock is off, counted and logged.

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use base64::Engine as _;

use crate::auth::Refusal;
use crate::error::ApiError;
use crate::node::{Live, NodeState};
use geofaas_config::headers::OFFLOAD;

/// The node that signed a request for `method` and `path`, if a node did: see the module's
/// documentation for the three outcomes.
pub fn peer(
    state: &NodeState,
    method: &Method,
    path: &str,
    signature: Option<&HeaderValue>,
) -> Result<Option<String>, ApiError> {
    let (Some(key), Some(v)) = (&state.links.key, signature) else {
        return Ok(None);
    };
    let checked = v
        .to_str()
        .map_err(|_| Refusal::Signature)
        .and_then(|v| key.check(v, method.as_str(), path));
    match checked {
        Ok(from) => Ok(Some(from.to_owned())),
        Err(Refusal::Signature) => {
            state.telemetry.metrics.signature_refused("signature");
            tracing::warn!(
                path = %path.escape_debug(),
                "node credential did not verify; taking the request as a client's"
            );
            Ok(None)
        }
        Err(Refusal::Clock { node, skew_s }) => {
            state.telemetry.metrics.signature_refused("clock");
            let ahead = if skew_s > 0 { "ahead of" } else { "behind" };
            tracing::error!(
                node = %node,
                skew_s,
                "node {node}'s clock is {} s {ahead} this node's: its signed calls are refused (window ±60 s); check both clocks (NTP)",
                skew_s.unsigned_abs()
            );
            Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "clock_skew",
                format!(
                    "the call was signed by node {node:?} at a time {} s {ahead} node {:?}'s clock, outside the ±60 s window: refused; check both nodes' clocks (NTP)",
                    skew_s.unsigned_abs(),
                    state.place.id
                ),
            ))
        }
    }
}

/// An admin caller; carries the node's state the check read.
pub struct Admin(pub Arc<NodeState>);

impl FromRequestParts<Arc<Live>> for Admin {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, live: &Arc<Live>) -> Result<Self, ApiError> {
        let state = live.current();
        state.intake.access.admin(&parts.headers)?;
        Ok(Self(state))
    }
}

/// A request signed by another node of the fleet: its id, and the node's state.
pub struct Signed {
    /// The node that signed.
    pub from: String,
    /// The node's state the check read.
    pub state: Arc<NodeState>,
}

impl FromRequestParts<Arc<Live>> for Signed {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, live: &Arc<Live>) -> Result<Self, ApiError> {
        let state = live.current();
        let from = peer(
            &state,
            &parts.method,
            parts.uri.path(),
            parts.headers.get(OFFLOAD),
        )?
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                format!(
                    "{} is for the other nodes of the fleet only (a valid node credential)",
                    parts.uri.path()
                ),
            )
        })?;
        Ok(Self { from, state })
    }
}

/// An operator: a node of the fleet, an admin key, or anyone on an open node.
pub struct Operator(pub Arc<NodeState>);

impl FromRequestParts<Arc<Live>> for Operator {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, live: &Arc<Live>) -> Result<Self, ApiError> {
        let state = live.current();
        operator(&state, &parts.method, parts.uri.path(), &parts.headers)?;
        Ok(Self(state))
    }
}

/// Allows an operator (see [`Operator`]) for `method` and `path`.
pub fn operator(
    state: &NodeState,
    method: &Method,
    path: &str,
    headers: &HeaderMap,
) -> Result<(), ApiError> {
    if peer(state, method, path, headers.get(OFFLOAD))?.is_some() {
        return Ok(());
    }
    match basic_password(headers) {
        Some(password) => {
            let mut bearer = HeaderMap::new();
            let value = HeaderValue::from_str(&format!("Bearer {password}")).map_err(|_| {
                ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", "unknown API key")
            })?;
            bearer.insert(header::AUTHORIZATION, value);
            state.intake.access.admin(&bearer).map(drop)
        }
        None => state.intake.access.admin(headers).map(drop),
    }
}

/// The password of `Authorization: Basic base64(user:password)` (the user is ignored).
fn basic_password(headers: &HeaderMap) -> Option<String> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, rest) = v.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(rest.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    Some(
        text.split_once(':')
            .map_or(text.as_str(), |(_, p)| p)
            .to_owned(),
    )
}
