//! The call stream: one event per call this node answered, offered to the subscribers of
//! `GET /events` (served by [`crate::events_api`]), and the recent latencies `/ui/state` reports.
//!
//! Every answered `/fn/{name}` call passes the [`CallStream`] observer once, when the pipeline
//! has its answer ([`crate::call::Observer`]). With nobody subscribed that costs two atomic operations (the latency
//! ring) and one load; with subscribers the event is serialised once and offered to each
//! subscriber's bounded queue ([`QUEUE`] events) with `try_send`: a subscriber whose queue is
//! full loses the event, which is counted (`geofaas_events_dropped_total` and the
//! subscriber's own `event: lost` notice), and the call never waits for a reader.
//!
//! `GET /events?scope=fleet` also follows every other node's `/events` over the signed
//! node-to-node link (the offload credential over `GET /events`) and merges their events into
//! the same queue; `event: peer` says which peers' streams are connected.
//!
//! The stream, as a client reads it:
//! ```text
//! data: {"id":"…","ts_ms":…,"at":"cbd","function":"echo","node":"cbd","status":200,…}
//!
//! : lost 12 events
//! event: lost
//! data: {"lost":12,"lost_total":12}
//! ```

use parking_lot::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::call::{CallCtx, Done, Observer};

/// Events a subscriber may have queued before newer ones are dropped for it.
pub const QUEUE: usize = 512;
/// Latencies kept for `/ui/state`'s percentiles: the node's last this many calls that ran.
const RECENT: usize = 1024;
/// The path of the stream.
pub const PATH: &str = "/events";

/// What one message on a subscriber's queue is.
#[derive(Debug)]
pub(crate) enum Msg {
    /// A call (this node's or, with `scope=fleet`, a peer's), as JSON.
    Call(Arc<str>),
    /// A peer's stream connected or went away, as JSON.
    Peer(String),
}

#[derive(Debug)]
struct Subscriber {
    tx: mpsc::Sender<Msg>,
    lost: Arc<AtomicU64>,
}

/// The node's subscribers and its recent call latencies; kept across reloads.
#[derive(Debug)]
pub struct EventBus {
    subscribers: Mutex<Vec<Subscriber>>,
    /// `subscribers.len()`, read without the lock on every call.
    watched: AtomicUsize,
    /// Latencies in microseconds, a ring written at `next % RECENT`.
    recent: Box<[AtomicU32]>,
    next: AtomicU64,
}

impl Default for EventBus {
    fn default() -> Self {
        Self {
            subscribers: Mutex::default(),
            watched: AtomicUsize::new(0),
            recent: (0..RECENT).map(|_| AtomicU32::new(0)).collect(),
            next: AtomicU64::new(0),
        }
    }
}

/// Percentiles of the recent latencies, in milliseconds.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Percentiles {
    /// How many calls they are taken over.
    pub count: usize,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
}

impl EventBus {
    /// Whether anyone reads the stream.
    pub fn watched(&self) -> bool {
        self.watched.load(Ordering::Relaxed) > 0
    }

    /// How many read it.
    pub fn subscribers(&self) -> usize {
        self.watched.load(Ordering::Relaxed)
    }

    /// A call that ran somewhere (here, offloaded or forwarded: not a handover, not a refusal)
    /// took `d` ([`CallStream`] records each).
    pub fn record_latency(&self, d: Duration) {
        let micros = u32::try_from(d.as_micros()).unwrap_or(u32::MAX);
        let i = self.next.fetch_add(1, Ordering::Relaxed) as usize % RECENT;
        self.recent[i].store(micros, Ordering::Relaxed);
    }

    /// Nearest-rank percentiles over the last calls (`None` before the first).
    pub fn percentiles(&self) -> Option<Percentiles> {
        let n = usize::try_from(self.next.load(Ordering::Relaxed))
            .unwrap_or(RECENT)
            .min(RECENT);
        if n == 0 {
            return None;
        }
        let mut v: Vec<u32> = self.recent[..n]
            .iter()
            .map(|a| a.load(Ordering::Relaxed))
            .collect();
        v.sort_unstable();
        let rank = |p: f64| {
            let i = ((p / 100.0) * n as f64).ceil() as usize;
            f64::from(v[i.clamp(1, n) - 1]) / 1000.0
        };
        Some(Percentiles {
            count: n,
            p50: rank(50.0),
            p90: rank(90.0),
            p99: rank(99.0),
        })
    }

    pub(crate) fn subscribe(&self) -> (mpsc::Sender<Msg>, mpsc::Receiver<Msg>, Arc<AtomicU64>) {
        let (tx, rx) = mpsc::channel(QUEUE);
        let lost = Arc::new(AtomicU64::new(0));
        let mut subs = self.subscribers.lock();
        subs.push(Subscriber {
            tx: tx.clone(),
            lost: lost.clone(),
        });
        self.watched.store(subs.len(), Ordering::Relaxed);
        (tx, rx, lost)
    }

    /// Offers `event` to every subscriber; returns how many lost it (their queue was full).
    fn send(&self, event: Arc<str>) -> u64 {
        let mut lost = 0;
        let mut subs = self.subscribers.lock();
        subs.retain(|s| match s.tx.try_send(Msg::Call(event.clone())) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                s.lost.fetch_add(1, Ordering::Relaxed);
                lost += 1;
                true
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        });
        self.watched.store(subs.len(), Ordering::Relaxed);
        lost
    }
}

/// The call stream as an observer of finished calls: the latency of each call that ran, for
/// `/ui/state`, and with subscribers each answered call's event. Never waits.
#[derive(Debug)]
pub struct CallStream {
    bus: Arc<EventBus>,
    metrics: Arc<crate::metrics::NodeMetrics>,
    node: String,
}

