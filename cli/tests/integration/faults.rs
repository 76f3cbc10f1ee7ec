//! Cut links, not killed processes: a Lima edge reaches its Bogotá cloud only through a fault
//! proxy (test-support `faults`), both real `geofaas node` processes. Clients in Lima call a
//! function the edge serves and one only the cloud serves (it logs each run), with `curl` and
//! reqwest, while the link passes, refuses, black-holes, drops the answer of a call that went
//! out, turns 500 ms slow, and heals. Every call is counted: answered 2xx, answered with a
//! clear error (and which), lost (none may be), run twice (none may be).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use geofaas_test_support::faults::{Fault, FaultProxy};

use crate::processes::{Fleet, Layout, NodeSpec};

const NODES: [NodeSpec; 2] = [
    ("lima", "edge", -12.05, -77.04),
    ("bogota", "cloud", 4.71, -74.07),
];
/// Lima serving `edge_functions` (the testdata's fault-edge-functions), Bogotá the cloud's.
fn andes(edge_functions: &std::path::Path) -> Layout<'_> {
    let cloud = edge_functions.with_file_name("fault-cloud-functions");
    Layout {
        functions: Some(edge_functions),
        node_functions: HashMap::from([("bogota", cloud)]),
        ..Layout::new("andes", &NODES)
    }
}

/// The call deadline the topology sets.
const CALL_TIMEOUT: Duration = Duration::from_secs(8);

/// What became of a round of calls.
#[derive(Debug, Default)]
struct Counts {
    ok: usize,
    /// Clear errors by status and code.
    errors: HashMap<String, usize>,
    /// Slowest answer.
    slowest: Duration,
}

struct Bench {
    fleet: Fleet,
    proxy: FaultProxy,
    log: String,
    next: usize,
}

impl Bench {
    /// One call of `function` from a Lima client: (status, error code or body, took).
    async fn call(&mut self, function: &str) -> (u16, String, Duration, String) {
        self.next += 1;
        let id = format!("c{}", self.next);
        let started = Instant::now();
        let resp = self
            .fleet
            .client
            .post(self.fleet.url("lima", &format!("/fn/{function}")))
            .header("x-client-location", "-12.05,-77.04")
            .body(format!("{} {id}", self.log))
            .timeout(CALL_TIMEOUT + Duration::from_secs(5))
            .send()
            .await
            .unwrap_or_else(|e| panic!("{function} {id}: no answer at all (lost): {e}"));
        let status = resp.status().as_u16();
        let retry_after = resp.headers().contains_key("retry-after");
        let body = resp.text().await.unwrap_or_default();
        let took = started.elapsed();
        let what = if status < 300 {
            body
        } else {
            let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
            let code = v["error"]["code"].as_str().unwrap_or("?").to_owned();
            if status == 503 {
                assert!(retry_after, "a 503 without Retry-After: {body}");
            }
            code
        };
        (status, what, took, id)
    }

    /// `n` calls of `function`, counted.
    async fn round(&mut self, function: &str, n: usize) -> (Counts, Vec<String>) {
        let mut c = Counts::default();
        let mut ids = Vec::new();
        for _ in 0..n {
            let (status, what, took, id) = self.call(function).await;
            c.slowest = c.slowest.max(took);
            assert!(
                took < CALL_TIMEOUT + Duration::from_secs(2),
                "{function} {id}: answered after {took:?}, past its deadline"
            );
            if status < 300 {
                c.ok += 1;
            } else {
                *c.errors.entry(format!("{status} {what}")).or_default() += 1;
            }
            ids.push(id);
        }
        (c, ids)
    }

