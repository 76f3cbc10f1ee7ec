//! HTTP header names of the platform's API and the one rule for which request headers travel
//! on to a function (or to the cloud on offload). Gateway, adapters and clients use these
//! names, so a grep finds every use and a typo does not compile.

/// Request: the client's position, `<lat>,<lon>[;acc=<metres>]`.
pub const CLIENT_LOCATION: &str = "x-client-location";
/// Request: the client's position as a geohash hint, a structured-field string such as
/// `"u336x"` (draft-pauly-httpbis-geohash-hint; read after [`CLIENT_LOCATION`]).
pub const GEOHASH: &str = "sec-ch-geohash";
/// Request: a client retrying at the cloud asks to be served there (`1`).
pub const RETRY: &str = "x-geofaas-retry";
/// Request: the node-to-node offload credential (HMAC-signed).
pub const OFFLOAD: &str = "x-geofaas-offload";
/// Request: makes a retried call return the first answer instead of running twice.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
/// Request and response: the call's id in logs (the client's own if it sent a valid one).
pub const REQUEST_ID: &str = "x-request-id";
/// Response: the node that ran the function.
pub const SERVED_BY: &str = "x-served-by";
/// Response: the edge that offloaded the call to the cloud.
pub const OFFLOADED_FROM: &str = "x-offloaded-from";
/// Response: `true` when a new instance was started for the call.
pub const COLD_START: &str = "x-cold-start";
/// Response: `true` when an idempotent call's first answer is replayed.
pub const IDEMPOTENT_REPLAYED: &str = "idempotent-replayed";
/// Response: where the call ran, `local-warm`, `local-new`, `neighbor` or `cloud`.
pub const PLACEMENT: &str = "x-placement";
/// Response: why it ran there (`ppo`, `greedy`, `no-policy`, `overloaded`, `forwarded`, ...;
/// the list is in docs/scheduler.md).
pub const PLACEMENT_REASON: &str = "x-placement-reason";
/// Response: route, queue, cold and exec durations in milliseconds.
pub const SERVER_TIMING: &str = "server-timing";
/// Response: the deployed version of the function that answered (`geofaas deploy`).
pub const FUNCTION_VERSION: &str = "x-function-version";
/// Request: a caller's stable id; during a percentage rollout it keeps the caller on one
/// version (else its API key or address does).
pub const CLIENT_ID: &str = "x-client-id";
/// Request header a trigger's call carries: what started it (`cron`). Only the platform sets
/// it: a client's own is dropped.
pub const TRIGGER: &str = "x-geofaas-trigger";
/// Request header on a cron trigger's call: the tick's id, `{function}/{schedule}/{time}`, one
/// per tick across the fleet.
pub const TICK: &str = "x-geofaas-tick";
/// Request header on a queue trigger's call: the NATS subject the message was published on.
pub const SUBJECT: &str = "x-geofaas-subject";

/// Function request: the id of the node that serves the call.
pub const GEO_NODE: &str = "x-geo-node";
/// Function request: that node's role, `edge` or `cloud`.
pub const GEO_ROLE: &str = "x-geo-role";
/// Function request: where the client's location came from: `header` (`X-Client-Location`),
/// `geohash` (`Sec-CH-Geohash`), `geoip` (its address in the GeoIP database) or `none`.
pub const GEO_SOURCE: &str = "x-geo-source";
/// Function request: the client's position, `<lat>,<lon>` in decimal degrees (when known).
pub const GEO_LOCATION: &str = "x-geo-location";
/// Function request: how far off that position may be, in whole metres rounded up (when
/// known: the client's `;acc=`, or a geohash cell's half-diagonal).
pub const GEO_ACCURACY: &str = "x-geo-accuracy";
/// Function request: great-circle distance from the client to the serving node, in km with
/// three decimals (when the position is known).
pub const GEO_DISTANCE_KM: &str = "x-geo-distance-km";
/// The prefix of the headers above: the platform sets them; a client's own never reach a
/// function.
pub const GEO_PREFIX: &str = "x-geo-";

/// Request headers that never reach a function: hop-by-hop and framing headers, credentials
/// (the platform's API key travels in `Authorization`; cookies do reach HTTP functions), and
/// the platform's own control headers (`prefer` decides async handling at the gateway; an
/// offloaded async call runs synchronously at the cloud).
const NOT_FORWARDED: [&str; 14] = [
    "host",
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "content-length",
    "authorization",
    "proxy-authorization",
    "prefer",
    OFFLOAD,
    RETRY,
];

/// Whether a request header (lower-case name) may travel to a function or the cloud. The
/// adapters apply it to headers the gateway already chose, so the platform's own `X-Geo-*`
/// pass; a client's `X-Geo-*` were dropped before ([`is_from_client_forwarded`]).
pub fn is_forwarded(name: &str) -> bool {
    !NOT_FORWARDED.contains(&name) && !name.starts_with("proxy-")
}

/// Whether a header the client sent may travel to a function: [`is_forwarded`], and not one
/// of the `X-Geo-*` the platform sets (a client could forge its node or position).
pub fn is_from_client_forwarded(name: &str) -> bool {
    is_forwarded(name) && !is_geo(name)
}

/// Whether a (lower-case) name is one of the platform's `X-Geo-*` headers or claims to be.
pub fn is_geo(name: &str) -> bool {
    name.starts_with(GEO_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_credentials_and_control_headers_stay_behind() {
        for h in [
            "connection",
            "authorization",
            "proxy-foo",
            OFFLOAD,
            "prefer",
        ] {
            assert!(!is_forwarded(h), "{h}");
        }
        for h in [
            "content-type",
            CLIENT_LOCATION,
            GEOHASH,
            IDEMPOTENCY_KEY,
            "cookie",
            "x-custom",
        ] {
            assert!(is_forwarded(h), "{h}");
            assert!(is_from_client_forwarded(h), "{h}");
        }
    }

    #[test]
    fn a_clients_geo_headers_stay_behind_and_the_platforms_pass_the_adapters() {
        for h in [
            GEO_NODE,
            GEO_ROLE,
            GEO_SOURCE,
            GEO_LOCATION,
            GEO_ACCURACY,
            GEO_DISTANCE_KM,
            "x-geo-anything",
        ] {
            assert!(!is_from_client_forwarded(h), "{h}");
            assert!(is_forwarded(h), "{h}");
        }
        // Only the prefix, not look-alikes.
        assert!(is_from_client_forwarded("x-geography"));
    }
}
