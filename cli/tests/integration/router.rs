//! The router's branches with `oneshot` over an in-memory backend: every early answer and
//! the failover and error answers of a node without a cloud link, on a Melbourne topology.

use std::path::Path;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, Response, StatusCode};
use geofaas_config::Topology;
use geofaas_functions::{FunctionBackend, InvokeError, InvokeOutput};
use geofaas_gateway::{routes, NodeOptions, NodeState};
use geofaas_test_support::memory::MemoryBackend;
use http_body_util::BodyExt;
use tower::ServiceExt;

/// Two edges in Melbourne, the cloud in Sydney.
pub const MELBOURNE: &str = r#"
zone = "mel.test."
[gateway]
max_body_bytes = 1024
max_header_bytes = 4096
max_header_line_bytes = 1024

[[node]]
id = "cbd"
role = "edge"
location = { lat = -37.8136, lon = 144.9631 }
area.circle = { center = { lat = -37.8136, lon = 144.9631 }, radius_km = 3 }
public_url = "https://cbd.mel.test:8443"
listen = "127.0.0.1:0"

[[node]]
id = "docklands"
role = "edge"
location = { lat = -37.8000, lon = 144.9000 }
area.circle = { center = { lat = -37.8000, lon = 144.9000 }, radius_km = 2 }
public_url = "https://docklands.mel.test:8443"
listen = "127.0.0.1:0"

[[node]]
id = "cloud"
role = "cloud"
location = { lat = -33.8688, lon = 151.2093 }
public_url = "https://cloud.mel.test:8443"
listen = "127.0.0.1:0"

[[function]]
name = "echo"
"#;

pub const IN_CBD: &str = "-37.8136,144.9631";
pub const IN_DOCKLANDS: &str = "-37.8000,144.9000";
pub const IN_PERTH: &str = "-31.95,115.86";

fn node(id: &str, backends: Vec<Arc<dyn FunctionBackend>>) -> axum::Router {
    let topology = Arc::new(Topology::parse(MELBOURNE, "melbourne.toml", Path::new(".")).unwrap());
    let state = NodeState::new(topology, id, backends, NodeOptions::default()).unwrap();
    routes::router(Arc::new(state))
}

fn echo_node(id: &str) -> (axum::Router, Arc<MemoryBackend>) {
    let backend = Arc::new(MemoryBackend::new().with_echo("echo"));
    (node(id, vec![backend.clone()]), backend)
}

async fn send(router: &axum::Router, req: Request<Body>) -> Response<Body> {
    router.clone().oneshot(req).await.unwrap()
}

fn post(path: &str, location: Option<&str>, body: impl Into<Body>) -> Request<Body> {
    let mut req = Request::post(path);
    if let Some(l) = location {
        req = req.header("x-client-location", l);
    }
    req.body(body.into()).unwrap()
}

async fn error_code(resp: Response<Body>) -> (StatusCode, String) {
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let v: serde_json::Value = serde_json::from_slice(&bytes).expect("JSON error");
    (status, v["error"]["code"].as_str().unwrap().to_owned())
}

#[tokio::test]
async fn served_in_the_area_with_the_platform_headers() {
    let (r, backend) = echo_node("cbd");
    let resp = send(&r, post("/fn/echo", Some(IN_CBD), "hi")).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-served-by"], "cbd");
    assert_eq!(resp.headers()["x-cold-start"], "false");
    assert!(resp.headers().contains_key("x-request-id"));
    assert_eq!(resp.into_body().collect().await.unwrap().to_bytes(), "hi");
    assert_eq!(backend.calls("echo"), 1);
}

#[tokio::test]
async fn other_areas_get_a_307_built_from_the_topology_only() {
    let (r, backend) = echo_node("cbd");
    for (loc, url) in [
        (IN_DOCKLANDS, "https://docklands.mel.test:8443/fn/echo?x=1"),
        (IN_PERTH, "https://cloud.mel.test:8443/fn/echo?x=1"),
    ] {
        let req = Request::post("/fn/echo?x=1")
            .header("x-client-location", loc)
            .header("host", "evil.example")
            .header("x-forwarded-host", "evil.example")
            .header("x-forwarded-proto", "http")
            .body(Body::from("x"))
            .unwrap();
        let resp = send(&r, req).await;
        assert_eq!(resp.status(), 307, "{loc}");
        assert_eq!(resp.headers()["location"], url);
    }
    assert_eq!(backend.total_calls(), 0, "a handover runs nothing");
}

