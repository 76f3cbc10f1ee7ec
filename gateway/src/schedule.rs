//! The live scheduler of an edge: before running a call, ask a placement [`Policy`] which node
//! runs it (this edge, a neighbouring edge or the cloud) and whether in a warm or a new
//! instance.
//!
//! The observation lists every node of the topology but this edge's own role: this edge first,
//! with its pools' live counts; then each other edge, from its latest load report
//! ([`crate::loads`]), or infeasible when it has none that is fresh or does not serve the
//! function; the cloud last, from its report when it has a fresh one, else as an empty node
//! (every capacity free, no warm instance). Capacities are the nodes' `cores`, `memory_gb` and
//! `bandwidth` ([`geofaas_scheduler::topology::Topology::from_config`]); link delays follow
//! from the locations (great-circle propagation from the client, plus the cloud's access
//! delay). One decision allocates one `Vec` of candidates and nothing else.
//!
//! Every candidate carries measured latency terms ([`Measured`], from [`crate::profiles`]):
//! this edge's own figures for the function, another node's from its load report, each
//! replaced by the function's configured profile (the model's terms at that node) until
//! [`PRIOR_CALLS`] calls were measured; a function without a configured profile is placed
//! from its first measured call on. The time to reach another node is its probes' round trip,
//! else what forwarded calls to it took beyond its own account, else the model's.
//! A decision's [`Decision::predicted_ms`] is the model's latency of the chosen action, from
//! the call's arrival here to its answer.
//!
//! A node's cores are shared by the calls on it (processor sharing): a call where `n` other
//! calls run (here: the calls holding admission permits; elsewhere: its report's running and
//! queued calls, plus the calls this edge sent there after the report was measured, `Sent`)
//! takes its time alone times `(n + 1) / cores` when that is above 1, the excess as the
//! candidate's [`Measured::queue_ms`]. Its measured times are each call's time alone
//! ([`crate::profiles::alone_ms`]), so the load is not counted twice. Beside the instant, each
//! candidate carries the node's calls per core on average over its last seconds
//! ([`Measured::calls_per_core`]: this edge's own, another node's from its report), which
//! PPO's margin weighs ([`geofaas_scheduler::ppo::PpoPolicy`]); predictions leave it out. So
//! does this edge's count of the function's calls over its runtime's keep-alive
//! ([`Measured::reuses`]: the calls that would reuse an instance started here now).

use std::sync::Arc;
use std::time::Duration;

use geofaas_config::{BackendConfig, LatLon, Role, SchedulerPolicy, ServiceMap, Topology};
use geofaas_fleet::{now_ms, LoadReport};
use geofaas_functions::{FunctionBackend, PoolStats};
use geofaas_scheduler::baselines::GreedyPolicy;
use geofaas_scheduler::model::{
    comm_ms, compute_ms, FunctionProfile, GeoPoint, LinkModel, NodeSpec,
};
use geofaas_scheduler::ppo::PpoPolicy;
use geofaas_scheduler::{Candidate, Measured, Observation, Policy, RequestInfo};
use url::Url;

use crate::loads::LoadBoard;
use crate::profiles::{Facts, ProfileBook, PRIOR_CALLS};

mod prior;
pub use prior::{ColdKind, LOCAL_FIRST_CALL_MS};

/// The longest a function's past calls here count as the calls that would reuse a new
/// instance ([`Measured::reuses`]): beyond the last seconds, a function's rate says little
/// about its next calls.
pub const REUSE_WINDOW: Duration = Duration::from_secs(10);

/// A placement and the latency it was chosen for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Decision {
    /// Where the call runs.
    pub placement: Placement,
    /// The latency the policy's model predicts for it, in ms, from the call's arrival here to
    /// its answer.
    pub predicted_ms: f64,
}

/// How far light travels in optical fibre in a millisecond (two thirds of c).
const FIBRE_KM_PER_MS: f64 = 200.0;

/// Where the policy wants a call to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Here, in an idle warm instance (or queued behind a busy one).
    Reuse,
    /// Here, in a new instance.
    New,
    /// On the neighbouring edge with this index in [`EdgeScheduler::neighbor`].
    Neighbor(usize),
    /// In the cloud, now.
    Cloud,
}

/// Another edge the scheduler may place calls on.
#[derive(Debug, Clone)]
pub struct Neighbor {
    /// Its node id.
    pub id: String,
    /// Its gateway, where a placed call is forwarded.
    pub url: Url,
    spec: NodeSpec,
    cold: ColdKind,
}

/// What a decision knows about this edge besides its pools.
#[derive(Debug, Clone, Copy)]
pub struct LocalState {
    /// Calls running here besides this one.
    pub in_flight: usize,
    /// Whether the call may run here at all (false: no admission permit left).
    pub admitted: bool,
    /// Whether the call may go elsewhere (false: it was forwarded to this node already).
    pub may_forward: bool,
}

