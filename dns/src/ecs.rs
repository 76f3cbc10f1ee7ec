//! The EDNS Client Subnet option (RFC 7871) of a query, read from the raw message and checked strictly.
//!
//! hickory decodes ECS leniently: it ignores extra address octets and address bits set beyond the
//! source prefix. RFC 7871 section 6 asks a server to answer such options with FORMERR, so the option is
//! located and validated here from the wire bytes. The message has already been decoded by hickory, so
//! walking it only needs to skip names and records.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// EDNS option code of Client Subnet.
const OPT_ECS: u16 = 8;
/// RR type of the EDNS OPT pseudo-record.
const TYPE_OPT: u16 = 41;

/// A valid ECS option of a query.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientSubnet {
    /// The address, host bits zero.
    pub addr: IpAddr,
    /// SOURCE PREFIX-LENGTH.
    pub source_prefix: u8,
    /// SCOPE PREFIX-LENGTH as sent (0 in conforming queries; ignored).
    pub scope_prefix: u8,
}

/// Why an ECS option (or the message carrying it) is rejected with FORMERR.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EcsError {
    /// The message ends inside a section or name.
    #[error("message truncated")]
    Truncated,
    /// The option is shorter than its fixed 4 octets.
    #[error("ECS option shorter than 4 octets")]
    TooShort,
    /// FAMILY is neither 1 (IPv4) nor 2 (IPv6).
    #[error("ECS family {0} unknown")]
    Family(u16),
    /// SOURCE PREFIX-LENGTH exceeds the address length of the family.
    #[error("ECS source prefix {0} too long for the family")]
    PrefixTooLong(u8),
    /// ADDRESS has more or fewer octets than the source prefix needs.
    #[error("ECS address has {got} octets, source prefix needs {want}")]
    AddressLength {
        /// Octets present.
        got: usize,
        /// Octets the prefix requires.
        want: usize,
    },
    /// ADDRESS has bits set beyond SOURCE PREFIX-LENGTH.
    #[error("ECS address has bits set beyond the source prefix")]
    BitsBeyondPrefix,
    /// The query carries more than one ECS option or more than one OPT record.
    #[error("more than one ECS option or OPT record")]
    Duplicate,
}

/// Finds and validates the ECS option of a wire-format DNS message: `Ok(None)` without one.
pub fn find_client_subnet(msg: &[u8]) -> Result<Option<ClientSubnet>, EcsError> {
    let count = |at: usize| read_u16(msg, at).map(usize::from);
    let (qd, an, ns, ar) = (count(4)?, count(6)?, count(8)?, count(10)?);
    let mut pos = 12;
    for _ in 0..qd {
        pos = skip_name(msg, pos)? + 4;
    }
    for _ in 0..an + ns {
        pos = skip_record(msg, pos)?;
    }
    let mut found: Option<ClientSubnet> = None;
    let mut opt_seen = false;
    for _ in 0..ar {
        let start = skip_name(msg, pos)?;
        let rtype = read_u16(msg, start)?;
        let rdlen = usize::from(read_u16(msg, start + 8)?);
        let rdata = msg
            .get(start + 10..start + 10 + rdlen)
            .ok_or(EcsError::Truncated)?;
        if rtype == TYPE_OPT {
            if opt_seen {
                return Err(EcsError::Duplicate);
            }
            opt_seen = true;
            found = ecs_in_opt(rdata)?;
        }
        pos = start + 10 + rdlen;
    }
    Ok(found)
}

fn ecs_in_opt(rdata: &[u8]) -> Result<Option<ClientSubnet>, EcsError> {
    let mut found = None;
    let mut pos = 0;
    while pos < rdata.len() {
        let code = read_u16(rdata, pos)?;
        let len = usize::from(read_u16(rdata, pos + 2)?);
        let data = rdata
            .get(pos + 4..pos + 4 + len)
            .ok_or(EcsError::Truncated)?;
        if code == OPT_ECS {
            if found.is_some() {
                return Err(EcsError::Duplicate);
            }
            found = Some(parse_ecs(data)?);
        }
        pos += 4 + len;
    }
    Ok(found)
}

