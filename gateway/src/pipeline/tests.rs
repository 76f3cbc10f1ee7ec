//! Whole calls through the pipeline, table by table: a request in, the answer's headers out, and
//! what an observer registered with the node saw. A fake backend and a fake observer; no socket.

use parking_lot::Mutex;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use bytes::Bytes;
use geofaas_config::Topology;
use geofaas_functions::{FunctionBackend, Health, Invocation, InvokeError, InvokeOutput};
use http_body_util::BodyExt as _;

use super::{CallCtx, Observer};
use crate::call::Ran;
use crate::node::{Live, NodeOptions, NodeState};
use crate::routes::Api;

/// A Melbourne edge (`cbd`) and a Sydney cloud.
const TOPOLOGY: &str = r#"
[[node]]
id = "cbd"
role = "edge"
location = { lat = -37.8136, lon = 144.9631 }
area.wkt = "ENVELOPE (144.90, 145.02, -37.78, -37.84)"
public_url = "https://127.0.0.1:1"
listen = "127.0.0.1:1"

[[node]]
id = "sydney"
role = "cloud"
location = { lat = -33.87, lon = 151.21 }
area = "world"
public_url = "https://127.0.0.1:2"
listen = "127.0.0.1:2"
"#;

/// Serves `echo` (warm, version `v1`), `cold` (a new instance each time) and `boom` (fails).
#[derive(Debug)]
struct Fake;

#[async_trait]
impl FunctionBackend for Fake {
    fn kind(&self) -> &'static str {
        "fake"
    }
    async fn invoke(&self, call: Invocation) -> Result<InvokeOutput, InvokeError> {
        let mut out = InvokeOutput::ok(Bytes::from_static(b"hello"), None);
        out.exec = Duration::from_micros(1_500);
        match call.function.as_str() {
            "echo" => out.version = Some("v1".into()),
            "cold" => {
                out.cold_start = true;
                out.cold = Duration::from_millis(20);
            }
            _ => {
                return Err(InvokeError::FunctionFailed {
                    message: "boom".into(),
                    body: None,
                })
            }
        }
        Ok(out)
    }
    async fn list(&self) -> Result<Vec<String>, InvokeError> {
        Ok(vec!["echo".into(), "cold".into(), "boom".into()])
    }
    async fn health(&self) -> Health {
        Health::Healthy
    }
}

/// What the fake observer keeps of a finished call.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    function: String,
    status: u16,
    handover: Option<String>,
    placement: Option<(Ran, &'static str)>,
    outcome: Option<&'static str>,
    node: Option<String>,
    cold_start: Option<bool>,
    located: bool,
}

#[derive(Default)]
struct Recorder(Mutex<Vec<Seen>>);

impl Observer for Recorder {
    fn finished(&self, call: &CallCtx, status: StatusCode) {
        let done = call.done.as_ref();
        self.0.lock().push(Seen {
            function: call.function.clone(),
            status: status.as_u16(),
            handover: call.handover.clone(),
            placement: done.and_then(|d| d.placement),
            outcome: done.map(|d| d.outcome),
            node: done.and_then(|d| d.node("cbd")).map(str::to_owned),
            cold_start: done.and_then(|d| d.cold_start()),
            located: call.location.is_some(),
        });
    }
}

fn api() -> (Api, Arc<Recorder>) {
    let topology =
        Topology::parse(TOPOLOGY, "melbourne.toml", std::path::Path::new(".")).expect("topology");
    let recorder = Arc::new(Recorder::default());
    let opts = NodeOptions {
        observers: vec![recorder.clone()],
        ..NodeOptions::default()
    };
    let backends: Vec<Arc<dyn FunctionBackend>> = vec![Arc::new(Fake)];
    let state = NodeState::new(Arc::new(topology), "cbd", backends, opts).expect("state");
    (Api::new(Live::new(Arc::new(state))), recorder)
}

const CLIENT: &str = "-37.8136,144.9631";
const FAR_AWAY: &str = "-33.87,151.21";

async fn call(api: &Api, method: Method, path: &str, location: &str) -> (StatusCode, Headers) {
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header("x-client-location", location)
        .header("x-request-id", "req-1")
        .body(Body::empty())
        .unwrap();
    let client: SocketAddr = "127.0.0.1:40000".parse().unwrap();
    let resp = api.serve(req, client).await;
    let status = resp.status();
    let headers = Headers(resp.headers().clone());
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, headers.with_body(body))
}

struct Headers(axum::http::HeaderMap);

impl Headers {
    fn with_body(mut self, body: Bytes) -> Self {
        self.0.insert(
            "x-test-body",
            String::from_utf8_lossy(&body).parse().unwrap(),
        );
        self
    }
    fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).and_then(|v| v.to_str().ok())
    }
    fn count(&self, name: &str) -> usize {
        self.0.get_all(name).iter().count()
    }
}

