//! Background load beside a measured run: static clients that each call a function at a fixed
//! interval, open loop, until the run says stop (`loadtest mobility --background-clients`).
//! They load the nodes the walker meets, so that where a call runs matters; their calls are
//! recorded apart from the walk's (`background.csv`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::client::{CallRequest, GeoClient};
use crate::points::Point;
use crate::record::Row;

/// Background clients calling until [`Background::stop`].
pub struct Background {
    stop: Arc<AtomicBool>,
    clients: Vec<JoinHandle<Vec<Row>>>,
}

impl Background {
    /// Starts one task per client in `clients` (a [`GeoClient`] each, at its point), each
    /// sending `request` from its own location every `interval`, the clients' first calls
    /// spread evenly over the first interval.
    pub fn start(
        clients: Vec<(Point, Arc<GeoClient>)>,
        request: &CallRequest,
        interval: Duration,
    ) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let n = clients.len().max(1) as u32;
        let t0 = tokio::time::Instant::now();
        let clients = clients
            .into_iter()
            .enumerate()
            .map(|(i, (point, client))| {
                let req = CallRequest {
                    location: Some(point.location),
                    ..request.clone()
                };
                let first = t0 + interval * i as u32 / n;
                tokio::spawn(calls(point, client, req, first, interval, stop.clone()))
            })
            .collect();
        Self { stop, clients }
    }

    /// Stops sending, waits for the calls in flight and returns every call's row, client by
    /// client.
    pub async fn stop(self) -> Vec<Row> {
        self.stop.store(true, Ordering::SeqCst);
        let mut rows = Vec::new();
        for c in self.clients {
            rows.extend(c.await.expect("background client panicked"));
        }
        rows
    }
}

/// One client's calls: `req` at `first`, then every `interval`, until `stop`.
async fn calls(
    point: Point,
    client: Arc<GeoClient>,
    req: CallRequest,
    first: tokio::time::Instant,
    interval: Duration,
    stop: Arc<AtomicBool>,
) -> Vec<Row> {
    let mut tasks = Vec::new();
    let mut at = first;
    let started = tokio::time::Instant::now();
    for seq in 0u64.. {
        tokio::time::sleep_until(at).await;
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let (client, req, name) = (client.clone(), req.clone(), point.name.clone());
        let sent_ms = (at - started).as_secs_f64() * 1000.0;
        let send = at.into_std();
        tasks.push(tokio::spawn(async move {
            let report = client.call_from(&req, send).await;
            let mut row = Row::new(&name, 0, seq, req.location, sent_ms, &report);
            row.function = req.function;
            row
        }));
        at += interval;
    }
    let mut rows = Vec::with_capacity(tasks.len());
    for t in tasks {
        rows.push(t.await.expect("background call panicked"));
    }
    rows
}
