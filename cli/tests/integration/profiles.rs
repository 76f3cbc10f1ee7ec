//! Live profiles on a Melbourne fleet (two edges, the cloud in Sydney, real TLS, load reports
//! node to node every 200 ms): a node learns its functions' figures from its own calls (a
//! backend with known delays: the figures converge to them), uses a function's configured
//! profile only until enough calls were measured, puts `predicted;dur=` on exactly the answers
//! its policy placed (seen with `curl` over HTTP/1.1 and HTTP/2), sends its figures to the other
//! nodes in its load reports, and, with three real functions of very different execution times
//! and no profiles, predicts their latency within 20 % (median) after a few calls.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use geofaas_config::Topology;
use geofaas_fleet::now_ms;
use geofaas_functions::FunctionBackend;
use geofaas_gateway::profiles::PRIOR_CALLS;
use geofaas_gateway::{build_backends, NodeHandle, NodeOptions, NodeState, TlsMaterial};
use geofaas_scheduler::measured::MeasuredProfiles;
use geofaas_test_support::delays::DelayBackend;
use tokio::net::TcpListener;

const IN_CBD: &str = "-37.8136,144.9631";

/// The fleet: `cbd` and `docklands` in Melbourne, the cloud in Sydney; `backend` is the TOML of
/// `cbd`'s backend (none: the test gives every node its own backends).
fn melbourne(ports: &[u16], policy: &str, backend: &str, functions: &str) -> String {
    let node = |i: usize, id: &str, role: &str, lat: f64, lon: f64, area: &str| {
        let p = ports[i];
        format!(
            "[[node]]\nid = \"{id}\"\nrole = \"{role}\"\nlocation = {{ lat = {lat}, lon = {lon} }}\n{area}\
             public_url = \"https://127.0.0.1:{p}\"\nlisten = \"127.0.0.1:{p}\"\n"
        )
    };
    let circle = |lat: f64, lon: f64, km: f64| {
        format!("area.circle = {{ center = {{ lat = {lat}, lon = {lon} }}, radius_km = {km} }}\n")
    };
    format!(
        "zone = \"mel.test.\"\n[scheduler]\npolicy = \"{policy}\"\nload_interval_ms = 200\n\n{}{backend}\n{}\n{}\n{functions}",
        node(0, "cbd", "edge", -37.8136, 144.9631, &circle(-37.8136, 144.9631, 3.0)),
        node(1, "docklands", "edge", -37.8, 144.9, &circle(-37.8, 144.9, 2.0)),
        node(2, "cloud", "cloud", -33.8688, 151.2093, ""),
    )
}

struct Fleet {
    nodes: Vec<NodeHandle>,
    client: reqwest::Client,
    ca_file: tempfile::NamedTempFile,
}

impl Fleet {
    /// Starts the three nodes of `text(ports)`, each with `backends(topology, id)`.
    async fn start(
        text: impl FnOnce(&[u16]) -> String,
        backends: impl Fn(&Topology, &str) -> Vec<Arc<dyn FunctionBackend>>,
    ) -> Self {
        let mut listeners = Vec::new();
        for _ in 0..3 {
            listeners.push(TcpListener::bind("127.0.0.1:0").await.unwrap());
        }
        let ports: Vec<u16> = listeners
            .iter()
            .map(|l| l.local_addr().unwrap().port())
            .collect();
        let topology = Arc::new(
            Topology::parse(&text(&ports), "melbourne.toml", Path::new(".")).expect("topology"),
        );
        let tls = TlsMaterial::generate(&["127.0.0.1".to_owned()]).unwrap();
        let opts = NodeOptions {
            offload_secret: Some(b"test secret".to_vec()),
            ca_pem: Some(tls.ca_pem.clone().into_bytes()),
            ..Default::default()
        };
        let mut nodes = Vec::new();
        for (node, listener) in topology.nodes.iter().zip(listeners) {
            let b = backends(&topology, &node.id);
            let state =
                Arc::new(NodeState::new(topology.clone(), &node.id, b, opts.clone()).unwrap());
            nodes.push(NodeHandle::spawn(state, listener, &tls).unwrap());
        }
        let ca = reqwest::Certificate::from_pem(tls.ca_pem.as_bytes()).unwrap();
        let client = reqwest::Client::builder()
            .add_root_certificate(ca)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        let ca_file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(ca_file.path(), tls.ca_pem.as_bytes()).unwrap();
        Self {
            nodes,
            client,
            ca_file,
        }
    }

