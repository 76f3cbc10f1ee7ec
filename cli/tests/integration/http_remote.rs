//! HTTP functions on a remote platform: a Lambda function-URL handler (the same file the
//! embedded runtime runs as `users`) on serverless-offline behind a Sydney cloud whose Lambda
//! backend says `event = "http"`, reached with `curl` through a Melbourne edge that does not
//! have it; a `[[function]]` whose `event = "raw"` overrides the backend's keeps today's calls.

use geofaas_test_support::peers::{require, serverless_project, ServerlessOffline};

use crate::cluster::Cluster;
use crate::http_functions::{curl, json};

const CBD: &str = "X-Client-Location: -37.8136,144.9631";

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
functions_dir = "http-edge-functions"

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
event = "http"
function_prefix = "geofaas-peer-dev-"
functions = ["accounts", "pyecho"]
lambda_names = {{ accounts = "geofaas-peer-dev-users" }}

[[function]]
name = "pyecho"
event = "raw"
"#,
        edge = ports[0],
        cloud = ports[1],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_function_url_handler_on_lambda_answers_through_an_edge_that_does_not_have_it() {
    let Some(peer) = require(ServerlessOffline::start(serverless_project()).await) else {
        return;
    };
    // serverless-offline does not check signatures; the adapter still signs with these.
    std::env::set_var("AWS_ACCESS_KEY_ID", "AKIDLOCAL");
    std::env::set_var("AWS_SECRET_ACCESS_KEY", "local-secret");
    let url = peer.lambda_url().to_owned();
    let c = Cluster::start_with(|ports| topology(ports, &url)).await;
    let edge = format!("{}/fn/accounts", c.url("cbd"));
    tokio::task::block_in_place(|| {
        for h2 in [false, true] {
            let put = curl(
                &c,
                h2,
                &[
                    "-X",
                    "PUT",
                    "-H",
                    CBD,
                    "-H",
                    "Content-Type: application/json",
                    "-d",
                    "{\"name\":\"ada\"}",
                ],
                &format!("{edge}/users/7?x=1&y=two%20words"),
            );
            assert_eq!(put.status, 201, "h2={h2}: {put:?}");
            assert_eq!(put.header("content-type"), "application/json");
            assert_eq!(put.header("location"), "/users/7");
            assert_eq!(put.header("cache-control"), "no-store");
            assert_eq!(put.header("x-handler"), "users");
            assert_eq!(put.header("set-cookie-count"), "2", "{put:?}");
            assert_eq!(put.header("x-served-by"), "cloud");
            assert_eq!(put.header("x-offloaded-from"), "cbd");
            let saw = &json(&put)["saw"];
            assert_eq!(saw["method"], "PUT");
            assert_eq!(saw["rawPath"], "/users/7");
            assert_eq!(saw["rawQueryString"], "x=1&y=two%20words");
            assert_eq!(saw["query"]["y"], "two words");
            assert_eq!(saw["body"], "{\"name\":\"ada\"}");
            assert_eq!(saw["node"], "cloud");

            let delete = curl(
                &c,
                h2,
                &["-X", "DELETE", "-H", CBD],
                &format!("{edge}/users/7"),
            );
            assert_eq!(delete.status, 204, "h2={h2}: {delete:?}");
            assert_eq!(delete.body, "");
            let missing = curl(&c, h2, &["-H", CBD], &format!("{edge}/users/8"));
            assert_eq!(missing.status, 404, "h2={h2}: {missing:?}");
            assert_eq!(missing.header("x-served-by"), "cloud");
            assert!(missing.body.contains("user 8 not found"), "{missing:?}");
        }
        // The [[function]]'s `event = "raw"` overrides the backend's: the body is the event.
        let raw = curl(
            &c,
            true,
            &["-H", CBD, "-d", "hello"],
            &format!("{}/fn/pyecho", c.url("cbd")),
        );
        assert_eq!(raw.status, 200, "{raw:?}");
        assert_eq!(
            json(&raw),
            serde_json::json!({"handler": "python", "event": "hello"})
        );
    });
    c.stop().await;
}