/// A policy with the nodes it chooses between.
pub struct EdgeScheduler {
    policy: Arc<dyn Policy>,
    /// How far back a function's calls here count as the calls that would reuse an instance
    /// started now ([`Measured::reuses`]): the local runtime's keep-alive, at most
    /// [`REUSE_WINDOW`]; `None` without a local runtime (no pools to start instances in).
    reuse_window: Option<Duration>,
    /// `ppo` or `greedy`: the policy actually running (greedy when PPO weights failed to load).
    reason: &'static str,
    here: NodeSpec,
    /// How each node starts an instance ([`prior`]): here, the cloud.
    here_cold: ColdKind,
    cloud_cold: ColdKind,
    neighbors: Vec<Neighbor>,
    cloud_id: String,
    cloud: NodeSpec,
    loads: Arc<LoadBoard>,
    stale_ms: u64,
    /// The topology's functions (its order) with their profiles, for the warm instances of
    /// other functions a call's cores would block ([`Candidate::blocked_cold_ms`]).
    profiles: Vec<(String, FunctionProfile)>,
    /// The most cores any of them needs.
    max_cores: f64,
    /// This node's measured profiles.
    book: Arc<ProfileBook>,
    link: LinkModel,
    /// The profile of a function the topology does not describe (its defaults).
    default_profile: FunctionProfile,
    /// The calls this edge placed on each neighbour (in [`EdgeScheduler::neighbor`]'s order)
    /// and, last, on the cloud, that have not come back yet.
    sent: Vec<Arc<Sent>>,
}

/// Calls placed on another node and not back yet, each by when it was sent (ms since the
/// epoch): that node's load report counts those sent before it was measured, so a decision
/// adds the ones sent after. Without them, the calls of a burst all see the same report and
/// all go to the node it shows idle.
#[derive(Debug, Default)]
struct Sent(parking_lot::Mutex<Vec<u64>>);

impl Sent {
    fn calls(&self) -> parking_lot::MutexGuard<'_, Vec<u64>> {
        self.0.lock()
    }

    /// Calls sent at `at_ms` or after and not back yet (one sent in the millisecond a report
    /// was measured reaches that node after it: the report does not count it).
    fn after(&self, at_ms: u64) -> usize {
        self.calls().iter().filter(|&&t| t >= at_ms).count()
    }
}

/// A placed call on its way to another node ([`EdgeScheduler::sending`]); dropping it says it
/// came back.
#[derive(Debug)]
pub struct Sending {
    sent: Arc<Sent>,
    at_ms: u64,
}

impl Drop for Sending {
    fn drop(&mut self) {
        let mut calls = self.sent.calls();
        if let Some(i) = calls.iter().position(|&t| t == self.at_ms) {
            calls.swap_remove(i);
        }
    }
}

impl std::fmt::Debug for EdgeScheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EdgeScheduler")
            .field("policy", &self.reason)
            .field("neighbors", &self.neighbors.len())
            .finish_non_exhaustive()
    }
}

impl EdgeScheduler {
    /// The scheduler the topology asks for at edge `id`, reading other nodes' load from
    /// `loads`; `None` for policy `none`. Its neighbours are `id`'s in `map`
    /// ([`ServiceMap::neighbours`], `gateway.neighbours` of them). PPO weights that cannot be loaded make it greedy, with
    /// one warning naming the file and the error. Measured figures come from `book`.
    pub fn from_topology(
        topology: &Topology,
        map: &ServiceMap,
        id: &str,
        loads: Arc<LoadBoard>,
        book: Arc<ProfileBook>,
    ) -> anyhow::Result<Option<Self>> {
        let link = LinkModel::default();
        let (policy, reason): (Arc<dyn Policy>, &'static str) = match topology.scheduler.policy {
            SchedulerPolicy::None => return Ok(None),
            SchedulerPolicy::Greedy => (Arc::new(GreedyPolicy::new(link)), "greedy"),
            SchedulerPolicy::Ppo => match load_ppo(topology, link) {
                Ok(p) => {
                    let s = &topology.scheduler;
                    let p = match (s.margin, s.busy_margin) {
                        (Some(m), Some(w)) => p.with_margin(m).with_busy_margin(w),
                        (Some(m), None) => p.with_margin(m),
                        (None, _) => p,
                    };
                    (Arc::new(p), "ppo")
                }
                Err(e) => {
                    tracing::warn!(node = id, error = %e, "scheduler: PPO weights unusable, using greedy instead");
                    (Arc::new(GreedyPolicy::new(link)), "greedy")
                }
            },
        };
        let specs = geofaas_scheduler::topology::Topology::from_config(topology)?;
        let near: std::collections::HashSet<&str> = map
            .neighbours(id, topology.gateway.neighbours)
            .into_iter()
            .map(|n| n.id.as_str())
            .collect();
        let mut here = None;
        let mut cloud = None;
        let mut neighbors = Vec::new();
        for (node, spec) in topology.nodes.iter().zip(&specs.nodes) {
            let cold = ColdKind::of(node);
            match node.role {
                _ if node.id == id => here = Some((*spec, cold)),
                Role::Cloud => cloud = Some((node.id.clone(), *spec, cold)),
                Role::Edge if near.contains(node.id.as_str()) => neighbors.push(Neighbor {
                    id: node.id.clone(),
                    url: node.public_url.clone(),
                    spec: *spec,
                    cold,
                }),
                Role::Edge => {}
            }
        }
        let (here, here_cold) = here.ok_or_else(|| anyhow::anyhow!("no node {id:?}"))?;
        let reuse_window = topology
            .nodes
            .iter()
            .filter(|n| n.id == id)
            .flat_map(|n| &n.backends)
            .find_map(|b| match b {
                BackendConfig::Local(l) => {
                    Some(Duration::from_secs(l.keep_alive_s).min(REUSE_WINDOW))
                }
                _ => None,
            });
        let profiles: Vec<_> = topology
            .functions
            .iter()
            .map(|f| (f.name.clone(), FunctionProfile::from(f)))
            .collect();
        let (cloud_id, cloud, cloud_cold) =
            cloud.ok_or_else(|| anyhow::anyhow!("topology has no cloud"))?;
        let neighbors_len = neighbors.len();
        Ok(Some(Self {
            policy,
            reuse_window,
            reason,
            here,
            here_cold,
            cloud_cold,
            neighbors,
            cloud_id,
            cloud,
            loads,
            stale_ms: crate::loads::stale_ms(topology),
            max_cores: profiles.iter().map(|(_, p)| p.cores).fold(1.0, f64::max),
            profiles,
            book,
            link,
            default_profile: FunctionProfile::from(&geofaas_config::FunctionConfig::named("")),
            sent: (0..=neighbors_len).map(|_| Arc::default()).collect(),
        }))
    }

