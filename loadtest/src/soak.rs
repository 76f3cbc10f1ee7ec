//! `geofaas loadtest soak`: the fleet under steady load for a long time, with the operations an
//! operator runs meanwhile, to find what grows or breaks only with time.
//!
//! Every node runs as its own `geofaas node` process (`--spawn`). Calls arrive open loop
//! (Poisson at `--rate`), each from a client drawn uniformly among `--clients-per-edge` static
//! clients per edge area, to a function drawn uniformly among `--function-mix` and the deployed
//! function `soak`. Meanwhile:
//! - every `--deploy-every-s` a new version of `soak` is deployed to every node with the real
//!   `geofaas deploy` (its code names the round, so each deploy is a new version);
//! - every `--restart-every-s` one node (`--restart-node`, default the last edge) is restarted:
//!   SIGTERM (it drains), then started again on the same state folder; its clients' calls are
//!   retried at the cloud by the client while it is away;
//! - every `--sample-every-s` each node process's resident memory, open descriptors and threads
//!   are read from `/proc`, with the count and memory of its function instances (its
//!   descendant processes).
//!
//! Written as the run goes (so a run cut short keeps what it measured): `windows.csv` (answers
//! per `--window-s` window of completion time: calls, failed, P50, P99, max), `failures.csv`
//! (every call without a 2xx answer), `resources.csv` and `events.csv` (deploys and restarts);
//! at the end `summary.json` (the goals: no failed call, growth under 5 % after the settling
//! time) and `soak.png` (P50/P99 over time with the restarts marked, and each node's memory).

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use hdrhistogram::Histogram;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp};
use serde_json::json;
use tokio::time::Instant;

use crate::cli::{Ctx, SoakArgs};
use crate::client::{CallRequest, GeoClient};
use crate::mixed::edge_clients;
use crate::spawn::{Restarted, Spawned};

/// The deployed function's name.
pub const DEPLOYED: &str = "soak";
/// Growth allowed after the settling time, as the goal states it.
const GROWTH_GOAL: f64 = 0.05;
/// How long a restarted node gets to drain before it is killed.
const RESTART_GRACE: Duration = Duration::from_secs(40);

/// One answered (or failed) call.
struct Sample {
    done_s: f64,
    latency_us: u64,
    ok: bool,
    function: String,
    client: String,
    status: u16,
    attempts: u32,
    served_by: String,
    error: String,
}

/// One reading of a node process.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Reading {
    /// Seconds since the run started.
    pub t_s: f64,
    /// Node id.
    pub node: String,
    /// Its process.
    pub pid: u32,
    /// Resident memory, KiB (`VmRSS`).
    pub rss_kib: u64,
    /// Open file descriptors.
    pub fds: u64,
    /// Of them, sockets (listeners and connections, its clients' and its peers').
    pub sockets: u64,
    /// Threads.
    pub threads: u64,
    /// Its descendant processes (function instances and their workers).
    pub children: u64,
    /// Their resident memory together, KiB.
    pub children_rss_kib: u64,
}

/// One window of answers, by completion time.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Window {
    /// End of the window, seconds since the run started.
    pub end_s: f64,
    /// Answers in it.
    pub calls: u64,
    /// Of them, without a 2xx.
    pub failed: u64,
    /// Median latency, ms.
    pub p50_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// Slowest, ms.
    pub max_ms: f64,
}

/// A deploy or a restart.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Event {
    /// When it started, seconds since the run started.
    pub t_s: f64,
    /// `deploy` or `restart`.
    pub kind: &'static str,
    /// What happened.
    pub detail: String,
    /// Whether it succeeded.
    pub ok: bool,
    /// How long it took, ms.
    pub took_ms: f64,
}

