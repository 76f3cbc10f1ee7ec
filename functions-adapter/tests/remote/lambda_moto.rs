//! Lambda adapter against moto with SigV4 checking on: a correctly signed call is accepted,
//! one signed with a wrong secret is rejected as an authentication error.

use std::time::Duration;

use aws_credential_types::Credentials;
use geofaas_config::LambdaBackend;
use geofaas_functions::lambda::LambdaAdapter;
use geofaas_functions::{FunctionBackend, InvokeError};
use geofaas_test_support::peers::{require, Moto};

use crate::call;

fn adapter(moto: &Moto, key_id: &str, secret: &str) -> LambdaAdapter {
    let toml = format!("region = \"us-east-1\"\nendpoint = \"{}\"\n", moto.url());
    let cfg: LambdaBackend = toml::from_str(&toml).expect("valid lambda config");
    let creds = Credentials::new(key_id, secret, None, None, "test");
    LambdaAdapter::with_credentials(&cfg, creds).expect("adapter")
}

#[tokio::test]
async fn signed_calls_are_accepted_and_a_wrong_secret_is_an_auth_error() {
    let Some(moto) = require(Moto::start().await) else {
        return;
    };
    let creds = moto.lambda_with_auth("echo").await.expect("moto setup");

    let good = adapter(&moto, &creds.access_key_id, &creds.secret_access_key);
    let out = good
        .invoke(call("echo", r#"{"n":42}"#, Duration::from_secs(20)))
        .await
        .expect("a correctly signed call is accepted");
    assert_eq!(&out.body.full().unwrap()[..], br#"{"n":42}"#);
    // moto 5.2's SigV4 check rejects every signed GET (boto3's ListFunctions too), so the
    // list and health probes are not checked here; invocations are POSTs and are checked.
    // (moto's Docker-less Lambda answers every name, so unknown functions are checked against
    // serverless-offline instead.)

    let bad = adapter(&moto, &creds.access_key_id, "not-the-secret");
    let err = bad
        .invoke(call("echo", r#"{"n":42}"#, Duration::from_secs(20)))
        .await
        .expect_err("a wrong secret must be rejected");
    assert!(matches!(err, InvokeError::Auth(_)), "{err:?}");
    assert!(!err.is_retryable());

    let stranger = adapter(&moto, "AKIAUNKNOWNKEY000000", "whatever");
    let err = stranger
        .invoke(call("echo", "{}", Duration::from_secs(20)))
        .await
        .unwrap_err();
    assert!(matches!(err, InvokeError::Auth(_)), "{err:?}");
}
