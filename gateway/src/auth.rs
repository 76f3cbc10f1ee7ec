//! Node-to-node authentication of offloaded calls.
//!
//! An edge that offloads a call signs it with the platform's shared secret:
//! `X-GeoFaaS-Offload: <node>;<unix seconds>;<hex HMAC-SHA256(secret, node \n ts \n METHOD \n path)>`.
//! The cloud serves a correctly signed, fresh call where it lands instead of handing it back
//! to the edge whose area the client is in. Signatures are checked in constant time.

use std::time::{SystemTime, UNIX_EPOCH};

use ring::hmac;

/// Signatures older or newer than this many seconds are refused (replay window).
pub const MAX_SKEW_S: u64 = 60;

/// The shared offload secret.
#[derive(Clone)]
pub struct OffloadKey(hmac::Key);

impl std::fmt::Debug for OffloadKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OffloadKey(..)")
    }
}

impl OffloadKey {
    /// A key from the secret's bytes.
    pub fn new(secret: &[u8]) -> Self {
        Self(hmac::Key::new(hmac::HMAC_SHA256, secret))
    }

    /// The header value with which `node` signs a call of `method` on `path`.
    pub fn sign(&self, node: &str, method: &str, path: &str) -> String {
        self.sign_at(node, method, path, now())
    }

    fn sign_at(&self, node: &str, method: &str, path: &str, ts: u64) -> String {
        let tag = hmac::sign(&self.0, message(node, ts, method, path).as_bytes());
        format!("{node};{ts};{}", hex(tag.as_ref()))
    }

    /// The signing node's id when `value` is a valid, fresh signature of this call.
    pub fn verify<'a>(&self, value: &'a str, method: &str, path: &str) -> Option<&'a str> {
        self.check(value, method, path).ok()
    }

    /// Like [`OffloadKey::verify`], saying why a signature is refused: one made with the
    /// secret whose time is outside the window names the node and how far its clock is off.
    pub fn check<'a>(&self, value: &'a str, method: &str, path: &str) -> Result<&'a str, Refusal> {
        let mut parts = value.splitn(3, ';');
        let (Some(node), Some(ts), Some(sig)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(Refusal::Signature);
        };
        let ts: u64 = ts.parse().map_err(|_| Refusal::Signature)?;
        let sig = unhex(sig).ok_or(Refusal::Signature)?;
        hmac::verify(&self.0, message(node, ts, method, path).as_bytes(), &sig)
            .map_err(|_| Refusal::Signature)?;
        let skew_s = i64::try_from(ts).unwrap_or(i64::MAX) - i64::try_from(now()).unwrap_or(0);
        if skew_s.unsigned_abs() > MAX_SKEW_S {
            return Err(Refusal::Clock {
                node: node.to_owned(),
                skew_s,
            });
        }
        Ok(node)
    }
}

/// Why a signature was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Not made with the secret, for another method or path, or not a signature at all.
    Signature,
    /// Made with the secret, at a time this far from this node's clock (positive: the signer's
    /// clock is ahead), outside the window of ±60 s.
    Clock {
        /// The node that signed.
        node: String,
        /// Its signature's time minus this node's, in seconds.
        skew_s: i64,
    },
}

fn message(node: &str, ts: u64, method: &str, path: &str) -> String {
    format!("{node}\n{ts}\n{method}\n{path}")
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || !s.is_ascii() {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signed_calls_verify_and_tampered_ones_do_not() {
        let key = OffloadKey::new(b"s3cret");
        let v = key.sign("tu-berlin", "POST", "/fn/sieve");
        assert_eq!(key.verify(&v, "POST", "/fn/sieve"), Some("tu-berlin"));
        assert_eq!(key.verify(&v, "POST", "/fn/echo"), None, "other path");
        assert_eq!(key.verify(&v, "GET", "/fn/sieve"), None, "other method");
        assert_eq!(
            OffloadKey::new(b"other").verify(&v, "POST", "/fn/sieve"),
            None
        );
        let forged = v.replacen("tu-berlin", "potsdam", 1);
        assert_eq!(key.verify(&forged, "POST", "/fn/sieve"), None);
        let stale = key.sign_at("tu-berlin", "POST", "/fn/sieve", now() - 3600);
        assert_eq!(key.verify(&stale, "POST", "/fn/sieve"), None);
        assert_eq!(key.verify("garbage", "POST", "/fn/sieve"), None);
        assert_eq!(key.verify("a;1;zz", "POST", "/fn/sieve"), None);
    }

    #[test]
    fn a_real_signature_outside_the_window_names_the_node_and_the_skew() {
        let key = OffloadKey::new(b"secret");
        let ahead = key.sign_at("lima", "POST", "/fn/x", now() + 300);
        assert_eq!(
            key.check(&ahead, "POST", "/fn/x"),
            Err(Refusal::Clock {
                node: "lima".into(),
                skew_s: 300
            })
        );
        let behind = key.sign_at("lima", "POST", "/fn/x", now() - 120);
        assert!(matches!(
            key.check(&behind, "POST", "/fn/x"),
            Err(Refusal::Clock { skew_s: -120, .. })
        ));
        // Within the window it is valid; not the secret's, it is no signature whatever its time.
        let close = key.sign_at("lima", "POST", "/fn/x", now() + 30);
        assert_eq!(key.check(&close, "POST", "/fn/x"), Ok("lima"));
        let other = OffloadKey::new(b"other").sign_at("lima", "POST", "/fn/x", now() + 300);
        assert_eq!(key.check(&other, "POST", "/fn/x"), Err(Refusal::Signature));
    }
}
