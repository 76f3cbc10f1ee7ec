//! `geofaas loadtest mobility --compare-prewarm`: the mobility walk on a cold fleet without
//! pre-warming, again on a fresh cold fleet with it but with a client that ignores the nodes'
//! `Link: rel=preconnect` hints, and again with both (the client opens a connection to the
//! hinted node ahead), in one run; then a client standing still, which must cause no pre-warm
//! request.
//!
//! The walker sends `X-Client-Id` (nodes track only clients that identify themselves) and
//! calls at a fixed rate (`--rate`, default 5 per second), so a node sees it move in real
//! time and a predicted handover leaves time to warm the next node. Each variant starts the
//! topology's nodes anew (`--spawn`), so both begin with no instance of the function
//! anywhere. After each variant the nodes' `/metrics` give the pre-warm requests sent and the
//! instances started ahead, used, and started in vain. Each call records how long its `307`
//! detour took and how many connections the client opened during it, so a handover's cost
//! splits into the detour through the old node, a new connection, and the call itself.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context;
use geofaas_config::Topology;
use serde::Serialize;
use serde_json::json;

use crate::cli::{Ctx, MobilityArgs};
use crate::client::{CallRequest, GeoClient};
use crate::points::{read_points, Point};

/// The walker's rate when `--rate` is not given, calls per second.
const DEFAULT_RATE: f64 = 5.0;

/// One call of the walk.
#[derive(Clone, Debug, Serialize)]
struct Call {
    step: usize,
    at: String,
    lat: f64,
    lon: f64,
    served_by: String,
    status: u16,
    latency_ms: f64,
    cold_start: Option<bool>,
    redirects: u32,
    /// From the call's start to the `307` it followed (0 without one).
    redirect_ms: f64,
    /// Connections the client opened during the call.
    new_connections: u64,
    /// Origins the answer hinted with `rel=preconnect`, space-separated.
    preconnect_hint: String,
}

/// A handover of the walk and what it cost.
#[derive(Clone, Debug, Serialize)]
struct Handover {
    step: usize,
    from: String,
    to: String,
    /// Latency of the call that was handed over (the `307`, a new connection, the call).
    peak_ms: f64,
    /// Whether the new node started an instance for it.
    cold_start: Option<bool>,
    /// Of the peak: the `307` detour through the old node.
    redirect_ms: f64,
    /// Of the peak: the call at the new node, a new connection included if one was opened.
    after_redirect_ms: f64,
    /// Connections the client opened during the call (0: it found one open there).
    new_connections: u64,
    /// Median of the later calls at the new node, before the next handover.
    steady_median_ms: f64,
    steady_calls: usize,
    above_steady_ms: f64,
}

/// One walk of the comparison.
struct Variant {
    /// Its name in file names and the summary.
    name: &'static str,
    /// Its legend in the plot.
    label: &'static str,
    prewarm: bool,
    /// Whether the client acts on `rel=preconnect` hints.
    preconnect: bool,
}

const VARIANTS: [Variant; 3] = [
    Variant {
        name: "without",
        label: "without pre-warming",
        prewarm: false,
        preconnect: false,
    },
    Variant {
        name: "prewarm-only",
        label: "pre-warming, hints ignored",
        prewarm: true,
        preconnect: false,
    },
    Variant {
        name: "with",
        label: "pre-warming and preconnect",
        prewarm: true,
        preconnect: true,
    },
];