/// Parses and validates the data of one ECS option.
pub fn parse_ecs(data: &[u8]) -> Result<ClientSubnet, EcsError> {
    if data.len() < 4 {
        return Err(EcsError::TooShort);
    }
    let family = u16::from_be_bytes([data[0], data[1]]);
    let (source_prefix, scope_prefix) = (data[2], data[3]);
    let addr_bytes = &data[4..];
    let max_bits: u8 = match family {
        1 => 32,
        2 => 128,
        other => return Err(EcsError::Family(other)),
    };
    if source_prefix > max_bits {
        return Err(EcsError::PrefixTooLong(source_prefix));
    }
    let want = usize::from(source_prefix).div_ceil(8);
    if addr_bytes.len() != want {
        return Err(EcsError::AddressLength {
            got: addr_bytes.len(),
            want,
        });
    }
    let spare_bits = want * 8 - usize::from(source_prefix);
    if let Some(&last) = addr_bytes.last() {
        let mask = (1u16 << spare_bits) - 1;
        if u16::from(last) & mask != 0 {
            return Err(EcsError::BitsBeyondPrefix);
        }
    }
    let addr = if family == 1 {
        let mut o = [0u8; 4];
        o[..want].copy_from_slice(addr_bytes);
        IpAddr::V4(Ipv4Addr::from(o))
    } else {
        let mut o = [0u8; 16];
        o[..want].copy_from_slice(addr_bytes);
        IpAddr::V6(Ipv6Addr::from(o))
    };
    Ok(ClientSubnet {
        addr,
        source_prefix,
        scope_prefix,
    })
}

fn read_u16(buf: &[u8], at: usize) -> Result<u16, EcsError> {
    match buf.get(at..at + 2) {
        Some(&[a, b]) => Ok(u16::from_be_bytes([a, b])),
        _ => Err(EcsError::Truncated),
    }
}

/// Returns the position just after the name starting at `pos`.
fn skip_name(msg: &[u8], mut pos: usize) -> Result<usize, EcsError> {
    loop {
        let len = *msg.get(pos).ok_or(EcsError::Truncated)?;
        match len {
            0 => return Ok(pos + 1),
            l if l & 0xC0 == 0xC0 => return Ok(pos + 2),
            l if l & 0xC0 != 0 => return Err(EcsError::Truncated),
            l => pos += 1 + usize::from(l),
        }
    }
}

fn skip_record(msg: &[u8], pos: usize) -> Result<usize, EcsError> {
    let start = skip_name(msg, pos)?;
    let rdlen = usize::from(read_u16(msg, start + 8)?);
    Ok(start + 10 + rdlen)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_well_formed_options() {
        let ecs = parse_ecs(&[0, 1, 24, 0, 192, 0, 2]).expect("valid");
        assert_eq!(ecs.addr, IpAddr::V4(Ipv4Addr::new(192, 0, 2, 0)));
        assert_eq!(ecs.source_prefix, 24);
        assert_eq!(parse_ecs(&[0, 1, 0, 0]).expect("valid /0").source_prefix, 0);
        assert!(parse_ecs(&[0, 1, 20, 0, 10, 1, 0x10]).is_ok());
        assert!(parse_ecs(&[0, 2, 56, 0, 0x20, 1, 0x0d, 0xb8, 0, 0, 0]).is_ok());
    }

    #[test]
    fn rejects_what_rfc_7871_calls_formerr() {
        assert_eq!(parse_ecs(&[0, 1, 24]), Err(EcsError::TooShort));
        assert_eq!(parse_ecs(&[0, 3, 24, 0, 1, 2, 3]), Err(EcsError::Family(3)));
        assert_eq!(
            parse_ecs(&[0, 1, 33, 0, 1, 2, 3, 4, 5]),
            Err(EcsError::PrefixTooLong(33))
        );
        assert_eq!(
            parse_ecs(&[0, 1, 24, 0, 192, 0, 2, 1]),
            Err(EcsError::AddressLength { got: 4, want: 3 })
        );
        assert_eq!(
            parse_ecs(&[0, 1, 24, 0, 192, 0]),
            Err(EcsError::AddressLength { got: 2, want: 3 })
        );
        assert_eq!(
            parse_ecs(&[0, 1, 20, 0, 10, 1, 0x11]),
            Err(EcsError::BitsBeyondPrefix)
        );
    }

    #[test]
    fn finds_the_option_in_a_message_and_survives_garbage() {
        let mut msg = vec![0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1];
        msg.extend_from_slice(&[2, b'g', b'w', 0, 0, 1, 0, 1]);
        msg.extend_from_slice(&[0, 0, 41, 4, 0xd0, 0, 0, 0, 0, 0, 11]);
        msg.extend_from_slice(&[0, 8, 0, 7, 0, 1, 24, 0, 192, 0, 2]);
        let ecs = find_client_subnet(&msg).expect("valid").expect("present");
        assert_eq!(ecs.addr, IpAddr::V4(Ipv4Addr::new(192, 0, 2, 0)));
        for cut in 0..msg.len() {
            let _ = find_client_subnet(&msg[..cut]);
        }
        assert_eq!(
            find_client_subnet(&msg[..msg.len() - 1]),
            Err(EcsError::Truncated)
        );
    }
}
