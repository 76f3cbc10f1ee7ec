//! The operator's view against a real `geofaas up` (a child process) on a Lisbon topology: the
//! call stream `GET /events` read with `curl -N` (HTTP/1.1 and HTTP/2), its bound (a
//! subscriber that never reads), its admin key, and `GET /ui` in Debian's Chromium driven by
//! Playwright's core (`cli/tests/browser/ui-check.js`).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use geofaas_gateway::access::sha256_hex;

use crate::answer::Answer;

const BIN: &str = env!("CARGO_BIN_EXE_geofaas");
const ADMIN: &str = "ops-ui-secret";
const APP: &str = "app-ui-secret";
/// The nodes, in topology order, with a client location inside each one's area.
const NODES: [(&str, &str); 3] = [
    ("baixa", "38.7107,-9.1366"),
    ("belem", "38.6970,-9.2060"),
    ("madrid", "40.4168,-3.7038"),
];
/// How long a test waits for something that must come (not a speed bound).
const PATIENCE: Duration = Duration::from_secs(30);

/// A `geofaas up` running from its own scratch folder.
struct Up {
    child: Child,
    dir: tempfile::TempDir,
    ports: [u16; 3],
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

fn topology(ports: &[u16; 3], keys: bool) -> String {
    let mut text = format!(
        "zone = \"lisbon.test.\"\n\n[dns]\nlisten = \"127.0.0.1:{}\"\n\n",
        free_port()
    );
    if keys {
        for (id, secret, admin) in [("ops", ADMIN, true), ("app", APP, false)] {
            text.push_str(&format!(
                "[[auth.key]]\nid = \"{id}\"\nsha256 = \"{}\"\nfunctions = [\"*\"]\nadmin = {admin}\n\n",
                sha256_hex(secret)
            ));
        }
    }
    let areas = [
        "area.circle = { center = { lat = 38.7107, lon = -9.1366 }, radius_km = 2.5 }",
        "area.circle = { center = { lat = 38.6970, lon = -9.2060 }, radius_km = 2.5 }",
        "area = \"world\"",
    ];
    for (i, (id, at)) in NODES.iter().enumerate() {
        let (lat, lon) = at.split_once(',').unwrap();
        let (role, dir) = if i == 2 {
            ("cloud", "cloud-functions")
        } else {
            ("edge", "edge-functions")
        };
        let port = ports[i];
        text.push_str(&format!(
            "[[node]]\nid = \"{id}\"\nrole = \"{role}\"\nlocation = {{ lat = {lat}, lon = {lon} }}\n{}\n\
             public_url = \"https://127.0.0.1:{port}\"\nlisten = \"127.0.0.1:{port}\"\n\
             [[node.backend]]\nkind = \"local\"\nfunctions_dir = \"{dir}\"\n\n",
            areas[i]
        ));
    }
    for name in ["echo", "cloudecho"] {
        text.push_str(&format!(
            "[[function]]\nname = \"{name}\"\ncpu_ms = 1\nmemory_mb = 16\nimage_mb = 1\n\
             init_ms = 30\ninput_kb = 1\nslo_ms = 200\n\n"
        ));
    }
    text
}

impl Up {
    fn start(keys: bool) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let echo = geofaas_test_support::paths::manifest_dir().join("../functions/echo");
        copy_dir(&echo, &dir.path().join("edge-functions/echo"));
        copy_dir(&echo, &dir.path().join("cloud-functions/echo"));
        // Only the cloud serves `cloudecho`: an edge offloads it.
        copy_dir(&echo, &dir.path().join("cloud-functions/cloudecho"));
        let ports = [free_port(), free_port(), free_port()];
        std::fs::write(dir.path().join("lisbon.toml"), topology(&ports, keys)).unwrap();
        let child = Command::new(BIN)
            .args(["up", "--config", "lisbon.toml", "--no-dns"])
            .current_dir(dir.path())
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("geofaas up starts");
        let up = Self { child, dir, ports };
        let deadline = Instant::now() + PATIENCE;
        while Instant::now() < deadline {
            let ready = up.dir.path().join(".geofaas/up.json").is_file()
                && (0..3).all(|i| up.curl(i, "/readyz", &[]).status == 200);
            if ready {
                return up;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("geofaas up did not come up");
    }

    fn ca(&self) -> PathBuf {
        self.dir.path().join(".geofaas/ca.pem")
    }

    fn url(&self, node: usize, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.ports[node])
    }

