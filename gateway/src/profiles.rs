//! Live profiles: what this node measured of each function's calls here and of its links to
//! the other nodes. They are the scheduler's model of the system it runs in
//! ([`crate::schedule`]); a function's configured `[[function]]` profile is only the prior
//! until [`PRIOR_CALLS`] calls of it were measured, and a function without one is placed from
//! its first call on.
//!
//! What is measured, all in milliseconds:
//! * per function, a warm call's time here from its arrival to its answer, less its admission
//!   wait and its cold start (`Server-Timing` `queue` and `cold` of the answer), as if it had
//!   had the node's cores to itself (divided by the calls per core it shared them with,
//!   [`alone_ms`]); the same time of the calls that started an instance, kept apart (a first
//!   run does what a function does once per instance: imports, caches, connections; counted
//!   as warm, it made a node where most calls were first ones look slow for good), and their
//!   cold start: a start costs the start plus what a first run takes beyond a warm one;
//! * per function and backend kind, the execution and start times the backend reported;
//! * per other node, the round trip of the `/readyz` probes and load reports sent to it, and the
//!   time a call forwarded there took beyond what that node's `Server-Timing` accounts for;
//! * per function, the memory of one instance as the backend measured it (the embedded
//!   runtime samples its workers' PSS off the call path), which replaces the configured
//!   `memory_mb` once it rests on [`MEMORY_SAMPLES`] samples, and the rate at which its calls
//!   arrived (over its last [`WINDOW`] calls); the files also say how many CPUs the node may use.
//!
//! A figure is the median of its last [`WINDOW`] samples, so it follows a node whose speed
//! changes and one slow call does not move it. A link's figures replace the model's after
//! [`PRIOR_CALLS`] samples, as a function's do. Other nodes' figures arrive in
//! their load reports ([`geofaas_fleet::NodeLoad::profiles`]); `GET /node/profiles` serves this
//! node's as a file the simulator reads (`simulate --profiles`).
//!
//! `settle` runs once per call after the answer is built: it learns from it and, when a
//! policy placed the call, puts `predicted;dur=<ms>` on its `Server-Timing` and the error
//! (actual over predicted) into `/metrics`.

use std::collections::BTreeMap;

/// The maps below are looked up on every call: a fast hash (foldhash, hashbrown's default:
/// their keys are function and node names from the topology or the deploy API, not chosen by
/// callers), found or added with one lookup ([`entry`]).
type Map<V> = hashbrown::HashMap<String, V>;
use parking_lot::{Mutex, RwLock};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use geofaas_config::Topology;
use geofaas_fleet::FunctionFacts;
use geofaas_functions::local::MemoryFigure;
use geofaas_functions::InvokeOutput;
use geofaas_scheduler::measured::{MeasuredBackend, MeasuredFunction, MeasuredProfiles};

use crate::call::{BackendRun, Ran};
use crate::call::{CallCtx, Observer};

/// Calls of a function measured before its figures replace its configured profile.
pub const PRIOR_CALLS: u64 = 5;
/// Samples a figure averages over.
pub const WINDOW: u64 = 32;
/// Where a node serves its profiles.
pub const PROFILES_PATH: &str = "/node/profiles";
/// Memory samples of a function before they replace its configured `memory_mb`.
pub const MEMORY_SAMPLES: u64 = 3;
/// The time over which [`ProfileBook::calls_per_core`] averages, in ms: a few load reports'
/// intervals (a second each by default), long enough to see a node that is busy most of the
/// time when it happens to be idle at a decision.
pub const LOAD_WINDOW_MS: u64 = 2000;
/// The slices [`LoadMeter`] keeps the window in.
const LOAD_SLICES: usize = 20;

/// The time served calls spent at the node, in slices of [`LOAD_WINDOW_MS`] /
/// [`LOAD_SLICES`]: a call adds its overlap with each slice it spanned, when it ends (a call
/// still running counts from then on; [`crate::schedule`] counts the running ones at the
/// decision already). Fixed size, whatever the call rate.
#[derive(Debug)]
struct LoadMeter {
    start: Instant,
    /// Per slice: its number since `start` and the call time in it, in ms.
    slices: [(u64, f64); LOAD_SLICES],
}

