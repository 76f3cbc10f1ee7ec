//! A fleet on a real etcd, every node a `geofaas node` process and the geo DNS a `geofaas dns`
//! process queried with `dig`: nodes join one by one, a `kill -9` withdraws a node within its
//! lease, a restarted node rejoins, an overlapping area is refused, a retry at the cloud gets
//! the first answer of a call whose edge died right after answering, a dead etcd leaves every
//! node serving, nodes join an etcd with TLS and authentication (wrong credentials are an
//! error naming the user, and that node serves alone), and a saturated edge places calls on a
//! neighbour it knows only from the registry, by that neighbour's load reports in etcd.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use geofaas_test_support::eventually::within;

use geofaas_config::{AreaConfig, Topology};
use geofaas_gateway::TlsMaterial;
use geofaas_test_support::etcd::EtcdServer;
use geofaas_test_support::peers::{free_port, require};

const BIN: &str = env!("CARGO_BIN_EXE_geofaas");
/// The registration lease of the test fleet, in seconds (etcd runs with short elections).
const LEASE_S: u64 = 2;
const BERLIN: &str = "52.51,13.32";
const POTSDAM: &str = "52.40,13.06";

struct Fleet {
    dir: tempfile::TempDir,
    etcd: EtcdServer,
    client: reqwest::Client,
    dns_port: u16,
    nodes: Vec<(String, Child)>,
    ports: std::collections::HashMap<String, u16>,
    /// Lines added to `[registry]` (TLS, credentials' variables).
    registry: String,
    /// Environment of every process (the credentials).
    env: Vec<(String, String)>,
    /// Appended to every node's file (a `[scheduler]`, function profiles).
    extra: String,
    /// Edges given `cores` in their own block.
    cores: Vec<(String, u32)>,
}

/// The file's shared part: zone, TLS, registry (with `registry` added), DNS, the functions,
/// and the cloud.
fn common(dir: &Path, etcd: &str, registry: &str, dns_port: u16, cloud_port: u16) -> String {
    let functions = geofaas_test_support::paths::manifest_dir().join("testdata/edge-functions");
    format!(
        r#"zone = "geofaas.test."
[gateway]
drain_grace_ms = 200
[tls]
cert = "{d}/cert.pem"
key = "{d}/key.pem"
ca = "{d}/ca.pem"
[registry]
etcd = ["{etcd}"]
lease_ttl_s = {LEASE_S}
load_interval_ms = 200
{registry}
[dns]
listen = "127.0.0.1:{dns_port}"
probe_interval_ms = 200

[[function]]
name = "counter"

[[node]]
id = "cloud"
role = "cloud"
location = {{ lat = 51.498593, lon = -0.176959 }}
public_url = "https://127.0.0.13:{cloud_port}"
listen = "127.0.0.13:{cloud_port}"
[[node.backend]]
kind = "local"
functions_dir = "{f}"
"#,
        d = dir.display(),
        f = functions.display(),
    )
}

/// An edge's own `[[node]]` block with the area of `like` in the Berlin example.
fn edge(id: &str, like: &str, ip: &str, port: u16) -> String {
    let berlin: Topology = Topology::parse(
        include_str!("../../../examples/berlin.toml"),
        "berlin.toml",
        Path::new("../examples"),
    )
    .unwrap();
    let n = berlin.node(like).unwrap();
    let Some(AreaConfig::Wkt(wkt)) = &n.area else {
        panic!("{like} has a WKT area")
    };
    let functions = geofaas_test_support::paths::manifest_dir().join("testdata/edge-functions");
    format!(
        "\n[[node]]\nid = \"{id}\"\nrole = \"edge\"\nlocation = {{ lat = {}, lon = {} }}\narea.wkt = \"{wkt}\"\npublic_url = \"https://{ip}:{port}\"\nlisten = \"{ip}:{port}\"\n[[node.backend]]\nkind = \"local\"\nfunctions_dir = \"{}\"\n",
        n.location.lat,
        n.location.lon,
        functions.display()
    )
}

