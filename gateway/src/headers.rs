//! Request headers at the gateway: the size limits that answer `431`, the headers a function
//! (and the cloud, on offload) gets, and the call's request id.
//!
//! The header names themselves live in [`geofaas_config::headers`], shared with the adapters
//! and the load generator.

use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use geofaas_config::headers::is_from_client_forwarded;

use crate::error::ApiError;

/// The platform's header names the call path uses, as [`HeaderName`]s: a `&str` name is parsed
/// at every insert or lookup, and copied to the heap at every insert (six allocations of a
/// proxied call went to that).
pub mod name {
    use axum::http::HeaderName;
    use geofaas_config::headers as h;

    /// [`h::CLIENT_LOCATION`].
    pub const CLIENT_LOCATION: HeaderName = HeaderName::from_static(h::CLIENT_LOCATION);
    /// [`h::GEOHASH`].
    pub const GEOHASH: HeaderName = HeaderName::from_static(h::GEOHASH);
    /// [`h::GEO_NODE`].
    pub const GEO_NODE: HeaderName = HeaderName::from_static(h::GEO_NODE);
    /// [`h::GEO_ROLE`].
    pub const GEO_ROLE: HeaderName = HeaderName::from_static(h::GEO_ROLE);
    /// [`h::GEO_SOURCE`].
    pub const GEO_SOURCE: HeaderName = HeaderName::from_static(h::GEO_SOURCE);
    /// [`h::GEO_LOCATION`].
    pub const GEO_LOCATION: HeaderName = HeaderName::from_static(h::GEO_LOCATION);
    /// [`h::GEO_ACCURACY`].
    pub const GEO_ACCURACY: HeaderName = HeaderName::from_static(h::GEO_ACCURACY);
    /// [`h::GEO_DISTANCE_KM`].
    pub const GEO_DISTANCE_KM: HeaderName = HeaderName::from_static(h::GEO_DISTANCE_KM);
    /// [`h::RETRY`].
    pub const RETRY: HeaderName = HeaderName::from_static(h::RETRY);
    /// [`h::OFFLOAD`].
    pub const OFFLOAD: HeaderName = HeaderName::from_static(h::OFFLOAD);
    /// [`h::IDEMPOTENCY_KEY`].
    pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static(h::IDEMPOTENCY_KEY);
    /// [`h::REQUEST_ID`].
    pub const REQUEST_ID: HeaderName = HeaderName::from_static(h::REQUEST_ID);
    /// [`h::SERVED_BY`].
    pub const SERVED_BY: HeaderName = HeaderName::from_static(h::SERVED_BY);
    /// [`h::COLD_START`].
    pub const COLD_START: HeaderName = HeaderName::from_static(h::COLD_START);
    /// [`h::PLACEMENT`].
    pub const PLACEMENT: HeaderName = HeaderName::from_static(h::PLACEMENT);
    /// [`h::PLACEMENT_REASON`].
    pub const PLACEMENT_REASON: HeaderName = HeaderName::from_static(h::PLACEMENT_REASON);
    /// [`h::SERVER_TIMING`].
    pub const SERVER_TIMING: HeaderName = HeaderName::from_static(h::SERVER_TIMING);
    /// See [`h::FUNCTION_VERSION`].
    pub const FUNCTION_VERSION: HeaderName = HeaderName::from_static(h::FUNCTION_VERSION);
    /// See [`h::CLIENT_ID`].
    pub const CLIENT_ID: HeaderName = HeaderName::from_static(h::CLIENT_ID);
    /// See [`h::OFFLOADED_FROM`].
    pub const OFFLOADED_FROM: HeaderName = HeaderName::from_static(h::OFFLOADED_FROM);
}

/// The request headers the call path reads, found in one pass over the request's headers.
/// A lookup by name hashes the name every time, and a call asks for about ten that are usually
/// absent: ten lookups cost a proxied call 1 100 instructions, the pass over its few headers a
/// tenth of that. Each field is the header's first value, as [`HeaderMap::get`] gives it.
#[derive(Debug, Default, Clone, Copy)]
pub struct Control<'a> {
    /// `X-Request-Id`.
    pub request_id: Option<&'a HeaderValue>,
    /// `X-Geofaas-Offload`: the credential of a call another node sent here.
    pub offload: Option<&'a HeaderValue>,
    /// `X-Client-Location`.
    pub client_location: Option<&'a HeaderValue>,
    /// `Sec-CH-Geohash`.
    pub geohash: Option<&'a HeaderValue>,
    /// `X-Geofaas-Retry`.
    pub retry: Option<&'a HeaderValue>,
    /// `Idempotency-Key`.
    pub idempotency_key: Option<&'a HeaderValue>,
    /// `X-Client-Id`.
    pub client_id: Option<&'a HeaderValue>,
    /// Whether any `Prefer` header came (read in full by [`crate::activations::wants_async`]).
    pub prefer: bool,
}