impl Default for LoadMeter {
    fn default() -> Self {
        Self {
            start: Instant::now(),
            slices: [(u64::MAX, 0.0); LOAD_SLICES],
        }
    }
}

impl LoadMeter {
    const SLICE_MS: f64 = LOAD_WINDOW_MS as f64 / LOAD_SLICES as f64;

    /// Milliseconds since `start` at `t` (0 before it).
    fn at(&self, t: Instant) -> f64 {
        ms(t.saturating_duration_since(self.start))
    }

    /// A call that was at the node for `took` until `end`.
    fn add(&mut self, end: Instant, took: Duration) {
        let to = self.at(end);
        let from = (to - ms(took)).max(0.0);
        if to <= from {
            return;
        }
        let last = (to / Self::SLICE_MS) as u64;
        let first =
            ((from / Self::SLICE_MS) as u64).max(last.saturating_sub(LOAD_SLICES as u64 - 1));
        for n in first..=last {
            let lo = n as f64 * Self::SLICE_MS;
            let overlap = to.min(lo + Self::SLICE_MS) - from.max(lo);
            let slot = &mut self.slices[n as usize % LOAD_SLICES];
            if slot.0 != n {
                *slot = (n, 0.0);
            }
            slot.1 += overlap.max(0.0);
        }
    }

    /// Calls at the node on average over the window up to `now` (its current slice so far).
    fn calls(&self, now: Instant) -> f64 {
        let t = self.at(now);
        let current = (t / Self::SLICE_MS) as u64;
        let oldest = current.saturating_sub(LOAD_SLICES as u64 - 1);
        let time: f64 = self
            .slices
            .iter()
            .filter(|(n, _)| (oldest..=current).contains(n))
            .map(|(_, ms)| ms)
            .sum();
        let span = (t - oldest as f64 * Self::SLICE_MS).max(Self::SLICE_MS);
        time / span
    }
}

/// A figure: the median of its last [`WINDOW`] samples (robust to the odd slow call on a
/// shared machine, and what "the median error" of predictions is measured against), with the
/// count of every sample it saw.
#[derive(Clone, Copy, Debug)]
struct Figure {
    n: u64,
    recent: [f64; WINDOW as usize],
}

impl Default for Figure {
    fn default() -> Self {
        Self {
            n: 0,
            recent: [0.0; WINDOW as usize],
        }
    }
}

impl Figure {
    /// Records a sample: a store, so a call pays nothing for the median (a sort of the window
    /// on every sample was 5 700 of a proxied call's 57 000 instructions, selection 3 300;
    /// bench/gateway/instructions.sh). The median is found when it is read.
    fn add(&mut self, x: f64) {
        if !x.is_finite() {
            return;
        }
        self.recent[(self.n % WINDOW) as usize] = x.max(0.0);
        self.n += 1;
    }

    /// The median of the recent samples, by selection.
    fn median(&self) -> f64 {
        let len = self.n.min(WINDOW) as usize;
        if len == 0 {
            return 0.0;
        }
        let mut window = self.recent;
        let window = &mut window[..len];
        let (below, mid, _) = window.select_nth_unstable_by(len / 2, f64::total_cmp);
        let mid = *mid;
        if len % 2 == 1 {
            mid
        } else {
            let lower = below.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            (lower + mid) / 2.0
        }
    }

    fn get(&self) -> Option<f64> {
        (self.n > 0).then(|| self.median())
    }
}

#[derive(Debug, Default)]
struct FunctionStats {
    /// Calls that reused an instance: their time less the admission wait, alone.
    warm: Figure,
    /// Calls that started an instance: the same time (their first run, with whatever a
    /// function does once per instance: imports, caches, connections).
    first: Figure,
    /// Calls that started an instance: the start itself.
    cold: Figure,
    backends: BTreeMap<&'static str, BackendStats>,
    /// The latest memory figure a backend reported.
    memory: Option<MemoryFigure>,
    arrivals: Arrivals,
}

/// When the last [`WINDOW`] calls of a function arrived.
#[derive(Debug, Default)]
struct Arrivals {
    n: u64,
    recent: Vec<Instant>,
}

impl Arrivals {
    fn add(&mut self, at: Instant) {
        if self.recent.len() < WINDOW as usize {
            self.recent.push(at);
        } else {
            self.recent[(self.n % WINDOW) as usize] = at;
        }
        self.n += 1;
    }