    /// The policy's name (`greedy`, `ppo`): the `X-Placement-Reason` of its placements.
    pub fn name(&self) -> &'static str {
        self.reason
    }

    /// The nodes this edge may place calls on, whose load reports it reads: its neighbours and
    /// the cloud.
    pub fn watched(&self) -> Vec<&str> {
        self.neighbors
            .iter()
            .map(|n| n.id.as_str())
            .chain(std::iter::once(self.cloud_id.as_str()))
            .collect()
    }

    /// Neighbouring edge `i` of a [`Placement::Neighbor`].
    pub fn neighbor(&self, i: usize) -> Option<&Neighbor> {
        self.neighbors.get(i)
    }

    /// A call placed by `placement` leaves for another node: until the returned guard is
    /// dropped (the call came back), decisions count it at that node beside its last report.
    /// `None` for a placement here.
    pub fn sending(&self, placement: Placement) -> Option<Sending> {
        let sent = match placement {
            Placement::Reuse | Placement::New => return None,
            Placement::Neighbor(i) => self.sent.get(i)?,
            Placement::Cloud => self.sent.last()?,
        };
        let at_ms = now_ms();
        sent.calls().push(at_ms);
        Some(Sending {
            sent: sent.clone(),
            at_ms,
        })
    }

    /// Decides a call of `function` from a client at `source` (this node's location when the
    /// client's is unknown); `None` when the function has neither a configured profile nor a
    /// measured call here, or the policy finds no feasible placement.
    pub fn decide(
        &self,
        topology: &Topology,
        backends: &[Arc<dyn FunctionBackend>],
        function: &str,
        source: Option<LatLon>,
        local: LocalState,
    ) -> Option<Decision> {
        let configured = topology
            .functions
            .iter()
            .enumerate()
            .find(|(_, f)| f.name == function);
        let mine = self
            .book
            .facts(function)
            .map(|f| self.warm_elsewhere(f, function));
        let (function_id, profile, prior) = match configured {
            Some((i, f)) => {
                let p = FunctionProfile::from(f);
                (i, p.clone(), Some(p))
            }
            None => {
                mine?;
                (topology.functions.len(), self.default_profile.clone(), None)
            }
        };
        let profile = self.book.with_measured_memory(function, profile);
        let prior = prior.as_ref();
        let stats = backends.iter().find_map(|b| b.stats(function));
        let mut candidates = Vec::with_capacity(self.neighbors.len() + 2);
        let here = self.facts((self.here, self.here_cold), prior, mine, mine, 0.0);
        candidates.push(self.local(&profile, here, function, backends, stats, local));
        if local.may_forward {
            let now = now_ms();
            self.loads.read(|reports| {
                let fresh = |id: &str| reports.fresh(id, now, self.stale_ms);
                for (i, n) in self.neighbors.iter().enumerate() {
                    let report = fresh(&n.id).and_then(|r| {
                        let node = (n.spec, n.cold);
                        let m = self.remote(&n.id, node, (prior, mine), r, function, &profile);
                        let sent = self.sent[i].after(r.at_ms);
                        self.reported(node, &profile, m, function, r, (sent, now))
                    });
                    candidates.push(report.unwrap_or_else(|| infeasible(n.spec)));
                }
                let cloud = fresh(&self.cloud_id);
                let m = match cloud {
                    Some(r) => self.remote(
                        &self.cloud_id,
                        (self.cloud, self.cloud_cold),
                        (prior, mine),
                        r,
                        function,
                        &profile,
                    ),
                    None => {
                        let link = self.link_to(&self.cloud_id, self.cloud, &profile);
                        self.facts((self.cloud, self.cloud_cold), prior, mine, None, link)
                    }
                };
                let sent = &self.sent[self.neighbors.len()];
                candidates.push(
                    cloud
                        .and_then(|r| {
                            let node = (self.cloud, self.cloud_cold);
                            let sent = sent.after(r.at_ms);
                            self.reported(node, &profile, m, function, r, (sent, now))
                        })
                        .unwrap_or_else(|| empty(self.cloud, m, sent.after(0))),
                );
            });
        } else {
            candidates.extend(self.neighbors.iter().map(|n| infeasible(n.spec)));
            candidates.push(infeasible(self.cloud));
        }
        let obs = Observation {
            request: RequestInfo {
                function_id,
                source: source.map_or(self.here.location, |l| GeoPoint::new(l.lat, l.lon)),
                input_kb: profile.input_kb,
                slo_ms: profile.slo_ms,
                profile,
            },
            candidates,
        };
        let action = self.policy.decide(&obs)?;
        let predicted_ms = obs.estimate(&self.link, action).total();
        let last = obs.candidates.len() - 1;
        let placement = match (action.candidate, action.new_container) {
            (0, false) => Placement::Reuse,
            (0, true) => Placement::New,
            (i, _) if i == last => Placement::Cloud,
            (i, _) => Placement::Neighbor(i - 1),
        };
        Some(Decision {
            placement,
            predicted_ms,
        })
    }

    /// This edge's facts `f` of `function`, where only its first runs were measured here (no
    /// call reused an instance yet), with a warm time of at most what another node with a fresh
    /// report measured over [`PRIOR_CALLS`] calls or more, scaled by the clocks. A first run
    /// holds what a function does once per instance; taken as the warm time, it kept an edge's
    /// idle instance unused (a warm call there predicted at the first run's 100 ms against the
    /// cloud's 31) and the edge's warm time unmeasured for good.
    fn warm_elsewhere(&self, f: Facts, function: &str) -> Facts {
        if !f.first_only {
            return f;
        }
        let now = now_ms();
        let others = self.neighbors.iter().map(|n| (n.id.as_str(), n.spec));
        let nodes = others.chain(std::iter::once((self.cloud_id.as_str(), self.cloud)));
        let warm = self.loads.read(|reports| {
            nodes
                .filter_map(|(id, spec)| {
                    let r = reports.fresh(id, now, self.stale_ms)?;
                    let x = r.load.profiles.get(function)?;
                    (x.calls >= PRIOR_CALLS).then(|| x.warm_ms * spec.ghz / self.here.ghz)
                })
                .fold(f64::INFINITY, f64::min)
        });
        f.warm_at_most(warm)
    }

    /// The latency terms of a function at node `spec`, `link_ms` away: what `measured` there
    /// says once it covers [`PRIOR_CALLS`] calls (or any call, without a `prior`); else this
    /// edge's own figures (`mine`) scaled by the clocks once they cover [`PRIOR_CALLS`] calls;
    /// else the `prior`'s model terms; else `mine` as far as they go. A cold start not measured
    /// there is what the node's backend kind pays ([`ColdKind::cold_ms`]).
    ///
    /// Before [`PRIOR_CALLS`], the `n` calls measured there already count: the execution time
    /// is theirs weighted `n / PRIOR_CALLS`, the rest the estimate without them (the prior
    /// stands for the calls not yet measured). Without it a node whose first calls ran slow
    /// (while the machine was busy, say) keeps the estimate that made the policies avoid it,
    /// since no call goes there to correct it.
    fn facts(
        &self,
        (spec, kind): (NodeSpec, ColdKind),
        prior: Option<&FunctionProfile>,
        mine: Option<Facts>,
        measured: Option<Facts>,
        link_ms: f64,
    ) -> Measured {
        let without = self.unmeasured((spec, kind), prior, mine, measured, link_ms);
        match measured {
            Some(f) if f.calls > 0 && f.calls < PRIOR_CALLS && prior.is_some() => {
                let w = f.calls as f64 / PRIOR_CALLS as f64;
                Measured {
                    exec_ms: w * f.warm_ms + (1.0 - w) * without.exec_ms,
                    ..without
                }
            }
            _ => without,
        }
    }

    /// [`EdgeScheduler::facts`] but for the calls measured at a node before [`PRIOR_CALLS`].
    fn unmeasured(
        &self,
        (spec, kind): (NodeSpec, ColdKind),
        prior: Option<&FunctionProfile>,
        mine: Option<Facts>,
        measured: Option<Facts>,
        link_ms: f64,
    ) -> Measured {
        let enough = |f: &Facts| f.calls >= PRIOR_CALLS || (prior.is_none() && f.calls > 0);
        let prior_cold =
            |p: &FunctionProfile| kind.cold_ms(p, &spec, mine, self.book.typical_cold_ms());
        let fallback_cold = || prior_cold(prior.unwrap_or(&self.default_profile));
        if let Some(f) = measured.filter(enough) {
            return Measured {
                cold_ms: f.cold_ms.unwrap_or_else(fallback_cold),
                exec_ms: f.warm_ms,
                link_ms,
                queue_ms: 0.0,
                calls_per_core: 0.0,
                reuses: 0.0,
            };
        }
        // This edge's own measurement, once it has enough calls, beats the configured prior
        // at a node that has not measured the function yet: comparing a measured figure here
        // with a modelled one there would favour whichever the model flatters.
        if let Some(f) = mine.filter(|f| f.calls >= PRIOR_CALLS) {
            return Measured {
                cold_ms: prior.map_or_else(|| f.cold_ms.unwrap_or_else(fallback_cold), prior_cold),
                exec_ms: f.warm_ms * self.here.ghz / spec.ghz,
                link_ms,
                queue_ms: 0.0,
                calls_per_core: 0.0,
                reuses: 0.0,
            };
        }
        if let Some(p) = prior {
            return Measured {
                cold_ms: prior_cold(p),
                exec_ms: compute_ms(p, spec.ghz),
                link_ms,
                queue_ms: 0.0,
                calls_per_core: 0.0,
                reuses: 0.0,
            };
        }
        let f = mine.unwrap_or(Facts {
            calls: 0,
            warm_ms: compute_ms(&self.default_profile, spec.ghz),
            cold_ms: None,
            first_only: false,
        });
        Measured {
            cold_ms: f.cold_ms.unwrap_or_else(fallback_cold),
            exec_ms: f.warm_ms * self.here.ghz / spec.ghz,
            link_ms,
            queue_ms: 0.0,
            calls_per_core: 0.0,
            reuses: 0.0,
        }
    }

    /// The terms at another node `id` with a fresh report `r`: its figures of the function,
    /// else the prior, else this edge's own.
    fn remote(
        &self,
        id: &str,
        (spec, kind): (NodeSpec, ColdKind),
        (prior, mine): (Option<&FunctionProfile>, Option<Facts>),
        r: &LoadReport,
        function: &str,
        p: &FunctionProfile,
    ) -> Measured {
        let theirs = r.load.profiles.get(function).map(Facts::from);
        self.facts((spec, kind), prior, mine, theirs, self.link_to(id, spec, p))
    }

    /// The time to reach node `id` and come back, beyond its own handling: measured, else the
    /// model's communication time there and back. A measured round trip is never taken below what light in fibre needs for the distance
    /// the topology gives (about 200 km per ms): below it the nodes are not where the
    /// topology places them (a fleet on one machine), and the topology's geography stands.
    fn link_to(&self, id: &str, spec: NodeSpec, p: &FunctionProfile) -> f64 {
        let dist = self.here.location.distance_km(&spec.location);
        match self.book.link_ms(id) {
            Some(measured) => measured.max(2.0 * dist / FIBRE_KM_PER_MS),
            None => 2.0 * comm_ms(&self.link, p.input_kb, dist, spec.access_ms),
        }
    }

    /// This edge: cores less the calls running here (one core each, as the model assumes);
    /// instances of the function from its pool. A pool at its instance limit cannot start one
    /// (no memory to offer); a busy instance frees after about the function's compute time.
    /// Without an admission permit nothing here is feasible.
    fn local(
        &self,
        p: &FunctionProfile,
        m: Measured,
        function: &str,
        backends: &[Arc<dyn FunctionBackend>],
        stats: Option<PoolStats>,
        local: LocalState,
    ) -> Candidate {
        if !local.admitted {
            return infeasible(self.here);
        }
        // A backend without pools (tinyFaaS, OpenWhisk, Lambda) keeps its own instances: a
        // call there is a warm call as far as this node can tell, and its measured figures
        // already hold whatever cold starts it pays.
        let s = stats.unwrap_or(PoolStats {
            idle: 1,
            busy: 0,
            max: usize::MAX,
        });
        let full = s.idle + s.busy >= s.max;
        let held = (s.idle + s.busy) as f64 * p.memory_mb;
        let free_cores = (self.here.cores - local.in_flight as f64).max(0.0);
        let m = Measured {
            calls_per_core: self.book.calls_per_core(self.here.cores),
            reuses: self
                .reuse_window
                .map_or(0.0, |w| self.book.arrived_within(function, w) as f64),
            ..shared(m, local.in_flight, self.here.cores)
        };
        let (idle, busy, wait_ms) = instances(s.idle, s.busy, free_cores, p, &m);
        let idle_here = |g: &str| {
            backends
                .iter()
                .find_map(|b| b.stats(g))
                .map_or(0, |s| s.idle)
        };
        Candidate {
            node: self.here,
            free_cores,
            free_memory_mb: if full {
                0.0
            } else {
                (self.here.memory_mb - held).max(0.0)
            },
            evictable_memory_mb: 0.0,
            blocked_cold_ms: self.blocked_cold_ms(
                free_cores - p.cores,
                (self.here, self.here_cold),
                function,
                idle_here,
            ),
            idle,
            busy,
            wait_ms,
            measured: Some(m),
        }
    }

    /// A node from its load report: cores less its calls (those it counted still there `now`,
    /// [`still_there`], and the `sent` ones this edge placed there after it was measured), the
    /// time they add by sharing the cores ([`shared`]), memory less what the function's
    /// instances hold, and their counts; `None` when its report does not list the function (it
    /// does not serve it in a pool).
    fn reported(
        &self,
        (spec, kind): (NodeSpec, ColdKind),
        p: &FunctionProfile,
        m: Measured,
        function: &str,
        r: &LoadReport,
        (sent, now): (usize, u64),
    ) -> Option<Candidate> {
        let f = r.load.functions.get(function)?;
        let age_ms = now.saturating_sub(r.at_ms) as f64;
        let done = |n: usize| n - still_there(n, age_ms, spec.cores, m.exec_ms);
        let calls = r.load.running + r.load.queued - done(r.load.running + r.load.queued) + sent;
        let free_cores = (spec.cores - calls as f64).max(0.0);
        let m = Measured {
            calls_per_core: r.load.calls_per_core,
            ..shared(m, calls, spec.cores)
        };
        let finished = done(f.busy);
        let (f_idle, f_busy) = (f.idle + finished, f.busy - finished);
        let (idle, busy, wait_ms) = instances(f_idle, f_busy, free_cores, p, &m);
        let idle_there = |g: &str| r.load.functions.get(g).map_or(0, |f| f.idle);
        Some(Candidate {
            node: spec,
            free_cores,
            free_memory_mb: (spec.memory_mb - (f_idle + f_busy) as f64 * p.memory_mb).max(0.0),
            evictable_memory_mb: 0.0,
            blocked_cold_ms: self.blocked_cold_ms(
                free_cores - p.cores,
                (spec, kind),
                function,
                idle_there,
            ),
            idle,
            busy,
            wait_ms,
            measured: Some(m),
        })
    }

    /// [`Candidate::blocked_cold_ms`] as the simulator defines it: with `left` cores free after
    /// the call, the cold starts at `spec` of the other functions whose idle instances there
    /// (`idle`) would lack the cores they need. Zero, without looking at any pool, while `left`
    /// is at least what any function needs: only a nearly full node pays for the look.
    fn blocked_cold_ms(
        &self,
        left: f64,
        (spec, kind): (NodeSpec, ColdKind),
        function: &str,
        idle: impl Fn(&str) -> usize,
    ) -> f64 {
        if left < -1e-9 || left + 1e-9 >= self.max_cores {
            return 0.0;
        }
        let typical = self.book.typical_cold_ms();
        self.profiles
            .iter()
            .filter(|(g, p)| g != function && p.cores > left + 1e-9 && idle(g) > 0)
            .map(|(g, p)| kind.cold_ms(p, &spec, self.book.facts(g), typical))
            .sum()
    }
}

