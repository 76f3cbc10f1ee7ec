//! The live scheduler of an edge: before running a call, ask a placement [`Policy`] whether to
//! serve it here (in a warm or a new instance) or to offload it to the cloud at once.
//!
//! The observation has two candidates: this edge, with its local pool's live counts, and the
//! cloud, of which the edge knows nothing live. Node capacities are the scheduler's defaults for
//! a topology file (`geofaas_scheduler::topology::Topology::from_config`: edges 8 cores, 16 GB,
//! 3 GHz, 1 Gbit/s; the cloud 64 cores, 256 GB, 10 Gbit/s, 12.5 ms access delay).

use std::sync::Arc;

use geofaas_config::{LatLon, SchedulerPolicy, Topology};
use geofaas_functions::{FunctionBackend, PoolStats};
use geofaas_scheduler::baselines::GreedyPolicy;
use geofaas_scheduler::model::{compute_ms, FunctionProfile, GeoPoint, LinkModel, NodeSpec};
use geofaas_scheduler::ppo::PpoPolicy;
use geofaas_scheduler::{Candidate, Observation, Policy, RequestInfo};

/// Where the policy wants a call to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Here, in an idle warm instance (or queued behind a busy one).
    Reuse,
    /// Here, in a new instance.
    New,
    /// In the cloud, now.
    Cloud,
}

/// A policy with the two nodes it chooses between.
pub struct EdgeScheduler {
    policy: Arc<dyn Policy>,
    here: NodeSpec,
    cloud: NodeSpec,
}

impl std::fmt::Debug for EdgeScheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EdgeScheduler")
            .field("policy", &self.policy.name())
            .finish_non_exhaustive()
    }
}

impl EdgeScheduler {
    /// The scheduler the topology asks for at edge `id`; `None` for policy `none`.
    pub fn from_topology(topology: &Topology, id: &str) -> anyhow::Result<Option<Self>> {
        let link = LinkModel::default();
        let policy: Arc<dyn Policy> = match topology.scheduler.policy {
            SchedulerPolicy::None => return Ok(None),
            SchedulerPolicy::Greedy => Arc::new(GreedyPolicy::new(link)),
            SchedulerPolicy::Ppo => {
                let bytes = geofaas_scheduler::cli::shipped_weights("berlin")
                    .ok_or_else(|| anyhow::anyhow!("no shipped PPO weights"))?;
                Arc::new(PpoPolicy::from_bytes(bytes, link)?)
            }
        };
        let specs = geofaas_scheduler::topology::Topology::from_config(topology)?;
        let spec_of = |node: &str| {
            specs
                .ids
                .iter()
                .position(|i| i == node)
                .map(|i| specs.nodes[i])
        };
        let here = spec_of(id).ok_or_else(|| anyhow::anyhow!("no node {id:?}"))?;
        let cloud_id = topology
            .nodes
            .iter()
            .find(|n| n.role == geofaas_config::Role::Cloud)
            .map(|n| n.id.as_str())
            .ok_or_else(|| anyhow::anyhow!("topology has no cloud node"))?;
        let cloud = spec_of(cloud_id).ok_or_else(|| anyhow::anyhow!("no node {cloud_id:?}"))?;
        Ok(Some(Self {
            policy,
            here,
            cloud,
        }))
    }

    /// The policy's name (`greedy`, `ppo`).
    pub fn name(&self) -> &str {
        self.policy.name()
    }

    /// Decides a call of `function` from a client at `source` (this node's location when the
    /// client's is unknown) with `in_flight` other calls running here; `None` when the topology
    /// has no profile for the function or the policy finds no feasible placement.
    pub fn decide(
        &self,
        topology: &Topology,
        backends: &[Arc<dyn FunctionBackend>],
        function: &str,
        source: Option<LatLon>,
        in_flight: usize,
    ) -> Option<Placement> {
        let (function_id, f) = topology
            .functions
            .iter()
            .enumerate()
            .find(|(_, f)| f.name == function)?;
        let profile = FunctionProfile::from(f);
        let stats = backends.iter().find_map(|b| b.stats(function));
        let here = self.local(&profile, stats, in_flight);
        let obs = Observation {
            request: RequestInfo {
                function_id,
                source: source.map_or(self.here.location, |l| GeoPoint::new(l.lat, l.lon)),
                input_kb: f.input_kb,
                slo_ms: f.slo_ms,
                profile,
            },
            candidates: vec![here, self.remote()],
        };
        let action = self.policy.decide(&obs)?;
        Some(match (action.candidate, action.new_container) {
            (0, false) => Placement::Reuse,
            (0, true) => Placement::New,
            _ => Placement::Cloud,
        })
    }

    /// This edge: cores less the calls running here (one core each, as the model assumes);
    /// instances of the function from its pool. A pool at its instance limit cannot start one
    /// (no memory to offer); a busy instance frees after about the function's compute time.
    fn local(&self, p: &FunctionProfile, stats: Option<PoolStats>, in_flight: usize) -> Candidate {
        let s = stats.unwrap_or(PoolStats {
            idle: 0,
            busy: 0,
            max: usize::MAX,
        });
        let full = s.idle + s.busy >= s.max;
        let held = (s.idle + s.busy) as f64 * p.memory_mb;
        Candidate {
            node: self.here,
            free_cores: (self.here.cores - in_flight as f64).max(0.0),
            free_memory_mb: if full {
                0.0
            } else {
                (self.here.memory_mb - held).max(0.0)
            },
            evictable_memory_mb: 0.0,
            idle: u32::try_from(s.idle).unwrap_or(u32::MAX),
            busy: u32::try_from(s.busy).unwrap_or(u32::MAX),
            wait_ms: compute_ms(p, self.here.ghz),
        }
    }

    /// The cloud: the edge has no live view of it, so it is taken as empty (all capacity free)
    /// and without a warm instance (only a new instance is feasible, so the policy weighs the
    /// cloud's cold start), which is pessimistic for busy functions the cloud keeps warm.
    fn remote(&self) -> Candidate {
        Candidate {
            node: self.cloud,
            free_cores: self.cloud.cores,
            free_memory_mb: self.cloud.memory_mb,
            evictable_memory_mb: 0.0,
            idle: 0,
            busy: 0,
            wait_ms: 0.0,
        }
    }
}
