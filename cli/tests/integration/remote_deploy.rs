//! `PUT /admin/functions/{name}` at a node whose tinyFaaS backend has `deploy = true`: the
//! version goes to the embedded runtime and through tinyFaaS's own `/upload` (the
//! protocol-faithful fake), and a platform that refuses it leaves the live version serving.

use std::path::Path;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use geofaas_config::Topology;
use geofaas_gateway::deploy::bundle::Bundle;
use geofaas_gateway::routes;
use geofaas_gateway::{build_backends, NodeOptions, NodeState};
use geofaas_test_support::tinyfaas::{FakeFunction, FakeTinyfaas};
use http_body_util::BodyExt;
use tower::ServiceExt;

fn topology(tiny: &FakeTinyfaas, functions: &Path) -> String {
    format!(
        "zone = \"mel.test.\"\n\n[[node]]\nid = \"cloud\"\nrole = \"cloud\"\n\
         location = {{ lat = -33.87, lon = 151.21 }}\narea = \"world\"\n\
         public_url = \"https://cloud.mel.test:8443\"\nlisten = \"127.0.0.1:8443\"\n\
         [[node.backend]]\nkind = \"local\"\nfunctions_dir = \"{}\"\n\
         [[node.backend]]\nkind = \"tinyfaas\"\nurl = \"{}\"\nmanager_url = \"{}\"\ndeploy = true\n",
        functions.display(),
        tiny.proxy_url(),
        tiny.manager_url()
    )
}

fn put(name: &str, bundle: Vec<u8>) -> Request<Body> {
    Request::put(format!("/admin/functions/{name}"))
        .header("content-type", "application/gzip")
        .header("x-function-env", "GREETING=hi")
        .body(Body::from(bundle))
        .unwrap()
}

async fn json(resp: axum::http::Response<Body>) -> (StatusCode, serde_json::Value) {
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deploy_also_goes_to_a_tinyfaas_backend_that_takes_deploys() {
    let tiny = FakeTinyfaas::start([("echo", FakeFunction::Echo)])
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("functions")).unwrap();
    let topology = Arc::new(
        Topology::parse(
            &topology(&tiny, &dir.path().join("functions")),
            "cloud.toml",
            dir.path(),
        )
        .unwrap(),
    );
    let backends = build_backends(&topology, "cloud").unwrap();
    let opts = NodeOptions {
        state_dir: Some(dir.path().join("state")),
        ..Default::default()
    };
    let state = Arc::new(NodeState::new(topology, "cloud", backends, opts).unwrap());
    let router = routes::router(state);
    let src = dir.path().join("greet");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(
        src.join("fn.py"),
        "import os\ndef fn(i, h):\n    return os.environ['GREETING'] + ' ' + i\n",
    )
    .unwrap();
    let bundle = Bundle::from_dir(&src).unwrap();

    let (status, body) = json(
        router
            .clone()
            .oneshot(put("greet", bundle.pack().unwrap()))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let version = body["version"].as_str().unwrap().to_owned();
    let uploads = tiny.uploads();
    assert_eq!(uploads.len(), 1);
    assert_eq!(
        (uploads[0].name.as_str(), uploads[0].env.as_str()),
        ("greet", "python3")
    );
    assert_eq!(uploads[0].envs, ["GREETING=hi"]);
    // The embedded runtime serves it too, as that version.
    let call = Request::post("/fn/greet").body(Body::from("you")).unwrap();
    let resp = router.clone().oneshot(call).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-function-version"], version.as_str());

    // tinyFaaS fails to build the next version: the deploy fails naming it, nothing switches.
    tiny.break_builds();
    std::fs::write(src.join("fn.py"), "def fn(i, h):\n    return 'two'\n").unwrap();
    let two = Bundle::from_dir(&src).unwrap().pack().unwrap();
    let (status, body) = json(router.clone().oneshot(put("greet", two)).await.unwrap()).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{body}");
    assert_eq!(body["error"]["code"], "remote_deploy_failed");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("tinyfaas"),
        "{body}"
    );
    let call = Request::post("/fn/greet").body(Body::from("you")).unwrap();
    let resp = router.clone().oneshot(call).await.unwrap();
    assert_eq!(resp.headers()["x-function-version"], version.as_str());
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(bytes, "hi you");
}