    /// `curl -i` of `path` at `node`, run from the `up` folder.
    fn curl(&self, node: usize, path: &str, extra: &[&str]) -> Answer {
        let out = Command::new("curl")
            .args(["-sS", "-i", "--cacert"])
            .arg(self.ca())
            .args(extra)
            .arg(self.url(node, path))
            .current_dir(self.dir.path())
            .output()
            .unwrap();
        Answer::parse(&String::from_utf8_lossy(&out.stdout))
    }

    /// Calls `function` at node `at` from inside node `from`'s area, with request id `id`.
    fn call(&self, at: usize, from: usize, function: &str, id: &str, h2: bool) -> Answer {
        let location = format!("X-Client-Location: {}", NODES[from].1);
        let rid = format!("X-Request-Id: {id}");
        let version = if h2 { "--http2" } else { "--http1.1" };
        let path = format!("/fn/{function}");
        self.curl(
            at,
            &path,
            &[version, "-H", &location, "-H", &rid, "-d", "hi"],
        )
    }

    /// `curl -N` reading `path` at `node`: its lines arrive on the receiver.
    fn follow(&self, node: usize, path: &str, extra: &[&str]) -> Follower {
        let mut child = Command::new("curl")
            .args(["-sS", "-N", "--cacert"])
            .arg(self.ca())
            .args(extra)
            .arg(self.url(node, path))
            .current_dir(self.dir.path())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let f = Follower { child, lines };
        // The stream's first comment says the subscription is in place.
        f.line_where(|l| l.starts_with(": events of"));
        f
    }

    fn metric(&self, node: usize, series: &str) -> f64 {
        let text = self.curl(node, "/metrics", &[]).body;
        text.lines()
            .filter(|l| l.starts_with(series))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `curl -N` reading a stream.
struct Follower {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Follower {
    fn line_where(&self, want: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) if want(&l) => return l,
                Ok(_) => {}
                Err(e) => panic!("the stream ended or went quiet ({e})"),
            }
        }
    }

