//! The batched engine (fast path for the hot query, two `SO_REUSEPORT` sockets) against hickory-server's
//! own UDP loop, byte for byte, over real sockets: the same datagrams to both servers, the same replies.

use std::net::{IpAddr, Ipv4Addr};

use geofaas_dns::UdpEngine;
use hickory_proto::rr::RecordType;

use crate::support::*;

/// The queries: `gw` A and AAAA from three sources, without EDNS, with EDNS, with ECS of both families
/// and several prefixes, with RD/CD/AD and DO; plus node names, the apex and a bad ECS option.
fn queries() -> Vec<Vec<u8>> {
    let subnets: [Option<(IpAddr, u8)>; 8] = [
        None,
        Some(("192.0.2.0".parse().expect("ip"), 24)),
        Some(("198.51.100.0".parse().expect("ip"), 24)),
        Some(("203.0.113.128".parse().expect("ip"), 25)),
        Some(("10.1.2.0".parse().expect("ip"), 23)),
        Some(("0.0.0.0".parse().expect("ip"), 0)),
        Some(("2001:db8:1:200::".parse().expect("ip"), 56)),
        Some(("2001:db8:2::".parse().expect("ip"), 47)),
    ];
    let mut out = Vec::new();
    for (name, rtype) in [
        ("gw.geofaas.test.", RecordType::A),
        ("gw.geofaas.test.", RecordType::AAAA),
        ("tu-berlin.geofaas.test.", RecordType::A),
        ("geofaas.test.", RecordType::SOA),
        ("GW.geofaas.test.", RecordType::A),
    ] {
        for ecs in subnets {
            for edns in [false, true] {
                if ecs.is_some() && !edns {
                    continue;
                }
                for (flags2, flags3) in [(0x00, 0x00), (0x01, 0x00), (0x01, 0x20), (0x00, 0x10)] {
                    for dnssec_ok in [false, true] {
                        if dnssec_ok && !edns {
                            continue;
                        }
                        let mut q = query_bytes(name, rtype, ecs, edns);
                        q[2] = flags2;
                        q[3] = flags3;
                        if dnssec_ok {
                            // DO is the top bit of the OPT record's flags, the 3rd octet of its TTL.
                            let opt = opt_start(&q);
                            q[opt + 7] |= 0x80;
                        }
                        out.push(q);
                    }
                }
            }
        }
    }
    out
}

/// Where the OPT record starts in a query made by `query_bytes` with EDNS: after the one question.
fn opt_start(q: &[u8]) -> usize {
    12 + q[12..].iter().position(|&b| b == 0).expect("qname ends") + 1 + 4
}

#[tokio::test]
async fn the_batched_engine_answers_byte_for_byte_as_hickorys_own_udp_loop() {
    let fast = start_manual_with(UdpEngine::Batched).await;
    let hickory = start_manual_with(UdpEngine::Hickory).await;
    for (i, q) in queries().iter().enumerate() {
        let from = IpAddr::V4(match i % 3 {
            0 => SRC_BERLIN,
            1 => SRC_POTSDAM,
            _ => Ipv4Addr::LOCALHOST,
        });
        let a = reply_bytes(fast.addr, from, q).await;
        let b = reply_bytes(hickory.addr, from, q).await;
        assert_eq!(a, b, "query {q:02x?} from {from}");
    }
}
