//! Per-request trace of greedy and PPO on one workload, for diagnosing seeds where PPO loses:
//! which shortlist slot PPO took, what it cost against the cheapest option, and what that
//! option was (reuse an idle container, queue behind a busy one, or start a new one).
//!
//! `cargo run --release -p geofaas-scheduler --example ppo_trace -- melbourne 7005 [weights] > trace.csv`

use anyhow::Context;
use geofaas_scheduler::baselines::greedy_decide;
use geofaas_scheduler::cli::shipped_weights;
use geofaas_scheduler::features::featurize;
use geofaas_scheduler::ppo::PpoPolicy;
use geofaas_scheduler::sim::{SimConfig, Simulator};
use geofaas_scheduler::topology::Topology;
use geofaas_scheduler::workload::{Workload, WorkloadConfig};
use geofaas_scheduler::Observation;

fn kind(obs: &Observation, a: geofaas_scheduler::Action) -> &'static str {
    if a.new_container {
        "new"
    } else if obs.queues(a) {
        "queue"
    } else {
        "idle"
    }
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let topo_name = args.get(1).map_or("melbourne", String::as_str);
    let seed: u64 = args.get(2).map_or(Ok(7005), |s| s.parse())?;
    let topo = Topology::by_name(topo_name)?;
    let d = topo.defaults;
    let link = SimConfig::default().link;
    let ppo = match args.get(3) {
        Some(p) => PpoPolicy::load(std::path::Path::new(p), link)?,
        None => PpoPolicy::from_bytes(shipped_weights(topo_name).context("weights")?, link)?,
    };
    let wl = Workload::for_topology(
        &topo,
        (d.functions, 7),
        &WorkloadConfig {
            requests: d.warmup + d.requests,
            rate_per_s: d.rate,
            seed,
            ..Default::default()
        },
    );
    let cfg = SimConfig {
        warmup: d.warmup,
        ..Default::default()
    };
    println!(
        "policy,request,arrival_ms,function,cpu_ms,cold_est_ms,slot,n_opts,kind,total_ms,queue_ms,cold_ms,best_ms,best_kind,greedy_kind,idle_here,busy_here,node,free_cores,blocked_idle_nodes,opt_kinds,opt_totals,logits"
    );
    for name in ["greedy", "ppo"] {
        let mut sim = Simulator::new(&topo, &wl, cfg);
        sim.warm_up();
        while let Some(obs) = sim.next_observation() {
            let idx = wl.requests.len() - sim.remaining();
            let r = &wl.requests[idx];
            let f = featurize(&link, &obs);
            let g = greedy_decide(&link, &obs);
            let logits = ppo.logits(&f);
            let a = if name == "greedy" {
                g
            } else {
                geofaas_scheduler::Policy::decide(&ppo, &obs)
            };
            let slot = f
                .actions
                .iter()
                .position(|x| *x == a)
                .map_or(-1, |s| s as i64);
            let best = f.actions[0];
            let best_ms = best.map_or(0.0, |b| obs.estimate(&link, b).total());
            let kinds: Vec<&str> = f.actions.iter().flatten().map(|x| kind(&obs, *x)).collect();
            let totals: Vec<String> = f
                .actions
                .iter()
                .flatten()
                .map(|x| format!("{:.0}", obs.estimate(&link, *x).total()))
                .collect();
            let lg: Vec<String> = (0..f.len()).map(|i| format!("{:.2}", logits[i])).collect();
            let (idle, busy) = a.map_or((0, 0), |x| {
                (
                    obs.candidates[x.candidate].idle,
                    obs.candidates[x.candidate].busy,
                )
            });
            // Warm idle containers of the function that cannot be reused for want of cores.
            let blocked: Vec<String> = obs
                .candidates
                .iter()
                .enumerate()
                .filter(|(_, c)| c.idle > 0 && c.free_cores + 1e-9 < obs.request.profile.cores)
                .map(|(i, _)| i.to_string())
                .collect();
            let node = a.map_or(-1, |x| x.candidate as i64);
            let free = a.map_or(0.0, |x| obs.candidates[x.candidate].free_cores);
            let o = sim.step(a, 0);
            println!(
                "{name},{idx},{:.1},{},{:.1},{:.0},{slot},{},{},{:.1},{:.1},{:.1},{:.1},{},{},{idle},{busy},{node},{free:.2},{},{},{},{}",
                r.arrival_ms,
                r.function,
                wl.functions[r.function].cpu_ms,
                geofaas_scheduler::model::cold_start_ms(&wl.functions[r.function], 500.0),
                f.len(),
                a.map_or("none", |x| kind(&obs, x)),
                o.latency.total(),
                o.latency.queue_ms,
                o.latency.cold_ms,
                best_ms,
                best.map_or("none", |b| kind(&obs, b)),
                g.map_or("none", |x| kind(&obs, x)),
                blocked.join("|"),
                kinds.join("|"),
                totals.join("|"),
                lg.join("|"),
            );
        }
    }
    Ok(())
}
