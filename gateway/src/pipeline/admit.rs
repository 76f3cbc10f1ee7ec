//! The admit and locate phases' helpers: what a call may be (method, name), who signs it, where
//! its client is, and what of its request the function receives.

use std::net::SocketAddr;

use axum::body::Body;
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, Method, Response, StatusCode, Uri};
use geofaas_config::Role;
use geofaas_functions::HttpRequest;

use crate::error::ApiError;
use crate::geo::{self, ClientLocation, Source};
use crate::headers;
use crate::headers::name::SERVED_BY;
use crate::node::{NodeState, Place};
use crate::routing;

/// The path after `/fn/{name}` of a call's URI, as sent (`/` when there is none).
pub(super) fn sub_path(path: &str) -> &str {
    path.strip_prefix("/fn/")
        .and_then(|rest| rest.find('/').map(|i| &rest[i..]))
        .unwrap_or("/")
}

/// The methods a function may be called with.
pub(super) fn callable(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET
            | Method::HEAD
            | Method::POST
            | Method::PUT
            | Method::PATCH
            | Method::DELETE
            | Method::OPTIONS
    )
}

/// The HTTP side of the call as the function sees it.
pub(super) fn http_request(parts: &Parts, client: Option<SocketAddr>) -> HttpRequest {
    let host = parts
        .uri
        .authority()
        .map(|a| a.as_str())
        .or_else(|| {
            parts
                .headers
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
        })
        .unwrap_or("localhost");
    let path_and_query = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    HttpRequest {
        method: parts.method.clone(),
        path: sub_path(parts.uri.path()).to_owned(),
        query: parts.uri.query().unwrap_or_default().to_owned(),
        url: format!("https://{host}{path_and_query}"),
        source_ip: client.map(|a| a.ip()),
    }
}

/// The client's headers the function receives; the trigger headers only from another node
/// (an offloaded cron call), never from a client.
pub(super) fn function_headers(sent: &HeaderMap, signed: bool) -> HeaderMap {
    let mut out = headers::for_function(sent);
    if !signed {
        out.remove(geofaas_config::headers::TRIGGER);
        out.remove(geofaas_config::headers::TICK);
        out.remove(geofaas_config::headers::SUBJECT);
    }
    out
}

/// Who calls, as a stable hash for percentage rollouts: the client's `X-Client-Id`, else its
/// API key, else its address.
pub(super) fn caller_hash(
    client_id: Option<&HeaderValue>,
    key: Option<&str>,
    client: Option<SocketAddr>,
) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = fnv::FnvHasher::default();
    match (client_id, key, client) {
        (Some(id), _, _) => id.as_bytes().hash(&mut h),
        (None, Some(key), _) => key.hash(&mut h),
        (None, None, Some(addr)) => addr.ip().hash(&mut h),
        (None, None, None) => {}
    }
    h.finish()
}

/// The client's location: its headers (`X-Client-Location`, else `Sec-CH-Geohash`), else its
/// address in the GeoIP database, else unknown. A call signed by a peer carries the location
/// that node found ([`geo::from_peer`]): the address here is the peer's, not the client's.
pub(super) fn locate(
    state: &NodeState,
    parts: &Parts,
    control: &headers::Control<'_>,
    client: Option<SocketAddr>,
    signed: bool,
) -> Result<Option<ClientLocation>, ApiError> {
    if signed {
        return Ok(geo::from_peer(&parts.headers));
    }
    if let Some(l) = routing::header_location(control)? {
        return Ok(Some(l));
    }
    Ok(match (&state.place.locator, client) {
        (Some(loc), Some(addr)) => loc
            .locate(addr.ip())
            .map(|p| ClientLocation::point(p, Source::GeoIp, None)),
        _ => None,
    })
}

/// This node as a function's geo context names it.
pub fn here(place: &Place) -> geo::Here<'_> {
    geo::Here {
        id: &place.id_header,
        role: place.role,
        location: place.map.node(&place.id).map(|n| n.location),
    }
}

pub(super) fn handover(place: &Place, location: &str) -> Result<Response<Body>, ApiError> {
    Response::builder()
        .status(StatusCode::TEMPORARY_REDIRECT)
        .header(header::LOCATION, location)
        .header(SERVED_BY, place.id_header.clone())
        .body(Body::empty())
        .map_err(|_| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "could not build the redirect",
            )
        })
}

/// A client's explicit retry at the cloud, served there. Only the cloud honours it: an edge
/// serving it would serve any client outside its area.
pub(super) fn retried_at_the_cloud(place: &Place, retry: Option<&HeaderValue>) -> bool {
    place.role == Role::Cloud && retry.is_some_and(|v| v == "1")
}

/// Offloaded by a peer with a valid, fresh signature: served where it lands. A signature
/// that is not one is ignored (the call is routed as a client's); a real one made at a time
/// outside the window is refused ([`crate::guard::peer`]).
pub(super) fn signed_by_peer(
    state: &NodeState,
    method: &Method,
    uri: &Uri,
    offload: Option<&HeaderValue>,
) -> Result<bool, ApiError> {
    let from = crate::guard::peer(state, method, uri.path(), offload)?;
    if let Some(from) = &from {
        tracing::debug!(from, "serving an offloaded call");
    }
    Ok(from.is_some())
}
