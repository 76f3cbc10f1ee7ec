//! A node's health as `geofaas fleet ls` shows it: what the node itself says (its `/readyz`,
//! asked at once) and how old its last load report is, not only that etcd still holds its
//! record (a killed node's record outlives it by up to its lease time).
//!
//! | HEALTH | `/readyz` | last load report |
//! |---|---|---|
//! | `up` | 200 | at most two report intervals old |
//! | `stale` | 200 | older, or none (the node serves, but its reports do not reach etcd) |
//! | `not-ready` | 503 (draining, or not started) | any |
//! | `down` | no answer (refused, timed out, TLS failed) | any |

use std::path::Path;
use std::time::Duration;

use anyhow::Context;

/// How long one node may take to answer `/readyz`.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// What a node's `/readyz` said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Probe {
    /// 200.
    Ready,
    /// Another status (503 while draining).
    NotReady(u16),
    /// No answer, with the reason.
    Unreachable(String),
}

/// Whether a load report `age_ms` old is recent: at most two report intervals.
pub fn is_fresh(age_ms: Option<u64>, interval_ms: u64) -> bool {
    age_ms.is_some_and(|a| a <= interval_ms.saturating_mul(2))
}

/// The HEALTH column (see the module's table).
pub fn health(probe: &Probe, report_age_ms: Option<u64>, interval_ms: u64) -> &'static str {
    match probe {
        Probe::Unreachable(_) => "down",
        Probe::NotReady(_) => "not-ready",
        Probe::Ready if is_fresh(report_age_ms, interval_ms) => "up",
        Probe::Ready => "stale",
    }
}

/// Asks nodes for their `/readyz` over HTTPS.
#[derive(Debug)]
pub struct Prober {
    client: reqwest::Client,
}

impl Prober {
    /// A prober that trusts `ca` (a PEM file) besides the system's roots.
    pub fn new(ca: Option<&Path>) -> anyhow::Result<Self> {
        let mut client = reqwest::Client::builder().timeout(PROBE_TIMEOUT);
        if let Some(ca) = ca {
            let pem = std::fs::read(ca).with_context(|| format!("reading {}", ca.display()))?;
            let cert = reqwest::Certificate::from_pem(&pem)
                .with_context(|| format!("{}: not a PEM certificate", ca.display()))?;
            client = client.add_root_certificate(cert);
        }
        Ok(Self {
            client: client.build()?,
        })
    }

    /// Every node's answer, at once, in the order of `urls`.
    pub async fn all(&self, urls: &[&url::Url]) -> Vec<Probe> {
        futures::future::join_all(urls.iter().map(|u| self.one(u))).await
    }

    async fn one(&self, base: &url::Url) -> Probe {
        let url = format!("{}/readyz", base.as_str().trim_end_matches('/'));
        match self.client.get(url).send().await {
            Ok(r) if r.status().is_success() => Probe::Ready,
            Ok(r) => Probe::NotReady(r.status().as_u16()),
            Err(e) => Probe::Unreachable(crate::deploy_cli::describe(&e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_is_what_the_node_says_then_how_old_its_report_is() {
        let gone = Probe::Unreachable("connection refused".into());
        let cases = [
            (Probe::Ready, Some(900), "up"),
            (Probe::Ready, Some(2000), "up"),
            (Probe::Ready, Some(2001), "stale"),
            (Probe::Ready, None, "stale"),
            (Probe::NotReady(503), Some(100), "not-ready"),
            (gone.clone(), Some(100), "down"),
            (gone, None, "down"),
        ];
        for (probe, age, want) in cases {
            assert_eq!(health(&probe, age, 1000), want, "{probe:?} {age:?}");
        }
    }
}
