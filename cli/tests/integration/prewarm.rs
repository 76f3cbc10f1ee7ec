//! Pre-warming on a predicted handover, through real nodes on a Melbourne topology (two square
//! edges side by side, the cloud in Sydney) and the real `curl` over HTTP/1.1 and HTTP/2, run
//! from a folder other than the repository's: a client with an `X-Client-Id` walking east
//! towards the boundary makes its edge ask the next edge to warm the function, so its first
//! call there runs on a warm instance (`X-Cold-Start: false`, counted as used at that node);
//! with pre-warming off the same walk's first call there starts one (`X-Cold-Start: true`). A
//! client without an id is not tracked, and one standing still near the boundary asks nothing.
//! The same prediction puts `Link: <east's origin>; rel=preconnect` on west's answers, and the
//! loadtest's `GeoClient` acts on it: its handover call to east finds a connection open there.

use std::process::Command;
use std::time::{Duration, Instant};

use geofaas_config::LatLon;
use geofaas_loadtest::{CallRequest, ClientConfig, GeoClient, HttpVersion};
use url::Url;

use crate::answer::Answer;
use crate::cluster::Cluster;

/// The boundary between west's and east's areas is the meridian 144.96.
const LAT: f64 = -37.81;
/// A walk east on west's side, ending ~90 m from the boundary: ~45 m per call.
const WALK: [f64; 3] = [144.9580, 144.9585, 144.9590];
/// The walk's next point, ~45 m past the boundary, in east's area.
const ACROSS: f64 = 144.9605;
/// A walk east on west's side ending 9 m from the boundary, ~35 m per call: the crossing is
/// foreseen from the second call on as long as calls come less than ~39 s apart (a slow first
/// call, a cold start on a loaded machine, must not make the walker look like standing still).
const NEAR: [f64; 3] = [144.9591, 144.9595, 144.9599];

fn topology(ports: &[u16], prewarm_s: f64) -> String {
    let node = |id: &str, role: &str, area: &str, lon: f64, port: u16| {
        format!(
            "[[node]]\nid = \"{id}\"\nrole = \"{role}\"\nlocation = {{ lat = {LAT}, lon = {lon} }}\n\
             {area}\npublic_url = \"https://127.0.0.1:{port}\"\nlisten = \"127.0.0.1:{port}\"\n\
             [[node.backend]]\nkind = \"local\"\nfunctions_dir = \"../../functions\"\n\n"
        )
    };
    [
        format!("[prewarm]\nprewarm_s = {prewarm_s}\n\n"),
        node(
            "west",
            "edge",
            "area.wkt = \"ENVELOPE (144.90, 144.96, -37.78, -37.84)\"",
            144.93,
            ports[0],
        ),
        node(
            "east",
            "edge",
            "area.wkt = \"ENVELOPE (144.96, 145.02, -37.78, -37.84)\"",
            144.99,
            ports[1],
        ),
        node("cloud", "cloud", "area = \"world\"", 151.21, ports[2]),
        "[[function]]\nname = \"echo\"\n".to_owned(),
    ]
    .concat()
}

/// `curl -i` of `POST /fn/echo` at `node` from a client at longitude `lon`, with `id` as its
/// `X-Client-Id` when given, from a temporary folder.
fn call(c: &Cluster, node: &str, lon: f64, id: Option<&str>, h2: bool) -> Answer {
    call_with(c, node, lon, id, h2, &[])
}

/// [`call`] with `extra` headers.
fn call_with(
    c: &Cluster,
    node: &str,
    lon: f64,
    id: Option<&str>,
    h2: bool,
    extra: &[String],
) -> Answer {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new("curl");
    cmd.current_dir(dir.path())
        .args(["-sS", "-i", if h2 { "--http2" } else { "--http1.1" }])
        .arg("--cacert")
        .arg(c.ca_file.path())
        .args(["-H", &format!("X-Client-Location: {LAT},{lon}")]);
    if let Some(id) = id {
        cmd.args(["-H", &format!("X-Client-Id: {id}")]);
    }
    for h in extra {
        cmd.args(["-H", h]);
    }
    let out = cmd
        .args(["-d", "hi"])
        .arg(format!("{}/fn/echo", c.url(node)))
        .output()
        .expect("curl runs");
    Answer::parse(&String::from_utf8_lossy(&out.stdout))
}

