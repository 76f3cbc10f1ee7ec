//! The `[registry]` section: the etcd cluster a fleet registers in (DESIGN.md §7).
//!
//! Without it a deployment is the topology file alone. With it, every `geofaas node` puts
//! itself into etcd under a lease, publishes load reports and shares call records there,
//! and gateways and the geo DNS add the registered nodes to the ones in their file.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use url::Url;

/// Where and how the fleet registers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistrySettings {
    /// etcd client URLs, all `http://` or all `https://` (then `[registry.tls]` is required),
    /// e.g. `["http://127.0.0.1:2379"]`. No default: at least one is required.
    pub etcd: Vec<Url>,
    /// TLS to etcd (`https://` endpoints). Default none.
    #[serde(default)]
    pub tls: Option<RegistryTls>,
    /// Name of the environment variable holding the etcd user (etcd's auth). Default none:
    /// no credentials. Set with `password_env`; the values never live in the file.
    #[serde(default)]
    pub user_env: Option<String>,
    /// Name of the environment variable holding that user's password. Default none.
    #[serde(default)]
    pub password_env: Option<String>,
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
    /// Longest a keyed call's answer waits for its record to reach etcd, in milliseconds; past
    /// it the answer goes out and the record stays on the node (logged). Default 500.
    #[serde(default = "default_call_record_wait_ms")]
    pub call_record_wait_ms: u64,
    /// Timeout of one etcd request in milliseconds (registration, watch, load reports; a call
    /// waits at most `call_record_wait_ms`). Default 2000.
    #[serde(default = "default_request_timeout_ms")]
    pub request_timeout_ms: u64,
}

/// `[registry.tls]`: how a node checks etcd's certificate and proves its own. Paths are
/// relative to the topology file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistryTls {
    /// PEM file of the CA that signed etcd's server certificates. Required.
    pub ca: PathBuf,
    /// PEM client certificate, for an etcd run with `--client-cert-auth`. Default none; set
    /// with `key`.
    #[serde(default)]
    pub cert: Option<PathBuf>,
    /// PEM private key of `cert`. Default none.
    #[serde(default)]
    pub key: Option<PathBuf>,
    /// Name etcd's certificate is checked against. Default: the host of each URL.
    #[serde(default)]
    pub domain: Option<String>,
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
fn default_call_record_wait_ms() -> u64 {
    500
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
            tls: None,
            user_env: None,
            password_env: None,
            prefix: default_prefix(),
            lease_ttl_s: default_lease_ttl_s(),
            load_interval_ms: default_load_interval_ms(),
            call_record_max_bytes: default_call_record_max_bytes(),
            call_record_ttl_s: default_call_record_ttl_s(),
            call_record_wait_ms: default_call_record_wait_ms(),
            request_timeout_ms: default_request_timeout_ms(),
        }
    }

    /// Makes the TLS paths absolute against the topology file's folder `base`.
    pub(crate) fn resolve_paths(&mut self, base: &Path) {
        if let Some(tls) = &mut self.tls {
            tls.ca = base.join(&tls.ca);
            for p in [&mut tls.cert, &mut tls.key].into_iter().flatten() {
                *p = base.join(&*p);
            }
        }
    }

    /// The etcd user and password from the environment variables the section names (`None`
    /// without credentials); `Err((field, reason))` when a variable is unset or empty.
    pub fn credentials(&self) -> Result<Option<(String, String)>, (String, String)> {
        let (Some(user), Some(password)) = (&self.user_env, &self.password_env) else {
            return Ok(None);
        };
        let read = |field: &str, name: &str| {
            std::env::var(name)
                .ok()
                .filter(|v| !v.is_empty())
                .ok_or_else(|| {
                    (
                        format!("registry.{field}"),
                        format!("the environment variable {name} is not set"),
                    )
                })
        };
        Ok(Some((
            read("user_env", user)?,
            read("password_env", password)?,
        )))
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
        let https = self.etcd.iter().filter(|u| u.scheme() == "https").count();
        if https != 0 && https != self.etcd.len() {
            return bad(
                "etcd",
                &self.etcd[0],
                "the endpoints are all http:// or all https://",
            );
        }
        match (&self.tls, https > 0) {
            (None, true) => return bad(
                "tls",
                &"none",
                "https:// endpoints need [registry.tls] with the CA file (ca = \"etcd-ca.pem\")",
            ),
            (Some(_), false) => {
                return bad(
                    "tls",
                    &"[registry.tls]",
                    "TLS settings with http:// endpoints: use https:// URLs or drop [registry.tls]",
                )
            }
            (Some(tls), true) => tls.check()?,
            (None, false) => {}
        }
        for (field, name) in [
            ("user_env", &self.user_env),
            ("password_env", &self.password_env),
        ] {
            if let Some(name) = name {
                let ok = !name.is_empty()
                    && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                    && !name.as_bytes()[0].is_ascii_digit();
                if !ok {
                    return bad(
                        field,
                        name,
                        "the name of an environment variable, e.g. \"GEOFAAS_ETCD_USER\"",
                    );
                }
            }
        }
        match (&self.user_env, &self.password_env) {
            (Some(_), None) => {
                return bad(
                    "password_env",
                    &"none",
                    "user_env needs password_env (the variable with the password)",
                )
            }
            (None, Some(_)) => {
                return bad(
                    "user_env",
                    &"none",
                    "password_env needs user_env (the variable with the user)",
                )
            }
            _ => {}
        }
        if self.call_record_wait_ms == 0 {
            return bad("call_record_wait_ms", &0, "at least 1 ms");
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

impl RegistryTls {
    fn check(&self) -> Result<(), (String, String, String)> {
        let bad = |field: &str, reason: &str| {
            Err((
                format!("registry.tls.{field}"),
                "none".to_owned(),
                reason.to_owned(),
            ))
        };
        match (&self.cert, &self.key) {
            (Some(_), None) => bad(
                "key",
                "a client certificate needs its key (key = \"client-key.pem\")",
            ),
            (None, Some(_)) => bad(
                "cert",
                "a client key needs its certificate (cert = \"client.pem\")",
            ),
            _ => Ok(()),
        }
    }
}