fn port_on(ip: &str) -> u16 {
    std::net::TcpListener::bind((ip, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Fleet {
    async fn start() -> Option<Self> {
        let etcd = require(EtcdServer::start().await)?;
        Some(Self::with(etcd, String::new(), Vec::new()))
    }

    /// A fleet on an etcd with TLS and authentication: user `edge` (password `edge secret`).
    async fn start_secured() -> Option<Self> {
        let etcd = require(EtcdServer::start_tls().await)?;
        etcd.enable_auth("root secret", "edge", "edge secret", "/geofaas/")
            .await
            .unwrap();
        let files = etcd.tls().unwrap();
        let registry = format!(
            "user_env = \"ETCD_USER\"\npassword_env = \"ETCD_PASSWORD\"\n[registry.tls]\nca = \"{}\"\ncert = \"{}\"\nkey = \"{}\"",
            files.ca.display(),
            files.cert.display(),
            files.key.display()
        );
        let env = vec![
            ("ETCD_USER".to_owned(), "edge".to_owned()),
            ("ETCD_PASSWORD".to_owned(), "edge secret".to_owned()),
        ];
        Some(Self::with(etcd, registry, env))
    }

    fn with(etcd: EtcdServer, registry: String, env: Vec<(String, String)>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let tls = TlsMaterial::generate(&[
            "127.0.0.11".into(),
            "127.0.0.12".into(),
            "127.0.0.13".into(),
            "127.0.0.14".into(),
        ])
        .unwrap();
        std::fs::write(dir.path().join("cert.pem"), &tls.cert_pem).unwrap();
        std::fs::write(dir.path().join("key.pem"), &tls.key_pem).unwrap();
        std::fs::write(dir.path().join("ca.pem"), &tls.ca_pem).unwrap();
        let client = reqwest::Client::builder()
            .add_root_certificate(reqwest::Certificate::from_pem(tls.ca_pem.as_bytes()).unwrap())
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(5))
            .build()
            .unwrap();
        let dns_port = free_port().unwrap();
        let mut ports = std::collections::HashMap::new();
        ports.insert("cloud".to_owned(), port_on("127.0.0.13"));
        let mut f = Self {
            dir,
            etcd,
            client,
            dns_port,
            nodes: Vec::new(),
            ports,
            registry,
            env,
            extra: String::new(),
            cores: Vec::new(),
        };
        // The DNS's file names the cloud only: the edges come from the registry.
        let dns_file = f.dir.path().join("dns.toml");
        std::fs::write(&dns_file, f.common()).unwrap();
        let dns = Command::new(BIN)
            .args(["dns", "--udp-sockets", "1", "--config"])
            .arg(&dns_file)
            .arg("--demo-mmdb")
            .arg(f.dir.path().join("demo.mmdb"))
            .envs(f.env.iter().cloned())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(f.dir.path().join("dns.log")).unwrap())
            .spawn()
            .unwrap();
        f.nodes.push(("dns".into(), dns));
        f
    }

    fn common(&self) -> String {
        let mut text = common(
            self.dir.path(),
            self.etcd.url(),
            &self.registry,
            self.dns_port,
            self.ports["cloud"],
        );
        text.push_str(&self.extra);
        text
    }

    /// Starts node `id` (`cloud`, or an edge with `like`'s area on `ip`).
    fn run(&mut self, id: &str, edge_of: Option<(&str, &str)>) {
        let env = self.env.clone();
        self.run_with(id, edge_of, &env);
    }

    /// Starts the cloud and waits until it serves.
    async fn run_cloud(&mut self) {
        self.run("cloud", None);
        let up = within(Duration::from_secs(20), || async {
            self.route("cloud", BERLIN).await.is_some()
        })
        .await;
        assert!(up.is_some(), "the cloud serves: {}", self.log("cloud"));
    }

    /// [`Fleet::run`] with this environment.
    fn run_with(&mut self, id: &str, edge_of: Option<(&str, &str)>, env: &[(String, String)]) {
        let mut text = self.common();
        if let Some((like, ip)) = edge_of {
            let port = *self
                .ports
                .entry(id.to_owned())
                .or_insert_with(|| port_on(ip));
            let mut block = edge(id, like, ip, port);
            if let Some((_, n)) = self.cores.iter().find(|(c, _)| c == id) {
                let line = format!("id = \"{id}\"\n");
                block = block.replacen(&line, &format!("{line}cores = {n}\n"), 1);
            }
            text.push_str(&block);
        }
        let file = self.dir.path().join(format!("{id}.toml"));
        std::fs::write(&file, text).unwrap();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path(id))
            .unwrap();
        let child = Command::new(BIN)
            .args(["node", "--node", id, "--config"])
            .arg(&file)
            .arg("--state-dir")
            .arg(self.dir.path().join("state"))
            .env("GEOFAAS_OFFLOAD_SECRET", "fleet test secret")
            .env("RUST_LOG", "info,geofaas_gateway::deploy=debug")
            .envs(env.iter().cloned())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.nodes.push((id.to_owned(), child));
    }

    fn log_path(&self, id: &str) -> PathBuf {
        self.dir.path().join(format!("{id}.log"))
    }

    fn log(&self, id: &str) -> String {
        std::fs::read_to_string(self.log_path(id)).unwrap_or_default()
    }

    /// `kill -9` of node `id`.
    fn kill(&mut self, id: &str) {
        if let Some(i) = self.nodes.iter().position(|(n, _)| n == id) {
            let (_, mut child) = self.nodes.remove(i);
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn url(&self, id: &str) -> String {
        let ip = match id {
            "tu-berlin" => "127.0.0.11",
            "potsdam" => "127.0.0.12",
            "cloud" => "127.0.0.13",
            _ => "127.0.0.14",
        };
        format!("https://{ip}:{}", self.ports[id])
    }

    /// Where node `at` sends a client at `location` calling `counter`: `Some(node URL)` for a
    /// 307, `Some("here")` when served, `None` when it does not answer.
    async fn route(&self, at: &str, location: &str) -> Option<String> {
        let r = self
            .client
            .post(format!("{}/fn/counter", self.url(at)))
            .header("X-Client-Location", location)
            .body("x")
            .send()
            .await
            .ok()?;
        if r.status() == 307 {
            let loc = r.headers().get("location")?.to_str().ok()?;
            return Some(loc.trim_end_matches("/fn/counter").to_owned());
        }
        r.status().is_success().then(|| "here".to_owned())
    }

    fn dig(&self, subnet: &str) -> String {
        let out = Command::new("dig")
            .args([
                "@127.0.0.1",
                "-p",
                &self.dns_port.to_string(),
                "gw.geofaas.test",
                "A",
            ])
            .arg(format!("+subnet={subnet}"))
            .args(["+short", "+time=1", "+tries=1"])
            .output()
            .expect("dig runs");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for (_, c) in &mut self.nodes {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Berlin's and Potsdam's clients in the demo GeoIP database.
const BERLIN_NET: &str = "192.0.2.1/24";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_join_die_rejoin_are_refused_and_survive_etcd() {
    let Some(mut f) = Fleet::start().await else {
        return;
    };
    // Start-up of a process (TLS, workers) is not what is measured: wait for the cloud first.
    f.run_cloud().await;

    // Edges join one by one; the DNS and every gateway answer for each.
    f.run("tu-berlin", Some(("tu-berlin", "127.0.0.11")));
    let tu = f.url("tu-berlin");
    let joined = within(Duration::from_secs(20), || async {
        f.dig(BERLIN_NET) == "127.0.0.11" && f.route("cloud", BERLIN).await == Some(tu.clone())
    })
    .await;
    assert!(joined.is_some(), "tu-berlin joined: {}", f.log("tu-berlin"));
    eprintln!("tu-berlin answered by DNS and cloud {joined:?} after start");

    f.run("potsdam", Some(("potsdam", "127.0.0.12")));
    let pd = f.url("potsdam");
    let joined = within(Duration::from_secs(20), || async {
        f.route("cloud", POTSDAM).await == Some(pd.clone())
            && f.route("tu-berlin", POTSDAM).await == Some(pd.clone())
            && f.route("potsdam", BERLIN).await == Some(tu.clone())
    })
    .await;
    assert!(joined.is_some(), "potsdam joined: {}", f.log("potsdam"));

    // kill -9 of tu-berlin: withdrawn from DNS and from handovers within the lease time (plus
    // the probes' and the watch's reaction, well under a second). Each node notices on its own
    // probe or watch event, so all three are waited for together: the cloud serves Berlin itself.
    f.kill("tu-berlin");
    let cloud = f.url("cloud");
    let gone = within(Duration::from_secs(LEASE_S + 2), || async {
        f.dig(BERLIN_NET) != "127.0.0.11"
            && f.route("potsdam", BERLIN).await == Some(cloud.clone())
            && f.route("cloud", BERLIN).await.as_deref() == Some("here")
    })
    .await;
    assert!(
        gone.is_some(),
        "tu-berlin withdrawn: DNS says {}, potsdam hands Berlin to {:?}, the cloud to {:?}",
        f.dig(BERLIN_NET),
        f.route("potsdam", BERLIN).await,
        f.route("cloud", BERLIN).await
    );
    eprintln!("tu-berlin withdrawn {gone:?} after kill -9");

    // Restarted, it rejoins.
    f.run("tu-berlin", Some(("tu-berlin", "127.0.0.11")));
    let back = within(Duration::from_secs(20), || async {
        f.dig(BERLIN_NET) == "127.0.0.11" && f.route("potsdam", BERLIN).await == Some(tu.clone())
    })
    .await;
    assert!(back.is_some(), "tu-berlin rejoined: {}", f.log("tu-berlin"));

    // A node claiming tu-berlin's hexagon is refused with the reason and serves alone.
    f.run("copycat", Some(("tu-berlin", "127.0.0.14")));
    let refused = within(Duration::from_secs(20), || async {
        f.log("copycat").contains("not registered")
    })
    .await;
    assert!(refused.is_some(), "copycat refused: {}", f.log("copycat"));
    assert!(
        f.log("copycat").contains("overlaps tu-berlin's"),
        "{}",
        f.log("copycat")
    );
    assert_eq!(
        f.route("copycat", BERLIN).await.as_deref(),
        Some("here"),
        "it still serves alone"
    );
    assert_eq!(
        f.route("cloud", BERLIN).await,
        Some(tu.clone()),
        "nobody hands clients to it"
    );
    let ls = Command::new(BIN)
        .args(["fleet", "ls", "--etcd", f.etcd.url()])
        .output()
        .unwrap();
    let ls = String::from_utf8_lossy(&ls.stdout).into_owned();
    assert!(
        ls.contains("tu-berlin") && ls.contains("potsdam") && !ls.contains("copycat"),
        "{ls}"
    );

    // etcd dies: everyone keeps serving with the last view, past the lease time.
    f.etcd.kill().await;
    tokio::time::sleep(Duration::from_secs(LEASE_S + 1)).await;
    assert_eq!(f.dig(BERLIN_NET), "127.0.0.11");
    assert_eq!(f.route("cloud", BERLIN).await, Some(tu.clone()));
    assert_eq!(f.route("tu-berlin", POTSDAM).await, Some(pd.clone()));
    assert_eq!(f.route("potsdam", POTSDAM).await.as_deref(), Some("here"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_at_the_cloud_after_the_edge_died_gets_the_first_answer() {
    let Some(mut f) = Fleet::start().await else {
        return;
    };
    f.run("cloud", None);
    f.run("tu-berlin", Some(("tu-berlin", "127.0.0.11")));
    let tu = f.url("tu-berlin");
    let joined = within(Duration::from_secs(20), || async {
        f.route("cloud", BERLIN).await == Some(tu.clone())
    })
    .await;
    assert!(joined.is_some(), "tu-berlin joined: {}", f.log("tu-berlin"));
    // The cloud's directory knows what tu-berlin serves from its registry record (its file
    // names no tu-berlin at all).
    let listed: serde_json::Value = f
        .client
        .get(format!("{}/functions", f.url("cloud")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        listed["nodes"]["tu-berlin"]["source"], "registry",
        "{listed}"
    );
    assert_eq!(
        listed["nodes"]["tu-berlin"]["functions"],
        serde_json::json!(["counter", "doze", "flaky", "nap", "sidefx", "slow"]),
        "{listed}"
    );

    let client = f.client.clone();
    let call = |node: String| {
        client
            .post(format!("{node}/fn/counter"))
            .header("X-Client-Location", BERLIN)
            .header("Idempotency-Key", "order-42")
            .body("pay")
    };
    let first = call(tu.clone()).send().await.unwrap();
    assert_eq!(first.status(), 200);
    assert_eq!(first.headers()["x-served-by"], "tu-berlin");
    let body = first.text().await.unwrap();
    assert_eq!(body, "call 1: pay");
    let cloud = f.url("cloud");
    let cloud_count = |key: &'static str| {
        let req = client
            .post(format!("{cloud}/fn/counter"))
            .header("X-Client-Location", BERLIN)
            .header("X-Geofaas-Retry", "1")
            .header("Idempotency-Key", key)
            .body("pay");
        async move {
            let text = req.send().await.unwrap().text().await.unwrap();
            let n = text.strip_prefix("call ").and_then(|t| t.split(':').next());
            n.and_then(|n| n.parse::<u64>().ok())
                .unwrap_or_else(|| panic!("a counter answer: {text}"))
        }
    };
    let before = cloud_count("probe-1").await;
    // The edge dies right after answering: no time for a write after the answer.
    f.kill("tu-berlin");
    // The record was in etcd before the answer: one read now finds it (no waiting).
    let etcd = geofaas_fleet::Etcd::connect(&geofaas_config::RegistrySettings::new(vec![f
        .etcd
        .url()
        .parse()
        .unwrap()]))
    .unwrap();
    use base64::Engine;
    let name = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode("counter\norder-42");
    let record = etcd
        .get(format!("/geofaas/calls/{name}").as_bytes())
        .await
        .unwrap();
    assert!(record.is_some(), "the call record is in etcd");

    // The client retries at the cloud at once.
    let retry = call(cloud.clone())
        .header("X-Geofaas-Retry", "1")
        .send()
        .await
        .unwrap();
    assert_eq!(retry.status(), 200);
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(
        retry.headers()["x-served-by"],
        "tu-berlin",
        "the first answer, not a run at the cloud"
    );
    assert_eq!(retry.text().await.unwrap(), body);
    // The function ran once: the cloud's own counter has not counted the retry (one call
    // before it and one after it are consecutive).
    let after = cloud_count("probe-2").await;
    assert_eq!(after, before + 1, "the retry did not run at the cloud");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_join_over_tls_with_credentials_and_a_wrong_password_serves_alone() {
    let Some(mut f) = Fleet::start_secured().await else {
        return;
    };
    f.run("cloud", None);
    f.run("tu-berlin", Some(("tu-berlin", "127.0.0.11")));
    let tu = f.url("tu-berlin");
    let joined = within(Duration::from_secs(20), || async {
        f.dig(BERLIN_NET) == "127.0.0.11" && f.route("cloud", BERLIN).await == Some(tu.clone())
    })
    .await;
    assert!(
        joined.is_some(),
        "tu-berlin joined over TLS with credentials: {}",
        f.log("tu-berlin")
    );

    // Potsdam's operator typed the wrong password.
    let wrong = [
        ("ETCD_USER".to_owned(), "edge".to_owned()),
        ("ETCD_PASSWORD".to_owned(), "guess".to_owned()),
    ];
    f.run_with("potsdam", Some(("potsdam", "127.0.0.12")), &wrong);
    let refused = within(Duration::from_secs(20), || async {
        f.log("potsdam").contains("credentials refused")
    })
    .await;
    let log = f.log("potsdam");
    assert!(refused.is_some(), "potsdam names the credentials: {log}");
    assert!(
        log.contains("etcd refused user \"edge\"") && log.contains("ETCD_PASSWORD"),
        "{log}"
    );
    assert!(!log.contains("guess"), "no password in the log: {log}");
    assert_eq!(
        f.route("potsdam", POTSDAM).await.as_deref(),
        Some("here"),
        "it serves alone"
    );
    assert_eq!(
        f.route("cloud", POTSDAM).await.as_deref(),
        Some("here"),
        "nobody hands Potsdam's clients to it"
    );

    // `geofaas fleet ls` with the file: the same credentials, wrong ones a clear error.
    let file = f.dir.path().join("tu-berlin.toml");
    let ls = |password: &str| {
        Command::new(BIN)
            .args(["fleet", "ls", "--config"])
            .arg(&file)
            .env("ETCD_USER", "edge")
            .env("ETCD_PASSWORD", password)
            .output()
            .unwrap()
    };
    let good = ls("edge secret");
    let out = String::from_utf8_lossy(&good.stdout);
    assert!(
        good.status.success() && out.contains("tu-berlin") && !out.contains("potsdam"),
        "{out}"
    );
    let bad = ls("guess");
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        !bad.status.success() && err.contains("credentials refused"),
        "{err}"
    );
}

/// With a registry the scheduler's neighbours are the registered nodes and their load the
/// reports in etcd: a saturated edge places a call on the neighbour that joined through etcd
/// (its file names neither the neighbour nor its load), and the neighbour serves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saturated_edge_places_calls_on_a_registered_neighbour_from_etcd_reports() {
    let Some(mut f) = Fleet::start().await else {
        return;
    };
    // A cold start (about 2 ms in the model) costs less than the cloud's 17 ms of distance, so
    // an attempt that lands in the cloud before Potsdam's report is in (warming the cloud)
    // does not make the cloud the better place for the next one.
    f.extra = "\n[scheduler]\npolicy = \"greedy\"\n\n[[function]]\nname = \"nap\"\ncpu_ms = 1000\nmemory_mb = 16\nimage_mb = 0.1\ninit_ms = 1\nslo_ms = 4000\n".into();
    f.run_cloud().await;
    f.run("potsdam", Some(("potsdam", "127.0.0.12")));
    // tu-berlin plans with one core, so one running call saturates it.
    f.cores.push(("tu-berlin".into(), 1));
    f.run("tu-berlin", Some(("tu-berlin", "127.0.0.11")));
    let pd = f.url("potsdam");
    let joined = within(Duration::from_secs(20), || async {
        f.route("tu-berlin", POTSDAM).await == Some(pd.clone())
    })
    .await;
    assert!(
        joined.is_some(),
        "tu-berlin knows potsdam: {}",
        f.log("tu-berlin")
    );
    let h = |r: &reqwest::Response, n: &str| {
        r.headers()
            .get(n)
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default()
    };
    let tu = f.url("tu-berlin");
    // The busy call is `doze` (the same function as `nap`): a function's measured time is the
    // median of its calls, so 2 s calls of `nap` here beside 0 s ones at Potsdam would make
    // Potsdam look faster for the busy call itself.
    let nap = |seconds: &'static str| {
        let function = if seconds == "0" { "nap" } else { "doze" };
        f.client
            .post(format!("{tu}/fn/{function}"))
            .header("X-Client-Location", BERLIN)
            .body(seconds)
            .send()
    };
    let mut seen = Vec::new();
    for _ in 0..8 {
        // Reports every 200 ms, stale after 600.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (busy, placed) = tokio::join!(nap("2.0"), async {
            tokio::time::sleep(Duration::from_millis(700)).await;
            nap("0").await
        });
        let (busy, placed) = (busy.unwrap(), placed.unwrap());
        assert_eq!(busy.status(), 200);
        assert_eq!(h(&busy, "x-served-by"), "tu-berlin");
        assert_eq!(placed.status(), 200, "{}", f.log("tu-berlin"));
        let got = (h(&placed, "x-placement"), h(&placed, "x-served-by"));
        if got == ("neighbor".to_owned(), "potsdam".to_owned()) {
            return;
        }
        seen.push((got, h(&placed, "x-placement-reason")));
    }
    panic!(
        "never placed on potsdam: {seen:?}; tu-berlin log: {}",
        f.log("tu-berlin")
    );
}

impl Fleet {
    /// Calls `function` at node `at` from `location`: the status and `X-Function-Version`.
    async fn version_at(&self, at: &str, function: &str, location: &str) -> Option<(u16, String)> {
        let r = self
            .client
            .post(format!("{}/fn/{function}", self.url(at)))
            .header("X-Client-Location", location)
            .body("x")
            .send()
            .await
            .ok()?;
        let version = r
            .headers()
            .get("x-function-version")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        Some((r.status().as_u16(), version))
    }

    /// `geofaas ARGS` with the file of node `file_of`.
    fn geofaas(&self, file_of: &str, args: &[&str]) -> std::process::Output {
        Command::new(BIN)
            .args(args)
            .arg("--config")
            .arg(self.dir.path().join(format!("{file_of}.toml")))
            .current_dir(self.dir.path())
            .output()
            .unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deploy_reaches_every_node_through_etcd_also_one_that_was_down() {
    let Some(mut f) = Fleet::start().await else {
        return;
    };
    f.run_cloud().await;
    f.run("tu-berlin", Some(("tu-berlin", "127.0.0.11")));
    f.run("potsdam", Some(("potsdam", "127.0.0.12")));
    let up = within(Duration::from_secs(20), || async {
        f.route("tu-berlin", BERLIN).await.as_deref() == Some("here")
            && f.route("potsdam", POTSDAM).await.as_deref() == Some("here")
    })
    .await;
    assert!(up.is_some(), "the edges serve: {}", f.log("potsdam"));
    let src = f.dir.path().join("hello");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("fn.py"), "def fn(i, h):\n    return 'hello'\n").unwrap();

    // potsdam is down; the deploy goes to tu-berlin only: the cloud learns it from etcd.
    f.kill("potsdam");
    let out = f.geofaas("tu-berlin", &["deploy", "./hello", "--node", "tu-berlin"]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let at = stdout.find(" version ").unwrap() + 9;
    let version = stdout[at..at + 12].to_owned();
    let want = Some((200, version.clone()));
    let cloud = within(Duration::from_secs(20), || async {
        f.version_at("cloud", "hello", "51.50,-0.12").await == want
    })
    .await;
    assert!(
        cloud.is_some(),
        "the cloud converged: {stdout}\n{}\n{}\n{:?}",
        f.log("cloud"),
        f.log("tu-berlin"),
        f.version_at("cloud", "hello", "51.50,-0.12").await
    );
    eprintln!("the cloud served the new version {cloud:?} after the deploy");

    // potsdam comes back and catches up.
    f.run("potsdam", Some(("potsdam", "127.0.0.12")));
    let caught_up = within(Duration::from_secs(30), || async {
        f.version_at("potsdam", "hello", POTSDAM).await == want
    })
    .await;
    assert!(
        caught_up.is_some(),
        "potsdam caught up: {}",
        f.log("potsdam")
    );

    // A restart keeps it (from the node's state folder), etcd or not.
    f.kill("tu-berlin");
    f.run("tu-berlin", Some(("tu-berlin", "127.0.0.11")));
    let kept = within(Duration::from_secs(20), || async {
        f.version_at("tu-berlin", "hello", BERLIN).await == want
    })
    .await;
    assert!(kept.is_some(), "tu-berlin kept it: {}", f.log("tu-berlin"));

    // A rollout and a removal travel the same way.
    std::fs::write(src.join("fn.py"), "def fn(i, h):\n    return 'hello 2'\n").unwrap();
    let out = f.geofaas("tu-berlin", &["deploy", "./hello", "--node", "tu-berlin"]);
    assert!(out.status.success());
    let v2 = {
        let s = String::from_utf8_lossy(&out.stdout).into_owned();
        let at = s.find(" version ").unwrap() + 9;
        s[at..at + 12].to_owned()
    };
    let want2 = Some((200, v2));
    let converged = within(Duration::from_secs(20), || async {
        f.version_at("potsdam", "hello", POTSDAM).await == want2
            && f.version_at("cloud", "hello", "51.50,-0.12").await == want2
    })
    .await;
    assert!(converged.is_some(), "v2 everywhere: {}", f.log("potsdam"));
    let rm = f.geofaas(
        "tu-berlin",
        &["functions", "rm", "hello", "--node", "tu-berlin"],
    );
    assert!(
        rm.status.success(),
        "{}",
        String::from_utf8_lossy(&rm.stdout)
    );
    let removed = within(Duration::from_secs(20), || async {
        f.version_at("potsdam", "hello", POTSDAM)
            .await
            .map(|(s, _)| s)
            == Some(404)
    })
    .await;
    assert!(
        removed.is_some(),
        "removed everywhere: {}",
        f.log("potsdam")
    );
}

/// The fields of `id`'s row in a `geofaas fleet ls` table (empty when it has none).
fn fleet_row(table: &str, id: &str) -> Vec<String> {
    let row = table
        .lines()
        .find(|l| l.split_whitespace().next() == Some(id));
    row.map(|l| l.split_whitespace().map(str::to_owned).collect())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_ls_shows_a_killed_node_down_from_its_own_answer_while_etcd_still_lists_it() {
    let Some(mut f) = Fleet::start().await else {
        return;
    };
    f.run_cloud().await;
    f.run("tu-berlin", Some(("tu-berlin", "127.0.0.11")));
    let ca = f.dir.path().join("ca.pem");
    let ls = |etcd: &str| {
        let out = Command::new(BIN)
            .args(["fleet", "ls", "--etcd", etcd, "--cacert"])
            .arg(&ca)
            .current_dir(std::env::temp_dir())
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let etcd = f.etcd.url().to_owned();
    let up = within(Duration::from_secs(20), || async {
        fleet_row(&ls(&etcd), "tu-berlin")
            .get(3)
            .map(String::as_str)
            == Some("up")
    })
    .await;
    assert!(up.is_some(), "tu-berlin up: {}", ls(&etcd));
    // NODE ROLE URL HEALTH REPORT QUEUE RUNNING CPU% MEM_MB WARM LEASE AREA: measured values.
    let table = ls(&etcd);
    let row = fleet_row(&table, "tu-berlin");
    assert!(row[4].ends_with('s'), "report age: {table}");
    assert!(row[7].parse::<f64>().is_ok(), "CPU%: {table}");
    assert!(row[8].parse::<u64>().unwrap() > 0, "MEM_MB: {table}");

    f.kill("tu-berlin");
    let killed = Instant::now();
    let table = ls(&etcd);
    let took = killed.elapsed();
    let row = fleet_row(&table, "tu-berlin");
    // Its record is still in etcd (the lease has not run out), yet it reads down.
    assert!(
        !row.is_empty(),
        "the record outlives the node by its lease: {table}"
    );
    assert_eq!(row[3], "down", "{table}");
    assert!(table.contains("tu-berlin: /readyz: "), "{table}");
    assert_eq!(fleet_row(&table, "cloud")[3], "up", "{table}");
    eprintln!("tu-berlin read down {took:?} after kill -9 (report interval 200 ms)");
}
