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
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use geofaas_config::{LatLon, Topology};
use geofaas_gateway::TlsMaterial;
use geofaas_loadtest::{CallRequest, ClientConfig, GeoClient};

const BIN: &str = env!("CARGO_BIN_EXE_geofaas");
const CLIENTS: usize = 4;
const IN_EDGE: &str = "-37.80,144.96";

struct Node {
    id: &'static str,
    child: Option<Child>,
}

struct Fleet {
    dir: tempfile::TempDir,
    topology: PathBuf,
    nodes: Vec<Node>,
}

impl Fleet {
    fn start(dir: tempfile::TempDir, topology: PathBuf) -> Self {
        let mut f = Self {
            dir,
            topology,
            nodes: vec![
                Node {
                    id: "edge",
                    child: None,
                },
                Node {
                    id: "cloud",
                    child: None,
                },
            ],
        };
        for id in ["cloud", "edge"] {
            f.spawn(id);
        }
        f
    }

    fn spawn(&mut self, id: &str) {
        let log = std::fs::File::create(self.dir.path().join(format!("{id}.log"))).unwrap();
        let child = Command::new(BIN)
            .args(["node", "--config"])
            .arg(&self.topology)
            .args(["--node", id])
            .arg("--state-dir")
            .arg(self.dir.path().join("state"))
            .env("GEOFAAS_OFFLOAD_SECRET", "chaos secret")
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.nodes.iter_mut().find(|n| n.id == id).unwrap().child = Some(child);
    }

    fn kill9(&mut self, id: &str) {
        let mut child = self
            .nodes
            .iter_mut()
            .find(|n| n.id == id)
            .unwrap()
            .child
            .take()
            .unwrap();
        let status = Command::new("kill")
            .args(["-9", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let exit = child.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(exit.signal(), Some(9), "{id} ended by SIGKILL");
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            if let Some(c) = &mut n.child {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

fn topology_text(dir: &Path, ports: [u16; 2]) -> String {
    let functions = geofaas_test_support::paths::manifest_dir().join("testdata/chaos-functions");
    let node = |id: &str, role: &str, lat: f64, lon: f64, area: &str, port: u16| {
        format!(
            "[[node]]\nid = \"{id}\"\nrole = \"{role}\"\nlocation = {{ lat = {lat}, lon = {lon} }}\n{area}\
             public_url = \"https://127.0.0.1:{port}\"\nlisten = \"127.0.0.1:{port}\"\n\
             [[node.backend]]\nkind = \"local\"\nfunctions_dir = \"{}\"\n\n",
            functions.display()
        )
    };
    let d = dir.display();
    format!(
        "zone = \"chaos.test.\"\n[tls]\ncert = \"{d}/node.pem\"\nkey = \"{d}/node-key.pem\"\nca = \"{d}/ca.pem\"\n\n{}{}",
        node(
            "edge",
            "edge",
            -37.80,
            144.96,
            "area.circle = { center = { lat = -37.80, lon = 144.96 }, radius_km = 5 }\n",
            ports[0]
        ),
        node("cloud", "cloud", -33.87, 151.21, "", ports[1]),
    )
}

async fn wait_ready(client: &reqwest::Client, port: u16) {
    for _ in 0..600 {
        let url = format!("https://127.0.0.1:{port}/readyz");
        if client
            .get(&url)
            .send()
            .await
            .is_ok_and(|r| r.status() == 200)
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("node on port {port} never became ready");
}

async fn wait_for(done: &AtomicUsize, n: usize) {
    while done.load(Ordering::SeqCst) < n {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_call_fails_when_the_edge_and_then_the_cloud_are_killed_and_restarted() {
    let dir = tempfile::tempdir().unwrap();
    let tls = TlsMaterial::generate(&["127.0.0.1".to_owned()]).unwrap();
    tls.write_to(dir.path()).unwrap();
    let ports = {
        let a = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let b = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        [
            a.local_addr().unwrap().port(),
            b.local_addr().unwrap().port(),
        ]
    };
    let path = dir.path().join("chaos.toml");
    std::fs::write(&path, topology_text(dir.path(), ports)).unwrap();
    let topology = Topology::load(&path).unwrap();
    let calls_log = dir.path().join("executions.log");
    let mut fleet = Fleet::start(tempfile::tempdir().unwrap(), path);
    let probe = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(tls.ca_pem.as_bytes()).unwrap())
        .build()
        .unwrap();
    for p in ports {
        wait_ready(&probe, p).await;
    }

    let location: LatLon = IN_EDGE.parse().unwrap();
    let mut cfg = ClientConfig::for_topology(&topology, location).unwrap();
    cfg.ca_pem = Some(tls.ca_pem.clone().into_bytes());
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
    fleet.kill9("edge");
    wait_for(&done, 400).await;
    fleet.spawn("edge");
    wait_ready(&probe, ports[0]).await;
    wait_for(&done, 600).await;
    fleet.kill9("cloud");
    wait_for(&done, 800).await;
    fleet.spawn("cloud");
    wait_ready(&probe, ports[1]).await;
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