/// Runs the soak and writes its files.
pub async fn run(args: &SoakArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.common.spawn,
        "loadtest soak needs --spawn: it restarts nodes and reads their processes"
    );
    anyhow::ensure!(
        args.rate.is_finite() && args.rate > 0.0,
        "--rate {}: must be a number of calls per second > 0",
        args.rate
    );
    anyhow::ensure!(args.window_s > 0, "--window-s 0: must be at least 1");
    anyhow::ensure!(
        args.sample_every_s > 0,
        "--sample-every-s 0: must be at least 1"
    );
    anyhow::ensure!(
        args.clients_per_edge > 0,
        "--clients-per-edge 0: must be at least 1"
    );
    let ctx = Ctx::setup(&args.common, 10_000).await?;
    let spawned = ctx.spawned.clone().expect("--spawn checked above");
    let restart_node = match &args.restart_node {
        Some(n) => {
            anyhow::ensure!(
                ctx.map.node(n).is_some(),
                "--restart-node {n:?}: the topology has no such node"
            );
            Some(n.clone())
        }
        None => ctx
            .topology
            .nodes
            .iter()
            .rev()
            .find(|n| n.role == geofaas_config::Role::Edge)
            .map(|n| n.id.clone()),
    };
    let mut rng = ChaCha8Rng::seed_from_u64(args.seed);
    let clients = edge_clients(
        &ctx.map,
        &ctx.topology,
        args.clients_per_edge,
        5.0,
        &mut rng,
    )?;
    let geo = clients
        .iter()
        .map(|p| GeoClient::new(&ctx.client_config(p.location)).map(Arc::new))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut functions = args.function_mix.clone();
    let deploying = args.deploy_every_s > 0;
    let bin = match &args.common.geofaas_bin {
        Some(b) => b.clone(),
        None => std::env::current_exe()?,
    };
    let out = std::path::absolute(&ctx.out)?;
    let deploy_dir = out.join("deployed").join(DEPLOYED);
    let events = Arc::new(Mutex::new(Vec::<Event>::new()));
    let t0 = Instant::now();
    let files = Files::create(&out)?;
    if deploying {
        // The first version before the first call, so every call of it finds one.
        let e = deploy(&bin, &spawned, &deploy_dir, 0, t0).await;
        anyhow::ensure!(e.ok, "the first deploy of {DEPLOYED} failed: {}", e.detail);
        files.event(&e);
        events.lock().push(e);
        functions.push(DEPLOYED.to_owned());
    }
    anyhow::ensure!(
        !functions.is_empty(),
        "no function to call: --function-mix is empty"
    );
    let duration = Duration::from_secs(args.duration_s);
    let t0 = Instant::now();
    let samples = Arc::new(Mutex::new(Vec::<Sample>::new()));
    let files = Arc::new(files);
    let stop = tokio_util::sync::CancellationToken::new();
    let readings = Arc::new(Mutex::new(Vec::<Reading>::new()));
    let mut background = tokio::task::JoinSet::new();
    background.spawn(sampler(
        spawned.clone(),
        files.clone(),
        readings.clone(),
        Duration::from_secs(args.sample_every_s),
        t0,
        stop.clone(),
    ));
    if deploying {
        let (bin, spawned, files, events, stop) = (
            bin.clone(),
            spawned.clone(),
            files.clone(),
            events.clone(),
            stop.clone(),
        );
        let every = Duration::from_secs(args.deploy_every_s);
        background.spawn(async move {
            for round in 1.. {
                tokio::select! {
                    _ = tokio::time::sleep_until(t0 + every * round) => {}
                    _ = stop.cancelled() => break,
                }
                let e = deploy(&bin, &spawned, &deploy_dir, round, t0).await;
                files.event(&e);
                events.lock().push(e);
            }
        });
    }
    if let (Some(node), true) = (restart_node.clone(), args.restart_every_s > 0) {
        let (spawned, files, events, stop) =
            (spawned.clone(), files.clone(), events.clone(), stop.clone());
        let every = Duration::from_secs(args.restart_every_s);
        // Half a deploy interval after a deploy, so a restart does not meet one.
        let offset = Duration::from_secs(args.deploy_every_s / 2);
        background.spawn(async move {
            for round in 1.. {
                tokio::select! {
                    _ = tokio::time::sleep_until(t0 + every * round + offset) => {}
                    _ = stop.cancelled() => break,
                }
                let at = t0.elapsed().as_secs_f64();
                let e = match spawned.restart(&node, RESTART_GRACE).await {
                    Ok(r) => restarted_event(at, &r),
                    Err(err) => Event {
                        t_s: at,
                        kind: "restart",
                        detail: format!("{node}: {err:#}"),
                        ok: false,
                        took_ms: (t0.elapsed().as_secs_f64() - at) * 1000.0,
                    },
                };
                files.event(&e);
                events.lock().push(e);
            }
        });
    }
    let window = Duration::from_secs(args.window_s);
    let windows = Arc::new(Mutex::new(Vec::<Window>::new()));
    let totals = Arc::new(Mutex::new(Totals::new()));
    let windower = tokio::spawn(windower(
        samples.clone(),
        files.clone(),
        windows.clone(),
        totals.clone(),
        window,
        t0,
        stop.clone(),
    ));

    let pb = indicatif::ProgressBar::new(args.duration_s);
    pb.set_style(
        indicatif::ProgressStyle::with_template(
            "soak [{elapsed_precise}] {wide_bar} {pos}/{len} s {msg}",
        )
        .expect("valid template"),
    );
    let gap = Exp::new(args.rate).context("--rate")?;
    let mut calls = tokio::task::JoinSet::new();
    let (mut at, mut made) = (Duration::ZERO, 0u64);
    while at < duration {
        let send = t0 + at;
        tokio::time::sleep_until(send).await;
        let c = rng.gen_range(0..clients.len());
        let f = functions[rng.gen_range(0..functions.len())].clone();
        let (client, name, location) =
            (geo[c].clone(), clients[c].name.clone(), clients[c].location);
        let samples = samples.clone();
        calls.spawn(async move {
            let req = CallRequest {
                function: f,
                location: Some(location),
                ..Default::default()
            };
            let r = client.call_from(&req, send.into_std()).await;
            let s = Sample {
                done_s: t0.elapsed().as_secs_f64(),
                latency_us: r.latency.as_micros().max(1) as u64,
                ok: r.is_success(),
                function: req.function,
                client: name,
                status: r.status.map_or(0, |s| s.as_u16()),
                attempts: r.attempts,
                served_by: r.served_by.unwrap_or_default(),
                error: r.error.unwrap_or_default(),
            };
            samples.lock().push(s);
        });
        made += 1;
        while calls.try_join_next().is_some() {}
        if made % 1000 == 0 {
            let t = totals.lock();
            pb.set_position(at.as_secs());
            pb.set_message(format!("{made} calls, {} failed", t.failed));
        }
        at += Duration::from_secs_f64(gap.sample(&mut rng));
    }
    while calls.join_next().await.is_some() {}
    pb.finish_and_clear();
    let elapsed = t0.elapsed().as_secs_f64();
    stop.cancel();
    while background.join_next().await.is_some() {}
    windower.await.context("the window writer")?;
    // One last reading after the load, and the files flushed.
    sample_once(&spawned, &files, &readings, elapsed);
    files.flush();

    let readings = readings.lock().clone();
    let windows = windows.lock().clone();
    let events = events.lock().clone();
    let totals = totals.lock();
    let settle_s = (args.settle_s as f64).min(elapsed / 2.0);
    let growth = growth(&readings, settle_s);
    let failed_goal = totals.failed == 0;
    let growth_goal = growth.iter().all(|g| g.within_goal);
    let summary = json!({
        "mode": "soak",
        "topology": args.common.topology.display().to_string(),
        "duration_s": elapsed,
        "rate": args.rate,
        "functions": functions,
        "clients": clients.len(),
        "restart_node": restart_node,
        "deploy_every_s": args.deploy_every_s,
        "restart_every_s": args.restart_every_s,
        "delays": ctx.delay_model().0,
        "calls": totals.calls,
        "ok": totals.calls - totals.failed,
        "failed": totals.failed,
        "failed_by_reason": totals.reasons,
        "retried_at_the_cloud": totals.retried,
        "per_function": totals.per_function,
        "latency_ms": {
            "p50": totals.hist.value_at_quantile(0.5) as f64 / 1000.0,
            "p99": totals.hist.value_at_quantile(0.99) as f64 / 1000.0,
            "p999": totals.hist.value_at_quantile(0.999) as f64 / 1000.0,
            "max": totals.hist.max() as f64 / 1000.0,
        },
        "window_s": args.window_s,
        "worst_window_p99_ms": windows.iter().map(|w| w.p99_ms).fold(0.0, f64::max),
        "deploys": events.iter().filter(|e| e.kind == "deploy").count(),
        "deploys_failed": events.iter().filter(|e| e.kind == "deploy" && !e.ok).count(),
        "restarts": events.iter().filter(|e| e.kind == "restart").count(),
        "restarts_failed": events.iter().filter(|e| e.kind == "restart" && !e.ok).count(),
        "settle_s": settle_s,
        "growth_after_settling": growth,
        "goals": {
            "no_failed_call": failed_goal,
            "growth_under_5_percent": growth_goal,
        },
    });
    std::fs::write(
        out.join("summary.json"),
        serde_json::to_string_pretty(&summary)? + "\n",
    )?;
    crate::plot::soak(&out.join("soak.png"), &windows, &readings, &events)?;
    println!(
        "soak: {} calls in {:.0} s, {} failed; P50 {:.2} ms, P99 {:.2} ms; {} deploys ({} failed), {} restarts ({} failed)",
        totals.calls,
        elapsed,
        totals.failed,
        totals.hist.value_at_quantile(0.5) as f64 / 1000.0,
        totals.hist.value_at_quantile(0.99) as f64 / 1000.0,
        summary["deploys"],
        summary["deploys_failed"],
        summary["restarts"],
        summary["restarts_failed"],
    );
    for g in &growth {
        println!(
            "  {} (pid {}): rss {:+.1} %, fds {:+.1} % ({} -> {}, sockets {} -> {}), threads {:+.1} % from {:.0} s to the end{}",
            g.node,
            g.pid,
            g.rss * 100.0,
            g.fds * 100.0,
            g.fd_count.0,
            g.fd_count.1,
            g.socket_count.0,
            g.socket_count.1,
            g.threads * 100.0,
            g.from_s,
            if g.within_goal {
                ""
            } else {
                "  OVER THE 5 % GOAL"
            }
        );
    }
    println!("files in {}", out.display());
    Ok(())
}

