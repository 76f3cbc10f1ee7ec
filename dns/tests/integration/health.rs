//! Withdrawn gateways are not answered: driven through the health table, and by real HTTPS gateways
//! (rustls, a CA made with rcgen) that are stopped and started again mid-test.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use geofaas_dns::{HealthMode, MmdbSchema};
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

use crate::support::*;

#[tokio::test]
async fn withdrawn_edges_fall_back_to_the_next_nearest_then_the_cloud() {
    let s = start_manual().await;
    let berlin = "192.0.2.1/24";
    assert_eq!(first_a(&gw_for(s.addr, berlin).await), Some(TU_BERLIN));
    s.health.set("tu-berlin", false);
    assert_eq!(
        first_a(&gw_for(s.addr, berlin).await),
        Some(POTSDAM),
        "next-nearest edge"
    );
    s.health.set("potsdam", false);
    assert_eq!(
        first_a(&gw_for(s.addr, berlin).await),
        Some(CLOUD),
        "no edge healthy: cloud"
    );
    s.health.set("cloud", false);
    assert_eq!(
        first_a(&gw_for(s.addr, berlin).await),
        Some(CLOUD),
        "the cloud is the last resort"
    );
    s.health.set("tu-berlin", true);
    assert_eq!(
        first_a(&gw_for(s.addr, berlin).await),
        Some(TU_BERLIN),
        "restored"
    );
    // The node's own name is answered whatever its health.
    let r = query(
        s.addr,
        "potsdam.geofaas.test.",
        hickory_proto::rr::RecordType::A,
        None,
    )
    .await;
    assert_eq!(first_a(&r), Some(POTSDAM));
}

/// Three HTTPS gateways on 127.0.0.11-13 and a DNS server probing their `/readyz`.
struct Probed {
    s: TestServer,
    gateways: Vec<JoinHandle<()>>,
    ports: [u16; 3],
    tls: TlsAcceptor,
    _dir: tempfile::TempDir,
}

/// Starts gateways serving `served`'s certificate and a DNS server whose probes trust `trusted_ca_pem`.
async fn probed(served: &Pki, trusted_ca_pem: &str) -> Probed {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("tls versions")
    .with_no_client_auth()
    .with_single_cert(
        vec![served.cert.clone()],
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(served.key.clone())),
    )
    .expect("server config");
    let tls = TlsAcceptor::from(Arc::new(config));
    let mut ports = [0u16; 3];
    let mut gateways = Vec::new();
    for (i, ip) in [11u8, 12, 13].into_iter().enumerate() {
        let l = TcpListener::bind((Ipv4Addr::new(127, 0, 0, ip), 0))
            .await
            .expect("bind gateway");
        ports[i] = l.local_addr().expect("addr").port();
        gateways.push(gateway(l, tls.clone()));
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, trusted_ca_pem).expect("write ca");
    let s = start(
        topology(ports, 100),
        MmdbSchema::GeoIp2City,
        HealthMode::Probe,
        Some(ca),
    )
    .await;
    Probed {
        s,
        gateways,
        ports,
        tls,
        _dir: dir,
    }
}

/// A CA and a gateway certificate for the three node addresses.
struct Pki {
    ca_pem: String,
    cert: CertificateDer<'static>,
    key: Vec<u8>,
}

fn pki() -> Pki {
    let ca_key = KeyPair::generate().expect("ca key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("ca params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca_params.self_signed(&ca_key).expect("ca cert");
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().expect("leaf key");
    let sans: Vec<String> = ["127.0.0.11", "127.0.0.12", "127.0.0.13"]
        .map(String::from)
        .to_vec();
    let cert = CertificateParams::new(sans)
        .expect("leaf params")
        .signed_by(&key, &issuer)
        .expect("leaf cert");
    Pki {
        ca_pem: ca_cert.pem(),
        cert: cert.der().clone(),
        key: key.serialize_der(),
    }
}

/// A minimal HTTPS gateway answering `200 ok` to every request (enough for `/readyz`).
fn gateway(listener: TcpListener, tls: TlsAcceptor) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut conns = tokio::task::JoinSet::new();
        while let Ok((tcp, _)) = listener.accept().await {
            let tls = tls.clone();
            conns.spawn(async move {
                let Ok(mut s) = tls.accept(tcp).await else {
                    return;
                };
                let mut buf = [0u8; 2048];
                if s.read(&mut buf).await.unwrap_or(0) > 0 {
                    let _ = s
                        .write_all(
                            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                        )
                        .await;
                    let _ = s.shutdown().await;
                }
            });
        }
    })
}

async fn wait_for(addr: SocketAddr, subnet: &str, want: Ipv4Addr) -> bool {
    // Bounded poll: the prober runs every 100 ms; 10 s is far beyond the two intervals it needs.
    for _ in 0..200 {
        if first_a(&gw_for(addr, subnet).await) == Some(want) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test]
async fn a_stopped_https_gateway_is_withdrawn_and_restored_when_back() {
    let pki = pki();
    let Probed {
        s,
        mut gateways,
        ports,
        tls,
        _dir,
    } = probed(&pki, &pki.ca_pem).await;

    let berlin = "192.0.2.1/24";
    assert!(wait_for(s.addr, berlin, TU_BERLIN).await);
    gateways[0].abort();
    let _ = (&mut gateways[0]).await;
    assert!(
        wait_for(s.addr, berlin, POTSDAM).await,
        "tu-berlin withdrawn, potsdam answered"
    );
    assert!(
        s.health.is_healthy_id("potsdam"),
        "potsdam's probe over HTTPS with the CA succeeds"
    );

    let back = TcpListener::bind((Ipv4Addr::new(127, 0, 0, 11), ports[0]))
        .await
        .expect("rebind");
    gateways[0] = gateway(back, tls.clone());
    assert!(
        wait_for(s.addr, berlin, TU_BERLIN).await,
        "tu-berlin restored"
    );
    assert_eq!(
        first_a(
            &exchange_raw(
                s.addr,
                IpAddr::V4(SRC_POTSDAM),
                &query_bytes(
                    "gw.geofaas.test.",
                    hickory_proto::rr::RecordType::A,
                    None,
                    false
                )
            )
            .await
        ),
        Some(POTSDAM)
    );
}

#[tokio::test]
async fn a_gateway_with_an_untrusted_certificate_is_withdrawn() {
    let (trusted, served) = (pki(), pki());
    let Probed {
        s, gateways, _dir, ..
    } = probed(&served, &trusted.ca_pem).await;
    assert!(
        wait_for(s.addr, "192.0.2.1/24", CLOUD).await,
        "no gateway passes TLS: the cloud is answered"
    );
    drop(gateways);
}