/// Runs the variants and writes requests-{without,prewarm-only,with}.csv, summary.json and
/// mobility-prewarm.png.
pub async fn run(args: &MobilityArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.common.spawn,
        "--compare-prewarm starts a cold fleet for each variant: it needs --spawn"
    );
    let points = read_points(&args.path)?;
    let rate = args.rate.unwrap_or(DEFAULT_RATE);
    anyhow::ensure!(rate.is_finite() && rate > 0.0, "--rate must be above 0");
    let base = Topology::load(&args.common.topology)?;
    let mut runs = BTreeMap::new();
    let mut series = BTreeMap::new();
    let mut standing = serde_json::Value::Null;
    let mut delays = String::new();
    let mut shown_handovers = Vec::new();
    for v in &VARIANTS {
        let variant = v.name;
        let prewarm_s = if v.prewarm { args.prewarm_s } else { 0.0 };
        let mut topology = base.clone();
        topology.prewarm.prewarm_s = prewarm_s;
        eprintln!(
            "{}: a cold fleet (prewarm_s = {prewarm_s}, preconnect {})",
            v.label, v.preconnect
        );
        let ctx = Ctx::setup_topology(&args.common, 1000, topology).await?;
        delays = ctx.delay_model().0;
        let (calls, client) = walk(&ctx, &points, rate, v.preconnect).await?;
        let handovers = handovers(&calls);
        let after_walk = fleet_metrics(&ctx).await?;
        if v.preconnect {
            standing = stand(
                &ctx,
                &points,
                &handovers,
                rate,
                args.standing_calls,
                &after_walk,
            )
            .await?;
            shown_handovers = handovers.iter().map(|h| (h.step, h.to.clone())).collect();
        }
        write_calls(&ctx.out_file(&format!("requests-{variant}.csv")), &calls)?;
        print_variant(v.label, &calls, &handovers);
        series.insert(
            variant,
            calls.iter().map(|c| c.latency_ms).collect::<Vec<_>>(),
        );
        runs.insert(
            variant,
            json!({
                "prewarm_s": prewarm_s,
                "client_preconnects": v.preconnect,
                "client_connections_opened": client.connections_opened(),
                "client_preconnects_started": client.preconnects_started(),
                "calls": calls.len(),
                "failed": calls.iter().filter(|c| !(200..300).contains(&c.status)).count(),
                "cold_starts_at_steps": calls.iter().filter(|c| c.cold_start == Some(true)).map(|c| c.step).collect::<Vec<_>>(),
                "handovers": handovers,
                "prewarm_metrics_after_walk": after_walk,
            }),
        );
    }
    let out = &args.common.out;
    let walks: Vec<(&str, &[f64])> = VARIANTS
        .iter()
        .map(|v| (v.label, series[v.name].as_slice()))
        .collect();
    crate::plot::prewarm_compare(&out.join("mobility-prewarm.png"), &walks, &shown_handovers)?;
    let summary = json!({
        "mode": "mobility --compare-prewarm",
        "topology": args.common.topology.display().to_string(),
        "function": args.common.function,
        "path": args.path.display().to_string(),
        "points": points.len(),
        "load": format!("open loop at {rate} calls/s, one walker with X-Client-Id"),
        "delays": delays,
        "runs": runs,
        "standing_client": standing,
    });
    let path = out.join("summary.json");
    std::fs::write(&path, serde_json::to_string_pretty(&summary)? + "\n")
        .with_context(|| format!("cannot write {}", path.display()))?;
    println!("standing client: {standing}");
    Ok(())
}

/// The walk: one call per point at `rate`, as the client `walker`, acting on preconnect hints
/// if `preconnect`; the calls and the client.
async fn walk(
    ctx: &Ctx,
    points: &[Point],
    rate: f64,
    preconnect: bool,
) -> anyhow::Result<(Vec<Call>, GeoClient)> {
    let mut cfg = ctx.client_config(points[0].location);
    cfg.client_id = Some("walker".into());
    cfg.preconnect = preconnect;
    let client = GeoClient::new(&cfg)?;
    let every = Duration::from_secs_f64(1.0 / rate);
    let start = Instant::now();
    let pb = ctx.progress(points.len() as u64, "walk");
    let mut calls = Vec::with_capacity(points.len());
    for (step, p) in points.iter().enumerate() {
        let planned = start + every * step as u32;
        tokio::time::sleep_until(planned.into()).await;
        let report = client.call_from(&request(ctx, p), planned).await;
        calls.push(Call {
            step,
            at: p.name.clone(),
            lat: p.location.lat,
            lon: p.location.lon,
            served_by: report.served_by.clone().unwrap_or_default(),
            status: report.status.map_or(0, |s| s.as_u16()),
            latency_ms: report.latency.as_secs_f64() * 1000.0,
            cold_start: report.cold_start,
            redirects: report.redirects,
            redirect_ms: report.redirect_time.as_secs_f64() * 1000.0,
            new_connections: report.new_connections,
            preconnect_hint: report
                .preconnect_hints
                .iter()
                .map(|u| u.as_str().trim_end_matches('/'))
                .collect::<Vec<_>>()
                .join(" "),
        });
        pb.inc(1);
    }
    pb.finish_and_clear();
    Ok((calls, client))
}

fn request(ctx: &Ctx, p: &Point) -> CallRequest {
    CallRequest {
        function: ctx.template.function.clone(),
        location: Some(p.location),
        body: ctx.template.body.clone(),
        idempotency_key: None,
    }
}

