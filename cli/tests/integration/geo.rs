//! Location hints and the geo context, through real nodes on a Melbourne topology and the real
//! `curl` over HTTP/1.1 and HTTP/2: `Sec-CH-Geohash` routes like its cell (a cell spanning
//! several areas is served where it lands, a malformed one is `400`), and a function sees the
//! serving node's `X-Geo-*` headers, never a client's, also when its call is offloaded to the
//! cloud and when it runs on tinyFaaS; the load generator's client sends either header.

use std::collections::HashMap;
use std::process::Command;

use geofaas_config::LatLon;
use geofaas_loadtest::{CallRequest, ClientConfig, GeoClient, LocationHeader};
use geofaas_test_support::tinyfaas::{FakeFunction, FakeTinyfaas};

use crate::answer::Answer;
use crate::cluster::Cluster;

/// Inside the cbd's area, and its node's own location.
const CBD: &str = "-37.8136,144.9631";
/// 150 m cells: in carlton's area, in the cbd's.
const FINE_CARLTON: &str = "\"r1r14c9\"";
const FINE_CBD: &str = "\"r1r0fsn\"";
/// A 40 km cell over both edges and the country around them.
const COARSE: &str = "\"r1r0\"";
/// A 5 km cell in Sydney, far from either edge.
const SYDNEY: &str = "\"r3gx2\"";
/// Headers a client sends to pass itself off as somewhere, or as some node, else.
const FORGED: [&str; 5] = [
    "X-Geo-Node: forged",
    "X-Geo-Role: cloud",
    "X-Geo-Source: geoip",
    "X-Geo-Location: 0,0",
    "X-Geo-Distance-Km: 0",
];

/// cbd (2 km circle) on the embedded runtime, carlton (1 km circle, 3.3 km north) on tinyFaaS,
/// the cloud in Sydney with `geocloud` besides `geo`.
fn topology(ports: &[u16], tiny: &FakeTinyfaas) -> String {
    let node = |id: &str, role: &str, area: &str, lat: f64, lon: f64, port: u16, backends: &str| {
        format!(
            "[[node]]\nid = \"{id}\"\nrole = \"{role}\"\nlocation = {{ lat = {lat}, lon = {lon} }}\n\
             {area}\npublic_url = \"https://127.0.0.1:{port}\"\nlisten = \"127.0.0.1:{port}\"\n{backends}\n"
        )
    };
    let local =
        |dir: &str| format!("[[node.backend]]\nkind = \"local\"\nfunctions_dir = \"{dir}\"\n");
    let tinyfaas = format!(
        "[[node.backend]]\nkind = \"tinyfaas\"\nurl = \"{}\"\nmanager_url = \"{}\"\n",
        tiny.proxy_url(),
        tiny.manager_url()
    );
    [
        node(
            "cbd",
            "edge",
            "area.circle = { center = { lat = -37.8136, lon = 144.9631 }, radius_km = 2 }",
            -37.8136,
            144.9631,
            ports[0],
            &local("geo-functions"),
        ),
        node(
            "carlton",
            "edge",
            "area.circle = { center = { lat = -37.7840, lon = 144.9670 }, radius_km = 1 }",
            -37.7840,
            144.9670,
            ports[1],
            &tinyfaas,
        ),
        node(
            "cloud",
            "cloud",
            "area = \"world\"",
            -33.87,
            151.21,
            ports[2],
            &(local("geo-functions") + &local("geo-cloud-functions")),
        ),
        "[[function]]\nname = \"geo\"\n\n[[function]]\nname = \"geocloud\"\n".to_owned(),
    ]
    .concat()
}

async fn melbourne() -> (Cluster, FakeTinyfaas) {
    let tiny = FakeTinyfaas::start([("geo", FakeFunction::Reply("tinyfaas geo".into()))])
        .await
        .unwrap();
    let c = Cluster::start_with(|ports| topology(ports, &tiny)).await;
    (c, tiny)
}

/// The `geo` function's answer.
trait GeoAnswer {
    fn geo(&self) -> HashMap<String, String>;
}

impl GeoAnswer for Answer {
    /// The `geo` function's answer as `name -> value`.
    fn geo(&self) -> HashMap<String, String> {
        assert_eq!(self.status, 200, "{self:?}");
        self.body
            .lines()
            .filter_map(|l| l.split_once(": "))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }
}

/// `curl -i` of `path` at `node` with the request headers `headers`.
fn curl(c: &Cluster, node: &str, path: &str, h2: bool, headers: &[&str]) -> Answer {
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "-i", if h2 { "--http2" } else { "--http1.1" }])
        .arg("--cacert")
        .arg(c.ca_file.path());
    for h in headers {
        cmd.args(["-H", h]);
    }
    let out = cmd
        .args(["-d", "hi"])
        .arg(format!("{}{path}", c.url(node)))
        .output()
        .expect("curl runs");
    Answer::parse(&String::from_utf8_lossy(&out.stdout))
}

