//! Shared call records: the answer of an `Idempotency-Key` call, written to etcd under its own
//! lease (the record's TTL) so that a retry at another node finds it. A node writes a record
//! before it answers, waiting at most `registry.call_record_wait_ms`; past that (etcd slow) or
//! while the registry watch is down (etcd unreachable) the answer goes out at once, the record
//! stays on the node and the write, if started, finishes in the background. Lookups read the
//! watch's copy in memory; a retry that finds nothing there may ask etcd once
//! ([`CallRecords::fetch`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;

use crate::etcd::Etcd;

/// The shared records this node knows of, and the way to add one.
#[derive(Debug)]
pub struct CallRecords {
    etcd: Etcd,
    prefix: String,
    known: moka::sync::Cache<String, Arc<Vec<u8>>>,
    max_bytes: usize,
    ttl_s: u64,
    wait: Duration,
    /// Whether the registry watch is following etcd (false: etcd is not answering).
    pub(crate) connected: Arc<AtomicBool>,
    /// Whether the last write failed or was late (to log a run of failures once).
    failing: AtomicBool,
}

/// What became of a record handed to [`CallRecords::put`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shared {
    /// It is in etcd.
    Written,
    /// Larger than `registry.call_record_max_bytes`: kept on this node only.
    TooLarge,
    /// etcd did not take it in time (or is unreachable): kept on this node only; a write that
    /// started goes on in the background.
    Local,
}

fn encode(key: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(key.as_bytes())
}

impl CallRecords {
    pub(crate) fn new(etcd: Etcd, settings: &geofaas_config::RegistrySettings) -> Self {
        let ttl_s = settings.call_record_ttl_s;
        Self {
            etcd,
            prefix: format!("{}calls/", settings.prefix),
            known: moka::sync::Cache::builder()
                // Bounded like the node's own cache: bodies are at most `max_bytes` each.
                .max_capacity(64 * 1024 * 1024)
                .weigher(|_, v: &Arc<Vec<u8>>| u32::try_from(v.len() + 64).unwrap_or(u32::MAX))
                .time_to_live(Duration::from_secs(ttl_s.max(1)))
                .build(),
            max_bytes: settings.call_record_max_bytes,
            ttl_s,
            wait: Duration::from_millis(settings.call_record_wait_ms.max(1)),
            connected: Arc::new(AtomicBool::new(false)),
            failing: AtomicBool::new(false),
        }
    }

    /// Largest record shared; larger answers stay on the node.
    pub fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    /// The record of call `key`, if any node shared one (from memory).
    pub fn get(&self, key: &str) -> Option<Arc<Vec<u8>>> {
        self.known.get(&encode(key))
    }

    /// The record of call `key` from memory or else from etcd, waiting at most
    /// `registry.call_record_wait_ms` (for a retry that may come faster than the watch).
    pub async fn fetch(&self, key: &str) -> Option<Arc<Vec<u8>>> {
        if let Some(known) = self.get(key) {
            return Some(known);
        }
        if !self.connected.load(Ordering::Relaxed) {
            return None;
        }
        let full = format!("{}{}", self.prefix, encode(key));
        match tokio::time::timeout(self.wait, self.etcd.get(full.as_bytes())).await {
            Ok(Ok(Some(value))) => {
                let value = Arc::new(value);
                self.known.insert(encode(key), value.clone());
                Some(value)
            }
            Ok(Ok(None)) => None,
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "call record lookup failed");
                None
            }
            Err(_) => None,
        }
    }

    /// Shares the record of call `key`: writes it to etcd and returns once etcd has it, or
    /// after `registry.call_record_wait_ms`, or at once when the watch says etcd is down.
    pub async fn put(&self, key: &str, record: Vec<u8>) -> Shared {
        if record.len() > self.max_bytes {
            return Shared::TooLarge;
        }
        let name = encode(key);
        self.known.insert(name.clone(), Arc::new(record.clone()));
        if !self.connected.load(Ordering::Relaxed) {
            self.failed("etcd is not answering the registry watch");
            return Shared::Local;
        }
        let (etcd, full, ttl) = (
            self.etcd.clone(),
            format!("{}{name}", self.prefix),
            self.ttl_s,
        );
        // Spawned, so that a write past the wait still lands (bounded by the request timeout).
        let write = tokio::spawn(async move {
            let (lease, _) = etcd.grant(ttl).await?;
            etcd.put(full.into_bytes(), record, lease).await
        });
        match tokio::time::timeout(self.wait, write).await {
            Ok(Ok(Ok(()))) => {
                if self.failing.swap(false, Ordering::Relaxed) {
                    tracing::info!("call records reach etcd again");
                }
                Shared::Written
            }
            Ok(Ok(Err(e))) => {
                self.failed(&e.to_string());
                Shared::Local
            }
            Ok(Err(e)) => {
                self.failed(&e.to_string());
                Shared::Local
            }
            Err(_) => {
                self.failed(&format!("etcd took longer than {:?}", self.wait));
                Shared::Local
            }
        }
    }

    fn failed(&self, why: &str) {
        if !self.failing.swap(true, Ordering::Relaxed) {
            tracing::warn!(error = why, "call record kept on this node only: a retry elsewhere will run the call again (logged once until etcd takes records again)");
        } else {
            tracing::debug!(error = why, "call record kept on this node only");
        }
    }

    pub(crate) fn remember(&self, name: &str, value: &[u8]) {
        self.known.insert(name.to_owned(), Arc::new(value.to_vec()));
    }

    pub(crate) fn forget(&self, name: &str) {
        self.known.invalidate(name);
    }
}
