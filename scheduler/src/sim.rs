//! A deterministic, event-driven simulator: request arrivals, container lifecycle (start, busy,
//! idle, keep-alive expiry, LRU eviction of idle containers under memory pressure) and node
//! capacities (cores held while a request runs, memory held by every container).
//!
//! Determinism: the only inputs are the topology, the workload and the policy; events at equal
//! times are ordered by a sequence number, and nothing reads the wall clock except the
//! decision-time measurement, which never feeds back into the simulation.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Instant;

use crate::baselines::greedy_decide;
use crate::model::{self, LatencyBreakdown, LinkModel, NodeSpec};
use crate::policy::{Action, Candidate, Observation, Policy, RequestInfo};
use crate::topology::Topology;
use crate::workload::{Request, Workload};

/// Simulation parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SimConfig {
    /// Link model for communication latency.
    pub link: LinkModel,
    /// How long an idle container is kept warm, ms.
    pub keep_alive_ms: f64,
    /// Leading requests of each workload placed by the greedy policy (whatever policy runs) and
    /// left out of the outcomes: every policy starts from the same warm, running system.
    pub warmup: usize,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            link: LinkModel::default(),
            keep_alive_ms: 600_000.0,
            warmup: 0,
        }
    }
}

/// What happened to one request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Outcome {
    /// Request index.
    pub request: usize,
    /// Node that served it (`None` when dropped).
    pub node: Option<usize>,
    /// Latency terms (zero when dropped).
    pub latency: LatencyBreakdown,
    /// The request's SLO in ms.
    pub slo_ms: f64,
    /// A new container was started.
    pub cold: bool,
    /// No node could take the request.
    pub dropped: bool,
    /// The policy's action was infeasible at execution time and greedy chose instead.
    pub fallback: bool,
    /// Decision time attributed to this request, ns.
    pub decision_ns: u64,
}

impl Outcome {
    /// Dropped, or served above its SLO.
    pub fn violates_slo(&self) -> bool {
        self.dropped || self.latency.total() > self.slo_ms
    }
}

#[derive(Debug, Clone, Default)]
struct Pool {
    /// Idle containers by the time they became idle (oldest first).
    idle: VecDeque<f64>,
    /// Busy containers by the time their queued work ends.
    busy: Vec<f64>,
}

#[derive(Debug, Clone)]
struct NodeState {
    free_cores: f64,
    used_mem: f64,
    idle_mem: f64,
    pools: Vec<Pool>,
}

#[derive(Debug, Clone, Copy)]
struct Event {
    t: f64,
    seq: u64,
    node: usize,
    func: usize,
    completion: bool,
}

impl PartialEq for Event {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Event {}
impl PartialOrd for Event {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Event {
    // Reversed: BinaryHeap is a max-heap and we want the earliest event first.
    fn cmp(&self, o: &Self) -> Ordering {
        o.t.total_cmp(&self.t).then(o.seq.cmp(&self.seq))
    }
}

/// The simulator state over one topology and one workload.
#[derive(Debug, Clone)]
pub struct Simulator<'a> {
    topo: &'a Topology,
    wl: &'a Workload,
    cfg: SimConfig,
    nodes: Vec<NodeState>,
    events: BinaryHeap<Event>,
    seq: u64,
    next: usize,
    now: f64,
    /// The most cores any function of the workload requests.
    max_cores: f64,
}

impl<'a> Simulator<'a> {
    /// Empty nodes (no warm containers), first request pending.
    pub fn new(topo: &'a Topology, wl: &'a Workload, cfg: SimConfig) -> Self {
        let nodes = topo
            .nodes
            .iter()
            .map(|n| NodeState {
                free_cores: n.cores,
                used_mem: 0.0,
                idle_mem: 0.0,
                pools: vec![Pool::default(); wl.functions.len()],
            })
            .collect();
        Self {
            topo,
            wl,
            cfg,
            nodes,
            events: BinaryHeap::new(),
            seq: 0,
            next: 0,
            now: 0.0,
            max_cores: wl.functions.iter().map(|f| f.cores).fold(0.0, f64::max),
        }
    }