    /// Calls per second over the recent arrivals (`None` before two of them).
    fn rate_per_s(&self) -> Option<f64> {
        let first = self.recent.iter().min()?;
        let last = self.recent.iter().max()?;
        let span = last.duration_since(*first).as_secs_f64();
        (self.recent.len() >= 2 && span > 0.0).then(|| (self.recent.len() - 1) as f64 / span)
    }
}

/// What one call taught the book ([`ProfileBook::settled`]).
#[derive(Debug, Default)]
struct Settled {
    /// When it arrived, if it counts toward the arrival rate.
    arrived: Option<Instant>,
    /// Served here with success: `(warm_ms, cold_ms)` as [`ProfileBook::local_call`] takes them.
    served: Option<(f64, Option<f64>)>,
    /// What the backend that ran it here reported.
    backend: Option<BackendRun>,
}

#[derive(Debug, Default)]
struct BackendStats {
    calls: u64,
    cold_starts: u64,
    exec: Figure,
    cold: Figure,
}

#[derive(Debug, Default)]
struct LinkStats {
    probe: Figure,
    forward: Figure,
}

impl LinkStats {
    /// The link's figure on any number of samples: forwards first, else probes.
    fn measured_ms(&self) -> Option<f64> {
        self.forward.get().or(self.probe.get())
    }
}

/// What one node measured of one function, as the scheduler uses it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Facts {
    /// Calls measured.
    pub calls: u64,
    /// A warm call's time from arrival to answer, ms.
    pub warm_ms: f64,
    /// The extra time of a call that starts an instance, ms (`None`: none seen).
    pub cold_ms: Option<f64>,
    /// No call reused an instance yet: `warm_ms` is what the first runs took, which holds
    /// what the function does once per instance ([`Facts::warm_at_most`]).
    pub first_only: bool,
}

impl Facts {
    /// These facts with a warm time of at most `warm_ms` (e.g. another node's, scaled by the
    /// clocks) where only first runs were measured: a start then costs what they took beyond
    /// it. Facts from warm calls stay as they are.
    pub fn warm_at_most(self, warm_ms: f64) -> Self {
        // (A NaN bound is no bound.)
        if !self.first_only || warm_ms.partial_cmp(&self.warm_ms) != Some(std::cmp::Ordering::Less)
        {
            return self;
        }
        Self {
            warm_ms,
            cold_ms: self.cold_ms.map(|c| c + self.warm_ms - warm_ms),
            ..self
        }
    }
}

impl From<&FunctionFacts> for Facts {
    fn from(f: &FunctionFacts) -> Self {
        Self {
            calls: f.calls,
            warm_ms: f.warm_ms,
            cold_ms: f.cold_ms,
            first_only: false,
        }
    }
}

/// This node's measured profiles (kept across reloads).
#[derive(Debug, Default)]
pub struct ProfileBook {
    functions: RwLock<Map<FunctionStats>>,
    links: RwLock<Map<LinkStats>>,
    load: Mutex<LoadMeter>,
}

impl ProfileBook {
    /// A call of `function` that backend `kind` answered with `out`.
    pub fn backend_call(&self, function: &str, kind: &'static str, out: &InvokeOutput) {
        let call = Settled {
            backend: Some(BackendRun::of(kind, out)),
            ..Settled::default()
        };
        self.settled(function, call);
    }

    /// A call of `function` arrived at `at` (whatever became of it).
    pub fn arrived(&self, function: &str, at: Instant) {
        let call = Settled {
            arrived: Some(at),
            ..Settled::default()
        };
        self.settled(function, call);
    }

    /// The functions this node learned anything of (called here, or run by a backend here).
    pub fn names(&self) -> std::collections::BTreeSet<String> {
        self.functions.read().keys().cloned().collect()
    }

    /// How many calls of `function` arrived here over the last `window` (at most [`WINDOW`]).
    pub fn arrived_within(&self, function: &str, window: Duration) -> usize {
        let now = Instant::now();
        self.functions.read().get(function).map_or(0, |f| {
            f.arrivals
                .recent
                .iter()
                .filter(|at| now.saturating_duration_since(**at) <= window)
                .count()
        })
    }

