//! The hickory-server [`RequestHandler`] that answers the whole zone.
//!
//! `gw.<zone>` A/AAAA is the nearest healthy gateway to the client; `<node-id>.<zone>` is that node;
//! the apex has SOA and NS (`ns.<zone>`, with an A/AAAA record when the server listens on a specific
//! address). Other names in the zone are NXDOMAIN, names outside it REFUSED, and recursion is never
//! offered. A hickory zone handler cannot set the ECS scope of a response, so this handler answers
//! everything itself instead of delegating to a `Catalog`: the zone is a handful of precomputed records.
//!
//! Over UDP the hot query (`gw.<zone>` A/AAAA, with or without ECS) takes a fast path
//! ([`GeoHandler::answer_fast`]) that parses the datagram in place and answers from a wire template per
//! node and record type, built at start by this handler's own hickory encoding; everything else goes
//! through hickory's decoder and encoder ([`GeoHandler::answer_hickory`]). Both give the same bytes.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::net::{IpAddr, SocketAddr};

use hickory_server::net::runtime::Time;
use hickory_server::net::xfer::Protocol;
use hickory_server::proto::op::{
    Edns, Header, HeaderCounts, MessageType, Metadata, OpCode, ResponseCode,
};
use hickory_server::proto::rr::rdata::opt::{ClientSubnet as HickorySubnet, EdnsOption};
use hickory_server::proto::rr::rdata::{A, AAAA, NS, SOA};
use hickory_server::proto::rr::{DNSClass, LowerName, Name, RData, Record, RecordType};
use hickory_server::proto::serialize::binary::BinEncodable;
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::MessageResponseBuilder;

use crate::ecs::{find_client_subnet, ClientSubnet};
use crate::route::{Ranking, Router};
use geofaas_geo::HealthTable;
use geofaas_geo::{GeoDb, NetKey};

mod answer;
mod fast;
mod local;
mod metrics;
mod wire;

use answer::Answer;
use metrics::Metrics;

/// Largest UDP payload this server advertises and uses (the DNS Flag Day 2020 value).
const MAX_PAYLOAD: u16 = 1232;

/// Database networks whose ranking is kept; a GeoLite2-City file has a few million, hot ones stay.
const CACHE_ENTRIES: u64 = 100_000;

/// What a name in the zone stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    Apex,
    Gateway,
    NameServer,
    Node(usize),
}

/// FNV-1a: the name table has a handful of fixed keys from the topology, so it needs no protection
/// against chosen collisions, and SipHash showed in the per-query profile.
#[derive(Default)]
struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for &b in bytes {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }
}

/// A and AAAA records of one node under one owner name.
#[derive(Clone, Debug, Default)]
struct AddrRecords {
    a: Option<Record>,
    aaaa: Option<Record>,
}

impl AddrRecords {
    fn new(
        owner: &Name,
        ttl: u32,
        v4: Option<std::net::Ipv4Addr>,
        v6: Option<std::net::Ipv6Addr>,
    ) -> Self {
        Self {
            a: v4.map(|ip| Record::from_rdata(owner.clone(), ttl, RData::A(A(ip)))),
            aaaa: v6.map(|ip| Record::from_rdata(owner.clone(), ttl, RData::AAAA(AAAA(ip)))),
        }
    }

    fn get(&self, rtype: RecordType) -> Option<&Record> {
        match rtype {
            RecordType::A => self.a.as_ref(),
            RecordType::AAAA => self.aaaa.as_ref(),
            _ => None,
        }
    }
}

/// The fast path's data: the hot name and the response templates.
#[derive(Debug, Default)]
struct HotTemplates {
    /// `gw.<zone>` in wire format, lower case.
    qname: Box<[u8]>,
    /// Per node, the responses for A and for AAAA (see `build_templates`); `None` if one would not fit.
    templates: Vec<[Option<Box<[u8]>>; 2]>,
}

/// Answers the topology's zone; see the module docs.
pub struct GeoHandler {
    zone: LowerName,
    names: HashMap<LowerName, Target, BuildHasherDefault<Fnv>>,
    soa: Record,
    ns: Record,
    ns_addr: AddrRecords,
    gateway: Vec<AddrRecords>,
    node: Vec<AddrRecords>,
    router: Router,
    health: HealthTable,
    geo: Option<GeoDb>,
    cache: moka::sync::Cache<NetKey, Ranking>,
    metrics: Metrics,
    hot: HotTemplates,
    /// Process-unique, the key of this handler's entries in the per-thread caches (`local`).
    id: u64,
}

