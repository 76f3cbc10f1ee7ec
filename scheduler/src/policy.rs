//! The observation a placement decision sees, the action it returns, and the [`Policy`] trait
//! shared by the simulator and the live gateway.
//!
//! The action is the paper's multi-discrete pair (a1 = node, a2 = reuse a warm container or start
//! a new one). "Reuse" takes an idle warm container (it needs free cores) or, when all of the
//! function's containers there are busy, queues behind the one that frees first (its cores are
//! already held); it is masked where the node has no container of the function. "New" is masked
//! where the node lacks the cores, or the memory even after evicting idle containers.

use crate::model::{self, FunctionProfile, GeoPoint, LatencyBreakdown, LinkModel, NodeSpec};

/// One candidate node as the decision sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// Static node description (location, cores, clock, memory, bandwidth, access delay).
    pub node: NodeSpec,
    /// Cores not used by running requests.
    pub free_cores: f64,
    /// Memory in MB not held by any container.
    pub free_memory_mb: f64,
    /// Memory in MB held by idle containers (of any function) that may be evicted.
    pub evictable_memory_mb: f64,
    /// Cold-start time in ms, at this node, summed over the other functions whose idle warm
    /// containers here could no longer be reused while this request holds its cores (the
    /// cores left would be fewer than they need): what their next requests would pay instead,
    /// were no other warm container at hand. A live edge computes it from its pools and the
    /// other nodes' load reports.
    pub blocked_cold_ms: f64,
    /// Idle warm containers of the request's function on this node.
    pub idle: u32,
    /// Busy containers of the request's function on this node.
    pub busy: u32,
    /// Expected ms until the earliest busy container of the function here is free (its queue
    /// drains); only used when `idle == 0` and `busy > 0`.
    pub wait_ms: f64,
    /// What was measured of the request's function at this node, used instead of the model's
    /// cold-start, compute and communication terms (a live node fills it in from its profiles;
    /// the simulator leaves it `None` and its model is the truth).
    pub measured: Option<Measured>,
}

/// Measured latency terms of one function at one node, in ms.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Measured {
    /// Extra time of a call that starts a new instance there.
    pub cold_ms: f64,
    /// Time a warm call takes there, from its arrival to its answer (execution plus the node's
    /// own handling).
    pub exec_ms: f64,
    /// Time to reach the node and come back from the deciding node (0 for the node itself).
    pub link_ms: f64,
    /// Extra time from the calls already at the node: with more calls than cores they share
    /// them (processor sharing), so a call there takes `exec_ms` times calls over cores. It
    /// applies to every action there; a call queued behind a busy instance waits at least
    /// [`Candidate::wait_ms`].
    pub queue_ms: f64,
    /// Calls at the node per core on average over its last seconds, where `queue_ms` is the
    /// instant's: a node busy most of the time is so even when a call finds it idle, and a
    /// call placed there shares its cores with the calls that arrive while it runs. 0 where
    /// not measured (the simulator's candidates).
    pub calls_per_core: f64,
    /// Later calls of the function expected to reuse an instance started there now: its calls
    /// that arrived at the node over the time an idle instance is kept (at most its last
    /// seconds), which would keep such an instance warm. 0 where not counted (other nodes,
    /// the simulator's candidates).
    pub reuses: f64,
}

impl Candidate {
    /// The latency terms of the request on this candidate without queueing: the measured ones
    /// when there are any, else the model's (`dist_km` from the request's source).
    pub fn terms(
        &self,
        link: &LinkModel,
        r: &RequestInfo,
        dist_km: f64,
        new_container: bool,
    ) -> LatencyBreakdown {
        match &self.measured {
            Some(m) => LatencyBreakdown {
                cold_ms: if new_container { m.cold_ms } else { 0.0 },
                queue_ms: m.queue_ms.max(0.0),
                comp_ms: m.exec_ms,
                comm_ms: m.link_ms,
            },
            None => LatencyBreakdown {
                cold_ms: if new_container {
                    model::cold_start_ms(&r.profile, self.node.bandwidth_mbps)
                } else {
                    0.0
                },
                queue_ms: 0.0,
                comp_ms: model::compute_ms(&r.profile, self.node.ghz),
                comm_ms: model::comm_ms(link, r.input_kb, dist_km, self.node.access_ms),
            },
        }
    }
}

