//! Asynchronous calls that outlive their node, with a real `geofaas node` process (a Lisbon
//! cloud, its own state folder): 150 calls accepted with `202`, the node killed with SIGKILL
//! while most of them wait, restarted, and every call answered; failed calls tried again with
//! backoff, dead-lettered, listed and retried with `geofaas activations`, across a restart.
//! Submissions and answers with `curl` (HTTP/1.1 and HTTP/2) and reqwest for the bulk.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use geofaas_gateway::TlsMaterial;

use crate::deploy::BIN;

const CALLS: usize = 150;
const CALLBACK_SECRET: &str = "callback secret";

struct Node {
    dir: tempfile::TempDir,
    port: u16,
    child: Option<Child>,
    client: reqwest::Client,
}

impl Node {
    /// A Lisbon cloud serving `testdata/async-functions`, `extra` added to its topology.
    fn start(extra: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let tls = TlsMaterial::generate(&["127.0.0.1".to_owned()]).unwrap();
        tls.write_to(dir.path()).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let functions =
            geofaas_test_support::paths::manifest_dir().join("testdata/async-functions");
        let d = dir.path().display();
        let text = format!(
            "zone = \"lisbon.test.\"\n[tls]\ncert = \"{d}/node.pem\"\nkey = \"{d}/node-key.pem\"\nca = \"{d}/ca.pem\"\n\
             {extra}\n\
             [[node]]\nid = \"cloud\"\nrole = \"cloud\"\nlocation = {{ lat = 38.72, lon = -9.14 }}\narea = \"world\"\n\
             public_url = \"https://127.0.0.1:{port}\"\nlisten = \"127.0.0.1:{port}\"\n\
             [[node.backend]]\nkind = \"local\"\nfunctions_dir = \"{}\"\n",
            functions.display()
        );
        std::fs::write(dir.path().join("lisbon.toml"), text).unwrap();
        let client = reqwest::Client::builder()
            .add_root_certificate(reqwest::Certificate::from_pem(tls.ca_pem.as_bytes()).unwrap())
            .build()
            .unwrap();
        let mut n = Self {
            dir,
            port,
            child: None,
            client,
        };
        n.spawn();
        n
    }

    fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path("node.log"))
            .unwrap();
        let child = Command::new(BIN)
            .args(["node", "--node", "cloud", "--config"])
            .arg(self.path("lisbon.toml"))
            .arg("--state-dir")
            .arg(self.path("state"))
            .env("RUST_LOG", "warn")
            .env("GEOFAAS_CALLBACK_SECRET", CALLBACK_SECRET)
            .current_dir(std::env::temp_dir())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
    }

    fn signal(&mut self, sig: &str) {
        let mut child = self.child.take().unwrap();
        let status = Command::new("kill")
            .args([sig, &child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        child.wait().unwrap();
    }

    async fn wait_ready(&self) {
        for _ in 0..600 {
            let url = format!("https://127.0.0.1:{}/readyz", self.port);
            if self
                .client
                .get(&url)
                .send()
                .await
                .is_ok_and(|r| r.status() == 200)
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let log = std::fs::read_to_string(self.path("node.log")).unwrap_or_default();
        panic!("the node never became ready:\n{log}");
    }

    fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.port)
    }

    /// `curl` from another folder: (status, headers and body as printed with `-i`).
    fn curl(&self, h2: bool, args: &[&str], path: &str) -> (u16, String) {
        let out = Command::new("curl")
            .args(["-sS", "-i", if h2 { "--http2" } else { "--http1.1" }])
            .arg("--cacert")
            .arg(self.path("ca.pem"))
            .args(args)
            .arg(self.url(path))
            .current_dir(std::env::temp_dir())
            .output()
            .expect("curl runs");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let status = text
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        (status, text)
    }

    /// `geofaas activations ...` against this node's topology.
    fn activations(&self, args: &[&str]) -> String {
        let out = Command::new(BIN)
            .arg("activations")
            .args(args)
            .arg("--config")
            .arg(self.path("lisbon.toml"))
            .current_dir(std::env::temp_dir())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "geofaas activations {args:?}: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    }

    /// Submits one asynchronous call; its `Location`.
    async fn submit(&self, function: &str, body: String) -> String {
        let resp = self
            .client
            .post(self.url(&format!("/fn/{function}")))
            .header("Prefer", "respond-async")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 202);
        resp.headers()["location"].to_str().unwrap().to_owned()
    }

    /// The answer at `location` once it is not `202` (bounded).
    async fn answer(&self, location: &str, within: Duration) -> (u16, String) {
        let until = Instant::now() + within;
        loop {
            let resp = self.client.get(self.url(location)).send().await;
            if let Ok(r) = resp {
                let status = r.status().as_u16();
                if status != 202 {
                    return (status, r.text().await.unwrap_or_default());
                }
            }
            assert!(Instant::now() < until, "{location} still running");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(c) = &mut self.child {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn runs(log: &Path) -> HashMap<String, usize> {
    let mut runs = HashMap::new();
    for line in std::fs::read_to_string(log).unwrap_or_default().lines() {
        *runs.entry(line.to_owned()).or_default() += 1;
    }
    runs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accepted_calls_are_all_answered_after_their_node_is_killed_and_restarted() {
    // Four calls at a time: most of the 150 are still waiting when the node dies.
    let mut node = Node::start("[gateway]\nmax_concurrent_calls = 4\n");
    node.wait_ready().await;
    let log = node.path("executions.log");

    // One with curl, over HTTP/2: the 202 names where the answer will be.
    let (status, head) = node.curl(
        true,
        &[
            "-H",
            "Prefer: respond-async",
            "-d",
            &format!("{} curl-1", log.display()),
        ],
        "/fn/slowtally",
    );
    assert_eq!(status, 202, "{head}");
    let location = head
        .lines()
        .find_map(|l| l.strip_prefix("location: "))
        .expect("a Location header")
        .trim()
        .to_owned();
    assert!(location.starts_with("/activations/"), "{location}");

    let submissions =
        (0..CALLS).map(|i| node.submit("slowtally", format!("{} c{i}", log.display())));
    let locations = futures::future::join_all(submissions).await;

    // Killed while calls run and most wait.
    while runs(&log).len() < 20 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    node.signal("-9");
    let ran_before: usize = runs(&log).values().sum();
    assert!(
        ran_before < CALLS,
        "all calls ran before the kill: nothing to prove"
    );
    node.spawn();
    node.wait_ready().await;

    for (i, location) in locations.iter().enumerate() {
        let (status, body) = node.answer(location, Duration::from_secs(90)).await;
        assert_eq!(
            (status, body.as_str()),
            (200, format!("ok c{i}").as_str()),
            "{location}"
        );
    }
    for h2 in [false, true] {
        let (status, text) = node.curl(h2, &[], &location);
        assert_eq!(status, 200, "{text}");
        assert!(text.ends_with("ok curl-1"), "{text}");
    }
    let runs = runs(&log);
    let twice = runs.values().filter(|n| **n == 2).count();
    eprintln!(
        "durable activations: {CALLS} accepted, {ran_before} ran before the kill, all {CALLS} answered after it, {twice} ran twice"
    );
    for i in 0..CALLS {
        assert!(runs.contains_key(&format!("c{i}")), "c{i} never ran");
    }
    assert!(
        runs.values().all(|n| *n <= 2),
        "a call ran more than twice: {runs:?}"
    );
    // Only a call that had run (its answer not yet on disk) may run again.
    assert!(
        twice <= ran_before,
        "{twice} ran twice, only {ran_before} had run"
    );
    let metrics = node
        .client
        .get(node.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    // Every call that had not run at the kill was read back from the journal and run again.
    let recovered: usize = metrics
        .lines()
        .find_map(|l| l.strip_prefix("geofaas_activations_total{node=\"cloud\",function=\"slowtally\",event=\"recovered\"} "))
        .unwrap_or_else(|| panic!("no recovered count in\n{metrics}"))
        .parse()
        .unwrap();
    assert!(
        recovered >= CALLS + 1 - ran_before,
        "{recovered} recovered, {ran_before} had run"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_calls_are_tried_again_then_dead_lettered_listed_and_retried_by_hand() {
    let mut node = Node::start(
        "[activations]\nmax_attempts = 3\nretry_backoff_ms = 100\n\n\
         [[function]]\nname = \"flaky3\"\nretry_on_error = true\n",
    );
    node.wait_ready().await;
    let log = node.path("tries.log");

    // Fails twice, answers on the third try.
    let flaky = node.submit("flaky3", format!("{} f1", log.display())).await;
    let (status, body) = node.answer(&flaky, Duration::from_secs(30)).await;
    assert_eq!((status, body.as_str()), (200, "ok f1 after 3 tries"));

    let metrics = node
        .client
        .get(node.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(
            "geofaas_activations_total{node=\"cloud\",function=\"flaky3\",event=\"retried\"} 2"
        ),
        "{metrics}"
    );

    // `gated` has no retry_on_error: its failure is dead-lettered at once, with the error.
    let gate = node.path("gate");
    std::fs::write(&gate, "closed").unwrap();
    let gated = node.submit("gated", gate.display().to_string()).await;
    let (status, body) = node.answer(&gated, Duration::from_secs(30)).await;
    assert_eq!(status, 502, "{body}");
    assert!(body.contains("function_failed"), "{body}");
    let id = gated.trim_start_matches("/activations/");

    // Dead letters survive a restart.
    node.signal("-TERM");
    node.spawn();
    node.wait_ready().await;
    let ls = node.activations(&["ls", "--failed"]);
    assert!(
        ls.contains(id) && ls.contains("gated") && ls.contains("failed"),
        "{ls}"
    );
    assert!(
        !ls.contains("flaky3"),
        "only dead letters with --failed: {ls}"
    );
    let all = node.activations(&["ls"]);
    assert!(all.contains("flaky3") && all.contains("done"), "{all}");
    let show = node.activations(&["show", id]);
    assert!(
        show.contains("function_failed") && show.contains("gate"),
        "{show}"
    );

    // Fixed, and retried by hand: the same activation answers.
    std::fs::remove_file(&gate).unwrap();
    let retried = node.activations(&["retry", id]);
    assert!(retried.contains("runs again at cloud"), "{retried}");
    let (status, body) = node.answer(&gated, Duration::from_secs(30)).await;
    assert_eq!((status, body.as_str()), (200, "open"));
    let ls = node.activations(&["ls", "--failed"]);
    assert!(!ls.contains(id), "{ls}");

    // An unknown function is refused before it is accepted; a resubmission with the same
    // Idempotency-Key gets the first activation.
    let (status, text) = node.curl(
        false,
        &["-H", "Prefer: respond-async", "-d", "x"],
        "/fn/nosuch",
    );
    assert_eq!(status, 404, "{text}");
    let big = node.path("big.bin");
    std::fs::write(&big, vec![b'x'; 7 << 20]).unwrap();
    let at_big = format!("@{}", big.display());
    let (status, text) = node.curl(
        false,
        &["-H", "Prefer: respond-async", "--data-binary", &at_big],
        "/fn/gated",
    );
    assert_eq!(status, 413, "{text}");
    let ls = node.activations(&["ls"]);
    assert!(!ls.contains("nosuch"), "{ls}");
    let args = [
        "-H",
        "Prefer: respond-async",
        "-H",
        "Idempotency-Key: order-17",
        "-d",
        "open-sesame",
    ];
    let (first, a) = node.curl(false, &args, "/fn/gated");
    let (again, b) = node.curl(true, &args, "/fn/gated");
    assert_eq!((first, again), (202, 202), "{a}\n{b}");
    let loc = |t: &str| {
        t.lines()
            .find(|l| l.to_ascii_lowercase().starts_with("location:"))
            .map(str::to_owned)
    };
    assert_eq!(loc(&a), loc(&b));
    assert!(
        b.to_ascii_lowercase().contains("idempotent-replayed: true"),
        "{b}"
    );
}

/// One POST the callback receiver got: its headers and body.
type Received = (axum::http::HeaderMap, bytes::Bytes);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_answer_is_posted_to_the_callback_url_signed_and_retried_until_taken() {
    use std::sync::{Arc, Mutex};
    // The receiver refuses the first post (503) and takes the second.
    let got: Arc<Mutex<Vec<Received>>> = Arc::default();
    let seen = got.clone();
    let router = axum::Router::new().route(
        "/hooks/{id}",
        axum::routing::post(move |headers: axum::http::HeaderMap, body: bytes::Bytes| {
            let seen = seen.clone();
            async move {
                let mut seen = seen.lock().unwrap();
                seen.push((headers, body));
                match seen.len() {
                    1 => axum::http::StatusCode::SERVICE_UNAVAILABLE,
                    _ => axum::http::StatusCode::OK,
                }
            }
        }),
    );
    let receiver = geofaas_test_support::server::TestServer::start(router)
        .await
        .unwrap();
    let hooks = format!("{}/hooks/", receiver.url().trim_end_matches('/'));
    let node = Node::start(&format!("[activations]\ncallback_allow = [\"{hooks}\"]\n"));
    node.wait_ready().await;

    // Refused before anything is accepted: a URL outside the allowed prefix.
    let (status, text) = node.curl(
        false,
        &[
            "-H",
            "Prefer: respond-async",
            "-H",
            "X-Callback-Url: http://127.0.0.1:1/elsewhere",
            "-d",
            "x",
        ],
        "/fn/gated",
    );
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("callback_not_allowed"), "{text}");

    let hook = format!("X-Callback-Url: {hooks}order-9");
    let (status, head) = node.curl(
        true,
        &[
            "-H",
            "Prefer: respond-async",
            "-H",
            &hook,
            "-d",
            "no-such-gate",
        ],
        "/fn/gated",
    );
    assert_eq!(status, 202, "{head}");
    let id = head
        .lines()
        .find_map(|l| l.strip_prefix("location: /activations/"))
        .unwrap()
        .trim()
        .to_owned();
    let until = Instant::now() + Duration::from_secs(30);
    while got.lock().unwrap().len() < 2 {
        assert!(Instant::now() < until, "the callback was not tried twice");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (headers, body) = got.lock().unwrap()[1].clone();
    assert_eq!(&body[..], b"open");
    assert_eq!(headers["x-activation-id"], id.as_str());
    assert_eq!(headers["x-activation-status"], "200");
    assert_eq!(headers["x-function"], "gated");
    // The signature, checked with openssl: HMAC-SHA256 of "TS.ID.BODY".
    let sig = headers["x-geofaas-signature"].to_str().unwrap().to_owned();
    let (ts, mac) = sig
        .strip_prefix("t=")
        .and_then(|s| s.split_once(",v1="))
        .unwrap_or_else(|| panic!("{sig}"));
    let message = node.path("signed.txt");
    std::fs::write(&message, format!("{ts}.{id}.open")).unwrap();
    let out = Command::new("openssl")
        .args(["dgst", "-sha256", "-hmac", CALLBACK_SECRET, "-r"])
        .arg(&message)
        .output()
        .unwrap();
    let expected = String::from_utf8_lossy(&out.stdout);
    assert_eq!(expected.split_whitespace().next(), Some(mac), "{sig}");
    // Delivered once taken: no third post.
    let (status, body) = node
        .answer(&format!("/activations/{id}"), Duration::from_secs(5))
        .await;
    assert_eq!((status, body.as_str()), (200, "open"));
    assert_eq!(got.lock().unwrap().len(), 2);
}

/// A client of `up`'s current CA (a new one each start).
fn up_client(state: &Path) -> reqwest::Client {
    let pem = std::fs::read(state.join("ca.pem")).unwrap();
    reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&pem).unwrap())
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// A `geofaas up` child, killed when dropped (also when an assertion fails first).
struct UpChild(Child);

impl std::ops::Deref for UpChild {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for UpChild {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for UpChild {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn_up(dir: &Path) -> UpChild {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("up.log"))
        .unwrap();
    Command::new(BIN)
        .args(["up", "--no-dns", "--config"])
        .arg(dir.join("lisbon.toml"))
        .arg("--state-dir")
        .arg(dir.join("state"))
        .env("RUST_LOG", "warn")
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .map(UpChild)
        .unwrap()
}

async fn up_ready(dir: &Path, url: &str) -> reqwest::Client {
    for _ in 0..600 {
        if dir.join("state/ca.pem").exists() {
            let client = up_client(&dir.join("state"));
            if client
                .get(format!("{url}/readyz"))
                .send()
                .await
                .is_ok_and(|r| r.status() == 200)
            {
                return client;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let log = std::fs::read_to_string(dir.join("up.log")).unwrap_or_default();
    panic!("up never became ready:\n{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_killed_while_it_accepts_calls_answers_every_202_after_its_restart() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    const TOTAL: usize = 400;
    const KILL_AT: usize = 150;
    let dir = tempfile::tempdir().unwrap();
    let port = |_| {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    };
    let (edge, cloud) = (port(0), port(1));
    let functions = geofaas_test_support::paths::manifest_dir().join("testdata/async-functions");
    let node = |id: &str, role: &str, area: &str, p: u16| {
        format!(
            "[[node]]\nid = \"{id}\"\nrole = \"{role}\"\nlocation = {{ lat = 38.7107, lon = -9.1366 }}\n{area}\n\
             public_url = \"https://127.0.0.1:{p}\"\nlisten = \"127.0.0.1:{p}\"\n\
             [[node.backend]]\nkind = \"local\"\nfunctions_dir = \"{}\"\n\n",
            functions.display()
        )
    };
    let text = [
        "zone = \"lisbon.test.\"\n[gateway]\nmax_concurrent_calls = 4\n\n".to_owned(),
        node(
            "baixa",
            "edge",
            "area.circle = { center = { lat = 38.7107, lon = -9.1366 }, radius_km = 3 }",
            edge,
        ),
        node("cloud", "cloud", "area = \"world\"", cloud),
    ]
    .concat();
    std::fs::write(dir.path().join("lisbon.toml"), text).unwrap();
    let url = format!("https://127.0.0.1:{edge}");
    let mut up = spawn_up(dir.path());
    let client = up_ready(dir.path(), &url).await;
    let log = dir.path().join("executions.log");

    // Eight clients submit calls at the edge until up dies under them.
    let next = Arc::new(AtomicUsize::new(0));
    let accepted: Arc<Mutex<Vec<(usize, String)>>> = Arc::default();
    let workers: Vec<_> = (0..8)
        .map(|_| {
            let (client, next, accepted, url, log) = (
                client.clone(),
                next.clone(),
                accepted.clone(),
                url.clone(),
                log.clone(),
            );
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= TOTAL {
                        return;
                    }
                    let sent = client
                        .post(format!("{url}/fn/slowtally"))
                        .header("Prefer", "respond-async")
                        .header("X-Client-Location", "38.7107,-9.1366")
                        .body(format!("{} a{i}", log.display()))
                        .send()
                        .await;
                    match sent {
                        Ok(r) if r.status() == 202 => {
                            let location = r.headers()["location"].to_str().unwrap().to_owned();
                            accepted.lock().unwrap().push((i, location));
                        }
                        // Up died under this call: it was not accepted.
                        _ => return,
                    }
                }
            })
        })
        .collect();
    while accepted.lock().unwrap().len() < KILL_AT {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Command::new("kill")
        .args(["-9", &up.id().to_string()])
        .status()
        .unwrap();
    up.wait().unwrap();
    for w in workers {
        w.await.unwrap();
    }
    let accepted = accepted.lock().unwrap().clone();
    let ran_before: usize = runs(&log).values().sum();

    let mut up = spawn_up(dir.path());
    let client = up_ready(dir.path(), &url).await;
    for (i, location) in &accepted {
        let until = Instant::now() + Duration::from_secs(120);
        loop {
            let r = client.get(format!("{url}{location}")).send().await.unwrap();
            if r.status() != 202 {
                assert_eq!(r.status(), 200, "a{i} at {location}");
                assert_eq!(r.text().await.unwrap(), format!("ok a{i}"));
                break;
            }
            assert!(Instant::now() < until, "a{i} still running");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let runs = runs(&log);
    let twice: Vec<&String> = runs
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(id, _)| id)
        .collect();
    eprintln!(
        "up killed: {} accepted before the kill, {ran_before} had run, all answered after the restart; ran twice: {twice:?}",
        accepted.len()
    );
    for (i, _) in &accepted {
        assert!(runs.contains_key(&format!("a{i}")), "a{i} never ran");
    }
    assert!(runs.values().all(|n| *n <= 2), "{runs:?}");
    // Twice only for a call running at the kill (at most the 4 permits) or run and not yet
    // journaled as finished.
    assert!(twice.len() <= ran_before + 4, "{twice:?}");
    let _ = Command::new("kill")
        .args(["-TERM", &up.id().to_string()])
        .status();
    let _ = up.wait();
}
