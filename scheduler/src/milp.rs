//! The exact baseline: a MILP (the paper's Eqs. 4-8) over a decision window, solved with good_lp
//! (COIN-OR CBC with the `cbc` feature, pure-Rust microlp otherwise).
//!
//! Variables x[k,o] in {0,1} pick option o = (node, reuse|new) for request k of the window.
//! Objective: sum of estimated latencies, plus `slo_penalty_ms` for each option over its SLO
//! (the paper's hard constraint (8) made soft, since a forced cold start cannot meet it) and
//! a large cost for rejecting a request (so the model is always feasible). Constraints: one
//! option per request (5); per node, the cores (6) and, for new containers, the memory (7) of
//! the window's requests within what is free (memory: free plus evictable idle); per node and
//! function, reuses within the idle containers. Redundant capacity rows are left out.

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use good_lp::{
    constraint, variable, Expression, ProblemVariables, Solution, SolverModel, Variable,
};

use crate::error::{Result, SchedulerError};
use crate::model::LinkModel;
use crate::policy::{Action, Observation, Policy};

/// Cost of leaving a request unplaced, ms.
const REJECT_MS: f64 = 1.0e6;

/// Solve-time statistics of a [`MilpPolicy`].
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SolveStats {
    /// Windows solved.
    pub solves: u64,
    /// Total solve time.
    pub total: Duration,
    /// Longest solve.
    pub max: Duration,
}

/// MILP over a rolling look-ahead window.
#[derive(Debug)]
pub struct MilpPolicy {
    link: LinkModel,
    window_ms: f64,
    slo_penalty_ms: f64,
    stats: Mutex<SolveStats>,
    name: String,
}

impl MilpPolicy {
    /// A MILP policy over `link` planning the requests that arrive within `window_ms`.
    pub fn new(link: LinkModel, window_ms: f64) -> Self {
        Self {
            link,
            window_ms,
            slo_penalty_ms: 1000.0,
            stats: Mutex::new(SolveStats::default()),
            name: "milp".into(),
        }
    }

    /// The same policy under another name (tables comparing several windows).
    pub fn named(mut self, name: &str) -> Self {
        self.name = name.to_owned();
        self
    }

    /// Solve-time statistics so far.
    pub fn stats(&self) -> SolveStats {
        *self.stats.lock()
    }

    /// Name of the solver compiled in.
    pub fn solver_name() -> &'static str {
        if cfg!(feature = "cbc") {
            "coin_cbc"
        } else {
            "microlp"
        }
    }

    /// The options of one request worth a variable, with their costs. Exact pruning: the other
    /// `w - 1` requests of the window occupy at most `w - 1` nodes, so once options at `w`
    /// distinct nodes are cheaper, a costlier option is never optimal (the request could move to
    /// a node nobody else uses, where its option is feasible on its own).
    fn options(&self, o: &Observation, w: usize) -> Vec<Opt> {
        let cost = |l: f64| {
            l + if l > o.request.slo_ms {
                self.slo_penalty_ms
            } else {
                0.0
            }
        };
        let mut all: Vec<Opt> = Vec::new();
        for a in o.feasible_actions() {
            let b = o.estimate(&self.link, a);
            let kind = if a.new_container {
                Kind::New
            } else if o.queues(a) {
                Kind::Queue
            } else {
                Kind::Idle
            };
            all.push(Opt {
                action: a,
                kind,
                latency: b.total(),
                cost: cost(b.total()),
            });
            if kind == Kind::Idle {
                // Once the window's earlier requests took the idle containers, a later one can
                // still queue: behind a busy one, or behind the request that took the idle one.
                let c = &o.candidates[a.candidate];
                let wait = if c.busy > 0 {
                    c.wait_ms.max(0.0)
                } else {
                    b.comp_ms + b.comm_ms
                };
                let l = b.total() + wait;
                all.push(Opt {
                    action: a,
                    kind: Kind::Queue,
                    latency: l,
                    cost: cost(l),
                });
            }
        }
        all.sort_by(|x, y| {
            x.cost
                .total_cmp(&y.cost)
                .then(x.action.candidate.cmp(&y.action.candidate))
        });
        let mut nodes = std::collections::BTreeSet::new();
        let mut keep = 0;
        for opt in &all {
            keep += 1;
            nodes.insert(opt.action.candidate);
            if nodes.len() >= w {
                break;
            }
        }
        all.truncate(keep);
        all
    }

    /// Solves the window exactly; returns one action per observation (`None` = rejected) and
    /// the objective value (the window's summed estimated latency).
    pub fn solve(&self, window: &[Observation]) -> Result<(Vec<Option<Action>>, f64)> {
        let t0 = Instant::now();
        let mut vars = ProblemVariables::new();
        let mut opts: Vec<(usize, Opt, Variable)> = Vec::new();
        let mut rejects = Vec::new();
        for (k, o) in window.iter().enumerate() {
            for opt in self.options(o, window.len()) {
                opts.push((k, opt, vars.add(variable().binary())));
            }
            rejects.push(vars.add(variable().binary()));
        }
        let objective: Expression = opts.iter().map(|(_, o, v)| o.cost * *v).sum::<Expression>()
            + rejects.iter().map(|v| REJECT_MS * *v).sum::<Expression>();
        let mut model = solver(vars.minimise(objective));
        for (k, r) in rejects.iter().enumerate() {
            let one: Expression = opts
                .iter()
                .filter(|o| o.0 == k)
                .map(|o| o.2)
                .sum::<Expression>()
                + *r;
            model = model.with(constraint!(one == 1.0));
        }
        for c in capacity_rows(window, &opts) {
            model = model.with(c);
        }
        let sol = model
            .solve()
            .map_err(|e| SchedulerError::Solver(e.to_string()))?;
        let mut out = vec![None; window.len()];
        let mut total = 0.0;
        for (k, o, v) in &opts {
            if sol.value(*v) > 0.5 {
                out[*k] = Some(o.action);
                total += o.latency;
            }
        }
        let dt = t0.elapsed();
        let mut s = self.stats.lock();
        s.solves += 1;
        s.total += dt;
        s.max = s.max.max(dt);
        Ok((out, total))
    }
}

