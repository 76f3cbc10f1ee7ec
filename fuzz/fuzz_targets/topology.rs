//! Topology files: never a panic; an accepted topology always builds its area lookup.
#![no_main]

use geofaas_config::Topology;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(t) = Topology::parse(text, "fuzz.toml", std::path::Path::new(".")) {
            let map = t.service_map().expect("an accepted topology builds its service map");
            for n in map.nodes() {
                let _ = map.responsible(n.location);
            }
        }
    }
});
