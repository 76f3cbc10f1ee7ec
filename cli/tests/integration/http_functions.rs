//! HTTP functions through real nodes on a Melbourne topology and the real `curl` over HTTP/1.1
//! and HTTP/2: a Lambda function-URL handler (`handler(event, context)`, nothing geofaas-specific
//! in it) answers its own status, headers and two cookies for every method and sub-path, also
//! through a `307` that keeps method and body; a fetch-style Node.js function and a Python
//! generator stream server-sent events as they are produced, here and through an offload; an
//! answer that is not HTTP (status 999, CR/LF in a header) is a `502` naming the function.

use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::answer::Answer;
use crate::cluster::Cluster;

/// Inside the cbd's area.
const CBD: &str = "X-Client-Location: -37.8136,144.9631";

/// cbd (2 km circle) and carlton (1 km circle, 3.3 km north) with the HTTP test functions, the
/// cloud in Sydney with those and `cloudticker`, which only the cloud has.
fn topology(ports: &[u16]) -> String {
    let node = |id: &str, role: &str, area: &str, lat: f64, lon: f64, port: u16, dirs: &[&str]| {
        let backends: String = dirs
            .iter()
            .map(|d| format!("[[node.backend]]\nkind = \"local\"\nfunctions_dir = \"{d}\"\n"))
            .collect();
        format!(
            "[[node]]\nid = \"{id}\"\nrole = \"{role}\"\nlocation = {{ lat = {lat}, lon = {lon} }}\n\
             {area}\npublic_url = \"https://127.0.0.1:{port}\"\nlisten = \"127.0.0.1:{port}\"\n{backends}\n"
        )
    };
    let circle = |lat: f64, lon: f64, r: f64| {
        format!("area.circle = {{ center = {{ lat = {lat}, lon = {lon} }}, radius_km = {r} }}")
    };
    [
        node(
            "cbd",
            "edge",
            &circle(-37.8136, 144.9631, 2.0),
            -37.8136,
            144.9631,
            ports[0],
            &["http-edge-functions"],
        ),
        node(
            "carlton",
            "edge",
            &circle(-37.7840, 144.9670, 1.0),
            -37.7840,
            144.9670,
            ports[1],
            &["http-edge-functions"],
        ),
        node(
            "cloud",
            "cloud",
            "area = \"world\"",
            -33.87,
            151.21,
            ports[2],
            &["http-edge-functions", "http-cloud-functions"],
        ),
    ]
    .concat()
}

/// `curl -i` with `args` (method, headers, data) at `url`.
pub(crate) fn curl(c: &Cluster, h2: bool, args: &[&str], url: &str) -> Answer {
    let out = Command::new("curl")
        .args(["-sS", "-i", if h2 { "--http2" } else { "--http1.1" }])
        .arg("--cacert")
        .arg(c.ca_file.path())
        .args(args)
        .arg(url)
        .current_dir(std::env::temp_dir())
        .output()
        .expect("curl runs");
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    // With `-L`, the last of the answers curl printed.
    while let Some((_, next)) = text
        .split_once("\r\n\r\n")
        .filter(|(_, rest)| rest.starts_with("HTTP/"))
    {
        text = next.to_owned();
    }
    let mut answer = Answer::parse(&text);
    // `Answer` keeps one value per name; the cookies are counted from the raw head.
    answer.headers.insert(
        "set-cookie-count".into(),
        text.split("\r\n\r\n")
            .next()
            .unwrap_or_default()
            .lines()
            .filter(|l| l.to_ascii_lowercase().starts_with("set-cookie:"))
            .count()
            .to_string(),
    );
    answer
}