/// A second client, `standing`, calls `n` times at `rate` from the walk's last point before
/// its first handover (the nearest to a boundary); the pre-warm requests the fleet sent
/// meanwhile (`before` is the fleet's count until then).
async fn stand(
    ctx: &Ctx,
    points: &[Point],
    handovers: &[Handover],
    rate: f64,
    n: u64,
    before: &serde_json::Value,
) -> anyhow::Result<serde_json::Value> {
    let spot = handovers.first().map_or(0, |h| h.step.saturating_sub(1));
    let p = &points[spot];
    let mut cfg = ctx.client_config(p.location);
    cfg.client_id = Some("standing".into());
    let client = GeoClient::new(&cfg)?;
    let every = Duration::from_secs_f64(1.0 / rate);
    let start = Instant::now();
    let mut ok = 0;
    for i in 0..n {
        let planned = start + every * i as u32;
        tokio::time::sleep_until(planned.into()).await;
        ok += u64::from(
            client
                .call_from(&request(ctx, p), planned)
                .await
                .is_success(),
        );
    }
    let after = fleet_metrics(ctx).await?;
    let sent = |m: &serde_json::Value| m["requests_sent"].as_f64().unwrap_or(0.0);
    Ok(json!({
        "at": p.name,
        "lat": p.location.lat,
        "lon": p.location.lon,
        "calls": n,
        "ok": ok,
        "prewarm_requests_sent_meanwhile": sent(&after) - sent(before),
    }))
}

