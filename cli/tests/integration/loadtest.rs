//! `geofaas loadtest` end to end: the real binary, run from a temporary folder, starts every
//! node of a topology as its own process (`--spawn`) and the tests check its `requests.csv`
//! against the area lookup of the same topology.

use std::path::{Path, PathBuf};
use std::process::Command;

use geofaas_config::{LatLon, Topology};
use geofaas_loadtest::client::node_origin;
use geofaas_loadtest::mobility::handled_by;
use geofaas_loadtest::record::{read_csv, Row};
use geofaas_loadtest::spawn::Spawned;
use geofaas_loadtest::{CallRequest, ClientConfig, GeoClient, HttpVersion};

const BIN: &str = env!("CARGO_BIN_EXE_geofaas");

/// Three free loopback ports (bound, read, released: the nodes bind them next).
fn free_ports() -> [u16; 3] {
    let ls: Vec<std::net::TcpListener> = (0..3)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    [0, 1, 2].map(|i| ls[i].local_addr().unwrap().port())
}

fn functions_dir() -> PathBuf {
    geofaas_test_support::paths::manifest_dir()
        .join("../functions")
        .canonicalize()
        .unwrap()
}

/// A topology that is not Berlin's: two circular edges in Melbourne, the cloud in Sydney.
/// `south_functions` limits what the south edge serves (the rest it offloads).
fn melbourne(ports: [u16; 3], south_functions: &str) -> String {
    let dir = functions_dir();
    let dir = dir.display();
    let node = |id: &str, role: &str, lat: f64, lon: f64, area: &str, port: u16, extra: &str| {
        format!(
            "[[node]]\nid = \"{id}\"\nrole = \"{role}\"\nlocation = {{ lat = {lat}, lon = {lon} }}\n{area}\
             public_url = \"https://127.0.0.1:{port}\"\nlisten = \"127.0.0.1:{port}\"\n\
             [[node.backend]]\nkind = \"local\"\nfunctions_dir = \"{dir}\"\n{extra}\n"
        )
    };
    let circle = |lat: f64| {
        format!("area.circle = {{ center = {{ lat = {lat}, lon = 144.96 }}, radius_km = 3.0 }}\n")
    };
    let mut t = String::from("zone = \"mel.test.\"\n\n");
    t += &node(
        "north",
        "edge",
        -37.80,
        144.96,
        &circle(-37.80),
        ports[0],
        "",
    );
    t += &node(
        "south",
        "edge",
        -37.86,
        144.96,
        &circle(-37.86),
        ports[1],
        south_functions,
    );
    t += &node("cloud", "cloud", -33.87, 151.21, "", ports[2], "");
    t += "[[function]]\nname = \"sieve\"\n\n[[function]]\nname = \"echo\"\n";
    t
}

/// The Berlin example on free ports, functions from the repository.
fn berlin(ports: [u16; 3]) -> String {
    let mut text = include_str!("../../../examples/berlin.toml").to_owned();
    for (i, port) in ports.iter().enumerate() {
        let addr = format!("127.0.0.1{}:8443", i + 1);
        text = text.replace(&addr, &format!("127.0.0.1:{port}"));
    }
    text.replace(
        "functions_dir = \"../functions\"",
        &format!("functions_dir = \"{}\"", functions_dir().display()),
    )
}

/// Runs `geofaas loadtest <args>` in a new temporary folder holding `topology.toml` (and
/// `files`), with relative paths; returns the folder and the run's output folder.
fn loadtest(
    topology: &str,
    files: &[(&str, String)],
    args: &[&str],
) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("topology.toml"), topology).unwrap();
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let out = Command::new(BIN)
        .current_dir(dir.path())
        .arg("loadtest")
        .args(args)
        .args(["--topology", "topology.toml", "--out", "out", "--spawn"])
        .env("GEOFAAS_BIN", BIN)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "geofaas loadtest {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let out_dir = dir.path().join("out");
    (dir, out_dir)
}

fn summary(out: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap()
}

