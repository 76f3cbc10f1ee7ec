//! Hand-computed cases of the latency model.

use super::*;

fn profile() -> FunctionProfile {
    FunctionProfile {
        cpu_ms: 100.0,
        cores: 0.5,
        memory_mb: 256.0,
        image_mb: 100.0,
        init_ms: 200.0,
        input_kb: 500.0,
        slo_ms: 300.0,
    }
}

fn node(lat: f64, lon: f64, ghz: f64) -> NodeSpec {
    NodeSpec {
        location: GeoPoint::new(lat, lon),
        cores: 8.0,
        ghz,
        memory_mb: 16_000.0,
        bandwidth_mbps: 800.0,
        access_ms: 0.0,
    }
}

#[test]
fn one_degree_of_latitude_is_111_km() {
    let d = GeoPoint::new(0.0, 0.0).distance_km(&GeoPoint::new(1.0, 0.0));
    // pi / 180 * 6371.0088
    assert!((d - 111.1951).abs() < 1e-3, "{d}");
    assert_eq!(
        GeoPoint::new(52.5, 13.3).distance_km(&GeoPoint::new(52.5, 13.3)),
        0.0
    );
}

#[test]
fn berlin_to_london_is_about_930_km() {
    let tu = GeoPoint::new(52.510057, 13.325043);
    let london = GeoPoint::new(51.498593, -0.176959);
    let d = tu.distance_km(&london);
    assert!((d - 930.0).abs() < 10.0, "{d}");
}

#[test]
fn cold_start_is_pull_plus_init() {
    // 100 MB * 8 / 800 Mbit/s = 1 s, plus 200 ms init.
    assert!((cold_start_ms(&profile(), 800.0) - 1200.0).abs() < 1e-9);
}

#[test]
fn compute_is_cpu_time_over_cores_scaled_by_clock() {
    // 100 ms / 0.5 cores = 200 ms at 3.0 GHz; 250 ms at 2.4 GHz.
    assert!((compute_ms(&profile(), 3.0) - 200.0).abs() < 1e-9);
    assert!((compute_ms(&profile(), 2.4) - 250.0).abs() < 1e-9);
}

#[test]
fn communication_is_size_over_rate_plus_propagation() {
    let link = LinkModel::default();
    // Co-located: 500 KB * 8 / 1000 Mbit/s = 4 ms, no propagation.
    assert!((comm_ms(&link, 500.0, 0.0, 0.0) - 4.0).abs() < 1e-9);
    // 1 km: rate 400 / (1 + 1) = 200 Mbit/s -> 20 ms, plus 1 km / 200 km/ms = 0.005 ms.
    assert!((comm_ms(&link, 500.0, 1.0, 0.0) - 20.005).abs() < 1e-9);
    // Access delay adds as is.
    assert!((comm_ms(&link, 500.0, 1.0, 12.5) - 32.505).abs() < 1e-9);
}

#[test]
fn breakdown_sums_the_three_terms() {
    let link = LinkModel::default();
    let n = node(0.0, 0.0, 3.0);
    let warm = latency(
        &link,
        &profile(),
        500.0,
        &GeoPoint::new(0.0, 0.0),
        &n,
        false,
    );
    assert_eq!(warm.cold_ms, 0.0);
    assert!((warm.total() - 204.0).abs() < 1e-9);
    let cold = latency(&link, &profile(), 500.0, &GeoPoint::new(0.0, 0.0), &n, true);
    assert!((cold.total() - 1404.0).abs() < 1e-9);
}
