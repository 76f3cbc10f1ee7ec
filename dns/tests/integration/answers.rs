//! Answers a user sees: the nearest gateway by ECS and by source address, ECS scope, node names, the
//! apex, NXDOMAIN/REFUSED, TCP, and the DB-IP flat schema.

use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

use geofaas_dns::{HealthMode, HealthTable, MmdbSchema};
use hickory_net::client::{Client, ClientHandle};
use hickory_net::runtime::TokioRuntimeProvider;
use hickory_net::tcp::TcpClientStream;
use hickory_net::udp::UdpClientStream;
use hickory_proto::op::ResponseCode;
use hickory_proto::rr::{DNSClass, Name, RData, RecordType};

use crate::support::*;

#[tokio::test]
async fn ecs_picks_the_edge_of_the_client_area_and_echoes_the_network_scope() {
    for engine in ENGINES {
        ecs_answers_on(engine).await;
    }
}

async fn ecs_answers_on(engine: geofaas_dns::UdpEngine) {
    let s = start_manual_with(engine).await;
    for (subnet, want) in [
        ("192.0.2.1/24", TU_BERLIN),
        ("198.51.100.1/24", POTSDAM),
        ("203.0.113.1/24", CLOUD),
    ] {
        let r = gw_for(s.addr, subnet).await;
        assert_eq!(r.metadata.response_code, ResponseCode::NoError, "{subnet}");
        assert_eq!(first_a(&r), Some(want), "{subnet}");
        assert_eq!(
            ecs_of(&r),
            Some((24, 24)),
            "{subnet}: scope is the database's /24"
        );
        assert_eq!(r.answers[0].ttl, 30);
    }
    // A /24 inside the database's 10.1.0.0/20: the answer holds for the whole /20.
    let r = gw_for(s.addr, "10.1.2.0/24").await;
    assert_eq!((first_a(&r), ecs_of(&r)), (Some(TU_BERLIN), Some((24, 20))));
    // Not in the database: the cloud.
    let r = gw_for(s.addr, "100.64.7.0/24").await;
    assert_eq!(first_a(&r), Some(CLOUD));
    assert_eq!(ecs_of(&r).map(|e| e.0), Some(24));
}

#[tokio::test]
async fn without_ecs_the_resolver_source_address_is_located() {
    for engine in ENGINES {
        source_address_answers_on(engine).await;
    }
}

async fn source_address_answers_on(engine: geofaas_dns::UdpEngine) {
    let s = start_manual_with(engine).await;
    for (src, want) in [
        (SRC_BERLIN, TU_BERLIN),
        (SRC_POTSDAM, POTSDAM),
        (std::net::Ipv4Addr::LOCALHOST, CLOUD),
    ] {
        let q = query_bytes("gw.geofaas.test.", RecordType::A, None, true);
        let r = exchange_raw(s.addr, IpAddr::V4(src), &q).await;
        assert_eq!(first_a(&r), Some(want), "from {src}");
        assert_eq!(ecs_of(&r), None, "no ECS in the query, none in the reply");
    }
    // ECS with source prefix 0 means "do not use my subnet": the source address decides, scope 0.
    let q = query_bytes(
        "gw.geofaas.test.",
        RecordType::A,
        Some(("0.0.0.0".parse().expect("ip"), 0)),
        true,
    );
    let r = exchange_raw(s.addr, IpAddr::V4(SRC_POTSDAM), &q).await;
    assert_eq!((first_a(&r), ecs_of(&r)), (Some(POTSDAM), Some((0, 0))));
}

