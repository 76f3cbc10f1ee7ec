//! The responsible node of a point in fleets of 3, 100, 1 000 and 10 000 edges (circles of
//! 5 km on a grid over Europe, the layout of issue 44's measurement), through the service map's
//! index and through the scan over every node it replaced (the same rule written out here).
//!
//!   cargo bench -p geofaas-config --bench responsible

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use geofaas_config::area::AreaConfig;
use geofaas_config::{LatLon, NodeEntry, Role, ServiceMap};

fn fleet(edges: usize) -> ServiceMap {
    let side = (edges as f64).sqrt().ceil() as usize;
    let mut nodes: Vec<NodeEntry> = (0..edges)
        .map(|i| {
            // 0.2 degrees apart: about 14-22 km, wider than two 5 km radii.
            let (lat, lon) = (
                36.0 + (i / side) as f64 * 0.2,
                -9.0 + (i % side) as f64 * 0.2,
            );
            let center = LatLon { lat, lon };
            NodeEntry {
                id: format!("edge-{i}"),
                role: Role::Edge,
                location: center,
                area: AreaConfig::Circle {
                    center,
                    radius_km: 5.0,
                }
                .build(std::path::Path::new("."))
                .unwrap(),
                public_url: format!("https://10.0.{}.{}:8443", i / 250, i % 250)
                    .parse()
                    .unwrap(),
            }
        })
        .collect();
    nodes.push(NodeEntry {
        id: "cloud".into(),
        role: Role::Cloud,
        location: LatLon {
            lat: 50.1,
            lon: 8.7,
        },
        area: geofaas_config::Area::World,
        public_url: "https://10.1.0.1:8443".parse().unwrap(),
    });
    ServiceMap::new(nodes, 50.0).unwrap()
}

/// The rule as a scan over every node, as the map answered before its index.
fn by_scan(map: &ServiceMap, p: LatLon) -> &NodeEntry {
    let mut best: Option<(&NodeEntry, f64)> = None;
    for node in map.nodes() {
        if node.role != Role::Edge || !node.area.contains(p) {
            continue;
        }
        let d = p.distance_km(node.location);
        if best.is_none_or(|(_, bd)| d < bd) {
            best = Some((node, d));
        }
    }
    best.map_or_else(|| map.cloud(), |(n, _)| n)
}

fn responsible(c: &mut Criterion) {
    let mut group = c.benchmark_group("responsible");
    for edges in [3, 100, 1_000, 10_000] {
        let map = fleet(edges);
        // Inside the last edge's area, as the measured 307.
        let last = map.nodes()[edges - 1].location;
        let p = LatLon {
            lat: last.lat + 0.01,
            lon: last.lon,
        };
        assert_eq!(map.responsible(p).id, format!("edge-{}", edges - 1));
        group.bench_with_input(BenchmarkId::new("index", edges), &p, |b, p| {
            b.iter(|| map.responsible(black_box(*p)).id.len())
        });
        group.bench_with_input(BenchmarkId::new("scan", edges), &p, |b, p| {
            b.iter(|| by_scan(&map, black_box(*p)).id.len())
        });
    }
    group.finish();
}

criterion_group!(benches, responsible);
criterion_main!(benches);
