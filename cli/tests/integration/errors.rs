//! Bad input gets a clear JSON error naming what was wrong.

use crate::cluster::Cluster;

async fn error_of(resp: reqwest::Response) -> (u16, String, String) {
    let status = resp.status().as_u16();
    let v: serde_json::Value = resp.json().await.expect("JSON error body");
    (
        status,
        v["error"]["code"].as_str().unwrap().to_owned(),
        v["error"]["message"].as_str().unwrap().to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_function_is_404() {
    let c = Cluster::start(1 << 20).await;
    let resp = c.get("tu-berlin", "/fn/nosuch", None).await;
    let (status, code, msg) = error_of(resp).await;
    assert_eq!((status, code.as_str()), (404, "unknown_function"));
    assert!(msg.contains("nosuch"), "{msg}");
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_location_is_400_naming_header_and_value() {
    let c = Cluster::start(1 << 20).await;
    for bad in ["52.51;13.32", "95,13", "north,east"] {
        let resp = c.get("tu-berlin", "/fn/sieve", Some(bad)).await;
        let (status, code, msg) = error_of(resp).await;
        assert_eq!((status, code.as_str()), (400, "bad_header"));
        assert!(
            msg.contains("X-Client-Location") && msg.contains(bad),
            "{msg}"
        );
    }
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_over_the_limit_is_413_and_the_node_keeps_serving() {
    let c = Cluster::start(1024).await;
    let url = format!("{}/fn/echo", c.url("tu-berlin"));
    let resp = c
        .client
        .post(&url)
        .body(vec![b'x'; 4096])
        .send()
        .await
        .unwrap();
    let (status, code, msg) = error_of(resp).await;
    assert_eq!((status, code.as_str()), (413, "body_too_large"));
    assert!(msg.contains("1024"), "{msg}");
    // Streamed without a length, too.
    let chunks = futures::stream::iter((0..8).map(|_| Ok::<_, std::io::Error>(vec![b'y'; 512])));
    let resp = c
        .client
        .post(&url)
        .body(reqwest::Body::wrap_stream(chunks))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 413);
    let ok = c.client.post(&url).body("small").send().await.unwrap();
    assert_eq!(ok.text().await.unwrap(), "small");
    c.stop().await;
}