/// The PPO policy of `[scheduler] weights`, else the shipped Berlin weights.
fn load_ppo(topology: &Topology, link: LinkModel) -> anyhow::Result<PpoPolicy> {
    match &topology.scheduler.weights {
        Some(path) => {
            let path = topology.resolve(path);
            let policy = PpoPolicy::load(&path, link)
                .map_err(|e| anyhow::anyhow!("scheduler.weights = {}: {e}", path.display()))?;
            tracing::info!(weights = %path.display(), "scheduler: PPO weights loaded");
            Ok(policy)
        }
        None => {
            let bytes = geofaas_scheduler::ppo::shipped_weights("berlin")
                .ok_or_else(|| anyhow::anyhow!("no shipped PPO weights"))?;
            Ok(PpoPolicy::from_bytes(bytes, link)?)
        }
    }
}

/// The idle and busy instances of a function at a node with `free_cores` and the wait
/// ([`Candidate::wait_ms`]) of a call queued there, its terms `m`. A busy
/// instance frees after about the call's time alone. With no core free, an idle instance is
/// no faster to reach than a busy one: the call shares the cores with the calls already there
/// (processor sharing), which is what it waits for ([`Measured::queue_ms`]), so the policy sees
/// its instances as busy and the call as queued (the simulator's "reuse" without a free core).
fn instances(
    idle: usize,
    busy: usize,
    free_cores: f64,
    p: &FunctionProfile,
    m: &Measured,
) -> (u32, u32, f64) {
    let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    if idle > 0 && free_cores + 1e-9 < p.cores {
        (0, count(busy + idle), 0.0)
    } else {
        (count(idle), count(busy), m.exec_ms)
    }
}