    /// What [`settle`] learns of one call, under one lookup of its function.
    fn settled(&self, function: &str, call: Settled) {
        let mut map = self.functions.write();
        let f = entry(&mut map, function);
        if let Some(at) = call.arrived {
            f.arrivals.add(at);
        }
        match call.served {
            Some((first_ms, Some(c))) => {
                f.first.add(first_ms);
                f.cold.add(c);
            }
            Some((warm_ms, None)) => f.warm.add(warm_ms),
            None => {}
        }
        if let Some(run) = call.backend {
            if run.memory.is_some() {
                f.memory = run.memory;
            }
            let b = f.backends.entry(run.kind).or_default();
            b.calls += 1;
            b.exec.add(ms(run.exec));
            if run.cold_start {
                b.cold_starts += 1;
                b.cold.add(ms(run.cold));
            }
        }
    }

    /// The measured memory of one instance of `function` in MB, once it rests on
    /// [`MEMORY_SAMPLES`] samples.
    pub fn memory_mb(&self, function: &str) -> Option<f64> {
        self.functions
            .read()
            .get(function)
            .and_then(|f| f.memory)
            .filter(|m| m.samples >= MEMORY_SAMPLES)
            .map(|m| m.median_mb)
    }

    /// `p` with the measured memory of `function` in place of its configured size once
    /// there is one ([`ProfileBook::memory_mb`]): what the scheduler's memory check uses.
    pub fn with_measured_memory(
        &self,
        function: &str,
        mut p: geofaas_scheduler::model::FunctionProfile,
    ) -> geofaas_scheduler::model::FunctionProfile {
        if let Some(mb) = self.memory_mb(function) {
            p.memory_mb = mb;
        }
        p
    }

    /// A call of `function` served here: `warm_ms` from arrival to answer less its admission
    /// wait and cold start, `cold_ms` its cold start when it started an instance.
    pub fn local_call(&self, function: &str, warm_ms: f64, cold_ms: Option<f64>) {
        let call = Settled {
            served: Some((warm_ms, cold_ms)),
            ..Settled::default()
        };
        self.settled(function, call);
    }

    /// A call was at this node (admitted to answered) for `took` until `end`.
    pub fn served(&self, end: Instant, took: Duration) {
        self.load.lock().add(end, took);
    }

    /// Calls served here at once per core of `cores`, on average over the last
    /// [`LOAD_WINDOW_MS`]: a node busy most of that time is so even when a call finds it idle.
    pub fn calls_per_core(&self, cores: f64) -> f64 {
        let meter = self.load.lock();
        meter.calls(Instant::now()) / cores.max(1.0)
    }

    /// A probe or load report to `node` came back after `rtt`.
    pub fn probed(&self, node: &str, rtt: Duration) {
        self.link(node, |l| l.probe.add(ms(rtt)));
    }

    /// A call forwarded to `node` took `overhead_ms` beyond that node's own account of it.
    pub fn forwarded(&self, node: &str, overhead_ms: f64) {
        self.link(node, |l| l.forward.add(overhead_ms));
    }

    fn link(&self, node: &str, f: impl FnOnce(&mut LinkStats)) {
        f(entry(&mut self.links.write(), node));
    }

    /// What was measured of `function` here, if any call of it was.
    pub fn facts(&self, function: &str) -> Option<Facts> {
        self.functions.read().get(function).and_then(facts)
    }

    /// The mean cold start over the functions that started an instance here (for a function
    /// that never did).
    pub fn typical_cold_ms(&self) -> Option<f64> {
        let map = self.functions.read();
        let colds: Vec<f64> = map.values().filter_map(|f| f.cold.get()).collect();
        (!colds.is_empty()).then(|| colds.iter().sum::<f64>() / colds.len() as f64)
    }

    /// The time a call placed on `node` takes beyond that node's own figures: the round trip
    /// of [`PRIOR_CALLS`] probes or more, else of as many forwarded calls; `None` before.
    /// Probes first: what a forwarded call took beyond the other node's `Server-Timing` holds
    /// that node's waits outside it (its gateway and workers under load) and this node's own
    /// proxying under load, which the scheduler charges as the nodes' shared cores
    /// ([`crate::schedule`]); a loaded run's forwards measured 148 ms to the cloud against
    /// 28 ms of probes.
    pub fn link_ms(&self, node: &str) -> Option<f64> {
        let map = self.links.read();
        let l = map.get(node)?;
        let enough = |f: &Figure| (f.n >= PRIOR_CALLS).then(|| f.median());
        enough(&l.probe).or_else(|| enough(&l.forward))
    }

