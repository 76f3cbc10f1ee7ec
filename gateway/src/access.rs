//! Who may call what: API keys sent as `Authorization: Bearer <key>`, checked against the
//! SHA-256 hashes of `[[auth.key]]` in the topology (the keys themselves are never stored).
//!
//! With no key configured a node is open (it logs that once at start-up). Otherwise a call
//! without a known key is `401` with `WWW-Authenticate: Bearer`, a key without rights to the
//! function `403`, and the operational endpoints that reveal the deployment (`/metrics`,
//! `/registry`, other keys' activations) need a key with `admin = true`. Calls offloaded by
//! another node carry its signature instead (the edge checked the caller's key).

use std::collections::HashMap;

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use geofaas_config::{ApiKeyConfig, AuthSettings};

use crate::error::ApiError;

/// The API keys of a node, by hash.
#[derive(Debug, Default)]
pub struct Access {
    keys: HashMap<String, ApiKeyConfig>,
}

/// Who is calling.
#[derive(Debug, Clone, Copy)]
pub enum Caller<'a> {
    /// The node is open: no keys are configured.
    Anyone,
    /// A caller with this key.
    Key(&'a ApiKeyConfig),
    /// Another node, on an offloaded call it signed.
    Node,
}

impl Caller<'_> {
    /// The key's id, for logs, rate limits and activation owners.
    pub fn key_id(&self) -> Option<&str> {
        match self {
            Self::Key(k) => Some(&k.id),
            Self::Anyone | Self::Node => None,
        }
    }
}

impl Access {
    /// The keys of `[[auth.key]]`.
    pub fn new(settings: &AuthSettings) -> Self {
        Self {
            keys: settings
                .key
                .iter()
                .map(|k| (k.sha256.clone(), k.clone()))
                .collect(),
        }
    }

    /// Whether the node is open to everyone.
    pub fn is_open(&self) -> bool {
        self.keys.is_empty()
    }

    /// The caller of a request: `401` when keys are configured and it has none of them.
    pub fn caller(&self, headers: &HeaderMap) -> Result<Caller<'_>, ApiError> {
        if self.is_open() {
            return Ok(Caller::Anyone);
        }
        let token = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                v.strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
            })
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                unauthorized("this node needs an API key: Authorization: Bearer <key>")
            })?;
        self.keys
            .get(&sha256_hex(token))
            .map(Caller::Key)
            .ok_or_else(|| unauthorized("unknown API key"))
    }

    /// The caller of `function`: `401` without a known key, `403` when the key may not call it.
    pub fn call(&self, headers: &HeaderMap, function: &str) -> Result<Caller<'_>, ApiError> {
        let caller = self.caller(headers)?;
        match caller {
            Caller::Key(k) if !k.may_call(function) => Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!("API key {:?} may not call this function", k.id),
            )),
            _ => Ok(caller),
        }
    }

    /// An admin caller (or anyone, on an open node): `401`/`403` otherwise.
    pub fn admin(&self, headers: &HeaderMap) -> Result<Caller<'_>, ApiError> {
        match self.caller(headers)? {
            Caller::Key(k) if !k.admin => Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!("API key {:?} is not an admin key", k.id),
            )),
            caller => Ok(caller),
        }
    }
}

fn unauthorized(message: &str) -> ApiError {
    ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
        .with_header(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"))
}

/// Lower-case hex SHA-256 of `text`, as `sha256sum` prints it.
pub fn sha256_hex(text: &str) -> String {
    use std::fmt::Write as _;
    let digest = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
    digest
        .as_ref()
        .iter()
        .fold(String::with_capacity(64), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access() -> Access {
        let key = |id: &str, secret: &str, functions: &[&str], admin| ApiKeyConfig {
            id: id.into(),
            sha256: sha256_hex(secret),
            functions: functions.iter().map(|f| f.to_string()).collect(),
            admin,
        };
        Access::new(&AuthSettings {
            key: vec![
                key("app", "app-secret", &["echo"], false),
                key("ops", "ops-secret", &["*"], true),
            ],
        })
    }

    fn bearer(token: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            header::AUTHORIZATION,
            format!("Bearer {token}").parse().unwrap(),
        );
        h
    }

    #[test]
    fn hashes_match_sha256sum() {
        // printf %s abc | sha256sum
        assert_eq!(
            sha256_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn keys_grant_the_functions_they_list() {
        let a = access();
        assert_eq!(a.call(&HeaderMap::new(), "echo").unwrap_err().status, 401);
        let e = a.call(&bearer("wrong"), "echo").unwrap_err();
        assert_eq!(e.status, 401);
        assert_eq!(e.headers[0].1, "Bearer");
        assert_eq!(
            a.call(&bearer("app-secret"), "echo").unwrap().key_id(),
            Some("app")
        );
        assert_eq!(
            a.call(&bearer("app-secret"), "sieve").unwrap_err().status,
            403
        );
        assert!(a.call(&bearer("ops-secret"), "sieve").is_ok());
        assert_eq!(a.admin(&bearer("app-secret")).unwrap_err().status, 403);
        assert!(a.admin(&bearer("ops-secret")).is_ok());
        assert!(Access::default().call(&HeaderMap::new(), "x").is_ok());
    }
}
