//! A hundred-edge fleet (issue 44): a 10 × 10 grid of 15 km circles over central Chile, 0.4°
//! apart, and a cloud in Santiago, in one topology with a real etcd registry. Four of its nodes
//! run (the corner edge e0, its neighbour e1, the far corner e99 and the cloud); the other 97
//! are in the file and never start. The nodes start and route: a client in e1's or e99's area
//! is handed over there, one in e0's own is served (curl, h1 and h2, from another folder). A far
//! node is not probed until somebody is handed over to it, so the registry tells e0 that e99
//! died: after its lease expired the very first handover e0 gives for e99's area goes to the
//! cloud, and so does one for an edge that never registered.

use std::time::Duration;

use geofaas_test_support::eventually::assert_within;

use crate::processes::{Fleet, Layout, NodeSpec};

/// Edge `i` of the grid: row `i / 10`, column `i % 10`.
fn centre(i: usize) -> (f64, f64) {
    (-33.0 - (i / 10) as f64 * 0.4, -71.5 + (i % 10) as f64 * 0.4)
}

/// The `Location` header and status of a call to `node` for a client at `at`, by curl.
fn handover(fleet: &Fleet, node: &str, at: (f64, f64), http: &str) -> (u16, String) {
    let out = std::process::Command::new("curl")
        .args(["-sS", http, "--max-time", "10", "--cacert"])
        .arg(fleet.path("ca.pem"))
        .args(["-o", "/dev/null", "-w", "%{http_code} %{redirect_url}"])
        .args(["-H", &format!("x-client-location: {},{}", at.0, at.1)])
        .arg(fleet.url(node, "/fn/hello"))
        .current_dir(std::env::temp_dir())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (code, to) = text.split_once(' ').unwrap_or((&text, ""));
    (code.parse().unwrap_or(0), to.to_owned())
}

/// The ids the node's `/registry` lists as registered.
async fn registered(fleet: &Fleet, node: &str) -> Vec<String> {
    let Ok(r) = fleet.client.get(fleet.url(node, "/registry")).send().await else {
        return Vec::new();
    };
    let v: serde_json::Value = r.json().await.unwrap_or_default();
    v["registered"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_edges_start_and_route_and_a_dead_far_edge_is_seen_through_the_registry() {
    let etcd = geofaas_test_support::etcd::EtcdServer::start()
        .await
        .expect("etcd-server (apt-get install etcd-server)");
    let ids: Vec<&'static str> = (0..100)
        .map(|i| &*Box::leak(format!("e{i}").into_boxed_str()))
        .collect();
    let mut nodes: Vec<NodeSpec> = ids
        .iter()
        .enumerate()
        .map(|(i, &id)| (id, "edge", centre(i).0, centre(i).1))
        .collect();
    nodes.push(("cloud", "cloud", -33.45, -70.66));
    let running = ["e0", "e1", "e99", "cloud"];
    let idle: Vec<&'static str> = ids
        .iter()
        .copied()
        .filter(|id| !running.contains(id))
        .collect();
    let extra = format!(
        "[registry]\netcd = [\"{}\"]\nlease_ttl_s = 2\n[dns]\nprobe_interval_ms = 300\n",
        etcd.url()
    );
    let mut fleet = Fleet::with(Layout {
        extra: &extra,
        idle: &idle,
        ..Layout::new("chile", &nodes)
    });
    fleet.wait_all_ready().await;
    assert_within(
        Duration::from_secs(20),
        "every running node registered at e0",
        || async {
            let r = registered(&fleet, "e0").await;
            running.iter().all(|id| r.iter().any(|x| x == id))
        },
    )
    .await;

    for http in ["--http1.1", "--http2"] {
        let (code, to) = handover(&fleet, "e0", centre(1), http);
        assert_eq!(code, 307, "{http}: a client in e1's area at e0");
        assert!(
            to.starts_with(&fleet.url("e1", "/fn/hello")),
            "{http}: {to}"
        );
        let (code, to) = handover(&fleet, "e1", centre(99), http);
        assert_eq!(code, 307, "{http}: a client in e99's area at e1");
        assert!(
            to.starts_with(&fleet.url("e99", "/fn/hello")),
            "{http}: {to}"
        );
        let (code, _) = handover(&fleet, "e0", centre(0), http);
        assert_eq!(
            code, 404,
            "{http}: a client in e0's own area is served (no such function)"
        );
    }
    // e50 is in the file but never registered: e0 does not send clients there.
    let (code, to) = handover(&fleet, "e0", centre(50), "--http2");
    assert_eq!(
        (code, to.starts_with(&fleet.url("cloud", "/"))),
        (307, true),
        "{to}"
    );

    // e0 never handed a client to e99, so nothing at e0 probes it.
    fleet.kill("e99");
    assert_within(
        Duration::from_secs(20),
        "e99's lease expired, as e0 sees the registry",
        || async { !registered(&fleet, "e0").await.iter().any(|x| x == "e99") },
    )
    .await;
    let (code, to) = handover(&fleet, "e0", centre(99), "--http2");
    assert_eq!(code, 307);
    assert!(
        to.starts_with(&fleet.url("cloud", "/fn/hello")),
        "the first handover for e99's area after its death goes to the cloud: {to}\n{}",
        fleet.log("e0")
    );
    drop(fleet);
    drop(etcd);
}
