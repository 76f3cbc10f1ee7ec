//! The fast path against the hickory path: the same bytes for the same datagram, over randomised
//! queries (names and spellings, types, classes, header flags, ECS subnets of both families and every
//! prefix length, EDNS on and off, DO, other options, malformed and truncated packets, health states).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

use crate::handler::GeoHandler;
use crate::route::Router;
use crate::GeoDb;
use geofaas_geo::write::{demo_entries, write_mmdb, MmdbEntry, MmdbSchema};
use geofaas_geo::HealthTable;

/// The Berlin topology with potsdam on IPv6 only, so that both A and AAAA have answers and no-data
/// answers; and a database with IPv4 and IPv6 networks of several lengths.
struct Fixture {
    handler: GeoHandler,
    health: HealthTable,
    _dir: tempfile::TempDir,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t.mmdb");
    let mut entries = demo_entries();
    let add = |net: &str, lat, lon| MmdbEntry {
        network: net.parse().expect("network"),
        city: "X".into(),
        country: "DE".into(),
        lat,
        lon,
    };
    entries.push(add("127.0.0.2/32", 52.51, 13.32));
    entries.push(add("127.0.0.3/32", 52.40, 13.06));
    entries.push(add("10.1.0.0/20", 52.52, 13.40));
    entries.push(add("2001:db8:1::/48", 52.40, 13.06));
    entries.push(add("2001:db8:2::/33", 52.51, 13.32));
    write_mmdb(&path, &entries, MmdbSchema::GeoIp2City).expect("database written");
    let text = include_str!("../../../../examples/berlin.toml")
        .replace("https://127.0.0.12:8443", "https://[2001:db8::12]:8443");
    let topo = geofaas_config::Topology::parse(&text, "berlin.toml", std::path::Path::new("."))
        .expect("topology");
    let router = Router::new(&topo).expect("router");
    let health = HealthTable::new(router.nodes().iter().map(|n| n.id.clone()));
    let geo = GeoDb::open(&path).expect("database opens");
    let listen = Some(IpAddr::from([127, 0, 0, 1]));
    let handler = GeoHandler::new(&topo.zone, router, health.clone(), Some(geo), 30, listen)
        .expect("handler");
    Fixture {
        handler,
        health,
        _dir: dir,
    }
}

/// One OPT record as generated.
#[derive(Clone, Debug)]
struct Opt {
    owner_root: bool,
    payload: u16,
    ext_rcode: u8,
    version: u8,
    dnssec_ok: bool,
    z: u16,
    options: Vec<(u16, Vec<u8>)>,
}

/// One query datagram as generated, before encoding.
#[derive(Clone, Debug)]
struct Input {
    id: u16,
    flags: [u8; 2],
    name: Vec<u8>,
    qtype: u16,
    qclass: u16,
    edns: Option<Opt>,
    counts: Option<[u16; 4]>,
    trailing: Vec<u8>,
    cut: Option<usize>,
    flip: Option<(usize, u8)>,
    src: IpAddr,
    healthy: [bool; 3],
}

const GW: &[u8] = b"\x02gw\x07geofaas\x04test\x00";

impl Input {
    fn encode(&self) -> Vec<u8> {
        let counts = self
            .counts
            .unwrap_or([1, 0, 0, u16::from(self.edns.is_some())]);
        let mut m = self.id.to_be_bytes().to_vec();
        m.extend_from_slice(&self.flags);
        for c in counts {
            m.extend_from_slice(&c.to_be_bytes());
        }
        m.extend_from_slice(&self.name);
        m.extend_from_slice(&self.qtype.to_be_bytes());
        m.extend_from_slice(&self.qclass.to_be_bytes());
        if let Some(o) = &self.edns {
            if !o.owner_root {
                m.extend_from_slice(b"\x01x");
            }
            m.extend_from_slice(&[0, 0, 41]);
            m.extend_from_slice(&o.payload.to_be_bytes());
            let flags = (u16::from(o.dnssec_ok) << 15) | (o.z & 0x7FFF);
            m.extend_from_slice(&[o.ext_rcode, o.version]);
            m.extend_from_slice(&flags.to_be_bytes());
            let rdata: Vec<u8> = o
                .options
                .iter()
                .flat_map(|(code, data)| {
                    let mut v = code.to_be_bytes().to_vec();
                    v.extend_from_slice(&(data.len() as u16).to_be_bytes());
                    v.extend_from_slice(data);
                    v
                })
                .collect();
            m.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
            m.extend_from_slice(&rdata);
        }
        m.extend_from_slice(&self.trailing);
        if let Some((at, byte)) = self.flip {
            let at = at % m.len();
            m[at] = byte;
        }
        if let Some(cut) = self.cut {
            m.truncate(cut % (m.len() + 1));
        }
        m
    }

