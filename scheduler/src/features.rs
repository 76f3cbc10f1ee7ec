//! The fixed-size input of the PPO actor and critic, built from an [`Observation`].
//!
//! The actor does not score all nodes: the feasible (node, reuse|new) options are shortlisted to
//! the [`SLOTS`] with the lowest estimated latency (infeasible options are masked by never being
//! listed; empty slots are masked). Each slot gets [`OPT_FEATURES`] numbers and one shared MLP
//! scores every slot, so the same weights serve 3 nodes or 125. The critic sees request-level
//! numbers plus the best option's features ([`GLOBAL_FEATURES`]). Layout version 2
//! ([`crate::ppo::FEATURES_VERSION`]): slot feature 13 is the cold start of the warm containers
//! an option's cores would block ([`crate::Candidate::blocked_cold_ms`]), where version 1 had
//! the slot's rank.

use crate::model::{self, LinkModel};
use crate::policy::{Action, Observation};
use crate::workload::REF_PULL_MBPS;

/// Options the actor chooses among.
pub const SLOTS: usize = 8;
/// Features per option slot.
pub const OPT_FEATURES: usize = 16;
/// Request-level features for the critic.
pub const GLOBAL_FEATURES: usize = 8 + OPT_FEATURES;

/// One featurized decision.
#[derive(Debug, Clone, PartialEq)]
pub struct Featurized {
    /// The action behind each slot (`None` = empty, masked).
    pub actions: [Option<Action>; SLOTS],
    /// The model's latency estimate of each slot's action in ms (ascending; 0 for empty slots).
    pub totals: [f64; SLOTS],
    /// Per-slot features, row-major `[SLOTS][OPT_FEATURES]`.
    pub options: [[f32; OPT_FEATURES]; SLOTS],
    /// Request-level features for the critic.
    pub global: [f32; GLOBAL_FEATURES],
}

impl Featurized {
    /// Number of usable slots.
    pub fn len(&self) -> usize {
        self.actions.iter().filter(|a| a.is_some()).count()
    }

    /// True when no option is feasible.
    pub fn is_empty(&self) -> bool {
        self.actions[0].is_none()
    }
}

/// Builds the features of `obs` (the shortlist is ordered by estimated latency).
pub fn featurize(link: &LinkModel, obs: &Observation) -> Featurized {
    type Est = (f64, Action, model::LatencyBreakdown);
    let r = &obs.request;
    let p = &r.profile;
    // One distance and one compute term per node; both options of a node share them (this
    // is the decision hot path: same numbers as `Observation::estimate`, half the trigonometry,
    // and the shortlist kept sorted in place instead of collected and sorted on the heap).
    let by = |x: &Est, y: &Est| {
        x.0.total_cmp(&y.0)
            .then(x.1.candidate.cmp(&y.1.candidate))
            .then(x.1.new_container.cmp(&y.1.new_container))
    };
    let none = Action {
        candidate: 0,
        new_container: false,
    };
    let mut list: [Est; SLOTS] = [(0.0, none, model::LatencyBreakdown::default()); SLOTS];
    let mut len = 0;
    let origin = r.source.origin();
    let mut push = |e: Est| {
        if len == SLOTS && by(&e, &list[SLOTS - 1]).is_ge() {
            return;
        }
        len = (len + 1).min(SLOTS);
        let mut i = len - 1;
        while i > 0 && by(&e, &list[i - 1]).is_lt() {
            list[i] = list[i - 1];
            i -= 1;
        }
        list[i] = e;
    };
    for (i, c) in obs.candidates.iter().enumerate() {
        let reuse = Action {
            candidate: i,
            new_container: false,
        };
        let new = Action {
            candidate: i,
            new_container: true,
        };
        let (ok_reuse, ok_new) = (obs.is_feasible(reuse), obs.is_feasible(new));
        if !ok_reuse && !ok_new {
            continue;
        }
        let base = match &c.measured {
            Some(_) => c.terms(link, r, 0.0, false),
            None => {
                let dist = origin.distance_km(&c.node.location);
                model::LatencyBreakdown {
                    cold_ms: 0.0,
                    queue_ms: 0.0,
                    comp_ms: model::compute_ms(p, c.node.ghz),
                    comm_ms: model::comm_ms(link, r.input_kb, dist, c.node.access_ms),
                }
            }
        };
        if ok_reuse {
            let b = model::LatencyBreakdown {
                queue_ms: if obs.queues(reuse) {
                    base.queue_ms.max(c.wait_ms)
                } else {
                    base.queue_ms
                },
                ..base
            };
            push((b.total(), reuse, b));
        }
        if ok_new {
            let b = model::LatencyBreakdown {
                cold_ms: match &c.measured {
                    Some(m) => m.cold_ms,
                    None => model::cold_start_ms(p, c.node.bandwidth_mbps),
                },
                ..base
            };
            push((b.total(), new, b));
        }
    }
    let est = &list[..len];
    let r = &obs.request;
    let slo = r.slo_ms.max(1.0);
    let best = est.first().map_or(0.0, |e| e.0);
    let mut out = Featurized {
        actions: [None; SLOTS],
        totals: [0.0; SLOTS],
        options: [[0.0; OPT_FEATURES]; SLOTS],
        global: [0.0; GLOBAL_FEATURES],
    };
    for (i, (total, a, b)) in est.iter().enumerate() {
        let c = &obs.candidates[a.candidate];
        let mem = c.node.memory_mb.max(1.0);
        let need = if a.new_container {
            r.profile.memory_mb
        } else {
            0.0
        };
        out.actions[i] = Some(*a);
        out.totals[i] = *total;
        out.options[i] = [
            (total / slo).min(20.0),
            (1.0 + total / 10.0).ln(),
            (b.cold_ms / 1000.0).min(20.0),
            (b.comm_ms / 10.0).min(10.0),
            (b.comp_ms / 100.0).min(10.0),
            f64::from(u8::from(a.new_container)),
            c.free_cores / c.node.cores.max(1e-9),
            c.free_memory_mb / mem,
            c.evictable_memory_mb / mem,
            (need - c.free_memory_mb).max(0.0) / mem * 10.0,
            ln_1p_count(c.idle),
            ln_1p_count(c.busy),
            f64::from(u8::from(*total > r.slo_ms)),
            // Warm containers of other functions this option's cores would block (queueing
            // holds no new cores); it replaced the slot's rank in features version 2.
            if c.blocked_cold_ms == 0.0 || obs.queues(*a) {
                0.0
            } else {
                (c.blocked_cold_ms / 1000.0).ln_1p()
            },
            ((total - best) / slo).min(10.0),
            (b.queue_ms / 100.0).min(20.0),
        ]
        .map(|v| v as f32);
    }
    let head = [
        r.slo_ms / 400.0,
        r.profile.cpu_ms.ln_1p() / 5.0,
        r.profile.cores,
        r.profile.memory_mb / 2048.0,
        model::cold_start_ms(&r.profile, REF_PULL_MBPS) / 1000.0,
        r.input_kb / 1000.0,
        est.len() as f64 / SLOTS as f64,
        (best / slo).min(20.0),
    ]
    .map(|v| v as f32);
    out.global[..8].copy_from_slice(&head);
    out.global[8..].copy_from_slice(&out.options[0]);
    out
}

