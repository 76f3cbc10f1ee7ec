//! The per-request routing decision: where is the client, and is this node responsible?
//!
//! Pure functions over the topology's [`ServiceMap`], so the hot path is benchmarked alone
//! (`benches/routing.rs`). Handover targets come only from the topology, never from the
//! request (no open redirect).
//!
//! A point routes to the node responsible for it. A geohash names a cell, which routes as a
//! whole ([`cell_owner`]): to the one node responsible for every point of it, and when the
//! cell spans several nodes' areas (a coarse geohash, or one on a boundary) the call is served
//! where it lands instead of handed over on a guess.

use geo::Rect;
use geofaas_config::{Geohash, LatLon, NodeEntry, Role, ServiceMap};

use crate::error::ApiError;
use crate::geo::{ClientLocation, Source};
use crate::headers::Control;

pub use geofaas_config::headers::CLIENT_LOCATION as LOCATION_HEADER;
pub use geofaas_config::headers::GEOHASH as GEOHASH_HEADER;

/// What to do with a call that reached this node.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Route<'a> {
    /// Serve it here.
    Serve,
    /// Hand the client over to this node with a 307.
    Handover(&'a NodeEntry),
}

/// The location the client's headers give: `X-Client-Location`, else `Sec-CH-Geohash`;
/// `Ok(None)` when it sent neither, a 400 naming the header and value when the first one
/// present is malformed.
pub fn header_location(headers: &Control<'_>) -> Result<Option<ClientLocation>, ApiError> {
    if let Some(value) = headers.client_location {
        let text = value.to_str().map_err(|_| {
            ApiError::bad_header(
                "X-Client-Location",
                &String::from_utf8_lossy(value.as_bytes()),
                "not ASCII text",
            )
        })?;
        let (point, accuracy) = LatLon::parse_with_accuracy(text)
            .map_err(|e| ApiError::bad_header("X-Client-Location", text, e))?;
        return Ok(Some(ClientLocation::point(point, Source::Header, accuracy)));
    }
    let Some(value) = headers.geohash else {
        return Ok(None);
    };
    let hash = Geohash::from_header(value.as_bytes()).map_err(|e| {
        ApiError::bad_header(
            "Sec-CH-Geohash",
            &String::from_utf8_lossy(value.as_bytes()),
            e,
        )
    })?;
    Ok(Some(ClientLocation {
        point: hash.centre(),
        source: Source::Geohash,
        accuracy_m: Some(hash.accuracy_m()),
        cell: Some(hash.cell()),
    }))
}

/// Decides where a call is served. `pinned` calls (offloaded by a peer, or a client's retry at
/// the cloud) are served where they land; calls without a location are served here, since DNS
/// already chose this node for the client; a cell that no single node answers for is served
/// here too ([`cell_owner`]).
pub fn decide<'a>(
    map: &'a ServiceMap,
    me: &str,
    location: Option<&ClientLocation>,
    pinned: bool,
) -> Route<'a> {
    if pinned {
        return Route::Serve;
    }
    let target = match location {
        None => return Route::Serve,
        Some(ClientLocation {
            cell: Some(cell), ..
        }) => match cell_owner(map, cell) {
            Some(owner) => owner,
            None => return Route::Serve,
        },
        Some(l) => map.responsible(l.point),
    };
    if target.id == me {
        Route::Serve
    } else {
        Route::Handover(target)
    }
}

/// The node responsible for every point of `cell`, if one is: the cloud when no edge's area
/// touches the cell, the edge whose area covers the cell when no other edge's area touches it,
/// else `None` (the cell spans several nodes' areas: an edge's and another edge's, or an
/// edge's and the rest of the world, which is the cloud's). A boundary counts as inside, as
/// for points, so a cell that only touches an area's edge spans it too.
pub fn cell_owner<'a>(map: &'a ServiceMap, cell: &Rect<f64>) -> Option<&'a NodeEntry> {
    let mut touching = map
        .nodes()
        .iter()
        .filter(|n| n.role == Role::Edge && n.area.touches(cell));
    match (touching.next(), touching.next()) {
        (None, _) => Some(map.cloud()),
        (Some(edge), None) if edge.area.covers(cell) => Some(edge),
        _ => None,
    }
}

/// The `Location` of a handover: the target's public URL with this request's path and query.
pub fn handover_url(target: &NodeEntry, path_and_query: &str) -> String {
    let base = target.public_url.as_str().trim_end_matches('/');
    format!("{base}{path_and_query}")
}

#[cfg(test)]
mod tests;