impl<'a> Control<'a> {
    /// The control headers among `headers`.
    pub fn scan(headers: &'a HeaderMap) -> Self {
        use geofaas_config::headers as h;
        let mut c = Self::default();
        for (name, value) in headers {
            let slot = match name.as_str() {
                h::REQUEST_ID => &mut c.request_id,
                h::OFFLOAD => &mut c.offload,
                h::CLIENT_LOCATION => &mut c.client_location,
                h::GEOHASH => &mut c.geohash,
                h::RETRY => &mut c.retry,
                h::IDEMPOTENCY_KEY => &mut c.idempotency_key,
                h::CLIENT_ID => &mut c.client_id,
                "prefer" => {
                    c.prefer = true;
                    continue;
                }
                _ => continue,
            };
            slot.get_or_insert(value);
        }
        c
    }
}

/// Limits on a request's header section, in bytes.
#[derive(Debug, Clone, Copy)]
pub struct HeaderLimits {
    /// The whole section, counted as HTTP/1.1 sends it (`name: value\r\n` per line).
    pub total: usize,
    /// One `name: value` line.
    pub line: usize,
    /// Number of header lines.
    pub count: usize,
}

/// Checks the request's headers against `limits`; `431` naming the first offending header.
pub fn check(headers: &HeaderMap, limits: HeaderLimits) -> Result<(), ApiError> {
    if headers.len() > limits.count {
        return Err(too_large(format!(
            "the request has {} headers; the limit is {}",
            headers.len(),
            limits.count
        )));
    }
    let mut total = 0usize;
    for (name, value) in headers {
        let line = name.as_str().len() + 2 + value.len();
        if line > limits.line {
            return Err(too_large(format!(
                "header {name} is {line} bytes; the limit per header is {} bytes",
                limits.line
            )));
        }
        total += line + 2;
    }
    if total > limits.total {
        return Err(too_large(format!(
            "the request headers are {total} bytes; the limit is {} bytes",
            limits.total
        )));
    }
    Ok(())
}

fn too_large(message: String) -> ApiError {
    ApiError::new(
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        "headers_too_large",
        message,
    )
}

/// The client's headers a function (and the cloud, on offload) sees: those that may travel,
/// without the `X-Geo-*` a client could forge and without its `X-Request-Id`. The node's own
/// context follows them, with the call's request id ([`crate::geo::context`],
/// [`geofaas_functions::Invocation::sent_headers`]).
pub fn for_function(headers: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::with_capacity(headers.len());
    let travels = |n: &str| is_from_client_forwarded(n) && n != geofaas_config::headers::REQUEST_ID;
    for (n, v) in headers.iter().filter(|(n, _)| travels(n.as_str())) {
        out.append(HeaderName::clone(n), v.clone());
    }
    out
}

/// `value` marked as never to be indexed by HTTP/2 header compression. For values that differ
/// on every answer (request id, `Server-Timing`): adding each to the HPACK table would evict
/// the entries that do repeat (`X-Served-By`, `Content-Type`) and cost a table insertion and
/// its evictions per answer, for an entry no later answer can reuse. HTTP/1.1 ignores the flag.
pub fn never_indexed(mut value: HeaderValue) -> HeaderValue {
    value.set_sensitive(true);
    value
}

/// The call's id: the client's `X-Request-Id` when it is 1-64 visible ASCII characters, else a
/// new random one.
pub fn request_id(sent: Option<&HeaderValue>) -> HeaderValue {
    if let Some(v) = sent {
        let b = v.as_bytes();
        if !b.is_empty() && b.len() <= 64 && b.iter().all(|c| c.is_ascii_graphic()) {
            return v.clone();
        }
    }
    // 16 hex digits written straight into the value's buffer (no formatter, no copy).
    let n = rand::random::<u64>();
    let id: Vec<u8> = (0..16)
        .rev()
        .map(|i| b"0123456789abcdef"[(n >> (4 * i)) as usize & 0xf])
        .collect();
    HeaderValue::from_maybe_shared(bytes::Bytes::from(id)).unwrap_or(HeaderValue::from_static("0"))
}

#[cfg(test)]
mod tests {
    use super::name::REQUEST_ID;
    use super::*;
    use crate::geo;

    const LIMITS: HeaderLimits = HeaderLimits {
        total: 100,
        line: 40,
        count: 4,
    };