/// Of `calls` a report counted `age_ms` ago at a node with `cores`, those still there: a
/// report is up to an interval old (a second by default) and a call a few hundred ms, so the
/// calls it counted have been finishing since, about `cores` of them per `exec_ms` (the call's
/// time alone there). Without it a node that was busy when it reported looks busy until its
/// next report.
fn still_there(calls: usize, age_ms: f64, cores: f64, exec_ms: f64) -> usize {
    if exec_ms <= 0.0 || !exec_ms.is_finite() {
        return 0;
    }
    let done = (age_ms * cores.max(1.0) / exec_ms).floor();
    let done = if done >= calls as f64 {
        calls
    } else {
        done as usize
    };
    calls - done
}

/// `m` at a node where `calls` other calls share its `cores`: a call there takes its time
/// alone times calls per core (processor sharing, at least 1), the excess as
/// [`Measured::queue_ms`]. The measured times are each call's time alone
/// ([`crate::profiles::alone_ms`]).
fn shared(m: Measured, calls: usize, cores: f64) -> Measured {
    let per_core = (calls as f64 + 1.0) / cores.max(1.0);
    Measured {
        queue_ms: m.exec_ms * (per_core - 1.0).max(0.0),
        ..m
    }
}

/// A node without a fresh report: every capacity free but for the `sent` calls this edge
/// placed there and no warm instance, so only a new instance is feasible and the policy weighs
/// its cold start (pessimistic for functions it keeps warm).
fn empty(spec: NodeSpec, m: Measured, sent: usize) -> Candidate {
    let m = shared(m, sent, spec.cores);
    Candidate {
        node: spec,
        free_cores: (spec.cores - sent as f64).max(0.0),
        free_memory_mb: spec.memory_mb,
        evictable_memory_mb: 0.0,
        blocked_cold_ms: 0.0,
        idle: 0,
        busy: 0,
        wait_ms: 0.0,
        measured: Some(m),
    }
}

