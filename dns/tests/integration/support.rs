//! Shared fixtures: the Berlin topology on test ports, generated databases, a running server, and
//! query helpers.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use geofaas_config::Topology;
use geofaas_dns::{
    write_mmdb, DnsOptions, DnsServer, HealthMode, HealthTable, MmdbEntry, MmdbSchema, UdpEngine,
};
use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query};
use hickory_proto::rr::rdata::opt::{ClientSubnet, EdnsCode, EdnsOption};
use hickory_proto::rr::{Name, RData, RecordType};
use tokio::net::{TcpListener, UdpSocket};
use tokio::sync::oneshot;

const BERLIN_TOML: &str = include_str!("../../../examples/berlin.toml");

/// Answer addresses of the three nodes.
pub const TU_BERLIN: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 11);
pub const POTSDAM: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 12);
pub const CLOUD: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 13);
/// Source addresses the test database places in Berlin and Potsdam (127.0.0.1 is unknown).
pub const SRC_BERLIN: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
pub const SRC_POTSDAM: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 3);

/// The example topology with gateway ports replaced and the probe interval set.
pub fn topology(ports: [u16; 3], probe_interval_ms: u64) -> Topology {
    let mut text = BERLIN_TOML.to_owned();
    for (ip, port) in ["127.0.0.11", "127.0.0.12", "127.0.0.13"].iter().zip(ports) {
        text = text.replace(&format!("{ip}:8443"), &format!("{ip}:{port}"));
    }
    text = text.replace(
        "ttl_s = 30",
        &format!("ttl_s = 30\nprobe_interval_ms = {probe_interval_ms}"),
    );
    Topology::parse(&text, "berlin-test.toml", Path::new(".")).expect("test topology is valid")
}

/// The test database entries: the demo ranges, loopback sources, and a /20 for scope checks.
pub fn entries() -> Vec<MmdbEntry> {
    let mut e = geofaas_geo::write::demo_entries();
    let add = |net: &str, city: &str, lat, lon| MmdbEntry {
        network: net.parse().expect("valid network"),
        city: city.into(),
        country: "DE".into(),
        lat,
        lon,
    };
    e.push(add("127.0.0.2/32", "Berlin", 52.51, 13.32));
    e.push(add("127.0.0.3/32", "Potsdam", 52.40, 13.06));
    e.push(add("10.1.0.0/20", "Berlin", 52.52, 13.40));
    e.push(add("2001:db8:1::/48", "Potsdam", 52.40, 13.06));
    e
}

/// A database in `dir` in the given schema.
pub fn mmdb(dir: &Path, schema: MmdbSchema) -> PathBuf {
    let path = dir.join(format!("{schema:?}.mmdb"));
    write_mmdb(&path, &entries(), schema).expect("test database written");
    path
}