#[tokio::test]
async fn early_answers_name_the_problem() {
    let (r, backend) = echo_node("cbd");
    let cases: Vec<(Request<Body>, StatusCode, &str)> = vec![
        (
            post("/fn/echo", Some("-37.8;144.9"), "x"),
            StatusCode::BAD_REQUEST,
            "bad_header",
        ),
        (
            Request::builder()
                .method("TRACE")
                .uri("/fn/echo")
                .body(Body::from("x"))
                .unwrap(),
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
        ),
        (
            post("/fn/a%00b", None, "x"),
            StatusCode::BAD_REQUEST,
            "bad_function_name",
        ),
        (
            post("/fn/..", None, "x"),
            StatusCode::BAD_REQUEST,
            "bad_function_name",
        ),
        (
            post("/fn/a%2Fb", None, "x"),
            StatusCode::BAD_REQUEST,
            "bad_function_name",
        ),
        (
            post("/fn/a/b", None, "x"),
            StatusCode::NOT_FOUND,
            "unknown_function",
        ),
        (
            post("/fn/%E2%98%83", None, "x"),
            StatusCode::BAD_REQUEST,
            "bad_function_name",
        ),
        (
            post("/fn/echo", None, vec![b'x'; 2048]),
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
        ),
        (
            Request::post("/fn/echo")
                .header("x-big", "b".repeat(2000))
                .body(Body::empty())
                .unwrap(),
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "headers_too_large",
        ),
        (
            Request::get("/healthz")
                .header("x-1", "a".repeat(900))
                .header("x-2", "a".repeat(900))
                .header("x-3", "a".repeat(900))
                .header("x-4", "a".repeat(900))
                .header("x-5", "a".repeat(900))
                .body(Body::empty())
                .unwrap(),
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "headers_too_large",
        ),
        (
            Request::get("/nope").body(Body::empty()).unwrap(),
            StatusCode::NOT_FOUND,
            "not_found",
        ),
    ];
    for (req, status, code) in cases {
        let what = format!("{} {}", req.method(), req.uri());
        let got = error_code(send(&r, req).await).await;
        assert_eq!(got, (status, code.to_owned()), "{what}");
    }
    assert_eq!(backend.total_calls(), 0);
}

#[tokio::test]
async fn a_streamed_body_over_the_limit_is_413() {
    let (r, _) = echo_node("cbd");
    let chunks = futures::stream::iter((0..8).map(|_| Ok::<_, std::io::Error>(vec![b'y'; 512])));
    let req = post("/fn/echo", None, Body::from_stream(chunks));
    assert_eq!(
        error_code(send(&r, req).await).await,
        (StatusCode::PAYLOAD_TOO_LARGE, "body_too_large".to_owned())
    );
}

#[tokio::test]
async fn without_a_cloud_link_an_unknown_function_is_404_without_echoing_odd_names() {
    let (r, _) = echo_node("cloud");
    let resp = send(&r, post("/fn/nosuch", Some(IN_PERTH), "x")).await;
    assert_eq!(
        error_code(resp).await,
        (StatusCode::NOT_FOUND, "unknown_function".to_owned())
    );
}

#[tokio::test]
async fn failover_follows_the_error_and_the_last_error_is_the_answer() {
    let failing = |e: fn() -> InvokeError| {
        Arc::new(MemoryBackend::new().with("f", move |_| Err(e()))) as Arc<dyn FunctionBackend>
    };
    let ok = Arc::new(MemoryBackend::new().with("f", |_| {
        Ok(InvokeOutput {
            body: "second".into(),
            ..Default::default()
        })
    }));
    // A failed backend hands the call to the next one.
    let r = node(
        "cloud",
        vec![
            failing(|| InvokeError::Unavailable("down".into())),
            ok.clone(),
        ],
    );
    let resp = send(&r, post("/fn/f", None, "")).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.into_body().collect().await.unwrap().to_bytes(),
        "second"
    );
    assert_eq!(ok.calls("f"), 1);
    // With nothing left, the answer follows the last error's classification.
    for (err, status, code) in [
        (
            (|| InvokeError::Timeout(std::time::Duration::from_millis(5))) as fn() -> InvokeError,
            StatusCode::GATEWAY_TIMEOUT,
            "timeout",
        ),
        (
            || InvokeError::FunctionFailed {
                message: "boom".into(),
                body: None,
            },
            StatusCode::BAD_GATEWAY,
            "function_failed",
        ),
        (
            || InvokeError::Overloaded { retry_after: None },
            StatusCode::SERVICE_UNAVAILABLE,
            "overloaded",
        ),
        // The list said "f" but the backend does not have it (stale list): not deployed.
        (
            || InvokeError::UnknownFunction("f".into()),
            StatusCode::NOT_FOUND,
            "unknown_function",
        ),
    ] {
        let r = node("cloud", vec![failing(err)]);
        let got = error_code(send(&r, post("/fn/f", None, "")).await).await;
        assert_eq!(got, (status, code.to_owned()));
    }
}