/// Deploys round `round` of the deployed function with the real CLI.
async fn deploy(bin: &Path, spawned: &Spawned, dir: &Path, round: u32, t0: Instant) -> Event {
    let at = t0.elapsed().as_secs_f64();
    let written = std::fs::create_dir_all(dir).and_then(|()| {
        std::fs::write(
            dir.join("fn.py"),
            format!(
                "\"\"\"soak: the function the soak deploys again every round.\"\"\"\n\nROUND = {round}\n\n\ndef fn(input, headers):\n    return f\"soak round {{ROUND}}\"\n"
            ),
        )
    });
    let result = match written {
        Err(e) => Err(format!("cannot write {}: {e}", dir.display())),
        Ok(()) => tokio::process::Command::new(bin)
            .arg("deploy")
            .arg(dir)
            .arg("--config")
            .arg(spawned.state_dir.join("topology.toml"))
            .arg("--cacert")
            .arg(spawned.state_dir.join("ca.pem"))
            .current_dir(&spawned.state_dir)
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .map_err(|e| format!("cannot run {}: {e}", bin.display()))
            .and_then(|o| {
                let text = String::from_utf8_lossy(&o.stdout).to_string()
                    + &String::from_utf8_lossy(&o.stderr);
                let last = text.lines().last().unwrap_or_default().to_owned();
                if o.status.success() {
                    Ok(last)
                } else {
                    Err(format!("{}: {}", o.status, text.trim()))
                }
            }),
    };
    let took_ms = (t0.elapsed().as_secs_f64() - at) * 1000.0;
    match result {
        Ok(last) => Event {
            t_s: at,
            kind: "deploy",
            detail: format!("round {round}: {last}"),
            ok: true,
            took_ms,
        },
        Err(e) => Event {
            t_s: at,
            kind: "deploy",
            detail: format!("round {round}: {e}"),
            ok: false,
            took_ms,
        },
    }
}

