//! Callers' keys, rate limits, load shedding and node-to-node trust, with `oneshot` over an
//! in-memory backend on the Melbourne topology; after each refusal the node keeps serving.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, Response, StatusCode};
use geofaas_config::Topology;
use geofaas_functions::{FunctionBackend, InvokeOutput};
use geofaas_gateway::access::sha256_hex;
use geofaas_gateway::auth::OffloadKey;
use geofaas_gateway::routes::{self, ClientAddr};
use geofaas_gateway::{NodeOptions, NodeState};
use geofaas_test_support::memory::MemoryBackend;
use http_body_util::BodyExt;
use tower::ServiceExt;

use crate::router::{IN_CBD, IN_DOCKLANDS, MELBOURNE};

const APP: &str = "app-secret-1";
const OPS: &str = "ops-secret-1";

const WEB: &str = "web-secret-1";

/// The Melbourne topology with three keys: `app` and `web` may call `echo`, `ops` is an admin.
fn secured() -> String {
    let key = |id: &str, secret: &str, functions: &str, admin: bool| {
        format!(
            "\n[[auth.key]]\nid = \"{id}\"\nsha256 = \"{}\"\nfunctions = {functions}\nadmin = {admin}\n",
            sha256_hex(secret)
        )
    };
    format!(
        "{MELBOURNE}{}{}{}",
        key("app", APP, r#"["echo"]"#, false),
        key("web", WEB, r#"["echo"]"#, false),
        key("ops", OPS, r#"["*"]"#, true)
    )
}

fn node_with(text: &str, id: &str, backend: MemoryBackend, secret: Option<&[u8]>) -> axum::Router {
    // `[limits]` and `[[auth.key]]` must come after the top-level keys of MELBOURNE's tables.
    let topology = Arc::new(Topology::parse(text, "melbourne.toml", Path::new(".")).unwrap());
    let backends: Vec<Arc<dyn FunctionBackend>> = vec![Arc::new(backend)];
    let opts = NodeOptions {
        offload_secret: secret.map(<[u8]>::to_vec),
        ..Default::default()
    };
    let state = NodeState::new(topology, id, backends, opts).unwrap();
    routes::router(Arc::new(state))
}

fn req(method: &str, path: &str, key: Option<&str>, location: Option<&str>) -> Request<Body> {
    let mut r = Request::builder().method(method).uri(path);
    if let Some(k) = key {
        r = r.header("authorization", format!("Bearer {k}"));
    }
    if let Some(l) = location {
        r = r.header("x-client-location", l);
    }
    let mut r = r.body(Body::from("x")).unwrap();
    let addr: SocketAddr = "198.51.100.7:40000".parse().unwrap();
    r.extensions_mut().insert(ClientAddr(addr));
    r
}

async fn send(router: &axum::Router, r: Request<Body>) -> Response<Body> {
    router.clone().oneshot(r).await.unwrap()
}

async fn status(router: &axum::Router, r: Request<Body>) -> StatusCode {
    send(router, r).await.status()
}

#[tokio::test]
async fn keys_decide_who_calls_what_before_any_handover() {
    let r = node_with(
        &secured(),
        "cbd",
        MemoryBackend::new().with_echo("echo").with_echo("sieve"),
        None,
    );
    let resp = send(&r, req("POST", "/fn/echo", None, Some(IN_CBD))).await;
    assert_eq!(resp.status(), 401);
    assert_eq!(resp.headers()["www-authenticate"], "Bearer");
    assert_eq!(
        status(&r, req("POST", "/fn/echo", Some("guess"), Some(IN_CBD))).await,
        401
    );
    // No key, no handover: a 307 would tell a stranger the topology.
    let resp = send(&r, req("POST", "/fn/echo", None, Some(IN_DOCKLANDS))).await;
    assert_eq!(resp.status(), 401);
    assert!(!resp.headers().contains_key("location"));
    assert_eq!(
        status(&r, req("POST", "/fn/echo", Some(APP), Some(IN_DOCKLANDS))).await,
        307
    );
    assert_eq!(
        status(&r, req("POST", "/fn/echo", Some(APP), Some(IN_CBD))).await,
        200
    );
    assert_eq!(
        status(&r, req("POST", "/fn/sieve", Some(APP), Some(IN_CBD))).await,
        403
    );
    assert_eq!(
        status(&r, req("POST", "/fn/sieve", Some(OPS), Some(IN_CBD))).await,
        200
    );
}

#[tokio::test]
async fn operational_endpoints_need_an_admin_key_but_probes_stay_open() {
    let r = node_with(
        &secured(),
        "cbd",
        MemoryBackend::new().with_echo("echo"),
        None,
    );
    for path in ["/metrics", "/registry"] {
        assert_eq!(
            status(&r, req("GET", path, None, None)).await,
            401,
            "{path}"
        );
        assert_eq!(
            status(&r, req("GET", path, Some(APP), None)).await,
            403,
            "{path}"
        );
        assert_eq!(
            status(&r, req("GET", path, Some(OPS), None)).await,
            200,
            "{path}"
        );
    }
    for path in ["/healthz", "/readyz"] {
        assert_eq!(
            status(&r, req("GET", path, None, None)).await,
            200,
            "{path}"
        );
    }
}

#[tokio::test]
async fn an_activation_is_readable_only_by_its_key_or_an_admin() {
    let r = node_with(
        &secured(),
        "cbd",
        MemoryBackend::new().with_echo("echo"),
        None,
    );
    let mut start = req("POST", "/fn/echo", Some(APP), Some(IN_CBD));
    start
        .headers_mut()
        .insert("prefer", "respond-async".parse().unwrap());
    let resp = send(&r, start).await;
    assert_eq!(resp.status(), 202);
    let location = resp.headers()["location"].to_str().unwrap().to_owned();
    assert_eq!(status(&r, req("GET", &location, None, None)).await, 401);
    // Another key is told nothing; the owner and an admin see it.
    let resp = send(&r, req("GET", &location, Some(WEB), None)).await;
    assert_eq!(resp.status(), 404);
    let by_owner = status(&r, req("GET", &location, Some(APP), None)).await;
    assert!(by_owner == 200 || by_owner == 202, "{by_owner}");
    let by_admin = status(&r, req("GET", &location, Some(OPS), None)).await;
    assert!(by_admin == 200 || by_admin == 202, "{by_admin}");
}

#[tokio::test]
async fn rate_limits_answer_429_with_retry_after_per_client_and_per_key() {
    let limits = "[limits]\nper_client_rps = 1\nper_client_burst = 3\n";
    let text = MELBOURNE.replacen("[[node]]", &format!("{limits}\n[[node]]"), 1);
    let r = node_with(&text, "cbd", MemoryBackend::new().with_echo("echo"), None);
    for _ in 0..3 {
        assert_eq!(
            status(&r, req("POST", "/fn/echo", None, Some(IN_CBD))).await,
            200
        );
    }
    let resp = send(&r, req("POST", "/fn/echo", None, Some(IN_CBD))).await;
    assert_eq!(resp.status(), 429);
    assert!(resp.headers().contains_key("retry-after"));
    // Another client address is served at once.
    let mut other = req("POST", "/fn/echo", None, Some(IN_CBD));
    other
        .extensions_mut()
        .insert(ClientAddr("203.0.113.9:1".parse().unwrap()));
    assert_eq!(status(&r, other).await, 200);

    let limits = "[limits]\nper_key_rps = 1\nper_key_burst = 2\n";
    let text = secured().replacen("[[node]]", &format!("{limits}\n[[node]]"), 1);
    let r = node_with(&text, "cbd", MemoryBackend::new().with_echo("echo"), None);
    for _ in 0..2 {
        assert_eq!(
            status(&r, req("POST", "/fn/echo", Some(APP), Some(IN_CBD))).await,
            200
        );
    }
    assert_eq!(
        status(&r, req("POST", "/fn/echo", Some(APP), Some(IN_CBD))).await,
        429
    );
    assert_eq!(
        status(&r, req("POST", "/fn/echo", Some(OPS), Some(IN_CBD))).await,
        200
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_cloud_sheds_load_at_once_with_503() {
    let text = MELBOURNE
        .replacen("[gateway]", "[gateway]\nmax_concurrent_calls = 1", 1)
        .replacen("[[node]]", "[limits]\nmax_queued_calls = 0\n\n[[node]]", 1);
    // The function tells the test it runs, then holds the node's only slot until released.
    let (started_tx, started) = std::sync::mpsc::channel::<()>();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let released = std::sync::Mutex::new(released);
    let slow = MemoryBackend::new().with("slow", move |_| {
        let _ = started_tx.send(());
        let _ = released
            .lock()
            .unwrap()
            .recv_timeout(Duration::from_secs(30));
        Ok(InvokeOutput::default())
    });
    let r = node_with(&text, "cloud", slow, None);
    let first = tokio::spawn({
        let r = r.clone();
        async move { status(&r, req("POST", "/fn/slow", None, None)).await }
    });
    tokio::task::block_in_place(|| started.recv_timeout(Duration::from_secs(30)))
        .expect("the first call runs");
    let shed = send(&r, req("POST", "/fn/slow", None, None)).await;
    assert_eq!(
        shed.status(),
        503,
        "a second call while the slot is taken is shed"
    );
    assert_eq!(shed.headers()["retry-after"], "1");
    let body = shed.into_body().collect().await.unwrap().to_bytes();
    assert!(String::from_utf8_lossy(&body).contains("overloaded"));
    release.send(()).unwrap();
    assert_eq!(first.await.unwrap(), 200);
}

#[tokio::test]
async fn unsigned_forged_or_replayed_offloads_are_routed_normally() {
    let secret = b"shared secret";
    let r = node_with(
        MELBOURNE,
        "cloud",
        MemoryBackend::new().with_echo("echo"),
        Some(secret),
    );
    let key = OffloadKey::new(secret);
    let offload = |value: String, path: &str| {
        let mut r = req("POST", path, None, Some(IN_CBD));
        r.headers_mut()
            .insert("x-geofaas-offload", value.parse().unwrap());
        r
    };
    // A valid signature is served where it lands, even for a client in an edge area.
    let good = key.sign("cbd", "POST", "/fn/echo");
    assert_eq!(status(&r, offload(good.clone(), "/fn/echo")).await, 200);
    // The same signature replayed for another path, a forged one, a wrong secret: handed over.
    assert_eq!(status(&r, offload(good, "/fn/other")).await, 307);
    assert_eq!(
        status(&r, offload("cbd;1;00".into(), "/fn/echo")).await,
        307
    );
    let wrong = OffloadKey::new(b"not the secret").sign("cbd", "POST", "/fn/echo");
    assert_eq!(status(&r, offload(wrong, "/fn/echo")).await, 307);
    // And the node still serves its own clients.
    let perth = "-31.95,115.86";
    assert_eq!(
        status(&r, req("POST", "/fn/echo", None, Some(perth))).await,
        200
    );
}