#[tokio::test]
async fn a_call_that_ran_and_failed_is_not_run_again_and_retry_after_reaches_the_client() {
    let failing = |e: fn() -> InvokeError| {
        Arc::new(MemoryBackend::new().with("f", move |_| Err(e()))) as Arc<dyn FunctionBackend>
    };
    let ok = || {
        Arc::new(MemoryBackend::new().with("f", |_| {
            Ok(InvokeOutput {
                body: "second".into(),
                ..Default::default()
            })
        }))
    };
    // The function ran (and failed, crashed, wrote too much, or the connection broke after the
    // request went out): the next backend never sees the call.
    for (err, code) in [
        (
            (|| InvokeError::FunctionFailed {
                message: "raised after a side effect".into(),
                body: None,
            }) as fn() -> InvokeError,
            "function_failed",
        ),
        (
            || InvokeError::Network("reset after the request".into()),
            "backend_failed",
        ),
        (
            || InvokeError::OutputTooLarge { limit: 1 },
            "output_too_large",
        ),
    ] {
        let second = ok();
        let r = node("cloud", vec![failing(err), second.clone()]);
        let got = error_code(send(&r, post("/fn/f", None, "")).await).await;
        assert_eq!(got, (StatusCode::BAD_GATEWAY, code.to_owned()));
        assert_eq!(second.calls("f"), 0, "{code}: run again");
    }
    // It did not run (refused, overloaded, circuit open), or timed out: the next one takes it.
    for err in [
        (|| InvokeError::Unavailable("refused".into())) as fn() -> InvokeError,
        || InvokeError::Overloaded { retry_after: None },
        || InvokeError::CircuitOpen,
        || InvokeError::Timeout(std::time::Duration::from_millis(5)),
    ] {
        let second = ok();
        let r = node("cloud", vec![failing(err), second.clone()]);
        assert_eq!(send(&r, post("/fn/f", None, "")).await.status(), 200);
        assert_eq!(second.calls("f"), 1);
    }
    // A backend's Retry-After reaches the client when nothing else can take the call.
    let r = node(
        "cloud",
        vec![failing(|| InvokeError::Overloaded {
            retry_after: Some(std::time::Duration::from_secs(7)),
        })],
    );
    let resp = send(&r, post("/fn/f", None, "")).await;
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(resp.headers()["retry-after"], "7");
}

#[tokio::test]
async fn only_the_cloud_honours_a_client_retry_header() {
    let (edge, backend) = echo_node("cbd");
    let req = Request::post("/fn/echo")
        .header("x-client-location", IN_PERTH)
        .header("x-geofaas-retry", "1")
        .body(Body::from("x"))
        .unwrap();
    let resp = send(&edge, req).await;
    assert_eq!(resp.status(), 307, "an edge hands a retried call over");
    assert_eq!(backend.total_calls(), 0);

    let (cloud, backend) = echo_node("cloud");
    let req = Request::post("/fn/echo")
        .header("x-client-location", IN_CBD)
        .header("x-geofaas-retry", "1")
        .body(Body::from("x"))
        .unwrap();
    let resp = send(&cloud, req).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-served-by"], "cloud");
    assert_eq!(backend.calls("echo"), 1);
}

#[tokio::test]
async fn metrics_are_per_node_histograms_in_seconds() {
    let (r, _) = echo_node("cbd");
    send(&r, post("/fn/echo", Some(IN_CBD), "x")).await;
    send(&r, post("/fn/echo", Some(IN_DOCKLANDS), "x")).await;
    send(&r, post("/fn/made-up-name", Some(IN_CBD), "x")).await;
    let (other, _) = echo_node("docklands");
    send(&other, post("/fn/echo", Some(IN_DOCKLANDS), "x")).await;
    let resp = send(&r, Request::get("/metrics").body(Body::empty()).unwrap()).await;
    let text = String::from_utf8(
        resp.into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec(),
    )
    .unwrap();
    assert!(
        text.contains(r#"geofaas_call_duration_seconds_count{node="cbd",function="echo",outcome="served",ran="local"} 1"#),
        "{text}"
    );
    assert!(text.contains(
        r#"geofaas_backend_call_duration_seconds_bucket{node="cbd",backend="memory",outcome="ok",le="0.0005"}"#
    ));
    assert!(text.contains(r#"geofaas_handovers_total{node="cbd",to="docklands"} 1"#));
    assert!(
        text.contains(r#"function="_unknown",outcome="error""#),
        "{text}"
    );
    assert!(
        !text.contains("made-up-name"),
        "a client's name became a label"
    );
    assert!(
        !text.contains(r#"node="docklands""#),
        "another node's series leaked into cbd's /metrics"
    );
}
