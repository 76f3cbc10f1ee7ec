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

use std::collections::HashMap;
use std::sync::Mutex;
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
}

impl MilpPolicy {
    /// A MILP policy over `link` planning the requests that arrive within `window_ms`.
    pub fn new(link: LinkModel, window_ms: f64) -> Self {
        Self {
            link,
            window_ms,
            slo_penalty_ms: 1000.0,
            stats: Mutex::new(SolveStats::default()),
        }
    }

    /// Solve-time statistics so far.
    pub fn stats(&self) -> SolveStats {
        *self.stats.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Name of the solver compiled in.
    pub fn solver_name() -> &'static str {
        if cfg!(feature = "cbc") {
            "coin_cbc"
        } else {
            "microlp"
        }
    }

    /// Solves the window exactly; returns one action per observation (`None` = rejected) and
    /// the objective value.
    pub fn solve(&self, window: &[Observation]) -> Result<(Vec<Option<Action>>, f64)> {
        let t0 = Instant::now();
        let mut vars = ProblemVariables::new();
        // (request, action, cost, variable)
        let mut opts: Vec<(usize, Action, f64, Variable)> = Vec::new();
        let mut rejects = Vec::new();
        for (k, o) in window.iter().enumerate() {
            for a in o.feasible_actions() {
                let l = o.estimate(&self.link, a).total();
                let cost = l + if l > o.request.slo_ms {
                    self.slo_penalty_ms
                } else {
                    0.0
                };
                opts.push((k, a, cost, vars.add(variable().binary())));
            }
            rejects.push(vars.add(variable().binary()));
        }
        let objective: Expression = opts.iter().map(|(_, _, c, v)| *c * *v).sum::<Expression>()
            + rejects.iter().map(|v| REJECT_MS * *v).sum::<Expression>();
        let mut model = solver(vars.minimise(objective));
        for (k, r) in rejects.iter().enumerate() {
            let one: Expression = opts
                .iter()
                .filter(|o| o.0 == k)
                .map(|o| o.3)
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
        for (k, a, _, v) in &opts {
            if sol.value(*v) > 0.5 {
                out[*k] = Some(*a);
                total += window[*k].estimate(&self.link, *a).total();
            }
        }
        let dt = t0.elapsed();
        let mut s = self.stats.lock().unwrap_or_else(|e| e.into_inner());
        s.solves += 1;
        s.total += dt;
        s.max = s.max.max(dt);
        Ok((out, total))
    }
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

/// Cores and memory per node, reuses per (node, function); only rows that can bind.
fn capacity_rows(
    window: &[Observation],
    opts: &[(usize, Action, f64, Variable)],
) -> Vec<good_lp::Constraint> {
    let cands = &window[0].candidates;
    let mut rows = Vec::new();
    for (v, cand) in cands.iter().enumerate() {
        let at: Vec<_> = opts.iter().filter(|o| o.1.candidate == v).collect();
        let cores: f64 = at.iter().map(|o| window[o.0].request.profile.cores).sum();
        if cores > cand.free_cores + 1e-9 {
            let e: Expression = at
                .iter()
                .map(|o| window[o.0].request.profile.cores * o.3)
                .sum();
            rows.push(constraint!(e <= cand.free_cores));
        }
        let new: Vec<_> = at.iter().filter(|o| o.1.new_container).collect();
        let mem: f64 = new
            .iter()
            .map(|o| window[o.0].request.profile.memory_mb)
            .sum();
        let room = cand.free_memory_mb + cand.evictable_memory_mb;
        if mem > room + 1e-9 {
            let e: Expression = new
                .iter()
                .map(|o| window[o.0].request.profile.memory_mb * o.3)
                .sum();
            rows.push(constraint!(e <= room));
        }
        let mut reuse: HashMap<usize, Vec<Variable>> = HashMap::new();
        for o in at.iter().filter(|o| !o.1.new_container) {
            reuse
                .entry(window[o.0].request.function_id)
                .or_default()
                .push(o.3);
        }
        for (f, vs) in reuse {
            // Idle containers of f on v, as seen by any request of f in the window.
            let idle = window
                .iter()
                .find(|w| w.request.function_id == f)
                .map_or(0, |w| w.candidates[v].idle);
            if vs.len() > idle as usize {
                let e: Expression = vs.iter().copied().sum();
                rows.push(constraint!(e <= idle as f64));
            }
        }
    }
    rows
}

impl Policy for MilpPolicy {
    fn name(&self) -> &str {
        "milp"
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
