//! Who may call what, and how much: API keys (`[[auth.key]]`) and limits (`[limits]`).

use serde::{Deserialize, Serialize};

use crate::function::valid_function_name;

/// Callers' API keys. With none configured, a node is open to everyone (and says so at start-up).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthSettings {
    /// The keys, `[[auth.key]]`.
    #[serde(default)]
    pub key: Vec<ApiKeyConfig>,
}

/// One API key, sent as `Authorization: Bearer <key>`; only its SHA-256 is stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiKeyConfig {
    /// Name of the key in logs and metrics (never the key).
    pub id: String,
    /// Lower-case hex SHA-256 of the key (`printf %s "$KEY" | sha256sum`).
    pub sha256: String,
    /// Functions the key may call, or `["*"]` for all. Default none.
    #[serde(default)]
    pub functions: Vec<String>,
    /// May read `/metrics`, `/registry` and every key's activations. Default false.
    #[serde(default)]
    pub admin: bool,
}

impl ApiKeyConfig {
    /// Whether this key may call `function`.
    pub fn may_call(&self, function: &str) -> bool {
        self.functions.iter().any(|f| f == "*" || f == function)
    }
}

/// Limits that protect a node from callers; `0` turns a rate limit off.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitSettings {
    /// Calls per second one client address may make (sustained). Default 0 (no limit).
    #[serde(default)]
    pub per_client_rps: f64,
    /// Calls one client address may make in a burst above that rate. Default 2 x the rate.
    #[serde(default)]
    pub per_client_burst: u32,
    /// Calls per second one API key may make (sustained). Default 0 (no limit).
    #[serde(default)]
    pub per_key_rps: f64,
    /// Calls one API key may make in a burst above that rate. Default 2 x the rate.
    #[serde(default)]
    pub per_key_burst: u32,
    /// Calls that may wait for a free slot at a node that cannot offload (the cloud); more are
    /// answered `503` with `Retry-After` at once. Default 256.
    #[serde(default = "default_max_queued_calls")]
    pub max_queued_calls: usize,
    /// Milliseconds a client has to send a request's headers (HTTP/1.1) before the connection
    /// is closed; slow clients (slowloris) are cut off. Default 10000.
    #[serde(default = "default_header_timeout_ms")]
    pub header_timeout_ms: u64,
    /// Milliseconds a client has to send a request's body; slower is `408`. Default 30000.
    #[serde(default = "default_body_timeout_ms")]
    pub body_timeout_ms: u64,
    /// Most request headers; more is `431`. Default 100 (hyper's HTTP/1.1 limit).
    #[serde(default = "default_max_headers")]
    pub max_headers: usize,
}

fn default_max_queued_calls() -> usize {
    256
}
fn default_header_timeout_ms() -> u64 {
    10_000
}
fn default_body_timeout_ms() -> u64 {
    30_000
}
fn default_max_headers() -> usize {
    100
}

impl Default for LimitSettings {
    fn default() -> Self {
        Self {
            per_client_rps: 0.0,
            per_client_burst: 0,
            per_key_rps: 0.0,
            per_key_burst: 0,
            max_queued_calls: default_max_queued_calls(),
            header_timeout_ms: default_header_timeout_ms(),
            body_timeout_ms: default_body_timeout_ms(),
            max_headers: default_max_headers(),
        }
    }
}

/// What is wrong with one of these settings: (field, value, reason).
pub(crate) type Problem = (String, String, String);

impl AuthSettings {
    pub(crate) fn check(&self) -> Result<(), Problem> {
        let mut ids = std::collections::HashSet::new();
        for k in &self.key {
            let field = |f: &str| format!("auth.key[{}].{f}", k.id);
            if k.id.is_empty() || !ids.insert(k.id.as_str()) {
                return Err((
                    "auth.key.id".into(),
                    k.id.clone(),
                    "ids are unique and not empty".into(),
                ));
            }
            let hex = k.sha256.len() == 64
                && k.sha256
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
            if !hex {
                return Err((
                    field("sha256"),
                    k.sha256.clone(),
                    "64 lower-case hex digits: the SHA-256 of the key, never the key itself".into(),
                ));
            }
            if let Some(f) = k
                .functions
                .iter()
                .find(|f| *f != "*" && !valid_function_name(f))
            {
                return Err((
                    field("functions"),
                    f.clone(),
                    "a function name or \"*\"".into(),
                ));
            }
        }
        Ok(())
    }
}

impl LimitSettings {
    pub(crate) fn check(&self) -> Result<(), Problem> {
        for (field, v) in [
            ("limits.per_client_rps", self.per_client_rps),
            ("limits.per_key_rps", self.per_key_rps),
        ] {
            if !v.is_finite() || v < 0.0 {
                return Err((
                    field.into(),
                    v.to_string(),
                    "calls per second, 0 for no limit".into(),
                ));
            }
        }
        Ok(())
    }
}
