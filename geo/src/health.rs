//! Gateway health as DNS sees it: a shared table of healthy flags, and the prober that fills it from
//! each gateway's `GET /readyz`.
//!
//! The table is the pluggable part: the DNS server's manual mode takes one and lets the caller (a
//! test, or a gateway that already tracks its peers) set the flags; its probe mode runs
//! [`spawn_probers`]. A probe that fails (connection error, TLS error, timeout, or a non-2xx status)
//! withdraws the node at once; the next successful probe restores it. Probes run every
//! `dns.probe_interval_ms` with a timeout of three quarters of it, so a gateway that stops is withdrawn
//! within two intervals.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use url::Url;

use crate::error::GeoError;

/// Healthy flags of the topology's nodes, indexed like the DNS router's nodes. Cheap to clone;
/// clones share the flags. Every node starts healthy.
#[derive(Clone, Debug)]
pub struct HealthTable {
    ids: Arc<[String]>,
    healthy: Arc<[AtomicBool]>,
}

impl HealthTable {
    /// A table for these node ids, all healthy.
    pub fn new(ids: impl IntoIterator<Item = String>) -> Self {
        let ids: Arc<[String]> = ids.into_iter().collect();
        let healthy = ids.iter().map(|_| AtomicBool::new(true)).collect();
        Self { ids, healthy }
    }

    /// Marks node `id` healthy or not; returns false if there is no such node.
    pub fn set(&self, id: &str, healthy: bool) -> bool {
        match self.ids.iter().position(|n| n == id) {
            Some(i) => {
                self.set_index(i, healthy);
                true
            }
            None => false,
        }
    }

    /// Marks the node at index `i` healthy or not; returns the previous value.
    pub fn set_index(&self, i: usize, healthy: bool) -> bool {
        self.healthy
            .get(i)
            .is_some_and(|h| h.swap(healthy, Ordering::Relaxed))
    }

    /// Whether the node at index `i` passed its last check (false for an unknown index).
    pub fn is_healthy(&self, i: usize) -> bool {
        self.healthy
            .get(i)
            .is_some_and(|h| h.load(Ordering::Relaxed))
    }

    /// Whether node `id` passed its last check.
    pub fn is_healthy_id(&self, id: &str) -> bool {
        self.ids
            .iter()
            .position(|n| n == id)
            .is_some_and(|i| self.is_healthy(i))
    }
}

/// Builds the probe client: HTTPS with rustls, trusting the built-in roots plus the PEM CA bundle at
/// `ca` (the gateways' self-signed CA), no proxy, and a per-request timeout.
pub fn probe_client(ca: Option<&Path>, timeout: Duration) -> Result<reqwest::Client, GeoError> {
    let mut builder = reqwest::Client::builder()
        .use_rustls_tls()
        .no_proxy()
        .timeout(timeout)
        .connect_timeout(timeout)
        .pool_max_idle_per_host(1);
    if let Some(path) = ca {
        let ca_err = |message: String| GeoError::Ca {
            path: path.to_owned(),
            message,
        };
        let pem = std::fs::read(path).map_err(|e| ca_err(e.to_string()))?;
        let certs =
            reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| ca_err(e.to_string()))?;
        if certs.is_empty() {
            return Err(ca_err("no certificate in the file".into()));
        }
        for cert in certs {
            builder = builder.add_root_certificate(cert);
        }
    }
    builder.build().map_err(|e| GeoError::Probe(e.to_string()))
}

/// Starts one probe task per node (`urls` indexed like the table) that checks `<url>/readyz` every
/// `interval` and updates `table`. The tasks stop when the returned set is dropped.
pub fn spawn_probers(
    urls: Vec<Url>,
    table: HealthTable,
    interval: Duration,
    ca: Option<&Path>,
) -> Result<JoinSet<()>, GeoError> {
    let client = probe_client(ca, interval.mul_f64(0.75))?;
    let mut set = JoinSet::new();
    for (i, url) in urls.into_iter().enumerate() {
        let Ok(readyz) = url.join("/readyz") else {
            continue;
        };
        let (client, table) = (client.clone(), table.clone());
        set.spawn(async move {
            let mut ticks = tokio::time::interval(interval);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                let outcome = client.get(readyz.clone()).send().await;
                let ok = matches!(&outcome, Ok(r) if r.status().is_success());
                let was = table.set_index(i, ok);
                if was != ok {
                    let id = table.ids.get(i).map_or("?", String::as_str);
                    match outcome {
                        Ok(r) if ok => tracing::info!(node = id, status = %r.status(), "gateway ready again: answered by DNS"),
                        Ok(r) => tracing::warn!(node = id, status = %r.status(), "gateway not ready: withdrawn from DNS"),
                        Err(e) => tracing::warn!(node = id, error = %e, "gateway unreachable: withdrawn from DNS"),
                    }
                }
            }
        });
    }
    Ok(set)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_are_shared_between_clones() {
        let t = HealthTable::new(["a".to_owned(), "b".to_owned()]);
        let u = t.clone();
        assert!(t.is_healthy(0) && t.is_healthy(1));
        assert!(u.set("b", false));
        assert!(!t.is_healthy(1));
        assert!(!t.is_healthy_id("b"));
        assert!(!u.set("c", false));
        assert!(!t.is_healthy(7));
    }

    #[test]
    fn a_missing_ca_file_is_a_config_error() {
        let err = probe_client(
            Some(Path::new("/nonexistent/ca.pem")),
            Duration::from_secs(1),
        )
        .expect_err("missing file");
        assert!(err.is_config(), "{err}");
    }
}