fn restarted_event(at: f64, r: &Restarted) -> Event {
    Event {
        t_s: at,
        kind: "restart",
        detail: format!(
            "{}: pid {} stopped ({}) in {:.0} ms, pid {} ready",
            r.node,
            r.old_pid,
            r.exit,
            r.stopped.as_secs_f64() * 1000.0,
            r.new_pid
        ),
        ok: r.exit.ends_with("exit status: 0"),
        took_ms: r.ready.as_secs_f64() * 1000.0,
    }
}

/// What every answer so far adds up to.
struct Totals {
    calls: u64,
    failed: u64,
    retried: u64,
    reasons: BTreeMap<String, u64>,
    per_function: BTreeMap<String, (u64, u64)>,
    hist: Histogram<u64>,
}

impl Totals {
    fn new() -> Self {
        Self {
            calls: 0,
            failed: 0,
            retried: 0,
            reasons: BTreeMap::new(),
            per_function: BTreeMap::new(),
            hist: Histogram::new(3).expect("3 significant digits is valid"),
        }
    }
}

/// Every `window`, the answers that came in during it: a line of windows.csv, the failures'
/// lines of failures.csv, and the totals.
async fn windower(
    samples: Arc<Mutex<Vec<Sample>>>,
    files: Arc<Files>,
    windows: Arc<Mutex<Vec<Window>>>,
    totals: Arc<Mutex<Totals>>,
    window: Duration,
    t0: Instant,
    stop: tokio_util::sync::CancellationToken,
) {
    let mut end = t0 + window;
    loop {
        let last = tokio::select! {
            _ = tokio::time::sleep_until(end) => false,
            _ = stop.cancelled() => true,
        };
        let batch = std::mem::take(&mut *samples.lock());
        let mut hist = Histogram::<u64>::new(3).expect("valid");
        let mut failed = 0;
        let mut t = totals.lock();
        for s in &batch {
            let _ = hist.record(s.latency_us);
            let _ = t.hist.record(s.latency_us);
            let per = t.per_function.entry(s.function.clone()).or_default();
            per.0 += 1;
            if s.attempts > 1 {
                t.retried += 1;
            }
            if !s.ok {
                failed += 1;
                t.per_function.entry(s.function.clone()).or_default().1 += 1;
                let reason = if s.status != 0 {
                    format!("status {}", s.status)
                } else {
                    s.error.split(':').next().unwrap_or("no answer").to_owned()
                };
                *t.reasons.entry(reason).or_default() += 1;
                files.failure(s);
            }
        }
        t.calls += batch.len() as u64;
        t.failed += failed;
        drop(t);
        if !batch.is_empty() {
            let w = Window {
                end_s: (end.min(Instant::now()) - t0).as_secs_f64(),
                calls: batch.len() as u64,
                failed,
                p50_ms: hist.value_at_quantile(0.5) as f64 / 1000.0,
                p99_ms: hist.value_at_quantile(0.99) as f64 / 1000.0,
                max_ms: hist.max() as f64 / 1000.0,
            };
            files.window(&w);
            windows.lock().push(w);
        }
        if last {
            break;
        }
        end += window;
    }
}

