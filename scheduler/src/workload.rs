//! Workloads: a seeded generator calibrated to the published Huawei fits (`trace_facts.json`)
//! with Zipf-distributed functions and source sites and SLOs in [200, 400] ms.
//!
//! Calibration (per function, drawn once from the catalogue seed):
//! * cold start (pull + init at the reference bandwidth) ~ LogNormal with mean 3.24 s and
//!   standard deviation 7.10 s (EuroSys'25 fit), clipped to [0.1, 30] s; 30-70 % of it is init,
//!   the rest is pulling the image at [`REF_PULL_MBPS`];
//! * execution time ~ LogNormal with median 20 ms, sigma 1.0 (published per-region medians
//!   4-100 ms), clipped to [1, 2000] ms; cores per request from the Huawei cpu_request table;
//! * memory per container from the pool sizes 128-2048 MB; payload ~ LogNormal(median 100 KB).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp, LogNormal};
use serde::{Deserialize, Serialize};

use crate::model::{FunctionProfile, GeoPoint};

/// Bandwidth (Mbit/s) at which a function's sampled cold-start time is reached.
pub const REF_PULL_MBPS: f64 = 500.0;
/// Huawei cpu_request values (cores) from the cpu_limit -> cpu_request table.
const CPU_REQUEST_CORES: [f64; 9] = [0.125, 0.3, 0.375, 0.5, 0.625, 0.75, 1.0, 1.25, 2.0];
/// Container memory sizes (MB) of the Huawei pool names, most common first.
const MEMORY_MB: [f64; 5] = [128.0, 256.0, 512.0, 1024.0, 2048.0];

/// One request of a workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// Position in the workload.
    pub id: usize,
    /// Arrival time, ms since the workload start.
    pub arrival_ms: f64,
    /// Index into [`Workload::functions`].
    pub function: usize,
    /// Where the request comes from.
    pub source: GeoPoint,
    /// Payload size in KB.
    pub input_kb: f64,
    /// Latency objective in ms.
    pub slo_ms: f64,
}

/// Functions and a time-ordered list of requests.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    /// Function profiles (the catalogue).
    pub functions: Vec<FunctionProfile>,
    /// Requests sorted by arrival.
    pub requests: Vec<Request>,
}

/// Parameters of the seeded generator.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkloadConfig {
    /// Number of requests.
    pub requests: usize,
    /// Mean arrival rate over the whole topology, requests per second (Poisson).
    pub rate_per_s: f64,
    /// Zipf exponent of the source sites.
    pub zipf_sites: f64,
    /// Zipf exponent of function popularity.
    pub zipf_functions: f64,
    /// SLO range in ms (uniform).
    pub slo_ms: (f64, f64),
    /// Seed of the request stream (arrivals, functions, sources, sizes).
    pub seed: u64,
}

impl Default for WorkloadConfig {
    fn default() -> Self {
        Self {
            requests: 2000,
            rate_per_s: 400.0,
            zipf_sites: 0.8,
            zipf_functions: 1.0,
            slo_ms: (200.0, 400.0),
            seed: 1,
        }
    }
}

/// Draws `n` function profiles calibrated to the Huawei fits (see the module docs).
pub fn function_catalogue(n: usize, seed: u64) -> Vec<FunctionProfile> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    // LogNormal with mean m and sd s: sigma^2 = ln(1 + s^2/m^2), mu = ln m - sigma^2 / 2.
    let (m, s) = (3240.0_f64, 7100.0_f64);
    let sigma2 = (1.0 + (s / m).powi(2)).ln();
    let cold = LogNormal::new(m.ln() - sigma2 / 2.0, sigma2.sqrt()).expect("valid lognormal");
    let exec = LogNormal::new(20.0_f64.ln(), 1.0).expect("valid lognormal");
    let input = LogNormal::new(100.0_f64.ln(), 1.0).expect("valid lognormal");
    (0..n)
        .map(|_| {
            let cold_ms = cold.sample(&mut rng).clamp(100.0, 30_000.0);
            let init_ms = cold_ms * rng.gen_range(0.3..0.7);
            let image_mb = (cold_ms - init_ms) / 1000.0 * REF_PULL_MBPS / 8.0;
            let cores = CPU_REQUEST_CORES[rng.gen_range(0..CPU_REQUEST_CORES.len())];
            let exec_ms = exec.sample(&mut rng).clamp(1.0, 2000.0);
            // Skewed towards small containers, as in the pool names.
            let mem = MEMORY_MB[(rng.gen::<f64>().powi(2) * MEMORY_MB.len() as f64) as usize];
            FunctionProfile {
                cpu_ms: exec_ms * cores,
                cores,
                memory_mb: mem,
                image_mb,
                init_ms,
                input_kb: input.sample(&mut rng).clamp(1.0, 10_000.0),
                slo_ms: 300.0,
            }
        })
        .collect()
}

/// A Zipf sampler over `n` items whose popularity ranks are shuffled by `seed`.
#[derive(Debug, Clone)]
pub struct Zipf {
    cdf: Vec<f64>,
    item_of_rank: Vec<usize>,
}