    fn node(&self, id: &str) -> &NodeHandle {
        self.nodes
            .iter()
            .find(|n| n.state.place.id == id)
            .expect("node")
    }

    fn url(&self, id: &str) -> String {
        format!("https://127.0.0.1:{}", self.node(id).addr.port())
    }

    /// `POST /fn/{function}` at `node` from a client in the CBD.
    async fn call(&self, node: &str, function: &str) -> reqwest::Response {
        let resp = self
            .client
            .post(format!("{}/fn/{function}", self.url(node)))
            .header("X-Client-Location", IN_CBD)
            .send()
            .await
            .expect("request");
        assert_eq!(resp.status(), 200, "{function} at {node}");
        resp
    }

    async fn profiles(&self, node: &str) -> MeasuredProfiles {
        let resp = self
            .client
            .get(format!("{}/node/profiles", self.url(node)))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        MeasuredProfiles::parse(&resp.text().await.unwrap(), "/node/profiles").unwrap()
    }

    async fn stop(self) {
        for n in self.nodes {
            n.shutdown().await.unwrap();
        }
    }
}

/// Every node with its own [`DelayBackend`] of the same functions.
fn delays(make: fn() -> DelayBackend) -> impl Fn(&Topology, &str) -> Vec<Arc<dyn FunctionBackend>> {
    move |_, _| vec![Arc::new(make()) as Arc<dyn FunctionBackend>]
}

fn header(resp: &reqwest::Response, name: &str) -> String {
    resp.headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default()
}