/// Every call was answered, by (or offloaded from) the node whose area holds its location;
/// returns the handovers as the area lookup predicts them: `(row, node)`.
fn assert_served_where_the_areas_say(topology: &str, rows: &[Row]) -> Vec<(usize, String)> {
    let topo = Topology::parse(topology, "test.toml", Path::new(".")).unwrap();
    let map = topo.service_map().unwrap();
    let mut expected = Vec::new();
    let mut last = None;
    for (i, r) in rows.iter().enumerate() {
        assert!(r.ok(), "call {} failed: {r:?}", r.seq);
        let want = &map.responsible(LatLon::new(r.lat, r.lon).unwrap()).id;
        assert_eq!(handled_by(r), want, "call {} at {},{}", r.seq, r.lat, r.lon);
        if last.is_some_and(|l| l != want) {
            expected.push((i, want.clone()));
        }
        last = Some(want);
    }
    expected
}

fn handovers(rows: &[Row]) -> Vec<(usize, String)> {
    geofaas_loadtest::mobility::handovers(rows)
}

#[test]
fn mobility_on_another_topology_hands_over_exactly_where_the_areas_say() {
    let topology = melbourne(free_ports(), "");
    // North to south along one meridian: cloud, north edge, the gap (cloud), south edge, cloud.
    let path: String = std::iter::once("name,lat,lon\n".to_owned())
        .chain((0..15).map(|i| format!("p{i},{},144.96\n", -37.76 - 0.01 * f64::from(i))))
        .collect();
    let (_dir, out) = loadtest(
        &topology,
        &[("path.csv", path)],
        // A generous attempt deadline: on a loaded 2-core CI machine a first call (a new
        // worker) can take over the default second, and a retry at the cloud would then serve
        // a point the area lookup gives to an edge.
        &["mobility", "--path", "path.csv", "--timeout-ms", "20000"],
    );
    let rows = read_csv(&out.join("requests.csv")).unwrap();
    assert_eq!(rows.len(), 15);
    let expected = assert_served_where_the_areas_say(&topology, &rows);
    assert_eq!(
        expected.len(),
        4,
        "the path crosses four area borders: {expected:?}"
    );
    assert_eq!(handovers(&rows), expected);
    // Each handover is one 307, followed once; every other call goes to the cached node
    // directly.
    for (i, r) in rows.iter().enumerate() {
        let handover = expected.iter().any(|(h, _)| *h == i);
        assert_eq!(r.redirects, u32::from(handover), "row {i}: {r:?}");
    }
    assert!(out.join("mobility.png").metadata().unwrap().len() > 1000);
    assert_eq!(summary(&out)["spawned"], true);
    // --spawn uses the delay model by default: a relay per node. The walk starts in the
    // cloud's area, so no call has a home edge: each one crosses a relay both ways, which
    // bounds its latency from below (the relay never forwards a chunk before it is due).
    let model = &summary(&out)["delay_model"];
    assert_eq!(model["kind"], "relay", "{model}");
    assert_eq!(model["links"].as_array().unwrap().len(), 3, "{model}");
    assert_eq!(model["cloud_rtt_ms"], 25.0);
    for r in &rows {
        let floor = if r.served_by == "cloud" { 25.0 } else { 5.0 };
        assert!(r.latency_ms >= floor, "{r:?}");
    }
    assert!(
        rows.iter().all(|r| r.http == "HTTP/2.0"),
        "HTTP/2 by default"
    );
}

#[test]
fn mobility_on_the_berlin_path_over_http1_hands_over_at_kleinmachnow_and_fahrland() {
    let topology = berlin(free_ports());
    // The paper's path (a copy of ../shared/data/geofaas-berlin/mobility-path-99.csv).
    let path = include_str!("../../testdata/mobility-path-99.csv").to_owned();
    let (_dir, out) = loadtest(
        &topology,
        &[("path.csv", path)],
        &[
            "mobility",
            "--path",
            "path.csv",
            "--http1",
            "--no-delays",
            "--timeout-ms",
            "20000",
        ],
    );
    assert_eq!(summary(&out)["delay_model"]["kind"], "none");
    let rows = read_csv(&out.join("requests.csv")).unwrap();
    let expected = assert_served_where_the_areas_say(&topology, &rows);
    let at: Vec<(&str, &str)> = expected
        .iter()
        .map(|(i, node)| (rows[*i].client.as_str(), node.as_str()))
        .collect();
    assert_eq!(at.len(), 2, "{at:?}");
    assert_eq!(at[0].1, "potsdam");
    assert!(at[0].0.starts_with("Kleinmachnow"), "{at:?}");
    assert_eq!(at[1].1, "cloud");
    assert!(
        at[1].0.starts_with("Fahrland") || at[1].0.starts_with("Ketzin"),
        "{at:?}"
    );
    assert_eq!(handovers(&rows), expected);
    assert!(rows.iter().all(|r| r.http == "HTTP/1.1"), "--http1");
}

