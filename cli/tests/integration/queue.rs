//! The fleet's queue on a real nats-server (JetStream) and a real etcd, with three real
//! `geofaas node` processes (a Santiago and a Valparaíso edge, a São Paulo cloud): 200
//! asynchronous calls accepted at Santiago, Santiago killed with SIGKILL while it runs them,
//! and every call answered elsewhere after the ack wait, each readable at Valparaíso (which
//! accepted none of them); with NATS down a call is refused with `503`, never a `202`, and
//! accepted again once NATS is back. Calls and reads with `curl` and reqwest.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use geofaas_test_support::etcd::EtcdServer;
use geofaas_test_support::nats::NatsServer;

use crate::processes::{Fleet, NodeSpec};

const NODES: [NodeSpec; 3] = [
    ("santiago", "edge", -33.45, -70.66),
    ("valparaiso", "edge", -33.05, -71.62),
    ("sao-paulo", "cloud", -23.55, -46.63),
];
const CALLS: usize = 200;
const ACK_WAIT_S: u64 = 3;

/// Submits `slowtally` call `n` asynchronously at `node` from a Santiago client.
async fn submit(fleet: &Fleet, node: &str, log: &str, n: usize) -> reqwest::Response {
    fleet
        .client
        .post(fleet.url(node, "/fn/slowtally"))
        .header("prefer", "respond-async")
        .header("x-client-location", "-33.45,-70.66")
        .body(format!("{log} call-{n}"))
        .send()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_accepted_at_a_node_killed_mid_batch_run_elsewhere_and_are_read_anywhere() {
    let etcd = EtcdServer::start().await.unwrap();
    let mut nats = NatsServer::start().await.unwrap();
    let extra = format!(
        "[registry]\netcd = [\"{}\"]\nlease_ttl_s = 3\n[queue]\nnats = [\"{}\"]\nack_wait_s = {ACK_WAIT_S}\n",
        etcd.url(),
        nats.url()
    );
    let functions = geofaas_test_support::paths::manifest_dir().join("testdata/async-functions");
    let mut fleet = Fleet::start(
        "chile",
        &NODES,
        &extra,
        Some(&functions),
        "warn,geofaas_gateway::activations=info",
    );
    for (id, ..) in NODES {
        fleet.wait_ready(id).await;
    }
    let log = fleet.path("ran.txt");
    let log = log.to_str().unwrap().to_owned();

    // 200 calls at Santiago, eight at a time.
    let mut ids = Vec::new();
    let submitted = futures::future::join_all((0..CALLS).map(|n| {
        let (fleet, log) = (&fleet, &log);
        async move {
            let resp = submit(fleet, "santiago", log, n).await;
            let status = resp.status().as_u16();
            let body: serde_json::Value = resp.json().await.unwrap_or_default();
            (n, status, body)
        }
    }))
    .await;
    for (n, status, body) in submitted {
        assert_eq!(status, 202, "call {n}: {body}\n{}", fleet.log("santiago"));
        ids.push((n, body["activationId"].as_str().unwrap().to_owned()));
    }

    // Kill Santiago once it ran a few.
    let started = Instant::now();
    let ran = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .count()
    };
    while ran() < 20 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "Santiago ran {} calls in 60 s:\n{}",
            ran(),
            fleet.log("santiago")
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    fleet.kill("santiago");
    let killed = Instant::now();
    // A function process running at the kill may still log its run.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before_kill = ran();

    // Every call answers at Valparaíso, which accepted none of them.
    let mut open: HashMap<String, usize> = ids.iter().map(|(n, id)| (id.clone(), *n)).collect();
    while !open.is_empty() {
        assert!(
            killed.elapsed() < Duration::from_secs(90),
            "{} calls never answered after the kill:\nvalparaiso:\n{}\nsao-paulo:\n{}",
            open.len(),
            fleet.log("valparaiso"),
            fleet.log("sao-paulo")
        );
        let mut done = Vec::new();
        for (id, n) in &open {
            let resp = fleet
                .client
                .get(fleet.url("valparaiso", &format!("/activations/{id}")))
                .send()
                .await
                .unwrap();
            match resp.status().as_u16() {
                200 => {
                    assert_eq!(resp.text().await.unwrap(), format!("ok call-{n}"));
                    done.push(id.clone());
                }
                202 => {}
                other => panic!("activation {id}: {other} {}", resp.text().await.unwrap()),
            }
        }
        for id in done {
            open.remove(&id);
        }
        if !open.is_empty() {
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    let all_answered = killed.elapsed();

    let lines = std::fs::read_to_string(&log).unwrap();
    let mut runs: HashMap<&str, usize> = HashMap::new();
    for l in lines.lines() {
        *runs.entry(l).or_default() += 1;
    }
    let mut twice: Vec<&str> = runs.keys().copied().filter(|k| runs[k] > 1).collect();
    twice.sort_unstable();
    let ran_at_santiago: Vec<&str> = lines.lines().take(before_kill).collect();
    for (n, _) in &ids {
        assert!(
            runs.contains_key(format!("call-{n}").as_str()),
            "call-{n} never ran"
        );
    }
    eprintln!(
        "{CALLS} accepted at santiago, {before_kill} ran there before the kill, all answered at valparaiso {:.1} s after it (ack wait {ACK_WAIT_S} s); ran twice: {} {twice:?}",
        all_answered.as_secs_f64(),
        twice.len()
    );
    // Only a call Santiago ran and had not acknowledged when it died runs twice.
    for t in &twice {
        assert!(
            ran_at_santiago.contains(t),
            "{t} ran twice, but not at Santiago before the kill:\n{lines}"
        );
    }

    // An answer read with curl over HTTP/2 and HTTP/1.1 at the cloud, which accepted none.
    let (_, id) = &ids[0];
    for version in ["--http2", "--http1.1"] {
        let (status, body) = fleet.curl(&[
            version,
            &fleet.url("sao-paulo", &format!("/activations/{id}")),
        ]);
        assert_eq!((status, body.as_str()), (200, "ok call-0"), "{version}");
    }

    // NATS down: refused with 503, never a 202; back: accepted again.
    nats.stop().await;
    let url = fleet.url("valparaiso", "/fn/slowtally");
    let (status, body) = fleet.curl(&[
        "-H",
        "prefer: respond-async",
        "-H",
        "x-client-location: -33.05,-71.62",
        "--data",
        &format!("{log} down"),
        &url,
    ]);
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("queue_unavailable"), "{body}");
    nats.restart().await.unwrap();
    let back = Instant::now();
    loop {
        let resp = submit(&fleet, "valparaiso", &log, 999).await;
        if resp.status() == 202 {
            break;
        }
        assert_eq!(resp.status(), 503, "{}", resp.text().await.unwrap());
        assert!(
            back.elapsed() < Duration::from_secs(30),
            "no call accepted 30 s after NATS came back"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(etcd);
}

/// Appends each call's body, its CloudEvent type and trigger headers and the node to `$OUT`.
const RECORDER: &str = r#"import os

def fn(body, headers):
    h = {k.lower(): v for k, v in headers.items()}
    if isinstance(body, bytes):
        body = body.decode()
    with open(os.environ["OUT"], "a") as f:
        f.write("%s|%s|%s|%s|%s\n" % (body, h.get("ce-type", "-"), h.get("x-geofaas-trigger"), h.get("x-geofaas-subject"), h.get("x-geo-node")))
    return "ok"
"#;

/// `--on nats:SUBJECT` on three nodes: every message published on the subject runs once, on
/// one of them, with the trigger headers; a structured CloudEvent arrives in binary mode; a
/// trigger that is not `nats:` is refused at deploy, naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_message_on_a_subject_is_one_call_of_the_function() {
    let etcd = EtcdServer::start().await.unwrap();
    let nats = NatsServer::start().await.unwrap();
    let extra = format!(
        "[registry]\netcd = [\"{}\"]\nlease_ttl_s = 3\n[queue]\nnats = [\"{}\"]\nack_wait_s = {ACK_WAIT_S}\n",
        etcd.url(),
        nats.url()
    );
    let fleet = Fleet::start("chile", &NODES, &extra, None, "warn");
    for (id, ..) in NODES {
        fleet.wait_ready(id).await;
    }
    let dir = fleet.path("recorder");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("fn.py"), RECORDER).unwrap();
    let dir = dir.to_str().unwrap();

    let bad = fleet.geofaas(&["deploy", dir, "--on", "mqtt:sensors"]);
    let said = crate::processes::text(&bad);
    assert!(!bad.status.success(), "{said}");
    assert!(said.contains("mqtt:sensors"), "{said}");

    let out = fleet.path("calls.txt");
    let env = format!("OUT={}", out.display());
    let subject = "sensors.chile.temp";
    let on = format!("nats:{subject}");
    let deployed = fleet.geofaas(&["deploy", dir, "--on", &on, "--env", &env]);
    assert!(
        deployed.status.success(),
        "{}",
        crate::processes::text(&deployed)
    );
    let ls = fleet.geofaas(&["functions", "ls"]);
    let listed = crate::processes::text(&ls);
    let rows: Vec<&str> = listed
        .lines()
        .filter(|l| l.starts_with("recorder"))
        .collect();
    assert_eq!(rows.len(), 3, "{listed}");
    assert!(rows.iter().all(|r| r.ends_with(&on)), "{listed}");

    // Publish once the function's consumer exists (a message before it has no taker).
    let client = async_nats::connect(nats.url()).await.unwrap();
    let js = async_nats::jetstream::new(client.clone());
    let started = Instant::now();
    loop {
        let stream = match js.stream_by_subject(subject).await {
            Ok(name) => js.get_stream(name).await.ok(),
            Err(_) => None,
        };
        if let Some(stream) = stream {
            let consumer = stream
                .get_consumer::<async_nats::jetstream::consumer::pull::Config>("fn-recorder")
                .await;
            if consumer.is_ok() {
                break;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no node subscribed in 30 s:\n{}",
            fleet.log("santiago")
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    const MESSAGES: usize = 40;
    for n in 0..MESSAGES {
        js.publish(subject, format!("reading-{n}").into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    let mut h = async_nats::HeaderMap::new();
    h.insert("content-type", "application/cloudevents+json");
    let event = r#"{"specversion":"1.0","type":"cl.sensor.alarm","source":"/valparaiso","id":"e-1","data":"event-1"}"#;
    js.publish_with_headers(subject, h, event.into())
        .await
        .unwrap()
        .await
        .unwrap();

    let started = Instant::now();
    let read = || std::fs::read_to_string(&out).unwrap_or_default();
    while read().lines().count() < MESSAGES + 1 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{} of {} messages ran in 60 s:\n{}\n{}",
            read().lines().count(),
            MESSAGES + 1,
            fleet.log("santiago"),
            fleet.log("sao-paulo")
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let lines = read();
    let mut seen: HashMap<&str, usize> = HashMap::new();
    let mut by_node: HashMap<&str, usize> = HashMap::new();
    for l in lines.lines() {
        let f: Vec<&str> = l.split('|').collect();
        assert_eq!(f.len(), 5, "{l}");
        assert_eq!((f[2], f[3]), ("nats", subject), "{l}");
        *seen.entry(f[0]).or_default() += 1;
        *by_node.entry(f[4]).or_default() += 1;
        if f[0] == "event-1" {
            assert_eq!(f[1], "cl.sensor.alarm", "binary mode: {l}");
        }
    }
    eprintln!(
        "{} messages, {} calls, by node {by_node:?}",
        MESSAGES + 1,
        lines.lines().count()
    );
    for n in 0..MESSAGES {
        assert_eq!(
            seen.get(format!("reading-{n}").as_str()),
            Some(&1),
            "reading-{n}:\n{lines}"
        );
    }
    assert_eq!(seen.get("event-1"), Some(&1), "{lines}");
    drop((etcd, nats));
}