    /// Whether this is the hot query by construction, so the fast path must take it.
    fn is_hot(&self) -> bool {
        let opt_ok = self.edns.as_ref().is_none_or(|o| {
            o.owner_root
                && o.ext_rcode == 0
                && o.version == 0
                && o.z == 0
                && match o.options.as_slice() {
                    [] => true,
                    [(8, data)] => crate::ecs::parse_ecs(data).is_ok(),
                    _ => false,
                }
        });
        self.name == GW
            && matches!(self.qtype, 1 | 28)
            && self.qclass == 1
            && self.flags[0] & 0xFE == 0
            && self.flags[1] & 0xCF == 0
            && self.counts.is_none()
            && self.trailing.is_empty()
            && self.cut.is_none()
            && self.flip.is_none()
            && opt_ok
    }
}

/// Address bases that the database places somewhere, and some it does not.
fn v4_base() -> impl Strategy<Value = u32> {
    prop_oneof![
        Just(0xC000_0200u32), // 192.0.2.0: Berlin
        Just(0xC633_6400),    // 198.51.100.0: Potsdam
        Just(0xCB00_7100),    // 203.0.113.0: London
        Just(0x0A01_0000),    // 10.1.0.0/20: Berlin
        Just(0x7F00_0002),
        Just(0x7F00_0003),
        any::<u32>(),
    ]
}

fn v6_base() -> impl Strategy<Value = u128> {
    prop_oneof![
        Just(0x2001_0db8_0001_u128 << 80),
        Just(0x2001_0db8_0002_u128 << 80),
        Just(0xffff_c000_0200_u128), // ::ffff:192.0.2.0
        any::<u128>(),
    ]
}

/// ECS option data: valid (host bits clear, exact length) for both families and every prefix.
fn valid_ecs() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        (v4_base(), any::<u8>(), 0..=32u8, 0..=32u8).prop_map(|(base, noise, prefix, scope)| {
            let addr = (base | u32::from(noise)) & mask32(prefix);
            ecs_bytes(1, prefix, scope, &addr.to_be_bytes())
        }),
        (v6_base(), any::<u16>(), 0..=128u8, 0..=128u8).prop_map(|(base, noise, prefix, scope)| {
            let addr = (base | u128::from(noise)) & mask128(prefix);
            ecs_bytes(2, prefix, scope, &addr.to_be_bytes())
        }),
    ]
}

/// ECS option data RFC 7871 calls FORMERR.
fn invalid_ecs() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        // Bits set beyond the source prefix.
        (v4_base(), 1..=31u8).prop_filter_map("prefix on a byte boundary", |(base, prefix)| {
            let mut v = ecs_bytes(1, prefix, 0, &(base & mask32(prefix)).to_be_bytes());
            (prefix % 8 != 0).then(|| {
                let last = v.len() - 1;
                v[last] |= 1;
                v
            })
        }),
        (v6_base(), 1..=127u8).prop_filter_map("prefix on a byte boundary", |(base, prefix)| {
            let mut v = ecs_bytes(2, prefix, 0, &(base & mask128(prefix)).to_be_bytes());
            (prefix % 8 != 0).then(|| {
                let last = v.len() - 1;
                v[last] |= 1;
                v
            })
        }),
        // One address octet too many or too few.
        (valid_ecs(), any::<bool>()).prop_map(|(mut v, longer)| {
            if longer {
                v.push(0);
            } else if v.len() > 4 {
                v.pop();
            } else {
                v.push(0);
            }
            v
        }),
        // Unknown family, prefix longer than the family, shorter than 4 octets.
        (3..=0xFFFFu16, 0..=32u8).prop_map(|(family, prefix)| {
            let mut v = family.to_be_bytes().to_vec();
            v.extend_from_slice(&[prefix, 0]);
            v.resize(4 + usize::from(prefix).div_ceil(8), 0);
            v
        }),
        Just(vec![0, 1, 33, 0, 1, 2, 3, 4, 5]),
        Just(vec![0, 2, 129, 0]),
        proptest::collection::vec(any::<u8>(), 0..4),
    ]
}

fn mask32(prefix: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0)
}

fn mask128(prefix: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0)
}

