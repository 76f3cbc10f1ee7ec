//! A function deployed only in the cloud works from every edge: a Melbourne edge whose cloud
//! runs its functions on AWS Lambda only (serverless-offline with real handlers, names mapped
//! with `function_prefix`) offloads what it does not serve, and the cloud answers `404` only
//! for what no node has.

use std::process::Command;

use geofaas_test_support::peers::{require, serverless_project, ServerlessOffline};

use crate::cluster::Cluster;

const IN_CBD: &str = "-37.8136,144.9631";

fn topology(ports: &[u16], lambda_url: &str) -> String {
    format!(
        r#"
zone = "mel.test."

[[node]]
id = "cbd"
role = "edge"
location = {{ lat = -37.8136, lon = 144.9631 }}
area.circle = {{ center = {{ lat = -37.8136, lon = 144.9631 }}, radius_km = 5 }}
public_url = "https://127.0.0.1:{edge}"
listen = "127.0.0.1:{edge}"
[[node.backend]]
kind = "local"
functions_dir = "edge-functions"

[[node]]
id = "cloud"
role = "cloud"
location = {{ lat = -33.8688, lon = 151.2093 }}
public_url = "https://127.0.0.1:{cloud}"
listen = "127.0.0.1:{cloud}"
[[node.backend]]
kind = "lambda"
region = "us-east-1"
endpoint = "{lambda_url}"
function_prefix = "geofaas-peer-dev-"
functions = ["pyecho", "held-out-echo"]
lambda_names = {{ held-out-echo = "geofaas-peer-dev-echo" }}
"#,
        edge = ports[0],
        cloud = ports[1],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edge_offloads_functions_only_the_lambda_cloud_has() {
    let Some(peer) = require(ServerlessOffline::start(serverless_project()).await) else {
        return;
    };
    // serverless-offline does not check signatures; the adapter still signs with these.
    std::env::set_var("AWS_ACCESS_KEY_ID", "AKIDLOCAL");
    std::env::set_var("AWS_SECRET_ACCESS_KEY", "local-secret");
    let url = peer.lambda_url().to_owned();
    let c = Cluster::start_with(|ports| topology(ports, &url)).await;
    let edge = format!("{}/fn", c.url("cbd"));

    // Prefix mapping: `pyecho` is `geofaas-peer-dev-pyecho` on Lambda.
    let resp = c.post("cbd", "pyecho", IN_CBD, "hello").await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-served-by"], "cloud");
    assert_eq!(resp.headers()["x-offloaded-from"], "cbd");
    let v: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(
        v,
        serde_json::json!({"handler": "python", "event": "hello"})
    );

    // A per-function Lambda name, called the way users call: curl over HTTP/2.
    let out = tokio::task::block_in_place(|| {
        Command::new("curl")
            .args(["-s", "--http2", "-i", "--cacert"])
            .arg(c.ca_file.path())
            .args(["-H", &format!("x-client-location: {IN_CBD}")])
            .args(["-d", r#"{"n":7}"#, &format!("{edge}/held-out-echo")])
            .output()
            .expect("curl runs")
    });
    let text = String::from_utf8_lossy(&out.stdout).to_lowercase();
    assert!(text.starts_with("http/2 200"), "{text}");
    assert!(text.contains("x-offloaded-from: cbd"), "{text}");
    assert!(text.contains("x-placement: cloud"), "{text}");
    assert!(
        text.contains(r#"{"handler":"node","event":{"n":7}}"#),
        "{text}"
    );

    // What no node has is the cloud's 404, passed through the edge.
    let resp = c.post("cbd", "nowhere", IN_CBD, "x").await;
    assert_eq!(resp.status(), 404);
    assert_eq!(resp.headers()["x-offloaded-from"], "cbd");
    assert!(
        resp.headers().get("x-placement").is_none(),
        "a call that ran nowhere has no placement: {:?}",
        resp.headers()
    );
    let v: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["code"], "unknown_function");

    // Every node says who serves what.
    let v: serde_json::Value = c.get("cbd", "/functions", None).await.json().await.unwrap();
    assert_eq!(
        v["nodes"]["cloud"]["functions"],
        serde_json::json!(["held-out-echo", "pyecho"])
    );
    // The cloud's own list, fetched live, takes the place of what the topology says.
    assert_eq!(v["nodes"]["cloud"]["source"], "fetched");
    assert!(v["served_here"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f == "counter"));
    let v: serde_json::Value = c
        .get("cloud", "/functions", None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        v["served_here"],
        serde_json::json!(["held-out-echo", "pyecho"])
    );
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edge_learns_what_the_cloud_serves_from_its_functions_list() {
    let c = Cluster::start(1 << 20).await;
    let v: serde_json::Value = c
        .get("tu-berlin", "/functions", None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["nodes"]["cloud"]["source"], "fetched");
    let cloud: Vec<&str> = v["nodes"]["cloud"]["functions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f.as_str())
        .collect();
    assert!(cloud.contains(&"cloudonly"), "{cloud:?}");
    assert!(!v["served_here"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f == "cloudonly"));
    // And a call of it at the edge is offloaded rather than refused.
    let resp = c.post("tu-berlin", "cloudonly", "52.51,13.32", "").await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-offloaded-from"], "tu-berlin");
    c.stop().await;
}