/// The `name;dur=` of a `Server-Timing` value, in ms.
fn timing(value: &str, name: &str) -> Option<f64> {
    value.split(',').find_map(|m| {
        let mut parts = m.trim().split(';');
        (parts.next()? == name)
            .then(|| parts.find_map(|p| p.strip_prefix("dur="))?.parse().ok())
            .flatten()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn figures_learned_from_calls_converge_to_the_backends_known_delays() {
    let f = Fleet::start(
        |ports| melbourne(ports, "greedy", "", ""),
        delays(|| {
            DelayBackend::new()
                .with("quick", 5, 40)
                .with("steady", 60, 20)
        }),
    )
    .await;
    for _ in 0..12 {
        for function in ["quick", "steady"] {
            let resp = f.call("cbd", function).await;
            assert_eq!(header(&resp, "x-served-by"), "cbd");
        }
    }
    let p = f.profiles("cbd").await;
    assert_eq!(p.node, "cbd");
    for (function, exec, cold) in [("quick", 5.0, 40.0), ("steady", 60.0, 20.0)] {
        let m = &p.functions[function];
        assert_eq!(m.calls, 12, "{function}");
        let b = &m.backends["delays"];
        assert_eq!((b.calls, b.cold_starts), (12, 1), "{function}");
        assert_eq!(b.exec_ms, exec, "{function}");
        assert_eq!(b.cold_ms, Some(cold), "{function}");
        // The node's own figures: a start, which costs the cold start the answer reported and
        // whatever the first run took beyond a warm call (here the fake's first run is as long
        // as a warm one: scheduling noise only), and a warm call's time from arrival to answer,
        // which cannot be shorter than the function ran.
        assert!(m.cold_ms.is_some_and(|c| c >= cold), "{function}: {m:?}");
        assert!(m.warm_ms >= exec, "{function}: {m:?}");
        assert_eq!(m.memory_mb, 128.0, "{function}: the default size");
    }
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_configured_profile_is_the_prior_until_enough_calls_were_measured() {
    // The profile says 500 ms of CPU and no cold start; the function takes 10 ms.
    let profile = "[[function]]\nname = \"known\"\ncpu_ms = 500\nimage_mb = 0\ninit_ms = 0\n";
    let f = Fleet::start(
        |ports| melbourne(ports, "greedy", "", profile),
        delays(|| DelayBackend::new().with("known", 10, 0)),
    )
    .await;
    for call in 0..PRIOR_CALLS + 4 {
        let resp = f.call("cbd", "known").await;
        assert_eq!(header(&resp, "x-placement-reason"), "greedy");
        let predicted = timing(&header(&resp, "server-timing"), "predicted").expect("predicted");
        if call == 0 {
            // Served here, as the model says it takes 500 ms (3 GHz).
            assert_eq!(predicted, 500.0);
        } else if call < PRIOR_CALLS {
            // The prior stands for the calls not yet measured: 500 ms weighted by them, the
            // calls measured so far (10 ms and the gateway's own time, well under 60) by theirs.
            let w = call as f64 / PRIOR_CALLS as f64;
            let (low, high) = ((1.0 - w) * 500.0 + w * 10.0, (1.0 - w) * 500.0 + w * 60.0);
            assert!(
                (low..high).contains(&predicted),
                "call {call}: {predicted} not in {low}..{high}"
            );
        } else {
            let measured = f
                .node("cbd")
                .current()
                .scheduling
                .profiles
                .facts("known")
                .unwrap();
            assert!(measured.calls >= PRIOR_CALLS);
            assert!(
                (10.0..500.0).contains(&predicted),
                "call {call}: {predicted}"
            );
        }
    }
    f.stop().await;
}

/// `curl -i` at `url` over `http` (`--http1.1`, `--http2`), from a folder that is not the
/// repository; the header lines, lower-cased.
/// A client at the cloud sends no location (the cloud would hand a CBD client to `cbd`).
fn curl(ca: &Path, http: &str, url: &str, located: bool) -> String {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new("curl");
    cmd.current_dir(dir.path())
        .args(["-sS", "-i", http, "--cacert"])
        .arg(ca)
        .args(["-X", "POST"]);
    if located {
        cmd.args(["-H", &format!("X-Client-Location: {IN_CBD}")]);
    }
    let out = cmd.arg(url).output().expect("curl runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).to_lowercase();
    text.split("\r\n\r\n").next().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn predicted_is_on_exactly_the_answers_a_policy_placed() {
    // `heavy`'s 2 GB image makes a new instance at an edge (1 Gbit/s) dearer than in the cloud
    // (10 Gbit/s): greedy places it there. `plain` has a profile without a cold start and stays
    // here; `new-h1` and `new-h2` have none and are called for the first time (no decision).
    let profiles = "[[function]]\nname = \"heavy\"\nimage_mb = 2000\n\n\
                    [[function]]\nname = \"plain\"\nimage_mb = 0\ninit_ms = 0\n";
    let f = Fleet::start(
        |ports| melbourne(ports, "greedy", "", profiles),
        |_, id| {
            let mut b = DelayBackend::new().with("heavy", 1, 0).with("plain", 1, 0);
            if id == "cbd" {
                b = b.with("new-h1", 1, 0).with("new-h2", 1, 0);
            } else {
                b = b.with("cloud-only", 1, 0);
            }
            vec![Arc::new(b) as Arc<dyn FunctionBackend>]
        },
    )
    .await;
    let ca = f.ca_file.path();
    for (http, first) in [("--http1.1", "new-h1"), ("--http2", "new-h2")] {
        let cases = [
            ("cbd", "heavy", "cloud", "greedy", true),
            ("cbd", "plain", "local-", "greedy", true),
            ("cbd", first, "local-new", "no_decision", false),
            ("cbd", "cloud-only", "cloud", "not_here", false),
            ("cloud", "plain", "local-", "no_policy", false),
        ];
        for (node, function, placement, reason, predicted) in cases {
            let h = curl(
                ca,
                http,
                &format!("{}/fn/{function}", f.url(node)),
                node != "cloud",
            );
            let what = format!("{http} {function} at {node}:\n{h}");
            assert!(h.starts_with("http/"), "{what}");
            assert!(h.contains(&format!("x-placement: {placement}")), "{what}");
            assert!(
                h.contains(&format!("x-placement-reason: {reason}\r\n")),
                "{what}"
            );
            assert_eq!(h.contains("predicted;dur="), predicted, "{what}");
        }
    }
    // Each placed call's error is in /metrics, by where it ran.
    let metrics = f
        .client
        .get(format!("{}/metrics", f.url("cbd")))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    // `plain` started an instance for its first call, then reused it.
    for (placement, calls) in [("local-new", 1), ("local-warm", 1), ("cloud", 2)] {
        let series = format!(
            "geofaas_prediction_error_ratio_count{{node=\"cbd\",placement=\"{placement}\"}} {calls}"
        );
        assert!(metrics.contains(&series), "{series} in\n{metrics}");
    }
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_reports_carry_a_nodes_profiles_to_the_other_nodes() {
    let f = Fleet::start(
        |ports| melbourne(ports, "greedy", "", ""),
        delays(|| DelayBackend::new().with("quick", 5, 40)),
    )
    .await;
    for _ in 0..6 {
        f.call("cbd", "quick").await;
    }
    let own = f
        .node("cbd")
        .current()
        .scheduling
        .profiles
        .facts("quick")
        .unwrap();
    let docklands = f.node("docklands").current();
    let stale = geofaas_gateway::loads::stale_ms(&docklands.place.topology);
    let give_up = std::time::Instant::now() + Duration::from_secs(60);
    let (theirs, links, instances) = loop {
        let seen = docklands
            .scheduling
            .loads
            .with_fresh("cbd", now_ms(), stale, |r| {
                (
                    r.load.profiles.get("quick").copied(),
                    r.load.links.clone(),
                    r.load.functions.get("quick").cloned(),
                )
            });
        if let Some((Some(p), links, instances)) =
            seen.filter(|(p, _, _)| p.is_some_and(|p| p.calls == 6))
        {
            break (p, links, instances);
        }
        assert!(
            std::time::Instant::now() < give_up,
            "no report with 6 calls"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // Through JSON and back: equal to the last bits a float's text keeps.
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(1.0);
    assert!(close(theirs.warm_ms, own.warm_ms), "{theirs:?} {own:?}");
    assert!(
        match (theirs.cold_ms, own.cold_ms) {
            (Some(a), Some(b)) => close(a, b),
            (a, b) => a == b,
        },
        "{theirs:?} {own:?}"
    );
    assert!(own.cold_ms.is_some_and(|c| c >= 40.0), "{own:?}");
    // `quick` has no `[[function]]`; its warm instance at cbd is in the report all the same.
    let instances = instances.expect("quick's instances reported");
    assert_eq!((instances.idle, instances.busy), (1, 0));
    // cbd timed the reports it sent to docklands.
    assert!(
        links.get("docklands").is_some_and(|ms| *ms > 0.0),
        "{links:?}"
    );
    f.stop().await;
}

/// A Python function that sleeps `ms` milliseconds per call.
fn sleeper(dir: &Path, name: &str, ms: u64) {
    let d = dir.join(name);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(
        d.join("fn.py"),
        format!(
            "import time\n\n\ndef fn(input, headers):\n    time.sleep({})\n    return \"{name}\"\n",
            ms as f64 / 1000.0
        ),
    )
    .unwrap();
}

/// Three real functions (10, 60 and 250 ms) without profiles at `cbd`, placed by `policy`:
/// for each function, the answers of its calls after the first few, as (ran, actual,
/// predicted), actual being what the node's `Server-Timing` accounts for.
async fn three_sleepers(
    policy: &str,
    calls: usize,
) -> Vec<(&'static str, Vec<(String, f64, f64)>)> {
    let dir = tempfile::tempdir().unwrap();
    for (name, ms) in [("tiny", 10), ("mid", 60), ("long", 250)] {
        sleeper(dir.path(), name, ms);
    }
    let backend = format!(
        "\n[[node.backend]]\nkind = \"local\"\nfunctions_dir = \"{}\"\n",
        dir.path().display()
    );
    let f = Fleet::start(
        |ports| melbourne(ports, policy, &backend, ""),
        |topology, id| build_backends(topology, id).unwrap(),
    )
    .await;
    let mut out = Vec::new();
    for name in ["tiny", "mid", "long"] {
        out.push((name, Vec::new()));
    }
    for i in 0..calls {
        for (name, seen) in &mut out {
            let resp = f.call("cbd", name).await;
            let st = header(&resp, "server-timing");
            if i < 5 {
                continue;
            }
            let actual: f64 = ["route", "queue", "cold", "exec", "sched"]
                .iter()
                .filter_map(|n| timing(&st, n))
                .sum();
            let predicted = timing(&st, "predicted").unwrap_or(f64::NAN);
            seen.push((header(&resp, "x-placement"), actual, predicted));
        }
    }
    f.stop().await;
    out
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_functions_without_profiles_are_predicted_within_a_fifth_after_a_few_calls() {
    for (name, seen) in three_sleepers("greedy", 30).await {
        assert!(
            seen.iter().all(|(_, _, p)| p.is_finite()),
            "{name}: every call placed: {seen:?}"
        );
        let ratio = median(seen.iter().map(|(_, a, p)| a / p).collect());
        assert!(
            (0.8..=1.2).contains(&ratio),
            "{name}: median actual/predicted {ratio:.3} over {seen:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ppo_keeps_an_idle_edges_calls_at_home() {
    for (name, seen) in three_sleepers("ppo", 12).await {
        for (ran, _, p) in &seen {
            assert!(p.is_finite(), "{name}: placed by PPO");
            assert_eq!(ran, "local-warm", "{name}: {seen:?}");
        }
    }
}

/// `GET /node/profiles` at `url` with `curl` over `http`, from a folder that is not the
/// repository.
fn curl_profiles(ca: &Path, http: &str, url: &str) -> MeasuredProfiles {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new("curl")
        .current_dir(dir.path())
        .args(["-sS", "--fail", http, "--cacert"])
        .arg(ca)
        .arg(format!("{url}/node/profiles"))
        .output()
        .expect("curl runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    MeasuredProfiles::parse(&String::from_utf8_lossy(&out.stdout), "/node/profiles").unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_functions_measured_memory_replaces_its_configured_size_in_profiles_and_reports() {
    // A real Python function that holds 50 MiB from its first call on, configured at 512 MB.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("hog");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(
        d.join("fn.py"),
        r#"keep = []


def fn(input, headers):
    if not keep:
        b = bytearray(50 * 1024 * 1024)
        for i in range(0, len(b), 4096):
            b[i] = 1
        keep.append(b)
    return 'ok'
"#,
    )
    .unwrap();
    let backend = format!(
        "\n[[node.backend]]\nkind = \"local\"\nfunctions_dir = \"{}\"\n",
        dir.path().display()
    );
    // No image to pull and a short run in the prior, so greedy serves the first calls here.
    let profile =
        "[[function]]\nname = \"hog\"\nmemory_mb = 512\ncpu_ms = 5\nimage_mb = 0\ninit_ms = 0\n";
    let f = Fleet::start(
        |ports| melbourne(ports, "greedy", &backend, profile),
        |topology, id| build_backends(topology, id).unwrap(),
    )
    .await;
    let ca = f.ca_file.path().to_owned();
    f.call("cbd", "hog").await;
    let first = curl_profiles(&ca, "--http2", &f.url("cbd"));
    let hog = &first.functions["hog"];
    assert!(
        hog.memory_samples < geofaas_gateway::profiles::MEMORY_SAMPLES && hog.memory_mb == 512.0,
        "one call: the configured size: {hog:?}"
    );
    // Samples are at most one per 2 s: call until the figure rests on enough of them.
    let give_up = std::time::Instant::now() + Duration::from_secs(60);
    let measured = loop {
        f.call("cbd", "hog").await;
        let p = curl_profiles(&ca, "--http1.1", &f.url("cbd"));
        let hog = p.functions["hog"].clone();
        if hog.memory_samples >= geofaas_gateway::profiles::MEMORY_SAMPLES {
            break hog;
        }
        assert!(
            std::time::Instant::now() < give_up,
            "never measured: {hog:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let mib50 = 50.0 * 1024.0 * 1024.0 / 1e6;
    assert!(
        (mib50..mib50 + 30.0).contains(&measured.memory_mb),
        "50 MiB and an interpreter's share: {measured:?}"
    );
    // The other edge gets the figure in cbd's load reports.
    let docklands = f.node("docklands").current();
    let stale = geofaas_gateway::loads::stale_ms(&docklands.place.topology);
    let reported = loop {
        let seen = docklands
            .scheduling
            .loads
            .with_fresh("cbd", now_ms(), stale, |r| {
                r.load.profiles.get("hog").and_then(|p| p.memory_mb)
            });
        if let Some(Some(mb)) = seen {
            break mb;
        }
        assert!(std::time::Instant::now() < give_up, "no report with memory");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!((mib50..mib50 + 30.0).contains(&reported), "{reported}");
    f.stop().await;
}
