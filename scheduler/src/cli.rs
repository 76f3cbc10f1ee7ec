//! `geofaas train` and `geofaas simulate`: argument structs for the gateway binary's clap
//! subcommands and the functions that run them.

use std::path::PathBuf;

use anyhow::{bail, Context};

use crate::baselines::{GreedyPolicy, NearestPolicy, RandomPolicy};
use crate::eval::{lower_bounds, Evaluation, SeedStats};
use crate::metrics::{self, Summary};
use crate::milp::MilpPolicy;
use crate::policy::Policy;
use crate::ppo::PpoPolicy;
use crate::sim::{Outcome, SimConfig, Simulator};
use crate::topology::{Topology, WorkloadDefaults};
use crate::workload::{Workload, WorkloadConfig};

/// Workload shape shared by both commands. Sizes and rate default to what suits the topology
/// (`melbourne`: 2000 requests after 8000 warm-up at 400/s over 200 functions; `berlin`: 1000
/// after 2000 at 20/s over 50 functions; a topology file: 2000 after 8000 at 200/s over its
/// own functions).
#[derive(Debug, Clone, clap::Args)]
pub struct WorkloadArgs {
    /// Measured requests per workload (episode), after the warm-up. Default: the topology's.
    #[arg(long)]
    pub requests: Option<usize>,
    /// Warm-up requests before them, placed by greedy for every policy and not measured.
    /// Default: the topology's.
    #[arg(long)]
    pub warmup: Option<usize>,
    /// Mean arrival rate over the topology, requests per second. Default: the topology's.
    #[arg(long)]
    pub rate: Option<f64>,
    /// Functions in the generated catalogue (ignored when the topology file lists functions).
    /// Default: the topology's.
    #[arg(long)]
    pub functions: Option<usize>,
    /// Seed of the function catalogue.
    #[arg(long, default_value_t = 7)]
    pub catalogue_seed: u64,
    /// Replay a Huawei 2023 private-trace `requests` file (`day,time,0..199`, per minute or per
    /// second) instead of generating arrivals; sources and SLOs are still drawn from the seed.
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Multiply the trace's request counts by this factor.
    #[arg(long, default_value_t = 0.01)]
    pub trace_scale: f64,
}

impl WorkloadArgs {
    /// Fills every size left unset with the topology's default.
    fn resolve(&mut self, topo: &Topology) {
        let d = topo.defaults;
        self.requests.get_or_insert(d.requests);
        self.warmup.get_or_insert(d.warmup);
        self.rate.get_or_insert(d.rate);
        self.functions.get_or_insert(d.functions);
    }

    fn requests(&self) -> usize {
        self.requests.unwrap_or(WorkloadDefaults::FILE.requests)
    }

    fn warmup(&self) -> usize {
        self.warmup.unwrap_or(WorkloadDefaults::FILE.warmup)
    }

    fn functions(&self) -> usize {
        self.functions.unwrap_or(WorkloadDefaults::FILE.functions)
    }

    fn sim(&self) -> SimConfig {
        SimConfig {
            warmup: self.warmup(),
            ..Default::default()
        }
    }

    fn config(&self, seed: u64) -> WorkloadConfig {
        WorkloadConfig {
            requests: self.warmup() + self.requests(),
            rate_per_s: self.rate.unwrap_or(WorkloadDefaults::FILE.rate),
            seed,
            ..Default::default()
        }
    }
}

/// `geofaas train`: PPO on simulated workloads; writes weights and a metrics CSV.
#[derive(Debug, Clone, clap::Args)]
pub struct TrainArgs {
    /// `melbourne` (EUA, 125 sites), `berlin`, or a geofaas topology file.
    #[arg(long, default_value = "melbourne")]
    pub topology: String,
    /// Measured-profile files (nodes' `GET /node/profiles`, comma-separated): train on the
    /// topology calibrated to them (the first node's functions, links and load; each node's
    /// cores).
    #[arg(long, value_delimiter = ',')]
    pub profiles: Vec<PathBuf>,
    /// PPO iterations.
    #[arg(long, default_value_t = 40)]
    pub iterations: usize,
    /// Episodes per iteration.
    #[arg(long, default_value_t = 2)]
    pub episodes: usize,
    /// Seed (network init, sampling, training workloads).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Adam learning rate.
    #[arg(long, default_value_t = 1e-3)]
    pub lr: f64,
    /// Keep the checkpoint with the lowest max(mean, P99) relative to greedy on the
    /// validation seeds, instead of the lowest mean.
    #[arg(long)]
    pub select_on_p99: bool,
    /// Discount factor (per decision; 0.9 looks about 10 decisions ahead).
    #[arg(long, default_value_t = 0.9)]
    pub gamma: f32,
    /// Entropy bonus weight.
    #[arg(long, default_value_t = 0.003)]
    pub entropy: f32,
    /// Charge the latency a request pays beyond an idle warm container it could not use for
    /// want of cores, times this, to the decisions holding those cores (0: off).
    #[arg(long, default_value_t = 0.0)]
    pub blame: f64,
    /// Largest excess latency charged per blocked request, ms.
    #[arg(long, default_value_t = 2000.0)]
    pub blame_cap_ms: f64,
    /// Evaluate on the held-out seeds every this many iterations.
    #[arg(long, default_value_t = 5)]
    pub eval_every: usize,
    /// Validation seeds that pick the best checkpoint (`eval::VALIDATION_SEEDS`; keep them
    /// apart from `simulate --seeds` and `--held-out`).
    #[arg(long, value_delimiter = ',', default_value = "501,502")]
    pub eval_seeds: Vec<u64>,
    /// Weights output (safetensors).
    #[arg(long, default_value = "scheduler/weights/melbourne.safetensors")]
    pub out: PathBuf,
    /// Metrics CSV output (default: next to the weights, `.metrics.csv`).
    #[arg(long)]
    pub metrics: Option<PathBuf>,
    /// Hide the progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Workload shape.
    #[command(flatten)]
    pub workload: WorkloadArgs,
}

