use super::*;
use axum::http::HeaderMap;
use geofaas_config::Topology;

fn map() -> ServiceMap {
    let text = include_str!("../../../examples/berlin.toml");
    Topology::parse(text, "berlin.toml", std::path::Path::new("../examples"))
        .unwrap()
        .service_map()
        .unwrap()
}

fn loc(s: &str) -> Option<ClientLocation> {
    Some(ClientLocation::point(
        s.parse().unwrap(),
        Source::Header,
        None,
    ))
}

#[test]
fn serve_handover_and_pinned() {
    let map = map();
    assert_eq!(
        decide(&map, "tu-berlin", loc("52.51,13.32").as_ref(), false),
        Route::Serve
    );
    let Route::Handover(t) = decide(&map, "tu-berlin", loc("52.40,13.06").as_ref(), false) else {
        panic!()
    };
    assert_eq!(
        handover_url(t, "/fn/sieve?x=1"),
        "https://127.0.0.12:8443/fn/sieve?x=1"
    );
    let Route::Handover(t) = decide(&map, "tu-berlin", loc("51.5,-0.12").as_ref(), false) else {
        panic!()
    };
    assert_eq!(t.id, "cloud");
    assert_eq!(
        decide(&map, "cloud", loc("51.5,-0.12").as_ref(), false),
        Route::Serve
    );
    let Route::Handover(t) = decide(&map, "cloud", loc("52.51,13.32").as_ref(), false) else {
        panic!()
    };
    assert_eq!(t.id, "tu-berlin");
    assert_eq!(
        decide(&map, "cloud", loc("52.51,13.32").as_ref(), true),
        Route::Serve
    );
    assert_eq!(decide(&map, "potsdam", None, false), Route::Serve);
}

#[test]
fn malformed_location_names_header_and_value() {
    let mut h = HeaderMap::new();
    h.insert(LOCATION_HEADER, "52.5;13.3".parse().unwrap());
    let err = header_location(&Control::scan(&h)).unwrap_err();
    assert_eq!(err.status, 400);
    assert!(
        err.message.contains("X-Client-Location") && err.message.contains("52.5;13.3"),
        "{err}"
    );
    h.insert(LOCATION_HEADER, "91,0".parse().unwrap());
    assert!(header_location(&Control::scan(&h))
        .unwrap_err()
        .message
        .contains("latitude"));
    assert_eq!(header_location(&Control::default()).unwrap(), None);
}

/// cbd (2 km circle), carlton (1 km circle, 3.3 km north) and the cloud in Sydney.
fn melbourne() -> ServiceMap {
    let node = |id: &str, role: &str, area: &str, lat: f64, lon: f64, port: u16| {
        format!(
            "[[node]]\nid = \"{id}\"\nrole = \"{role}\"\nlocation = {{ lat = {lat}, lon = {lon} }}\n\
             {area}\npublic_url = \"https://127.0.0.1:{port}\"\nlisten = \"127.0.0.1:{port}\"\n\n"
        )
    };
    let text = [
        "zone = \"melbourne.test.\"\n\n".to_owned(),
        node(
            "cbd",
            "edge",
            "area.circle = { center = { lat = -37.8136, lon = 144.9631 }, radius_km = 2 }",
            -37.8136,
            144.9631,
            1,
        ),
        node(
            "carlton",
            "edge",
            "area.circle = { center = { lat = -37.7840, lon = 144.9670 }, radius_km = 1 }",
            -37.7840,
            144.9670,
            2,
        ),
        node("cloud", "cloud", "area = \"world\"", -33.87, 151.21, 3),
    ]
    .concat();
    Topology::parse(&text, "melbourne.toml", std::path::Path::new("."))
        .unwrap()
        .service_map()
        .unwrap()
}

fn hash(g: &str) -> ClientLocation {
    let mut h = HeaderMap::new();
    h.insert(
        crate::headers::name::GEOHASH,
        format!("\"{g}\"").parse().unwrap(),
    );
    header_location(&Control::scan(&h)).unwrap().unwrap()
}

fn owner(map: &ServiceMap, g: &str) -> Option<String> {
    cell_owner(map, &hash(g).cell.unwrap()).map(|n| n.id.clone())
}