pub(crate) fn json(a: &Answer) -> serde_json::Value {
    serde_json::from_str(&a.body).unwrap_or_else(|e| panic!("{e}: {a:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lambda_function_url_handler_answers_every_method_and_sub_path_over_h1_and_h2() {
    let c = Cluster::start_with(topology).await;
    for h2 in [false, true] {
        let put = curl(
            &c,
            h2,
            &[
                "-X",
                "PUT",
                "-H",
                CBD,
                "-H",
                "Cookie: a=1; b=2",
                "-d",
                "{\"name\":\"ada\"}",
            ],
            &format!("{}/fn/users/users/7?x=1&y=two%20words", c.url("cbd")),
        );
        assert_eq!(put.status, 201, "h2={h2}: {put:?}");
        assert_eq!(put.header("content-type"), "application/json");
        assert_eq!(put.header("location"), "/users/7");
        assert_eq!(put.header("cache-control"), "no-store");
        assert_eq!(put.header("x-handler"), "users");
        assert_eq!(put.header("set-cookie-count"), "2", "{put:?}");
        assert_eq!(put.header("x-served-by"), "cbd");
        let saw = &json(&put)["saw"];
        assert_eq!(saw["method"], "PUT");
        assert_eq!(saw["rawPath"], "/users/7");
        assert_eq!(saw["rawQueryString"], "x=1&y=two%20words");
        assert_eq!(saw["query"]["y"], "two words");
        assert_eq!(saw["body"], "{\"name\":\"ada\"}");
        assert_eq!(saw["node"], "cbd");
        assert_eq!(saw["cookies"], serde_json::json!(["a=1", "b=2"]));

        let get = curl(
            &c,
            h2,
            &["-H", CBD],
            &format!("{}/fn/users/users/7", c.url("cbd")),
        );
        assert_eq!(get.status, 200, "h2={h2}: {get:?}");
        let missing = curl(
            &c,
            h2,
            &["-H", CBD],
            &format!("{}/fn/users/users/8", c.url("cbd")),
        );
        assert_eq!(missing.status, 404, "h2={h2}: {missing:?}");
        assert!(missing.body.contains("user 8 not found"), "{missing:?}");
        let nowhere = curl(&c, h2, &["-H", CBD], &format!("{}/fn/users", c.url("cbd")));
        assert_eq!(nowhere.status, 404, "h2={h2}: {nowhere:?}");
        assert_eq!(json(&nowhere)["saw"]["rawPath"], "/");
        let delete = curl(
            &c,
            h2,
            &["-X", "DELETE", "-H", CBD],
            &format!("{}/fn/users/users/7", c.url("cbd")),
        );
        assert_eq!(delete.status, 204, "h2={h2}: {delete:?}");
        for method in ["OPTIONS", "PATCH", "POST"] {
            let a = curl(
                &c,
                h2,
                &["-X", method, "-H", CBD, "-d", "x"],
                &format!("{}/fn/users/users/9", c.url("cbd")),
            );
            assert_eq!(a.status, 404, "h2={h2} {method}: {a:?}");
            assert_eq!(json(&a)["saw"]["method"], method);
        }
        let head = curl(
            &c,
            h2,
            &["-I", "-H", CBD],
            &format!("{}/fn/users/users/9", c.url("cbd")),
        );
        assert_eq!(head.status, 404, "h2={h2}: {head:?}");
        assert_eq!(head.body, "", "h2={h2}: a HEAD answer has no body");
    }
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_307_keeps_the_method_body_sub_path_and_query() {
    let c = Cluster::start_with(topology).await;
    for h2 in [false, true] {
        let url = format!("{}/fn/users/users/42?k=v", c.url("carlton"));
        let told = curl(&c, h2, &["-X", "PUT", "-H", CBD, "-d", "moved"], &url);
        assert_eq!(told.status, 307, "h2={h2}: {told:?}");
        assert_eq!(
            told.header("location"),
            format!("{}/fn/users/users/42?k=v", c.url("cbd"))
        );
        let followed = curl(&c, h2, &["-L", "-X", "PUT", "-H", CBD, "-d", "moved"], &url);
        assert_eq!(followed.status, 201, "h2={h2}: {followed:?}");
        let saw = &json(&followed)["saw"];
        assert_eq!(saw["method"], "PUT");
        assert_eq!(saw["rawPath"], "/users/42");
        assert_eq!(saw["query"]["k"], "v");
        assert_eq!(saw["body"], "moved");
        assert_eq!(saw["node"], "cbd");
    }
    c.stop().await;
}

/// The times after the start of `curl -N` at which each `data:` line of `url` arrived.
fn arrivals(c: &Cluster, h2: bool, url: &str) -> (Vec<Duration>, Vec<String>) {
    let started = Instant::now();
    let mut child = Command::new("curl")
        .args(["-sS", "-N", if h2 { "--http2" } else { "--http1.1" }])
        .arg("--cacert")
        .arg(c.ca_file.path())
        .args(["-H", CBD])
        .arg(url)
        .current_dir(std::env::temp_dir())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("curl runs");
    let (mut times, mut lines) = (Vec::new(), Vec::new());
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        if line.starts_with("data:") {
            times.push(started.elapsed());
            lines.push(line);
        }
    }
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "curl {url}: {err} after {lines:?}");
    (times, lines)
}

/// Five events produced 300 ms apart reached the client as they were produced: the last came
/// at least four pauses after the first (a buffered answer delivers them all at once).
fn streamed(what: &str, times: &[Duration], lines: &[String]) {
    assert_eq!(lines.len(), 5, "{what}: {lines:?}");
    for (n, line) in lines.iter().enumerate() {
        assert!(
            line.starts_with(&format!("data: {{\"n\":{n}")),
            "{what}: {line}"
        );
    }
    let spread = times[4] - times[0];
    assert!(
        spread >= Duration::from_millis(1000),
        "{what}: events arrived {spread:?} apart: {times:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_bodies_reach_the_client_as_produced_here_and_through_an_offload() {
    let c = Cluster::start_with(topology).await;
    for h2 in [false, true] {
        for (function, served) in [
            ("pyticks", "cbd"),
            ("ticker", "cbd"),
            ("cloudticker", "cloud"),
        ] {
            let what = format!("{function} h2={h2}");
            let url = format!("{}/fn/{function}", c.url("cbd"));
            let (times, lines) = arrivals(&c, h2, &url);
            streamed(&what, &times, &lines);
            let head = curl(&c, h2, &["-H", CBD], &url);
            assert_eq!(head.header("x-served-by"), served, "{what}: {head:?}");
            if function != "pyticks" {
                assert_eq!(head.header("content-type"), "text/event-stream", "{what}");
            } else {
                assert!(head.body.contains("\"node\":\"cbd\""), "{what}: {head:?}");
            }
        }
        let patch = curl(
            &c,
            h2,
            &["-X", "PATCH", "-H", CBD, "-d", "{\"a\":1}"],
            &format!("{}/fn/ticker/items/3", c.url("cbd")),
        );
        assert_eq!(patch.status, 201, "h2={h2}: {patch:?}");
        assert_eq!(patch.header("content-type"), "application/json");
        let body = json(&patch);
        assert_eq!(body["patched"]["a"], 1);
        assert_eq!(body["path"], "/fn/ticker/items/3");
        assert_eq!(body["node"], "cbd");
    }
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_that_is_not_http_is_a_502_naming_the_function_and_nothing_of_it() {
    let c = Cluster::start_with(topology).await;
    for h2 in [false, true] {
        for path in ["/status", "/header"] {
            let a = curl(
                &c,
                h2,
                &["-H", CBD],
                &format!("{}/fn/broken{path}", c.url("cbd")),
            );
            assert_eq!(a.status, 502, "h2={h2} {path}: {a:?}");
            assert_eq!(a.header("content-type"), "application/json");
            assert!(a.body.contains("broken"), "{a:?}");
            assert!(a.body.contains("bad_function_answer"), "{a:?}");
            assert!(!a.headers.contains_key("x-evil"), "{a:?}");
            assert_eq!(a.header("set-cookie-count"), "0", "{a:?}");
            assert!(!a.body.contains("should never reach"), "{a:?}");
        }
        let a = curl(
            &c,
            h2,
            &["-H", CBD],
            &format!("{}/fn/broken/status", c.url("cbd")),
        );
        assert!(a.body.contains("999"), "{a:?}");
    }
    c.stop().await;
}