/// `geofaas simulate`: runs policies on the same held-out workloads and compares them.
#[derive(Debug, Clone, clap::Args)]
pub struct SimulateArgs {
    /// `melbourne` (EUA, 125 sites), `berlin`, or a geofaas topology file.
    #[arg(long, default_value = "melbourne")]
    pub topology: String,
    /// Policies to compare: random, nearest, greedy, milp, milp:<window ms>, ppo,
    /// ppo:<weights file> (several PPO weights side by side); a PPO policy followed by
    /// @<margin> (ppo@0.25, ppo:w.safetensors@0.25) chooses only among the options the model
    /// puts within that fraction of the best (`[scheduler] margin`); @<margin>/<warm margin>
    /// (ppo@0.25/0.05) narrows it for the options on a busy node (`[scheduler] busy_margin`).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "random,nearest,greedy,milp,ppo"
    )]
    pub policies: Vec<String>,
    /// PPO weights (safetensors); default: the shipped weights of the topology.
    #[arg(long)]
    pub weights: Option<PathBuf>,
    /// Held-out workload seeds.
    #[arg(long, value_delimiter = ',', default_value = "1,2,3")]
    pub seeds: Vec<u64>,
    /// Use the first N held-out test seeds (7001, 7002, ...; never a training or validation
    /// seed) instead of `--seeds`.
    #[arg(long)]
    pub held_out: Option<usize>,
    /// MILP look-ahead window, ms (`milp`; `milp:W` in `--policies` sets W per entry).
    #[arg(long, default_value_t = 20.0)]
    pub milp_window_ms: f64,
    /// Per-seed CSV (seed, policy, mean, P99, SLO violations, drops, mean queueing and cold
    /// start; the lower bound as policy `bound`), written when given.
    #[arg(long)]
    pub per_seed_csv: Option<PathBuf>,
    /// Summary CSV output.
    #[arg(long, default_value = "simulate.csv")]
    pub csv: PathBuf,
    /// Latency CDF plot output (PNG).
    #[arg(long, default_value = "simulate-cdf.png")]
    pub plot: PathBuf,
    /// Right end of the CDF plot's latency axis, ms.
    #[arg(long, default_value_t = 400.0)]
    pub plot_max_ms: f64,
    /// Measured-profile files (nodes' `GET /node/profiles`, comma-separated): calibrate the
    /// topology to them before simulating (the first node's functions, links and the load it
    /// saw arrive; each node's cores).
    #[arg(long, value_delimiter = ',')]
    pub profiles: Vec<PathBuf>,
    /// Workload shape.
    #[command(flatten)]
    pub workload: WorkloadArgs,
}

pub use crate::ppo::shipped_weights;
/// `topology` by name or file, calibrated to the measured-profile files `profiles` (none: as
/// it is; see [`crate::measured::calibrate_fleet`]).
pub fn calibrated_topology(
    topology: &str,
    profiles: &[PathBuf],
    link: &crate::model::LinkModel,
) -> anyhow::Result<Topology> {
    let mut topo = Topology::by_name(topology)?;
    let files = profiles
        .iter()
        .map(|p| crate::measured::MeasuredProfiles::load(p))
        .collect::<crate::Result<Vec<_>>>()?;
    crate::measured::calibrate_fleet(&files, &mut topo, link)?;
    Ok(topo)
}

