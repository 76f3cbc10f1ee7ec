//! The held-out evaluation behind `geofaas simulate --held-out N`.
//!
//! * Seed ranges in one place: training episodes, validation (best checkpoint) and the held-out
//!   test seeds, so a test can check that they never overlap.
//! * A lower bound per measured request: its latency with no contention (see [`lower_bounds`]).
//! * Per-seed mean and P99 of each policy, ratios against the best reference per seed and
//!   against the lower bound, with percentile-bootstrap confidence intervals over seeds.

use std::fmt::Write as _;
use std::path::Path;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::error::{Result, SchedulerError};
use crate::metrics::percentile;
use crate::model;
use crate::sim::{Outcome, SimConfig, Simulator};
use crate::topology::Topology;
use crate::workload::Workload;

/// Training episodes draw their workload seeds from here up (see [`training_seed`]).
pub const TRAIN_SEED_BASE: u64 = 1_000_000;
/// Default validation seeds: `train` keeps the checkpoint that does best on them
/// (`--eval-seeds` may name more, e.g. 501-508).
pub const VALIDATION_SEEDS: [u64; 2] = [501, 502];
/// First held-out test seed (`simulate --held-out N` uses `N` seeds from here).
pub const HELD_OUT_START: u64 = 7_001;
/// Bootstrap resamples behind every confidence interval.
pub const BOOTSTRAP_RESAMPLES: usize = 10_000;

/// Workload seed of training episode `episode` of iteration `iteration` (1-based) for a run
/// seeded `seed`: always at least [`TRAIN_SEED_BASE`], so never a validation or test seed.
pub fn training_seed(seed: u64, iteration: usize, episodes_per_iter: usize, episode: usize) -> u64 {
    TRAIN_SEED_BASE + seed * 100_000 + (iteration * episodes_per_iter + episode) as u64
}

/// The first `n` held-out test seeds.
pub fn held_out_seeds(n: usize) -> Vec<u64> {
    (HELD_OUT_START..HELD_OUT_START + n as u64).collect()
}

/// A lower bound on the latency of each measured request (those after `cfg.warmup`) under any
/// policy: the cheapest node's compute plus communication time, as if an idle warm container
/// with free cores waited everywhere (no queueing, no cold start). Tightened for the first
/// measured request of a function: where no container of the function exists when the warm-up
/// ends (that state is the same for every policy), it must pay the cold start.
pub fn lower_bounds(topo: &Topology, wl: &Workload, cfg: SimConfig) -> Vec<f64> {
    let mut sim = Simulator::new(topo, wl, cfg);
    sim.warm_up();
    let start = cfg.warmup.min(wl.requests.len());
    let mut seen = vec![false; wl.functions.len()];
    wl.requests[start..]
        .iter()
        .map(|r| {
            // The state right after the warm-up: containers only go away before `r` arrives
            // (expiry, eviction) unless an earlier request of the same function starts one.
            let obs = sim.observe(r);
            let first = !std::mem::replace(&mut seen[r.function], true);
            let p = &obs.request.profile;
            obs.candidates
                .iter()
                .map(|c| {
                    let b = model::latency(&cfg.link, p, r.input_kb, &r.source, &c.node, false);
                    let warm = b.comp_ms + b.comm_ms;
                    if first && c.idle + c.busy == 0 {
                        warm + model::cold_start_ms(p, c.node.bandwidth_mbps)
                    } else {
                        warm
                    }
                })
                .fold(f64::INFINITY, f64::min)
        })
        .collect()
}

/// Mean and P99 of one policy on one workload.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SeedStats {
    /// Mean latency of served requests, ms.
    pub mean_ms: f64,
    /// Nearest-rank 99th percentile, ms.
    pub p99_ms: f64,
    /// Share over the SLO or dropped.
    pub slo_violation: f64,
    /// Requests no node could take.
    pub dropped: usize,
    /// Mean wait behind busy containers, ms (0 for the bound).
    pub queue_ms: f64,
    /// Mean cold-start time, ms (0 for the bound).
    pub cold_ms: f64,
}

impl SeedStats {
    /// Statistics of served latencies (`violations` counted by the caller).
    pub fn from_latencies(mut lat: Vec<f64>, violations: usize, dropped: usize) -> Self {
        let n = (lat.len() + dropped).max(1) as f64;
        lat.sort_by(f64::total_cmp);
        Self {
            mean_ms: lat.iter().sum::<f64>() / lat.len().max(1) as f64,
            p99_ms: percentile(&lat, 0.99),
            slo_violation: violations as f64 / n,
            dropped,
            queue_ms: 0.0,
            cold_ms: 0.0,
        }
    }

    /// Statistics of a policy's outcomes.
    pub fn from_outcomes(out: &[Outcome]) -> Self {
        let lat = out
            .iter()
            .filter(|o| !o.dropped)
            .map(|o| o.latency.total())
            .collect();
        let viol = out.iter().filter(|o| o.violates_slo()).count();
        let n = out.len().max(1) as f64;
        Self {
            queue_ms: out.iter().map(|o| o.latency.queue_ms).sum::<f64>() / n,
            cold_ms: out.iter().map(|o| o.latency.cold_ms).sum::<f64>() / n,
            ..Self::from_latencies(lat, viol, out.iter().filter(|o| o.dropped).count())
        }
    }
}

/// Mean of `values` with a 95 % percentile-bootstrap interval (seeded, [`BOOTSTRAP_RESAMPLES`]).
pub fn bootstrap_mean_ci(values: &[f64]) -> (f64, f64, f64) {
    let n = values.len();
    let mean = values.iter().sum::<f64>() / n.max(1) as f64;
    if n < 2 {
        return (mean, mean, mean);
    }
    let mut rng = ChaCha8Rng::seed_from_u64(0x00b0_0757);
    let mut means: Vec<f64> = (0..BOOTSTRAP_RESAMPLES)
        .map(|_| (0..n).map(|_| values[rng.gen_range(0..n)]).sum::<f64>() / n as f64)
        .collect();
    means.sort_by(f64::total_cmp);
    (mean, percentile(&means, 0.025), percentile(&means, 0.975))
}

