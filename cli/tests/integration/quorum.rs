//! The fleet's etcd losing a member and then its quorum: a Lima edge and a Bogotá cloud (real
//! `geofaas node` processes) registered in a real three-member etcd cluster. One member killed:
//! no effect (a deploy lands, calls answer). Two killed: both nodes keep serving with the fleet
//! they last saw, and a deploy is refused with an error naming etcd, promptly (not a hang).
//! Both members back: the fleet converges (both nodes listed again by `geofaas fleet ls`) and the
//! next deploy lands. Calls with `curl`.

use std::time::{Duration, Instant};

use geofaas_test_support::etcd::EtcdCluster;

use crate::processes::{greeter, text, Fleet, Layout, NodeSpec};

const NODES: [NodeSpec; 2] = [
    ("lima", "edge", -12.05, -77.04),
    ("bogota", "cloud", 4.71, -74.07),
];
const LEASE_S: u64 = 3;

/// The greeter's answer at each node, from a client in its area.
fn answers(fleet: &Fleet) -> Vec<(u16, String)> {
    [("lima", "-12.05,-77.04"), ("bogota", "4.71,-74.07")]
        .iter()
        .map(|(id, at)| {
            fleet.curl(&[
                "-H",
                &format!("x-client-location: {at}"),
                "--data",
                "x",
                &fleet.url(id, "/fn/greeter"),
            ])
        })
        .collect()
}

/// Deploys `version`, waiting (at most 30 s) until both nodes answer with it.
async fn deploy_everywhere(fleet: &Fleet, src: &std::path::Path, version: &str) {
    let out = fleet.geofaas(&["deploy", &greeter(src, version, 0)]);
    assert!(out.status.success(), "deploy {version}: {}", text(&out));
    let want = (200, format!("greeter {version}"));
    let started = Instant::now();
    while answers(fleet) != vec![want.clone(), want.clone()] {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{version} not served everywhere: {:?}",
            answers(fleet)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_keeps_serving_without_etcd_quorum_and_converges_when_it_returns() {
    let mut etcd = EtcdCluster::start().await.unwrap();
    let urls: Vec<String> = etcd.urls().iter().map(|u| format!("\"{u}\"")).collect();
    let extra = format!(
        "[registry]\netcd = [{}]\nlease_ttl_s = {LEASE_S}\n",
        urls.join(", ")
    );
    let fleet = Fleet::with(Layout {
        extra: &extra,
        ..Layout::new("andes", &NODES)
    });
    fleet.wait_all_ready().await;
    let src = tempfile::tempdir().unwrap();
    deploy_everywhere(&fleet, src.path(), "v1").await;

    // One member gone: no effect.
    etcd.kill(0).await;
    deploy_everywhere(&fleet, src.path(), "v2").await;

    // Quorum gone: the nodes keep serving; a deploy is refused, naming etcd, promptly.
    etcd.kill(1).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let want = (200, "greeter v2".to_owned());
    for _ in 0..5 {
        assert_eq!(answers(&fleet), vec![want.clone(), want.clone()]);
    }
    let started = Instant::now();
    let refused = fleet.geofaas(&["deploy", &greeter(src.path(), "v3", 0)]);
    let took = started.elapsed();
    let said = text(&refused);
    assert!(!refused.status.success(), "{said}");
    assert!(
        said.to_lowercase().contains("etcd") || said.contains("registry"),
        "{said}"
    );
    tokio::time::sleep(Duration::from_secs(LEASE_S + 1)).await;
    assert_eq!(
        answers(&fleet),
        vec![want.clone(), want.clone()],
        "still serving a lease time into the outage"
    );

    // Quorum back: both nodes registered again, and the next deploy lands.
    etcd.restart(0).unwrap();
    etcd.restart(1).unwrap();
    etcd.wait_healthy(0).await.unwrap();
    let back = Instant::now();
    // A member still catching up holds a request until its timeout: wait for both.
    etcd.wait_healthy(1).await.unwrap();
    loop {
        let ls = fleet.geofaas(&["fleet", "ls"]);
        let listed = text(&ls);
        if ls.status.success() && listed.contains("lima") && listed.contains("bogota") {
            break;
        }
        assert!(
            back.elapsed() < Duration::from_secs(30),
            "the fleet did not converge:\n{listed}\n{}\n{}",
            fleet.log("lima"),
            fleet.log("bogota")
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let converged = back.elapsed();
    deploy_everywhere(&fleet, src.path(), "v3").await;
    eprintln!(
        "quorum lost: deploy refused after {took:?}: {}; quorum back: both nodes listed after {converged:?}",
        said.lines().last().unwrap_or("")
    );
}
