//! The connection hint on an answer: `Link: <https://next-node>; rel=preconnect` (RFC 8288,
//! the `preconnect` relation of W3C Resource Hints).
//!
//! Pre-warming makes the function warm where a client is heading, but the client's first call
//! there still pays a new TLS connection across the new link (one round trip for TLS 1.3
//! before the call's own, 25 ms to the cloud in the paper's topology). When the node serving a
//! tracked client predicts its crossing ([`super::Prewarm::foresee`]), the answer names the
//! origin of the node the `307` will name, so a client (a mobile app's HTTP stack, the
//! loadtest's `GeoClient`) can open a connection there ahead, in the background. The origin
//! comes from the topology's `public_url`, as the `307`'s `Location` does, and follows the same
//! rule (`placement::route`): a target the peer probes find down is replaced by the cloud.

use axum::http::HeaderValue;
use geofaas_config::NodeEntry;

/// `<scheme://host[:port]>; rel=preconnect` for `target`'s public URL (its origin: no path).
pub fn link(target: &NodeEntry) -> Option<HeaderValue> {
    let origin = target.public_url.origin();
    if !origin.is_tuple() {
        return None;
    }
    let value = format!("<{}>; rel=preconnect", origin.ascii_serialization());
    HeaderValue::from_str(&value).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use geofaas_config::Topology;

    fn node(public_url: &str) -> NodeEntry {
        let text = format!(
            "[[node]]\nid = \"cloud\"\nrole = \"cloud\"\nlocation = {{ lat = -33.87, lon = 151.21 }}\n\
             area = \"world\"\npublic_url = \"{public_url}\"\nlisten = \"127.0.0.1:3\"\n"
        );
        let map = Topology::parse(&text, "t.toml", std::path::Path::new("."))
            .unwrap()
            .service_map()
            .unwrap();
        map.node("cloud").unwrap().clone()
    }

    #[test]
    fn the_hint_names_the_origin_of_the_public_url() {
        let cases = [
            (
                "https://127.0.0.1:8443",
                "<https://127.0.0.1:8443>; rel=preconnect",
            ),
            (
                "https://cloud.geofaas.test/base/",
                "<https://cloud.geofaas.test>; rel=preconnect",
            ),
            (
                "https://[::1]:9443/x?y=1",
                "<https://[::1]:9443>; rel=preconnect",
            ),
        ];
        for (url, want) in cases {
            assert_eq!(link(&node(url)).unwrap(), want, "{url}");
        }
    }
}