/// Steps served by another node than the previous answered call, with their cost.
fn handovers(calls: &[Call]) -> Vec<Handover> {
    let ok: Vec<&Call> = calls
        .iter()
        .filter(|c| (200..300).contains(&c.status))
        .collect();
    let mut out = Vec::new();
    for (i, pair) in ok.windows(2).enumerate() {
        let (prev, call) = (pair[0], pair[1]);
        if prev.served_by == call.served_by {
            continue;
        }
        let mut steady: Vec<f64> = ok[i + 2..]
            .iter()
            .take_while(|c| c.served_by == call.served_by)
            .map(|c| c.latency_ms)
            .collect();
        let median = median(&mut steady);
        out.push(Handover {
            step: call.step,
            from: prev.served_by.clone(),
            to: call.served_by.clone(),
            peak_ms: call.latency_ms,
            cold_start: call.cold_start,
            redirect_ms: call.redirect_ms,
            after_redirect_ms: call.latency_ms - call.redirect_ms,
            new_connections: call.new_connections,
            steady_median_ms: median,
            steady_calls: steady.len(),
            above_steady_ms: call.latency_ms - median,
        });
    }
    out
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

/// The pre-warm figures of every node, from its `/metrics` (reached directly, not through the
/// delay relays): requests sent by outcome, instances started ahead, used, and not used (yet:
/// an unused one counts as wasted only once its keep-alive expires).
async fn fleet_metrics(ctx: &Ctx) -> anyhow::Result<serde_json::Value> {
    let spawned = ctx.spawned.as_ref().context("no spawned fleet")?;
    let mut b = reqwest::Client::builder().use_rustls_tls();
    b = b.add_root_certificate(reqwest::Certificate::from_pem(&spawned.ca_pem)?);
    let http = b.build()?;
    let mut nodes = BTreeMap::new();
    let (mut sent, mut started, mut used, mut wasted) = (0.0, 0.0, 0.0, 0.0);
    for node in ctx.map.nodes() {
        let url = spawned
            .entry_url(&node.id)
            .unwrap_or_else(|| node.public_url.clone())
            .join("metrics")?;
        let text = http
            .get(url)
            .send()
            .await?
            .error_for_status()?
            .text()
            .await?;
        let sum = |name: &str| metric(&text, name, None);
        let mut outcomes = BTreeMap::new();
        for line in text
            .lines()
            .filter(|l| l.starts_with("geofaas_prewarm_requests_total{"))
        {
            let outcome = label(line, "outcome").unwrap_or_default();
            let to = label(line, "to").unwrap_or_default();
            let value = line
                .rsplit_once(' ')
                .and_then(|(_, v)| v.parse::<f64>().ok());
            *outcomes.entry(format!("{to}:{outcome}")).or_insert(0.0) += value.unwrap_or(0.0);
        }
        let n = (
            sum("geofaas_prewarm_requests_total"),
            sum("geofaas_prewarm_instances_started_total"),
            sum("geofaas_prewarm_instances_used_total"),
            sum("geofaas_prewarm_instances_wasted_total"),
        );
        sent += n.0;
        started += n.1;
        used += n.2;
        wasted += n.3;
        nodes.insert(
            node.id.clone(),
            json!({"requests_sent": n.0, "requests_by_target_and_outcome": outcomes,
                   "instances_started": n.1, "instances_used": n.2, "instances_wasted": n.3}),
        );
    }
    Ok(json!({
        "requests_sent": sent,
        "instances_started": started,
        "instances_used": used,
        "instances_wasted": wasted,
        "instances_unused_so_far": started - used - wasted,
        "nodes": nodes,
    }))
}

/// The sum of the series of metric `name` (optionally only those with `label`).
fn metric(text: &str, name: &str, label: Option<&str>) -> f64 {
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter(|l| label.is_none_or(|want| l.contains(want)))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        // An empty float sum is -0.0; a count of nothing is 0.
        .fold(0.0, |a, b| a + b)
}

/// The value of label `name` in one Prometheus text line.
fn label(line: &str, name: &str) -> Option<String> {
    let start = line.find(&format!("{name}=\""))? + name.len() + 2;
    let end = line[start..].find('"')? + start;
    Some(line[start..end].to_owned())
}

fn write_calls(path: &std::path::Path, calls: &[Call]) -> anyhow::Result<()> {
    let mut s = String::from(
        "step,at,lat,lon,served_by,status,latency_ms,cold_start,redirects,redirect_ms,new_connections,preconnect_hint\n",
    );
    for c in calls {
        let cold = c.cold_start.map_or(String::new(), |b| b.to_string());
        s.push_str(&format!(
            "{},{},{},{},{},{},{:.3},{},{},{:.3},{},{}\n",
            c.step,
            c.at.replace(',', " "),
            c.lat,
            c.lon,
            c.served_by,
            c.status,
            c.latency_ms,
            cold,
            c.redirects,
            c.redirect_ms,
            c.new_connections,
            c.preconnect_hint
        ));
    }
    std::fs::write(path, s).with_context(|| format!("cannot write {}", path.display()))
}

fn print_variant(variant: &str, calls: &[Call], handovers: &[Handover]) {
    let cold: Vec<usize> = calls
        .iter()
        .filter(|c| c.cold_start == Some(true))
        .map(|c| c.step)
        .collect();
    println!(
        "{variant}: {} calls, cold starts at steps {cold:?}",
        calls.len()
    );
    for h in handovers {
        println!(
            "  step {:>3} {} -> {}: {:.2} ms (307 {:.2} + call {:.2}, {} new connection(s), cold: {:?}), steady at {} median {:.2} ms over {} calls, {:+.2} ms",
            h.step, h.from, h.to, h.peak_ms, h.redirect_ms, h.after_redirect_ms, h.new_connections, h.cold_start, h.to, h.steady_median_ms, h.steady_calls, h.above_steady_ms
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(step: usize, node: &str, ms: f64) -> Call {
        Call {
            step,
            at: String::new(),
            lat: 0.0,
            lon: 0.0,
            served_by: node.into(),
            status: 200,
            latency_ms: ms,
            cold_start: None,
            redirects: 0,
            redirect_ms: 0.0,
            new_connections: 0,
            preconnect_hint: String::new(),
        }
    }

    #[test]
    fn a_handover_is_compared_with_the_median_of_the_later_calls_at_its_node() {
        let calls = [
            call(0, "a", 1.0),
            call(1, "a", 1.0),
            call(2, "b", 20.0),
            call(3, "b", 8.0),
            call(4, "b", 9.0),
            call(5, "b", 7.0),
            call(6, "c", 40.0),
        ];
        let h = handovers(&calls);
        assert_eq!(h.len(), 2);
        assert_eq!(
            (h[0].step, h[0].from.as_str(), h[0].to.as_str()),
            (2, "a", "b")
        );
        assert_eq!((h[0].steady_median_ms, h[0].steady_calls), (8.0, 3));
        assert_eq!(h[0].above_steady_ms, 12.0);
        assert!(h[1].steady_median_ms.is_nan(), "no later call at c");
    }

    #[test]
    fn metrics_are_summed_by_name_and_label() {
        let text = "geofaas_prewarm_requests_total{node=\"a\",to=\"b\",outcome=\"started\"} 2\n\
                    geofaas_prewarm_requests_total{node=\"a\",to=\"c\",outcome=\"full\"} 1\n\
                    geofaas_prewarm_requests_total_other 5\n";
        assert_eq!(metric(text, "geofaas_prewarm_requests_total", None), 3.0);
        assert_eq!(
            metric(text, "geofaas_prewarm_requests_total", Some("to=\"c\"")),
            1.0
        );
        let line = text.lines().next().unwrap();
        assert_eq!(label(line, "outcome").as_deref(), Some("started"));
        assert_eq!(label(line, "missing"), None);
    }
}
