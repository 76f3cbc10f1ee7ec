//! Deploys to Lambda against moto (a real peer): CreateFunction on the first deploy,
//! UpdateFunctionCode and UpdateFunctionConfiguration on the next, the function listed after.
//! moto's Docker-less Lambda runs no code, so what its invoke answers is asserted as it is.

use std::time::Duration;

use aws_credential_types::Credentials;
use geofaas_config::LambdaBackend;
use geofaas_functions::lambda::LambdaAdapter;
use geofaas_functions::local::Runtime;
use geofaas_functions::{BreakerSettings, FunctionBackend, Guarded, InvokeError};
use geofaas_test_support::peers::{require, Moto};
use serde_json::Value;

use crate::call;
use crate::deploy_support::{deploy, folder, GREET_PY};

fn adapter(moto: &Moto, role: &str, secret: (&str, &str)) -> Guarded<LambdaAdapter> {
    let toml = format!(
        "region = \"us-east-1\"\nendpoint = \"{}\"\nfunction_prefix = \"geofaas-\"\n\
         deploy = true\nrole = \"{role}\"\ntimeout_ms = 4500\n",
        moto.url()
    );
    let cfg: LambdaBackend = toml::from_str(&toml).expect("valid lambda config");
    let creds = Credentials::new(secret.0, secret.1, None, None, "test");
    let adapter = LambdaAdapter::with_credentials(&cfg, creds).expect("adapter");
    Guarded::new(adapter, BreakerSettings::default(), Duration::from_secs(60))
}

fn field<'a>(function: &'a Value, path: &[&str]) -> &'a Value {
    path.iter().fold(function, |v, k| &v[*k])
}

#[tokio::test]
async fn the_first_deploy_creates_the_function_and_the_next_updates_it() {
    let Some(moto) = require(Moto::start().await) else {
        return;
    };
    let role = moto.lambda_role().await.expect("moto setup");
    let backend = adapter(&moto, &role, ("AKIAIOSFODNN7EXAMPLE", "any"));
    assert!(backend.deploys());
    assert!(!backend.serves("greet").await);

    let dir = folder(&[("fn.py", GREET_PY)]);
    let v1 = deploy(
        "greet",
        "0123456789ab",
        Runtime::Python3,
        dir.path(),
        &[("GREETING", "hello")],
    );
    backend.deploy(&v1).await.expect("CreateFunction");
    let created = moto
        .lambda_function("geofaas-greet")
        .await
        .unwrap()
        .expect("created");
    let config = &created["Configuration"];
    assert_eq!(config["Runtime"], "python3.12");
    assert_eq!(config["Handler"], "geofaas_handler.handler");
    assert_eq!(config["Role"], role.as_str());
    assert_eq!(config["Timeout"], 5, "the backend's 4500 ms, rounded up");
    assert_eq!(config["Description"], "geofaas greet version 0123456789ab");
    assert_eq!(
        field(config, &["Environment", "Variables", "GREETING"]),
        "hello"
    );
    assert!(
        backend.serves("greet").await,
        "the deploy dropped the cached list"
    );

    std::fs::write(
        dir.path().join("fn.py"),
        "def fn(input, headers):\n    return 'v2'\n",
    )
    .unwrap();
    let v2 = deploy(
        "greet",
        "ba9876543210",
        Runtime::Python3,
        dir.path(),
        &[("GREETING", "hi")],
    );
    backend
        .deploy(&v2)
        .await
        .expect("UpdateFunctionCode + UpdateFunctionConfiguration");
    let updated = moto
        .lambda_function("geofaas-greet")
        .await
        .unwrap()
        .unwrap();
    let new = &updated["Configuration"];
    assert_ne!(
        new["CodeSha256"], config["CodeSha256"],
        "the code was replaced"
    );
    assert_eq!(new["Description"], "geofaas greet version ba9876543210");
    assert_eq!(field(new, &["Environment", "Variables", "GREETING"]), "hi");
    assert_eq!(
        backend.list().await.unwrap(),
        ["greet"],
        "one function, replaced"
    );

    // moto without Docker runs no code: its invoke echoes the payload, so the wrapper's
    // answer is not seen here (the wrappers are run by the adapter's unit tests). A JSON
    // object, because moto 5.2 fails with a 500 on a JSON-string payload (a text body).
    let out = backend
        .invoke(call("greet", r#"{"n":42}"#, Duration::from_secs(20)))
        .await
        .expect("moto answers the invoke");
    assert_eq!(&out.body.full().unwrap()[..], br#"{"n":42}"#);

    let sh = folder(&[("fn.sh", "#!/bin/sh\ncat\n")]);
    let err = backend
        .deploy(&deploy(
            "copy",
            "0123456789ab",
            Runtime::Binary,
            sh.path(),
            &[],
        ))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("Lambda has no runtime for binary"),
        "{err}"
    );
}

#[tokio::test]
async fn a_wrong_secret_is_an_auth_error_naming_the_operation_and_function() {
    let Some(moto) = require(Moto::start().await) else {
        return;
    };
    let creds = moto.lambda_with_auth("echo").await.expect("moto setup");
    let role = "arn:aws:iam::123456789012:role/geofaas-lambda";
    let backend = adapter(&moto, role, (&creds.access_key_id, "not-the-secret"));
    let dir = folder(&[("fn.py", GREET_PY)]);
    let err = backend
        .deploy(&deploy(
            "greet",
            "0123456789ab",
            Runtime::Python3,
            dir.path(),
            &[("TOKEN", "s3cret-value")],
        ))
        .await
        .unwrap_err();
    assert!(matches!(err, InvokeError::Auth(_)), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("CreateFunction of geofaas-greet answered 403"),
        "{text}"
    );
    assert!(!text.contains("s3cret-value"), "{text}");
}