impl CallStream {
    /// The stream of node `node`, counting lost events in `metrics`.
    pub fn new(bus: Arc<EventBus>, metrics: Arc<crate::metrics::NodeMetrics>, node: &str) -> Self {
        Self {
            bus,
            metrics,
            node: node.to_owned(),
        }
    }
}

impl Observer for CallStream {
    fn finished(&self, call: &CallCtx, status: StatusCode) {
        if let Some(done) = call.done.as_ref().filter(|d| d.placement.is_some()) {
            self.bus.record_latency(done.elapsed);
        }
        // An accepted async call's event is its `202`; its tries in the background have none.
        if call.background || !self.bus.watched() {
            return;
        }
        let event = CallEvent::of(&self.node, call, status, call.received.elapsed());
        let Ok(json) = serde_json::to_string(&event) else {
            return;
        };
        for _ in 0..self.bus.send(json.into()) {
            self.metrics.events_dropped();
        }
    }
}

/// One call as `/events` shows it.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct CallEvent {
    /// The call's `X-Request-Id`.
    pub id: String,
    /// When it was answered, Unix milliseconds.
    pub ts_ms: u64,
    /// The node that received it (and sends this event).
    pub at: String,
    /// The function called.
    pub function: String,
    /// The node that ran it (`X-Served-By`); `null` when it ran nowhere (a handover, an error).
    pub node: Option<String>,
    /// The answer's HTTP status.
    pub status: u16,
    /// Time from receiving the call to its answer, milliseconds.
    pub latency_ms: f64,
    /// `X-Placement`: `local-warm`, `local-new`, `neighbor`, `cloud`.
    pub placement: Option<String>,
    /// `X-Placement-Reason`.
    pub reason: Option<String>,
    /// `X-Cold-Start`.
    pub cold_start: Option<bool>,
    /// `X-Function-Version`.
    pub version: Option<String>,
    /// Where the client was, when known.
    pub client: Option<ClientPoint>,
    /// The `307` target when the call was handed over.
    pub handover: Option<Target>,
    /// The node that ran it when this node offloaded or forwarded it.
    pub offload: Option<Target>,
    /// Another node forwarded the call here (its own event shows the offload).
    pub forwarded: bool,
}

/// A client's location in an event.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct ClientPoint {
    /// Latitude, degrees.
    pub lat: f64,
    /// Longitude, degrees.
    pub lon: f64,
    /// `header`, `geohash` or `geoip`.
    pub source: String,
}

/// Another node a call went to.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct Target {
    /// Its id.
    pub to: String,
}

impl CallEvent {
    fn of(at: &str, call: &CallCtx, status: StatusCode, latency: Duration) -> Self {
        let done = call.done.as_ref();
        let status = status.as_u16();
        let node = done
            .and_then(|d| d.node(at))
            .filter(|_| call.handover.is_none() && status != 307)
            .map(str::to_owned);
        let offload = done
            .filter(|d| d.remote.is_some())
            .and(node.clone())
            .map(|to| Target { to });
        Self {
            id: String::from_utf8_lossy(call.request_id.as_bytes()).into_owned(),
            ts_ms: now_ms(),
            at: at.to_owned(),
            function: call.function.clone(),
            node,
            status,
            latency_ms: (latency.as_micros() as f64) / 1000.0,
            placement: done
                .and_then(|d| d.placement)
                .map(|(ran, _)| ran.label().to_owned()),
            reason: done
                .and_then(|d| d.placement)
                .map(|(_, why)| why.to_owned()),
            cold_start: done.and_then(Done::cold_start),
            version: done.and_then(Done::version).map(str::to_owned),
            client: call.location.as_ref().map(|l| ClientPoint {
                lat: l.point.lat,
                lon: l.point.lon,
                source: l.source.as_str().to_owned(),
            }),
            handover: call.handover.clone().map(|to| Target { to }),
            offload,
            forwarded: call.forwarded,
        }
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank_over_the_last_calls() {
        let bus = EventBus::default();
        assert_eq!(bus.percentiles(), None);
        for ms in 1..=100u64 {
            bus.record_latency(Duration::from_millis(ms));
        }
        let p = bus.percentiles().unwrap();
        assert_eq!((p.count, p.p50, p.p90, p.p99), (100, 50.0, 90.0, 99.0));
        // The ring keeps only the last RECENT calls: after that many 7 ms calls, 7 is all.
        for _ in 0..RECENT {
            bus.record_latency(Duration::from_millis(7));
        }
        let p = bus.percentiles().unwrap();
        assert_eq!((p.count, p.p50, p.p99), (RECENT, 7.0, 7.0));
    }

    #[tokio::test]
    async fn a_full_queue_loses_events_and_counts_them_without_blocking() {
        let bus = EventBus::default();
        let (_tx, mut rx, lost) = bus.subscribe();
        assert!(bus.watched());
        let mut dropped = 0;
        for i in 0..QUEUE + 10 {
            dropped += bus.send(format!("{i}").into());
        }
        assert_eq!(dropped, 10);
        assert_eq!(lost.load(Ordering::Relaxed), 10);
        // The oldest are kept, in order.
        match rx.recv().await {
            Some(Msg::Call(s)) => assert_eq!(&*s, "0"),
            other => panic!("{other:?}"),
        }
        drop(rx);
        drop(_tx);
        bus.send("gone".into());
        assert!(!bus.watched(), "a closed subscriber is removed");
    }
}