/// `ppo` (`--weights`, else the topology's shipped weights) or `ppo:<weights file>`.
fn ppo_policy(
    name: &str,
    args: &SimulateArgs,
    link: crate::model::LinkModel,
) -> anyhow::Result<PpoPolicy> {
    if let Some(path) = name.strip_prefix("ppo:") {
        return Ok(PpoPolicy::load(std::path::Path::new(path), link)?.named(name));
    }
    anyhow::ensure!(name == "ppo", "unknown policy {name:?}");
    Ok(match &args.weights {
        Some(p) => PpoPolicy::load(p, link)?,
        None => {
            let bytes = shipped_weights(&args.topology).with_context(|| {
                format!("no shipped weights for {}: pass --weights", args.topology)
            })?;
            PpoPolicy::from_bytes(bytes, link)?
        }
    })
}

fn make_policy(
    name: &str,
    args: &SimulateArgs,
    link: crate::model::LinkModel,
) -> anyhow::Result<Box<dyn Policy>> {
    if let Some((policy, margins)) = name.rsplit_once('@').filter(|_| name.starts_with("ppo")) {
        let fraction = |text: &str| {
            text.parse()
                .ok()
                .filter(|m: &f64| m.is_finite() && *m >= 0.0)
                .with_context(|| {
                    format!("{name:?}: {text:?} after @ must be a non-negative fraction (@0.25 or @0.25/0.05)")
                })
        };
        let (margin, warm) = match margins.split_once('/') {
            Some((m, w)) => (fraction(m)?, Some(fraction(w)?)),
            None => (fraction(margins)?, None),
        };
        let mut p = ppo_policy(policy, args, link)?.with_margin(margin);
        if let Some(w) = warm {
            p = p.with_busy_margin(w);
        }
        return Ok(Box::new(p.named(name)));
    }
    Ok(match name {
        "random" => Box::new(RandomPolicy::new(42)),
        "nearest" => Box::new(NearestPolicy),
        "greedy" => Box::new(GreedyPolicy::new(link)),
        "milp" => Box::new(MilpPolicy::new(link, args.milp_window_ms)),
        w if w.starts_with("milp:") => {
            let ms: f64 = w["milp:".len()..]
                .parse()
                .with_context(|| format!("{w:?}: the window after milp: is in ms"))?;
            Box::new(MilpPolicy::new(link, ms).named(w))
        }
        w if w == "ppo" || w.starts_with("ppo:") => Box::new(ppo_policy(w, args, link)?),
        other => bail!(
            "unknown policy {other:?} (random, nearest, greedy, milp, milp:<ms>, ppo, ppo:<weights>)"
        ),
    })
}

/// Runs `geofaas simulate`.
pub fn run_simulate(mut args: SimulateArgs) -> anyhow::Result<()> {
    let topo = calibrated_topology(
        &args.topology,
        &args.profiles,
        &crate::model::LinkModel::default(),
    )?;
    args.workload.resolve(&topo);
    if let Some(n) = args.held_out {
        args.seeds = crate::eval::held_out_seeds(n);
    }
    let sim = args.workload.sim();
    let workloads = workloads(&args, &topo)?;
    let mut rows = Vec::new();
    let mut series: Vec<(String, Vec<Outcome>)> = Vec::new();
    let mut per_seed = Vec::new();
    for name in &args.policies {
        let policy = make_policy(name, &args, sim.link)?;
        let t0 = std::time::Instant::now();
        let runs: Vec<Vec<Outcome>> = workloads
            .iter()
            .map(|wl| Simulator::run(&topo, wl, sim, policy.as_ref()))
            .collect();
        per_seed.push(runs.iter().map(|o| SeedStats::from_outcomes(o)).collect());
        let all: Vec<Outcome> = runs.into_iter().flatten().collect();
        let s = Summary::new(policy.name(), &all);
        eprintln!(
            "{name}: mean {:.1} ms, p99 {:.1} ms, slo {:.2}%, {:.1} s",
            s.mean_ms,
            s.p99_ms,
            100.0 * s.slo_violation,
            t0.elapsed().as_secs_f64()
        );
        rows.push(s);
        series.push((name.clone(), all));
    }
    println!(
        "topology {} ({} nodes), seeds {:?}, {} requests each ({} warm-up excluded), MILP solver {}",
        topo.name,
        topo.nodes.len(),
        args.seeds,
        args.workload.requests(),
        args.workload.warmup(),
        MilpPolicy::solver_name()
    );
    print!("{}", metrics::markdown_table(&rows));
    let find = |n: &str| rows.iter().find(|r| r.policy == n);
    if let (Some(p), Some(m)) = (find("ppo"), find("milp")) {
        println!(
            "PPO/MILP: mean {:.3}x, P50 {:.3}x, P95 {:.3}x, P99 {:.3}x, SLO violations {:+.2} pp",
            p.mean_ms / m.mean_ms,
            p.p50_ms / m.p50_ms,
            p.p95_ms / m.p95_ms,
            p.p99_ms / m.p99_ms,
            100.0 * (p.slo_violation - m.slo_violation)
        );
    }
    let eval = Evaluation {
        seeds: args.seeds.clone(),
        policies: rows.iter().map(|r| r.policy.clone()).collect(),
        stats: per_seed,
        bound: workloads
            .iter()
            .map(|wl| SeedStats::from_latencies(lower_bounds(&topo, wl, sim), 0, 0))
            .collect(),
    };
    if args.seeds.len() > 1 {
        println!(
            "\nper-seed evaluation, MILP solver {}:\n{}",
            MilpPolicy::solver_name(),
            eval.markdown()
        );
    }
    if let Some(p) = &args.per_seed_csv {
        eval.write_csv(p)?;
        println!("wrote {}", p.display());
    }
    metrics::write_csv(&args.csv, &rows)?;
    metrics::plot_cdf(&args.plot, &series, args.plot_max_ms)?;
    println!("wrote {} and {}", args.csv.display(), args.plot.display());
    Ok(())
}

