//! `geofaas loadtest outage`: one static client; after a number of answers the edge serving it
//! is killed with SIGKILL, and every later call must still be answered (paper IV-B3).

use parking_lot::Mutex;
use std::sync::Arc;
use std::time::{Duration, Instant};

use geofaas_config::Role;
use serde_json::json;

use crate::cli::{Ctx, OutageArgs};
use crate::client::GeoClient;
use crate::mobility::print_result;
use crate::record::{write_csv, LatencyStats, Row, Summary};
use crate::runner::{run_closed, run_open, Planned, Trigger};
use crate::spawn::Killed;

/// The kill as it happened.
#[derive(Debug, Clone)]
struct KillRecord {
    /// `Ok` with the killed process, or why nothing was killed.
    result: Result<Killed, String>,
    /// The call whose answer triggered it.
    after_seq: u64,
}

/// Runs the calls, kills the edge half-way, writes requests.csv, summary.json and outage.png.
pub async fn run(ctx: &Ctx, args: &OutageArgs) -> anyhow::Result<()> {
    let spawned = ctx.spawned.clone().ok_or_else(|| {
        anyhow::anyhow!(
            "outage kills a node process: run it with --spawn (the run starts the nodes itself)"
        )
    })?;
    anyhow::ensure!(
        args.kill_after <= args.calls,
        "--kill-after {} is more than --calls {}",
        args.kill_after,
        args.calls
    );
    let location = match args.location {
        Some(l) => l,
        None => {
            ctx.topology
                .nodes
                .iter()
                .find(|n| n.role == Role::Edge)
                .ok_or_else(|| anyhow::anyhow!("the topology has no edge node; give --location"))?
                .location
        }
    };
    let client = Arc::new(GeoClient::new(&ctx.client_config(location))?);
    let plan_of = |n: u64, name: &str, interval: Option<Duration>| -> Vec<Planned> {
        (0..n)
            .map(|i| Planned {
                client: 0,
                name: name.to_owned(),
                round: 0,
                seq: i,
                offset: interval.map_or(Duration::ZERO, |d| d.mul_f64(i as f64)),
                location,
            })
            .collect()
    };
    if args.warmup > 0 {
        let pb = ctx.progress(args.warmup, "warm-up");
        run_closed(
            &client,
            &plan_of(args.warmup, "warmup", None),
            &ctx.template,
            &pb,
            None,
        )
        .await;
        pb.finish_and_clear();
    }

    let kill: Arc<Mutex<Option<KillRecord>>> = Arc::default();
    let trigger = {
        let (kill, spawned, map) = (kill.clone(), spawned.clone(), ctx.map.clone());
        Arc::new(Trigger::new(args.kill_after, move |row: &Row| {
            let result = match map.node(&row.served_by).map(|n| n.role) {
                Some(Role::Edge) => spawned.kill(&row.served_by).map_err(|e| format!("{e:#}")),
                _ => Err(format!(
                    "call {} was served by {:?}, not an edge: nothing to kill",
                    row.seq, row.served_by
                )),
            };
            *kill.lock() = Some(KillRecord {
                result,
                after_seq: row.seq,
            });
        }))
    };
    let interval = args.rate.map(|r| Duration::from_secs_f64(1.0 / r));
    let plan = plan_of(args.calls, "client", interval);
    let pb = ctx.progress(args.calls, "outage");
    let started = Instant::now();
    let rows = match interval {
        Some(_) => run_open(&[client], &plan, &ctx.template, &pb, Some(trigger)).await,
        None => run_closed(&client, &plan, &ctx.template, &pb, Some(&trigger)).await,
    };
    pb.finish_and_clear();
    let duration = started.elapsed().as_secs_f64();
    let kill = kill.lock().clone();
    write_outputs(ctx, args, &rows, kill.as_ref(), duration)
}

fn write_outputs(
    ctx: &Ctx,
    args: &OutageArgs,
    rows: &[Row],
    kill: Option<&KillRecord>,
    duration: f64,
) -> anyhow::Result<()> {
    let kill_row = kill.and_then(|k| rows.iter().find(|r| r.seq == k.after_seq));
    let kill_at_ms = kill_row.map(|r| r.sent_ms + r.latency_ms);
    let is_edge = |r: &Row| ctx.role(&r.served_by) == Some(Role::Edge);
    let point = |r: &Row| ((r.sent_ms + r.latency_ms) / 1000.0, r.latency_ms);
    let ok = || rows.iter().filter(|r| r.ok());
    let edge: Vec<_> = ok().filter(|r| is_edge(r)).map(point).collect();
    let cloud: Vec<_> = ok().filter(|r| !is_edge(r)).map(point).collect();
    let retried: Vec<&Row> = rows.iter().filter(|r| r.attempts > 1).collect();
    write_csv(&ctx.out_file("requests.csv"), rows)?;
    crate::plot::outage(
        &ctx.out_file("outage.png"),
        &edge,
        &cloud,
        &retried.iter().map(|r| point(r)).collect::<Vec<_>>(),
        kill_at_ms.map(|t| t / 1000.0),
    )?;
    let after = |r: &&Row| kill.is_some_and(|k| r.seq > k.after_seq);
    let mut summary = Summary::of("outage", rows, duration);
    ctx.finish_summary(&mut summary, args.rate);
    summary.mode_results = json!({
        "calls": args.calls,
        "warmup_calls": args.warmup,
        "kill_after_answers": args.kill_after,
        "killed": kill.map(|k| match &k.result {
            Ok(killed) => json!(killed),
            Err(why) => json!({ "error": why }),
        }),
        "kill_after_call": kill.map(|k| k.after_seq),
        "kill_at_ms": kill_at_ms,
        "latency_served_at_the_edge": LatencyStats::of(ok().filter(|r| is_edge(r))),
        "latency_served_by_the_cloud": LatencyStats::of(ok().filter(|r| !is_edge(r))),
        "calls_after_the_kill": rows.iter().filter(after).count(),
        "failed_after_the_kill": rows.iter().filter(after).filter(|r| !r.ok()).count(),
        "served_at_an_edge_after_the_kill": rows.iter().filter(after).filter(|r| r.ok() && is_edge(r)).count(),
        "retried_calls": retried.iter().map(|r| r.seq).take(1000).collect::<Vec<_>>(),
    });
    summary.write(&ctx.out_file("summary.json"))?;
    print_result(&summary);
    if let Some(k) = kill {
        match &k.result {
            Ok(killed) => println!(
                "  killed {} (pid {}, signal {:?}) after call {}",
                killed.node, killed.pid, killed.signal, k.after_seq
            ),
            Err(why) => println!("  nothing killed: {why}"),
        }
    }
    Ok(())
}