impl std::fmt::Debug for GeoHandler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GeoHandler")
            .field("zone", &self.zone)
            .field("geo", &self.geo)
            .finish_non_exhaustive()
    }
}

impl GeoHandler {
    /// Builds the handler for `zone` (with trailing dot) from a routing table, the shared health flags,
    /// an optional database (without one every client is unlocated and gets the cloud), the TTL of
    /// answers in seconds, and the address the server listens on (for `ns.<zone>`).
    pub fn new(
        zone: &str,
        router: Router,
        health: HealthTable,
        geo: Option<GeoDb>,
        ttl: u32,
        listen: Option<IpAddr>,
    ) -> Result<Self, crate::DnsError> {
        let bad = |e: hickory_server::proto::ProtoError| {
            crate::DnsError::Topology(format!("zone {zone:?}: {e}"))
        };
        let apex = Name::from_ascii(zone).map_err(bad)?;
        let child = |label: &str| {
            Name::from_ascii(label)
                .and_then(|l| l.append_domain(&apex))
                .map_err(bad)
        };
        let (gw, ns_name) = (child("gw")?, child("ns")?);
        let mut names = HashMap::default();
        let mut node = Vec::new();
        for (i, n) in router.nodes().iter().enumerate() {
            let owner = child(&n.id)?;
            node.push(AddrRecords::new(&owner, ttl, n.v4, n.v6));
            names.insert(LowerName::new(&owner), Target::Node(i));
        }
        // The fixed names win over node ids that collide with them.
        names.insert(LowerName::new(&apex), Target::Apex);
        names.insert(LowerName::new(&gw), Target::Gateway);
        if names
            .insert(LowerName::new(&ns_name), Target::NameServer)
            .is_some()
        {
            tracing::warn!("a node named \"ns\" is shadowed by the zone's name server name");
        }
        let gateway = router
            .nodes()
            .iter()
            .map(|n| AddrRecords::new(&gw, ttl, n.v4, n.v6))
            .collect();
        let hostmaster = child("hostmaster")?;
        let soa = SOA::new(ns_name.clone(), hostmaster, 1, 3600, 600, 86_400, ttl);
        let (v4, v6) = match listen.filter(|ip| !ip.is_unspecified()) {
            Some(IpAddr::V4(ip)) => (Some(ip), None),
            Some(IpAddr::V6(ip)) => (None, Some(ip)),
            None => (None, None),
        };
        let metrics = Metrics::new(router.nodes());
        let mut handler = Self {
            zone: LowerName::new(&apex),
            names,
            soa: Record::from_rdata(apex.clone(), ttl, RData::SOA(soa)),
            ns: Record::from_rdata(apex, ttl, RData::NS(NS(ns_name.clone()))),
            ns_addr: AddrRecords::new(&ns_name, ttl, v4, v6),
            gateway,
            node,
            router,
            health,
            geo,
            cache: moka::sync::Cache::new(CACHE_ENTRIES),
            metrics,
            hot: HotTemplates::default(),
            id: local::next_id(),
        };
        handler.hot = handler.build_templates(&gw)?;
        Ok(handler)
    }

    /// The node `gw.<zone>` gives this client, and the ECS scope prefix of that answer.
    fn choose(&self, src: IpAddr, ecs: Option<&ClientSubnet>) -> (usize, u8) {
        let (ip, from_ecs) = match ecs {
            Some(e) if e.source_prefix > 0 => (e.addr, true),
            _ => (src.to_canonical(), false),
        };
        let Some(geo) = &self.geo else {
            return (self.router.pick(&[], &self.health), 0);
        };
        let miss = || match geo.locate_with(
            ip,
            |net| self.cache.get(net),
            |loc| self.router.ranking(loc),
        ) {
            Ok((net, ranking, built)) => {
                if built {
                    self.cache.insert(net, ranking.clone());
                }
                (Some(net.1), ranking)
            }
            Err(e) => {
                tracing::debug!(%ip, error = %e, "client not located");
                (None, Ranking::from([]))
            }
        };
        local::with(self.id, ip, miss, |prefix, ranking| {
            let scope = if from_ecs { prefix.unwrap_or(0) } else { 0 };
            (self.router.pick(ranking, &self.health), scope)
        })
    }

