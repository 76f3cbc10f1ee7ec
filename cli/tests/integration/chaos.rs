//! Chaos under load, with real processes: four clients (the loadtest's `GeoClient`, one retry
//! at the cloud, an `Idempotency-Key` per call) keep calling an edge while the edge is killed
//! with SIGKILL and restarted, then the cloud likewise. No client call may fail; the function
//! logs every execution, so duplicates are counted where they happen.
//!
//! Which duplicates are possible at all: only a call the edge was running when it died (its
//! answer is lost, the client retries at the cloud, which has never seen that key), so at most
//! one per client in flight at the kill. Killing the cloud causes none: the edge serves these
//! clients itself.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use geofaas_config::{LatLon, Topology};
use geofaas_loadtest::{CallRequest, ClientConfig, GeoClient};

use crate::processes::{Fleet, NodeSpec};

const CLIENTS: usize = 4;
const IN_EDGE: &str = "-37.80,144.96";
const NODES: [NodeSpec; 2] = [
    ("edge", "edge", -37.80, 144.96),
    ("cloud", "cloud", -33.87, 151.21),
];

async fn wait_for(done: &AtomicUsize, n: usize) {
    while done.load(Ordering::SeqCst) < n {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_call_fails_when_the_edge_and_then_the_cloud_are_killed_and_restarted() {
    let functions = geofaas_test_support::paths::manifest_dir().join("testdata/chaos-functions");
    let mut fleet = Fleet::start("chaos", &NODES, "", Some(&functions), "warn");
    fleet.wait_all_ready().await;
    let topology = Topology::load(fleet.config()).unwrap();
    let calls_log = fleet.path("executions.log");
    let ca_pem = std::fs::read(fleet.path("ca.pem")).unwrap();

    let location: LatLon = IN_EDGE.parse().unwrap();
    let mut cfg = ClientConfig::for_topology(&topology, location).unwrap();
    cfg.ca_pem = Some(ca_pem);
    cfg.fallback_ttl = Duration::from_millis(200);
    let done = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let (cfg, done, stop, log) = (cfg.clone(), done.clone(), stop.clone(), calls_log.clone());
        tasks.push(tokio::spawn(async move {
            let client = GeoClient::new(&cfg).unwrap();
            let mut reports = Vec::new();
            let mut i = 0;
            while stop.load(Ordering::SeqCst) == 0 {
                let id = format!("c{c}-{i}");
                let req = CallRequest {
                    function: "tally".into(),
                    location: Some(location),
                    body: format!("{} {id}\n", log.display()).into(),
                    idempotency_key: Some(id.clone()),
                };
                reports.push((id, client.call(&req).await));
                done.fetch_add(1, Ordering::SeqCst);
                i += 1;
            }
            reports
        }));
    }
    wait_for(&done, 200).await;
    fleet.kill("edge");
    wait_for(&done, 400).await;
    fleet.spawn("edge");
    fleet.wait_ready("edge").await;
    wait_for(&done, 600).await;
    fleet.kill("cloud");
    wait_for(&done, 800).await;
    fleet.spawn("cloud");
    fleet.wait_ready("cloud").await;
    wait_for(&done, 1000).await;
    stop.store(1, Ordering::SeqCst);

    let mut reports = Vec::new();
    for t in tasks {
        reports.extend(t.await.unwrap());
    }
    let failed: Vec<_> = reports.iter().filter(|(_, r)| !r.is_success()).collect();
    assert!(
        failed.is_empty(),
        "{} calls failed: {:?}",
        failed.len(),
        failed.first()
    );
    let retried = reports.iter().filter(|(_, r)| r.retried()).count();
    let by_cloud = reports
        .iter()
        .filter(|(_, r)| r.served_by.as_deref() == Some("cloud"))
        .count();
    let mut runs: HashMap<String, usize> = HashMap::new();
    for line in std::fs::read_to_string(&calls_log).unwrap().lines() {
        *runs.entry(line.to_owned()).or_default() += 1;
    }
    for (id, r) in &reports {
        assert!(
            runs.contains_key(id),
            "{id} answered {:?} but never ran",
            r.status
        );
        assert_eq!(r.body, format!("ok {id}"), "{id}");
    }
    let duplicates = runs.values().filter(|n| **n > 1).count();
    eprintln!(
        "chaos: {} calls, 0 failed, {retried} retried at the cloud, {by_cloud} served by the cloud, \
         {duplicates} executed twice",
        reports.len()
    );
    assert!(retried >= 1, "the edge's death was noticed by some call");
    assert!(
        duplicates <= CLIENTS,
        "{duplicates} duplicates: more than the {CLIENTS} calls that can be in flight at the kill"
    );
    // The restarted cloud takes offloads again: the edge is back and serves, the cloud answers
    // a retried call.
    let client = GeoClient::new(&cfg).unwrap();
    let again = client
        .call(&CallRequest {
            function: "tally".into(),
            location: Some(location),
            body: format!("{} after\n", calls_log.display()).into(),
            idempotency_key: None,
        })
        .await;
    assert!(again.is_success());
}