    /// The figures a load report carries.
    pub fn report(&self) -> (BTreeMap<String, FunctionFacts>, BTreeMap<String, f64>) {
        let functions = self
            .functions
            .read()
            .iter()
            .filter_map(|(name, f)| {
                let x = facts(f)?;
                Some((
                    name.clone(),
                    FunctionFacts {
                        calls: x.calls,
                        warm_ms: x.warm_ms,
                        cold_ms: x.cold_ms,
                        memory_mb: f
                            .memory
                            .filter(|m| m.samples >= MEMORY_SAMPLES)
                            .map(|m| m.median_mb),
                    },
                ))
            })
            .collect();
        // One read guard: taking the lock again under it deadlocks once a writer waits
        // between the two (std's RwLock lets the writer go first; seen as a node whose
        // load reports and /metrics hung).
        let links = self
            .links
            .read()
            .iter()
            .filter_map(|(id, l)| Some((id.clone(), l.measured_ms()?)))
            .collect();
        (functions, links)
    }

    /// The measured-profile file of node `node` (memory: measured once it rests on
    /// [`MEMORY_SAMPLES`] samples, the configured instance size before).
    pub fn snapshot(&self, node: &str, topology: &Topology) -> MeasuredProfiles {
        let configured = |name: &str| {
            topology.function(name).map_or_else(
                || geofaas_config::FunctionConfig::named(name).memory_mb,
                |f| f.memory_mb,
            )
        };
        let memory = |name: &str, f: &FunctionStats| match f.memory {
            Some(m) if m.samples >= MEMORY_SAMPLES => (m.median_mb, m.samples),
            _ => (configured(name), 0),
        };
        let functions = self
            .functions
            .read()
            .iter()
            .filter_map(|(name, f)| {
                let x = facts(f)?;
                let backends = f
                    .backends
                    .iter()
                    .map(|(kind, b)| {
                        let m = MeasuredBackend {
                            calls: b.calls,
                            cold_starts: b.cold_starts,
                            exec_ms: b.exec.get().unwrap_or(0.0),
                            cold_ms: b.cold.get(),
                        };
                        ((*kind).to_owned(), m)
                    })
                    .collect();
                let (memory_mb, memory_samples) = memory(name, f);
                let m = MeasuredFunction {
                    calls: x.calls,
                    warm_ms: x.warm_ms,
                    cold_ms: x.cold_ms,
                    memory_mb,
                    memory_samples,
                    rate_per_s: f.arrivals.rate_per_s(),
                    backends,
                };
                Some((name.clone(), m))
            })
            .collect();
        let (_, links) = self.report();
        let probes = self
            .links
            .read()
            .iter()
            .filter_map(|(id, l)| Some((id.clone(), l.probe.get()?)))
            .collect();
        MeasuredProfiles {
            node: node.to_owned(),
            at_ms: geofaas_fleet::now_ms(),
            functions,
            links,
            probes,
            cores: std::thread::available_parallelism()
                .ok()
                .map(|n| n.get() as f64),
        }
    }
}

/// A function's figures: the warm time of the calls that reused an instance (of those that
/// started one until one did); a start costs the start itself and what a first run takes
/// beyond a warm one.
fn facts(f: &FunctionStats) -> Option<Facts> {
    let first = f.first.get();
    let warm_ms = f.warm.get().or(first)?;
    Some(Facts {
        calls: f.warm.n + f.first.n,
        warm_ms,
        first_only: f.warm.n == 0,
        cold_ms: f
            .cold
            .get()
            .map(|c| c + first.map_or(0.0, |x| (x - warm_ms).max(0.0))),
    })
}

/// The entry of `name`, added when missing: one hash lookup, and a copy of the name only when
/// it is added.
fn entry<'a, V: Default>(map: &'a mut Map<V>, name: &str) -> &'a mut V {
    map.entry_ref(name).or_default()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// A warm call's time as if it had the node's `cores` to itself: `took_ms` divided by how many
