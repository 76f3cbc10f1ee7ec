//! `Prefer: respond-async`: 202 with a Location, and the call's own answer there when it is done.

use std::time::Duration;

use crate::cluster::Cluster;

/// Polls the activation until it is no longer running (bounded: the call deadline is 30 s).
async fn fetch(c: &Cluster, location: &str) -> reqwest::Response {
    for _ in 0..600 {
        let resp = c
            .client
            .get(format!("{}{location}", c.url("tu-berlin")))
            .send()
            .await
            .unwrap();
        if resp.status() != 202 {
            return resp;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("activation {location} still running after 30 s");
}

async fn start(c: &Cluster, function: &str) -> String {
    let resp = c
        .client
        .post(format!("{}/fn/{function}", c.url("tu-berlin")))
        .header("X-Client-Location", "52.51,13.32")
        .header("Prefer", "respond-async")
        .body("async body")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 202);
    assert_eq!(resp.headers()["preference-applied"], "respond-async");
    let location = resp.headers()["location"].to_str().unwrap().to_owned();
    assert!(location.starts_with("/activations/"), "{location}");
    location
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_call_is_accepted_and_its_answer_fetched_later() {
    let c = Cluster::start(1 << 20).await;
    let location = start(&c, "sieve").await;
    let done = fetch(&c, &location).await;
    assert_eq!(done.status(), 200);
    assert_eq!(done.headers()["x-served-by"], "tu-berlin");
    assert_eq!(done.text().await.unwrap(), "Found 1229 primes under 10000");
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_call_that_fails_at_the_edge_is_offloaded_too() {
    let c = Cluster::start(1 << 20).await;
    let location = start(&c, "flaky").await;
    let done = fetch(&c, &location).await;
    assert_eq!(done.status(), 200);
    assert_eq!(done.headers()["x-offloaded-from"], "tu-berlin");
    assert_eq!(done.text().await.unwrap(), "cloud flaky ok: async body");
    let unknown = c.get("tu-berlin", "/activations/0123", None).await;
    assert_eq!(unknown.status(), 404);
    c.stop().await;
}
