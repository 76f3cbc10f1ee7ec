//! tinyFaaS adapter against the fake tinyFaaS node.

use std::time::Duration;

use geofaas_config::{BackendConfig, FunctionConfig, TinyfaasBackend};
use geofaas_functions::tinyfaas::TinyfaasAdapter;
use geofaas_functions::{build_backend, FunctionBackend, Health, InvokeError};
use geofaas_test_support::tinyfaas::{FakeFunction, FakeTinyfaas};

use crate::call;

fn config(node: &FakeTinyfaas, fail_on_empty: bool) -> TinyfaasBackend {
    let toml = format!(
        "url = \"{}\"\nmanager_url = \"{}\"\nfail_on_empty = {fail_on_empty}\n\
         breaker_failures = 2\nbreaker_cooldown_ms = 60000\n",
        node.proxy_url(),
        node.manager_url()
    );
    toml::from_str(&toml).expect("valid tinyfaas config")
}

async fn node() -> FakeTinyfaas {
    FakeTinyfaas::start([
        ("echo", FakeFunction::Echo),
        (
            "raises",
            FakeFunction::Raise("Error: division by zero".into()),
        ),
        ("crashes", FakeFunction::Crash),
        ("hangs", FakeFunction::Hang),
        ("broken", FakeFunction::Unreachable),
    ])
    .await
    .expect("fake tinyFaaS starts")
}

fn with_marker(name: &str, marker: &str) -> FunctionConfig {
    let mut f = FunctionConfig::named(name);
    f.failure_marker = Some(marker.to_owned());
    f
}

#[tokio::test]
async fn invoke_passes_body_and_headers_and_returns_the_output() {
    let node = node().await;
    let adapter = TinyfaasAdapter::new(&config(&node, false), &[]).unwrap();
    let mut c = call("echo", "primes below 100", Duration::from_secs(5));
    c.headers
        .insert("x-client-location", "52.5,13.4".parse().unwrap());
    c.headers
        .insert("connection", "keep-alive".parse().unwrap());
    let out = adapter.invoke(c).await.expect("echo succeeds");
    assert_eq!(&out.body.full().unwrap()[..], b"primes below 100");
    let calls = node.calls();
    let (name, headers, _) = calls.last().expect("the proxy saw the call");
    assert_eq!(name, "echo");
    assert_eq!(headers["x-client-location"], "52.5,13.4");
}

/// tinyFaaS's proxy takes any method on `/{name}` (the whole path is the name): the client's
/// method and query reach it (`HEAD` as `GET`), a sub-path is refused before anything is sent.
#[tokio::test]
async fn the_method_and_query_reach_tinyfaas_and_a_sub_path_is_refused_naming_it() {
    use std::sync::Arc;

    use geofaas_functions::HttpRequest;

    let node = node().await;
    {
        let adapter = TinyfaasAdapter::new(&config(&node, false), &[]).unwrap();
        for (method, sent) in [
            (http::Method::PUT, http::Method::PUT),
            (http::Method::DELETE, http::Method::DELETE),
            (http::Method::GET, http::Method::GET),
            (http::Method::HEAD, http::Method::GET),
        ] {
            let mut c = call("echo", "x", Duration::from_secs(5));
            c.http = Arc::new(HttpRequest {
                method: method.clone(),
                query: "a=1&b=two".into(),
                ..HttpRequest::default()
            });
            let out = adapter.invoke(c).await.expect("echo succeeds");
            assert_eq!(&out.body.full().unwrap()[..], b"x");
            let (got, target) = node.requests().last().cloned().unwrap();
            assert_eq!(got, sent, "{method}");
            assert_eq!(target, "/echo?a=1&b=two");
        }
        let before = node.requests().len();
        let mut c = call("echo", "x", Duration::from_secs(5));
        c.http = Arc::new(HttpRequest {
            path: "/users/7".into(),
            ..HttpRequest::default()
        });
        match adapter.invoke(c).await {
            Err(InvokeError::Refused(why)) => {
                assert!(why.contains("echo") && why.contains("/users/7"), "{why}")
            }
            other => panic!("want a refusal, got {other:?}"),
        }
        assert_eq!(node.requests().len(), before, "nothing was sent");
    }
}