/// Every `every`, a reading of each node process.
async fn sampler(
    spawned: Arc<Spawned>,
    files: Arc<Files>,
    readings: Arc<Mutex<Vec<Reading>>>,
    every: Duration,
    t0: Instant,
    stop: tokio_util::sync::CancellationToken,
) {
    let mut next = t0;
    loop {
        sample_once(&spawned, &files, &readings, t0.elapsed().as_secs_f64());
        next += every;
        tokio::select! {
            _ = tokio::time::sleep_until(next) => {}
            _ = stop.cancelled() => break,
        }
    }
}

fn sample_once(spawned: &Spawned, files: &Files, readings: &Mutex<Vec<Reading>>, t_s: f64) {
    let table = ProcTable::read();
    for node in &spawned.topology.nodes {
        let Some(pid) = spawned.pid(&node.id) else {
            continue;
        };
        let Some(r) = table.reading(pid, &node.id, t_s) else {
            continue;
        };
        files.reading(&r);
        readings.lock().push(r);
    }
}

/// Every process's parent and resident memory, from `/proc`.
struct ProcTable {
    parent: BTreeMap<u32, u32>,
}

impl ProcTable {
    fn read() -> Self {
        let mut parent = BTreeMap::new();
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            if let Some(ppid) = status_field(pid, "PPid:") {
                parent.insert(pid, ppid as u32);
            }
        }
        Self { parent }
    }

    fn descendants(&self, root: u32) -> Vec<u32> {
        let mut out = Vec::new();
        let mut todo = vec![root];
        while let Some(p) = todo.pop() {
            for (&child, &pp) in &self.parent {
                if pp == p {
                    out.push(child);
                    todo.push(child);
                }
            }
        }
        out
    }

    fn reading(&self, pid: u32, node: &str, t_s: f64) -> Option<Reading> {
        let kids = self.descendants(pid);
        let (mut fds, mut sockets) = (0, 0);
        for fd in std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.flatten() {
            fds += 1;
            if std::fs::read_link(fd.path())
                .is_ok_and(|l| l.to_string_lossy().starts_with("socket:"))
            {
                sockets += 1;
            }
        }
        Some(Reading {
            t_s,
            node: node.to_owned(),
            pid,
            rss_kib: status_field(pid, "VmRSS:")?,
            fds,
            sockets,
            threads: status_field(pid, "Threads:")?,
            children: kids.len() as u64,
            children_rss_kib: kids.iter().filter_map(|k| status_field(*k, "VmRSS:")).sum(),
        })
    }
}

