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

/// Starts one idle instance of `function` at tu-berlin, so the call that follows is warm: its
/// edge backend has a 1.5 s timeout, which a cold start on a loaded machine can exceed, and a
/// timeout is the one case where a call may run twice (it is offloaded).
async fn warm_at_the_edge(c: &Cluster, function: &str) {
    let edge = c
        .nodes
        .iter()
        .find(|n| n.state.place.id == "tu-berlin")
        .unwrap();
    // A start that takes longer than the backend's timeout on a loaded machine is tried again.
    let mut tries = Vec::new();
    for _ in 0..10 {
        for local in edge
            .state
            .directory
            .backends()
            .iter()
            .filter_map(|b| b.local())
        {
            match local.warm_one(function).await {
                Ok(geofaas_functions::local::WarmUp::Started) => return,
                other => tries.push(format!("{other:?}")),
            }
        }
    }
    panic!("no idle {function} instance at tu-berlin: {tries:?}");
}

/// `curl` of `function` at tu-berlin from Berlin with `body`: status, `X-Served-By`, body.
fn curl_at_the_edge(c: &Cluster, function: &str, body: &str) -> (String, String, String) {
    let out = std::process::Command::new("curl")
        .args(["-sS", "--http2", "--cacert"])
        .arg(c.ca_file.path())
        .args(["-H", &format!("X-Client-Location: {BERLIN}"), "-d", body])
        .args(["-w", "\n%{http_code} %header{x-served-by}"])
        .arg(format!("{}/fn/{function}", c.url("tu-berlin")))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, tail) = text.rsplit_once('\n').unwrap_or((&text, ""));
    let (status, served_by) = tail.split_once(' ').unwrap_or((tail, ""));
    (status.to_owned(), served_by.to_owned(), body.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_function_that_fails_after_a_side_effect_runs_once_unless_it_opts_in() {
    // Edge and cloud both serve `sidefx`; it writes a line, then raises on the first one.
    let file = tempfile::NamedTempFile::new().unwrap();
    let path = file.path().display().to_string();
    let lines = || {
        std::fs::read_to_string(file.path())
            .unwrap()
            .lines()
            .count()
    };
    let c = Cluster::start(1 << 20).await;
    warm_at_the_edge(&c, "sidefx").await;
    let (status, served_by, body) = curl_at_the_edge(&c, "sidefx", &path);
    assert_eq!((status.as_str(), served_by.as_str()), ("502", ""), "{body}");
    assert!(
        body.contains("function_failed") && body.contains("sidefx"),
        "{body}"
    );
    assert!(body.contains("failed after writing line 1"), "{body}");
    assert_eq!(lines(), 1, "the function ran again after it failed");
    c.stop().await;

    // With `retry_on_error = true` (the paper's mode) the cloud runs it again and answers.
    std::fs::write(file.path(), "").unwrap();
    let c = Cluster::start_with(|ports| {
        crate::cluster::topology_text(ports, 1 << 20)
            + "\n[[function]]\nname = \"sidefx\"\nretry_on_error = true\n"
    })
    .await;
    warm_at_the_edge(&c, "sidefx").await;
    let (status, served_by, body) = curl_at_the_edge(&c, "sidefx", &path);
    assert_eq!(
        (status.as_str(), served_by.as_str()),
        ("200", "cloud"),
        "{body}"
    );
    assert_eq!(body, "ok after 2 lines");
    assert_eq!(lines(), 2);
    c.stop().await;
}