    /// Works out the answer to a decoded, single-question query.
    fn answer(&self, request: &Request, ecs: Option<&ClientSubnet>) -> Answer<'_> {
        let Ok(info) = request.request_info() else {
            return Answer::error(ResponseCode::FormErr);
        };
        let (qname, qtype) = (info.query.name(), info.query.query_type());
        if info.query.query_class() != DNSClass::IN || !self.zone.zone_of(qname) {
            return Answer::error(ResponseCode::Refused);
        }
        let Some(&target) = self.names.get(qname) else {
            return Answer::negative(ResponseCode::NXDomain, &self.soa);
        };
        let record = match target {
            Target::Apex => match qtype {
                RecordType::SOA => Some(&self.soa),
                RecordType::NS => Some(&self.ns),
                _ => None,
            },
            Target::NameServer => self.ns_addr.get(qtype),
            Target::Node(i) => self.node.get(i).and_then(|r| r.get(qtype)),
            Target::Gateway if matches!(qtype, RecordType::A | RecordType::AAAA) => {
                let (node, scope) = self.choose(request.src().ip(), ecs);
                self.metrics.answered(node);
                let record = self.gateway.get(node).and_then(|r| r.get(qtype));
                return Answer::records(record, &self.soa, scope);
            }
            Target::Gateway => None,
        };
        Answer::records(record, &self.soa, 0)
    }

    /// Encodes `answer` to `request` and hands it to `response_handle`, echoing `ecs` with the
    /// answer's scope when the request has EDNS. The one place responses are built: the fast path's
    /// templates come from here too.
    async fn send<R: ResponseHandler>(
        &self,
        request: &Request,
        ecs: Option<&ClientSubnet>,
        answer: Answer<'_>,
        mut response_handle: R,
    ) -> ResponseInfo {
        let edns = request.edns.as_ref().map(|_| {
            let mut e = Edns::new();
            e.set_max_payload(MAX_PAYLOAD);
            if let Some(ecs) = ecs {
                let mut echo = HickorySubnet::new(ecs.addr, ecs.source_prefix, answer.scope);
                echo.set_scope_prefix(answer.scope);
                e.options_mut().insert(EdnsOption::Subnet(echo));
            }
            e
        });
        let mut metadata = Metadata::response_from_request(&request.metadata);
        metadata.authoritative = answer.rcode != ResponseCode::Refused;
        metadata.response_code = answer.rcode;
        let mut builder = MessageResponseBuilder::new(&request.queries, None);
        if let Some(edns) = &edns {
            builder.edns(edns);
        }
        let response = builder.build(metadata, answer.answer, None, answer.soa, None);
        match response_handle.send_response(response).await {
            Ok(info) => info,
            Err(e) => {
                tracing::debug!(error = %e, "could not send response");
                metadata.response_code = ResponseCode::ServFail;
                ResponseInfo::from(Header {
                    metadata,
                    counts: HeaderCounts::default(),
                })
            }
        }
    }

    /// Answers the UDP datagram `raw` from `src` into `out`: through the fast path when it is the hot
    /// query, else through hickory's decoder, this handler and hickory's encoder. Returns `false` when
    /// nothing is to be sent (shorter than a header, or a response).
    pub fn answer_udp(&self, raw: &[u8], src: SocketAddr, out: &mut Vec<u8>) -> bool {
        if raw.get(2).is_some_and(|flags| flags & 0x80 != 0) {
            return false;
        }
        if self.answer_fast(raw, src, out) {
            return true;
        }
        match self.answer_hickory(raw, src) {
            Some(bytes) => {
                *out = bytes;
                true
            }
            None => false,
        }
    }

    /// The fast path alone (see the module docs): writes the response into `out` and
    /// returns `true` when `raw` is the hot query (`gw.<zone>` A/AAAA, class IN, one question, at most
    /// an OPT record with a valid ECS option), `false` without touching `out` for anything else.
    pub fn answer_fast(&self, raw: &[u8], src: SocketAddr, out: &mut Vec<u8>) -> bool {
        let Some(q) = fast::parse(raw, &self.hot.qname) else {
            return false;
        };
        let (node, scope) = self.choose(src.ip(), q.ecs());
        let Some(template) = self
            .hot
            .templates
            .get(node)
            .and_then(|t| t[usize::from(q.aaaa)].as_deref())
        else {
            return false;
        };
        self.metrics.answered(node);
        self.metrics.rcode(ResponseCode::NoError);
        fast::write(out, template, &q, scope);
        true
    }

    /// The hickory path alone, what every query took before the fast path: the response to `raw` from
    /// `src`, or `None` to stay silent. The differential tests compare the fast path against it.
    pub fn answer_hickory(&self, raw: &[u8], src: SocketAddr) -> Option<Vec<u8>> {
        wire::answer_with_hickory(self, raw, src)
    }

    /// Builds the fast path's templates: for each node and A/AAAA, the response hickory's path gives to
    /// the canonical query for `gw.<zone>` (id 0, no flags, no EDNS) when that node is chosen.
    fn build_templates(&self, gw: &Name) -> Result<HotTemplates, crate::DnsError> {
        let qname = gw
            .to_lowercase()
            .to_bytes()
            .map_err(|e| crate::DnsError::Topology(format!("gw name: {e}")))?;
        let src = SocketAddr::from(([0, 0, 0, 0], 0));
        let template = |node: &AddrRecords, rtype: RecordType| {
            let mut query = vec![0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0];
            query.extend_from_slice(&qname);
            query.extend_from_slice(&u16::from(rtype).to_be_bytes());
            query.extend_from_slice(&u16::from(DNSClass::IN).to_be_bytes());
            let request = Request::from_bytes(query, src, Protocol::Udp).ok()?;
            let capture = wire::Capture::default();
            let answer = Answer::records(node.get(rtype), &self.soa, 0);
            wire::block_on(self.send(&request, None, answer, capture.clone()));
            capture
                .take()
                .filter(|t| fast::fits(t))
                .map(Vec::into_boxed_slice)
        };
        let templates = self
            .gateway
            .iter()
            .map(|n| [template(n, RecordType::A), template(n, RecordType::AAAA)])
            .collect();
        Ok(HotTemplates {
            qname: qname.into_boxed_slice(),
            templates,
        })
    }
}

