//! Live placement across real nodes (`[scheduler] policy = "greedy"`, load reports sent node to
//! node every 200 ms): a saturated edge places calls on its neighbour before queueing and on
//! the cloud once the neighbour's reports are stale, a forwarded call is never forwarded again,
//! the local runtime reuses or starts an instance as the policy says, a corrupt weights file
//! falls back to greedy with one log line (and SIGHUP loads good ones), and `curl` sees where a
//! call ran on a Melbourne fleet.

use std::process::{Command, Stdio};
use std::time::Duration;

use geofaas_fleet::{now_ms, LoadReport};
use geofaas_gateway::auth::OffloadKey;
use geofaas_gateway::NodeHandle;

use crate::cluster::{topology_text, Cluster};

const BERLIN: &str = "52.51,13.32";
const IN_CBD: &str = "-37.8136,144.9631";
const SECRET: &[u8] = b"test secret";

/// `nap` holds an instance for its body's seconds and costs 1 s in the model; `doze` is the same
/// function with a 60 s cold start, so waiting for a busy instance beats starting one.
const PROFILES: &str = "
[[function]]
name = \"nap\"
cpu_ms = 1000
memory_mb = 16
image_mb = 1
init_ms = 30
slo_ms = 2000

[[function]]
name = \"doze\"
cpu_ms = 1000
memory_mb = 16
image_mb = 1
init_ms = 60000
slo_ms = 2000
";

/// The Berlin cluster with greedy placement, fast load reports, `tu-berlin` given `cores`, and
/// edge calls allowed 5 s (a busy `nap` outlasts a phase of a test).
async fn berlin(cores: u32) -> Cluster {
    Cluster::start_with(|ports| {
        let text = topology_text(ports, 1 << 20)
            .replace("timeout_ms = 1500", "timeout_ms = 5000")
            .replace(
                "policy = \"none\"",
                "policy = \"greedy\"\nload_interval_ms = 200",
            )
            .replacen(
                "id = \"tu-berlin\"",
                &format!("id = \"tu-berlin\"\ncores = {cores}"),
                1,
            );
        format!("{text}{PROFILES}")
    })
    .await
}

fn node<'a>(c: &'a Cluster, id: &str) -> &'a NodeHandle {
    c.nodes
        .iter()
        .find(|n| n.state.place.id == id)
        .expect("node")
}

