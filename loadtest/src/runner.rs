//! Running a plan of calls: closed loop (each call waits for the previous answer) or open loop
//! (each call sent at its planned time on its own task, whatever the others do), with a
//! progress bar and an optional trigger after a number of answers.
//!
//! Open-loop latency counts from the planned send time, not the actual one, so a client that
//! falls behind its schedule shows the delay instead of hiding it (no coordinated omission).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use geofaas_config::LatLon;
use indicatif::ProgressBar;

use crate::client::{CallRequest, GeoClient};
use crate::record::Row;

/// One call of a plan.
#[derive(Clone, Debug)]
pub struct Planned {
    /// Index of the client (into the runner's client list) that makes the call.
    pub client: usize,
    /// Name of the client for `requests.csv`.
    pub name: String,
    /// High-load round (number of clients), else 0.
    pub round: u32,
    /// Call number.
    pub seq: u64,
    /// When to send it, after the start of the plan (open loop only).
    pub offset: Duration,
    /// Where the client is.
    pub location: LatLon,
}

/// What every call of a run sends.
#[derive(Clone, Debug)]
pub struct CallTemplate {
    /// Function name.
    pub function: String,
    /// Request body.
    pub body: Bytes,
    /// Prefix of the `Idempotency-Key` (`<prefix>-<client>-<seq>`); none sends no key.
    pub idempotency_prefix: Option<String>,
}

impl CallTemplate {
    /// The request of planned call `p`.
    pub fn request(&self, p: &Planned) -> CallRequest {
        CallRequest {
            function: self.function.clone(),
            location: Some(p.location),
            body: self.body.clone(),
            idempotency_key: self
                .idempotency_prefix
                .as_ref()
                .map(|k| format!("{k}-{}-{}-{}", p.round, p.client, p.seq)),
        }
    }
}

/// Runs `fire` once, on the answer that brings the count of successful answers to `after`.
pub struct Trigger {
    after: u64,
    answered: AtomicU64,
    fire: Box<dyn Fn(&Row) + Send + Sync>,
}

impl Trigger {
    /// A trigger after `after` successful answers.
    pub fn new(after: u64, fire: impl Fn(&Row) + Send + Sync + 'static) -> Self {
        Self {
            after,
            answered: AtomicU64::new(0),
            fire: Box::new(fire),
        }
    }

    fn observe(&self, row: &Row) {
        if row.ok() && self.answered.fetch_add(1, Ordering::SeqCst) + 1 == self.after {
            (self.fire)(row);
        }
    }
}

/// Each call after the previous answer, all by `client`; `sent_ms` is the actual send time.
pub async fn run_closed(
    client: &GeoClient,
    plan: &[Planned],
    template: &CallTemplate,
    progress: &ProgressBar,
    trigger: Option<&Trigger>,
) -> Vec<Row> {
    let t0 = Instant::now();
    let mut rows = Vec::with_capacity(plan.len());
    for p in plan {
        let sent = Instant::now();
        let req = template.request(p);
        let report = client.call_from(&req, sent).await;
        let mut row = Row::new(
            &p.name,
            p.round,
            p.seq,
            Some(p.location),
            ms(sent - t0),
            &report,
        );
        row.function = req.function;
        if let Some(t) = trigger {
            t.observe(&row);
        }
        progress.inc(1);
        rows.push(row);
    }
    rows
}

/// Each call at its planned time on its own task; rows come back in plan order.
pub async fn run_open(
    clients: &[Arc<GeoClient>],
    plan: &[Planned],
    template: &CallTemplate,
    progress: &ProgressBar,
    trigger: Option<Arc<Trigger>>,
) -> Vec<Row> {
    let requests: Vec<CallRequest> = plan.iter().map(|p| template.request(p)).collect();
    run_open_requests(clients, plan, &requests, progress, trigger).await
}

/// [`run_open`] with each planned call's own request (`requests[i]` for `plan[i]`), for runs
/// that call several functions.
pub async fn run_open_requests(
    clients: &[Arc<GeoClient>],
    plan: &[Planned],
    requests: &[CallRequest],
    progress: &ProgressBar,
    trigger: Option<Arc<Trigger>>,
) -> Vec<Row> {
    assert_eq!(plan.len(), requests.len(), "one request per planned call");
    let t0 = tokio::time::Instant::now();
    let mut tasks = Vec::with_capacity(plan.len());
    for (p, req) in plan.iter().zip(requests) {
        let at = t0 + p.offset;
        tokio::time::sleep_until(at).await;
        let (client, p, req) = (clients[p.client].clone(), p.clone(), req.clone());
        let (progress, trigger) = (progress.clone(), trigger.clone());
        tasks.push(tokio::spawn(async move {
            let report = client.call_from(&req, at.into_std()).await;
            let mut row = Row::new(
                &p.name,
                p.round,
                p.seq,
                Some(p.location),
                ms(p.offset),
                &report,
            );
            row.function = req.function;
            if let Some(t) = trigger {
                t.observe(&row);
            }
            progress.inc(1);
            row
        }));
    }
    let mut rows = Vec::with_capacity(tasks.len());
    for t in tasks {
        rows.push(t.await.expect("call task panicked"));
    }
    rows
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Calls each of `functions` once at every node, each from the node's own location with a
/// client of its own, the nodes side by side and each node's calls one after another; none is
/// recorded. Afterwards every node has run (and measured) every function once, so the calls
/// that follow are placed by the nodes' policies instead of started wherever they land.
pub async fn warm_every_node(ctx: &crate::cli::Ctx, functions: &[String]) -> anyhow::Result<()> {
    let nodes = ctx.map.nodes().iter().map(|node| async move {
        let mut cfg = ctx.client_config(node.location);
        cfg.entry = node.public_url.clone();
        let client = GeoClient::new(&cfg)?;
        for function in functions {
            let report = client
                .call(&CallRequest {
                    function: function.clone(),
                    location: Some(node.location),
                    body: ctx.template.body.clone(),
                    idempotency_key: None,
                })
                .await;
            anyhow::ensure!(
                report.is_success(),
                "warm-up call of {function} at {} failed: {:?} {:?}",
                node.id,
                report.status,
                report.error
            );
        }
        Ok(())
    });
    futures::future::try_join_all(nodes).await.map(drop)
}
