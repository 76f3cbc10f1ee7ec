//! The per-request routing decision: where is the client, and is this node responsible?
//!
//! Pure functions over the topology's [`ServiceMap`], so the hot path is benchmarked alone
//! (`benches/routing.rs`). Handover targets come only from the topology, never from the
//! request (no open redirect).

use axum::http::HeaderMap;
use geofaas_config::{LatLon, NodeEntry, ServiceMap};

use crate::error::ApiError;

pub use geofaas_config::headers::CLIENT_LOCATION as LOCATION_HEADER;

/// What to do with a call that reached this node.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Route<'a> {
    /// Serve it here.
    Serve,
    /// Hand the client over to this node with a 307.
    Handover(&'a NodeEntry),
}

/// Reads `X-Client-Location`; `Ok(None)` when absent, a 400 naming the header and value when malformed.
pub fn header_location(headers: &HeaderMap) -> Result<Option<LatLon>, ApiError> {
    let Some(value) = headers.get(crate::headers::name::CLIENT_LOCATION) else {
        return Ok(None);
    };
    let text = value.to_str().map_err(|_| {
        ApiError::bad_header(
            "X-Client-Location",
            &String::from_utf8_lossy(value.as_bytes()),
            "not ASCII text",
        )
    })?;
    text.parse::<LatLon>()
        .map(Some)
        .map_err(|e| ApiError::bad_header("X-Client-Location", text, e))
}

/// Decides where a call is served. `pinned` calls (offloaded by a peer, or a client's retry at
/// the cloud) are served where they land; calls without a location are served here, since DNS
/// already chose this node for the client.
pub fn decide<'a>(
    map: &'a ServiceMap,
    me: &str,
    location: Option<LatLon>,
    pinned: bool,
) -> Route<'a> {
    if pinned {
        return Route::Serve;
    }
    match location {
        None => Route::Serve,
        Some(p) => {
            let target = map.responsible(p);
            if target.id == me {
                Route::Serve
            } else {
                Route::Handover(target)
            }
        }
    }
}

/// The `Location` of a handover: the target's public URL with this request's path and query.
pub fn handover_url(target: &NodeEntry, path_and_query: &str) -> String {
    let base = target.public_url.as_str().trim_end_matches('/');
    format!("{base}{path_and_query}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use geofaas_config::Topology;

    fn map() -> ServiceMap {
        let text = include_str!("../../examples/berlin.toml");
        Topology::parse(text, "berlin.toml", std::path::Path::new("../examples"))
            .unwrap()
            .service_map()
            .unwrap()
    }

    fn loc(s: &str) -> Option<LatLon> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn serve_handover_and_pinned() {
        let map = map();
        assert_eq!(
            decide(&map, "tu-berlin", loc("52.51,13.32"), false),
            Route::Serve
        );
        let Route::Handover(t) = decide(&map, "tu-berlin", loc("52.40,13.06"), false) else {
            panic!()
        };
        assert_eq!(
            handover_url(t, "/fn/sieve?x=1"),
            "https://127.0.0.12:8443/fn/sieve?x=1"
        );
        let Route::Handover(t) = decide(&map, "tu-berlin", loc("51.5,-0.12"), false) else {
            panic!()
        };
        assert_eq!(t.id, "cloud");
        assert_eq!(
            decide(&map, "cloud", loc("51.5,-0.12"), false),
            Route::Serve
        );
        let Route::Handover(t) = decide(&map, "cloud", loc("52.51,13.32"), false) else {
            panic!()
        };
        assert_eq!(t.id, "tu-berlin");
        assert_eq!(
            decide(&map, "cloud", loc("52.51,13.32"), true),
            Route::Serve
        );
        assert_eq!(decide(&map, "potsdam", None, false), Route::Serve);
    }

    #[test]
    fn malformed_location_names_header_and_value() {
        let mut h = HeaderMap::new();
        h.insert(LOCATION_HEADER, "52.5;13.3".parse().unwrap());
        let err = header_location(&h).unwrap_err();
        assert_eq!(err.status, 400);
        assert!(
            err.message.contains("X-Client-Location") && err.message.contains("52.5;13.3"),
            "{err}"
        );
        h.insert(LOCATION_HEADER, "91,0".parse().unwrap());
        assert!(header_location(&h)
            .unwrap_err()
            .message
            .contains("latitude"));
        assert_eq!(header_location(&HeaderMap::new()).unwrap(), None);
    }
}
