//! Lambda adapter against serverless-offline running the real Node and Python handlers of
//! `tests/peers/serverless` (function names `geofaas-peer-dev-<name>`).

use std::time::Duration;

use aws_credential_types::Credentials;
use geofaas_config::backend::LambdaInvocationType;
use geofaas_config::LambdaBackend;
use geofaas_functions::lambda::LambdaAdapter;
use geofaas_functions::{FunctionBackend, Health, InvokeError};
use geofaas_test_support::peers::{require, serverless_project, ServerlessOffline};
use serde_json::{json, Value};

use crate::call;

fn adapter(peer: &ServerlessOffline) -> LambdaAdapter {
    let toml = format!(
        "region = \"us-east-1\"\nendpoint = \"{}\"\nfunctions = [\"geofaas-peer-dev-echo\"]\n",
        peer.lambda_url()
    );
    let cfg: LambdaBackend = toml::from_str(&toml).expect("valid lambda config");
    // serverless-offline does not check signatures; any credentials do.
    let creds = Credentials::new("AKIDLOCAL", "local-secret", None, None, "test");
    LambdaAdapter::with_credentials(&cfg, creds).expect("adapter")
}

fn json_of(body: &[u8]) -> Value {
    serde_json::from_slice(body).expect("JSON body")
}

#[tokio::test]
async fn node_handlers_success_thrown_error_timeout_and_unknown_function() {
    let Some(peer) = require(ServerlessOffline::start(serverless_project()).await) else {
        return;
    };
    eprintln!("serverless-offline ready after {:?}", peer.startup());
    let lambda = adapter(&peer);
    assert_eq!(lambda.health().await, Health::Healthy);
    assert_eq!(lambda.list().await.unwrap(), ["geofaas-peer-dev-echo"]);

    let out = lambda
        .invoke(call(
            "geofaas-peer-dev-echo",
            r#"{"n":100}"#,
            Duration::from_secs(20),
        ))
        .await
        .expect("echo succeeds");
    assert_eq!(
        json_of(out.body.full().unwrap()),
        json!({"handler": "node", "event": {"n": 100}})
    );

    // A raw text body arrives as a JSON string event.
    let out = lambda
        .invoke(call(
            "geofaas-peer-dev-echo",
            "hello",
            Duration::from_secs(20),
        ))
        .await
        .unwrap();
    assert_eq!(
        json_of(out.body.full().unwrap()),
        json!({"handler": "node", "event": "hello"})
    );

    match lambda
        .invoke(call("geofaas-peer-dev-boom", "{}", Duration::from_secs(20)))
        .await
    {
        Err(err @ InvokeError::FunctionFailed { .. }) => {
            assert!(!err.is_retryable());
            let InvokeError::FunctionFailed {
                body: Some(body), ..
            } = err
            else {
                panic!("function error without a body")
            };
            assert_eq!(json_of(&body)["errorMessage"], "boom from node");
        }
        other => panic!("expected FunctionFailed, got {other:?}"),
    }

    // The function's own 1 s timeout: Lambda reports it as a function error.
    let timed_out = lambda
        .invoke(call("geofaas-peer-dev-slow", "{}", Duration::from_secs(20)))
        .await;
    assert!(
        matches!(timed_out, Err(InvokeError::FunctionFailed { .. })),
        "{timed_out:?}"
    );
    // The caller's deadline, shorter than the function's timeout, cuts the call first.
    let cut = lambda
        .invoke(call(
            "geofaas-peer-dev-slow",
            "{}",
            Duration::from_millis(300),
        ))
        .await;
    assert!(matches!(cut, Err(InvokeError::Timeout(_))), "{cut:?}");

    let unknown = lambda
        .invoke(call("geofaas-peer-dev-nope", "{}", Duration::from_secs(20)))
        .await;
    assert!(
        matches!(unknown, Err(InvokeError::UnknownFunction(_))),
        "{unknown:?}"
    );

    // Event invocation: accepted, no result.
    let queued = lambda
        .invoke_as(
            call("geofaas-peer-dev-echo", "{}", Duration::from_secs(20)),
            LambdaInvocationType::Event,
        )
        .await
        .expect("event accepted");
    assert!(queued.body.full().unwrap().is_empty());
}

#[tokio::test]
async fn python_handlers_success_and_raised_error() {
    let Some(peer) = require(ServerlessOffline::start(serverless_project()).await) else {
        return;
    };
    let lambda = adapter(&peer);
    let out = lambda
        .invoke(call(
            "geofaas-peer-dev-pyecho",
            r#"{"n":7}"#,
            Duration::from_secs(30),
        ))
        .await
        .expect("python echo succeeds");
    assert_eq!(
        json_of(out.body.full().unwrap()),
        json!({"handler": "python", "event": {"n": 7}})
    );

    // serverless-offline's Python runner loses the exception text and reports the crash as
    // the function timing out; either way it is a function error, not the backend's.
    let raised = lambda
        .invoke(call(
            "geofaas-peer-dev-pyboom",
            "{}",
            Duration::from_secs(30),
        ))
        .await;
    assert!(
        matches!(raised, Err(InvokeError::FunctionFailed { .. })),
        "{raised:?}"
    );
}