/// A number field of `/proc/<pid>/status` (`VmRSS:` in KiB).
fn status_field(pid: u32, name: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(name))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// How one process grew from the settling time to its last reading.
#[derive(Debug, serde::Serialize)]
pub struct Growth {
    /// Node id.
    pub node: String,
    /// The process (one that ran from the settling time to the end).
    pub pid: u32,
    /// The reading growth is measured from, seconds.
    pub from_s: f64,
    /// The last reading, seconds.
    pub to_s: f64,
    /// Resident memory at both, KiB.
    pub rss_kib: (u64, u64),
    /// Descriptors at both.
    pub fd_count: (u64, u64),
    /// Of them, sockets at both: what moves with its clients' and peers' connections.
    pub socket_count: (u64, u64),
    /// Threads at both.
    pub thread_count: (u64, u64),
    /// Relative growth of each.
    pub rss: f64,
    /// Relative growth of the descriptors.
    pub fds: f64,
    /// Relative growth of the threads.
    pub threads: f64,
    /// Whether all three grew less than 5 %.
    pub within_goal: bool,
}

/// For each process that ran through: its growth from its first reading at or after
/// `settle_s` to its last.
pub fn growth(readings: &[Reading], settle_s: f64) -> Vec<Growth> {
    let mut by: BTreeMap<(String, u32), Vec<&Reading>> = BTreeMap::new();
    for r in readings {
        by.entry((r.node.clone(), r.pid)).or_default().push(r);
    }
    let rel = |a: u64, b: u64| (b as f64 - a as f64) / (a.max(1) as f64);
    by.into_iter()
        .filter_map(|((node, pid), rs)| {
            // A process started after the settling time (a restarted node) is measured from
            // its own start plus the settling time, if it lived that long.
            let start = rs.first()?.t_s;
            let from = rs.iter().find(|r| r.t_s >= start + settle_s)?;
            let to = rs.last()?;
            (to.t_s > from.t_s).then(|| {
                let (rss, fds, threads) = (
                    rel(from.rss_kib, to.rss_kib),
                    rel(from.fds, to.fds),
                    rel(from.threads, to.threads),
                );
                Growth {
                    node,
                    pid,
                    from_s: from.t_s,
                    to_s: to.t_s,
                    rss_kib: (from.rss_kib, to.rss_kib),
                    fd_count: (from.fds, to.fds),
                    socket_count: (from.sockets, to.sockets),
                    thread_count: (from.threads, to.threads),
                    within_goal: rss < GROWTH_GOAL && fds < GROWTH_GOAL && threads < GROWTH_GOAL,
                    rss,
                    fds,
                    threads,
                }
            })
        })
        .collect()
}

/// The CSV files a soak writes as it goes.
struct Files {
    windows: Mutex<std::io::BufWriter<std::fs::File>>,
    failures: Mutex<std::io::BufWriter<std::fs::File>>,
    resources: Mutex<std::io::BufWriter<std::fs::File>>,
    events: Mutex<std::io::BufWriter<std::fs::File>>,
}

