//! OpenWhisk adapter against the fake OpenWhisk controller.

use std::time::Duration;

use geofaas_config::OpenwhiskBackend;
use geofaas_functions::openwhisk::OpenwhiskAdapter;
use geofaas_functions::{FunctionBackend, Health, InvokeError};
use geofaas_test_support::openwhisk::{FakeAction, FakeOpenwhisk};
use serde_json::{json, Value};

use crate::call;

const KEY: &str = "23bc46b1-71f6-4ed5-8c54-816aa4f8c502:123zO3xZCLrMN6v2BKK1dXYFpXlPkccOFqm12CdAsMgRU4VrNZ9lyGVCGuMDGIwP";

fn config(ow: &FakeOpenwhisk, package: Option<&str>) -> OpenwhiskBackend {
    let mut toml = format!("api_host = \"{}\"\npoll_interval_ms = 20\n", ow.api_host());
    if let Some(pkg) = package {
        toml.push_str(&format!("package = \"{pkg}\"\n"));
    }
    toml::from_str(&toml).expect("valid openwhisk config")
}

async fn controller() -> FakeOpenwhisk {
    FakeOpenwhisk::start(
        "guest",
        KEY,
        [
            ("echo", FakeAction::Echo),
            (
                "fails",
                FakeAction::AppError(json!({"error": "sieve limit must be positive"})),
            ),
            (
                "slow",
                FakeAction::Slow {
                    delay: Duration::from_millis(600),
                    result: json!({"done": true}),
                },
            ),
            ("busy", FakeAction::Throttled),
            ("overloaded", FakeAction::Unavailable),
            ("hangs", FakeAction::Hang),
            ("geo/sieve", FakeAction::Reply(json!({"primes": 25}))),
        ],
    )
    .await
    .expect("fake OpenWhisk starts")
}

fn json_of(body: &[u8]) -> Value {
    serde_json::from_slice(body).expect("JSON body")
}