    /// Runs `policy` over the whole workload and returns one outcome per request.
    pub fn run(
        topo: &Topology,
        wl: &Workload,
        cfg: SimConfig,
        policy: &dyn Policy,
    ) -> Vec<Outcome> {
        let mut sim = Simulator::new(topo, wl, cfg);
        sim.warm_up();
        let mut out = Vec::with_capacity(wl.requests.len());
        match policy.window_ms() {
            None => {
                while let Some(obs) = sim.next_observation() {
                    let t0 = Instant::now();
                    let action = policy.decide(&obs);
                    let ns = t0.elapsed().as_nanos() as u64;
                    out.push(sim.step(action, ns));
                }
            }
            Some(w) => {
                while let Some(first) = sim.next_observation() {
                    let start = wl.requests[sim.next].arrival_ms;
                    let mut obs = vec![first];
                    obs.extend(
                        wl.requests[sim.next + 1..]
                            .iter()
                            .take_while(|r| r.arrival_ms < start + w)
                            .map(|r| sim.observe(r)),
                    );
                    let t0 = Instant::now();
                    let action = policy.decide_window(&obs).into_iter().next().flatten();
                    let ns = t0.elapsed().as_nanos() as u64;
                    out.push(sim.step(action, ns));
                }
            }
        }
        out
    }

    /// Places the first `cfg.warmup` requests with the greedy policy (no-op once past them).
    pub fn warm_up(&mut self) {
        while self.next < self.cfg.warmup.min(self.wl.requests.len()) {
            let obs = self.next_observation().expect("request pending");
            let a = greedy_decide(&self.cfg.link, &obs);
            self.step(a, 0);
        }
    }

    /// Number of requests not yet placed.
    pub fn remaining(&self) -> usize {
        self.wl.requests.len() - self.next
    }

    /// Advances the clock to the next request's arrival and returns its observation.
    pub fn next_observation(&mut self) -> Option<Observation> {
        let r = self.wl.requests.get(self.next)?;
        self.advance_to(r.arrival_ms);
        Some(self.observe(r))
    }

    /// The observation of `r` in the current state.
    pub fn observe(&self, r: &Request) -> Observation {
        let candidates = self
            .topo
            .nodes
            .iter()
            .zip(&self.nodes)
            .map(|(spec, st)| {
                let pool = &st.pools[r.function];
                Candidate {
                    node: *spec,
                    free_cores: st.free_cores,
                    free_memory_mb: spec.memory_mb - st.used_mem,
                    evictable_memory_mb: st.idle_mem,
                    blocked_cold_ms: self.blocked_cold_ms(st, spec, r.function),
                    idle: pool.idle.len() as u32,
                    busy: pool.busy.len() as u32,
                    wait_ms: pool.busy.iter().copied().fold(f64::INFINITY, f64::min) - self.now,
                    measured: None,
                }
            })
            .collect();
        Observation {
            request: RequestInfo {
                function_id: r.function,
                profile: self.wl.functions[r.function].clone(),
                source: r.source,
                input_kb: r.input_kb,
                slo_ms: r.slo_ms,
            },
            candidates,
        }
    }

    /// Processes completions and keep-alive expiries up to time `t`.
    pub fn advance_to(&mut self, t: f64) {
        while self.events.peek().is_some_and(|e| e.t <= t) {
            let e = self.events.pop().expect("peeked");
            self.now = self.now.max(e.t);
            let mem = self.wl.functions[e.func].memory_mb;
            let cores = self.wl.functions[e.func].cores;
            let ka = self.cfg.keep_alive_ms;
            let st = &mut self.nodes[e.node];
            if e.completion {
                let pool = &mut st.pools[e.func];
                // A container whose queue grew ends later: this event is stale.
                let Some(k) = pool.busy.iter().position(|&b| b == e.t) else {
                    continue;
                };
                pool.busy.swap_remove(k);
                pool.idle.push_back(e.t);
                st.idle_mem += mem;
                st.free_cores += cores;
                self.push(e.t + ka, e.node, e.func, false);
            } else {
                let pool = &mut st.pools[e.func];
                while pool.idle.front().is_some_and(|&s| s + ka <= e.t + 1e-9) {
                    pool.idle.pop_front();
                    st.used_mem -= mem;
                    st.idle_mem -= mem;
                }
            }
        }
        self.now = self.now.max(t);
    }