#[test]
fn highload_counts_the_calls_an_edge_offloads() {
    // The south edge does not serve sieve, so it offloads every call of its clients.
    let topology = melbourne(free_ports(), "functions = [\"echo\"]\n");
    let clients =
        "name,lat,lon\nn1,-37.80,144.96\ns1,-37.86,144.96\nn2,-37.81,144.95\ns2,-37.87,144.97\n";
    let (_dir, out) = loadtest(
        &topology,
        &[("clients.csv", clients.to_owned())],
        &[
            "highload",
            "--clients-file",
            "clients.csv",
            "--clients",
            "1,2,4",
            "--calls",
            "3",
            "--interval-ms",
            "20",
        ],
    );
    let rows = read_csv(&out.join("requests.csv")).unwrap();
    assert_eq!(rows.len(), 3 * (1 + 2 + 4));
    assert_served_where_the_areas_say(&topology, &rows);
    for r in &rows {
        let offloaded = r.client.starts_with('s');
        assert_eq!(r.offloaded_from == "south", offloaded, "{r:?}");
        assert_eq!(r.served_by == "cloud", offloaded, "{r:?}");
    }
    let rounds = &summary(&out)["mode_results"]["rounds"];
    let counts: Vec<(u64, u64, u64)> = rounds
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["clients"].as_u64().unwrap(),
                r["edge"].as_u64().unwrap(),
                r["offloaded"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(counts, [(1, 3, 0), (2, 3, 3), (4, 6, 6)]);
    assert_eq!(summary(&out)["offloaded"], 9);
    // An offload crosses the delay model's cloud link (the edge's cloud link is the cloud's
    // public URL, the relay): at least its 25 ms round trip.
    for r in rows.iter().filter(|r| !r.offloaded_from.is_empty()) {
        assert!(r.latency_ms >= 25.0, "{r:?}");
    }
    assert!(out.join("highload.png").metadata().unwrap().len() > 1000);
}

#[test]
fn outage_sigkill_of_the_edge_loses_no_call_with_one_retry() {
    let topology = melbourne(free_ports(), "");
    let (_dir, out) = loadtest(
        &topology,
        &[],
        &[
            "outage",
            "--calls",
            "40",
            "--kill-after",
            "20",
            "--location",
            "-37.80,144.96",
        ],
    );
    let rows = read_csv(&out.join("requests.csv")).unwrap();
    let s = summary(&out);
    let killed = &s["mode_results"]["killed"];
    assert_eq!(killed["node"], "north", "{s}");
    assert_eq!(killed["signal"], 9, "killed by SIGKILL: {s}");
    let pid = killed["pid"].as_u64().unwrap();
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "the edge process is gone"
    );
    assert_eq!(rows.len(), 40);
    assert!(rows.iter().all(Row::ok), "no call lost");
    assert!(rows[..20]
        .iter()
        .all(|r| r.served_by == "north" && r.attempts == 1));
    assert!(rows[20..].iter().all(|r| r.served_by == "cloud"));
    // The client reached its home edge directly and the cloud across the 25 ms link.
    assert!(rows[20..].iter().all(|r| r.latency_ms >= 25.0), "{rows:?}");
    // The first call after the kill hit the dead edge and was retried once, at the cloud.
    assert_eq!(rows[20].attempts, 2, "{:?}", rows[20]);
    assert!(rows.iter().all(|r| r.attempts <= 2));
    assert_eq!(s["failed"], 0);
    assert!(out.join("outage.png").metadata().unwrap().len() > 1000);
}

