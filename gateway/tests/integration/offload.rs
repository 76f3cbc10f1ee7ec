//! Offload: whatever goes wrong at the edge, the client gets the cloud's answer.

use crate::cluster::Cluster;

const BERLIN: &str = "52.51,13.32";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashing_edge_function_is_offloaded_to_the_cloud() {
    let c = Cluster::start(1 << 20).await;
    let resp = c.post("tu-berlin", "flaky", BERLIN, "payload").await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-offloaded-from"], "tu-berlin");
    assert_eq!(resp.headers()["x-served-by"], "cloud");
    assert_eq!(resp.text().await.unwrap(), "cloud flaky ok: payload");
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timed_out_edge_call_is_offloaded() {
    let c = Cluster::start(1 << 20).await;
    let resp = c.post("tu-berlin", "slow", BERLIN, "").await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-offloaded-from"], "tu-berlin");
    assert_eq!(resp.text().await.unwrap(), "cloud slow ok");
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn function_missing_at_the_edge_is_offloaded() {
    let c = Cluster::start(1 << 20).await;
    let resp = c.post("tu-berlin", "cloudonly", BERLIN, "").await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-offloaded-from"], "tu-berlin");
    assert_eq!(resp.text().await.unwrap(), "only in the cloud");
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_offload_credential_is_not_honoured_but_a_client_retry_is() {
    let c = Cluster::start(1 << 20).await;
    let url = format!("{}/fn/sieve", c.url("cloud"));
    let forged = c
        .client
        .get(&url)
        .header("X-Client-Location", BERLIN)
        .header("X-GeoFaaS-Offload", "tu-berlin;1;00ff")
        .send()
        .await
        .unwrap();
    assert_eq!(
        forged.status(),
        307,
        "a forged credential must not pin the call to the cloud"
    );
    let retry = c
        .client
        .get(&url)
        .header("X-Client-Location", BERLIN)
        .header("X-GeoFaaS-Retry", "1")
        .send()
        .await
        .unwrap();
    assert_eq!(retry.status(), 200);
    assert_eq!(retry.headers()["x-served-by"], "cloud");
    c.stop().await;
}
