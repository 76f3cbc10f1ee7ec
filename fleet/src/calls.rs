//! Shared call records: the answer of an `Idempotency-Key` call, written to etcd under a lease so
//! that a retry at another node finds it and etcd deletes it after its TTL. The records written
//! in one window of `call_record_ttl_s / 10` seconds (1 to 60) share a lease granted for the TTL
//! plus the window: each record lives at least `call_record_ttl_s` and at most one window
//! longer, and a keyed call costs etcd one request (the put) instead of two. A node writes a record
//! before it answers, waiting at most `registry.call_record_wait_ms`; past that (etcd slow) or
//! while the registry watch is down (etcd unreachable) the answer goes out at once, the record
//! stays on the node and the write, if started, finishes in the background. Lookups read the
//! watch's copy in memory; a retry that finds nothing there may ask etcd once
//! ([`CallRecords::fetch`]).

use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;

use crate::etcd::Etcd;

/// The shared records this node knows of, and the way to add one.
#[derive(Debug)]
pub struct CallRecords {
    etcd: Etcd,
    prefix: String,
    known: moka::sync::Cache<String, Arc<Vec<u8>>>,
    max_bytes: usize,
    wait: Duration,
    /// Whether the registry watch is following etcd (false: etcd is not answering).
    pub(crate) connected: Arc<AtomicBool>,
    /// Whether the last write failed or was late (to log a run of failures once).
    failing: AtomicBool,
    leases: Arc<Leases>,
}

/// The lease the records of the current window are attached to.
#[derive(Debug)]
struct Leases {
    ttl_s: u64,
    window: Duration,
    /// The lease and the end of its window.
    current: Mutex<Option<(i64, Instant)>>,
}

impl Leases {
    fn new(ttl_s: u64) -> Self {
        Self {
            ttl_s,
            window: Duration::from_secs((ttl_s / 10).clamp(1, 60)),
            current: Mutex::new(None),
        }
    }

    /// The lease of this window, granted (for the TTL plus the window) when there is none yet.
    /// Two writers that find none at the same moment both grant one; the later is kept.
    async fn current(&self, etcd: &Etcd) -> Result<i64, crate::FleetError> {
        let now = Instant::now();
        if let Some((id, until)) = *self.current.lock() {
            if now < until {
                return Ok(id);
            }
        }
        let (id, _) = etcd.grant(self.ttl_s + self.window.as_secs()).await?;
        *self.current.lock() = Some((id, now + self.window));
        Ok(id)
    }

    /// Drops lease `id` as the current one (etcd no longer has it).
    fn forget(&self, id: i64) {
        let mut current = self.current.lock();
        if matches!(*current, Some((held, _)) if held == id) {
            *current = None;
        }
    }
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
            wait: Duration::from_millis(settings.call_record_wait_ms.max(1)),
            connected: Arc::new(AtomicBool::new(false)),
            failing: AtomicBool::new(false),
            leases: Arc::new(Leases::new(ttl_s)),
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
        let record = Arc::new(record);
        self.known.insert(name.clone(), record.clone());
        if !self.connected.load(Ordering::Relaxed) {
            self.failed("etcd is not answering the registry watch");
            return Shared::Local;
        }
        let (etcd, full, leases) = (
            self.etcd.clone(),
            format!("{}{name}", self.prefix).into_bytes(),
            self.leases.clone(),
        );
        // Spawned, so that a write past the wait still lands (bounded by the request timeout).
        let write = tokio::spawn(async move {
            let lease = leases.current(&etcd).await?;
            match etcd.put(full.clone(), record.to_vec(), lease).await {
                // The window's lease is gone (revoked, or an etcd restored without it): once
                // more, on a new one.
                Err(crate::FleetError::Etcd(e)) if e.contains("lease not found") => {
                    leases.forget(lease);
                    let lease = leases.current(&etcd).await?;
                    etcd.put(full, record.to_vec(), lease).await
                }
                done => done,
            }
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
