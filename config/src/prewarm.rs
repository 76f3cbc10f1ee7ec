//! `[prewarm]`: warming a function at the node a moving client is about to reach.
//!
//! A node tracks the clients that identify themselves (`X-Client-Id`, or their API key) and
//! extrapolates their path; when it crosses into another node's area within `prewarm_s`, the
//! node asks that node to start one instance of the function (docs: docs/lab/readme-details.md, "Calling functions").

use serde::{Deserialize, Serialize};

/// How far ahead a node looks along a client's path, and how much it keeps about clients.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrewarmSettings {
    /// Seconds ahead along a client's extrapolated path in which a crossing into another node's
    /// area makes this node ask that node to warm the function. `0` turns pre-warming (and the
    /// tracking of clients) off. Default 10, at most 600.
    #[serde(default = "default_prewarm_s")]
    pub prewarm_s: f64,
    /// Locations kept per client (the newest ones), at least 2, at most 32. Default 4.
    #[serde(default = "default_track_points")]
    pub track_points: usize,
    /// Most clients tracked at once; beyond that the least recently seen are dropped first.
    /// Default 10 000.
    #[serde(default = "default_max_clients")]
    pub max_clients: u64,
    /// Seconds after its last call at which a client is forgotten, and the span its kept
    /// locations may cover. Default 60.
    #[serde(default = "default_forget_s")]
    pub forget_s: u64,
    /// Seconds before a node asks the same node to warm the same function for the same client
    /// again. Default 60.
    #[serde(default = "default_again_s")]
    pub again_s: u64,
    /// Speed in metres per second below which a client counts as standing still (no
    /// prediction, no pre-warm). Default 0.5.
    #[serde(default = "default_min_speed_mps")]
    pub min_speed_mps: f64,
}

fn default_prewarm_s() -> f64 {
    10.0
}

fn default_track_points() -> usize {
    4
}

fn default_max_clients() -> u64 {
    10_000
}

fn default_forget_s() -> u64 {
    60
}

fn default_again_s() -> u64 {
    60
}

fn default_min_speed_mps() -> f64 {
    0.5
}

impl Default for PrewarmSettings {
    fn default() -> Self {
        Self {
            prewarm_s: default_prewarm_s(),
            track_points: default_track_points(),
            max_clients: default_max_clients(),
            forget_s: default_forget_s(),
            again_s: default_again_s(),
            min_speed_mps: default_min_speed_mps(),
        }
    }
}

impl PrewarmSettings {
    /// Whether nodes pre-warm at all (`prewarm_s > 0`).
    pub fn enabled(&self) -> bool {
        self.prewarm_s > 0.0
    }

    /// What is wrong with these settings: (field, value, reason).
    pub(crate) fn check(&self) -> Result<(), crate::security::Problem> {
        if !(0.0..=600.0).contains(&self.prewarm_s) {
            let v = self.prewarm_s.to_string();
            return Err(problem("prewarm_s", &v, "seconds from 0 (off) to 600"));
        }
        if !(2..=32).contains(&self.track_points) {
            let v = self.track_points.to_string();
            return Err(problem("track_points", &v, "from 2 to 32 locations"));
        }
        if self.max_clients == 0 {
            return Err(problem("max_clients", "0", "must be at least 1"));
        }
        if self.forget_s == 0 {
            return Err(problem("forget_s", "0", "must be at least 1 second"));
        }
        if !(self.min_speed_mps.is_finite() && self.min_speed_mps >= 0.0) {
            let v = self.min_speed_mps.to_string();
            return Err(problem("min_speed_mps", &v, "metres per second, 0 or more"));
        }
        Ok(())
    }
}

fn problem(field: &str, value: &str, reason: &str) -> crate::security::Problem {
    (
        format!("prewarm.{field}"),
        value.to_owned(),
        reason.to_owned(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_pass_and_bad_values_name_their_field() {
        assert!(PrewarmSettings::default().check().is_ok());
        let bad = |f: fn(&mut PrewarmSettings)| {
            let mut s = PrewarmSettings::default();
            f(&mut s);
            s.check().unwrap_err().0
        };
        assert_eq!(bad(|s| s.prewarm_s = -1.0), "prewarm.prewarm_s");
        assert_eq!(bad(|s| s.prewarm_s = f64::NAN), "prewarm.prewarm_s");
        assert_eq!(bad(|s| s.track_points = 1), "prewarm.track_points");
        assert_eq!(bad(|s| s.max_clients = 0), "prewarm.max_clients");
        assert_eq!(bad(|s| s.forget_s = 0), "prewarm.forget_s");
        assert_eq!(
            bad(|s| s.min_speed_mps = f64::INFINITY),
            "prewarm.min_speed_mps"
        );
    }
}
