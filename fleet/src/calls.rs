//! Shared call records: the answer of an `Idempotency-Key` call, written to etcd under its own
//! lease (the record's TTL) so that a retry at another node finds it. Reads come from the
//! watch's copy in memory, never from etcd; writes go out in the background.

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
}

fn encode(key: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(key.as_bytes())
}

impl CallRecords {
    pub(crate) fn new(etcd: Etcd, prefix: &str, max_bytes: usize, ttl_s: u64) -> Self {
        Self {
            etcd,
            prefix: format!("{prefix}calls/"),
            known: moka::sync::Cache::builder()
                // Bounded like the node's own cache: bodies are at most `max_bytes` each.
                .max_capacity(64 * 1024 * 1024)
                .weigher(|_, v: &Arc<Vec<u8>>| u32::try_from(v.len() + 64).unwrap_or(u32::MAX))
                .time_to_live(Duration::from_secs(ttl_s.max(1)))
                .build(),
            max_bytes,
            ttl_s,
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

    /// Shares the record of call `key` in the background; one over [`CallRecords::max_bytes`]
    /// is not shared. Returns whether it was sent.
    pub fn put(&self, key: &str, record: Vec<u8>) -> bool {
        if record.len() > self.max_bytes {
            return false;
        }
        let name = encode(key);
        self.known.insert(name.clone(), Arc::new(record.clone()));
        let (etcd, full, ttl) = (
            self.etcd.clone(),
            format!("{}{name}", self.prefix),
            self.ttl_s,
        );
        tokio::spawn(async move {
            let put = async {
                let (lease, _) = etcd.grant(ttl).await?;
                etcd.put(full.into_bytes(), record, lease).await
            };
            if let Err(e) = put.await {
                tracing::warn!(error = %e, "call record not shared: a retry elsewhere will run the call again");
            }
        });
        true
    }

    pub(crate) fn remember(&self, name: &str, value: &[u8]) {
        self.known.insert(name.to_owned(), Arc::new(value.to_vec()));
    }

    pub(crate) fn forget(&self, name: &str) {
        self.known.invalidate(name);
    }
}