#[tokio::test]
async fn a_200_with_the_functions_failure_marker_or_empty_body_is_a_function_failure() {
    let node = node().await;
    let functions = [with_marker("raises", "Error:")];
    let adapter = TinyfaasAdapter::new(&config(&node, true), &functions).unwrap();
    match adapter
        .invoke(call("raises", "", Duration::from_secs(5)))
        .await
    {
        Err(InvokeError::FunctionFailed {
            body: Some(body), ..
        }) => {
            assert_eq!(&body[..], b"Error: division by zero")
        }
        other => panic!("expected FunctionFailed with the body, got {other:?}"),
    }
    let crashed = adapter
        .invoke(call("crashes", "", Duration::from_secs(5)))
        .await;
    assert!(
        matches!(crashed, Err(InvokeError::FunctionFailed { .. })),
        "{crashed:?}"
    );

    // Without the topology's rules the same replies count as success, as tinyFaaS says.
    let lenient = TinyfaasAdapter::new(&config(&node, false), &[]).unwrap();
    let out = lenient
        .invoke(call("raises", "", Duration::from_secs(5)))
        .await
        .unwrap();
    assert_eq!(&out.body.full().unwrap()[..], b"Error: division by zero");
}

#[tokio::test]
async fn a_hanging_function_is_cut_at_the_callers_deadline() {
    let node = node().await;
    let adapter = TinyfaasAdapter::new(&config(&node, false), &[]).unwrap();
    let err = adapter
        .invoke(call("hangs", "", Duration::from_millis(300)))
        .await
        .expect_err("tinyFaaS never answers");
    assert!(matches!(err, InvokeError::Timeout(_)), "{err:?}");
    assert!(err.is_retryable());
}

#[tokio::test]
async fn unknown_function_and_unreachable_handler_are_classified() {
    let node = node().await;
    let adapter = TinyfaasAdapter::new(&config(&node, false), &[]).unwrap();
    let unknown = adapter
        .invoke(call("nope", "", Duration::from_secs(5)))
        .await;
    assert!(
        matches!(unknown, Err(InvokeError::UnknownFunction(_))),
        "{unknown:?}"
    );
    let broken = adapter
        .invoke(call("broken", "", Duration::from_secs(5)))
        .await;
    assert!(
        matches!(broken, Err(InvokeError::Unavailable(_))),
        "{broken:?}"
    );
}

#[tokio::test]
async fn list_comes_from_the_manager() {
    let node = node().await;
    let adapter = TinyfaasAdapter::new(&config(&node, false), &[]).unwrap();
    let mut names = adapter.list().await.unwrap();
    names.sort();
    assert_eq!(names, ["broken", "crashes", "echo", "hangs", "raises"]);
}

#[tokio::test]
async fn a_dead_node_is_reported_unhealthy_and_then_skipped_by_the_breaker() {
    let mut node = node().await;
    let backend = build_backend(
        &BackendConfig::Tinyfaas(config(&node, false)),
        std::path::Path::new("."),
        &[],
    )
    .unwrap();
    assert_eq!(backend.health().await, Health::Healthy);
    assert!(backend
        .invoke(call("echo", "x", Duration::from_secs(5)))
        .await
        .is_ok());
    assert_eq!(backend.list().await.unwrap().len(), 5);

    node.stop();
    for _ in 0..2 {
        let err = backend
            .invoke(call("echo", "x", Duration::from_secs(5)))
            .await
            .unwrap_err();
        assert!(
            matches!(err, InvokeError::Unavailable(_) | InvokeError::Network(_)),
            "{err:?}"
        );
    }
    let skipped = backend
        .invoke(call("echo", "x", Duration::from_secs(5)))
        .await;
    assert!(
        matches!(skipped, Err(InvokeError::CircuitOpen)),
        "{skipped:?}"
    );
    assert!(matches!(backend.health().await, Health::Unhealthy(_)));
    // The cached list still names the functions: the breaker, not the list, skips the node.
    assert_eq!(backend.list().await.unwrap().len(), 5);
}