    /// The next call event whose request id is `id`.
    fn event(&self, id: &str) -> serde_json::Value {
        let needle = format!(r#""id":"{id}""#);
        let line = self.line_where(|l| l.starts_with("data: ") && l.contains(&needle));
        serde_json::from_str(&line["data: ".len()..]).expect("each data line is one JSON object")
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn events_over_curl_show_each_call_with_where_it_ran_and_why() {
    let up = Up::start(false);
    for h2 in [false, true] {
        let v = if h2 { "--http2" } else { "--http1.1" };
        let s = if h2 { "h2" } else { "h1" };
        let baixa = up.follow(0, "/events", &[v]);
        let fleet = up.follow(2, "/events?scope=fleet", &[v]);
        // Every peer's stream is connected before the calls.
        for _ in 0..2 {
            fleet.line_where(|l| l.contains(r#""connected":true"#));
        }

        // Served where it landed.
        let a = up.call(0, 0, "echo", &format!("served-{s}"), h2);
        assert_eq!((a.status, a.body.as_str()), (200, "hi"));
        let e = baixa.event(&format!("served-{s}"));
        assert_eq!(e["at"], "baixa");
        assert_eq!(e["function"], "echo");
        assert_eq!(e["node"], "baixa");
        assert_eq!(e["status"], 200);
        assert!(e["latency_ms"].as_f64().unwrap() > 0.0, "{e}");
        assert!(e["ts_ms"].as_u64().unwrap() > 1_700_000_000_000, "{e}");
        assert_eq!(e["client"]["lat"], 38.7107);
        assert_eq!(e["client"]["lon"], -9.1366);
        assert_eq!(e["client"]["source"], "header");
        assert!(e["handover"].is_null() && e["offload"].is_null(), "{e}");
        assert!(
            ["local-new", "local-warm"].contains(&e["placement"].as_str().unwrap()),
            "{e}"
        );

        // A client in belem's area calling baixa is handed over: a 307, run nowhere.
        let a = up.call(0, 1, "echo", &format!("handover-{s}"), h2);
        assert_eq!(a.status, 307);
        let e = baixa.event(&format!("handover-{s}"));
        assert_eq!(
            (e["status"].as_u64(), e["node"].is_null()),
            (Some(307), true)
        );
        assert_eq!(e["handover"]["to"], "belem");
        assert_eq!(e["client"]["lon"], -9.2060);

        // baixa does not serve `cloudecho`: offloaded, run in madrid.
        let a = up.call(0, 0, "cloudecho", &format!("offload-{s}"), h2);
        assert_eq!((a.status, a.header("x-offloaded-from")), (200, "baixa"));
        let e = baixa.event(&format!("offload-{s}"));
        assert_eq!(e["node"], "madrid");
        assert_eq!(e["offload"]["to"], "madrid");
        assert_eq!(e["reason"], "not_here");

        // madrid's fleet stream has baixa's events (over the signed link) and its own.
        let e = fleet.event(&format!("served-{s}"));
        assert_eq!(
            (e["at"].as_str(), e["node"].as_str()),
            (Some("baixa"), Some("baixa"))
        );
        // The offloaded call twice: baixa's offload and madrid's run of it, in either order.
        let mut both = [
            fleet.event(&format!("offload-{s}")),
            fleet.event(&format!("offload-{s}")),
        ];
        both.sort_by_key(|e| e["at"].as_str().unwrap_or_default().to_owned());
        assert_eq!(both[0]["at"], "baixa");
        assert_eq!(both[0]["offload"]["to"], "madrid");
        assert_eq!(both[1]["at"], "madrid");
        assert_eq!(both[1]["forwarded"], true);
        assert_eq!(both[1]["node"], "madrid");
    }
    // A bad scope names itself.
    let a = up.curl(0, "/events?scope=world", &[]);
    assert_eq!(a.status, 400);
    assert!(a.body.contains("scope=\\\"world\\\""), "{}", a.body);
}

#[test]
fn the_stream_and_the_page_need_the_admin_key_when_keys_are_configured() {
    let up = Up::start(true);
    let bearer = |k: &str| format!("Authorization: Bearer {k}");
    for path in ["/events", "/ui", "/ui/state", "/ui/app.js"] {
        assert_eq!(up.curl(0, path, &[]).status, 401, "{path} without a key");
        assert_eq!(
            up.curl(0, path, &["-H", &bearer(APP)]).status,
            403,
            "{path} with a caller key"
        );
    }
    // A browser is asked for the key with Basic auth, and sends it as the password.
    let a = up.curl(0, "/ui", &[]);
    assert!(
        a.header("www-authenticate").starts_with("Basic"),
        "{:?}",
        a.headers
    );
    let basic = format!("operator:{ADMIN}");
    let a = up.curl(0, "/ui", &["-u", &basic]);
    assert_eq!(a.status, 200);
    assert!(a
        .header("content-security-policy")
        .contains("default-src 'self'"));
    let a = up.curl(0, "/ui/state", &["-H", &bearer(ADMIN)]);
    assert_eq!(a.status, 200);
    let state: serde_json::Value = serde_json::from_str(&a.body).unwrap();
    let ids: Vec<_> = state["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["baixa", "belem", "madrid"]);
    // The other nodes' status came over the signed link, without the key.
    for n in state["nodes"].as_array().unwrap() {
        assert_eq!(n["status"]["ready"], true, "{n}");
    }
    // The stream with the admin key, as a bearer token and as Basic auth.
    let s = up.follow(0, "/events?scope=fleet", &["-H", &bearer(ADMIN)]);
    for _ in 0..2 {
        s.line_where(|l| l.contains(r#""connected":true"#));
    }
    drop(s);
    let s = up.follow(1, "/events", &["-u", &basic]);
    let app = bearer(APP);
    let a = up.curl(
        1,
        "/fn/echo",
        &[
            "-H",
            &app,
            "-H",
            "X-Client-Location: 38.6970,-9.2060",
            "-H",
            "X-Request-Id: keyed-1",
            "-d",
            "k",
        ],
    );
    assert_eq!(a.status, 200);
    assert_eq!(s.event("keyed-1")["node"], "belem");
}

/// Makes `n` calls of `echo` at baixa, 8 at a time; the statuses that were not 200, and the
/// time it took.
async fn calls(client: &reqwest::Client, url: &str, n: usize) -> (Vec<u16>, Duration) {
    use futures::StreamExt as _;
    let started = Instant::now();
    let statuses: Vec<u16> = futures::stream::iter(0..n)
        .map(|_| async {
            let r = client
                .post(url)
                .header("X-Client-Location", NODES[0].1)
                .body("x")
                .send()
                .await;
            match r {
                Ok(r) => {
                    let status = r.status().as_u16();
                    let _ = r.bytes().await;
                    status
                }
                Err(_) => 0,
            }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    let took = started.elapsed();
    (statuses.into_iter().filter(|s| *s != 200).collect(), took)
}

/// Counts call events and the latest `lost_total` in `text`.
fn tally(text: &str) -> (usize, u64) {
    let delivered = text.matches(r#"data: {"id":"#).count();
    let lost = text
        .match_indices(r#""lost_total":"#)
        .filter_map(|(i, m)| {
            let rest = &text[i + m.len()..];
            rest[..rest.find('}')?].parse::<u64>().ok()
        })
        .max()
        .unwrap_or(0);
    (delivered, lost)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_that_never_reads_loses_counted_events_and_every_call_succeeds() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    const N: usize = 3000;
    let up = tokio::task::spawn_blocking(|| Up::start(false))
        .await
        .unwrap();
    let ca = std::fs::read(up.ca()).unwrap();
    let client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&ca).unwrap())
        .build()
        .unwrap();
    let url = up.url(0, "/fn/echo");
    // Warm: instances started, connections open.
    let (failed, _) = calls(&client, &url, 200).await;
    assert!(failed.is_empty(), "{failed:?}");
    let (failed, alone) = calls(&client, &url, N).await;
    assert!(failed.is_empty(), "without a subscriber: {failed:?}");

    // A subscriber that reads its answer's head, then nothing.
    // Spoken as HTTP/1.0 (so the stream is not chunked): a subscriber that can stop reading. (A
    // small receive buffer would not help: the server's socket buffer still grows to megabytes,
    // and draining them later through a small window is slow.)
    let mut stalled = crate::lifecycle::tls_h1(&up.ca(), up.ports[0]).await;
    stalled
        .write_all(b"GET /events HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let mut seen = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    while !String::from_utf8_lossy(&seen).contains(": events of baixa") {
        let n = stalled.read(&mut buf).await.unwrap();
        assert!(
            n > 0,
            "the stream closed: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&buf[..n]);
    }
    assert!(
        String::from_utf8_lossy(&seen).starts_with("HTTP/1.0 200"),
        "{}",
        String::from_utf8_lossy(&seen)
    );
    // Until its queue and the connection's buffers (the server's socket buffer grows to
    // megabytes) are full, events still go out; then it loses them.
    let metrics = |up: &Up| up.metric(0, "geofaas_events_dropped_total");
    let mut filled = 0;
    let mut dropped = 0.0;
    for _ in 0..60 {
        let (failed, _) = calls(&client, &url, 1000).await;
        assert!(failed.is_empty(), "with a stalled subscriber: {failed:?}");
        filled += 1000;
        dropped = tokio::task::block_in_place(|| metrics(&up));
        if dropped > 0.0 {
            break;
        }
    }
    assert!(
        dropped > 0.0,
        "a subscriber that never reads loses events ({filled} calls)"
    );
    // Full: every event of these calls is lost, and no call waits for the reader.
    let (failed, stalled_took) = calls(&client, &url, N).await;
    assert!(failed.is_empty(), "with a stalled subscriber: {failed:?}");
    let after = tokio::task::block_in_place(|| metrics(&up));
    // Nearly all of them: the server's socket buffer may still have grown a little.
    assert!(
        after - dropped > (N / 2) as f64 && after - dropped <= N as f64,
        "the events of calls made while it is full are lost, and counted: {dropped} then {after}"
    );
    let dropped = after;
    let total = (filled + N) as u64;

    // Reading again, it gets what was queued for it, then the count of what it lost: together,
    // every call.
    let mut text = String::from_utf8_lossy(&seen).into_owned();
    let got = tokio::time::timeout(PATIENCE, async {
        loop {
            let (delivered, lost) = tally(&text);
            if delivered as u64 + lost >= total {
                return (delivered, lost);
            }
            let n = stalled.read(&mut buf).await.unwrap();
            assert!(n > 0, "the stream closed");
            text.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    })
    .await;
    let (delivered, lost) =
        got.unwrap_or_else(|_| panic!("not every call accounted for: {:?}", tally(&text)));
    assert_eq!(delivered as u64 + lost, total);
    assert_eq!(
        lost as f64, dropped,
        "/metrics counts what the subscriber lost"
    );
    assert!(
        text.contains(&format!(": lost {lost} events")),
        "the SSE comment tells the loss"
    );
    drop(stalled);

    // For comparison: a subscriber that reads everything (curl -N).
    let up = std::sync::Arc::new(up);
    let reader = tokio::task::spawn_blocking({
        let up = up.clone();
        move || up.follow(0, "/events", &[])
    })
    .await
    .unwrap();
    let (failed, reading_took) = calls(&client, &url, N).await;
    assert!(failed.is_empty(), "with a reading subscriber: {failed:?}");
    drop(reader);
    // And without one again, so the order of the runs shows.
    let (failed, alone_again) = calls(&client, &url, N).await;
    assert!(failed.is_empty(), "{failed:?}");
    let rate = |d: Duration| N as f64 / d.as_secs_f64();
    eprintln!(
        "{N} calls, 8 at a time: no subscriber {:.2} s ({:.0}/s); stalled subscriber {:.2} s ({:.0}/s; {filled} calls filled its buffers, then {lost} events lost, {delivered} delivered); reading subscriber {:.2} s ({:.0}/s); no subscriber again {:.2} s ({:.0}/s)",
        alone.as_secs_f64(), rate(alone),
        stalled_took.as_secs_f64(), rate(stalled_took),
        reading_took.as_secs_f64(), rate(reading_took),
        alone_again.as_secs_f64(), rate(alone_again),
    );
}

#[test]
fn the_live_map_in_chromium_shows_every_node_and_area_and_a_curl_call() {
    let browser = geofaas_test_support::paths::manifest_dir().join("tests/browser");
    assert!(
        browser.join("node_modules/playwright-core").is_dir(),
        "run `npm ci --prefix cli/tests/browser` (scripts/test.sh does) for the browser test"
    );
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    assert!(
        Path::new(&chromium).is_file(),
        "{chromium} is missing: apt-get install chromium (scripts/test.sh does)"
    );
    let up = Up::start(false);
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ui");
    std::fs::create_dir_all(&shots).unwrap();
    let (laptop, phone) = (shots.join("live-map.png"), shots.join("live-map-phone.png"));
    let _ = std::fs::remove_file(&laptop);
    // A client in baixa's area calls belem: handed over (307), curl follows, baixa runs it.
    let id = format!("ui-{}", std::process::id());
    let call = serde_json::json!([
        "-sS",
        "-L",
        "--cacert",
        up.ca(),
        "-H",
        format!("X-Client-Location: {}", NODES[0].1),
        "-H",
        format!("X-Request-Id: {id}"),
        "-d",
        "hi",
        up.url(1, "/fn/echo"),
    ]);
    // First, for the picture: a call served at belem and one baixa offloads to madrid.
    let curl_args = |at: usize, from: usize, f: &str| {
        serde_json::json!([
            "-sS",
            "-f",
            "--cacert",
            up.ca(),
            "-H",
            format!("X-Client-Location: {}", NODES[from].1),
            "-d",
            "hi",
            up.url(at, &format!("/fn/{f}")),
        ])
    };
    let extra = serde_json::json!([curl_args(1, 1, "echo"), curl_args(0, 0, "cloudecho")]);
    let out = Command::new("node")
        .arg(browser.join("ui-check.js"))
        .current_dir(up.dir.path())
        .env("UI_URL", up.url(2, ""))
        .env("NODES", "baixa,belem,madrid")
        .env("AREAS", "baixa,belem")
        .env("CALL_ARGS", call.to_string())
        .env("EXTRA_CALLS", extra.to_string())
        .env("CALL_ID", &id)
        .env("CALL_NODE", "baixa")
        .env("CURL_CWD", up.dir.path())
        .env("SHOT", &laptop)
        .env("SHOT_PHONE", &phone)
        .env("CHROMIUM", &chromium)
        .output()
        .expect("node runs");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success() && stdout.contains("ui-check: ok"),
        "ui-check failed:\n{stdout}\n{stderr}"
    );
    assert!(
        std::fs::metadata(&laptop).unwrap().len() > 10_000,
        "a screenshot was saved"
    );
    eprintln!(
        "{}screenshots: {} {}",
        stdout,
        laptop.display(),
        phone.display()
    );
}