/// How an option uses the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Take an idle warm container (holds cores; limited by the idle count).
    Idle,
    /// Queue behind a busy container (no extra cores, no limit).
    Queue,
    /// Start a new container (holds cores and memory).
    New,
}

/// One candidate option of one request.
#[derive(Debug, Clone, Copy)]
struct Opt {
    action: Action,
    kind: Kind,
    latency: f64,
    cost: f64,
}

#[cfg(feature = "cbc")]
fn solver(p: good_lp::variable::UnsolvedProblem) -> good_lp::solvers::coin_cbc::CoinCbcProblem {
    let mut m = p.using(good_lp::solvers::coin_cbc::coin_cbc);
    m.set_parameter("log", "0");
    m
}

#[cfg(not(feature = "cbc"))]
fn solver(
    p: good_lp::variable::UnsolvedProblem,
) -> impl SolverModel<Error = good_lp::ResolutionError> {
    p.using(good_lp::solvers::microlp::microlp)
}

/// Cores and memory per node, idle containers per (node, function); only rows that can bind.
fn capacity_rows(
    window: &[Observation],
    opts: &[(usize, Opt, Variable)],
) -> Vec<good_lp::Constraint> {
    let mut rows = Vec::new();
    let cores = |o: &&(usize, Opt, Variable)| window[o.0].request.profile.cores;
    let mem = |o: &&(usize, Opt, Variable)| window[o.0].request.profile.memory_mb;
    for (v, cand) in window[0].candidates.iter().enumerate() {
        let at: Vec<_> = opts.iter().filter(|o| o.1.action.candidate == v).collect();
        let hold: Vec<_> = at
            .iter()
            .copied()
            .filter(|o| o.1.kind != Kind::Queue)
            .collect();
        if hold.iter().map(cores).sum::<f64>() > cand.free_cores + 1e-9 {
            let e: Expression = hold.iter().map(|o| cores(o) * o.2).sum();
            rows.push(constraint!(e <= cand.free_cores.max(0.0)));
        }
        let new: Vec<_> = at
            .iter()
            .copied()
            .filter(|o| o.1.kind == Kind::New)
            .collect();
        let room = cand.free_memory_mb + cand.evictable_memory_mb;
        if new.iter().map(mem).sum::<f64>() > room + 1e-9 {
            let e: Expression = new.iter().map(|o| mem(o) * o.2).sum();
            rows.push(constraint!(e <= room.max(0.0)));
        }
        let mut idle: BTreeMap<usize, Vec<Variable>> = BTreeMap::new();
        for o in at.iter().filter(|o| o.1.kind == Kind::Idle) {
            idle.entry(window[o.0].request.function_id)
                .or_default()
                .push(o.2);
        }
        for (f, vs) in idle {
            let cap = window
                .iter()
                .find(|w| w.request.function_id == f)
                .map_or(0, |w| w.candidates[v].idle);
            if vs.len() > cap as usize {
                let e: Expression = vs.iter().copied().sum();
                rows.push(constraint!(e <= f64::from(cap)));
            }
        }
    }
    rows
}

impl Policy for MilpPolicy {
    fn name(&self) -> &str {
        &self.name
    }

    fn decide(&self, obs: &Observation) -> Option<Action> {
        self.decide_window(std::slice::from_ref(obs))
            .into_iter()
            .next()
            .flatten()
    }

    fn window_ms(&self) -> Option<f64> {
        Some(self.window_ms)
    }

    fn decide_window(&self, obs: &[Observation]) -> Vec<Option<Action>> {
        match self.solve(obs) {
            Ok((actions, _)) => actions,
            // A solver failure must not stop a simulation: fall back to greedy, visibly.
            Err(_) => obs
                .iter()
                .map(|o| crate::baselines::greedy_decide(&self.link, o))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests;
