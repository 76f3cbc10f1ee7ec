//! End to end through the gateways with remote backends: an edge on tinyFaaS (protocol-faithful
//! fake) whose backend dies, offloaded to a cloud node backed by AWS Lambda (real handlers in
//! serverless-offline).

use geofaas_test_support::peers::{require, serverless_project, ServerlessOffline};
use geofaas_test_support::tinyfaas::{FakeFunction, FakeTinyfaas};

use crate::cluster::Cluster;

const FUNCTION: &str = "geofaas-peer-dev-echo";

fn topology(ports: &[u16], tinyfaas: &FakeTinyfaas, lambda_url: &str) -> String {
    let node = |id: &str, role: &str, port: u16, area: &str, backend: String| {
        format!(
            "[[node]]\nid = \"{id}\"\nrole = \"{role}\"\nlocation = {{ lat = 52.5, lon = 13.3 }}\n{area}\npublic_url = \"https://127.0.0.1:{port}\"\nlisten = \"127.0.0.1:{port}\"\n{backend}\n"
        )
    };
    let tiny = format!(
        "[[node.backend]]\nkind = \"tinyfaas\"\nurl = \"{}\"\nmanager_url = \"{}\"\ntimeout_ms = 10000\nbreaker_failures = 1\n",
        tinyfaas.proxy_url(),
        tinyfaas.manager_url()
    );
    let lambda = format!(
        "[[node.backend]]\nkind = \"lambda\"\nregion = \"us-east-1\"\nendpoint = \"{lambda_url}\"\nfunctions = [\"{FUNCTION}\"]\n"
    );
    let mut text = String::new();
    text += &node(
        "tu-berlin",
        "edge",
        ports[0],
        "area.hexagon = { center = { lat = 52.51, lon = 13.32 }, circumradius_deg = 0.1 }",
        tiny.clone(),
    );
    text += &node(
        "potsdam",
        "edge",
        ports[1],
        "area.hexagon = { center = { lat = 52.35, lon = 13.05 }, circumradius_deg = 0.05 }",
        tiny,
    );
    text += &node("cloud", "cloud", ports[2], "", lambda);
    text += &format!("[[function]]\nname = \"{FUNCTION}\"\n");
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_tinyfaas_edge_is_offloaded_to_a_lambda_cloud() {
    let Some(mut peer) = require(ServerlessOffline::start(serverless_project()).await) else {
        return;
    };
    // serverless-offline accepts any credentials; the adapter reads them from the environment.
    std::env::set_var("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE");
    std::env::set_var(
        "AWS_SECRET_ACCESS_KEY",
        "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
    );
    let mut tiny = FakeTinyfaas::start([(
        FUNCTION.to_owned(),
        FakeFunction::Reply("from tinyfaas".into()),
    )])
    .await
    .unwrap();
    let lambda_url = peer.lambda_url().to_owned();
    let c = Cluster::start_with(|ports| topology(ports, &tiny, &lambda_url)).await;
    let call = || {
        c.client
            .post(format!("{}/fn/{FUNCTION}", c.url("tu-berlin")))
            .header("X-Client-Location", "52.51,13.32")
            .body(r#"{"hello":"geofaas"}"#)
            .send()
    };

    let resp = call().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-served-by"], "tu-berlin");
    assert_eq!(resp.text().await.unwrap(), "from tinyfaas");

    tiny.shutdown().await;
    let resp = call().await.unwrap();
    assert_eq!(resp.status(), 200, "the client never sees the edge failure");
    assert_eq!(resp.headers()["x-offloaded-from"], "tu-berlin");
    assert_eq!(resp.headers()["x-served-by"], "cloud");
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(
        body["handler"], "node",
        "the real Lambda handler answered: {body}"
    );
    assert_eq!(body["event"]["hello"], "geofaas");

    c.stop().await;
    peer.stop().await;
}