/// The request being placed.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestInfo {
    /// Index of the function in the caller's catalogue (used only to group a decision window).
    pub function_id: usize,
    /// The function's profile.
    pub profile: FunctionProfile,
    /// Where the request comes from.
    pub source: GeoPoint,
    /// Payload size in KB.
    pub input_kb: f64,
    /// Latency objective in ms.
    pub slo_ms: f64,
}

/// Everything a policy may look at for one decision.
#[derive(Debug, Clone, PartialEq)]
pub struct Observation {
    /// The request.
    pub request: RequestInfo,
    /// Candidate nodes; [`Action::candidate`] indexes this list.
    pub candidates: Vec<Candidate>,
}

/// A placement: which candidate, and whether to start a new container there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Action {
    /// Index into [`Observation::candidates`].
    pub candidate: usize,
    /// Start a new container (cold start) instead of reusing an idle one.
    pub new_container: bool,
}

impl Observation {
    /// Whether `action` reuses by queueing behind a busy container (no idle one there).
    pub fn queues(&self, action: Action) -> bool {
        let c = &self.candidates[action.candidate];
        !action.new_container && c.idle == 0
    }

    /// Whether `action` respects the capacity and reuse constraints.
    pub fn is_feasible(&self, action: Action) -> bool {
        let Some(c) = self.candidates.get(action.candidate) else {
            return false;
        };
        let p = &self.request.profile;
        let cores = c.free_cores + 1e-9 >= p.cores;
        if action.new_container {
            cores && c.free_memory_mb + c.evictable_memory_mb + 1e-9 >= p.memory_mb
        } else {
            (c.idle > 0 && cores) || (c.idle == 0 && c.busy > 0)
        }
    }

    /// All feasible actions, candidate by candidate, reuse before new.
    pub fn feasible_actions(&self) -> impl Iterator<Item = Action> + '_ {
        (0..self.candidates.len())
            .flat_map(|i| {
                [false, true].map(|new_container| Action {
                    candidate: i,
                    new_container,
                })
            })
            .filter(|a| self.is_feasible(*a))
    }

    /// Latency the model predicts for `action` (feasible or not).
    pub fn estimate(&self, link: &LinkModel, action: Action) -> LatencyBreakdown {
        let r = &self.request;
        let c = &self.candidates[action.candidate];
        let mut b = match c.measured {
            Some(_) => c.terms(link, r, 0.0, action.new_container),
            None => model::latency(
                link,
                &r.profile,
                r.input_kb,
                &r.source,
                &c.node,
                action.new_container,
            ),
        };
        if self.queues(action) {
            b.queue_ms = b.queue_ms.max(c.wait_ms);
        }
        b
    }
}

/// A placement policy. Object safe: hold it as `Arc<dyn Policy>`.
pub trait Policy: Send + Sync {
    /// Short name for tables and CSVs.
    fn name(&self) -> &str;

    /// Chooses a feasible action, or `None` when no candidate can take the request.
    fn decide(&self, obs: &Observation) -> Option<Action>;

    /// Look-ahead window in ms for policies that plan jointly (the MILP); `None` (the default)
    /// decides request by request. With a window, the simulator calls [`Policy::decide_window`]
    /// at every arrival with that request first and the requests arriving within the window
    /// after it, and executes only the first action (rolling horizon).
    fn window_ms(&self) -> Option<f64> {
        None
    }

    /// Decides a window of requests jointly. All observations come from the same state snapshot
    /// and list the same nodes in the same order. The default decides them one by one.
    fn decide_window(&self, obs: &[Observation]) -> Vec<Option<Action>> {
        obs.iter().map(|o| self.decide(o)).collect()
    }
}

#[cfg(test)]
pub(crate) mod tests;