    #[test]
    fn long_lines_and_large_sections_are_431() {
        let mut h = HeaderMap::new();
        h.insert("x-a", "a".repeat(30).parse().unwrap());
        assert!(check(&h, LIMITS).is_ok());
        h.insert("x-b", "b".repeat(40).parse().unwrap());
        let e = check(&h, LIMITS).unwrap_err();
        assert_eq!(e.status, 431);
        assert!(e.message.contains("x-b"), "{e}");
        h.remove("x-b");
        for n in ["x-c", "x-d", "x-e"] {
            h.insert(n, "c".repeat(30).parse().unwrap());
        }
        let e = check(&h, LIMITS).unwrap_err();
        assert!(e.message.contains("limit is 100"), "{e}");
        let mut many = HeaderMap::new();
        for n in ["a", "b", "c", "d", "e"] {
            many.insert(n, "1".parse().unwrap());
        }
        let e = check(&many, LIMITS).unwrap_err();
        assert!(e.message.contains("5 headers"), "{e}");
    }

    #[test]
    fn a_clients_geo_headers_are_replaced_by_the_nodes() {
        let mut h = HeaderMap::new();
        h.insert("x-geo-node", "forged".parse().unwrap());
        h.append("x-geo-node", "forged-too".parse().unwrap());
        h.insert("x-geo-location", "0,0".parse().unwrap());
        h.insert("x-geo-whatever", "1".parse().unwrap());
        h.insert("x-custom", "kept".parse().unwrap());
        h.insert(REQUEST_ID, "the-clients".parse().unwrap());
        let id = HeaderValue::from_static("cbd");
        let here = geo::Here {
            id: &id,
            role: geofaas_config::Role::Edge,
            location: None,
        };
        let mut call = geofaas_functions::Invocation::new("f", "", std::time::Duration::ZERO);
        call.headers = for_function(&h);
        call.context = geo::context(here, None, &id);
        let out: HeaderMap = call
            .sent_headers()
            .map(|(n, v)| (n.clone(), v.clone()))
            .collect();
        assert_eq!(
            out.get_all("x-geo-node").iter().collect::<Vec<_>>(),
            ["cbd"]
        );
        assert_eq!(out["x-geo-source"], "none");
        assert!(out.get("x-geo-location").is_none(), "{out:?}");
        assert!(out.get("x-geo-whatever").is_none(), "{out:?}");
        assert_eq!(out["x-custom"], "kept");
        // The call's id comes once, from the context (the node's choice of it).
        assert_eq!(out.get_all(REQUEST_ID).iter().collect::<Vec<_>>(), ["cbd"]);
    }

    #[test]
    fn request_ids_are_kept_when_sane_and_made_up_otherwise() {
        let mut h = HeaderMap::new();
        h.insert(REQUEST_ID, "abc-123".parse().unwrap());
        assert_eq!(request_id(Control::scan(&h).request_id), "abc-123");
        h.insert(REQUEST_ID, "a b".parse().unwrap());
        let id = request_id(Control::scan(&h).request_id);
        assert_eq!(id.len(), 16);
        assert!(id
            .as_bytes()
            .iter()
            .all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')));
        assert_ne!(request_id(None), request_id(None));
    }

    #[test]
    fn the_scan_finds_each_control_header_and_its_first_value_as_a_lookup_would() {
        let mut h = HeaderMap::new();
        h.insert("host", "x".parse().unwrap());
        for (name, value) in [
            ("x-request-id", "r1"),
            ("x-request-id", "r2"),
            ("x-geofaas-offload", "o"),
            ("x-client-location", "52.5,13.4"),
            ("sec-ch-geohash", "\"u33\""),
            ("x-geofaas-retry", "1"),
            ("idempotency-key", "k"),
            ("x-client-id", "phone"),
            ("prefer", "respond-async"),
        ] {
            h.append(HeaderName::from_static(name), value.parse().unwrap());
        }
        let c = Control::scan(&h);
        for (got, name) in [
            (c.request_id, "x-request-id"),
            (c.offload, "x-geofaas-offload"),
            (c.client_location, "x-client-location"),
            (c.geohash, "sec-ch-geohash"),
            (c.retry, "x-geofaas-retry"),
            (c.idempotency_key, "idempotency-key"),
            (c.client_id, "x-client-id"),
        ] {
            assert_eq!(got, h.get(name), "{name}");
        }
        assert_eq!(c.request_id.unwrap(), "r1");
        assert!(c.prefer);
        let empty = HeaderMap::new();
        let none = Control::scan(&empty);
        assert!(none.request_id.is_none() && none.client_id.is_none() && !none.prefer);
    }
}