/// calls per core it shared them with (at least 1), the mean of `others_then` (calls holding
/// permits besides it when it got its own) and `others_now` (when it ended), plus itself. The
/// scheduler multiplies it again by the calls a new call would share the cores with
/// ([`crate::schedule`]), so a figure measured under load does not count that load twice.
pub fn alone_ms(took_ms: f64, others_then: usize, others_now: usize, cores: f64) -> f64 {
    let sharing = (others_then + others_now) as f64 / 2.0 + 1.0;
    took_ms / (sharing / cores.max(1.0)).max(1.0)
}

/// The node's profiles as an observer of finished calls: each call's arrival, the time a call
/// served here held the node, a warm call's time alone and a cold start's, the overhead of the
/// link to the node that answered an offloaded call, and actual over predicted latency when the
/// policy placed the call.
pub struct Learner {
    book: Arc<ProfileBook>,
    metrics: Arc<crate::metrics::NodeMetrics>,
    me: String,
    cores: f64,
}

impl Learner {
    /// Learning into `book` for node `me` with `cores` cores.
    pub fn new(
        book: Arc<ProfileBook>,
        metrics: Arc<crate::metrics::NodeMetrics>,
        me: &str,
        cores: f64,
    ) -> Self {
        Self {
            book,
            metrics,
            me: me.to_owned(),
            cores,
        }
    }
}

impl std::fmt::Debug for Learner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Learner")
            .field("me", &self.me)
            .finish_non_exhaustive()
    }
}