/// Per-seed results of every policy on the same workloads, plus the lower bound.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluation {
    /// Workload seeds, in order.
    pub seeds: Vec<u64>,
    /// Policy names, in the order they ran.
    pub policies: Vec<String>,
    /// `stats[p][s]`: policy `p` on seed `s`.
    pub stats: Vec<Vec<SeedStats>>,
    /// The lower bound per seed.
    pub bound: Vec<SeedStats>,
}

/// A metric of [`SeedStats`] that the report compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    /// Mean latency.
    Mean,
    /// P99 latency.
    P99,
}

impl Metric {
    fn of(self, s: &SeedStats) -> f64 {
        match self {
            Self::Mean => s.mean_ms,
            Self::P99 => s.p99_ms,
        }
    }
}

impl Evaluation {
    /// Policies that make up the best reference: every policy run except `ppo`.
    pub fn reference_members(&self) -> Vec<&str> {
        self.policies
            .iter()
            .map(String::as_str)
            .filter(|p| !p.starts_with("ppo"))
            .collect()
    }

    /// Per seed, the best value of `metric` among [`Evaluation::reference_members`].
    pub fn reference(&self, metric: Metric) -> Vec<f64> {
        (0..self.seeds.len())
            .map(|s| {
                self.policies
                    .iter()
                    .zip(&self.stats)
                    .filter(|(p, _)| !p.starts_with("ppo"))
                    .map(|(_, st)| metric.of(&st[s]))
                    .fold(f64::INFINITY, f64::min)
            })
            .collect()
    }

    /// Per-seed ratios of policy `p` against `base`.
    fn ratios(&self, p: usize, metric: Metric, base: &[f64]) -> Vec<f64> {
        self.stats[p]
            .iter()
            .zip(base)
            .map(|(s, b)| metric.of(s) / b)
            .collect()
    }

    /// The Markdown report: per policy, mean and P99 over seeds and their ratios to the best
    /// reference and to the lower bound, each the mean of per-seed ratios with a 95 % CI.
    pub fn markdown(&self) -> String {
        let fmt = |v: &[f64]| {
            let (m, lo, hi) = bootstrap_mean_ci(v);
            format!("{m:.3} [{lo:.3}, {hi:.3}]")
        };
        let ref_mean = self.reference(Metric::Mean);
        let ref_p99 = self.reference(Metric::P99);
        let lb_mean: Vec<f64> = self.bound.iter().map(|b| b.mean_ms).collect();
        let lb_p99: Vec<f64> = self.bound.iter().map(|b| b.p99_ms).collect();
        let mut s = String::new();
        let _ = writeln!(
            s,
            "best reference per seed and metric: min over {{{}}}; ratios are means of per-seed \
             ratios, [95% percentile-bootstrap CI over {} seeds, {} resamples]\n",
            self.reference_members().join(", "),
            self.seeds.len(),
            BOOTSTRAP_RESAMPLES
        );
        s.push_str(
            "| policy | mean ms | P99 ms | mean / best ref | P99 / best ref | mean / bound | \
             P99 / bound | seeds > 1.05x ref (mean, P99) |\n|---|---|---|---|---|---|---|---|\n",
        );
        let mean_of = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
        for (p, name) in self.policies.iter().enumerate() {
            let m: Vec<f64> = self.stats[p].iter().map(|x| x.mean_ms).collect();
            let q: Vec<f64> = self.stats[p].iter().map(|x| x.p99_ms).collect();
            let rm = self.ratios(p, Metric::Mean, &ref_mean);
            let rq = self.ratios(p, Metric::P99, &ref_p99);
            let over = |v: &[f64]| v.iter().filter(|r| **r > 1.05).count();
            let _ = writeln!(
                s,
                "| {name} | {:.1} | {:.1} | {} | {} | {} | {} | {}, {} of {} |",
                mean_of(&m),
                mean_of(&q),
                fmt(&rm),
                fmt(&rq),
                fmt(&self.ratios(p, Metric::Mean, &lb_mean)),
                fmt(&self.ratios(p, Metric::P99, &lb_p99)),
                over(&rm),
                over(&rq),
                self.seeds.len()
            );
        }
        let _ = writeln!(
            s,
            "| bound | {:.1} | {:.1} | | | 1 | 1 | |",
            mean_of(&lb_mean),
            mean_of(&lb_p99)
        );
        s
    }

    /// Writes one row per (seed, policy), the bound as policy `bound`.
    pub fn write_csv(&self, path: &Path) -> Result<()> {
        let mut s =
            String::from("seed,policy,mean_ms,p99_ms,slo_violation,dropped,queue_ms,cold_ms\n");
        for (i, seed) in self.seeds.iter().enumerate() {
            let rows = self
                .policies
                .iter()
                .zip(&self.stats)
                .map(|(p, st)| (p.as_str(), &st[i]))
                .chain(std::iter::once(("bound", &self.bound[i])));
            for (p, st) in rows {
                let _ = writeln!(
                    s,
                    "{seed},{p},{:.3},{:.3},{:.5},{},{:.3},{:.3}",
                    st.mean_ms, st.p99_ms, st.slo_violation, st.dropped, st.queue_ms, st.cold_ms
                );
            }
        }
        std::fs::write(path, s).map_err(|e| SchedulerError::io(path, e))
    }
}

#[cfg(test)]
mod tests;
