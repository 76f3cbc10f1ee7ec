//! `geofaas loadtest highload`: rounds of 1, 2, 4, ... static clients calling at a fixed
//! interval, each call on its own task (paper IV-B2).

use std::sync::Arc;
use std::time::{Duration, Instant};

use geofaas_config::Role;
use serde_json::json;

use crate::cli::{Ctx, HighloadArgs};
use crate::client::GeoClient;
use crate::mobility::print_result;
use crate::plot::Round;
use crate::points::read_points;
use crate::record::{write_csv, LatencyStats, Row, Summary};
use crate::runner::{run_open, Planned};

/// Runs every round and writes requests.csv, summary.json and highload.png.
pub async fn run(ctx: &Ctx, args: &HighloadArgs) -> anyhow::Result<()> {
    let points = read_points(&args.clients_file)?;
    let most = args.clients.iter().copied().max().unwrap_or(0) as usize;
    anyhow::ensure!(
        most <= points.len(),
        "{} has {} clients, --clients asks for {most}",
        args.clients_file.display(),
        points.len()
    );
    let started = Instant::now();
    let mut rows = Vec::new();
    let mut rounds = Vec::new();
    let mut round_stats = Vec::new();
    for &n in &args.clients {
        let clients = points[..n as usize]
            .iter()
            .map(|p| GeoClient::new(&ctx.client_config(p.location)).map(Arc::new))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let mut plan = Vec::new();
        for k in 0..args.calls {
            for (c, p) in points[..n as usize].iter().enumerate() {
                plan.push(Planned {
                    client: c,
                    name: p.name.clone(),
                    round: n,
                    seq: k,
                    offset: Duration::from_millis(args.interval_ms * k),
                    location: p.location,
                });
            }
        }
        let pb = ctx.progress(plan.len() as u64, &format!("highload {n} clients"));
        let round_rows = run_open(&clients, &plan, &ctx.template, &pb, None).await;
        pb.finish_and_clear();
        let round = summarize(ctx, n, &round_rows);
        println!(
            "{n:>3} clients: {} at the edge, {} offloaded, {} failed, {:.2} s",
            round.edge, round.offloaded, round.failed, round.duration_s
        );
        round_stats.push(json!({
            "clients": n,
            "latency": LatencyStats::of(round_rows.iter().filter(|r| r.ok())),
        }));
        rounds.push(round);
        rows.extend(round_rows);
    }
    write_csv(&ctx.out_file("requests.csv"), &rows)?;
    crate::plot::highload(&ctx.out_file("highload.png"), &rounds)?;
    let mut summary = Summary::of("highload", &rows, started.elapsed().as_secs_f64());
    ctx.finish_summary(&mut summary, None);
    summary.load = format!(
        "open loop: each client one call every {} ms on its own task",
        args.interval_ms
    );
    summary.mode_results = json!({
        "clients_file": args.clients_file.display().to_string(),
        "calls_per_client": args.calls,
        "interval_ms": args.interval_ms,
        "rounds": rounds,
        "latency_per_round": round_stats,
    });
    summary.write(&ctx.out_file("summary.json"))?;
    print_result(&summary);
    Ok(())
}

fn summarize(ctx: &Ctx, clients: u32, rows: &[Row]) -> Round {
    let edge = rows
        .iter()
        .filter(|r| {
            r.ok() && r.offloaded_from.is_empty() && ctx.role(&r.served_by) == Some(Role::Edge)
        })
        .count() as u64;
    let offloaded = rows
        .iter()
        .filter(|r| r.ok() && !r.offloaded_from.is_empty())
        .count() as u64;
    let failed = rows.iter().filter(|r| !r.ok()).count() as u64;
    let end_ms = rows
        .iter()
        .map(|r| r.sent_ms + r.latency_ms)
        .fold(0.0, f64::max);
    Round {
        clients,
        edge,
        offloaded,
        failed,
        duration_s: end_ms / 1000.0,
    }
}