impl Files {
    fn create(out: &Path) -> anyhow::Result<Self> {
        let open = |name: &str, header: &str| -> anyhow::Result<_> {
            let path: PathBuf = out.join(name);
            let mut f = std::io::BufWriter::new(
                std::fs::File::create(&path)
                    .with_context(|| format!("cannot create {}", path.display()))?,
            );
            writeln!(f, "{header}")?;
            f.flush()?;
            Ok(Mutex::new(f))
        };
        Ok(Self {
            windows: open("windows.csv", "end_s,calls,failed,p50_ms,p99_ms,max_ms")?,
            failures: open(
                "failures.csv",
                "done_s,client,function,status,attempts,served_by,latency_ms,error",
            )?,
            resources: open(
                "resources.csv",
                "t_s,node,pid,rss_kib,fds,sockets,threads,children,children_rss_kib",
            )?,
            events: open("events.csv", "t_s,kind,ok,took_ms,detail")?,
        })
    }

    fn line(f: &Mutex<std::io::BufWriter<std::fs::File>>, line: &str) {
        let mut f = f.lock();
        // A full disk loses a line of a benchmark's record, not the run.
        let _ = writeln!(f, "{line}").and_then(|()| f.flush());
    }

    fn window(&self, w: &Window) {
        Self::line(
            &self.windows,
            &format!(
                "{:.1},{},{},{:.3},{:.3},{:.3}",
                w.end_s, w.calls, w.failed, w.p50_ms, w.p99_ms, w.max_ms
            ),
        );
    }

    fn failure(&self, s: &Sample) {
        let mut line = String::new();
        let _ = write!(
            line,
            "{:.3},{},{},{},{},{},{:.3},\"{}\"",
            s.done_s,
            s.client,
            s.function,
            s.status,
            s.attempts,
            s.served_by,
            s.latency_us as f64 / 1000.0,
            s.error.replace('"', "'")
        );
        Self::line(&self.failures, &line);
    }

    fn reading(&self, r: &Reading) {
        Self::line(
            &self.resources,
            &format!(
                "{:.1},{},{},{},{},{},{},{},{}",
                r.t_s,
                r.node,
                r.pid,
                r.rss_kib,
                r.fds,
                r.sockets,
                r.threads,
                r.children,
                r.children_rss_kib
            ),
        );
    }

    fn event(&self, e: &Event) {
        Self::line(
            &self.events,
            &format!(
                "{:.1},{},{},{:.0},\"{}\"",
                e.t_s,
                e.kind,
                e.ok,
                e.took_ms,
                e.detail.replace('"', "'").replace('\n', " ")
            ),
        );
    }

    fn flush(&self) {
        for f in [&self.windows, &self.failures, &self.resources, &self.events] {
            let _ = f.lock().flush();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(t_s: f64, pid: u32, rss: u64) -> Reading {
        Reading {
            t_s,
            node: "edge".into(),
            pid,
            rss_kib: rss,
            fds: 20,
            sockets: 12,
            threads: 8,
            children: 1,
            children_rss_kib: 100,
        }
    }

    #[test]
    fn growth_is_measured_from_the_settling_time_per_process() {
        let rs = vec![
            reading(0.0, 1, 1000),
            reading(600.0, 1, 2000),
            reading(3600.0, 1, 2080),
            // Restarted at 1000 s: measured from 1600 s, its own settling time.
            reading(1000.0, 2, 500),
            reading(1600.0, 2, 1000),
            reading(3600.0, 2, 1200),
        ];
        let g = growth(&rs, 600.0);
        assert_eq!(g.len(), 2);
        assert_eq!(
            (g[0].pid, g[0].from_s, g[0].rss_kib),
            (1, 600.0, (2000, 2080))
        );
        assert!((g[0].rss - 0.04).abs() < 1e-9 && g[0].within_goal);
        assert_eq!((g[1].pid, g[1].from_s), (2, 1600.0));
        assert!((g[1].rss - 0.2).abs() < 1e-9 && !g[1].within_goal);
    }

    #[test]
    fn this_process_can_be_read_from_proc() {
        let me = std::process::id();
        let r = ProcTable::read()
            .reading(me, "me", 0.0)
            .expect("own /proc entry");
        assert!(r.rss_kib > 0 && r.fds > 0 && r.threads > 0, "{r:?}");
    }
}