/// A node no action may choose (no fresh report, or the call may not go there).
fn infeasible(spec: NodeSpec) -> Candidate {
    Candidate {
        node: spec,
        free_cores: 0.0,
        free_memory_mb: 0.0,
        evictable_memory_mb: 0.0,
        blocked_cold_ms: 0.0,
        idle: 0,
        busy: 0,
        wait_ms: 0.0,
        measured: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn greedy_at_tu_berlin() -> EdgeScheduler {
        let text = include_str!("../../examples/berlin.toml")
            .replace("policy = \"none\"", "policy = \"greedy\"");
        let topology =
            Topology::parse(&text, "berlin.toml", std::path::Path::new("../examples")).unwrap();
        EdgeScheduler::from_topology(
            &topology,
            &topology.service_map().unwrap(),
            "tu-berlin",
            Arc::default(),
            Arc::default(),
        )
        .unwrap()
        .expect("a policy")
    }

    /// Berlin at tu-berlin with each node's `cores` as `bench/scheduler/compare.sh` gives them
    /// (the edges 1, the cloud 2), and a board for the other nodes' reports.
    fn small_fleet_at_tu_berlin() -> (EdgeScheduler, Topology, Arc<LoadBoard>) {
        let mut text = include_str!("../../examples/berlin.toml")
            .replace("policy = \"none\"", "policy = \"greedy\"");
        for (id, cores) in [("tu-berlin", 1), ("potsdam", 1), ("cloud", 2)] {
            let line = format!("id = \"{id}\"\n");
            text = text.replace(&line, &format!("{line}cores = {cores}\n"));
        }
        let topology =
            Topology::parse(&text, "berlin.toml", std::path::Path::new("../examples")).unwrap();
        let loads = Arc::new(LoadBoard::default());
        let s = EdgeScheduler::from_topology(
            &topology,
            &topology.service_map().unwrap(),
            "tu-berlin",
            loads.clone(),
            Arc::default(),
        )
        .unwrap()
        .expect("a policy");
        (s, topology, loads)
    }

    /// A fresh report of `node`: `running` calls, one idle `sievehard` instance (400 ms).
    fn report(node: &str, running: usize) -> LoadReport {
        let mut functions = std::collections::BTreeMap::new();
        functions.insert(
            "sievehard".to_owned(),
            geofaas_fleet::FunctionLoad { idle: 1, busy: 0 },
        );
        LoadReport {
            node: node.to_owned(),
            at_ms: now_ms(),
            load: geofaas_fleet::NodeLoad {
                running,
                functions,
                ..Default::default()
            },
            cpu_percent: 0.0,
            memory_bytes: 0,
        }
    }

    const BUSY_HERE: LocalState = LocalState {
        in_flight: 1,
        admitted: true,
        may_forward: true,
    };

    #[test]
    fn calls_placed_on_another_node_count_there_until_they_come_back() {
        let (s, topology, loads) = small_fleet_at_tu_berlin();
        loads.put(report("potsdam", 0));
        loads.put(report("cloud", 0));
        let decide = || {
            s.decide(&topology, &[], "sievehard", None, BUSY_HERE)
                .expect("a placement")
        };
        // Its one core busy, tu-berlin sends the call to Potsdam's idle core, next door.
        let first = decide();
        assert_eq!(first.placement, Placement::Neighbor(0));
        let on_its_way = s.sending(first.placement).expect("placed elsewhere");
        // Potsdam's report still shows it idle, but the call just sent holds its one core: a
        // second would share it and take twice as long, the cloud is 30 ms away.
        assert_eq!(decide().placement, Placement::Cloud);
        let to_the_cloud = s.sending(Placement::Cloud);
        // Back: Potsdam is free again.
        drop(on_its_way);
        assert_eq!(decide().placement, Placement::Neighbor(0));
        drop(to_the_cloud);
        // A call here is not counted anywhere.
        assert!(s.sending(Placement::Reuse).is_none());
    }

    #[test]
    fn before_a_warm_call_here_another_nodes_warm_time_bounds_this_edges() {
        let (s, _, loads) = small_fleet_at_tu_berlin();
        // One call here, which started an instance: 5 ms, then a 100 ms first run.
        s.book.local_call("f", 100.0, Some(5.0));
        let first = s.book.facts("f").expect("measured");
        loads.put(report("cloud", 0));
        assert_eq!(
            s.warm_elsewhere(first, "f"),
            first,
            "no other figure: as measured"
        );
        // The cloud measured it warm over enough calls: 3 ms, scaled by the clocks.
        let mut r = report("cloud", 0);
        let facts = geofaas_fleet::FunctionFacts {
            calls: PRIOR_CALLS,
            warm_ms: 3.0,
            cold_ms: None,
            memory_mb: None,
        };
        r.load.profiles.insert("f".to_owned(), facts);
        loads.put(r);
        let f = s.warm_elsewhere(first, "f");
        let warm = 3.0 * s.cloud.ghz / s.here.ghz;
        assert!((f.warm_ms - warm).abs() < 1e-9, "{f:?}");
        assert!(f.cold_ms.is_some_and(|c| (c - (105.0 - warm)).abs() < 1e-9));
    }

    #[test]
    fn a_node_with_more_calls_than_cores_is_predicted_slower_by_as_many() {
        let (s, topology, loads) = small_fleet_at_tu_berlin();
        loads.put(report("cloud", 0));
        let idle_cloud = s
            .decide(&topology, &[], "sievehard", None, BUSY_HERE)
            .unwrap();
        assert_eq!(idle_cloud.placement, Placement::Cloud);
        // Two calls already on the cloud's two cores, one of its instances idle: no core is
        // free, so the call shares them with the two (3 calls on 2 cores), half a call alone
        // longer (still faster than sharing tu-berlin's one core with its one call).
        let mut busy = report("cloud", 2);
        busy.load.functions.insert(
            "sievehard".to_owned(),
            geofaas_fleet::FunctionLoad { idle: 1, busy: 1 },
        );
        loads.put(busy);
        let busy_cloud = s
            .decide(&topology, &[], "sievehard", None, BUSY_HERE)
            .unwrap();
        assert_eq!(busy_cloud.placement, Placement::Cloud);
        let profile = FunctionProfile::from(topology.function("sievehard").unwrap());
        let exec = compute_ms(&profile, s.cloud.ghz);
        let extra = busy_cloud.predicted_ms - idle_cloud.predicted_ms;
        assert!((extra - exec * 0.5).abs() < 1e-9, "{extra} against {exec}");
    }

    #[test]
    fn a_reports_calls_finish_at_cores_per_call_time_after_it_was_measured() {
        // Four calls of 100 ms on two cores: one done every 50 ms, all after 200.
        assert_eq!(still_there(4, 0.0, 2.0, 100.0), 4);
        assert_eq!(still_there(4, 49.0, 2.0, 100.0), 4);
        assert_eq!(still_there(4, 50.0, 2.0, 100.0), 3);
        assert_eq!(still_there(4, 100.0, 2.0, 100.0), 2);
        assert_eq!(still_there(4, 250.0, 2.0, 100.0), 0);
        assert_eq!(still_there(4, 5000.0, 1.0, 100.0), 0);
        // No figure of the call's time: the report's calls are not held against the node.
        assert_eq!(still_there(4, 10.0, 2.0, 0.0), 0);
    }

    #[test]
    fn shared_cores_add_the_calls_per_core_beyond_one() {
        let m = Measured {
            cold_ms: 5.0,
            exec_ms: 100.0,
            link_ms: 10.0,
            queue_ms: 0.0,
            calls_per_core: 0.0,
            reuses: 0.0,
        };
        assert_eq!(shared(m, 0, 1.0).queue_ms, 0.0);
        assert_eq!(shared(m, 1, 2.0).queue_ms, 0.0);
        assert_eq!(shared(m, 3, 1.0).queue_ms, 300.0);
        assert_eq!(shared(m, 3, 2.0).queue_ms, 100.0);
        assert_eq!(shared(m, 3, 2.0).exec_ms, 100.0);
    }

    #[test]
    fn only_a_nearly_full_node_blocks_the_idle_instances_of_other_functions() {
        let s = greedy_at_tu_berlin();
        let cold = |name: &str| {
            let (_, p) = s.profiles.iter().find(|(n, _)| n == name).unwrap();
            s.here_cold.cold_ms(p, &s.here, None, None)
        };
        // sieve and echo idle here, sievehard (the call's own function) too.
        let idle = |g: &str| usize::from(g != "nothing");
        let blocked = |left| s.blocked_cold_ms(left, (s.here, s.here_cold), "sievehard", idle);
        assert_eq!(blocked(0.0), cold("sieve") + cold("echo"));
        assert!(blocked(0.0) > 0.0);
        // A core left over is what every function needs: nothing is blocked, nothing looked at.
        assert_eq!(
            s.blocked_cold_ms(1.0, (s.here, s.here_cold), "sievehard", |_| unreachable!()),
            0.0
        );
        // The call cannot run here at all.
        assert_eq!(blocked(-1.0), 0.0);
        // Functions without an idle instance block nothing.
        let only_echo = |g: &str| usize::from(g == "echo");
        assert_eq!(
            s.blocked_cold_ms(0.0, (s.here, s.here_cold), "sievehard", only_echo),
            cold("echo")
        );
    }
}