impl Observer for Learner {
    fn finished(&self, call: &CallCtx, _status: StatusCode) {
        let Some(done) = &call.done else { return };
        let (received, elapsed) = (call.received, done.elapsed);
        let took = ms(elapsed);
        // Every call of a function that exists counts toward its arrival rate; a name no node
        // serves (`404`) is not kept, so callers cannot grow the map.
        let arrived = (done.status != StatusCode::NOT_FOUND).then_some(received);
        let (served, backend) = match &done.local {
            Some(run) => {
                // The time it held the node: from its admission to its answer, whatever became
                // of it.
                let held = elapsed.saturating_sub(run.queued);
                self.book.served(received + elapsed, held);
                let (queued, cold) = (ms(run.queued), ms(run.backend.cold));
                let cold_start = (run.ran == Ran::LocalNew).then_some(cold);
                let served = done.status.is_success().then(|| {
                    let warm =
                        alone_ms(took - queued - cold, run.others, run.others_now, self.cores);
                    (warm, cold_start)
                });
                (served, Some(run.backend))
            }
            None => (None, None),
        };
        let settled = Settled {
            arrived,
            served,
            backend,
        };
        if settled.arrived.is_some() || settled.backend.is_some() {
            self.book.settled(&call.function, settled);
        }
        if let Some(remote) = done.remote.as_ref().filter(|_| done.status.is_success()) {
            if let Some(by) = remote.node.as_deref().filter(|by| *by != self.me) {
                self.book.forwarded(by, took - remote.accounted_ms);
            }
        }
        if let (Some(predicted), Some((ran, _))) = (done.predicted, done.placement) {
            self.metrics
                .prediction(ran.label(), took / predicted.max(0.001));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_calls_per_core_are_the_served_calls_time_over_the_last_seconds() {
        let start = Instant::now();
        let mut meter = LoadMeter {
            start,
            ..LoadMeter::default()
        };
        let at = |ms: u64| start + Duration::from_millis(ms);
        // Nothing served: no load.
        assert_eq!(meter.calls(at(10_000)), 0.0);
        // One call of a second that just ended: half the window's time (the window is the
        // last 19 slices and the current one so far, 1.9 s here).
        meter.add(at(10_000), Duration::from_secs(1));
        let one = meter.calls(at(10_000));
        assert!((one - 1000.0 / 1900.0).abs() < 1e-9, "{one}");
        // Two more of 1.9 s at once: 4.8 s of calls in 1.9 s.
        meter.add(at(10_000), Duration::from_millis(1900));
        meter.add(at(10_000), Duration::from_millis(1900));
        let three = meter.calls(at(10_000));
        assert!((three - 4800.0 / 1900.0).abs() < 1e-9, "{three}");
        // A call longer than the window counts only its part inside it.
        let mut long = LoadMeter {
            start,
            ..LoadMeter::default()
        };
        long.add(at(10_000), Duration::from_secs(60));
        let whole = long.calls(at(10_000));
        assert!((whole - 1.0).abs() < 1e-9, "{whole}");
        // Calls that ended more than the window ago no longer count.
        assert_eq!(meter.calls(at(12_500)), 0.0);
        assert_eq!(long.calls(at(12_500)), 0.0);
        // A second later the window starts at 9.1 s: each call's last 0.9 s still counts.
        let later = meter.calls(at(11_000));
        assert!((later - 2700.0 / 1900.0).abs() < 1e-9, "{later}");
    }

    #[test]
    fn a_warm_calls_time_alone_divides_by_the_calls_per_core_it_shared_them_with() {
        // Alone, or with fewer calls than cores: as measured.
        assert_eq!(alone_ms(400.0, 0, 0, 1.0), 400.0);
        assert_eq!(alone_ms(400.0, 3, 3, 8.0), 400.0);
        // Four calls on one core the whole time: a quarter.
        assert_eq!(alone_ms(400.0, 3, 3, 1.0), 100.0);
        // On two cores: half.
        assert_eq!(alone_ms(400.0, 3, 3, 2.0), 200.0);
        // Three others at its start, none at its end: 2.5 calls on the core on average.
        assert_eq!(alone_ms(400.0, 3, 0, 1.0), 160.0);
    }

    #[test]
    fn figures_are_medians_of_the_recent_calls() {
        let book = ProfileBook::default();
        for _ in 0..10 {
            book.local_call("f", 10.0, None);
        }
        book.local_call("f", 200.0, None);
        // A 5 ms start whose first run took what a warm call does.
        book.local_call("f", 10.0, Some(5.0));
        let f = book.facts("f").unwrap();
        assert_eq!(f.calls, 12);
        assert_eq!(f.warm_ms, 10.0, "one slow call does not move it");
        assert_eq!(f.cold_ms, Some(5.0));
        // After a window of calls at a new speed, the new speed is the figure.
        for _ in 0..WINDOW {
            book.local_call("f", 40.0, None);
        }
        assert_eq!(book.facts("f").unwrap().warm_ms, 40.0);
        assert_eq!(book.facts("g"), None);
        assert_eq!(book.typical_cold_ms(), Some(5.0));
        let mut even = Figure::default();
        for x in [1.0, 2.0, 3.0, 10.0] {
            even.add(x);
        }
        assert_eq!(even.get(), Some(2.5));
    }

    #[test]
    fn a_link_is_measured_after_enough_samples_and_probes_outweigh_forwards() {
        let book = ProfileBook::default();
        assert_eq!(book.link_ms("cloud"), None);
        for _ in 0..PRIOR_CALLS {
            assert_eq!(book.link_ms("cloud"), None);
            book.forwarded("cloud", 140.0);
        }
        // Forwarded calls alone: what they took beyond the cloud's account.
        assert_eq!(book.link_ms("cloud"), Some(140.0));
        book.probed("cloud", Duration::from_millis(25));
        // Reports say what was measured; the scheduler waits for enough probes.
        assert_eq!(book.report().1["cloud"], 140.0);
        assert_eq!(book.link_ms("cloud"), Some(140.0));
        for _ in 1..PRIOR_CALLS {
            book.probed("cloud", Duration::from_millis(25));
        }
        assert_eq!(book.link_ms("cloud"), Some(25.0));
    }

    #[test]
    fn measured_memory_replaces_the_configured_size_after_enough_samples() {
        let topology = Topology::parse(
            include_str!("../../examples/berlin.toml"),
            "berlin.toml",
            std::path::Path::new("."),
        )
        .unwrap();
        let configured = topology.function("sievehard").unwrap().memory_mb;
        let book = ProfileBook::default();
        let prior = geofaas_scheduler::model::FunctionProfile::from(
            topology.function("sievehard").unwrap(),
        );
        let call = |samples: Option<u64>| {
            book.local_call("sievehard", 90.0, None);
            let out = InvokeOutput {
                memory: samples.map(|samples| MemoryFigure {
                    median_mb: 9.5,
                    samples,
                }),
                ..InvokeOutput::default()
            };
            book.backend_call("sievehard", "local", &out);
        };
        let memory_in_file = |book: &ProfileBook| {
            let f = &book.snapshot("tu-berlin", &topology).functions["sievehard"];
            (f.memory_mb, f.memory_samples)
        };
        // Before any sample, and on fewer than MEMORY_SAMPLES: the configured size.
        call(None);
        assert_eq!(memory_in_file(&book), (configured, 0));
        call(Some(MEMORY_SAMPLES - 1));
        assert_eq!(book.memory_mb("sievehard"), None);
        assert_eq!(memory_in_file(&book), (configured, 0));
        let p = book.with_measured_memory("sievehard", prior.clone());
        assert_eq!(p.memory_mb, configured);
        assert_eq!(book.report().0["sievehard"].memory_mb, None);
        // Enough: the measured figure, in the file, the report and the scheduler's profile.
        call(Some(MEMORY_SAMPLES));
        assert_eq!(book.memory_mb("sievehard"), Some(9.5));
        assert_eq!(memory_in_file(&book), (9.5, MEMORY_SAMPLES));
        assert_eq!(book.report().0["sievehard"].memory_mb, Some(9.5));
        let p = book.with_measured_memory("sievehard", prior);
        assert_eq!(p.memory_mb, 9.5);
        // A backend that does not measure memory leaves the last figure in place.
        call(None);
        assert_eq!(book.memory_mb("sievehard"), Some(9.5));
    }

    #[test]
    fn the_arrival_rate_is_taken_over_the_recent_calls() {
        let book = ProfileBook::default();
        let t0 = Instant::now();
        for k in 0..10 {
            book.arrived("f", t0 + Duration::from_millis(250 * k));
        }
        book.local_call("f", 1.0, None);
        let topology = Topology::parse(
            include_str!("../../examples/berlin.toml"),
            "berlin.toml",
            std::path::Path::new("."),
        )
        .unwrap();
        let file = book.snapshot("tu-berlin", &topology);
        let rate = file.functions["f"].rate_per_s.unwrap();
        assert!((rate - 4.0).abs() < 1e-9, "{rate}");
        assert!(file.cores.is_some_and(|c| c >= 1.0));
        // After a window of calls 100 ms apart, their rate is the figure.
        let t1 = t0 + Duration::from_secs(10);
        for k in 0..WINDOW {
            book.arrived("f", t1 + Duration::from_millis(100 * k));
        }
        let rate = book.snapshot("tu-berlin", &topology).functions["f"]
            .rate_per_s
            .unwrap();
        assert!((rate - 10.0).abs() < 1e-6, "{rate}");
    }

    #[test]
    fn a_first_run_counts_toward_the_start_once_a_call_reused_an_instance() {
        let book = ProfileBook::default();
        // A call that started an instance: a 5 ms start, then 100 ms of its first run.
        book.local_call("f", 100.0, Some(5.0));
        let first = book.facts("f").unwrap();
        assert_eq!((first.warm_ms, first.cold_ms), (100.0, Some(5.0)));
        assert!(first.first_only);
        // Until a call reuses one, a warm time measured elsewhere bounds it, and a start costs
        // the rest of the first run.
        let bounded = first.warm_at_most(4.0);
        assert_eq!((bounded.warm_ms, bounded.cold_ms), (4.0, Some(101.0)));
        assert_eq!(first.warm_at_most(150.0), first);
        // A call that reused it: 4 ms warm, and a start is the 5 ms plus the 96 ms beyond.
        book.local_call("f", 4.0, None);
        let f = book.facts("f").unwrap();
        assert_eq!((f.calls, f.warm_ms, f.cold_ms), (2, 4.0, Some(101.0)));
        assert!(!f.first_only);
        assert_eq!(f.warm_at_most(1.0), f);
    }

    #[test]
    fn the_calls_that_would_reuse_an_instance_are_those_of_the_last_seconds() {
        let book = ProfileBook::default();
        let now = Instant::now();
        let ago = |s: u64| now.checked_sub(Duration::from_secs(s)).unwrap_or(now);
        for at in [ago(30), ago(12), ago(4), ago(1)] {
            book.arrived("f", at);
        }
        book.arrived("g", ago(1));
        assert_eq!(book.arrived_within("f", Duration::from_secs(5)), 2);
        assert_eq!(book.arrived_within("f", Duration::from_secs(20)), 3);
        assert_eq!(book.arrived_within("g", Duration::from_secs(5)), 1);
        assert_eq!(book.arrived_within("unknown", Duration::from_secs(5)), 0);
    }
}
