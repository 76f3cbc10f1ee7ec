//! Baseline policies: random, nearest site (what GeoFaaS does) and greedy minimum estimated
//! latency.

use parking_lot::Mutex;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::model::LinkModel;
use crate::policy::{Action, Observation, Policy};

/// Reuse if the candidate has an idle container, else start one (if that is feasible).
fn best_on(obs: &Observation, candidate: usize) -> Option<Action> {
    [false, true]
        .map(|new_container| Action {
            candidate,
            new_container,
        })
        .into_iter()
        .find(|a| obs.is_feasible(*a))
}

/// A uniformly random feasible node; reuses a warm container there when one is idle.
#[derive(Debug)]
pub struct RandomPolicy {
    rng: Mutex<ChaCha8Rng>,
}

impl RandomPolicy {
    /// A seeded random policy.
    pub fn new(seed: u64) -> Self {
        Self {
            rng: Mutex::new(ChaCha8Rng::seed_from_u64(seed)),
        }
    }
}

impl Policy for RandomPolicy {
    fn name(&self) -> &str {
        "random"
    }

    fn decide(&self, obs: &Observation) -> Option<Action> {
        let options: Vec<Action> = (0..obs.candidates.len())
            .filter_map(|i| best_on(obs, i))
            .collect();
        if options.is_empty() {
            return None;
        }
        let mut rng = self.rng.lock();
        Some(options[rng.gen_range(0..options.len())])
    }
}

/// The nearest feasible node to the request's source (GeoFaaS routes to the closest node);
/// reuses a warm container there when one is idle.
#[derive(Debug, Default, Clone, Copy)]
pub struct NearestPolicy;

impl Policy for NearestPolicy {
    fn name(&self) -> &str {
        "nearest"
    }

    fn decide(&self, obs: &Observation) -> Option<Action> {
        let src = obs.request.source;
        let mut best: Option<(f64, Action)> = None;
        for i in 0..obs.candidates.len() {
            let c = &obs.candidates[i];
            // A remote cloud region is "far" by its access delay too.
            let d = src.distance_km(&c.node.location) + c.node.access_ms * 200.0;
            if best.is_some_and(|(bd, _)| bd <= d) {
                continue;
            }
            if let Some(a) = best_on(obs, i) {
                best = Some((d, a));
            }
        }
        best.map(|(_, a)| a)
    }
}

/// The feasible action with the lowest estimated latency (cold + compute + communication).
#[derive(Debug, Default, Clone, Copy)]
pub struct GreedyPolicy {
    /// Link model used for the estimates.
    pub link: LinkModel,
}

impl GreedyPolicy {
    /// A greedy policy over `link`.
    pub fn new(link: LinkModel) -> Self {
        Self { link }
    }
}

impl Policy for GreedyPolicy {
    fn name(&self) -> &str {
        "greedy"
    }

    fn decide(&self, obs: &Observation) -> Option<Action> {
        greedy_decide(&self.link, obs)
    }
}

/// Greedy choice, shared with the simulator's fallback.
pub fn greedy_decide(link: &LinkModel, obs: &Observation) -> Option<Action> {
    let mut best: Option<(f64, Action)> = None;
    for a in obs.feasible_actions() {
        let l = obs.estimate(link, a).total();
        if best.is_none_or(|(bl, _)| l < bl) {
            best = Some((l, a));
        }
    }
    best.map(|(_, a)| a)
}
