//! The live scheduler: with `[scheduler] policy = "greedy"` an edge sends on a call another node
//! really serves better (the edge's one core is busy, the cloud's are free), with nothing
//! failing, and serves the rest itself; an idle edge's first calls stay at home even when the
//! function's image is large, because the embedded runtime starts an instance with a fork, not
//! an image pull.

use std::time::Duration;

use crate::cluster::{topology_text, Cluster};

const BERLIN: &str = "52.51,13.32";

/// The test topology with `policy`, tu-berlin planning with one core (one running call fills
/// it), an `echo` with a 2 GB image (a 16 s pull at the edge's 1 Gbit/s, were it pulled) and
/// `nap` profiled at a second of compute.
async fn start(policy: &str) -> Cluster {
    Cluster::start_with(|ports| {
        let text = topology_text(ports, 1 << 20);
        assert!(
            text.contains("policy = \"none\""),
            "berlin.toml sets the policy"
        );
        let echo = "name = \"echo\"\ncpu_ms = 1\nmemory_mb = 16\nimage_mb = 1\n";
        assert!(text.contains(echo), "berlin.toml profiles echo");
        let tu = "id = \"tu-berlin\"\n";
        assert!(text.contains(tu), "berlin.toml has tu-berlin");
        let nap = "\n[[function]]\nname = \"nap\"\ncpu_ms = 1000\nmemory_mb = 16\nslo_ms = 4000\n";
        text.replace("policy = \"none\"", &format!("policy = \"{policy}\""))
            .replace(echo, &echo.replace("image_mb = 1", "image_mb = 2000"))
            .replace(tu, &format!("{tu}cores = 1\n"))
            + nap
    })
    .await
}

fn header(r: &reqwest::Response, name: &str) -> String {
    r.headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default()
}

/// Calls `nap` at tu-berlin for `seconds`.
async fn nap(c: &Cluster, seconds: &'static str) -> reqwest::Response {
    c.post("tu-berlin", "nap", BERLIN, seconds).await
}

/// Waits until tu-berlin says a call is running (its `/ui/node` load), at most 10 s.
async fn until_running(c: &Cluster) {
    for _ in 0..1000 {
        let status: serde_json::Value = c
            .get("tu-berlin", "/ui/node", None)
            .await
            .json()
            .await
            .unwrap();
        if status["load"]["running"].as_u64() >= Some(1) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("tu-berlin never ran the first nap");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn greedy_offloads_a_call_the_cloud_serves_better_and_keeps_the_rest() {
    let c = start("greedy").await;
    // An idle edge's first call of a function with a 2 GB image: a fork here, so here.
    let resp = c.post("tu-berlin", "echo", BERLIN, "heavy image").await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-served-by"), "tu-berlin");
    assert_eq!(header(&resp, "x-placement"), "local-new");
    assert_eq!(header(&resp, "x-placement-reason"), "greedy");
    assert_eq!(resp.text().await.unwrap(), "heavy image");

    // A first nap starts an instance (on a loaded machine a start can take a good part of the
    // edge backend's 1.5 s timeout, so the busy call below does not pay one).
    assert_eq!(header(&nap(&c, "0").await, "x-served-by"), "tu-berlin");
    // One nap fills tu-berlin's core; the next would wait a second behind it there, while the
    // cloud (25 ms away) or idle Potsdam (when its load report is fresh) runs it at once:
    // greedy sends it there.
    let busy = crate::placement::nap_in_background(&c, "tu-berlin", "nap", "1.0");
    until_running(&c).await;
    let placed = nap(&c, "0").await;
    assert_eq!(placed.status(), 200);
    let elsewhere = (
        header(&placed, "x-placement"),
        header(&placed, "x-served-by"),
    );
    assert!(
        elsewhere == ("cloud".into(), "cloud".into())
            || elsewhere == ("neighbor".into(), "potsdam".into()),
        "{elsewhere:?}"
    );
    assert_eq!(header(&placed, "x-placement-reason"), "greedy");
    let timing = header(&placed, "server-timing");
    assert!(timing.contains("predicted;dur="), "{timing}");
    let busy = busy.await.unwrap();
    assert_eq!(
        (header(&busy, "x-served-by"), busy.status().as_u16()),
        ("tu-berlin".to_owned(), 200)
    );

    // With the core free again the rest stays here.
    for _ in 0..2 {
        let resp = c.post("tu-berlin", "sieve", BERLIN, "").await;
        assert_eq!(resp.status(), 200);
        assert_eq!(header(&resp, "x-served-by"), "tu-berlin");
        assert!(!resp.headers().contains_key("x-offloaded-from"));
        let timing = header(&resp, "server-timing");
        assert!(timing.contains("sched;dur="), "{timing}");
        assert_eq!(resp.text().await.unwrap(), "Found 1229 primes under 10000");
    }
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_policy_the_same_call_stays_at_the_edge() {
    let c = start("none").await;
    assert_eq!(header(&nap(&c, "0").await, "x-served-by"), "tu-berlin");
    let busy = crate::placement::nap_in_background(&c, "tu-berlin", "nap", "1.0");
    until_running(&c).await;
    let resp = nap(&c, "0").await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-served-by"), "tu-berlin");
    assert!(!resp.headers().contains_key("x-offloaded-from"));
    let timing = header(&resp, "server-timing");
    assert!(!timing.contains("sched;"), "{timing}");
    assert_eq!(header(&busy.await.unwrap(), "x-served-by"), "tu-berlin");
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
