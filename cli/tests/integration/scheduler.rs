//! The live scheduler: with `[scheduler] policy = "greedy"` an edge offloads a call whose model
//! estimate is clearly better in the cloud, with nothing failing, and serves the rest itself.

use crate::cluster::{topology_text, Cluster};

const BERLIN: &str = "52.51,13.32";

/// The test topology with `policy` and an `echo` whose 2 GB image makes a cold start at the
/// edge (1 Gbit/s) ten times dearer than in the cloud (10 Gbit/s).
async fn start(policy: &str) -> Cluster {
    Cluster::start_with(|ports| {
        let text = topology_text(ports, 1 << 20);
        assert!(
            text.contains("policy = \"none\""),
            "berlin.toml sets the policy"
        );
        let echo = "name = \"echo\"\ncpu_ms = 1\nmemory_mb = 16\nimage_mb = 1\n";
        assert!(text.contains(echo), "berlin.toml profiles echo");
        text.replace("policy = \"none\"", &format!("policy = \"{policy}\""))
            .replace(echo, &echo.replace("image_mb = 1", "image_mb = 2000"))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn greedy_offloads_a_call_the_cloud_serves_better_and_keeps_the_rest() {
    let c = start("greedy").await;
    let resp = c.post("tu-berlin", "echo", BERLIN, "heavy image").await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-offloaded-from"], "tu-berlin");
    assert_eq!(resp.headers()["x-served-by"], "cloud");
    assert_eq!(resp.text().await.unwrap(), "heavy image");

    for _ in 0..2 {
        let resp = c.post("tu-berlin", "sieve", BERLIN, "").await;
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["x-served-by"], "tu-berlin");
        assert!(!resp.headers().contains_key("x-offloaded-from"));
        let timing = resp.headers()["server-timing"].to_str().unwrap().to_owned();
        assert!(timing.contains("sched;dur="), "{timing}");
        assert_eq!(resp.text().await.unwrap(), "Found 1229 primes under 10000");
    }
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_policy_the_same_call_stays_at_the_edge() {
    let c = start("none").await;
    let resp = c.post("tu-berlin", "echo", BERLIN, "heavy image").await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-served-by"], "tu-berlin");
    assert!(!resp.headers().contains_key("x-offloaded-from"));
    let timing = resp.headers()["server-timing"].to_str().unwrap().to_owned();
    assert!(!timing.contains("sched;"), "{timing}");
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ppo_policy_loads_and_every_call_is_answered() {
    let c = start("ppo").await;
    for function in ["sieve", "echo", "sieve"] {
        let resp = c.post("tu-berlin", function, BERLIN, "").await;
        assert_eq!(resp.status(), 200, "{function}");
        let by = resp.headers()["x-served-by"].to_str().unwrap().to_owned();
        let placement = resp.headers()["x-placement"].to_str().unwrap().to_owned();
        assert_eq!(resp.headers()["x-placement-reason"], "ppo");
        let expected = match placement.as_str() {
            "local-warm" | "local-new" => "tu-berlin",
            "neighbor" => "potsdam",
            _ => "cloud",
        };
        assert_eq!(by, expected, "{placement}");
    }
    c.stop().await;
}