/// The sum of a metric's series at `node` whose labels contain every one of `labels`.
async fn metric(c: &Cluster, node: &str, name: &str, labels: &[&str]) -> f64 {
    let text = c.get(node, "/metrics", None).await.text().await.unwrap();
    text.lines()
        .filter(|l| l.starts_with(name) && labels.iter().all(|want| l.contains(want)))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

/// Waits until west has heard back from east about a pre-warm request (the request leaves
/// in the background); panics after a minute.
async fn until_east_answered(c: &Cluster) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while metric(
        c,
        "west",
        "geofaas_prewarm_requests_total",
        &["to=\"east\""],
    )
    .await
        < 1.0
    {
        assert!(Instant::now() < deadline, "west never heard back from east");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Walks `id` along [`WALK`] at west, then across: the 307, and the first call at east.
async fn walk_across(c: &Cluster, id: Option<&str>, h2: bool, wait_for_prewarm: bool) -> Answer {
    for lon in WALK {
        let a = call(c, "west", lon, id, h2);
        assert_eq!((a.status, a.header("x-served-by")), (200, "west"), "{a:?}");
    }
    if wait_for_prewarm {
        until_east_answered(c).await;
    }
    let handover = call(c, "west", ACROSS, id, h2);
    assert_eq!(handover.status, 307, "{handover:?}");
    assert_eq!(
        handover.header("location"),
        format!("{}/fn/echo", c.url("east"))
    );
    let first = call(c, "east", ACROSS, id, h2);
    assert_eq!(
        (first.status, first.header("x-served-by")),
        (200, "east"),
        "{first:?}"
    );
    assert_eq!(first.body, "hi");
    first
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_call_after_a_walk_across_is_warm_with_prewarming_and_cold_without() {
    for h2 in [true, false] {
        let on = Cluster::start_with(|ports| topology(ports, 10.0)).await;
        let first = walk_across(&on, Some("walker"), h2, true).await;
        assert_eq!(first.header("x-cold-start"), "false", "h2={h2}: {first:?}");
        assert_eq!(first.header("x-placement"), "local-warm", "h2={h2}");
        let started = &["outcome=\"started\""];
        assert_eq!(
            metric(&on, "west", "geofaas_prewarm_requests_total", started).await,
            1.0
        );
        assert_eq!(
            metric(&on, "east", "geofaas_prewarm_instances_started_total", &[]).await,
            1.0
        );
        assert_eq!(
            metric(&on, "east", "geofaas_prewarm_instances_used_total", &[]).await,
            1.0
        );
        assert_eq!(
            metric(&on, "east", "geofaas_prewarm_instances_wasted_total", &[]).await,
            0.0
        );
        on.stop().await;

        let off = Cluster::start_with(|ports| topology(ports, 0.0)).await;
        let first = walk_across(&off, Some("walker"), h2, false).await;
        assert_eq!(first.header("x-cold-start"), "true", "h2={h2}: {first:?}");
        assert_eq!(first.header("x-placement"), "local-new", "h2={h2}");
        assert_eq!(
            metric(&off, "west", "geofaas_prewarm_requests_total", &[]).await,
            0.0
        );
        assert_eq!(
            metric(&off, "west", "geofaas_prewarm_tracked_clients", &[]).await,
            0.0
        );
        assert_eq!(
            metric(&off, "east", "geofaas_prewarm_instances_started_total", &[]).await,
            0.0
        );
        off.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_prewarm_for_a_client_without_an_id_or_one_standing_still() {
    let c = Cluster::start_with(|ports| topology(ports, 10.0)).await;
    // Walking the same path without an id: served, never tracked.
    for lon in WALK {
        let a = call(&c, "west", lon, None, true);
        assert_eq!((a.status, a.header("x-served-by")), (200, "west"), "{a:?}");
    }
    // Standing 9 m from the boundary, call after call.
    for _ in 0..5 {
        let a = call(&c, "west", 144.9599, Some("kiosk"), false);
        assert_eq!(a.status, 200, "{a:?}");
    }
    assert_eq!(
        metric(&c, "west", "geofaas_prewarm_tracked_clients", &[]).await,
        1.0,
        "the kiosk only"
    );
    assert_eq!(
        metric(&c, "west", "geofaas_prewarm_requests_total", &[]).await,
        0.0
    );
    assert_eq!(
        metric(&c, "east", "geofaas_prewarm_instances_started_total", &[]).await,
        0.0
    );
    // The anonymous walker's first call at east starts an instance.
    let first = call(&c, "east", ACROSS, None, true);
    assert_eq!(first.header("x-cold-start"), "true", "{first:?}");
    // A client with an id on the same walk is predicted: the counters above could have moved.
    for lon in WALK {
        assert_eq!(call(&c, "west", lon, Some("walker"), false).status, 200);
    }
    until_east_answered(&c).await;
    assert_eq!(
        metric(&c, "west", "geofaas_prewarm_tracked_clients", &[]).await,
        2.0
    );
    // east has an idle instance already (the walker's): nothing new started.
    let already = &["outcome=\"already_warm\""];
    assert_eq!(
        metric(&c, "west", "geofaas_prewarm_requests_total", already).await,
        1.0
    );
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_up_request_needs_a_node_signature() {
    let c = Cluster::start_with(|ports| topology(ports, 10.0)).await;
    let forged = "X-GeoFaaS-Offload: west;1;00";
    for (h2, headers) in [(true, vec![]), (false, vec![forged])] {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new("curl");
        cmd.current_dir(dir.path())
            .args([
                "-sS",
                "-i",
                "-X",
                "POST",
                if h2 { "--http2" } else { "--http1.1" },
            ])
            .arg("--cacert")
            .arg(c.ca_file.path());
        for h in headers {
            cmd.args(["-H", h]);
        }
        let out = cmd
            .arg(format!("{}/node/warm/echo", c.url("east")))
            .output()
            .unwrap();
        let a = Answer::parse(&String::from_utf8_lossy(&out.stdout));
        assert_eq!(a.status, 401, "h2={h2}: {a:?}");
        assert!(a.body.contains("\"unauthorized\""), "{}", a.body);
    }
    assert_eq!(
        metric(&c, "east", "geofaas_prewarm_instances_started_total", &[]).await,
        0.0
    );
    c.stop().await;
}

/// `Link: <https://127.0.0.1:port>; rel=preconnect` for `node` of `c`.
fn preconnect_to(c: &Cluster, node: &str) -> String {
    format!("<{}>; rel=preconnect", c.url(node))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_walker_about_to_cross_is_told_to_preconnect_to_the_next_node_over_h1_and_h2() {
    let c = Cluster::start_with(|ports| topology(ports, 10.0)).await;
    for h2 in [true, false] {
        let id = format!("walker-h2-{h2}");
        let links: Vec<String> = NEAR
            .iter()
            .map(|&lon| {
                let a = call(&c, "west", lon, Some(&id), h2);
                assert_eq!((a.status, a.header("x-served-by")), (200, "west"), "{a:?}");
                a.header("link").to_owned()
            })
            .collect();
        // One fix is no heading; from the second on, every answer names east.
        let want = preconnect_to(&c, "east");
        assert_eq!(links, ["", want.as_str(), want.as_str()], "h2={h2}");
        // The 307 that follows names the same origin.
        let handover = call(&c, "west", ACROSS, Some(&id), h2);
        assert_eq!(handover.status, 307, "{handover:?}");
        assert!(
            handover.header("location").starts_with(&c.url("east")),
            "{handover:?}"
        );
        assert_eq!(handover.header("link"), "", "a 307 names the node itself");

        // The same walk without an id, and a client standing 9 m from the boundary: no hint.
        for lon in WALK {
            let a = call(&c, "west", lon, None, h2);
            assert_eq!((a.status, a.header("link")), (200, ""), "h2={h2}: {a:?}");
        }
        for _ in 0..4 {
            let a = call(&c, "west", 144.9599, Some(&format!("kiosk-{h2}")), h2);
            assert_eq!((a.status, a.header("link")), (200, ""), "h2={h2}: {a:?}");
        }
    }
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_another_node_signed_gets_no_preconnect_hint() {
    let c = Cluster::start_with(|ports| topology(ports, 10.0)).await;
    // West of west's area (its western edge is 144.90), walking east into it: the cloud serves
    // these calls and foresees the crossing into west.
    let walk = [144.8990, 144.8994, 144.8998];
    let key = c
        .nodes
        .iter()
        .find(|n| n.state.place.id == "cloud")
        .and_then(|n| n.state.links.key.clone())
        .expect("the cloud has the offload secret");
    for (h2, signed) in [(true, true), (false, true), (true, false), (false, false)] {
        let id = format!("walker-{h2}-{signed}");
        let mut links = Vec::new();
        for lon in walk {
            let extra = if signed {
                vec![
                    format!(
                        "X-GeoFaaS-Offload: {}",
                        key.sign("east", "POST", "/fn/echo")
                    ),
                    "X-Geo-Source: header".to_owned(),
                    format!("X-Geo-Location: {LAT},{lon}"),
                ]
            } else {
                vec![]
            };
            let a = call_with(&c, "cloud", lon, Some(&id), h2, &extra);
            assert_eq!((a.status, a.header("x-served-by")), (200, "cloud"), "{a:?}");
            links.push(a.header("link").to_owned());
        }
        let want = if signed {
            String::new()
        } else {
            preconnect_to(&c, "west")
        };
        assert_eq!(links[1..], [want.clone(), want], "h2={h2} signed={signed}");
    }
    c.stop().await;
}

/// The loadtest's client of `c` entering at west, as `id`, acting on hints if `preconnect`.
fn geo_client(c: &Cluster, id: &str, h2: bool, preconnect: bool) -> GeoClient {
    let url = |node: &str| Url::parse(&c.url(node)).unwrap();
    let mut cfg = ClientConfig::new(url("west"), url("cloud"));
    cfg.ca_pem = Some(std::fs::read(c.ca_file.path()).unwrap());
    cfg.http = if h2 {
        HttpVersion::Http2
    } else {
        HttpVersion::Http1
    };
    cfg.client_id = Some(id.to_owned());
    cfg.preconnect = preconnect;
    // The walk's first call may start an instance on a loaded machine: no retry at the cloud.
    cfg.timeout = Duration::from_secs(60);
    GeoClient::new(&cfg).unwrap()
}

fn echo_at(lon: f64) -> CallRequest {
    CallRequest {
        function: "echo".into(),
        location: Some(LatLon::new(LAT, lon).unwrap()),
        body: bytes::Bytes::from_static(b"hi"),
        idempotency_key: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loadtest_client_preconnects_so_its_handover_call_finds_a_connection_open() {
    let c = Cluster::start_with(|ports| topology(ports, 10.0)).await;
    let east = Url::parse(&c.url("east")).unwrap();
    for (h2, preconnect) in [(true, true), (false, true), (true, false), (false, false)] {
        let client = geo_client(&c, &format!("walker-{h2}-{preconnect}"), h2, preconnect);
        let mut last = None;
        for lon in NEAR {
            let r = client.call(&echo_at(lon)).await;
            assert_eq!(r.served_by.as_deref(), Some("west"), "{r:?}");
            last = Some(r);
        }
        let hinted = last.unwrap().preconnect_hints;
        assert_eq!(hinted, std::slice::from_ref(&east), "h2={h2}");
        if preconnect {
            // Hinted twice, preconnected once; wait until its request is answered.
            assert_eq!(client.preconnects_started(), 1, "h2={h2}");
            let deadline = Instant::now() + Duration::from_secs(30);
            while client.preconnects_finished() < 1 {
                assert!(Instant::now() < deadline, "the preconnect never finished");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            // West (again, if a loaded machine made the client reconnect), then east ahead.
            assert!(client.connections_opened() >= 2, "west, then east ahead");
        } else {
            assert_eq!(client.preconnects_started(), 0);
            assert!(client.connections_opened() >= 1, "west");
        }
        // Let the last answer's connection back into the pool first: a request that finds no
        // idle connection to west starts a connect beside its checkout (hyper-util's pool), which
        // is counted even when the checkout wins; on a loaded machine that made the handover's
        // count one too many (2 where 1 was expected, HTTP/1.1 without preconnect).
        tokio::time::sleep(Duration::from_millis(100)).await;
        let opened = client.connections_opened();
        let handover = client.call(&echo_at(ACROSS)).await;
        assert_eq!(
            (handover.served_by.as_deref(), handover.redirects),
            (Some("east"), 1),
            "{handover:?}"
        );
        assert_eq!(&handover.body[..], b"hi");
        let want = if preconnect { 0 } else { 1 };
        assert_eq!(
            handover.new_connections,
            want,
            "h2={h2} preconnect={preconnect}: a connection to east {}",
            if preconnect {
                "was open already"
            } else {
                "had to be opened"
            }
        );
        assert_eq!(client.connections_opened(), opened + want, "h2={h2}");
        assert!(handover.redirect_time > Duration::ZERO);
        assert!(handover.redirect_time < handover.latency);
    }
    c.stop().await;
}