    /// How often each call id ran at the cloud.
    fn runs(&self) -> HashMap<String, usize> {
        let mut runs = HashMap::new();
        for l in std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
        {
            *runs.entry(l.to_owned()).or_default() += 1;
        }
        runs
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edge_whose_link_to_the_cloud_fails_answers_every_call_clearly() {
    let root = geofaas_test_support::paths::manifest_dir().join("testdata");
    let proxy_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let extra = format!(
        "[gateway]\ncall_timeout_ms = {}\n[dns]\nprobe_interval_ms = 500\n",
        CALL_TIMEOUT.as_millis()
    );
    let edge_functions = root.join("fault-edge-functions");
    let fleet = Fleet::with(Layout {
        extra: &extra,
        public_ports: HashMap::from([("bogota", proxy_port)]),
        ..andes(&edge_functions)
    });
    let cloud = format!("127.0.0.1:{}", fleet.ports["bogota"])
        .parse()
        .unwrap();
    let proxy = FaultProxy::start(format!("127.0.0.1:{proxy_port}").parse().unwrap(), cloud)
        .await
        .unwrap();
    fleet.wait_all_ready().await;
    let log = fleet.path("tally.txt").to_str().unwrap().to_owned();
    let mut b = Bench {
        fleet,
        proxy,
        log,
        next: 0,
    };
    // The edge learns what the cloud serves once it reaches it.
    let started = Instant::now();
    while b.call("tally").await.0 != 200 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the cloud never answered through the proxy"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let mut report = Vec::new();
    let (here, _) = b.round("here", 10).await;
    let (cloud, _) = b.round("tally", 10).await;
    assert_eq!((here.ok, cloud.ok), (10, 10), "{here:?} {cloud:?}");
    report.push(("pass", here, cloud));

    // Refused: the edge's own function answers; the cloud's gets 503 with Retry-After at once,
    // and never ran.
    b.proxy.set(Fault::Refuse);
    let (here, _) = b.round("here", 10).await;
    let (cloud, ids) = b.round("tally", 10).await;
    assert_eq!(here.ok, 10, "{here:?}");
    assert_eq!(cloud.errors.get("503 unreachable"), Some(&10), "{cloud:?}");
    let runs = b.runs();
    assert!(
        ids.iter().all(|i| !runs.contains_key(i)),
        "a refused call ran"
    );
    // The same with curl, over HTTP/2, from another folder.
    let (status, body) = b.fleet.curl(&[
        "--http2",
        "-H",
        "x-client-location: -12.05,-77.04",
        "--data",
        &format!("{} curl-refused", b.log),
        &b.fleet.url("lima", "/fn/tally"),
    ]);
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("unreachable"), "{body}");
    report.push(("refused", here, cloud));

    // Healed: offloads resume.
    b.proxy.heal();
    let healed = Instant::now();
    while b.call("tally").await.0 != 200 {
        assert!(
            healed.elapsed() < Duration::from_secs(30),
            "offloads never resumed"
        );
    }
    let resumed = healed.elapsed();

    // Black hole: connections accepted, nothing answered. Each call still gets an answer
    // before its deadline: 503 when nothing was sent, a "may have run" error otherwise.
    b.proxy.set(Fault::Blackhole);
    let (here, _) = b.round("here", 5).await;
    let (cloud, _) = b.round("tally", 5).await;
    assert_eq!(here.ok, 5, "{here:?}");
    assert_eq!(cloud.ok, 0, "{cloud:?}");
    report.push(("black hole", here, cloud));

    // A 500 ms slow link (250 ms each way): slower, answered.
    b.proxy.set(Fault::Delay(Duration::from_millis(250)));
    let (here, _) = b.round("here", 5).await;
    let (cloud, _) = b.round("tally", 5).await;
    assert_eq!((here.ok, cloud.ok), (5, 5), "{here:?} {cloud:?}");
    report.push(("500 ms slow", here, cloud));

    // The connection dies after the request went out: the call ran at the cloud, the client
    // is told it may have run, and it does not run a second time.
    b.proxy.heal();
    assert_eq!(b.call("tally").await.0, 200);
    b.proxy.set(Fault::DropAnswers);
    let pending = {
        let client = b.fleet.client.clone();
        let url = b.fleet.url("lima", "/fn/tally");
        let body = format!("{} cut-1", b.log);
        tokio::spawn(async move {
            let r = client
                .post(url)
                .header("x-client-location", "-12.05,-77.04")
                .body(body)
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        })
    };
    let started = Instant::now();
    while !b.runs().contains_key("cut-1") {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the cut call never reached the cloud"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    b.proxy.set(Fault::Refuse);
    let (status, body) = pending.await.unwrap();
    assert!(status == 502 || status == 504, "{status} {body}");
    assert!(
        body.contains("may have run") || body.contains("timeout"),
        "{body}"
    );
    b.proxy.heal();
    tokio::time::sleep(Duration::from_secs(1)).await;

    // Nothing ran twice.
    let runs = b.runs();
    let twice: Vec<_> = runs.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "ran twice: {twice:?}");
    assert_eq!(runs.get("cut-1"), Some(&1));

    for (fault, here, cloud) in &report {
        eprintln!(
            "{fault:>12}: edge function {} ok {:?}, slowest {:?}; cloud function {} ok {:?}, slowest {:?}",
            here.ok, here.errors, here.slowest, cloud.ok, cloud.errors, cloud.slowest
        );
    }
    eprintln!(
        "offloads resumed {resumed:?} after the heal; the cut call answered {status}; runs {}, none twice",
        runs.len()
    );
}

/// Where Debian's libfaketime is.
const FAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// The Lima edge's clock five minutes ahead (libfaketime; its monotonic clock left alone):
/// its signed offloads are refused by the cloud with `403 clock_skew` naming it and how far
/// off it is, counted in `geofaas_signatures_refused_total{reason="clock"}` and logged; the
/// edge's own functions keep answering, and nothing ran at the cloud. `geofaas fleet ls` (both
/// nodes registered in etcd) names Lima's clock, how far ahead, and that it is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_clock_is_five_minutes_ahead_is_refused_by_name() {
    assert!(
        std::path::Path::new(FAKETIME).exists(),
        "{FAKETIME} is missing (Debian package libfaketime)"
    );
    let root = geofaas_test_support::paths::manifest_dir().join("testdata");
    let env = vec![
        ("LD_PRELOAD".to_owned(), FAKETIME.to_owned()),
        ("FAKETIME".to_owned(), "+300".to_owned()),
        ("FAKETIME_DONT_FAKE_MONOTONIC".to_owned(), "1".to_owned()),
    ];
    let edge_functions = root.join("fault-edge-functions");
    let etcd = geofaas_test_support::etcd::EtcdServer::start()
        .await
        .expect("etcd starts");
    let extra = format!(
        "[dns]\nprobe_interval_ms = 500\n[registry]\netcd = [\"{}\"]\n",
        etcd.url()
    );
    let fleet = Fleet::with(Layout {
        extra: &extra,
        node_env: HashMap::from([("lima", env)]),
        ..andes(&edge_functions)
    });
    fleet.wait_all_ready().await;
    let log = fleet.path("tally.txt");
    let (status, body) = fleet.curl(&[
        "-H",
        "x-client-location: -12.05,-77.04",
        "--data",
        &format!("{} skewed-1", log.display()),
        &fleet.url("lima", "/fn/tally"),
    ]);
    assert_eq!(status, 403, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"]["code"], "clock_skew", "{body}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("\"lima\"") && message.contains("ahead"),
        "{message}"
    );
    assert!(!log.exists(), "a refused call ran");
    let (status, body) = fleet.curl(&[
        "-H",
        "x-client-location: -12.05,-77.04",
        "--data",
        "x",
        &fleet.url("lima", "/fn/here"),
    ]);
    assert_eq!((status, body.as_str()), (200, "served here"));
    let (_, metrics) = fleet.curl(&[&fleet.url("bogota", "/metrics")]);
    let refused: f64 = metrics
        .lines()
        .filter(|l| {
            l.starts_with("geofaas_signatures_refused_total") && l.contains("reason=\"clock\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(refused >= 1.0, "{metrics}");
    let logged = fleet.log("bogota");
    assert!(logged.contains("node lima's clock is"), "{logged}");
    // `fleet ls` from the temp folder, once both nodes are registered.
    let deadline = Instant::now() + Duration::from_secs(30);
    let listed = loop {
        let ls = fleet.geofaas(&["fleet", "ls"]);
        let listed = String::from_utf8_lossy(&ls.stdout).into_owned();
        if ls.status.success() && listed.contains("lima ") && listed.contains("bogota ") {
            break listed;
        }
        assert!(
            Instant::now() < deadline,
            "fleet ls did not list both nodes:\n{listed}{}",
            String::from_utf8_lossy(&ls.stderr)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let note = listed
        .lines()
        .find(|l| l.starts_with("lima: clock"))
        .unwrap_or_else(|| panic!("fleet ls does not name lima's clock:\n{listed}"));
    let ahead: i64 = note
        .split_whitespace()
        .nth(2)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{note}"));
    assert!(
        (295..=305).contains(&ahead) && note.contains("ahead of") && note.contains("clock_skew"),
        "{note}"
    );
    assert!(!listed.contains("bogota: clock"), "{listed}");
    eprintln!(
        "clock 300 s ahead: {message}; {refused} signatures refused at the cloud; fleet ls: {note}"
    );
}

/// Clients that give up mid-call (`curl --max-time`) while the edge's one instance of `lag`
/// runs their call: each later call gets its own answer, never an abandoned call's, and once
/// the abandoned runs ended the node holds no call and no busy instance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_hang_up_mid_call_leave_no_call_or_instance_behind() {
    let root = geofaas_test_support::paths::manifest_dir().join("testdata");
    let edge_functions = root.join("fault-edge-functions");
    let fleet = Fleet::with(andes(&edge_functions));
    fleet.wait_all_ready().await;
    let url = fleet.url("lima", "/fn/lag");
    let call = |body: &str, max: &str| {
        fleet.curl(&[
            "--max-time",
            max,
            "-H",
            "x-client-location: -12.05,-77.04",
            "--data",
            body,
            &url,
        ])
    };
    assert_eq!(call("0 warm", "20"), (200, "warm".to_owned()));
    let mut hung_up = 0;
    for i in 0..5 {
        // curl gives up after 0.3 s of a 1 s call: no status.
        let (status, _) = call(&format!("1 abandoned-{i}"), "0.3");
        assert_eq!(status, 0, "call {i} was not cut short");
        hung_up += 1;
        let (status, body) = call(&format!("0 own-{i}"), "20");
        assert_eq!((status, body), (200, format!("own-{i}")));
    }
    // Let the abandoned runs end, then nothing is held.
    let started = Instant::now();
    let (mut running, mut busy);
    loop {
        let (_, state) = fleet.curl(&[&fleet.url("lima", "/ui/node")]);
        let v: serde_json::Value = serde_json::from_str(&state).unwrap_or_default();
        running = v["load"]["running"].as_u64();
        busy = v["load"]["functions"]["lag"]["busy"].as_u64();
        if running == Some(0) && busy.unwrap_or(0) == 0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "still held 20 s later: {state}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(call("0 after", "20"), (200, "after".to_owned()));
    eprintln!(
        "{hung_up} clients hung up mid-call; every next call got its own answer; running {running:?}, busy instances {busy:?} {:?} later",
        started.elapsed()
    );
}