/// `ln(1 + n)` of a container count, from a table for the small counts a decision usually sees
/// (the same values `f64::ln_1p` gives, computed once): the decision hot path's logarithms are
/// mostly of counts.
fn ln_1p_count(n: u32) -> f64 {
    static TABLE: std::sync::OnceLock<[f64; 64]> = std::sync::OnceLock::new();
    let table = TABLE.get_or_init(|| std::array::from_fn(|i| (i as f64).ln_1p()));
    table
        .get(n as usize)
        .copied()
        .unwrap_or_else(|| f64::from(n).ln_1p())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::tests::{cand, obs};

    #[test]
    fn shortlist_is_sorted_feasible_and_masked() {
        let o = obs(vec![
            cand(0.0, 4.0, 10_000.0, 0),
            cand(0.01, 4.0, 10_000.0, 1),
            cand(0.02, 0.0, 0.0, 5),
        ]);
        let f = featurize(&LinkModel::default(), &o);
        // Feasible: node 0 new, node 1 reuse, node 1 new. Node 2 has no free cores.
        assert_eq!(f.len(), 3);
        assert_eq!(
            f.actions[0],
            Some(Action {
                candidate: 1,
                new_container: false
            })
        );
        assert!(f.actions[3..].iter().all(Option::is_none));
        assert!(f.actions.iter().flatten().all(|a| o.is_feasible(*a)));
        assert!(f.options[0][0] <= f.options[1][0] && f.options[1][0] <= f.options[2][0]);
        assert_eq!(f.options[0][14], 0.0, "best option has zero gap");
    }

    #[test]
    fn only_options_that_take_cores_show_the_containers_they_block() {
        let mut reuse = cand(0.0, 4.0, 10_000.0, 1);
        reuse.blocked_cold_ms = 5000.0;
        // No idle container and no free cores: only queueing behind a busy one is feasible.
        let mut queue = cand(0.01, 0.0, 0.0, 0);
        queue.busy = 1;
        queue.wait_ms = 5.0;
        queue.blocked_cold_ms = 5000.0;
        let o = obs(vec![reuse, queue]);
        let f = featurize(&LinkModel::default(), &o);
        let row = |candidate| {
            let i = f
                .actions
                .iter()
                .position(|a| a.is_some_and(|a| a.candidate == candidate && !a.new_container));
            f.options[i.expect("listed")][13]
        };
        assert!((row(0) - 6.0f32.ln()).abs() < 1e-6);
        assert_eq!(row(1), 0.0);
    }

    #[test]
    fn counts_log_as_ln_1p_does() {
        for n in (0..200).chain([u32::MAX]) {
            assert_eq!(
                ln_1p_count(n).to_bits(),
                f64::from(n).ln_1p().to_bits(),
                "{n}"
            );
        }
    }

    #[test]
    fn many_nodes_fill_all_slots() {
        let cands = (0..40)
            .map(|i| cand(f64::from(i) * 0.001, 4.0, 10_000.0, 1))
            .collect();
        let f = featurize(&LinkModel::default(), &obs(cands));
        assert_eq!(f.len(), SLOTS);
        assert_eq!(f.actions[0].unwrap().candidate, 0);
    }
}