fn geohash(value: &str) -> String {
    format!("Sec-CH-Geohash: {value}")
}

fn map(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn geohash_hints_route_like_their_cell_over_h1_and_h2() {
    let (c, _tiny) = melbourne().await;
    for h2 in [false, true] {
        let fine = curl(&c, "cbd", "/fn/geo?x=1", h2, &[&geohash(FINE_CARLTON)]);
        assert_eq!(fine.status, 307, "h2={h2}: {fine:?}");
        assert_eq!(
            fine.header("location"),
            format!("{}/fn/geo?x=1", c.url("carlton"))
        );
        assert_eq!(fine.header("x-served-by"), "cbd");
        let back = curl(&c, "carlton", "/fn/geo", h2, &[&geohash(FINE_CBD)]);
        assert_eq!(back.status, 307, "h2={h2}: {back:?}");
        assert_eq!(back.header("location"), format!("{}/fn/geo", c.url("cbd")));
        let far = curl(&c, "cbd", "/fn/geo", h2, &[&geohash(SYDNEY)]);
        assert_eq!(far.status, 307, "h2={h2}: {far:?}");
        assert_eq!(far.header("location"), format!("{}/fn/geo", c.url("cloud")));

        // The coarse cell covers both edges: each serves it where it lands, and so does the cloud.
        let here = curl(&c, "cbd", "/fn/geo", h2, &[&geohash(COARSE)]);
        assert_eq!(here.header("x-served-by"), "cbd", "h2={h2}: {here:?}");
        assert_eq!(here.geo()["x-geo-source"], "geohash");
        let there = curl(&c, "carlton", "/fn/geo", h2, &[&geohash(COARSE)]);
        assert_eq!(there.status, 200, "h2={h2}: {there:?}");
        assert_eq!(there.header("x-served-by"), "carlton");
        assert_eq!(there.body, "tinyfaas geo");
        let cloud = curl(&c, "cloud", "/fn/geo", h2, &[&geohash(COARSE)]);
        assert_eq!(cloud.header("x-served-by"), "cloud", "h2={h2}: {cloud:?}");

        // X-Client-Location comes first: a point in the cbd is served there, whatever the hint.
        let both = curl(
            &c,
            "cbd",
            "/fn/geo",
            h2,
            &[&format!("X-Client-Location: {CBD}"), &geohash(FINE_CARLTON)],
        );
        assert_eq!(both.geo()["x-geo-source"], "header", "h2={h2}");

        for bad in [
            "r1r14c9",
            "\"r1r14ca\"",
            "\"R1R14C9\"",
            "\"\"",
            "\"r1r14c9r1r14c\"",
        ] {
            let answer = curl(&c, "cbd", "/fn/geo", h2, &[&geohash(bad)]);
            assert_eq!(answer.status, 400, "h2={h2} {bad}: {answer:?}");
            assert!(
                answer.body.contains("\"bad_header\"") && answer.body.contains("Sec-CH-Geohash"),
                "h2={h2} {bad}: {}",
                answer.body
            );
        }
    }
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn functions_see_the_serving_nodes_geo_context_and_never_a_clients() {
    let (c, tiny) = melbourne().await;
    let located = format!("X-Client-Location: {CBD};acc=12");
    let with_forged = |first: &str| -> Vec<String> {
        std::iter::once(first.to_owned())
            .chain(FORGED.iter().map(|h| (*h).to_owned()))
            .collect()
    };
    let headers = with_forged(&located);
    let headers: Vec<&str> = headers.iter().map(String::as_str).collect();

    for h2 in [false, true] {
        let served = curl(&c, "cbd", "/fn/geo", h2, &headers);
        assert_eq!(served.header("x-served-by"), "cbd");
        assert_eq!(
            served.geo(),
            map(&[
                ("x-geo-node", "cbd"),
                ("x-geo-role", "edge"),
                ("x-geo-source", "header"),
                ("x-geo-location", CBD),
                ("x-geo-accuracy", "12"),
                ("x-geo-distance-km", "0.000"),
            ]),
            "h2={h2}"
        );

        // No location: the node and `none`, and none of the client's claims.
        let unknown = curl(&c, "cbd", "/fn/geo", h2, &FORGED);
        assert_eq!(
            unknown.geo(),
            map(&[
                ("x-geo-node", "cbd"),
                ("x-geo-role", "edge"),
                ("x-geo-source", "none"),
            ]),
            "h2={h2}"
        );

        // A geohash: its cell's centre, the cell's half-diagonal, the distance from there.
        let hinted = curl(&c, "cbd", "/fn/geo", h2, &[&geohash(FINE_CBD)]).geo();
        assert_eq!(hinted["x-geo-source"], "geohash");
        let centre: LatLon = hinted["x-geo-location"].parse().unwrap();
        let cbd: LatLon = CBD.parse().unwrap();
        assert!(centre.distance_km(cbd) < 0.15, "{hinted:?}");
        let accuracy: f64 = hinted["x-geo-accuracy"].parse().unwrap();
        assert!((50.0..150.0).contains(&accuracy), "{hinted:?}");
        assert_eq!(
            hinted["x-geo-distance-km"],
            format!("{:.3}", centre.distance_km(cbd))
        );

        // Offloaded (cbd has no `geocloud`): the cloud serves it and says so, with the
        // client's location as cbd found it; the client's forged headers went nowhere.
        let offloaded = curl(&c, "cbd", "/fn/geocloud", h2, &headers);
        assert_eq!(offloaded.header("x-served-by"), "cloud", "{offloaded:?}");
        assert_eq!(offloaded.header("x-offloaded-from"), "cbd");
        let sydney = LatLon::new(-33.87, 151.21).unwrap();
        let km = format!("{:.3}", cbd.distance_km(sydney));
        assert_eq!(
            offloaded.geo(),
            map(&[
                ("x-geo-node", "cloud"),
                ("x-geo-role", "cloud"),
                ("x-geo-source", "header"),
                ("x-geo-location", CBD),
                ("x-geo-accuracy", "12"),
                ("x-geo-distance-km", &km),
            ]),
            "h2={h2}"
        );
        let hinted = with_forged(&geohash(FINE_CBD));
        let hinted: Vec<&str> = hinted.iter().map(String::as_str).collect();
        let offloaded = curl(&c, "cbd", "/fn/geocloud", h2, &hinted).geo();
        assert_eq!(
            (
                offloaded["x-geo-node"].as_str(),
                offloaded["x-geo-source"].as_str()
            ),
            ("cloud", "geohash"),
            "{offloaded:?}"
        );
        assert_eq!(offloaded["x-geo-location"], centre.to_string());

        // At the cloud directly, a forged offload credential does not make a client's X-Geo-*
        // believed.
        let mut direct = vec!["X-GeoFaaS-Offload: cbd;1;00ff"];
        direct.extend(FORGED);
        assert_eq!(
            curl(&c, "cloud", "/fn/geocloud", h2, &direct).geo(),
            map(&[
                ("x-geo-node", "cloud"),
                ("x-geo-role", "cloud"),
                ("x-geo-source", "none"),
            ]),
            "h2={h2}"
        );
    }

    // tinyFaaS at carlton gets the context as request headers, the forged ones dropped.
    let carlton = with_forged("X-Client-Location: -37.7840,144.9670");
    let carlton: Vec<&str> = carlton.iter().map(String::as_str).collect();
    let answer = curl(&c, "carlton", "/fn/geo", false, &carlton);
    assert_eq!(answer.body, "tinyfaas geo", "{answer:?}");
    let calls = tiny.calls();
    let (name, sent, _) = calls.last().expect("tinyFaaS was called");
    assert_eq!(name, "geo");
    let all = |h: &str| -> Vec<&str> {
        sent.get_all(h)
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect()
    };
    assert_eq!(all("x-geo-node"), ["carlton"]);
    assert_eq!(all("x-geo-role"), ["edge"]);
    assert_eq!(all("x-geo-source"), ["header"]);
    assert_eq!(all("x-geo-location"), ["-37.784,144.967"]);
    assert_eq!(all("x-geo-distance-km"), ["0.000"]);
    assert!(all("x-geo-accuracy").is_empty(), "no accuracy was given");
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_load_generators_client_can_send_a_geohash_instead() {
    let (c, _tiny) = melbourne().await;
    let ca = std::fs::read(c.ca_file.path()).unwrap();
    let in_carlton = LatLon::new(-37.7840, 144.9670).unwrap();
    let call = CallRequest {
        function: "geo".into(),
        location: Some(in_carlton),
        ..Default::default()
    };
    // Entering at the cbd: 7 characters (a 150 m cell) are handed over to carlton, 4 (a 40 km
    // cell over both edges) are served where they land; X-Client-Location is handed over too.
    for (how, served_by, redirects) in [
        (LocationHeader::Geohash(7), "carlton", 1),
        (LocationHeader::Geohash(4), "cbd", 0),
        (LocationHeader::ClientLocation, "carlton", 1),
    ] {
        let mut cfg = ClientConfig::new(
            c.url("cbd").parse().unwrap(),
            c.url("cloud").parse().unwrap(),
        );
        cfg.ca_pem = Some(ca.clone());
        cfg.location_header = how;
        // A first call starts a worker; a retry at the cloud is not what this test is about.
        cfg.timeout = std::time::Duration::from_secs(20);
        let report = GeoClient::new(&cfg).unwrap().call(&call).await;
        assert!(report.is_success(), "{how:?}: {report:?}");
        assert_eq!(
            (report.served_by.as_deref(), report.redirects),
            (Some(served_by), redirects),
            "{how:?}: {report:?}"
        );
    }
    c.stop().await;
}