/// The workloads of `args.seeds` (generated, or a trace replayed with each seed's draws).
fn workloads(args: &SimulateArgs, topo: &Topology) -> anyhow::Result<Vec<Workload>> {
    let trace = match &args.workload.trace {
        Some(p) => Some(crate::trace::TraceTable::load(p)?),
        None => None,
    };
    Ok(args
        .seeds
        .iter()
        .map(|&s| {
            let shape = (args.workload.functions(), args.workload.catalogue_seed);
            let wl = Workload::for_topology(topo, shape, &args.workload.config(s));
            match &trace {
                Some(t) => t.to_workload(
                    wl.functions,
                    &topo.sources,
                    args.workload.trace_scale,
                    &args.workload.config(s),
                ),
                None => wl,
            }
        })
        .collect())
}

/// Runs `geofaas train` (needs the `train` feature).
#[cfg(feature = "train")]
pub fn run_train(mut args: TrainArgs) -> anyhow::Result<()> {
    use crate::train::{train, IterMetrics, PpoConfig};
    let topo = calibrated_topology(
        &args.topology,
        &args.profiles,
        &crate::model::LinkModel::default(),
    )?;
    args.workload.resolve(&topo);
    let cfg = PpoConfig {
        seed: args.seed,
        iterations: args.iterations,
        episodes_per_iter: args.episodes,
        lr: args.lr,
        gamma: args.gamma,
        select_on_p99: args.select_on_p99,
        ent_coef: args.entropy,
        blame: args.blame,
        blame_cap_ms: args.blame_cap_ms,
        eval_every: args.eval_every,
        eval_seeds: args.eval_seeds.clone(),
        sim: args.workload.sim(),
        workload: args.workload.config(0),
        functions: (args.workload.functions(), args.workload.catalogue_seed),
        ..Default::default()
    };
    let bar = if args.quiet {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::new(cfg.iterations as u64)
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{bar:30} {pos}/{len} [{elapsed_precise}<{eta}] {msg}",
        )
        .expect("valid template"),
    );
    let mut last_eval = String::new();
    let report = train(&topo, &cfg, |m: &IterMetrics| {
        if let Some(e) = &m.eval {
            last_eval = format!(" | eval mean {:.1} ms p99 {:.1} ms", e.mean_ms, e.p99_ms);
        }
        bar.set_message(format!(
            "return {:.1} | train mean {:.1} ms{last_eval}",
            m.mean_return, m.train_mean_ms
        ));
        bar.inc(1);
    })?;
    bar.finish();
    if let Some(dir) = args.out.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let bytes = crate::ppo::to_safetensors(report.policy.actor(), report.policy.critic())?;
    std::fs::write(&args.out, bytes).with_context(|| format!("writing {}", args.out.display()))?;
    let metrics_path = args
        .metrics
        .clone()
        .unwrap_or_else(|| args.out.with_extension("metrics.csv"));
    let mut csv = String::from(IterMetrics::CSV_HEADER);
    csv.push('\n');
    for m in &report.metrics {
        csv.push_str(&m.csv_row());
        csv.push('\n');
    }
    std::fs::write(&metrics_path, csv)
        .with_context(|| format!("writing {}", metrics_path.display()))?;
    println!(
        "wrote {} and {}",
        args.out.display(),
        metrics_path.display()
    );
    Ok(())
}

/// Runs `geofaas train`: this build has no `train` feature, so it explains how to get one.
#[cfg(not(feature = "train"))]
pub fn run_train(_args: TrainArgs) -> anyhow::Result<()> {
    bail!("this build has no PPO training: rebuild with the geofaas-scheduler feature `train`")
}
