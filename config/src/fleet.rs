//! The `[registry]` section: the etcd cluster a fleet registers in (DESIGN.md §7).
//!
//! Without it a deployment is the topology file alone. With it, every `geofaas node` puts
//! itself into etcd under a lease, publishes load reports and shares call records there,
//! and gateways and the geo DNS add the registered nodes to the ones in their file.

use serde::{Deserialize, Serialize};
use url::Url;

/// Where and how the fleet registers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistrySettings {
    /// etcd client URLs (`http://`; TLS to etcd is not supported yet), e.g. `["http://127.0.0.1:2379"]`. No default:
    /// at least one is required.
    pub etcd: Vec<Url>,
    /// Prefix of every key the fleet writes, ending in `/`. Default `/geofaas/`.
    #[serde(default = "default_prefix")]
    pub prefix: String,
    /// Lifetime of a node's registration lease in seconds: a node that stops renewing it
    /// (killed, cut off) is withdrawn this long after its last renewal at the latest. It is
    /// renewed every third of it. Default 20 (Serverledge's value); etcd's own minimum
    /// (about 2 s with its default election timeout) applies.
    #[serde(default = "default_lease_ttl_s")]
    pub lease_ttl_s: u64,
    /// Interval of a node's load reports in milliseconds. Readers ignore a report older than
    /// three intervals. Default 1000.
    #[serde(default = "default_load_interval_ms")]
    pub load_interval_ms: u64,
    /// Largest `Idempotency-Key` answer body shared through etcd, in bytes; larger answers stay
    /// on the node that made them. Default 65536 (etcd's requests are at most 1.5 MiB).
    #[serde(default = "default_call_record_max_bytes")]
    pub call_record_max_bytes: usize,
    /// How long a shared call record lives in etcd, in seconds. Default 600 (as long as a node
    /// keeps one locally).
    #[serde(default = "default_call_record_ttl_s")]
    pub call_record_ttl_s: u64,
    /// Timeout of one etcd request in milliseconds (never on a call's path). Default 2000.
    #[serde(default = "default_request_timeout_ms")]
    pub request_timeout_ms: u64,
}

fn default_prefix() -> String {
    "/geofaas/".to_owned()
}
fn default_lease_ttl_s() -> u64 {
    20
}
fn default_load_interval_ms() -> u64 {
    1000
}
fn default_call_record_max_bytes() -> usize {
    64 * 1024
}
fn default_call_record_ttl_s() -> u64 {
    600
}
fn default_request_timeout_ms() -> u64 {
    2000
}

/// Largest lease etcd grants (its `MaxLeaseTTL`, about 9000 years, in seconds) as a sane bound.
const MAX_TTL_S: u64 = 365 * 24 * 3600;

impl RegistrySettings {
    /// The settings with `etcd` endpoints and every other field at its default.
    pub fn new(etcd: Vec<Url>) -> Self {
        Self {
            etcd,
            prefix: default_prefix(),
            lease_ttl_s: default_lease_ttl_s(),
            load_interval_ms: default_load_interval_ms(),
            call_record_max_bytes: default_call_record_max_bytes(),
            call_record_ttl_s: default_call_record_ttl_s(),
            request_timeout_ms: default_request_timeout_ms(),
        }
    }

    /// Checks the section; `Err((field, value, reason))`.
    pub(crate) fn check(&self) -> Result<(), (String, String, String)> {
        let bad = |field: &str, value: &dyn std::fmt::Display, reason: &str| {
            Err((
                format!("registry.{field}"),
                value.to_string(),
                reason.to_owned(),
            ))
        };
        if self.etcd.is_empty() {
            return bad(
                "etcd",
                &"[]",
                "name at least one etcd client URL, e.g. \"http://127.0.0.1:2379\"",
            );
        }
        for url in &self.etcd {
            if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
                return bad(
                    "etcd",
                    url,
                    "an etcd client URL is http:// or https:// with a host",
                );
            }
            if url.path() != "/" && !url.path().is_empty() {
                return bad("etcd", url, "an etcd client URL has no path");
            }
        }
        if !self.prefix.starts_with('/') || !self.prefix.ends_with('/') || self.prefix.len() < 2 {
            return bad(
                "prefix",
                &self.prefix,
                "a key prefix starts and ends with '/', e.g. \"/geofaas/\"",
            );
        }
        if self.lease_ttl_s == 0 || self.lease_ttl_s > MAX_TTL_S {
            return bad(
                "lease_ttl_s",
                &self.lease_ttl_s,
                "seconds, at least 1 and at most a year",
            );
        }
        if self.load_interval_ms < 50 {
            return bad("load_interval_ms", &self.load_interval_ms, "at least 50 ms");
        }
        if self.call_record_max_bytes > 1024 * 1024 {
            return bad(
                "call_record_max_bytes",
                &self.call_record_max_bytes,
                "at most 1 MiB (etcd refuses requests over 1.5 MiB)",
            );
        }
        if self.call_record_ttl_s == 0 || self.call_record_ttl_s > MAX_TTL_S {
            return bad(
                "call_record_ttl_s",
                &self.call_record_ttl_s,
                "seconds, at least 1 and at most a year",
            );
        }
        if self.request_timeout_ms == 0 {
            return bad(
                "request_timeout_ms",
                &self.request_timeout_ms,
                "at least 1 ms",
            );
        }
        Ok(())
    }
}