#[tokio::test]
async fn node_names_apex_and_negative_answers() {
    let s = start_manual().await;
    let r = query(s.addr, "Potsdam.GeoFaaS.test.", RecordType::A, None).await;
    assert_eq!(first_a(&r), Some(POTSDAM), "names are case-insensitive");
    assert!(r.metadata.authoritative && !r.metadata.recursion_available);

    let r = query(
        s.addr,
        "gw.geofaas.test.",
        RecordType::AAAA,
        Some(("192.0.2.0".parse().expect("ip"), 24)),
    )
    .await;
    assert_eq!(r.metadata.response_code, ResponseCode::NoError);
    assert!(r.answers.is_empty(), "v4-only nodes have no AAAA");
    assert_eq!(r.authorities.len(), 1, "SOA for negative caching");

    let r = query(s.addr, "geofaas.test.", RecordType::SOA, None).await;
    assert!(matches!(
        r.answers.first().map(|a| &a.data),
        Some(RData::SOA(_))
    ));
    let r = query(s.addr, "geofaas.test.", RecordType::NS, None).await;
    assert!(matches!(
        r.answers.first().map(|a| &a.data),
        Some(RData::NS(_))
    ));

    let r = query(s.addr, "nothing.geofaas.test.", RecordType::A, None).await;
    assert_eq!(r.metadata.response_code, ResponseCode::NXDomain);
    assert!(r.metadata.authoritative);
    let r = query(s.addr, "example.com.", RecordType::A, None).await;
    assert_eq!(r.metadata.response_code, ResponseCode::Refused);
    assert!(!r.metadata.recursion_available);
}

async fn hickory_a(client: &mut Client<TokioRuntimeProvider>, name: &str) -> Vec<RData> {
    let response = client
        .query(
            Name::from_str(name).expect("name"),
            DNSClass::IN,
            RecordType::A,
        )
        .await
        .expect("query answered");
    response.answers.iter().map(|r| r.data.clone()).collect()
}

#[tokio::test]
async fn hickory_client_over_udp_and_tcp() {
    let s = start_manual().await;
    let provider = TokioRuntimeProvider::new();

    let udp = UdpClientStream::builder(s.addr, provider.clone())
        .with_bind_addr(Some(SocketAddr::new(IpAddr::V4(SRC_POTSDAM), 0)))
        .build();
    let (mut client, bg) = Client::<TokioRuntimeProvider>::from_sender(udp);
    tokio::spawn(bg);
    assert_eq!(
        hickory_a(&mut client, "gw.geofaas.test.").await,
        [RData::A(POTSDAM.into())]
    );
    assert_eq!(
        hickory_a(&mut client, "cloud.geofaas.test.").await,
        [RData::A(CLOUD.into())]
    );

    let bind = Some(SocketAddr::new(IpAddr::V4(SRC_BERLIN), 0));
    let (connect, sender) = TcpClientStream::new(s.addr, bind, None, provider);
    let (mut client, bg) =
        Client::<TokioRuntimeProvider>::new(connect.await.expect("tcp connects"), sender);
    tokio::spawn(bg);
    assert_eq!(
        hickory_a(&mut client, "gw.geofaas.test.").await,
        [RData::A(TU_BERLIN.into())]
    );
    assert_eq!(
        hickory_a(&mut client, "tu-berlin.geofaas.test.").await,
        [RData::A(TU_BERLIN.into())]
    );
}

#[tokio::test]
async fn the_dbip_flat_schema_is_read_too() {
    let topo = topology([8443; 3], 1000);
    let table = HealthTable::new(topo.nodes.iter().map(|n| n.id.clone()));
    let s = start(topo, MmdbSchema::DbIpFlat, HealthMode::Manual(table), None).await;
    assert_eq!(
        first_a(&gw_for(s.addr, "192.0.2.1/24").await),
        Some(TU_BERLIN)
    );
    assert_eq!(
        first_a(&gw_for(s.addr, "198.51.100.1/24").await),
        Some(POTSDAM)
    );
    assert_eq!(
        first_a(&gw_for(s.addr, "203.0.113.1/24").await),
        Some(CLOUD)
    );
}

#[tokio::test]
async fn ipv6_client_subnets_are_located_too() {
    let s = start_manual().await;
    let r = gw_for(s.addr, "2001:db8:1:200::/56").await;
    assert_eq!((first_a(&r), ecs_of(&r)), (Some(POTSDAM), Some((56, 48))));
    let r = gw_for(s.addr, "2001:db8:2::/56").await;
    assert_eq!(first_a(&r), Some(CLOUD));
}
