//! Black holes (a peer that accepts connections and never answers) and a slow link, where the
//! fleet's probes and breakers must notice: real `geofaas node` and `geofaas dns` processes, the
//! test-support fault proxy in front of what is cut, clients with reqwest, `curl` and `dig`.
//!
//! - A Lima edge whose first backend is a tinyFaaS node (the protocol-faithful fake) behind the
//!   proxy: its breaker opens after `breaker_failures` timeouts, calls then go to the Bogotá
//!   cloud at once, one probe per cool-down, and it closes after the link heals. A 500 ms slow
//!   link opens nothing.
//! - A Lima edge black-holed from everyone but its own clients (its `public_url` is the proxy):
//!   the geo DNS stops answering it for Lima's clients, the Cusco edge stops handing Lima's
//!   clients to it, and both name it again once it heals.
//!
//! Every call and query is counted.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use geofaas_test_support::faults::{Fault, FaultProxy};
use geofaas_test_support::tinyfaas::{FakeFunction, FakeTinyfaas};

use crate::processes::{Fleet, Layout, NodeSpec};

const LIMA: &str = "-12.05,-77.04";

fn free_port(host: &str) -> u16 {
    std::net::TcpListener::bind((host, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Calls counted by who answered.
#[derive(Debug, Default)]
struct Tally {
    /// Answered `200` by the edge's tinyFaaS backend.
    edge: usize,
    /// Answered `200` by the cloud.
    cloud: usize,
    /// Clear errors by status and code.
    errors: BTreeMap<String, usize>,
    slowest: Duration,
}

struct Lima {
    fleet: Fleet,
    log: String,
    next: usize,
}

impl Lima {
    /// One call of `tally` from a Lima client; the body names the call, so who ran it is known
    /// (tinyFaaS echoes it, the cloud answers `cloud ID` and logs the id).
    async fn call(&mut self, t: &mut Tally, deadline: Duration) {
        self.next += 1;
        let id = format!("c{}", self.next);
        let started = Instant::now();
        let resp = self
            .fleet
            .client
            .post(self.fleet.url("lima", "/fn/tally"))
            .header("x-client-location", LIMA)
            .body(format!("{} {id}", self.log))
            .timeout(deadline + Duration::from_secs(5))
            .send()
            .await
            .unwrap_or_else(|e| panic!("{id}: no answer at all (lost): {e}"));
        let status = resp.status().as_u16();
        let body = resp.text().await.unwrap_or_default();
        let took = started.elapsed();
        assert!(
            took < deadline,
            "{id}: answered after {took:?}, past {deadline:?}"
        );
        t.slowest = t.slowest.max(took);
        if status == 200 && body == format!("cloud {id}") {
            t.cloud += 1;
        } else if status == 200 && body.ends_with(&format!(" {id}")) {
            t.edge += 1;
        } else {
            let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
            let code = v["error"]["code"].as_str().unwrap_or(&body).to_owned();
            assert!(status >= 400, "{id}: {status} {body}");
            *t.errors.entry(format!("{status} {code}")).or_default() += 1;
        }
    }

    async fn round(&mut self, n: usize, deadline: Duration) -> Tally {
        let mut t = Tally::default();
        for _ in 0..n {
            self.call(&mut t, deadline).await;
        }
        t
    }

    /// How often the cloud ran each call id.
    fn cloud_runs(&self) -> HashMap<String, usize> {
        let mut runs = HashMap::new();
        for l in std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
        {
            *runs.entry(l.to_owned()).or_default() += 1;
        }
        runs
    }

    fn opened(&self) -> usize {
        self.fleet.log("lima").matches("circuit opened").count()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_black_holed_backend_opens_its_breaker_and_its_calls_go_to_the_cloud() {
    const NODES: [NodeSpec; 2] = [
        ("lima", "edge", -12.05, -77.04),
        ("bogota", "cloud", 4.71, -74.07),
    ];
    const TIMEOUT: Duration = Duration::from_millis(1500);
    const COOL_DOWN: Duration = Duration::from_millis(2000);
    const FAILURES: usize = 3;
    let root = geofaas_test_support::paths::manifest_dir().join("testdata");
    let tinyfaas = FakeTinyfaas::start([("tally", FakeFunction::Echo)])
        .await
        .unwrap();
    let upstream: SocketAddr = tinyfaas
        .proxy_url()
        .trim_start_matches("http://")
        .parse()
        .unwrap();
    let proxy_port = free_port("127.0.0.1");
    let backend = format!(
        "[[node.backend]]\nkind = \"tinyfaas\"\nurl = \"http://127.0.0.1:{proxy_port}\"\n\
         manager_url = \"{}\"\ntimeout_ms = {}\nbreaker_failures = {FAILURES}\n\
         breaker_cooldown_ms = {}\n",
        tinyfaas.manager_url(),
        TIMEOUT.as_millis(),
        COOL_DOWN.as_millis()
    );
    let fleet = Fleet::with(Layout {
        extra: "[gateway]\ncall_timeout_ms = 8000\n[dns]\nprobe_interval_ms = 500\n",
        functions: Some(&root.join("fault-edge-functions")),
        node_functions: HashMap::from([("bogota", root.join("fault-cloud-functions"))]),
        node_backends: HashMap::from([("lima", backend)]),
        rust_log: "warn,geofaas_functions=info",
        ..Layout::new("peru", &NODES)
    });
    let proxy = FaultProxy::start(format!("127.0.0.1:{proxy_port}").parse().unwrap(), upstream)
        .await
        .unwrap();
    fleet.wait_all_ready().await;
    let log = fleet.path("tally.txt").to_str().unwrap().to_owned();
    let mut lima = Lima {
        fleet,
        log,
        next: 0,
    };
    // Up to a call's own deadline: the backend's timeout and the offload after it.
    let deadline = TIMEOUT + Duration::from_secs(2);
    let started = Instant::now();
    loop {
        let t = lima.round(1, Duration::from_secs(20)).await;
        if t.edge == 1 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "tinyFaaS never answered: {t:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut report = Vec::new();

    let pass = lima.round(5, deadline).await;
    assert_eq!(pass.edge, 5, "{pass:?}");
    report.push(("passes", pass));

    // 500 ms slower (250 ms each way): answered by the edge's backend, slower; the breaker
    // stays closed.
    proxy.set(Fault::Delay(Duration::from_millis(250)));
    let slow = lima.round(5, deadline).await;
    assert_eq!(slow.edge, 5, "{slow:?}");
    assert!(slow.slowest >= Duration::from_millis(500), "{slow:?}");
    assert_eq!(
        lima.opened(),
        0,
        "a slow link opened the breaker:\n{}",
        lima.fleet.log("lima")
    );
    report.push(("500 ms slow", slow));

    // Black hole: each of the first FAILURES calls waits for the backend's timeout and is then
    // run at the cloud (a timeout is the one failure the gateway retries although the call may
    // have run, docs/backends.md); then the breaker is open and every call goes to the cloud
    // at once.
    proxy.heal();
    proxy.set(Fault::Blackhole);
    let held = lima.round(FAILURES, deadline).await;
    let timed_out: HashSet<String> = (lima.next - FAILURES + 1..=lima.next)
        .map(|i| format!("c{i}"))
        .collect();
    let open = lima.round(10, deadline).await;
    assert_eq!(held.cloud, FAILURES, "{held:?}");
    assert!(held.slowest >= TIMEOUT, "{held:?}");
    assert_eq!(open.cloud, 10, "{open:?}");
    assert!(
        open.slowest < TIMEOUT,
        "an open breaker still waited: {open:?}"
    );
    assert_eq!(lima.opened(), 1, "{}", lima.fleet.log("lima"));
    report.push(("black hole, first calls", held));
    report.push(("black hole, breaker open", open));

    // A cool-down later, still black-holed: one probe (a call, which then also waits for the
    // timeout and runs at the cloud, or the /readyz health probe) finds it dead and the breaker
    // opens again; the calls go to the cloud.
    tokio::time::sleep(COOL_DOWN + Duration::from_millis(500)).await;
    let probe_from = lima.next + 1;
    let probed = lima.round(10, deadline).await;
    assert_eq!(probed.cloud, 10, "{probed:?}");
    assert_eq!(lima.opened(), 2, "{}", lima.fleet.log("lima"));
    report.push(("black hole, after a cool-down", probed));

    // Healed: within a cool-down (and a probe) the edge's backend answers again.
    proxy.heal();
    let healed = Instant::now();
    let mut after = Tally::default();
    while after.edge == 0 {
        lima.call(&mut after, deadline).await;
        assert!(
            healed.elapsed() < Duration::from_secs(30),
            "the breaker never closed: {after:?}\n{}",
            lima.fleet.log("lima")
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let closed_after = healed.elapsed();
    let closed = lima.round(5, deadline).await;
    assert_eq!(closed.edge, 5, "{closed:?}");
    assert!(lima
        .fleet
        .log("lima")
        .contains("circuit closed: backend tinyfaas answers again"));
    report.push(("healed", after));

    // Nothing ran twice at one place; a call that ran at both tinyFaaS (its request held by the
    // black hole and delivered later) and the cloud can only be one that timed out there.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let cloud = lima.cloud_runs();
    let mut at_edge = HashSet::new();
    let mut at_both = Vec::new();
    for (_, _, body) in tinyfaas.calls() {
        let id = String::from_utf8_lossy(&body)
            .rsplit_once(' ')
            .map(|(_, id)| id.to_owned())
            .unwrap_or_default();
        assert!(at_edge.insert(id.clone()), "{id} ran twice at tinyFaaS");
        if cloud.contains_key(&id) {
            let probe = id[1..]
                .parse::<usize>()
                .is_ok_and(|i| i >= probe_from && i < probe_from + 10);
            assert!(
                timed_out.contains(&id) || probe,
                "{id} ran at tinyFaaS and at the cloud, and had not timed out"
            );
            at_both.push(id);
        }
    }
    assert!(
        cloud.values().all(|n| *n == 1),
        "ran twice at the cloud: {cloud:?}"
    );

    for (phase, t) in &report {
        eprintln!(
            "{phase:>30}: edge {} cloud {} errors {:?}, slowest {:?}",
            t.edge, t.cloud, t.errors, t.slowest
        );
    }
    eprintln!(
        "breaker opened {} times; the edge's backend answered again {closed_after:?} after the heal; \
         {} calls, {} ran at tinyFaaS, {} at the cloud, at both (timed out at tinyFaaS): {at_both:?}",
        lima.opened(),
        lima.next,
        at_edge.len(),
        cloud.len()
    );
}

/// `dig` for `gw.andes.test` as a client in `subnet`: the answer's addresses.
fn dig(port: u16, subnet: &str) -> String {
    let out = std::process::Command::new("dig")
        .args(["@127.0.0.1", "-p", &port.to_string(), "gw.andes.test", "A"])
        .arg(format!("+subnet={subnet}"))
        .args(["+short", "+time=1", "+tries=1"])
        .current_dir(std::env::temp_dir())
        .output()
        .expect("dig runs");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Where the node at `url` sends a Lima client calling `here`: the node URL of a `307`, or
/// `here` when it serves the call itself.
async fn route(client: &reqwest::Client, url: &str) -> String {
    let r = client
        .post(url)
        .header("x-client-location", LIMA)
        .body("x")
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .unwrap_or_else(|e| panic!("{url}: no answer: {e}"));
    match r.status().as_u16() {
        307 => r.headers()["location"]
            .to_str()
            .unwrap()
            .trim_end_matches("/fn/here")
            .to_owned(),
        200 => "here".to_owned(),
        s => panic!("{url}: {s} {}", r.text().await.unwrap_or_default()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_black_holed_edge_leaves_the_geo_dns_and_the_handovers_until_it_heals() {
    const NODES: [NodeSpec; 3] = [
        ("lima", "edge", -12.05, -77.04),
        ("cusco", "edge", -13.53, -71.97),
        ("bogota", "cloud", 4.71, -74.07),
    ];
    const PROBE: Duration = Duration::from_millis(300);
    let root = geofaas_test_support::paths::manifest_dir().join("testdata");
    let dns_port = {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        s.local_addr().unwrap().port()
    };
    let proxy_port = free_port("127.0.0.61");
    let extra = format!(
        "[dns]\nlisten = \"127.0.0.1:{dns_port}\"\nprobe_interval_ms = {}\nttl_s = 1\n",
        PROBE.as_millis()
    );
    let mut fleet = Fleet::with(Layout {
        extra: &extra,
        functions: Some(&root.join("fault-edge-functions")),
        hosts: HashMap::from([
            ("lima", "127.0.0.61"),
            ("cusco", "127.0.0.62"),
            ("bogota", "127.0.0.63"),
        ]),
        public_ports: HashMap::from([("lima", proxy_port)]),
        ..Layout::new("andes", &NODES)
    });
    let mmdb = fleet.path("andes.mmdb");
    let city = |net: &str, city: &str, lat, lon| geofaas_geo::MmdbEntry {
        network: net.parse().unwrap(),
        city: city.to_owned(),
        country: "PE".to_owned(),
        lat,
        lon,
    };
    geofaas_geo::write_mmdb(
        &mmdb,
        &[
            city("198.51.100.0/24", "Lima", -12.05, -77.04),
            city("203.0.113.0/24", "Cusco", -13.53, -71.97),
        ],
        geofaas_geo::MmdbSchema::GeoIp2City,
    )
    .unwrap();
    fleet.spawn_dns(&mmdb);
    let lima_port = fleet.ports["lima"];
    let proxy = FaultProxy::start(
        format!("127.0.0.61:{proxy_port}").parse().unwrap(),
        format!("127.0.0.61:{lima_port}").parse().unwrap(),
    )
    .await
    .unwrap();
    fleet.wait_all_ready().await;
    let lima_public = format!("https://127.0.0.61:{proxy_port}");
    // A client that reports a handover instead of following it.
    let client = reqwest::Client::builder()
        .add_root_certificate(
            reqwest::Certificate::from_pem(&std::fs::read(fleet.path("ca.pem")).unwrap()).unwrap(),
        )
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let at_cusco = fleet.url("cusco", "/fn/here");
    let at_cloud = fleet.url("bogota", "/fn/here");
    let at_lima = fleet.url("lima", "/fn/here");

    // Everyone reaches Lima: the DNS answers it for Lima's clients, Cusco and the cloud hand
    // them to it. (The DNS withdraws a node on one failed probe, so a probe that came before a
    // node was up keeps it out for one interval: wait for Cusco's clients too.)
    let started = Instant::now();
    while dig(dns_port, "198.51.100.7/24") != "127.0.0.61"
        || dig(dns_port, "203.0.113.7/24") != "127.0.0.62"
        || route(&client, &at_cusco).await != lima_public
    {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "Lima never named: dig {:?}, cusco {:?}\n{}",
            dig(dns_port, "198.51.100.7/24"),
            route(&client, &at_cusco).await,
            fleet.log("cusco")
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(dig(dns_port, "203.0.113.7/24"), "127.0.0.62");
    assert_eq!(route(&client, &at_cloud).await, lima_public);

    // Black hole: connections to Lima's public address are accepted and never answered.
    // Lima's own clients (who reach it directly) are still served.
    proxy.set(Fault::Blackhole);
    let cut = Instant::now();
    let mut dns_answers: BTreeMap<String, usize> = BTreeMap::new();
    let mut handed: BTreeMap<String, usize> = BTreeMap::new();
    let (mut dns_gone, mut cusco_gone) = (None, None);
    while dns_gone.is_none() || cusco_gone.is_none() {
        assert!(
            cut.elapsed() < Duration::from_secs(20),
            "Lima still named {:?} after the cut: dns {dns_answers:?}, cusco {handed:?}",
            cut.elapsed()
        );
        let answer = dig(dns_port, "198.51.100.7/24");
        *dns_answers.entry(answer.clone()).or_default() += 1;
        if answer != "127.0.0.61" && dns_gone.is_none() {
            dns_gone = Some(cut.elapsed());
        }
        let to = route(&client, &at_cusco).await;
        if to != lima_public && cusco_gone.is_none() {
            cusco_gone = Some(cut.elapsed());
        }
        *handed.entry(to).or_default() += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Once gone, it stays gone while the link is dead: 20 more looks, none names Lima.
    let mut while_cut: BTreeMap<String, usize> = BTreeMap::new();
    for _ in 0..20 {
        *while_cut
            .entry(format!("dns {}", dig(dns_port, "198.51.100.7/24")))
            .or_default() += 1;
        *while_cut
            .entry(format!("cusco {}", route(&client, &at_cusco).await))
            .or_default() += 1;
        *while_cut
            .entry(format!("cloud {}", route(&client, &at_cloud).await))
            .or_default() += 1;
        assert_eq!(route(&client, &at_lima).await, "here");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let cloud = fleet.url("bogota", "");
    assert_eq!(
        while_cut,
        BTreeMap::from([
            ("dns 127.0.0.63".to_owned(), 20),
            (format!("cusco {cloud}"), 20),
            ("cloud here".to_owned(), 20),
        ]),
        "while Lima is black-holed"
    );
    // With curl, over HTTP/2: Cusco hands a Lima client to the cloud, not to Lima.
    let out = std::process::Command::new("curl")
        .args(["-sS", "--http2", "--cacert"])
        .arg(fleet.path("ca.pem"))
        .args([
            "-o",
            "/dev/null",
            "-w",
            "%{http_code} %{redirect_url}",
            "-H",
        ])
        .arg(format!("x-client-location: {LIMA}"))
        .args(["--data", "x", &at_cusco])
        .current_dir(std::env::temp_dir())
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("307 {cloud}/fn/here"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Healed: named again.
    proxy.heal();
    let healed = Instant::now();
    let (mut dns_back, mut cusco_back) = (None, None);
    while dns_back.is_none() || cusco_back.is_none() {
        assert!(
            healed.elapsed() < Duration::from_secs(20),
            "Lima not named again {:?} after the heal",
            healed.elapsed()
        );
        if dns_back.is_none() && dig(dns_port, "198.51.100.7/24") == "127.0.0.61" {
            dns_back = Some(healed.elapsed());
        }
        if cusco_back.is_none() && route(&client, &at_cusco).await == lima_public {
            cusco_back = Some(healed.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(route(&client, &at_cloud).await, lima_public);
    eprintln!(
        "probes every {PROBE:?}; after the cut the DNS stopped naming Lima in {:?} and Cusco in \
         {:?} (answers until then: dns {dns_answers:?}, cusco {handed:?}); while cut: {while_cut:?}; \
         after the heal the DNS named it again in {:?}, Cusco in {:?}",
        dns_gone.unwrap(),
        cusco_gone.unwrap(),
        dns_back.unwrap(),
        cusco_back.unwrap()
    );
}