fn ecs_bytes(family: u16, prefix: u8, scope: u8, addr: &[u8]) -> Vec<u8> {
    let mut v = family.to_be_bytes().to_vec();
    v.extend_from_slice(&[prefix, scope]);
    v.extend_from_slice(&addr[..usize::from(prefix).div_ceil(8)]);
    v
}

fn option() -> impl Strategy<Value = (u16, Vec<u8>)> {
    prop_oneof![
        6 => valid_ecs().prop_map(|d| (8, d)),
        2 => invalid_ecs().prop_map(|d| (8, d)),
        1 => proptest::collection::vec(any::<u8>(), 8..=40).prop_map(|d| (10, d)), // cookie
        1 => (any::<u16>(), proptest::collection::vec(any::<u8>(), 0..8)),
    ]
}

fn opt() -> impl Strategy<Value = Opt> {
    let payload = prop_oneof![Just(1232u16), Just(4096), Just(512), Just(0), any::<u16>()];
    let small = |p: u32| prop_oneof![p => Just(0u8), 1 => any::<u8>()];
    let options = prop_oneof![
        2 => Just(Vec::new()),
        6 => option().prop_map(|o| vec![o]),
        1 => proptest::collection::vec(option(), 2..=3),
    ];
    (
        prop::bool::weighted(0.97),
        payload,
        small(19),
        small(19),
        any::<bool>(),
        prop_oneof![19 => Just(0u16), 1 => any::<u16>()],
        options,
    )
        .prop_map(
            |(owner_root, payload, ext_rcode, version, dnssec_ok, z, options)| Opt {
                owner_root,
                payload,
                ext_rcode,
                version,
                dnssec_ok,
                z,
                options,
            },
        )
}

fn name() -> impl Strategy<Value = Vec<u8>> {
    let fixed = |n: &'static [u8]| Just(n.to_vec());
    prop_oneof![
        12 => fixed(GW),
        1 => fixed(b"\x02GW\x07geofaas\x04test\x00"),
        1 => fixed(b"\x02gw\x07GeoFaaS\x04test\x00"),
        1 => fixed(b"\x09tu-berlin\x07geofaas\x04test\x00"),
        1 => fixed(b"\x07potsdam\x07geofaas\x04test\x00"),
        1 => fixed(b"\x07geofaas\x04test\x00"),
        1 => fixed(b"\x02ns\x07geofaas\x04test\x00"),
        1 => fixed(b"\x02nx\x07geofaas\x04test\x00"),
        1 => fixed(b"\x01x\x02gw\x07geofaas\x04test\x00"),
        1 => fixed(b"\x02gw\x07example\x00"),
        1 => fixed(b"\x02gw\xc0\x0c"),           // points at itself: a loop
        1 => fixed(b"\x02gw\x47geofaas\x04test\x00"), // bad label type
        1 => proptest::collection::vec(any::<u8>(), 0..24),
    ]
}

fn input() -> impl Strategy<Value = Input> {
    let qtype = prop_oneof![
        5 => Just(1u16),
        4 => Just(28),
        1 => prop_oneof![Just(6u16), Just(2), Just(15), Just(16), Just(255), any::<u16>()],
    ];
    let qclass =
        prop_oneof![9 => Just(1u16), 1 => prop_oneof![Just(3u16), Just(255), any::<u16>()]];
    let flags = (
        prop_oneof![6 => Just(0u8), 6 => Just(1), 1 => any::<u8>()],
        prop_oneof![6 => Just(0u8), 2 => Just(0x20), 2 => Just(0x10), 1 => any::<u8>()],
    );
    let src = prop_oneof![
        4 => v4_base().prop_map(|a| IpAddr::V4(Ipv4Addr::from(a))),
        1 => v6_base().prop_map(|a| IpAddr::V6(Ipv6Addr::from(a))),
    ];
    let sometimes = |p: f64| prop::bool::weighted(p);
    (
        (any::<u16>(), flags, name(), qtype, qclass),
        prop::option::weighted(0.7, opt()),
        prop::option::weighted(0.04, any::<[u16; 4]>()),
        (
            sometimes(0.04),
            proptest::collection::vec(any::<u8>(), 1..4),
        ),
        prop::option::weighted(0.08, any::<usize>()),
        prop::option::weighted(0.06, (any::<usize>(), any::<u8>())),
        (src, any::<[bool; 3]>()),
    )
        .prop_map(
            |(
                (id, (f0, f1), name, qtype, qclass),
                edns,
                counts,
                trailing,
                cut,
                flip,
                (src, healthy),
            )| {
                Input {
                    id,
                    flags: [f0, f1],
                    name,
                    qtype,
                    qclass,
                    edns,
                    counts,
                    trailing: if trailing.0 { trailing.1 } else { Vec::new() },
                    cut,
                    flip,
                    src,
                    healthy,
                }
            },
        )
}