    /// Places the pending request with `action` (greedy fallback if it is infeasible now).
    pub fn step(&mut self, action: Option<Action>, decision_ns: u64) -> Outcome {
        let r = &self.wl.requests[self.next];
        self.next += 1;
        let obs = self.observe(r);
        let mut fallback = false;
        let chosen = match action {
            Some(a) if obs.is_feasible(a) => Some(a),
            _ => {
                fallback = action.is_some();
                greedy_decide(&self.cfg.link, &obs)
            }
        };
        let Some(a) = chosen else {
            return Outcome {
                request: r.id,
                node: None,
                latency: LatencyBreakdown::default(),
                slo_ms: r.slo_ms,
                cold: false,
                dropped: true,
                fallback,
                decision_ns,
            };
        };
        let f = &self.wl.functions[r.function];
        let spec = &self.topo.nodes[a.candidate];
        let latency = obs.estimate(&self.cfg.link, a);
        let queued = obs.queues(a);
        let done = self.now + latency.total();
        let st = &mut self.nodes[a.candidate];
        if queued {
            // Extend the busy container that frees first; its cores stay held.
            let pool = &mut st.pools[r.function];
            let k = (0..pool.busy.len())
                .min_by(|&x, &y| pool.busy[x].total_cmp(&pool.busy[y]))
                .expect("a feasible queue has a busy container");
            pool.busy[k] = done;
        } else {
            if a.new_container {
                while spec.memory_mb - st.used_mem + 1e-9 < f.memory_mb {
                    evict_lru(st, &self.wl.functions);
                }
                st.used_mem += f.memory_mb;
            } else {
                st.pools[r.function].idle.pop_back();
                st.idle_mem -= f.memory_mb;
            }
            st.pools[r.function].busy.push(done);
            st.free_cores -= f.cores;
        }
        debug_assert!(st.free_cores >= -1e-9 && st.used_mem <= spec.memory_mb + 1e-9);
        let (node, func) = (a.candidate, r.function);
        self.push(done, node, func, true);
        Outcome {
            request: r.id,
            node: Some(a.candidate),
            latency,
            slo_ms: r.slo_ms,
            cold: a.new_container,
            dropped: false,
            fallback,
            decision_ns,
        }
    }

    /// True when every node is within its cores and memory (the capacity invariant).
    pub fn within_capacity(&self) -> bool {
        self.topo.nodes.iter().zip(&self.nodes).all(|(spec, st)| {
            st.free_cores >= -1e-9
                && st.free_cores <= spec.cores + 1e-9
                && st.used_mem <= spec.memory_mb + 1e-9
                && st.idle_mem <= st.used_mem + 1e-9
        })
    }

    /// See [`Candidate::blocked_cold_ms`]: the idle containers of other functions on a node
    /// that `func`'s cores would leave without the cores they need.
    fn blocked_cold_ms(&self, st: &NodeState, spec: &NodeSpec, func: usize) -> f64 {
        let fs = &self.wl.functions;
        let left = st.free_cores - fs[func].cores;
        // Nothing is blocked when the request cannot run here, or when what it leaves is as
        // much as any function of the workload needs (`max_cores`).
        if left < -1e-9 || left + 1e-9 >= self.max_cores {
            return 0.0;
        }
        st.pools
            .iter()
            .enumerate()
            .filter(|(g, p)| *g != func && !p.idle.is_empty() && fs[*g].cores > left + 1e-9)
            .map(|(g, _)| model::cold_start_ms(&fs[g], spec.bandwidth_mbps))
            .sum()
    }

    fn push(&mut self, t: f64, node: usize, func: usize, completion: bool) {
        self.seq += 1;
        self.events.push(Event {
            t,
            seq: self.seq,
            node,
            func,
            completion,
        });
    }
}

/// Evicts the least recently used idle container of `st`.
fn evict_lru(st: &mut NodeState, functions: &[model::FunctionProfile]) {
    let victim = st
        .pools
        .iter()
        .enumerate()
        .filter_map(|(i, p)| p.idle.front().map(|s| (*s, i)))
        .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)))
        .map(|(_, i)| i)
        .expect("feasibility guarantees evictable memory");
    st.pools[victim].idle.pop_front();
    st.used_mem -= functions[victim].memory_mb;
    st.idle_mem -= functions[victim].memory_mb;
}

#[cfg(test)]
mod tests;
