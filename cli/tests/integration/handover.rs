//! Geo routing: served in the area, 307 to the responsible node otherwise, body kept across it.

use crate::cluster::Cluster;

const BERLIN: &str = "52.51,13.32";
const POTSDAM: &str = "52.40,13.06";
const LONDON: &str = "51.50,-0.12";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_in_the_area_is_served_here() {
    let c = Cluster::start(1 << 20).await;
    let resp = c.get("tu-berlin", "/fn/sieve", Some(BERLIN)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-served-by"], "tu-berlin");
    assert_eq!(resp.headers()["x-cold-start"], "true");
    assert!(resp.headers()["server-timing"]
        .to_str()
        .unwrap()
        .contains("exec;dur="));
    assert_eq!(resp.text().await.unwrap(), "Found 1229 primes under 10000");
    let again = c.get("tu-berlin", "/fn/sieve", Some(BERLIN)).await;
    assert_eq!(
        again.headers()["x-cold-start"],
        "false",
        "the second call reuses the warm worker"
    );
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_areas_get_a_307_to_the_responsible_node() {
    let c = Cluster::start(1 << 20).await;
    for (loc, target) in [(POTSDAM, "potsdam"), (LONDON, "cloud")] {
        let resp = c.get("tu-berlin", "/fn/sieve?n=1", Some(loc)).await;
        assert_eq!(resp.status(), 307, "{loc}");
        assert_eq!(
            resp.headers()["location"],
            format!("{}/fn/sieve?n=1", c.url(target)).as_str()
        );
    }
    // The cloud hands Berlin clients back to their edge.
    let resp = c.get("cloud", "/fn/sieve", Some(BERLIN)).await;
    assert_eq!(resp.status(), 307);
    assert_eq!(
        resp.headers()["location"],
        format!("{}/fn/sieve", c.url("tu-berlin")).as_str()
    );
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_body_survives_the_handover() {
    let c = Cluster::start(1 << 20).await;
    let body = "a POST body that must reach potsdam \u{1F30D}";
    let resp = c
        .following
        .post(format!("{}/fn/echo", c.url("tu-berlin")))
        .header("X-Client-Location", POTSDAM)
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-served-by"], "potsdam");
    assert_eq!(resp.text().await.unwrap(), body);
    let resp = c
        .following
        .post(format!("{}/fn/echo", c.url("potsdam")))
        .header("X-Client-Location", LONDON)
        .body("to london")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers()["x-served-by"], "cloud");
    assert_eq!(resp.text().await.unwrap(), "to london");
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_location_the_receiving_node_serves() {
    let c = Cluster::start(1 << 20).await;
    let resp = c.get("potsdam", "/fn/sieve", None).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-served-by"], "potsdam");
    let resp = c.get("potsdam", "/registry", None).await;
    let reg: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(reg["self"], "potsdam");
    assert_eq!(reg["nodes"].as_array().unwrap().len(), 3);
    assert_eq!(c.get("cloud", "/readyz", None).await.status(), 200);
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_neighbour_is_never_a_handover_target_its_clients_go_to_the_cloud() {
    let mut c = Cluster::start_opts(
        |ports| {
            crate::cluster::topology_text(ports, 1 << 20).replacen(
                "ttl_s = 30",
                "ttl_s = 30\nprobe_interval_ms = 100",
                1,
            )
        },
        true,
    )
    .await;
    let potsdam = c.url("potsdam");
    let resp = c.get("tu-berlin", "/fn/sieve", Some(POTSDAM)).await;
    assert_eq!(
        resp.headers()["location"],
        format!("{potsdam}/fn/sieve").as_str()
    );
    let i = c
        .nodes
        .iter()
        .position(|n| n.state.place.id == "potsdam")
        .unwrap();
    c.nodes.remove(i).shutdown().await.unwrap();
    // Within a few probe intervals the edge stops sending Potsdam clients to potsdam.
    let mut location = String::new();
    for _ in 0..100 {
        let resp = c.get("tu-berlin", "/fn/sieve", Some(POTSDAM)).await;
        location = resp.headers()["location"].to_str().unwrap().to_owned();
        if !location.starts_with(&potsdam) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(location, format!("{}/fn/sieve", c.url("cloud")));
    // The cloud serves them itself instead of handing them back to the dead edge.
    let resp = c.get("cloud", "/fn/sieve", Some(POTSDAM)).await;
    let mut status = resp.status().as_u16();
    for _ in 0..100 {
        if status == 200 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        status = c
            .get("cloud", "/fn/sieve", Some(POTSDAM))
            .await
            .status()
            .as_u16();
    }
    assert_eq!(status, 200);
    c.stop().await;
}
