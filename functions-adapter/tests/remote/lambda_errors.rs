//! Lambda replies the peers cannot be made to send (throttling with `Retry-After`, a handled
//! function error, a server error), from a small stub speaking the Invoke API's error format.

use std::time::Duration;

use aws_credential_types::Credentials;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::post;
use axum::Router;
use geofaas_config::LambdaBackend;
use geofaas_functions::lambda::LambdaAdapter;
use geofaas_functions::{FunctionBackend, InvokeError};
use geofaas_test_support::server::TestServer;

use crate::call;

async fn invocations(
    axum::extract::Path(name): axum::extract::Path<String>,
    headers: HeaderMap,
) -> axum::response::Response {
    // Every call must be SigV4-signed for service `lambda` in the configured region.
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !auth.starts_with("AWS4-HMAC-SHA256 Credential=AKIDSTUB/")
        || !auth.contains("/eu-central-1/lambda/aws4_request")
        || !headers.contains_key("x-amz-date")
    {
        return (
            StatusCode::FORBIDDEN,
            [("x-amzn-ErrorType", "InvalidSignatureException")],
        )
            .into_response();
    }
    match name.as_str() {
        "throttled" => (
            StatusCode::TOO_MANY_REQUESTS,
            [("x-amzn-ErrorType", "TooManyRequestsException"), ("Retry-After", "3")],
            r#"{"Reason":"ReservedFunctionConcurrentInvocationLimitExceeded","Type":"User","message":"Rate Exceeded."}"#,
        )
            .into_response(),
        "handled" => (
            StatusCode::OK,
            [("X-Amz-Function-Error", "Handled")],
            r#"{"errorMessage":"limit must be positive","errorType":"ValueError"}"#,
        )
            .into_response(),
        _ => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [("x-amzn-ErrorType", "ServiceException")],
            "{}",
        )
            .into_response(),
    }
}

#[tokio::test]
async fn throttling_honours_retry_after_and_errors_are_classified() {
    let router = Router::new().route(
        "/2015-03-31/functions/{name}/invocations",
        post(invocations),
    );
    let stub = TestServer::start(router).await.unwrap();
    let toml = format!("region = \"eu-central-1\"\nendpoint = \"{}\"\n", stub.url());
    let cfg: LambdaBackend = toml::from_str(&toml).unwrap();
    let lambda =
        LambdaAdapter::with_credentials(&cfg, Credentials::new("AKIDSTUB", "s", None, None, "t"))
            .unwrap();

    let err = lambda
        .invoke(call("throttled", "{}", Duration::from_secs(5)))
        .await
        .unwrap_err();
    match err {
        InvokeError::Overloaded { retry_after } => {
            assert_eq!(retry_after, Some(Duration::from_secs(3)))
        }
        other => panic!("expected Overloaded, got {other:?}"),
    }
    match lambda
        .invoke(call("handled", "{}", Duration::from_secs(5)))
        .await
    {
        Err(InvokeError::FunctionFailed {
            message,
            body: Some(body),
        }) => {
            assert!(message.contains("limit must be positive"), "{message}");
            assert!(body.starts_with(b"{\"errorMessage\""));
        }
        other => panic!("expected FunctionFailed, got {other:?}"),
    }
    let err = lambda
        .invoke(call("broken", "{}", Duration::from_secs(5)))
        .await
        .unwrap_err();
    assert!(
        matches!(err, InvokeError::Unavailable(_)) && err.is_retryable(),
        "{err:?}"
    );
}