#[test]
fn a_cell_goes_to_the_one_node_that_answers_for_all_of_it() {
    let map = melbourne();
    for (g, want, why) in [
        ("r1r14c9", Some("carlton"), "150 m cell in carlton"),
        (
            "r1r14c",
            Some("carlton"),
            "1 km cell inside carlton's circle",
        ),
        ("r1r0fsn", Some("cbd"), "150 m cell in the cbd"),
        ("r1r0fs", Some("cbd"), "1 km cell inside the cbd's circle"),
        ("r3gx2", Some("cloud"), "Sydney: no edge near"),
        ("u", Some("cloud"), "Europe"),
        ("r1r0f8", None, "1 km cell across the cbd's southern edge"),
        ("r1r0f", None, "5 km cell: the cbd and the world outside it"),
        ("r1r0", None, "40 km cell: both edges and the world"),
        ("r1", None, "coarser still"),
    ] {
        assert_eq!(owner(&map, g).as_deref(), want, "{g}: {why}");
    }
}

#[test]
fn a_geohash_routes_like_its_cell_and_a_spanning_one_is_served_where_it_lands() {
    let map = melbourne();
    let fine_carlton = hash("r1r14c9");
    let Route::Handover(t) = decide(&map, "cbd", Some(&fine_carlton), false) else {
        panic!("a fine geohash in carlton's area is handed over")
    };
    assert_eq!(t.id, "carlton");
    assert_eq!(
        decide(&map, "carlton", Some(&fine_carlton), false),
        Route::Serve
    );
    let coarse = hash("r1r0");
    for me in ["cbd", "carlton", "cloud"] {
        assert_eq!(decide(&map, me, Some(&coarse), false), Route::Serve, "{me}");
    }
    // The same centre as a point is handed over: the cell, not its centre, decides.
    let centre = ClientLocation {
        cell: None,
        ..coarse
    };
    assert!(matches!(
        decide(&map, "carlton", Some(&centre), false),
        Route::Handover(_)
    ));
    let Route::Handover(t) = decide(&map, "cbd", Some(&hash("r3gx2")), false) else {
        panic!("Sydney goes to the cloud")
    };
    assert_eq!(t.id, "cloud");
    assert_eq!(
        decide(&map, "cbd", Some(&fine_carlton), true),
        Route::Serve,
        "pinned"
    );
}

#[test]
fn the_geohash_is_read_after_the_location_header_and_named_when_bad() {
    let mut h = HeaderMap::new();
    h.insert(
        crate::headers::name::GEOHASH,
        "\"r1r14c9\"".parse().unwrap(),
    );
    let got = header_location(&Control::scan(&h)).unwrap().unwrap();
    assert_eq!(got.source, Source::Geohash);
    assert!(got.accuracy_m.unwrap() > 50.0 && got.accuracy_m.unwrap() < 150.0);
    assert!(
        got.point
            .distance_km(LatLon::new(-37.784, 144.967).unwrap())
            < 0.2
    );
    h.insert(LOCATION_HEADER, "52.5,13.4;acc=30".parse().unwrap());
    let got = header_location(&Control::scan(&h)).unwrap().unwrap();
    assert_eq!((got.source, got.accuracy_m), (Source::Header, Some(30.0)));
    assert_eq!(got.cell, None);
    h.remove(LOCATION_HEADER);
    for bad in [
        "r1r14c9",
        "\"r1r14ca\"",
        "\"\"",
        "\"R1R14C9\"",
        "\"r1r14c9r1r14c\"",
    ] {
        h.insert(crate::headers::name::GEOHASH, bad.parse().unwrap());
        let err = header_location(&Control::scan(&h)).unwrap_err();
        assert_eq!(err.status, 400, "{bad}");
        assert!(
            err.message.contains("Sec-CH-Geohash") && err.message.contains(bad.trim_matches('"')),
            "{bad}: {err}"
        );
    }
}

#[test]
fn the_readmes_berlin_geohashes_route_as_it_says() {
    let map = map();
    // u336x: a 5 km cell inside tu-berlin's hexagon.
    assert_eq!(owner(&map, "u336x").as_deref(), Some("tu-berlin"));
    assert_eq!(
        decide(&map, "tu-berlin", Some(&hash("u336x")), false),
        Route::Serve
    );
    let Route::Handover(t) = decide(&map, "tu-berlin", Some(&hash("u33615n")), false) else {
        panic!("a 150 m cell in Potsdam is handed over")
    };
    assert_eq!(t.id, "potsdam");
    let Route::Handover(t) = decide(&map, "tu-berlin", Some(&hash("gcpuv")), false) else {
        panic!("London goes to the cloud")
    };
    assert_eq!(t.id, "cloud");
    // u33: 150 km over both hexagons and the country around them.
    assert_eq!(
        decide(&map, "potsdam", Some(&hash("u33")), false),
        Route::Serve
    );
}
