//! The client's location as the gateway found it, and the geo context a function receives
//! as `X-Geo-*` request headers.
//!
//! The serving node writes the context, always ([`context`]), sent after the client's headers,
//! whose own `X-Geo-*` were dropped ([`crate::headers::for_function`]). A call that an edge offloaded
//! or forwarded carries the edge's `X-Geo-Source`, `X-Geo-Location` and `X-Geo-Accuracy`;
//! the node it lands on believes them only when the call's offload credential verified
//! ([`from_peer`]), since the client's address there is the edge's, and then writes the whole
//! context anew as the node that serves.

use axum::http::{HeaderMap, HeaderValue};
use bytes::Bytes;
use geo::Rect;
use geofaas_config::{LatLon, Role};

use geofaas_functions::Context;

use crate::headers::name::{
    GEO_ACCURACY, GEO_DISTANCE_KM, GEO_LOCATION, GEO_NODE, GEO_ROLE, GEO_SOURCE, REQUEST_ID,
};

/// Where the client's location came from (`X-Geo-Source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Its `X-Client-Location` header.
    Header,
    /// Its `Sec-CH-Geohash` header.
    Geohash,
    /// Its address, looked up in the GeoIP database.
    GeoIp,
}

impl Source {
    /// The `X-Geo-Source` value.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Header => "header",
            Source::Geohash => "geohash",
            Source::GeoIp => "geoip",
        }
    }

    fn parse(s: &[u8]) -> Option<Self> {
        match s {
            b"header" => Some(Source::Header),
            b"geohash" => Some(Source::Geohash),
            b"geoip" => Some(Source::GeoIp),
            _ => None,
        }
    }
}

/// A client's location.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientLocation {
    /// Where the client is taken to be (a geohash cell's centre).
    pub point: LatLon,
    /// Where that came from.
    pub source: Source,
    /// How far off `point` may be, in metres, when known.
    pub accuracy_m: Option<f64>,
    /// The geohash cell the client named, which routes as a whole
    /// ([`crate::routing::cell_owner`]); `None` for a point.
    pub cell: Option<Rect<f64>>,
}

impl ClientLocation {
    /// A point from `source`, without a cell.
    pub fn point(point: LatLon, source: Source, accuracy_m: Option<f64>) -> Self {
        Self {
            point,
            source,
            accuracy_m,
            cell: None,
        }
    }
}

/// The serving node as the context names it.
#[derive(Debug, Clone, Copy)]
pub struct Here<'a> {
    /// Its id, as a header value.
    pub id: &'a HeaderValue,
    /// Edge or cloud.
    pub role: Role,
    /// Where it stands (`None` when the topology no longer lists it).
    pub location: Option<LatLon>,
}

/// What the platform tells a function about a call served at `here` from a client at
/// `client`: the `X-Geo-*` headers (`X-Geo-Location`, `X-Geo-Accuracy` and
/// `X-Geo-Distance-Km` only when known), then the call's `X-Request-Id`.
pub fn context(
    here: Here<'_>,
    client: Option<&ClientLocation>,
    request_id: &HeaderValue,
) -> Context {
    let role = match here.role {
        Role::Edge => "edge",
        Role::Cloud => "cloud",
    };
    let mut out = Vec::with_capacity(7);
    out.push((GEO_NODE, here.id.clone()));
    out.push((GEO_ROLE, HeaderValue::from_static(role)));
    let source = client.map_or("none", |c| c.source.as_str());
    out.push((GEO_SOURCE, HeaderValue::from_static(source)));
    if let Some(client) = client {
        out.push((GEO_LOCATION, value(client.point.to_string())));
        if let Some(acc) = client.accuracy_m {
            out.push((GEO_ACCURACY, value(format!("{}", acc.ceil()))));
        }
        if let Some(node) = here.location {
            let km = client.point.distance_km(node);
            out.push((GEO_DISTANCE_KM, value(format!("{km:.3}"))));
        }
    }
    out.push((REQUEST_ID, request_id.clone()));
    out.into()
}

/// The client's location as the node that forwarded a call found it: its `X-Geo-Source`,
/// `X-Geo-Location` and `X-Geo-Accuracy`. Only for calls whose offload credential verified.
pub fn from_peer(headers: &HeaderMap) -> Option<ClientLocation> {
    let source = Source::parse(headers.get(GEO_SOURCE)?.as_bytes())?;
    let point = headers.get(GEO_LOCATION)?.to_str().ok()?.parse().ok()?;
    let accuracy_m = headers
        .get(GEO_ACCURACY)
        .and_then(|v| v.to_str().ok()?.parse::<f64>().ok())
        .filter(|a| a.is_finite() && *a >= 0.0);
    Some(ClientLocation::point(point, source, accuracy_m))
}

/// A header value from formatted ASCII, without copying it again.
fn value(text: String) -> HeaderValue {
    HeaderValue::from_maybe_shared(Bytes::from(text)).unwrap_or(HeaderValue::from_static(""))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn here(id: &HeaderValue) -> Here<'_> {
        Here {
            id,
            role: Role::Edge,
            location: Some(LatLon::new(-37.8136, 144.9631).unwrap()),
        }
    }

    #[test]
    fn a_known_location_gives_every_header_and_an_unknown_one_says_none() {
        let id = HeaderValue::from_static("cbd");
        let client = ClientLocation::point(
            LatLon::new(-37.7840, 144.9670).unwrap(),
            Source::Geohash,
            Some(75.2),
        );
        let rid = HeaderValue::from_static("r-1");
        let h: HeaderMap = context(here(&id), Some(&client), &rid)
            .iter()
            .cloned()
            .collect();
        assert_eq!(h[REQUEST_ID], "r-1");
        assert_eq!(h[GEO_NODE], "cbd");
        assert_eq!(h[GEO_ROLE], "edge");
        assert_eq!(h[GEO_SOURCE], "geohash");
        assert_eq!(h[GEO_LOCATION], "-37.784,144.967");
        assert_eq!(h[GEO_ACCURACY], "76");
        // cbd to carlton: 3.3 km (haversine, mean earth radius).
        assert_eq!(h[GEO_DISTANCE_KM], "3.309");
        assert_eq!(
            from_peer(&h),
            Some(ClientLocation {
                accuracy_m: Some(76.0),
                ..client
            })
        );

        let none: HeaderMap = context(here(&id), None, &rid).iter().cloned().collect();
        assert_eq!(none[GEO_SOURCE], "none");
        assert_eq!(none.len(), 4, "{none:?}");
        assert_eq!(from_peer(&none), None);
    }

    #[test]
    fn a_peers_claim_must_be_whole_and_valid() {
        let mut h = HeaderMap::new();
        h.insert(GEO_SOURCE, HeaderValue::from_static("header"));
        assert_eq!(from_peer(&h), None, "no location");
        h.insert(GEO_LOCATION, HeaderValue::from_static("91,0"));
        assert_eq!(from_peer(&h), None, "off the earth");
        h.insert(GEO_LOCATION, HeaderValue::from_static("52.5,13.4"));
        h.insert(GEO_ACCURACY, HeaderValue::from_static("-3"));
        let got = from_peer(&h).unwrap();
        assert_eq!((got.source, got.accuracy_m), (Source::Header, None));
        h.insert(GEO_SOURCE, HeaderValue::from_static("forged"));
        assert_eq!(from_peer(&h), None, "unknown source");
    }
}
