//! A node's life over real sockets: slow clients cut off, a graceful drain, and topology
//! reloads that drop no call.

use std::sync::Arc;
use std::time::Duration;

use geofaas_config::Topology;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::cluster::{topology_text, Cluster};

const BERLIN: &str = "52.51,13.32";

/// The test cluster with short slow-client timeouts and drain grace.
fn quick(ports: &[u16]) -> String {
    topology_text(ports, 1 << 20).replacen(
        "[areas]",
        "[limits]\nheader_timeout_ms = 300\nbody_timeout_ms = 300\n\n[areas]",
        1,
    )
}

/// A TLS connection speaking HTTP/1.1 to `port` on 127.0.0.1, trusting the CA in file `ca`.
pub(crate) async fn tls_h1(
    ca: &std::path::Path,
    port: u16,
) -> tokio_rustls::client::TlsStream<TcpStream> {
    let pem = std::fs::read(ca).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pemfile::certs(&mut pem.as_slice()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(name, tcp)
        .await
        .unwrap()
}

fn port(c: &Cluster, id: &str) -> u16 {
    c.nodes
        .iter()
        .find(|n| n.state.place.id == id)
        .unwrap()
        .addr
        .port()
}

/// Everything the server sends until it closes the connection (bounded by 20 s).
async fn read_to_close(s: &mut tokio_rustls::client::TlsStream<TcpStream>) -> String {
    let mut out = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(20), async {
        let mut buf = [0u8; 4096];
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    assert!(read.is_ok(), "the server never closed the connection");
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_trickle_headers_or_bodies_are_cut_off() {
    let c = Cluster::start_with(quick).await;
    let p = port(&c, "tu-berlin");
    // Headers that never end: the connection is closed.
    let mut s = tls_h1(c.ca_file.path(), p).await;
    s.write_all(b"POST /fn/echo HTTP/1.1\r\nHost: x\r\nX-Slow: 1\r\n")
        .await
        .unwrap();
    let got = read_to_close(&mut s).await;
    assert!(!got.contains(" 200 "), "{got}");
    // A body that stops arriving: 408.
    let mut s = tls_h1(c.ca_file.path(), p).await;
    s.write_all(b"POST /fn/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nonly ten b")
        .await
        .unwrap();
    let got = read_to_close(&mut s).await;
    assert!(got.starts_with("HTTP/1.1 408"), "{got}");
    assert!(got.contains("body_timeout"), "{got}");
    // Everyone else is served as before.
    let resp = c.post("tu-berlin", "echo", BERLIN, "fine").await;
    assert_eq!(resp.text().await.unwrap(), "fine");
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_node_turns_not_ready_first_and_keeps_answering_through_the_grace() {
    let mut c = Cluster::start(1 << 20).await;
    let url = c.url("tu-berlin");
    let i = c
        .nodes
        .iter()
        .position(|n| n.state.place.id == "tu-berlin")
        .unwrap();
    let node = c.nodes.remove(i);
    let drain = tokio::spawn(node.drain(Duration::from_secs(2)));
    let mut ready = 200;
    for _ in 0..100 {
        ready = c
            .client
            .get(format!("{url}/readyz"))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16();
        if ready == 503 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(ready, 503, "/readyz turns first");
    let resp = c
        .client
        .post(format!("{url}/fn/echo"))
        .header("x-client-location", BERLIN)
        .body("still here")
        .send()
        .await
        .unwrap();
    assert_eq!(
        resp.text().await.unwrap(),
        "still here",
        "calls are answered in the grace"
    );
    drain.await.unwrap().unwrap();
    let fresh = reqwest::Client::builder()
        .add_root_certificate(
            reqwest::Certificate::from_pem(&std::fs::read(c.ca_file.path()).unwrap()).unwrap(),
        )
        .build()
        .unwrap();
    assert!(
        fresh.get(format!("{url}/healthz")).send().await.is_err(),
        "a drained node accepts no new connection"
    );
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloads_apply_valid_topologies_refuse_invalid_ones_and_drop_no_call() {
    let mut ports = Vec::new();
    let c = Cluster::start_with(|p| {
        ports = p.to_vec();
        topology_text(p, 1 << 20)
    })
    .await;
    let base = geofaas_test_support::paths::manifest_dir().join("testdata");
    let parse = |text: &str| Arc::new(Topology::parse(text, "reload.toml", &base).unwrap());
    let plain = topology_text(&ports, 1 << 20);
    let hash = geofaas_gateway::access::sha256_hex("k");
    let keyed =
        format!("{plain}\n[[auth.key]]\nid = \"k\"\nsha256 = \"{hash}\"\nfunctions = [\"*\"]\n");
    let edge = c
        .nodes
        .iter()
        .find(|n| n.state.place.id == "tu-berlin")
        .unwrap();

    // Calls keep coming while the topology is swapped back and forth.
    let url = format!("{}/fn/echo", c.url("tu-berlin"));
    let client = c.client.clone();
    let calls = tokio::spawn(async move {
        let mut statuses = Vec::new();
        for i in 0..60 {
            let resp = client
                .post(&url)
                .header("x-client-location", BERLIN)
                .header("authorization", "Bearer k")
                .body(format!("call {i}"))
                .send()
                .await
                .expect("every call gets an answer");
            statuses.push(resp.status().as_u16());
        }
        statuses
    });
    for i in 0..10 {
        edge.reload(parse(if i % 2 == 0 { &keyed } else { &plain }))
            .unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let statuses = calls.await.unwrap();
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");

    // The keyed topology takes effect: no key, 401.
    edge.reload(parse(&keyed)).unwrap();
    let resp = c.post("tu-berlin", "echo", BERLIN, "x").await;
    assert_eq!(resp.status(), 401);
    // A topology without this node is refused, and the running one stays.
    let without = Topology::parse(
        &plain.replace("id = \"tu-berlin\"", "id = \"elsewhere\""),
        "reload.toml",
        &base,
    )
    .unwrap();
    assert!(edge.reload(Arc::new(without)).is_err());
    let resp = c.post("tu-berlin", "echo", BERLIN, "x").await;
    assert_eq!(
        resp.status(),
        401,
        "the keyed topology is still the running one"
    );
    c.stop().await;
}
