//! The cold start the scheduler charges a node before it measured the function there: what the
//! node's backend kind really pays to start an instance.
//!
//! The Scale paper's model (`image_mb / bandwidth + init_ms`, [`cold_start_ms`]) describes a
//! container platform pulling an image and starting a container: tinyFaaS, OpenWhisk and Lambda
//! pay that. The embedded runtime pulls no image and starts no container: a new instance is a
//! fork of an interpreter that already runs (the Python zygote) or a pre-started Node.js worker
//! that loads the module (`docs/deploy.md`, "Cold starts"), a few milliseconds. Charging it the
//! container's pull sent an idle edge's first calls to the cloud, whose modelled pull is ten
//! times faster.

use geofaas_config::{BackendConfig, NodeConfig};
use geofaas_scheduler::model::{cold_start_ms, FunctionProfile, NodeSpec};

use crate::profiles::{Facts, PRIOR_CALLS};

/// The embedded runtime's first call of a function nobody called yet, in ms: the P50 measured
/// for Python by `bench/deploy/coldstart.sh` (`docs/deploy.md`: python3 4.45 ms, Node.js
/// 2.06 ms; the slower of the two stands for both).
pub const LOCAL_FIRST_CALL_MS: f64 = 4.45;

/// How a node starts an instance, from the kind of its first backend (the one a call tries
/// first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColdKind {
    /// The embedded runtime: a fork, no image, no container.
    Fork,
    /// A container platform (tinyFaaS, OpenWhisk, Lambda): the model's image pull and init.
    Container,
}

impl ColdKind {
    /// The kind of `node`'s first backend; a node without backends runs nothing here, and its
    /// calls, if any, are a container platform's (the model's figure, the cautious one).
    pub fn of(node: &NodeConfig) -> Self {
        match node.backends.first() {
            Some(BackendConfig::Local(_)) => Self::Fork,
            _ => Self::Container,
        }
    }

    /// The cold start of a function with profile `p` at node `spec` before that node measured
    /// it: for the embedded runtime, what this edge measured of the function's own cold starts
    /// (`mine`, same runtime), else of any function's here (`typical_ms`), else
    /// [`LOCAL_FIRST_CALL_MS`]; for a container platform, the model's pull and init.
    pub fn cold_ms(
        self,
        p: &FunctionProfile,
        spec: &NodeSpec,
        mine: Option<Facts>,
        typical_ms: Option<f64>,
    ) -> f64 {
        match self {
            // What this node measured of the function once it covers enough calls; before,
            // a fork (what this node's instances took to start, else the benchmark's figure)
            // plus the function's own configured initialisation, which the embedded runtime
            // pays too (its first call imports the function).
            Self::Fork => mine
                .filter(|f| f.calls >= PRIOR_CALLS)
                .and_then(|f| f.cold_ms)
                .unwrap_or_else(|| typical_ms.unwrap_or(LOCAL_FIRST_CALL_MS) + p.init_ms),
            Self::Container => cold_start_ms(p, spec.bandwidth_mbps),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use geofaas_config::Topology;

    fn profile() -> FunctionProfile {
        FunctionProfile {
            cpu_ms: 10.0,
            cores: 1.0,
            memory_mb: 64.0,
            image_mb: 2000.0,
            init_ms: 30.0,
            input_kb: 1.0,
            slo_ms: 200.0,
        }
    }

    fn spec(bandwidth_mbps: f64) -> NodeSpec {
        NodeSpec {
            location: geofaas_scheduler::model::GeoPoint::new(38.7, -9.1),
            cores: 4.0,
            ghz: 3.0,
            memory_mb: 8000.0,
            bandwidth_mbps,
            access_ms: 0.0,
        }
    }

    #[test]
    fn the_embedded_runtime_pays_a_fork_and_a_container_platform_its_pull() {
        let p = profile();
        // 2 GB over 1 Gbit/s is 16 s of pull, plus 30 ms of init.
        assert_eq!(
            ColdKind::Container.cold_ms(&p, &spec(1000.0), None, None),
            16_030.0
        );
        assert_eq!(
            ColdKind::Fork.cold_ms(&p, &spec(1000.0), None, None),
            LOCAL_FIRST_CALL_MS + p.init_ms
        );
        // The bandwidth and the image do not enter a fork; the function's own init does.
        assert_eq!(
            ColdKind::Fork.cold_ms(&p, &spec(10.0), None, None),
            LOCAL_FIRST_CALL_MS + p.init_ms
        );
    }

    #[test]
    fn a_fork_takes_what_this_node_measured_first() {
        let p = profile();
        let mine = |calls, cold_ms| {
            Some(Facts {
                calls,
                warm_ms: 3.0,
                cold_ms,
                first_only: false,
            })
        };
        let s = spec(1000.0);
        let enough = PRIOR_CALLS;
        assert_eq!(
            ColdKind::Fork.cold_ms(&p, &s, mine(enough, Some(7.5)), Some(2.0)),
            7.5
        );
        // Fewer calls than the prior needs: a fork plus the configured initialisation.
        assert_eq!(
            ColdKind::Fork.cold_ms(&p, &s, mine(enough - 1, Some(7.5)), Some(2.0)),
            2.0 + p.init_ms
        );
        assert_eq!(
            ColdKind::Fork.cold_ms(&p, &s, mine(enough, None), Some(2.0)),
            2.0 + p.init_ms
        );
        // A container platform's figure is the model's whatever this node measured.
        assert_eq!(
            ColdKind::Container.cold_ms(&p, &s, mine(enough, Some(7.5)), Some(2.0)),
            16_030.0
        );
    }

    #[test]
    fn the_kind_is_the_first_backends() {
        let text = r#"
zone = "lisbon.test."
[[node]]
id = "alfama"
role = "edge"
location = { lat = 38.711, lon = -9.13 }
area.circle = { center = { lat = 38.711, lon = -9.13 }, radius_km = 5 }
public_url = "https://127.0.0.1:1"
listen = "127.0.0.1:1"
[[node.backend]]
kind = "local"
[[node]]
id = "cloud"
role = "cloud"
location = { lat = 50.11, lon = 8.68 }
area = "world"
public_url = "https://127.0.0.1:2"
listen = "127.0.0.1:2"
[[node.backend]]
kind = "tinyfaas"
url = "http://127.0.0.1:8000"
manager_url = "http://127.0.0.1:8080"
[[node.backend]]
kind = "local"
"#;
        let t = Topology::parse(text, "lisbon.toml", std::path::Path::new(".")).unwrap();
        assert_eq!(ColdKind::of(&t.nodes[0]), ColdKind::Fork);
        assert_eq!(ColdKind::of(&t.nodes[1]), ColdKind::Container);
    }
}
