//! Every early answer reaches the client intact over HTTP/2 and HTTP/1.1, whatever the size of
//! the POST body the gateway did not read: checked with the real `curl` binary (what users and
//! the report used) and with an HTTP/2 Rust client, streamed bodies included.

use std::path::Path;
use std::process::Command;

use crate::cluster::Cluster;

const POTSDAM: &str = "52.40,13.06";
const SIZES: [usize; 3] = [1, 16 * 1024, 1024 * 1024];
const REPEAT: usize = 200;

/// One early answer: method, path, extra headers, and the status it must get.
struct Case {
    name: &'static str,
    method: &'static str,
    path: &'static str,
    headers: Vec<(&'static str, String)>,
    status: u16,
}

fn cases() -> Vec<Case> {
    let case = |name, method, path, headers: Vec<(&'static str, String)>, status| Case {
        name,
        method,
        path,
        headers,
        status,
    };
    vec![
        case(
            "handover",
            "POST",
            "/fn/echo",
            vec![("x-client-location", POTSDAM.to_owned())],
            307,
        ),
        case("unknown function", "POST", "/fn/nosuch", vec![], 404),
        case("no such endpoint", "POST", "/nope", vec![], 404),
        case(
            "bad location",
            "POST",
            "/fn/echo",
            vec![("x-client-location", "52.4;13.0".to_owned())],
            400,
        ),
        case("bad function name", "POST", "/fn/a%00b", vec![], 400),
        // A sub-path of a function nobody deployed is that function's 404.
        case(
            "sub-path of an unknown function",
            "POST",
            "/fn/a/b",
            vec![],
            404,
        ),
        case("no name", "POST", "/fn/", vec![], 400),
        case(
            "percent-encoded name, handed over",
            "POST",
            "/fn/%65cho",
            vec![("x-client-location", POTSDAM.to_owned())],
            307,
        ),
        case("method", "TRACE", "/fn/echo", vec![], 405),
        case(
            "headers too large",
            "POST",
            "/fn/echo",
            vec![("x-big", "b".repeat(10_000))],
            431,
        ),
    ]
}

fn body_file(dir: &Path, size: usize) -> std::path::PathBuf {
    let path = dir.join(format!("body-{size}"));
    let data: Vec<u8> = (0..size).map(|i| b'a' + (i % 26) as u8).collect();
    std::fs::write(&path, data).unwrap();
    path
}

/// Runs `curl` once with `REPEAT` transfers of the same request on one connection and returns
/// every transfer's status (`0` for a transfer that got no answer).
fn curl_statuses(c: &Cluster, http: &str, case: &Case, body: &Path, url: &str) -> Vec<u16> {
    let mut cmd = Command::new("curl");
    cmd.args(["-s", http, "--cacert"])
        .arg(c.ca_file.path())
        .args(["-X", case.method, "-w", "%{http_code}\\n", "--data-binary"])
        .arg(format!("@{}", body.display()));
    for (name, value) in &case.headers {
        cmd.arg("-H").arg(format!("{name}: {value}"));
    }
    for _ in 0..REPEAT {
        cmd.args(["-o", "/dev/null", url]);
    }
    let out = cmd.output().expect("the curl binary runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim().parse().unwrap_or(0))
        .collect()
}

fn assert_all(statuses: &[u16], want: u16, what: &str) {
    let wrong: Vec<_> = statuses.iter().filter(|s| **s != want).collect();
    assert!(
        statuses.len() == REPEAT && wrong.is_empty(),
        "{what}: {} of {REPEAT} transfers answered, {} wrong (first: {:?}), want {want}",
        statuses.len(),
        wrong.len(),
        wrong.first()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_gets_every_early_answer_over_http2_and_http1() {
    let c = Cluster::start(2 * 1024 * 1024).await;
    let small = Cluster::start(1024).await;
    let dir = tempfile::tempdir().unwrap();
    let url = |c: &Cluster, path: &str| format!("{}{path}", c.url("tu-berlin"));
    for size in SIZES {
        let body = body_file(dir.path(), size);
        for http in ["--http2", "--http1.1"] {
            for case in cases() {
                let u = url(&c, case.path);
                let (cc, body, case) = (&c, body.clone(), case);
                let statuses =
                    tokio::task::block_in_place(|| curl_statuses(cc, http, &case, &body, &u));
                assert_all(
                    &statuses,
                    case.status,
                    &format!("{http} {} {size} B", case.name),
                );
            }
            if size > 1024 {
                let case = Case {
                    name: "body too large",
                    method: "POST",
                    path: "/fn/echo",
                    headers: vec![],
                    status: 413,
                };
                let u = url(&small, case.path);
                let statuses =
                    tokio::task::block_in_place(|| curl_statuses(&small, http, &case, &body, &u));
                assert_all(&statuses, 413, &format!("{http} body too large {size} B"));
            }
        }
    }
    c.stop().await;
    small.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_follows_a_post_handover_and_the_body_arrives() {
    let c = Cluster::start(2 * 1024 * 1024).await;
    let dir = tempfile::tempdir().unwrap();
    let body = body_file(dir.path(), 16 * 1024);
    let url = format!("{}/fn/echo", c.url("tu-berlin"));
    for http in ["--http2", "--http1.1"] {
        let mut cmd = Command::new("curl");
        cmd.args(["-s", "-L", http, "--cacert"])
            .arg(c.ca_file.path())
            .args(["-H", &format!("x-client-location: {POTSDAM}")])
            .arg("--data-binary")
            .arg(format!("@{}", body.display()))
            .args(["-w", "%{http_code} %{num_redirects}\\n"]);
        for i in 0..50 {
            cmd.arg("-o")
                .arg(dir.path().join(format!("out-{i}")))
                .arg(&url);
        }
        let out = tokio::task::block_in_place(|| cmd.output().expect("curl runs"));
        let lines: Vec<_> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect();
        assert_eq!(lines.len(), 50, "{http}: {lines:?}");
        assert!(lines.iter().all(|l| l == "200 1"), "{http}: {lines:?}");
        let sent = std::fs::read(&body).unwrap();
        for i in 0..50 {
            let got = std::fs::read(dir.path().join(format!("out-{i}"))).unwrap();
            assert!(got == sent, "{http}: transfer {i} did not echo the body");
        }
    }
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_rust_client_gets_every_early_answer_with_whole_and_streamed_bodies() {
    let c = Cluster::start(2 * 1024 * 1024).await;
    let small = Cluster::start(1024).await;
    let mut all = cases();
    all.push(Case {
        name: "body too large",
        method: "POST",
        path: "/fn/echo",
        headers: vec![],
        status: 413,
    });
    // A header curl cannot even send over HTTP/2 (nghttp2 caps a header block at 64 KiB).
    all.push(Case {
        name: "70 KB header",
        method: "POST",
        path: "/fn/echo",
        headers: vec![("x-big", "b".repeat(70_000))],
        status: 431,
    });
    for case in &all {
        let cluster = if case.status == 413 { &small } else { &c };
        let url = format!("{}{}", cluster.url("tu-berlin"), case.path);
        for size in SIZES {
            if case.status == 413 && size <= 1024 {
                continue;
            }
            let body = vec![b'x'; size];
            for i in 0..REPEAT {
                let streamed = i % 2 == 1;
                let mut req = cluster
                    .client
                    .request(case.method.parse().unwrap(), &url)
                    .version(reqwest::Version::HTTP_2);
                for (name, value) in &case.headers {
                    req = req.header(*name, value);
                }
                req = if streamed {
                    // 16 KiB chunks that keep arriving after the answer is sent.
                    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
                        body.chunks(16 * 1024).map(|c| Ok(c.to_vec())).collect();
                    req.body(reqwest::Body::wrap_stream(futures::stream::iter(chunks)))
                } else {
                    req.body(body.clone())
                };
                let resp = req
                    .send()
                    .await
                    .unwrap_or_else(|e| panic!("{} {size} B #{i}: no answer: {e}", case.name));
                assert_eq!(resp.version(), reqwest::Version::HTTP_2);
                assert_eq!(
                    resp.status().as_u16(),
                    case.status,
                    "{} {size} B #{i}",
                    case.name
                );
            }
        }
    }
    // The node still serves normal calls at once.
    let resp = c
        .client
        .post(format!("{}/fn/echo", c.url("tu-berlin")))
        .body("after")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.text().await.unwrap(), "after");
    c.stop().await;
    small.stop().await;
}
