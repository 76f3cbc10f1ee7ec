//! Zipf popularity over a catalogue of functions: rank k (1 = most popular) of n is drawn with
//! probability `k^-s / H(n, s)`, seeded, so a mixed workload is the same on every run.
//!
//! Sampling is `rand_distr::Zipf` (rejection-inversion, constant time per draw); the exact
//! probabilities are computed here for the summary and the tests.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::Distribution;

/// A seeded sampler of ranks `0..n` (0 the most popular) with Zipf exponent `s`.
#[derive(Debug, Clone)]
pub struct Zipf {
    n: usize,
    s: f64,
    dist: rand_distr::Zipf<f64>,
}

/// A bad Zipf parameter, naming the flag and the value.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("--{flag} {value}: {reason}")]
pub struct ZipfError {
    /// The flag (`functions`, `zipf`).
    pub flag: &'static str,
    /// The value given.
    pub value: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl Zipf {
    /// Ranks `0..n` with exponent `s` (0 is uniform; the larger, the more skewed).
    pub fn new(n: usize, s: f64) -> Result<Self, ZipfError> {
        if n == 0 {
            return Err(ZipfError {
                flag: "functions",
                value: n.to_string(),
                reason: "must be at least 1",
            });
        }
        if !s.is_finite() || s < 0.0 {
            return Err(ZipfError {
                flag: "zipf",
                value: s.to_string(),
                reason: "the exponent must be a finite number >= 0",
            });
        }
        let dist = rand_distr::Zipf::new(n as u64, s).map_err(|_| ZipfError {
            flag: "zipf",
            value: s.to_string(),
            reason: "not a usable Zipf exponent",
        })?;
        Ok(Self { n, s, dist })
    }

    /// How many ranks there are.
    pub fn len(&self) -> usize {
        self.n
    }

    /// Never: a sampler has at least one rank.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The exponent.
    pub fn exponent(&self) -> f64 {
        self.s
    }

    /// The probability of rank `rank` (0-based).
    pub fn probability(&self, rank: usize) -> f64 {
        if rank >= self.n {
            return 0.0;
        }
        let h: f64 = (1..=self.n).map(|k| (k as f64).powf(-self.s)).sum();
        ((rank + 1) as f64).powf(-self.s) / h
    }

    /// One rank (0-based).
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> usize {
        let k = self.dist.sample(rng) as usize;
        k.clamp(1, self.n) - 1
    }

    /// `count` ranks from a generator seeded with `seed`.
    pub fn draws(&self, seed: u64, count: usize) -> Vec<usize> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (0..count).map(|_| self.sample(&mut rng)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frequencies(z: &Zipf, seed: u64, count: usize) -> Vec<f64> {
        let mut f = vec![0.0; z.len()];
        for r in z.draws(seed, count) {
            f[r] += 1.0 / count as f64;
        }
        f
    }

    #[test]
    fn probabilities_follow_the_power_law_and_sum_to_one() {
        let z = Zipf::new(24, 1.0).unwrap();
        let total: f64 = (0..24).map(|r| z.probability(r)).sum();
        assert!((total - 1.0).abs() < 1e-12, "{total}");
        // Rank 1 is twice as likely as rank 2 and ten times rank 10 at s = 1.
        assert!((z.probability(0) / z.probability(1) - 2.0).abs() < 1e-12);
        assert!((z.probability(0) / z.probability(9) - 10.0).abs() < 1e-12);
        assert_eq!(z.probability(24), 0.0);
        let uniform = Zipf::new(5, 0.0).unwrap();
        assert!((0..5).all(|r| (uniform.probability(r) - 0.2).abs() < 1e-12));
    }

    #[test]
    fn draws_match_the_probabilities() {
        for s in [0.0, 0.8, 1.2] {
            let z = Zipf::new(24, s).unwrap();
            let n = 200_000;
            for (rank, f) in frequencies(&z, 7, n).iter().enumerate() {
                let p = z.probability(rank);
                // Five standard deviations of a binomial share.
                let sd = (p * (1.0 - p) / n as f64).sqrt();
                assert!(
                    (f - p).abs() < 5.0 * sd + 1e-9,
                    "s {s} rank {rank}: {f} vs {p}"
                );
            }
        }
    }

    #[test]
    fn a_larger_exponent_concentrates_the_calls_on_the_head() {
        let head = |s| {
            frequencies(&Zipf::new(24, s).unwrap(), 3, 50_000)[..3]
                .iter()
                .sum::<f64>()
        };
        assert!(head(0.0) < head(0.8));
        assert!(head(0.8) < head(1.5));
    }

    #[test]
    fn the_seed_fixes_the_sequence() {
        let z = Zipf::new(20, 1.0).unwrap();
        assert_eq!(z.draws(42, 1000), z.draws(42, 1000));
        assert_ne!(z.draws(42, 1000), z.draws(43, 1000));
        assert!(z.draws(1, 10_000).iter().all(|&r| r < 20));
        assert_eq!(Zipf::new(1, 2.0).unwrap().draws(5, 100), vec![0; 100]);
    }

    #[test]
    fn bad_parameters_name_the_flag_and_value() {
        let e = Zipf::new(0, 1.0).unwrap_err();
        assert_eq!(e.to_string(), "--functions 0: must be at least 1");
        let e = Zipf::new(10, -0.5).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--zipf -0.5: the exponent must be a finite number >= 0"
        );
        assert_eq!(Zipf::new(10, f64::NAN).unwrap_err().flag, "zipf");
    }
}
