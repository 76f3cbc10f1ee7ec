//! The fast path for the hot query: `gw.<zone>` A or AAAA, class IN, one question, a standard query,
//! with or without an OPT record that carries nothing but an optional ECS option.
//!
//! Such a query is parsed in place and answered from a wire template per node and record type: the
//! response hickory's path gives to a canonical query (id 0, RD and CD clear, no EDNS) for that node,
//! built once with the handler's own encoding. Per query only the id, RD, CD, the additional count and
//! the OPT record (with the ECS echo and its scope) are written. Everything else falls back to hickory:
//! other names or spellings (`GW.<zone>`, compression), other types or classes, other header flags,
//! EDNS versions, flags or options, an ECS option RFC 7871 calls FORMERR, trailing bytes. The
//! differential tests (`fast/tests.rs`) check that both paths give the same bytes.

use crate::ecs::{parse_ecs, ClientSubnet};

/// OPT record fields of our responses: root owner, type 41, class = UDP payload size, TTL 0 (extended
/// RCODE 0, version 0, no flags); the RDLENGTH follows.
const OPT_HEAD: [u8; 9] = {
    let p = super::MAX_PAYLOAD.to_be_bytes();
    [0, 0, 41, p[0], p[1], 0, 0, 0, 0]
};
/// Longest OPT record we append: the head, RDLENGTH, and an ECS option with a 16-octet address.
const OPT_MAX: usize = OPT_HEAD.len() + 2 + 4 + 4 + 16;

/// What a hot query asks, read from its wire bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct HotQuery {
    /// Message id.
    id: [u8; 2],
    /// The query's RD bit (in the third header octet) and CD bit (fourth), copied to the response.
    rd: u8,
    cd: u8,
    /// AAAA rather than A.
    pub aaaa: bool,
    /// `None` without an OPT record; `Some(ecs)` with one.
    pub edns: Option<Option<ClientSubnet>>,
}

impl HotQuery {
    /// The query's valid ECS option, if any.
    pub fn ecs(&self) -> Option<&ClientSubnet> {
        self.edns.as_ref().and_then(Option::as_ref)
    }
}

/// Reads `raw` as a hot query for the name whose wire form is `qname`, or `None` for anything else.
pub(super) fn parse(raw: &[u8], qname: &[u8]) -> Option<HotQuery> {
    let (header, rest) = raw.split_first_chunk::<12>()?;
    // QR 0, OPCODE QUERY, AA and TC clear (RD copied); RA, Z and RCODE clear (AD ignored, CD copied).
    if header[2] & 0xFE != 0 || header[3] & 0xCF != 0 {
        return None;
    }
    let with_opt = match header[4..12] {
        [0, 1, 0, 0, 0, 0, 0, 0] => false,
        [0, 1, 0, 0, 0, 0, 0, 1] => true,
        _ => return None,
    };
    let rest = rest.strip_prefix(qname)?;
    let (question, rest) = rest.split_first_chunk::<4>()?;
    let aaaa = match question {
        [0, 1, 0, 1] => false,
        [0, 28, 0, 1] => true,
        _ => return None,
    };
    let edns = match (with_opt, rest.is_empty()) {
        (false, true) => None,
        (true, false) => Some(parse_opt(rest)?),
        _ => return None,
    };
    Some(HotQuery {
        id: [header[0], header[1]],
        rd: header[2] & 0x01,
        cd: header[3] & 0x10,
        aaaa,
        edns,
    })
}

/// Reads the OPT record that ends the message: `Some(ecs)` when it is one we answer from a template.
fn parse_opt(rest: &[u8]) -> Option<Option<ClientSubnet>> {
    let (fixed, rdata) = rest.split_first_chunk::<11>()?;
    // Root owner, type OPT, any payload size, extended RCODE 0, version 0, no flag but DO.
    if fixed[..3] != [0, 0, 41] || fixed[5..7] != [0, 0] || fixed[7] & 0x7F != 0 || fixed[8] != 0 {
        return None;
    }
    if usize::from(u16::from_be_bytes([fixed[9], fixed[10]])) != rdata.len() {
        return None;
    }
    if rdata.is_empty() {
        return Some(None);
    }
    let (option, data) = rdata.split_first_chunk::<4>()?;
    if option[..2] != [0, 8]
        || usize::from(u16::from_be_bytes([option[2], option[3]])) != data.len()
    {
        return None;
    }
    parse_ecs(data).ok().map(Some)
}

/// Whether a template leaves room for the OPT record within the 512 octets of a query without EDNS.
pub(super) fn fits(template: &[u8]) -> bool {
    template.len() >= 12 && template.len() + OPT_MAX <= 512
}

/// Writes the response to `q` into `out`: `template` (see the module docs) with the query's id, RD and
/// CD, and the OPT record echoing the ECS option with `scope` when the query had EDNS.
pub(super) fn write(out: &mut Vec<u8>, template: &[u8], q: &HotQuery, scope: u8) {
    out.clear();
    out.extend_from_slice(template);
    out[..2].copy_from_slice(&q.id);
    out[2] |= q.rd;
    out[3] |= q.cd;
    let Some(ecs) = q.edns else {
        return;
    };
    let additionals = u16::from_be_bytes([out[10], out[11]]).saturating_add(1);
    out[10..12].copy_from_slice(&additionals.to_be_bytes());
    out.extend_from_slice(&OPT_HEAD);
    let Some(ecs) = ecs else {
        out.extend_from_slice(&[0, 0]);
        return;
    };
    let (family, octets): (u8, [u8; 16]) = match ecs.addr {
        std::net::IpAddr::V4(ip) => {
            let mut o = [0u8; 16];
            o[..4].copy_from_slice(&ip.octets());
            (1, o)
        }
        std::net::IpAddr::V6(ip) => (2, ip.octets()),
    };
    let len = usize::from(ecs.source_prefix).div_ceil(8).min(16);
    // Both lengths are at most 4 + 4 + 16.
    let option_len = (4 + len) as u8;
    out.extend_from_slice(&[0, option_len + 4, 0, 8, 0, option_len, 0, family]);
    out.extend_from_slice(&[ecs.source_prefix, scope]);
    out.extend_from_slice(&octets[..len]);
}

#[cfg(test)]
mod tests;