/// A server running on 127.0.0.1 (UDP and TCP on the same port) until dropped.
pub struct TestServer {
    pub addr: SocketAddr,
    pub health: HealthTable,
    stop: Option<oneshot::Sender<()>>,
    _dir: tempfile::TempDir,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Binds UDP on an ephemeral port of 127.0.0.1 and TCP on the same port.
pub async fn bind_pair() -> (UdpSocket, TcpListener) {
    for _ in 0..50 {
        // With SO_REUSEPORT, as the server binds, so that the batched engine adds a second socket.
        let udp = geofaas_dns::udp_batch::bind_reuseport(SocketAddr::from(([127, 0, 0, 1], 0)))
            .expect("bind udp");
        udp.set_nonblocking(true).expect("nonblocking");
        let udp = UdpSocket::from_std(udp).expect("tokio socket");
        let addr = udp.local_addr().expect("udp addr");
        if let Ok(tcp) = TcpListener::bind(addr).await {
            return (udp, tcp);
        }
    }
    panic!("no port free for both UDP and TCP");
}

/// Starts a server for `topo` with the test database in `schema` and the given health source.
pub async fn start(
    topo: Topology,
    schema: MmdbSchema,
    health: HealthMode,
    ca: Option<PathBuf>,
) -> TestServer {
    start_with(topo, schema, health, ca, UdpEngine::default()).await
}

/// [`start`] with a chosen UDP engine.
pub async fn start_with(
    topo: Topology,
    schema: MmdbSchema,
    health: HealthMode,
    ca: Option<PathBuf>,
    udp: UdpEngine,
) -> TestServer {
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = DnsOptions {
        mmdb: Some(mmdb(dir.path(), schema)),
        ca_pem: ca,
        listen: None,
        health,
        udp,
        udp_sockets: Some(2),
    };
    let server = DnsServer::new(&topo, opts).expect("server builds");
    let health = server.health();
    let (udp, tcp) = bind_pair().await;
    let addr = udp.local_addr().expect("addr");
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(server.run(udp, tcp, async {
        let _ = stopped.await;
    }));
    TestServer {
        addr,
        health,
        stop: Some(stop),
        _dir: dir,
    }
}

/// A server with manually controlled health (all healthy) and a GeoIP2-City database.
pub async fn start_manual() -> TestServer {
    start_manual_with(UdpEngine::default()).await
}

/// [`start_manual`] with a chosen UDP engine.
pub async fn start_manual_with(udp: UdpEngine) -> TestServer {
    let topo = topology([8443; 3], 1000);
    let table = HealthTable::new(topo.nodes.iter().map(|n| n.id.clone()));
    start_with(
        topo,
        MmdbSchema::GeoIp2City,
        HealthMode::Manual(table),
        None,
        udp,
    )
    .await
}

/// Both UDP engines.
pub const ENGINES: [UdpEngine; 2] = [UdpEngine::Batched, UdpEngine::Hickory];

/// Encodes a query for `name`/`rtype`, with EDNS and an ECS option when `ecs` is given.
pub fn query_bytes(
    name: &str,
    rtype: RecordType,
    ecs: Option<(IpAddr, u8)>,
    edns: bool,
) -> Vec<u8> {
    let mut msg = Message::new(0x4242, MessageType::Query, OpCode::Query);
    msg.metadata.recursion_desired = true;
    msg.add_query(Query::query(Name::from_ascii(name).expect("name"), rtype));
    if edns || ecs.is_some() {
        let mut e = Edns::new();
        e.set_max_payload(1232);
        if let Some((addr, prefix)) = ecs {
            e.options_mut()
                .insert(EdnsOption::Subnet(ClientSubnet::new(addr, prefix, 0)));
        }
        msg.set_edns(e);
    }
    msg.to_vec().expect("encodes")
}

/// Sends raw bytes over UDP from `from` and returns the raw reply.
pub async fn reply_bytes(server: SocketAddr, from: IpAddr, bytes: &[u8]) -> Vec<u8> {
    let sock = UdpSocket::bind(SocketAddr::new(from, 0))
        .await
        .expect("bind client");
    sock.send_to(bytes, server).await.expect("send");
    let mut buf = vec![0u8; 4096];
    let (n, _) = tokio::time::timeout(Duration::from_secs(5), sock.recv_from(&mut buf))
        .await
        .expect("a reply within 5 s")
        .expect("recv");
    buf.truncate(n);
    buf
}

/// Sends raw bytes over UDP from `from` and decodes the reply.
pub async fn exchange_raw(server: SocketAddr, from: IpAddr, bytes: &[u8]) -> Message {
    Message::from_vec(&reply_bytes(server, from, bytes).await).expect("reply decodes")
}

/// Queries over UDP from 127.0.0.1.
pub async fn query(
    server: SocketAddr,
    name: &str,
    rtype: RecordType,
    ecs: Option<(IpAddr, u8)>,
) -> Message {
    exchange_raw(
        server,
        IpAddr::V4(Ipv4Addr::LOCALHOST),
        &query_bytes(name, rtype, ecs, true),
    )
    .await
}

/// The first A record of a reply.
pub fn first_a(msg: &Message) -> Option<Ipv4Addr> {
    msg.answers.iter().find_map(|r| match &r.data {
        RData::A(a) => Some(a.0),
        _ => None,
    })
}

/// The ECS option of a reply as (source prefix, scope prefix).
pub fn ecs_of(msg: &Message) -> Option<(u8, u8)> {
    match msg.edns.as_ref()?.option(EdnsCode::Subnet)? {
        EdnsOption::Subnet(s) => Some((s.source_prefix(), s.scope_prefix())),
        _ => None,
    }
}

/// `gw` A for an ECS subnet like `"192.0.2.1/24"` (host bits cleared first, as resolvers send it).
pub async fn gw_for(server: SocketAddr, subnet: &str) -> Message {
    let net: ipnet::IpNet = subnet.parse().expect("subnet");
    query(
        server,
        "gw.geofaas.test.",
        RecordType::A,
        Some((net.network(), net.prefix_len())),
    )
    .await
}