impl Zipf {
    /// Zipf(`s`) over `n` items; rank order drawn from `seed`.
    pub fn new(n: usize, s: f64, seed: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut item_of_rank: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            item_of_rank.swap(i, rng.gen_range(0..=i));
        }
        let mut acc = 0.0;
        let mut cdf: Vec<f64> = (1..=n)
            .map(|r| {
                acc += 1.0 / (r as f64).powf(s);
                acc
            })
            .collect();
        cdf.iter_mut().for_each(|c| *c /= acc);
        Self { cdf, item_of_rank }
    }

    /// Items drawn in proportion to `weights` (each finite and >= 0, not all zero); the
    /// name stays, the draw is the same inverse-CDF walk.
    pub fn weighted(weights: &[f64]) -> Self {
        let mut acc = 0.0;
        let mut cdf: Vec<f64> = weights
            .iter()
            .map(|w| {
                acc += w.max(0.0);
                acc
            })
            .collect();
        cdf.iter_mut().for_each(|c| *c /= acc);
        Self {
            cdf,
            item_of_rank: (0..weights.len()).collect(),
        }
    }

    /// Draws one item.
    pub fn sample(&self, rng: &mut impl Rng) -> usize {
        let u: f64 = rng.gen();
        let rank = self.cdf.partition_point(|&c| c < u).min(self.cdf.len() - 1);
        self.item_of_rank[rank]
    }
}

impl Workload {
    /// The workload of `cfg` on `topo`: the topology file's functions if it has any (called in
    /// the topology's measured mix when it has one, [`Topology::popularity`]), else a
    /// catalogue of `functions.0` functions drawn from seed `functions.1`.
    ///
    /// [`Topology::popularity`]: crate::topology::Topology::popularity
    pub fn for_topology(
        topo: &crate::topology::Topology,
        functions: (usize, u64),
        cfg: &WorkloadConfig,
    ) -> Self {
        match &topo.functions {
            Some(f) => {
                // A topology file states each function's SLO: use it instead of the paper's range.
                let fs: Vec<FunctionProfile> = f.iter().map(|(_, p)| p.clone()).collect();
                let popularity = topo
                    .popularity
                    .as_deref()
                    .filter(|w| w.len() == fs.len() && w.iter().any(|x| *x > 0.0));
                let mut wl = Self::generate_mix(fs, popularity, &topo.sources, cfg);
                for r in &mut wl.requests {
                    r.slo_ms = wl.functions[r.function].slo_ms;
                }
                wl
            }
            None => Self::generate(
                function_catalogue(functions.0, functions.1),
                &topo.sources,
                cfg,
            ),
        }
    }

    /// Generates a workload over `functions` and `sources` (both non-empty).
    pub fn generate(
        functions: Vec<FunctionProfile>,
        sources: &[GeoPoint],
        cfg: &WorkloadConfig,
    ) -> Self {
        Self::generate_mix(functions, None, sources, cfg)
    }

    /// [`Workload::generate`] with the functions called in proportion to `popularity`
    /// (parallel to `functions`) instead of Zipf-distributed.
    pub fn generate_mix(
        functions: Vec<FunctionProfile>,
        popularity: Option<&[f64]>,
        sources: &[GeoPoint],
        cfg: &WorkloadConfig,
    ) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
        // Popularity ranks are part of the catalogue and the topology, not of the request seed.
        let fz = match popularity {
            Some(w) => Zipf::weighted(w),
            None => Zipf::new(functions.len(), cfg.zipf_functions, 17),
        };
        let sz = Zipf::new(sources.len(), cfg.zipf_sites, 23);
        let gap = Exp::new(cfg.rate_per_s / 1000.0).expect("positive rate");
        let mut t = 0.0;
        let requests = (0..cfg.requests)
            .map(|id| {
                t += gap.sample(&mut rng);
                let function = fz.sample(&mut rng);
                let f = &functions[function];
                Request {
                    id,
                    arrival_ms: t,
                    function,
                    source: sources[sz.sample(&mut rng)],
                    input_kb: f.input_kb * rng.gen_range(0.5..1.5),
                    slo_ms: rng.gen_range(cfg.slo_ms.0..=cfg.slo_ms.1),
                }
            })
            .collect();
        Self {
            functions,
            requests,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalogue_matches_the_published_fits() {
        let fs = function_catalogue(2000, 5);
        let mut cold: Vec<f64> = fs
            .iter()
            .map(|f| crate::model::cold_start_ms(f, REF_PULL_MBPS))
            .collect();
        cold.sort_by(f64::total_cmp);
        let median = cold[cold.len() / 2];
        // LogNormal(mean 3.24 s, sd 7.10 s) has median 1.35 s.
        assert!((1000.0..1800.0).contains(&median), "{median}");
        let mut exec: Vec<f64> = fs.iter().map(|f| f.cpu_ms / f.cores).collect();
        exec.sort_by(f64::total_cmp);
        let m = exec[exec.len() / 2];
        assert!((4.0..100.0).contains(&m), "{m}");
    }

    #[test]
    fn generator_is_seeded_and_slos_in_range() {
        let fs = function_catalogue(200, 1);
        let src = [GeoPoint::new(0.0, 0.0), GeoPoint::new(0.0, 0.01)];
        let cfg = WorkloadConfig {
            requests: 500,
            ..Default::default()
        };
        let a = Workload::generate(fs.clone(), &src, &cfg);
        let b = Workload::generate(fs.clone(), &src, &cfg);
        assert_eq!(a, b);
        let c = Workload::generate(fs, &src, &WorkloadConfig { seed: 2, ..cfg });
        assert_ne!(a.requests, c.requests);
        assert!(a
            .requests
            .iter()
            .all(|r| (200.0..=400.0).contains(&r.slo_ms)));
        assert!(a
            .requests
            .windows(2)
            .all(|w| w[0].arrival_ms <= w[1].arrival_ms));
    }

    #[test]
    fn zipf_favours_the_top_rank() {
        let z = Zipf::new(50, 1.0, 3);
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        let mut counts = [0usize; 50];
        (0..20_000).for_each(|_| counts[z.sample(&mut rng)] += 1);
        let top = counts[z.item_of_rank[0]];
        let last = counts[z.item_of_rank[49]];
        assert!(top > 10 * last.max(1), "{top} vs {last}");
    }
}
