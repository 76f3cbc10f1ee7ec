//! The per-request routing decision: find and parse `X-Client-Location`, look the point up in the
//! service areas, choose serve-here or the handover target and build its URL.
//!
//! Run: `cargo bench -p geofaas-gateway --bench routing`

use std::hint::black_box;
use std::path::Path;

use axum::http::HeaderMap;
use criterion::{criterion_group, criterion_main, Criterion};
use geofaas_config::Topology;
use geofaas_gateway::headers::Control;
use geofaas_gateway::routing::{decide, handover_url, header_location, Route, LOCATION_HEADER};

fn routing(c: &mut Criterion) {
    let text = include_str!("../../examples/berlin.toml");
    let topology =
        Topology::parse(text, "berlin.toml", Path::new("../examples")).expect("example topology");
    let map = topology.service_map().expect("areas");
    let mut group = c.benchmark_group("route");
    for (name, loc) in [
        ("serve_here", "52.51,13.32"),
        ("handover_edge", "52.40,13.06"),
        ("handover_cloud", "51.50,-0.12"),
    ] {
        let mut headers = HeaderMap::new();
        headers.insert(LOCATION_HEADER, loc.parse().expect("header value"));
        group.bench_function(name, |b| {
            b.iter(|| {
                let control = Control::scan(black_box(&headers));
                let location = header_location(&control).expect("valid");
                match decide(&map, "tu-berlin", location.as_ref(), false) {
                    Route::Serve => None,
                    Route::Handover(target) => Some(handover_url(target, black_box("/fn/sieve"))),
                }
            })
        });
    }
    group.finish();
}

criterion_group!(benches, routing);
criterion_main!(benches);
