//! `geofaas loadtest mobility`: one client walks a path, one call per point (paper IV-B1).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::background::Background;
use crate::cli::{Ctx, MobilityArgs};
use crate::client::{CallRequest, GeoClient};
use crate::points::read_points;
use crate::record::{write_csv, LatencyStats, Row, Summary};
use crate::runner::{run_closed, run_open, warm_every_node, Planned};

/// Runs the walk and writes requests.csv, summary.json and mobility.png.
pub async fn run(ctx: &Ctx, args: &MobilityArgs) -> anyhow::Result<()> {
    let points = read_points(&args.path)?;
    if args.warm {
        warm_every_node(ctx, std::slice::from_ref(&ctx.template.function)).await?;
    }
    let client = Arc::new(GeoClient::new(&ctx.client_config(points[0].location))?);
    let interval = args.rate.map(|r| Duration::from_secs_f64(1.0 / r));
    let plan: Vec<Planned> = points
        .iter()
        .enumerate()
        .map(|(i, p)| Planned {
            client: 0,
            name: p.name.clone(),
            round: 0,
            seq: i as u64,
            offset: interval.map_or(Duration::ZERO, |d| d * i as u32),
            location: p.location,
        })
        .collect();
    let background = start_background(ctx, args)?;
    let pb = ctx.progress(plan.len() as u64, "mobility");
    let started = Instant::now();
    let rows = match interval {
        Some(_) => run_open(&[client], &plan, &ctx.template, &pb, None).await,
        None => run_closed(&client, &plan, &ctx.template, &pb, None).await,
    };
    pb.finish_and_clear();
    let duration = started.elapsed().as_secs_f64();
    let background = match background {
        Some(b) => {
            let rows = b.stop().await;
            write_csv(&ctx.out_file("background.csv"), &rows)?;
            Some(rows)
        }
        None => None,
    };

    let handovers = handovers(&rows);
    let mismatched: Vec<u64> = rows
        .iter()
        .filter(|r| r.ok() && Some(handled_by(r)) != expected(ctx, r))
        .map(|r| r.seq)
        .collect();
    let steps: Vec<crate::plot::Step> = rows
        .iter()
        .map(|r| crate::plot::Step {
            latency_ms: r.latency_ms,
            distance_km: distance_km(ctx, r).unwrap_or(f64::NAN),
        })
        .collect();
    write_csv(&ctx.out_file("requests.csv"), &rows)?;
    crate::plot::mobility(&ctx.out_file("mobility.png"), &steps, &handovers)?;
    let mut summary = Summary::of("mobility", &rows, duration);
    ctx.finish_summary(&mut summary, args.rate);
    summary.mode_results = json!({
        "path": args.path.display().to_string(),
        "warmed_every_node_first": args.warm,
        "points": points.len(),
        "handovers": handovers.iter().map(|(i, to)| json!({
            "step": i,
            "at": rows[*i].client,
            "from": rows[..*i].iter().rev().find(|r| r.ok()).map(|r| r.served_by.clone()),
            "to": to,
        })).collect::<Vec<_>>(),
        "calls_served_where_the_areas_say": rows.iter().filter(|r| r.ok()).count() - mismatched.len(),
        "calls_served_elsewhere": mismatched,
        "mean_distance_km": mean(steps.iter().map(|s| s.distance_km).filter(|d| d.is_finite())),
        "background": background.as_ref().map(|rows| json!({
            "clients": args.background_clients.as_ref().map(|p| p.display().to_string()),
            "function": rows.first().map(|r| r.function.clone()),
            "interval_ms": args.background_interval_ms,
            "calls": rows.len(),
            "ok": rows.iter().filter(|r| r.ok()).count(),
            "latency": LatencyStats::of(rows.iter().filter(|r| r.ok())),
            "served_by": served_by(rows),
        })),
    });
    summary.write(&ctx.out_file("summary.json"))?;
    print_result(&summary);
    Ok(())
}

/// The background clients of `--background-clients`, started (`None` without it).
fn start_background(ctx: &Ctx, args: &MobilityArgs) -> anyhow::Result<Option<Background>> {
    let Some(path) = &args.background_clients else {
        return Ok(None);
    };
    let mut points = read_points(path)?;
    if let Some(n) = args.background_count {
        anyhow::ensure!(
            (1..=points.len()).contains(&n),
            "--background-count {n}: {} has {} locations",
            path.display(),
            points.len()
        );
        points.truncate(n);
    }
    anyhow::ensure!(
        args.background_interval_ms > 0,
        "--background-interval-ms 0: must be at least 1"
    );
    let clients = points
        .into_iter()
        .map(|p| {
            let c = GeoClient::new(&ctx.client_config(p.location))?;
            Ok((p, Arc::new(c)))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let request = CallRequest {
        function: args
            .background_function
            .clone()
            .unwrap_or_else(|| ctx.template.function.clone()),
        location: None,
        body: args
            .background_body
            .clone()
            .map_or_else(|| ctx.template.body.clone(), bytes::Bytes::from),
        idempotency_key: None,
    };
    Ok(Some(Background::start(
        clients,
        &request,
        Duration::from_millis(args.background_interval_ms),
    )))
}

/// Calls per serving node.
fn served_by(rows: &[Row]) -> std::collections::BTreeMap<String, u64> {
    let mut m = std::collections::BTreeMap::new();
    for r in rows.iter().filter(|r| r.ok()) {
        *m.entry(r.served_by.clone()).or_insert(0) += 1;
    }
    m
}

/// Steps whose call was served by another node than the previous answered call, with that node.
pub fn handovers(rows: &[Row]) -> Vec<(usize, String)> {
    let mut last: Option<&str> = None;
    let mut out = Vec::new();
    for (i, r) in rows.iter().enumerate().filter(|(_, r)| r.ok()) {
        if last.is_some_and(|l| l != r.served_by) {
            out.push((i, r.served_by.clone()));
        }
        last = Some(&r.served_by);
    }
    out
}

/// The node that took the call: the edge that offloaded it, else the node that served it.
pub fn handled_by(r: &Row) -> &str {
    if r.offloaded_from.is_empty() {
        &r.served_by
    } else {
        &r.offloaded_from
    }
}

fn expected<'a>(ctx: &'a Ctx, r: &Row) -> Option<&'a str> {
    r.location().map(|l| ctx.map.responsible(l).id.as_str())
}

fn distance_km(ctx: &Ctx, r: &Row) -> Option<f64> {
    let node = ctx.map.node(&r.served_by)?;
    Some(r.location()?.distance_km(node.location))
}

fn mean(v: impl Iterator<Item = f64>) -> f64 {
    let (n, s) = v.fold((0usize, 0.0), |(n, s), x| (n + 1, s + x));
    if n == 0 {
        0.0
    } else {
        s / n as f64
    }
}

/// A few lines on stdout about the run.
pub fn print_result(s: &Summary) {
    println!(
        "{}: {} calls, {} ok, {} failed, {} retried at the cloud, {} offloaded, {} followed a handover; mean {:.2} ms, p50 {:.2} ms, p99 {:.2} ms; {:.1} s",
        s.mode, s.calls, s.ok, s.failed, s.retried, s.offloaded, s.redirected, s.latency.mean_ms, s.latency.p50_ms, s.latency.p99_ms, s.duration_s
    );
    for (node, st) in &s.latency_by_node {
        println!(
            "  {node:<12} {:>7} calls  mean {:8.2} ms  p50 {:8.2} ms  p99 {:8.2} ms",
            st.count, st.mean_ms, st.p50_ms, st.p99_ms
        );
    }
}
