use std::time::{Duration, Instant};

use axum::http::{HeaderMap, HeaderValue};
use geofaas_config::{LatLon, PrewarmSettings, ServiceMap, Topology};

use super::*;

/// Two square edges side by side (west: 144.90-144.96, east: 144.96-145.02), the cloud.
fn map() -> ServiceMap {
    let node = |id: &str, role: &str, area: &str, lon: f64, port: u16| {
        format!(
            "[[node]]\nid = \"{id}\"\nrole = \"{role}\"\nlocation = {{ lat = -37.81, lon = {lon} }}\n\
             {area}\npublic_url = \"https://127.0.0.1:{port}\"\nlisten = \"127.0.0.1:{port}\"\n"
        )
    };
    let text = [
        node(
            "west",
            "edge",
            "area.wkt = \"ENVELOPE (144.90, 144.96, -37.78, -37.84)\"",
            144.93,
            1,
        ),
        node(
            "east",
            "edge",
            "area.wkt = \"ENVELOPE (144.96, 145.02, -37.78, -37.84)\"",
            144.99,
            2,
        ),
        node("cloud", "cloud", "area = \"world\"", 151.2, 3),
    ]
    .concat();
    Topology::parse(&text, "t.toml", std::path::Path::new("."))
        .unwrap()
        .service_map()
        .unwrap()
}

fn at(lon: f64) -> LatLon {
    LatLon { lat: -37.81, lon }
}

/// Calls one second apart from `id` at the given longitudes; what each call asked for.
fn walk(p: &Prewarm, map: &ServiceMap, id: Option<&[u8]>, lons: &[f64]) -> Vec<Option<Ask>> {
    let t0 = Instant::now();
    lons.iter()
        .enumerate()
        .map(|(i, &lon)| {
            let t = t0 + Duration::from_secs(i as u64);
            p.observe(map, "west", id, "echo", at(lon), t)
        })
        .collect()
}

/// Eastward at ~8.8 m/s, ending ~35 m before the boundary at 144.96.
const EASTWARD: [f64; 3] = [144.9594, 144.9595, 144.9596];

#[test]
fn a_client_walking_towards_the_next_area_asks_that_node_once() {
    let (map, p) = (map(), Prewarm::new(&PrewarmSettings::default()));
    let asks = walk(&p, &map, Some(b"id:phone"), &EASTWARD);
    assert_eq!(asks[0], None, "one fix is no heading");
    let ask = asks[1]
        .clone()
        .expect("the second fix predicts the crossing");
    assert_eq!(
        (ask.target.as_str(), ask.function.as_str()),
        ("east", "echo")
    );
    assert_eq!(asks[2], None, "asked once per client, function and node");
    assert_eq!(p.tracked(), 1);
    // Another client on the same path is asked for on its own.
    let other = walk(&p, &map, Some(b"id:tablet"), &EASTWARD);
    assert!(other[1].is_some());
    assert_eq!(p.tracked(), 2);
}

#[test]
fn nothing_is_tracked_without_an_id() {
    let (map, p) = (map(), Prewarm::new(&PrewarmSettings::default()));
    assert!(walk(&p, &map, None, &EASTWARD).iter().all(Option::is_none));
    assert_eq!(p.tracked(), 0);
    assert_eq!(client_id(None, None), None);
}

#[test]
fn a_standing_client_triggers_nothing() {
    let (map, p) = (map(), Prewarm::new(&PrewarmSettings::default()));
    // Ten calls from 9 m before the boundary, without moving.
    let still = [144.9599; 10];
    assert!(walk(&p, &map, Some(b"id:kiosk"), &still)
        .iter()
        .all(Option::is_none));
    assert_eq!(p.tracked(), 1, "tracked, but never predicted");
}

#[test]
fn walking_away_or_beyond_the_horizon_asks_nothing() {
    let map = map();
    let p = Prewarm::new(&PrewarmSettings::default());
    let westward: Vec<f64> = EASTWARD.iter().rev().copied().collect();
    assert!(walk(&p, &map, Some(b"id:a"), &westward)
        .iter()
        .all(Option::is_none));
    // 1 s ahead is too short to reach the boundary ~35 m away at ~9 m/s.
    let short = PrewarmSettings {
        prewarm_s: 1.0,
        ..PrewarmSettings::default()
    };
    let p = Prewarm::new(&short);
    assert!(walk(&p, &map, Some(b"id:a"), &EASTWARD)
        .iter()
        .all(Option::is_none));
    // Off: nothing tracked at all.
    let off = PrewarmSettings {
        prewarm_s: 0.0,
        ..PrewarmSettings::default()
    };
    let p = Prewarm::new(&off);
    assert!(walk(&p, &map, Some(b"id:a"), &EASTWARD)
        .iter()
        .all(Option::is_none));
    assert_eq!(p.tracked(), 0);
}

#[test]
fn the_track_is_bounded_and_old_fixes_fall_out() {
    let settings = PrewarmSettings {
        track_points: 3,
        forget_s: 10,
        ..PrewarmSettings::default()
    };
    let p = Prewarm::new(&settings);
    let t0 = Instant::now();
    let fix = |s: u64, lon: f64| Fix {
        at: t0 + Duration::from_secs(s),
        point: at(lon),
    };
    for (s, lon) in [(0, 144.91), (1, 144.92), (2, 144.93), (3, 144.94)] {
        p.remember(7, fix(s, lon));
    }
    let track = p.remember(7, fix(4, 144.95));
    assert_eq!(track.len(), 3);
    assert_eq!(track[0], fix(2, 144.93));
    // A fix 20 s later leaves only itself: the others are older than forget_s.
    assert_eq!(p.remember(7, fix(24, 144.95)), vec![fix(24, 144.95)]);
}

#[test]
fn the_client_id_is_its_header_else_its_api_key() {
    let mut h = HeaderMap::new();
    assert_eq!(
        client_id(h.get("x-client-id"), Some("app")),
        Some(b"key:app".to_vec())
    );
    h.insert("x-client-id", HeaderValue::from_static("phone-1"));
    assert_eq!(
        client_id(h.get("x-client-id"), Some("app")),
        Some(b"id:phone-1".to_vec())
    );
    assert_eq!(
        client_id(h.get("x-client-id"), None),
        Some(b"id:phone-1".to_vec())
    );
    h.insert("x-client-id", HeaderValue::from_static(""));
    assert_eq!(
        client_id(h.get("x-client-id"), None),
        None,
        "an empty id identifies no one"
    );
}

#[test]
fn a_client_is_forgotten_when_the_cache_is_full() {
    let settings = PrewarmSettings {
        max_clients: 2,
        ..PrewarmSettings::default()
    };
    let (map, p) = (map(), Prewarm::new(&settings));
    for id in [b"id:1", b"id:2", b"id:3", b"id:4"] {
        walk(&p, &map, Some(id), &EASTWARD[..1]);
    }
    assert!(p.tracked() <= 2, "{}", p.tracked());
}
