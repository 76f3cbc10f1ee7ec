//! Malformed ECS options get FORMERR (RFC 7871 section 6), crafted byte by byte.

use std::net::{IpAddr, Ipv4Addr};

use hickory_proto::op::ResponseCode;

use crate::support::*;

/// A query for gw.geofaas.test A with one OPT record carrying `option` as the ECS option data.
fn with_ecs(option: &[u8]) -> Vec<u8> {
    let mut m = vec![0x13, 0x37, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 1];
    for label in ["gw", "geofaas", "test"] {
        m.push(label.len() as u8);
        m.extend_from_slice(label.as_bytes());
    }
    m.extend_from_slice(&[0, 0, 1, 0, 1]);
    let rdlen = (option.len() + 4) as u16;
    m.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0]);
    m.extend_from_slice(&rdlen.to_be_bytes());
    m.extend_from_slice(&[0, 8]);
    m.extend_from_slice(&(option.len() as u16).to_be_bytes());
    m.extend_from_slice(option);
    m
}

#[tokio::test]
async fn malformed_ecs_options_are_formerr() {
    for engine in ENGINES {
        malformed_ecs_options_are_formerr_on(engine).await;
    }
}

async fn malformed_ecs_options_are_formerr_on(engine: geofaas_dns::UdpEngine) {
    let s = start_manual_with(engine).await;
    let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let ok = exchange_raw(s.addr, lo, &with_ecs(&[0, 1, 24, 0, 192, 0, 2])).await;
    assert_eq!(ok.metadata.response_code, ResponseCode::NoError);
    assert_eq!(
        first_a(&ok),
        Some(TU_BERLIN),
        "the hand-made packet itself is fine"
    );

    let cases: [(&str, &[u8]); 6] = [
        (
            "address bits beyond the source prefix",
            &[0, 1, 20, 0, 10, 1, 0x11],
        ),
        ("/24 with four address octets", &[0, 1, 24, 0, 192, 0, 2, 1]),
        ("/24 with two address octets", &[0, 1, 24, 0, 192, 0]),
        ("unknown family", &[0, 3, 24, 0, 192, 0, 2]),
        ("IPv4 source prefix 33", &[0, 1, 33, 0, 192, 0, 2, 1, 0]),
        ("option shorter than 4 octets", &[0, 1, 24]),
    ];
    for (what, option) in cases {
        let r = exchange_raw(s.addr, lo, &with_ecs(option)).await;
        assert_eq!(
            r.metadata.response_code,
            ResponseCode::FormErr,
            "{engine:?}: {what}"
        );
        assert_eq!(r.metadata.id, 0x1337, "{what}");
        assert!(r.answers.is_empty(), "{what}");
    }
}
