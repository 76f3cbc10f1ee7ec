//! `Idempotency-Key`: a retried call gets the first answer instead of running twice.

use crate::cluster::Cluster;

async fn call(c: &Cluster, key: Option<&str>, body: &'static str) -> reqwest::Response {
    let mut req = c
        .client
        .post(format!("{}/fn/counter", c.url("tu-berlin")))
        .header("X-Client-Location", "52.51,13.32")
        .body(body);
    if let Some(k) = key {
        req = req.header("Idempotency-Key", k);
    }
    req.send().await.expect("request")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_with_the_same_key_is_answered_without_running_again() {
    let c = Cluster::start(1 << 20).await;
    let first = call(&c, Some("k-1"), "a").await;
    assert_eq!(first.status(), 200);
    assert!(first.headers().get("idempotent-replayed").is_none());
    assert_eq!(first.text().await.unwrap(), "call 1: a");

    let retry = call(&c, Some("k-1"), "a").await;
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(retry.headers()["x-served-by"], "tu-berlin");
    assert_eq!(
        retry.text().await.unwrap(),
        "call 1: a",
        "the first answer, not a second run"
    );

    assert_eq!(
        call(&c, Some("k-2"), "a").await.text().await.unwrap(),
        "call 2: a"
    );
    assert_eq!(call(&c, None, "a").await.text().await.unwrap(), "call 3: a");
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_reused_for_another_request_or_malformed_is_refused() {
    let c = Cluster::start(1 << 20).await;
    assert_eq!(call(&c, Some("k"), "a").await.status(), 200);
    let reused = call(&c, Some("k"), "b").await;
    assert_eq!(reused.status(), 422);
    let v: serde_json::Value = reused.json().await.unwrap();
    assert_eq!(v["error"]["code"], "idempotency_key_reused");
    let long = "x".repeat(300);
    let resp = c
        .client
        .post(format!("{}/fn/counter", c.url("tu-berlin")))
        .header("Idempotency-Key", long.as_str())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    c.stop().await;
}
