//! Credit for blocked warm containers (`PpoConfig::blame`).
//!
//! A request whose function has an idle warm container on a node that has no free cores for it
//! cannot reuse it: it starts a new container (seconds of cold start) or queues elsewhere. The
//! decisions that hold that node's cores caused it, often hundreds of decisions earlier, far
//! beyond what a discount of 0.9 carries back. This charges the excess latency to them
//! directly, split evenly, so the actor learns what the `blocked_cold_ms` feature warns of.

use crate::model::LinkModel;
use crate::policy::{Action, Observation};

/// Decisions of the current episode that hold cores, per node.
pub(super) struct Blame {
    /// `(end ms, rollout index)` of each request holding cores, per node.
    holders: Vec<Vec<(f64, usize)>>,
}

impl Blame {
    /// No holders on `nodes` nodes.
    pub(super) fn new(nodes: usize) -> Self {
        Self {
            holders: vec![Vec::new(); nodes],
        }
    }

    /// Records that rollout step `index`, placed at `now_ms`, holds cores on `node` until
    /// `end_ms` (and forgets the node's holders that have finished).
    pub(super) fn hold(&mut self, node: usize, now_ms: f64, end_ms: f64, index: usize) {
        let h = &mut self.holders[node];
        h.retain(|x| x.0 > now_ms);
        h.push((end_ms, index));
    }

    /// Where `obs`'s request (placed at `now_ms`, served in `latency_ms`) had an idle warm
    /// container on a node without free cores for it, adds `-weight * min(excess, cap_ms) /
    /// scale_ms` to the rewards of the steps holding that node's cores, split evenly; the
    /// excess is the latency beyond what the blocked container would have given.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn charge(
        &mut self,
        link: &LinkModel,
        obs: &Observation,
        now_ms: f64,
        latency_ms: f64,
        reward: &mut [f32],
        weight: f64,
        scale_ms: f64,
        cap_ms: f64,
    ) {
        let cores = obs.request.profile.cores;
        let blocked = obs
            .candidates
            .iter()
            .enumerate()
            .filter(|(_, c)| c.idle > 0 && c.free_cores + 1e-9 < cores)
            .map(|(i, _)| {
                let a = Action {
                    candidate: i,
                    new_container: false,
                };
                (obs.estimate(link, a).total(), i)
            })
            .min_by(|x, y| x.0.total_cmp(&y.0));
        let Some((alt, node)) = blocked else {
            return;
        };
        let excess = (latency_ms - alt).min(cap_ms);
        let holders = &mut self.holders[node];
        holders.retain(|h| h.0 > now_ms);
        if excess <= 0.0 || holders.is_empty() {
            return;
        }
        let share = (weight * excess / scale_ms / holders.len() as f64) as f32;
        for &(_, i) in holders.iter() {
            reward[i] -= share;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::tests::{cand, obs};

    #[test]
    fn a_blocked_warm_container_charges_the_steps_still_holding_its_cores() {
        // Node 0 has an idle container of the function but no free cores; node 1 is far.
        let o = obs(vec![cand(0.0, 0.0, 0.0, 1), cand(1.0, 4.0, 10_000.0, 0)]);
        let link = LinkModel::default();
        let alt = o
            .estimate(
                &link,
                Action {
                    candidate: 0,
                    new_container: false,
                },
            )
            .total();
        let mut blame = Blame::new(2);
        blame.hold(0, 0.0, 5.0, 0); // finished before the request
        blame.hold(0, 1.0, 100.0, 1);
        blame.hold(0, 2.0, 100.0, 2);
        blame.hold(1, 2.0, 100.0, 3); // another node
        let mut reward = vec![0.0f32; 4];
        blame.charge(&link, &o, 10.0, alt + 300.0, &mut reward, 1.0, 100.0, 200.0);
        // The excess (300 ms) is capped at 200 ms and split between steps 1 and 2.
        assert_eq!(reward, vec![0.0, -1.0, -1.0, 0.0]);
        // Served no slower than the blocked container would have been: no charge.
        blame.charge(&link, &o, 10.0, alt, &mut reward, 1.0, 100.0, 200.0);
        assert_eq!(reward, vec![0.0, -1.0, -1.0, 0.0]);
    }
}