/// Waits until `at` holds a fresh load report of `of`.
async fn until_reported(c: &Cluster, at: &str, of: &str) {
    let state = node(c, at).current();
    let stale = geofaas_gateway::loads::stale_ms(&state.place.topology);
    while !state.scheduling.loads.is_fresh(of, stale) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until `id` has `busy` instances of `function` serving a call (a test that never
/// gets there fails after a minute instead of hanging).
async fn until_busy(c: &Cluster, id: &str, function: &str, busy: usize) {
    let give_up = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        assert!(
            std::time::Instant::now() < give_up,
            "{id} never ran {busy} {function}"
        );
        let state = node(c, id).current();
        let stats = state
            .directory
            .backends()
            .iter()
            .find_map(|b| b.stats(function));
        if stats.is_some_and(|s| s.busy >= busy) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Starts a `nap` (or `doze`) of `seconds` at `id` in the background, from a client in Berlin
/// (or, at `cbd`, in Melbourne's CBD).
pub(crate) fn nap_in_background(
    c: &Cluster,
    id: &str,
    function: &str,
    seconds: &'static str,
) -> tokio::task::JoinHandle<reqwest::Response> {
    let at = if id == "cbd" { IN_CBD } else { BERLIN };
    let req = c
        .client
        .post(format!("{}/fn/{function}", c.url(id)))
        .header("X-Client-Location", at)
        .body(seconds);
    tokio::spawn(async move { req.send().await.expect("request") })
}

fn header(resp: &reqwest::Response, name: &str) -> String {
    resp.headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default()
}

/// The value of the Prometheus series `series` in `/metrics` of `id` (0 when absent).
async fn metric(c: &Cluster, id: &str, series: &str) -> f64 {
    let text = c.get(id, "/metrics", None).await.text().await.unwrap();
    text.lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .map_or(0.0, |v| v.parse().unwrap())
}

/// A load report of `node` measured `age_ms` ago with `nap` idle there, posted to `to` signed as
/// `node`; the status of the answer.
async fn post_report(c: &Cluster, to: &str, node: &str, age_ms: u64) -> u16 {
    let mut load = geofaas_fleet::NodeLoad::default();
    load.functions.insert(
        "nap".into(),
        geofaas_fleet::FunctionLoad { idle: 1, busy: 0 },
    );
    let report = LoadReport {
        node: node.into(),
        at_ms: now_ms() - age_ms,
        load,
        cpu_percent: 0.0,
        memory_bytes: 0,
    };
    c.client
        .post(format!("{}/node/load", c.url(to)))
        .header(
            "x-geofaas-offload",
            OffloadKey::new(SECRET).sign(node, "POST", "/node/load"),
        )
        .json(&report)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saturated_edge_places_calls_on_its_neighbour_and_ignores_stale_reports() {
    let mut c = berlin(1).await;
    until_reported(&c, "tu-berlin", "potsdam").await;

    // tu-berlin's one core is busy: the next call goes to Potsdam instead of queueing. The
    // busy calls are `doze` (the same function): a measured figure is the median of a
    // function's calls, so 1 s and 3 s calls of `nap` beside 0 s ones would blur what the
    // placed `nap` costs.
    let first = nap_in_background(&c, "tu-berlin", "doze", "1.0");
    until_busy(&c, "tu-berlin", "doze", 1).await;
    let resp = c.post("tu-berlin", "nap", BERLIN, "0").await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-placement"), "neighbor");
    assert_eq!(header(&resp, "x-placement-reason"), "greedy");
    assert_eq!(header(&resp, "x-served-by"), "potsdam");
    assert_eq!(header(&resp, "x-offloaded-from"), "tu-berlin");
    let first = first.await.unwrap();
    assert_eq!(header(&first, "x-served-by"), "tu-berlin");
    assert_eq!(header(&first, "x-placement"), "local-new");
    let placed =
        r#"geofaas_placements_total{node="tu-berlin",placement="neighbor",reason="greedy"}"#;
    assert_eq!(metric(&c, "tu-berlin", placed).await, 1.0);
    let decisions = r#"geofaas_scheduler_decision_seconds_count{node="tu-berlin"}"#;
    assert!(metric(&c, "tu-berlin", decisions).await >= 2.0);

    // Potsdam stops: once its last report is stale it is no candidate, and the saturated edge
    // places the call in the cloud (not on a dead neighbour).
    let potsdam = c.nodes.remove(1);
    potsdam.shutdown().await.unwrap();
    let state = node(&c, "tu-berlin").current();
    let stale = geofaas_gateway::loads::stale_ms(&state.place.topology);
    while state.scheduling.loads.is_fresh("potsdam", stale) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A report that arrives late is just as stale.
    assert_eq!(post_report(&c, "tu-berlin", "potsdam", 10_000).await, 204);
    let busy = nap_in_background(&c, "tu-berlin", "doze", "3.0");
    until_busy(&c, "tu-berlin", "doze", 1).await;
    let resp = c.post("tu-berlin", "nap", BERLIN, "0").await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-placement"), "cloud");
    assert_eq!(header(&resp, "x-placement-reason"), "greedy");
    assert_eq!(header(&resp, "x-served-by"), "cloud");

    // A fresh report makes Potsdam a candidate again: the call is placed there, Potsdam cannot
    // be connected to, and the cloud takes it.
    assert_eq!(post_report(&c, "tu-berlin", "potsdam", 0).await, 204);
    let resp = c.post("tu-berlin", "nap", BERLIN, "0").await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-placement"), "cloud");
    assert_eq!(header(&resp, "x-placement-reason"), "neighbor_unreachable");
    busy.await.unwrap();

    // Reports must be signed by the node they describe.
    let unsigned = c
        .client
        .post(format!("{}/node/load", c.url("tu-berlin")))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(unsigned.status(), 401);
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarded_call_is_never_forwarded_again() {
    let c = berlin(1).await;
    until_reported(&c, "tu-berlin", "potsdam").await;
    let busy = nap_in_background(&c, "tu-berlin", "nap", "1.0");
    until_busy(&c, "tu-berlin", "nap", 1).await;
    // Unsigned, this call would go to Potsdam (see above). Signed by Potsdam, it was forwarded
    // once already: tu-berlin runs it, waiting for its busy instance.
    let resp = c
        .client
        .post(format!("{}/fn/nap", c.url("tu-berlin")))
        .header("X-Client-Location", BERLIN)
        .header(
            "x-geofaas-offload",
            OffloadKey::new(SECRET).sign("potsdam", "POST", "/fn/nap"),
        )
        .body("0")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-served-by"), "tu-berlin");
    assert_eq!(header(&resp, "x-placement-reason"), "forwarded");
    assert_eq!(header(&resp, "x-placement"), "local-warm");
    assert!(!resp.headers().contains_key("x-offloaded-from"));
    let first = busy.await.unwrap();
    assert_eq!(
        resp.text().await.unwrap(),
        first.text().await.unwrap(),
        "the same instance, after the first call"
    );
    for id in ["tu-berlin", "potsdam"] {
        let series = format!(r#"geofaas_placements_total{{node="{id}",placement="neighbor""#);
        let text = c.get(id, "/metrics", None).await.text().await.unwrap();
        assert!(!text.contains(&series), "{id} forwarded a call:\n{text}");
        assert!(!text.contains("geofaas_offloads_total"), "{id}:\n{text}");
    }
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_runtime_reuses_or_starts_an_instance_as_the_policy_says() {
    let c = berlin(8).await;
    let cold = c.post("tu-berlin", "sieve", BERLIN, "").await;
    assert_eq!(header(&cold, "x-placement"), "local-new");
    assert_eq!(header(&cold, "x-cold-start"), "true");
    let warm = c.post("tu-berlin", "sieve", BERLIN, "").await;
    assert_eq!(header(&warm, "x-placement"), "local-warm");
    assert_eq!(header(&warm, "x-cold-start"), "false");
    assert_eq!(header(&warm, "x-placement-reason"), "greedy");

    // nap's only instance is busy for a second; a new one costs 38 ms: greedy starts one.
    let busy = nap_in_background(&c, "tu-berlin", "nap", "1.0");
    until_busy(&c, "tu-berlin", "nap", 1).await;
    let resp = c.post("tu-berlin", "nap", BERLIN, "0").await;
    assert_eq!(header(&resp, "x-placement"), "local-new");
    assert_eq!(header(&resp, "x-cold-start"), "true");
    let other = resp.text().await.unwrap();
    let first = busy.await.unwrap().text().await.unwrap();
    assert_ne!(other, first, "two instances");

    // doze's cold start costs a minute in the model: greedy waits for the busy instance, and
    // the runtime does wait instead of starting one.
    let warmup = c.post("tu-berlin", "doze", BERLIN, "0").await;
    assert_eq!(header(&warmup, "x-placement"), "local-new");
    let pid = warmup.text().await.unwrap();
    let busy = nap_in_background(&c, "tu-berlin", "doze", "1.0");
    until_busy(&c, "tu-berlin", "doze", 1).await;
    let resp = c.post("tu-berlin", "doze", BERLIN, "0").await;
    assert_eq!(header(&resp, "x-placement"), "local-warm");
    assert_eq!(header(&resp, "x-cold-start"), "false");
    assert_eq!(resp.text().await.unwrap(), pid, "the busy instance, reused");
    assert_eq!(busy.await.unwrap().text().await.unwrap(), pid);
    c.stop().await;
}

/// A Melbourne fleet: two CBD-area edges 6 km apart and the cloud in Sydney; `cbd` has one core.
fn melbourne(ports: &[u16]) -> String {
    let edge = |id: &str, lat: f64, lon: f64, port: u16, extra: &str| {
        format!(
            r#"
[[node]]
id = "{id}"
role = "edge"
{extra}location = {{ lat = {lat}, lon = {lon} }}
area.circle = {{ center = {{ lat = {lat}, lon = {lon} }}, radius_km = 2 }}
public_url = "https://127.0.0.1:{port}"
listen = "127.0.0.1:{port}"
[[node.backend]]
kind = "local"
functions_dir = "../../functions"
[[node.backend]]
kind = "local"
functions_dir = "edge-functions"
"#
        )
    };
    format!(
        r#"zone = "mel.test."
[scheduler]
policy = "greedy"
load_interval_ms = 200
{cbd}{docklands}
[[node]]
id = "cloud"
role = "cloud"
location = {{ lat = -33.8688, lon = 151.2093 }}
public_url = "https://127.0.0.1:{cloud}"
listen = "127.0.0.1:{cloud}"
[[node.backend]]
kind = "local"
functions_dir = "cloud-functions"

[[function]]
name = "sieve"
cpu_ms = 6
memory_mb = 32
image_mb = 1
init_ms = 30
slo_ms = 200
{PROFILES}"#,
        cbd = edge("cbd", -37.8136, 144.9631, ports[0], "cores = 1\n"),
        docklands = edge("docklands", -37.8000, 144.9000, ports[1], ""),
        cloud = ports[2],
    )
}

/// `curl -s -i` of `POST url` from a client in the CBD over `http` (`--http1.1`, `--http2`),
/// lower-cased.
fn curl(c: &Cluster, http: &str, url: &str, body: &str) -> String {
    let out = tokio::task::block_in_place(|| {
        Command::new("curl")
            .args(["-s", "-i", "-m", "20", http, "--cacert"])
            .arg(c.ca_file.path())
            .args([
                "-H",
                "x-client-location: -37.8136,144.9631",
                "-d",
                body,
                url,
            ])
            .stderr(Stdio::inherit())
            .output()
            .expect("curl runs")
    });
    String::from_utf8_lossy(&out.stdout).to_lowercase()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_sees_where_each_call_ran_on_a_melbourne_fleet() {
    let c = Cluster::start_with(melbourne).await;
    until_reported(&c, "cbd", "docklands").await;
    let url = |f: &str| format!("{}/fn/{f}", c.url("cbd"));
    let text = curl(&c, "--http2", &url("sieve"), "");
    assert!(text.starts_with("http/2 200"), "{text}");
    assert!(text.contains("x-placement: local-new\r\n"), "{text}");
    assert!(text.contains("x-placement-reason: greedy\r\n"), "{text}");
    for http in ["--http1.1", "--http2"] {
        let text = curl(&c, http, &url("sieve"), "");
        assert!(text.contains(" 200"), "{text}");
        assert!(
            text.contains("x-placement: local-warm\r\n"),
            "{http}: {text}"
        );
        assert!(text.contains("x-served-by: cbd\r\n"), "{http}: {text}");
    }
    let busy = nap_in_background(&c, "cbd", "nap", "1.0");
    until_busy(&c, "cbd", "nap", 1).await;
    let text = curl(&c, "--http2", &url("nap"), "0");
    assert!(text.starts_with("http/2 200"), "{text}");
    assert!(text.contains("x-placement: neighbor\r\n"), "{text}");
    assert!(text.contains("x-served-by: docklands\r\n"), "{text}");
    assert!(text.contains("x-offloaded-from: cbd\r\n"), "{text}");
    busy.await.unwrap();
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_weights_fall_back_to_greedy_with_one_log_line_and_sighup_loads_good_ones() {
    let dir = tempfile::tempdir().unwrap();
    let tls = geofaas_gateway::TlsMaterial::generate(&["127.0.0.1".into()]).unwrap();
    for (name, pem) in [
        ("cert.pem", &tls.cert_pem),
        ("key.pem", &tls.key_pem),
        ("ca.pem", &tls.ca_pem),
    ] {
        std::fs::write(dir.path().join(name), pem).unwrap();
    }
    let weights = dir.path().join("melbourne.safetensors");
    std::fs::write(&weights, b"not a safetensors file").unwrap();
    let ports = [free_port(), free_port(), free_port()];
    let base = geofaas_test_support::paths::manifest_dir().join("testdata");
    let text = melbourne(&ports)
        .replace(
            "policy = \"greedy\"",
            "policy = \"ppo\"\nweights = \"melbourne.safetensors\"",
        )
        .replace(
            "../../functions",
            &base.join("../../functions").display().to_string(),
        )
        .replace(
            "\"edge-functions\"",
            &format!("{:?}", base.join("edge-functions")),
        )
        .replace(
            "\"cloud-functions\"",
            &format!("{:?}", base.join("cloud-functions")),
        );
    let d = dir.path().display();
    let text = format!(
        "{text}\n[tls]\ncert = \"{d}/cert.pem\"\nkey = \"{d}/key.pem\"\nca = \"{d}/ca.pem\"\n"
    );
    let config = dir.path().join("mel.toml");
    std::fs::write(&config, text).unwrap();
    let log = dir.path().join("cbd.log");
    let child = Command::new(env!("CARGO_BIN_EXE_geofaas"))
        .args(["node", "--node", "cbd", "--config"])
        .arg(&config)
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .env("GEOFAAS_OFFLOAD_SECRET", "weights test")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let pid = child.id().to_string();
    let child = std::sync::Mutex::new(child);
    let client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(tls.ca_pem.as_bytes()).unwrap())
        .build()
        .unwrap();
    let url = format!("https://127.0.0.1:{}/fn/sieve", ports[0]);
    let reason = || async {
        loop {
            if let Some(status) = child.lock().unwrap().try_wait().unwrap() {
                panic!(
                    "the node exited ({status}):\n{}",
                    std::fs::read_to_string(&log).unwrap()
                );
            }
            if let Ok(r) = client
                .post(&url)
                .header("X-Client-Location", "-37.8136,144.9631")
                .send()
                .await
            {
                return header(&r, "x-placement-reason");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    assert_eq!(reason().await, "greedy");
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("PPO weights unusable, using greedy instead"))
        .collect();
    assert_eq!(lines.len(), 1, "{text}");
    assert!(lines[0].contains("melbourne.safetensors"), "{}", lines[0]);

    // Good weights and a SIGHUP: the node reloads them and PPO places the calls.
    let shipped = base.join("../../scheduler/weights/melbourne.safetensors");
    std::fs::copy(shipped, &weights).unwrap();
    let hup = Command::new("kill").args(["-HUP", &pid]).status().unwrap();
    assert!(hup.success());
    while reason().await != "ppo" {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("PPO weights loaded"), "{text}");
    let mut child = child.into_inner().unwrap();
    let _ = child.kill();
    let _ = child.wait();
}

fn free_port() -> u16 {
    geofaas_test_support::peers::free_port().unwrap()
}
