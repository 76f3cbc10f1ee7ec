//! Deploys to OpenWhisk (`PUT …/actions/{name}?overwrite=true`) against the fake controller,
//! which checks the action as the controller does and runs it as a runtime would, so a call
//! through the adapter reaches the deployed function through its generated wrapper.

use std::time::Duration;

use geofaas_config::OpenwhiskBackend;
use geofaas_functions::local::Runtime;
use geofaas_functions::openwhisk::OpenwhiskAdapter;
use geofaas_functions::{BreakerSettings, FunctionBackend, Guarded, InvokeError};
use geofaas_test_support::openwhisk::{FakeAction, FakeOpenwhisk};
use serde_json::json;

use crate::call;
use crate::deploy_support::{deploy, folder, GREET_PY};

const KEY: &str = "23bc46b1-71f6-4ed5-8c54-816aa4f8c502:123zO3xZCLrMN6v2BKK1dXYFpXlPkccOFqm12CdAsMgRU4VrNZ9lyGVCGuMDGIwP";

fn config(ow: &FakeOpenwhisk, extra: &str) -> OpenwhiskBackend {
    let toml = format!("api_host = \"{}\"\ndeploy = true\n{extra}\n", ow.api_host());
    toml::from_str(&toml).expect("valid openwhisk config")
}

/// The adapter behind a breaker and a function list cached for a minute, as the gateway has it.
fn guarded(cfg: &OpenwhiskBackend, key: &str) -> Guarded<OpenwhiskAdapter> {
    let adapter = OpenwhiskAdapter::with_api_key(cfg, key).unwrap();
    Guarded::new(adapter, BreakerSettings::default(), Duration::from_secs(60))
}

async fn controller() -> FakeOpenwhisk {
    FakeOpenwhisk::start("guest", KEY, [("echo", FakeAction::Echo)])
        .await
        .expect("fake controller starts")
}

async fn text(backend: &impl FunctionBackend, function: &str, body: &'static str) -> String {
    let out = backend
        .invoke(call(function, body, Duration::from_secs(20)))
        .await
        .unwrap_or_else(|e| panic!("{function}({body:?}): {e}"));
    String::from_utf8(out.body.full().unwrap().to_vec()).unwrap()
}

#[tokio::test]
async fn a_python_deploy_creates_an_action_that_runs_the_function_and_a_redeploy_replaces_it() {
    let ow = controller().await;
    let backend = guarded(&config(&ow, ""), KEY);
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
    backend.deploy(&v1).await.expect("PUT accepted");
    let action = ow.deployed("greet").expect("the controller has the action");
    assert_eq!(
        (action.kind.as_str(), action.binary, action.main.as_str()),
        ("python:default", true, "main")
    );
    assert_eq!(action.version, "0.0.1");
    assert_eq!(
        action.parameters,
        [json!({"key": "GREETING", "value": "hello", "init": true})]
    );
    assert!(action
        .annotations
        .contains(&json!({"key": "final", "value": true})));
    assert!(action
        .annotations
        .contains(&json!({"key": "geofaas-version", "value": "0123456789ab"})));
    assert!(
        backend.serves("greet").await,
        "the deploy dropped the cached list"
    );

    // The function's own output, not the action's JSON result.
    assert_eq!(text(&backend, "greet", "world").await, "hello world");
    assert_eq!(text(&backend, "greet", "").await, "hello None");
    assert_eq!(
        text(&backend, "greet", r#"{"n":1}"#).await,
        r#"hello {"n":1}"#
    );
    // The environment is the action's, not the caller's to override.
    let err = backend
        .invoke(call(
            "greet",
            r#"{"GREETING":"pwned"}"#,
            Duration::from_secs(20),
        ))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("not allowed"), "{err}");

    std::fs::write(
        dir.path().join("fn.py"),
        "def fn(input, headers):\n    raise ValueError('v2 is broken')\n",
    )
    .unwrap();
    let v2 = deploy("greet", "ba9876543210", Runtime::Python3, dir.path(), &[]);
    backend.deploy(&v2).await.expect("overwrite accepted");
    let action = ow.deployed("greet").unwrap();
    assert_eq!(action.version, "0.0.2");
    assert!(action.parameters.is_empty());
    let err = backend
        .invoke(call("greet", "world", Duration::from_secs(20)))
        .await
        .unwrap_err();
    assert!(matches!(err, InvokeError::FunctionFailed { .. }), "{err:?}");
    assert!(err.to_string().contains("v2 is broken"), "{err}");
    let mut names = backend.list().await.unwrap();
    names.sort();
    assert_eq!(names, ["echo", "greet"]);
}

#[tokio::test]
async fn node_and_packaged_deploys_run_and_refusals_name_platform_function_and_reason() {
    let ow = controller().await;
    let backend = guarded(
        &config(
            &ow,
            "package = \"tools\"\nruntimes = { nodejs = \"nodejs:20\" }",
        ),
        KEY,
    );
    let js = folder(&[
        (
            "package.json",
            r#"{"name": "hello-node", "main": "index.js"}"#,
        ),
        (
            "index.js",
            "module.exports = (req, res) => res.send(`Hello, ${req.body || 'world'}!`);\n",
        ),
    ]);
    backend
        .deploy(&deploy(
            "hello-node",
            "0123456789ab",
            Runtime::Nodejs,
            js.path(),
            &[],
        ))
        .await
        .expect("PUT accepted");
    let action = ow.deployed("tools/hello-node").expect("in the package");
    assert_eq!(action.kind, "nodejs:20");
    assert_eq!(text(&backend, "hello-node", "geo").await, "Hello, geo!");
    assert_eq!(backend.list().await.unwrap(), ["hello-node"]);

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
    assert!(matches!(err, InvokeError::Refused(_)), "{err:?}");
    assert!(
        err.to_string()
            .contains("OpenWhisk has no runtime for binary"),
        "{err}"
    );

    let dir = folder(&[("fn.py", GREET_PY)]);
    let secret = [("TOKEN", "s3cret-value")];
    let wrong = guarded(
        &config(&ow, ""),
        "23bc46b1-71f6-4ed5-8c54-816aa4f8c502:wrong",
    );
    let err = wrong
        .deploy(&deploy(
            "greet",
            "0123456789ab",
            Runtime::Python3,
            dir.path(),
            &secret,
        ))
        .await
        .unwrap_err();
    assert!(matches!(err, InvokeError::Auth(_)), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("action greet") && text.contains("The supplied authentication is invalid"),
        "{text}"
    );
    assert!(!text.contains("s3cret-value"), "{text}");

    let old = guarded(&config(&ow, "runtimes = { python3 = \"python:2.7\" }"), KEY);
    let err = old
        .deploy(&deploy(
            "greet",
            "0123456789ab",
            Runtime::Python3,
            dir.path(),
            &secret,
        ))
        .await
        .unwrap_err();
    assert!(matches!(err, InvokeError::Refused(_)), "{err:?}");
    assert!(
        err.to_string()
            .contains("The specified runtime 'python:2.7' is not supported"),
        "{err}"
    );
    assert!(ow.deployed("greet").is_none());
}