#[async_trait::async_trait]
impl RequestHandler for GeoHandler {
    async fn handle_request<R: ResponseHandler, T: Time>(
        &self,
        request: &Request,
        response_handle: R,
    ) -> ResponseInfo {
        let ecs = match request.edns.as_ref() {
            Some(_) => find_client_subnet(request.as_slice()),
            None => Ok(None),
        };
        let answer = if request.metadata.message_type != MessageType::Query
            || request.metadata.op_code != OpCode::Query
        {
            Answer::error(ResponseCode::NotImp)
        } else if request.edns.as_ref().is_some_and(|e| e.version() > 0) {
            Answer::error(ResponseCode::BADVERS)
        } else {
            match &ecs {
                Err(e) => {
                    tracing::debug!(src = %request.src(), error = %e, "FORMERR: bad ECS option");
                    Answer::error(ResponseCode::FormErr)
                }
                Ok(ecs) => self.answer(request, ecs.as_ref()),
            }
        };
        self.metrics.rcode(answer.rcode);
        self.send(
            request,
            ecs.ok().flatten().as_ref(),
            answer,
            response_handle,
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use geofaas_geo::write::{demo_entries, write_mmdb, MmdbEntry, MmdbSchema};

    #[test]
    fn the_location_cache_holds_one_entry_per_database_network() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("t.mmdb");
        let mut entries = demo_entries();
        entries.push(MmdbEntry {
            network: "10.1.0.0/16".parse().expect("net"),
            city: "Berlin".into(),
            country: "DE".into(),
            lat: 52.52,
            lon: 13.40,
        });
        write_mmdb(&path, &entries, MmdbSchema::GeoIp2City).expect("written");
        let text = include_str!("../../examples/berlin.toml");
        let topo = geofaas_config::Topology::parse(text, "berlin.toml", std::path::Path::new("."))
            .expect("topology");
        let router = Router::new(&topo).expect("router");
        let health = HealthTable::new(router.nodes().iter().map(|n| n.id.clone()));
        let geo = GeoDb::open(&path).expect("db");
        let h = GeoHandler::new(&topo.zone, router, health, Some(geo), 30, None).expect("handler");
        let src = IpAddr::from([127, 0, 0, 1]);
        for third in 0..=255u8 {
            let ecs = ClientSubnet {
                addr: IpAddr::from([10, 1, third, 0]),
                source_prefix: 24,
                scope_prefix: 0,
            };
            let (node, scope) = h.choose(src, Some(&ecs));
            assert_eq!(
                (h.router.nodes()[node].id.as_str(), scope),
                ("tu-berlin", 16)
            );
        }
        h.cache.run_pending_tasks();
        assert_eq!(
            h.cache.entry_count(),
            1,
            "256 client subnets, one database network"
        );
    }
}