/// Runs one input through both paths; returns whether the fast path took it.
fn compare(f: &Fixture, input: &Input) -> Result<bool, TestCaseError> {
    for (i, &up) in input.healthy.iter().enumerate() {
        f.health.set_index(i, up);
    }
    let raw = input.encode();
    let src = SocketAddr::new(input.src, 5353);
    let reference = f.handler.answer_hickory(&raw, src);
    let mut fast = Vec::new();
    let took = f.handler.answer_fast(&raw, src, &mut fast);
    if took {
        prop_assert_eq!(
            Some(&fast),
            reference.as_ref(),
            "fast path bytes for {:02x?}",
            raw
        );
    }
    let mut combined = Vec::new();
    let sent = f.handler.answer_udp(&raw, src, &mut combined);
    prop_assert_eq!(
        sent.then_some(combined),
        reference,
        "answer_udp for {:02x?}",
        raw
    );
    if input.is_hot() {
        prop_assert!(took, "the hot query {:02x?} missed the fast path", raw);
    }
    Ok(took)
}

#[test]
fn the_fast_path_gives_the_hickory_bytes_for_every_query() {
    let f = fixture();
    let mut runner = TestRunner::new(Config {
        cases: 10_000,
        failure_persistence: None,
        ..Config::default()
    });
    let taken = std::cell::Cell::new(0u32);
    runner
        .run(&input(), |input| {
            if compare(&f, &input)? {
                taken.set(taken.get() + 1);
            }
            Ok(())
        })
        .expect("fast path and hickory path agree");
    // Not a tautology: a large share of the generated queries must have been answered by the fast path.
    assert!(taken.get() > 1000, "fast path took only {}", taken.get());
}

#[test]
fn the_benchmark_query_takes_the_fast_path_and_gets_the_nearest_edge() {
    use hickory_server::proto::op::Message;
    use hickory_server::proto::rr::RData;
    let f = fixture();
    let lo = SocketAddr::from(([127, 0, 0, 1], 40000));
    // What dnsperf -e -E 8:00011800c00002 sends: RD, OPT with payload 4096... and one ECS option.
    for (ecs, want) in [
        ([192, 0, 2], Some(Ipv4Addr::new(127, 0, 0, 11))),
        ([203, 0, 113], Some(Ipv4Addr::new(127, 0, 0, 13))),
        ([198, 51, 100], None), // potsdam has only an IPv6 address: NOERROR, no data
    ] {
        let mut q = vec![0xab, 0xcd, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 1];
        q.extend_from_slice(GW);
        q.extend_from_slice(&[0, 1, 0, 1, 0, 0, 41, 0x10, 0, 0, 0, 0, 0, 0, 11, 0, 8, 0, 7]);
        q.extend_from_slice(&[0, 1, 24, 0, ecs[0], ecs[1], ecs[2]]);
        let mut out = Vec::new();
        assert!(f.handler.answer_fast(&q, lo, &mut out), "{ecs:?}");
        assert_eq!(Some(&out), f.handler.answer_hickory(&q, lo).as_ref());
        let msg = Message::from_vec(&out).expect("decodes");
        let got = msg.answers.iter().find_map(|r| match &r.data {
            RData::A(a) => Some(a.0),
            _ => None,
        });
        assert_eq!(got, want, "{ecs:?}");
        assert_eq!(msg.metadata.id, 0xabcd);
    }
}

#[test]
fn ecs_bits_beyond_the_prefix_stay_formerr_off_the_fast_path() {
    let f = fixture();
    let lo = SocketAddr::from(([127, 0, 0, 1], 40000));
    let mut q = vec![0x13, 0x37, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 1];
    q.extend_from_slice(GW);
    q.extend_from_slice(&[
        0, 1, 0, 1, 0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 11, 0, 8, 0, 7,
    ]);
    q.extend_from_slice(&[0, 1, 20, 0, 10, 1, 0x11]);
    let mut out = Vec::new();
    assert!(!f.handler.answer_fast(&q, lo, &mut out));
    assert!(f.handler.answer_udp(&q, lo, &mut out));
    assert_eq!(out[3] & 0x0F, 1, "RCODE FORMERR");
}