/// method, path, client location -> status, `X-Served-By`, `X-Placement`, `X-Cold-Start`, body.
type Row = (
    Method,
    &'static str,
    &'static str,
    u16,
    Option<&'static str>,
    Option<&'static str>,
    Option<&'static str>,
    &'static str,
);

#[tokio::test]
async fn each_call_is_rendered_once_from_its_context_and_observed_once() {
    let (api, seen) = api();
    // method, path, location -> status, X-Served-By, X-Placement, X-Cold-Start, body
    let table: &[Row] = &[
        (
            Method::GET,
            "/fn/echo",
            CLIENT,
            200,
            Some("cbd"),
            Some("local-warm"),
            Some("false"),
            "hello",
        ),
        (
            Method::POST,
            "/fn/cold/a/b?x=1",
            CLIENT,
            200,
            Some("cbd"),
            Some("local-new"),
            Some("true"),
            "hello",
        ),
        (
            Method::HEAD,
            "/fn/echo",
            CLIENT,
            200,
            Some("cbd"),
            Some("local-warm"),
            Some("false"),
            "",
        ),
        (
            Method::GET,
            "/fn/echo",
            FAR_AWAY,
            307,
            Some("cbd"),
            None,
            None,
            "",
        ),
        (Method::GET, "/fn/boom", CLIENT, 502, None, None, None, ""),
        (Method::TRACE, "/fn/echo", CLIENT, 405, None, None, None, ""),
    ];
    for (method, path, location, status, by, placement, cold, body) in table {
        let (got, h) = call(&api, method.clone(), path, location).await;
        let what = format!("{method} {path} from {location}");
        assert_eq!(got.as_u16(), *status, "{what}");
        assert_eq!(h.get("x-served-by"), *by, "{what}");
        assert_eq!(h.get("x-placement"), *placement, "{what}");
        assert_eq!(h.get("x-cold-start"), *cold, "{what}");
        assert_eq!(h.get("x-request-id"), Some("req-1"), "{what}");
        if !body.is_empty() || *method == Method::HEAD {
            assert_eq!(h.get("x-test-body"), Some(*body), "{what}");
        }
        // Each platform header once, whatever the path through the pipeline.
        for name in [
            "x-served-by",
            "x-placement",
            "server-timing",
            "x-request-id",
        ] {
            assert!(h.count(name) <= 1, "{what}: {name} twice");
        }
        if *status == 200 {
            let timing = h.get("server-timing").expect("server-timing");
            for part in ["route;dur=", "queue;dur=", "cold;dur=", "exec;dur=1.500"] {
                assert!(timing.contains(part), "{what}: {timing}");
            }
        }
    }
    assert_eq!(
        call(&api, Method::GET, "/fn/echo", CLIENT)
            .await
            .1
            .get("x-function-version"),
        Some("v1")
    );
    let seen = seen.0.lock().clone();
    assert_eq!(
        seen.len(),
        table.len() + 1,
        "one observation per call: {seen:#?}"
    );
    let warm = &seen[0];
    assert_eq!(warm.placement.map(|p| p.0), Some(Ran::LocalWarm));
    assert_eq!(
        (warm.outcome, warm.node.as_deref()),
        (Some("served"), Some("cbd"))
    );
    assert_eq!(warm.cold_start, Some(false));
    assert!(warm.located);
    assert_eq!(seen[1].cold_start, Some(true));
    assert_eq!(seen[1].placement.map(|p| p.0), Some(Ran::LocalNew));
    let handover = &seen[3];
    assert_eq!(handover.handover.as_deref(), Some("sydney"));
    assert_eq!(handover.outcome, None, "a handover never runs");
    let failed = &seen[4];
    assert_eq!(
        (failed.status, failed.outcome, failed.placement),
        (502, Some("error"), None)
    );
    let refused = &seen[5];
    assert_eq!(
        (refused.function.as_str(), refused.status, refused.outcome),
        ("echo", 405, None)
    );
}

#[tokio::test]
async fn the_node_metrics_count_what_the_context_says() {
    let (api, _) = api();
    call(&api, Method::GET, "/fn/echo", CLIENT).await;
    call(&api, Method::GET, "/fn/nope", CLIENT).await;
    let req = Request::builder()
        .uri("/metrics")
        .body(Body::empty())
        .unwrap();
    let resp = api.serve(req, "127.0.0.1:1".parse().unwrap()).await;
    let text = resp.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8_lossy(&text);
    let line = |needle: &str| {
        text.lines()
            .any(|l| l.contains(needle) && !l.starts_with('#'))
    };
    assert!(
        line(r#"geofaas_placements_total{node="cbd",placement="local-warm""#),
        "{text}"
    );
    assert!(line(r#"function="echo""#), "{text}");
    assert!(
        !line(r#"function="nope""#),
        "an unknown name stays out of the labels: {text}"
    );
}