/// The library on its own: a POST body reaches the node a handover names, and the client then
/// talks to that node directly.
async fn body_follows_the_handover(http: HttpVersion) {
    let dir = tempfile::tempdir().unwrap();
    let text = melbourne(free_ports(), "");
    let topology = Topology::parse(&text, "mel.toml", dir.path()).unwrap();
    let nodes = Spawned::start(&topology, Path::new(BIN), None)
        .await
        .unwrap();
    let north = LatLon::new(-37.80, 144.96).unwrap();
    let south = LatLon::new(-37.86, 144.96).unwrap();
    let mut cfg = ClientConfig::for_topology(&nodes.topology, north).unwrap();
    cfg.ca_pem = Some(nodes.ca_pem.clone());
    cfg.http = http;
    // A first call starts a worker: on a loaded machine that can take over the default second,
    // and a retry at the cloud is not what this test is about.
    cfg.timeout = std::time::Duration::from_secs(20);
    let client = GeoClient::new(&cfg).unwrap();
    let want_version = match http {
        HttpVersion::Http2 => reqwest::Version::HTTP_2,
        HttpVersion::Http1 => reqwest::Version::HTTP_11,
    };
    for (i, (loc, node, redirects)) in [
        (north, "north", 0),
        (south, "south", 1),
        (south, "south", 0),
    ]
    .into_iter()
    .enumerate()
    {
        let body = format!("payload {i} \u{1F30D} {}", "x".repeat(20_000));
        let r = client
            .call(&CallRequest {
                function: "echo".into(),
                location: Some(loc),
                body: body.clone().into(),
                idempotency_key: Some(format!("key-{i}")),
            })
            .await;
        assert_eq!(r.status.map(|s| s.as_u16()), Some(200), "call {i}: {r:?}");
        assert_eq!(r.served_by.as_deref(), Some(node), "call {i}");
        assert_eq!(r.redirects, redirects, "call {i}");
        assert_eq!(r.attempts, 1, "call {i}");
        assert_eq!(r.version, Some(want_version), "call {i}");
        assert_eq!(std::str::from_utf8(&r.body).unwrap(), body, "call {i}");
    }
    let south_url = &nodes.topology.node("south").unwrap().public_url;
    assert_eq!(client.cached_node(), node_origin(south_url));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_library_carries_the_body_across_a_handover_over_http1() {
    body_follows_the_handover(HttpVersion::Http1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_library_carries_the_body_across_a_handover_over_http2() {
    body_follows_the_handover(HttpVersion::Http2).await;
}

#[test]
fn mixed_with_warm_has_every_measured_call_placed_by_the_policy() {
    // Without --warm a function's first call at an edge is not placed (nothing is known of it:
    // `no_decision`, no `predicted`); with it every node ran every function once before the
    // measured calls, so each of them carries the policy's prediction.
    let topology = melbourne(free_ports(), "") + "\n[scheduler]\npolicy = \"greedy\"\n";
    let (_dir, out) = loadtest(
        &topology,
        &[],
        &[
            "mixed",
            "--functions",
            "6",
            "--calls",
            "30",
            "--rate",
            "10",
            "--clients-per-edge",
            "2",
            "--seed",
            "5",
            "--timeout-ms",
            "20000",
            "--warm",
        ],
    );
    let rows = read_csv(&out.join("requests.csv")).unwrap();
    assert_eq!(rows.len(), 30);
    for r in &rows {
        assert!(r.ok(), "{r:?}");
        assert!(r.server_timing.contains("predicted;dur="), "{r:?}");
    }
    assert_eq!(
        summary(&out)["mode_results"]["warmed_every_node_first"],
        true
    );
}

#[test]
fn mixed_calls_zipf_popular_functions_from_every_edge_and_rare_ones_start_cold() {
    let topology = melbourne(free_ports(), "");
    let (_dir, out) = loadtest(
        &topology,
        &[],
        &[
            "mixed",
            "--functions",
            "20",
            "--calls",
            "100",
            "--rate",
            "10",
            "--clients-per-edge",
            "2",
            "--keep-alive-s",
            "1",
            "--seed",
            "3",
            "--timeout-ms",
            "20000",
        ],
    );
    let rows = read_csv(&out.join("requests.csv")).unwrap();
    assert_eq!(rows.len(), 100);
    // Clients stand in the edges' areas: each call served at its home edge (no policy).
    assert_served_where_the_areas_say(&topology, &rows);
    for edge in ["north", "south"] {
        assert!(rows.iter().any(|r| r.served_by == edge), "{edge}");
    }
    let s = summary(&out);
    assert_eq!(s["mode"], "mixed");
    let functions = s["mode_results"]["functions"].as_array().unwrap();
    assert_eq!(functions.len(), 20);
    let total: f64 = functions
        .iter()
        .map(|f| f["probability"].as_f64().unwrap())
        .sum();
    assert!((total - 1.0).abs() < 1e-9, "{total}");
    let calls = |name: &str| rows.iter().filter(|r| r.function == name).count();
    for f in functions {
        let name = f["name"].as_str().unwrap();
        assert_eq!(f["calls"].as_u64().unwrap() as usize, calls(name), "{name}");
    }
    assert!(
        calls("mix00") > calls("mix19"),
        "Zipf: rank 1 is called most"
    );
    // Each generated function answers with its own sieve.
    let mix02 = rows
        .iter()
        .find(|r| r.function == "mix02")
        .expect("mix02 called");
    assert!(mix02.ok(), "{mix02:?}");
    // A function's first call at a node starts an instance; so does a call after the function
    // sat idle there well beyond --keep-alive-s (1 s; the reaper looks every 250 ms): its
    // instances were evicted.
    let mut evicted = 0;
    let mut by_node: std::collections::BTreeMap<(&str, &str), Vec<&Row>> = Default::default();
    for r in &rows {
        by_node
            .entry((&r.function, &r.served_by))
            .or_default()
            .push(r);
    }
    for ((function, node), calls) in &by_node {
        assert_eq!(
            calls[0].cold_start,
            Some(true),
            "{function} at {node}: {:?}",
            calls[0]
        );
        for w in calls.windows(2) {
            let idle_ms = w[1].sent_ms - (w[0].sent_ms + w[0].latency_ms);
            if idle_ms > 2500.0 {
                assert_eq!(
                    w[1].cold_start,
                    Some(true),
                    "{function} at {node} after {idle_ms} ms idle"
                );
                evicted += 1;
            }
        }
    }
    assert!(
        evicted > 0,
        "the seeded plan leaves some function idle for 2.5 s: {by_node:?}"
    );
    let cold = rows.iter().filter(|r| r.cold_start == Some(true)).count();
    assert_eq!(s["mode_results"]["cold_starts"], cold);
}

#[test]
fn mobility_with_background_clients_loads_their_area_and_keeps_their_calls_apart() {
    let topology = melbourne(free_ports(), "");
    let path: String = std::iter::once("name,lat,lon\n".to_owned())
        .chain((0..10).map(|i| format!("p{i},{},144.96\n", -37.79 - 0.002 * f64::from(i))))
        .collect();
    // Two clients standing in the south edge's area, and one more the count leaves out.
    let background = "name,lat,lon\ns0,-37.86,144.96\ns1,-37.861,144.961\nx,-37.80,144.96\n";
    let (_dir, out) = loadtest(
        &topology,
        &[("path.csv", path), ("bg.csv", background.to_owned())],
        &[
            "mobility",
            "--path",
            "path.csv",
            "--rate",
            "10",
            "--timeout-ms",
            "20000",
            "--background-clients",
            "bg.csv",
            "--background-count",
            "2",
            "--background-function",
            "echo",
            "--background-interval-ms",
            "100",
        ],
    );
    // The walk's calls alone in requests.csv, each with the node's Server-Timing.
    let rows = read_csv(&out.join("requests.csv")).unwrap();
    assert_eq!(rows.len(), 10);
    assert!(rows.iter().all(|r| r.function == "sieve"), "{rows:?}");
    assert!(
        rows.iter().all(|r| r.server_timing.contains("exec;dur=")),
        "{rows:?}"
    );
    // The background's in background.csv: both clients, from the first interval to the walk's
    // end (about a second at 10 per second), served in their own area.
    let bg = read_csv(&out.join("background.csv")).unwrap();
    assert!(bg.iter().all(|r| r.function == "echo" && r.ok()), "{bg:?}");
    for client in ["s0", "s1"] {
        let n = bg.iter().filter(|r| r.client == client).count();
        assert!(n >= 2, "{client}: {n} calls in {bg:?}");
    }
    assert!(bg.iter().all(|r| r.client != "x"), "{bg:?}");
    assert!(bg.iter().all(|r| r.served_by == "south"), "{bg:?}");
    let s = summary(&out);
    assert_eq!(s["calls"], 10);
    assert_eq!(s["mode_results"]["background"]["calls"], bg.len());
    assert_eq!(s["mode_results"]["background"]["function"], "echo");
}