#[tokio::test]
async fn blocking_invoke_returns_the_result_with_json_and_raw_bodies() {
    let ow = controller().await;
    let adapter = OpenwhiskAdapter::with_api_key(&config(&ow, None), KEY).unwrap();
    let out = adapter
        .invoke(call("echo", r#"{"n": 100}"#, Duration::from_secs(5)))
        .await
        .unwrap();
    assert_eq!(json_of(out.body.full().unwrap()), json!({"n": 100}));
    let raw = adapter
        .invoke(call("echo", "plain text", Duration::from_secs(5)))
        .await
        .unwrap();
    assert_eq!(
        json_of(raw.body.full().unwrap()),
        json!({"__ow_body": "plain text"})
    );
}

#[tokio::test]
async fn packaged_actions_are_invoked_and_listed_within_their_package() {
    let ow = controller().await;
    let adapter = OpenwhiskAdapter::with_api_key(&config(&ow, Some("geo")), KEY).unwrap();
    let out = adapter
        .invoke(call("sieve", "{}", Duration::from_secs(5)))
        .await
        .unwrap();
    assert_eq!(json_of(out.body.full().unwrap()), json!({"primes": 25}));
    assert_eq!(adapter.list().await.unwrap(), ["sieve"]);

    let top = OpenwhiskAdapter::with_api_key(&config(&ow, None), KEY).unwrap();
    let names = top.list().await.unwrap();
    assert!(
        names.contains(&"echo".to_owned()) && !names.contains(&"sieve".to_owned()),
        "{names:?}"
    );
}

#[tokio::test]
async fn a_wrong_key_is_an_auth_error_and_unhealthy() {
    let ow = controller().await;
    let wrong = "23bc46b1-71f6-4ed5-8c54-816aa4f8c502:not-the-key";
    let adapter = OpenwhiskAdapter::with_api_key(&config(&ow, None), wrong).unwrap();
    let err = adapter
        .invoke(call("echo", "{}", Duration::from_secs(5)))
        .await
        .unwrap_err();
    assert!(matches!(err, InvokeError::Auth(_)), "{err:?}");
    assert!(!err.is_retryable());
    assert!(matches!(adapter.health().await, Health::Unhealthy(_)));
    assert_eq!(ow.invocations(), 0, "nothing ran with a bad key");

    let good = OpenwhiskAdapter::with_api_key(&config(&ow, None), KEY).unwrap();
    assert_eq!(good.health().await, Health::Healthy);
}

#[tokio::test]
async fn an_action_error_reaches_the_caller_as_a_function_failure_with_its_body() {
    let ow = controller().await;
    let adapter = OpenwhiskAdapter::with_api_key(&config(&ow, None), KEY).unwrap();
    match adapter
        .invoke(call("fails", "{}", Duration::from_secs(5)))
        .await
    {
        Err(InvokeError::FunctionFailed {
            body: Some(body), ..
        }) => {
            assert_eq!(
                json_of(&body),
                json!({"error": "sieve limit must be positive"})
            )
        }
        other => panic!("expected FunctionFailed, got {other:?}"),
    }
}

#[tokio::test]
async fn a_202_is_polled_until_the_activation_finishes() {
    let ow = controller().await;
    let adapter = OpenwhiskAdapter::with_api_key(&config(&ow, None), KEY).unwrap();
    // The controller waits at most 0.1 s; the action takes 0.6 s, so it answers 202 and the
    // adapter polls the activation until it is done.
    ow.set_max_blocking_wait(Duration::from_millis(100));
    let out = adapter
        .invoke(call("slow", "{}", Duration::from_secs(5)))
        .await
        .expect("polled result");
    assert_eq!(json_of(out.body.full().unwrap()), json!({"done": true}));
}

#[tokio::test]
async fn polling_stops_at_the_deadline() {
    let ow = FakeOpenwhisk::start(
        "guest",
        KEY,
        [(
            "forever",
            FakeAction::Slow {
                delay: Duration::from_secs(3600),
                result: json!({}),
            },
        )],
    )
    .await
    .unwrap();
    let adapter = OpenwhiskAdapter::with_api_key(&config(&ow, None), KEY).unwrap();
    let err = adapter
        .invoke(call("forever", "{}", Duration::from_millis(400)))
        .await
        .unwrap_err();
    assert!(matches!(err, InvokeError::Timeout(_)), "{err:?}");
}

#[tokio::test]
async fn throttling_and_overload_are_retryable_and_a_hang_is_cut() {
    let ow = controller().await;
    let adapter = OpenwhiskAdapter::with_api_key(&config(&ow, None), KEY).unwrap();
    for name in ["busy", "overloaded"] {
        let err = adapter
            .invoke(call(name, "{}", Duration::from_secs(5)))
            .await
            .unwrap_err();
        assert!(
            matches!(err, InvokeError::Overloaded { .. }),
            "{name}: {err:?}"
        );
        assert!(err.is_retryable());
    }
    let hang = adapter
        .invoke(call("hangs", "{}", Duration::from_millis(300)))
        .await;
    assert!(matches!(hang, Err(InvokeError::Timeout(_))), "{hang:?}");
    let unknown = adapter
        .invoke(call("nope", "{}", Duration::from_secs(5)))
        .await;
    assert!(
        matches!(unknown, Err(InvokeError::UnknownFunction(_))),
        "{unknown:?}"
    );
}

/// `event = "http"`: the action is called as a raw-HTTP web action and answers as one, also
/// when its answer is polled after a `202`; a `[[function]]`'s `event = "raw"` overrides it.
#[tokio::test]
async fn web_actions_get_the_whole_request_and_answer_status_headers_and_body() {
    use std::sync::Arc;

    use geofaas_config::{EventStyle, FunctionConfig};
    use geofaas_functions::HttpRequest;

    let ow = FakeOpenwhisk::start(
        "guest",
        KEY,
        [
            ("params", FakeAction::Echo),
            ("raw", FakeAction::Echo),
            (
                "created",
                FakeAction::Reply(json!({
                    "statusCode": 201,
                    "headers": {"Set-Cookie": ["a=1; Path=/", "b=2"], "X-Action": "created"},
                    "body": {"id": 7},
                })),
            ),
            (
                "late",
                FakeAction::Slow {
                    delay: Duration::from_millis(600),
                    result: json!({"statusCode": 404, "body": "no such user"}),
                },
            ),
            ("teapot", FakeAction::Reply(json!({"statusCode": 999}))),
        ],
    )
    .await
    .expect("fake OpenWhisk starts");
    let mut cfg = config(&ow, None);
    cfg.event = EventStyle::Http;
    let mut raw = FunctionConfig::named("raw");
    raw.event = Some(EventStyle::Raw);
    let adapter = OpenwhiskAdapter::with_api_key(&cfg, KEY)
        .unwrap()
        .with_functions(&[raw]);
    let http_call = |function: &str| {
        let mut c = call(function, "{\"name\":\"ada\"}", Duration::from_secs(5));
        c.http = Arc::new(HttpRequest {
            method: http::Method::PATCH,
            path: "/users/7".into(),
            query: "a=1&b=2".into(),
            url: "https://cbd.example:8443/fn/params/users/7?a=1&b=2".into(),
            source_ip: None,
        });
        c.headers
            .insert("content-type", "application/json".parse().unwrap());
        c.headers.insert("x-tag", "t".parse().unwrap());
        c
    };

    let out = adapter.invoke(http_call("params")).await.unwrap();
    assert_eq!(out.status, 200);
    let p = json_of(out.body.full().unwrap());
    assert_eq!(p["__ow_method"], "patch");
    assert_eq!(p["__ow_path"], "/users/7");
    assert_eq!(p["__ow_query"], "a=1&b=2");
    assert_eq!(p["__ow_body"], "{\"name\":\"ada\"}");
    assert_eq!(p["__ow_headers"]["x-tag"], "t");
    assert!(
        p.get("name").is_none(),
        "raw HTTP: the body is not merged: {p}"
    );

    let out = adapter.invoke(http_call("raw")).await.unwrap();
    assert_eq!(json_of(out.body.full().unwrap()), json!({"name": "ada"}));

    let out = adapter.invoke(http_call("created")).await.unwrap();
    assert_eq!(out.status, 201);
    let cookies: Vec<_> = out.headers.get_all("set-cookie").iter().collect();
    assert_eq!(cookies, ["a=1; Path=/", "b=2"]);
    assert_eq!(out.headers["x-action"], "created");
    assert_eq!(out.headers["content-type"], "application/json");
    assert_eq!(json_of(out.body.full().unwrap()), json!({"id": 7}));

    ow.set_max_blocking_wait(Duration::from_millis(100));
    let out = adapter.invoke(http_call("late")).await.unwrap();
    assert_eq!(out.status, 404);
    assert_eq!(out.body.full().unwrap(), "no such user");

    match adapter.invoke(http_call("teapot")).await {
        Err(InvokeError::BadAnswer(m)) => assert!(m.contains("999"), "{m}"),
        other => panic!("want a bad answer, got {other:?}"),
    }
}
