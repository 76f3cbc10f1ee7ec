//! PPO training in dfdx (feature `train`): actor-critic over the masked option slots of
//! [`crate::features`], GAE, clipped surrogate, entropy bonus, global gradient-norm clipping,
//! seeded and reproducible; rollouts and evaluation use the plain-Rust [`PpoPolicy`] so the
//! policy that ships is exactly the one that was evaluated.

use dfdx::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::error::Result;
use crate::features::{featurize, GLOBAL_FEATURES, OPT_FEATURES, SLOTS};
use crate::metrics::Summary;
use crate::ppo::{Dense, Mlp, PpoPolicy};
use crate::sim::{SimConfig, Simulator};
use crate::topology::Topology;
use crate::workload::{Workload, WorkloadConfig};

/// Hidden width of both networks.
pub const HIDDEN: usize = 16;
type ActorNet = (
    Linear<OPT_FEATURES, HIDDEN>,
    Tanh,
    Linear<HIDDEN, HIDDEN>,
    Tanh,
    Linear<HIDDEN, 1>,
);
type CriticNet = (
    Linear<GLOBAL_FEATURES, HIDDEN>,
    Tanh,
    Linear<HIDDEN, HIDDEN>,
    Tanh,
    Linear<HIDDEN, 1>,
);
type Actor = <ActorNet as BuildOnDevice<Cpu, f32>>::Built;
type Critic = <CriticNet as BuildOnDevice<Cpu, f32>>::Built;

/// PPO hyper-parameters and the training workload.
#[derive(Debug, Clone, PartialEq)]
pub struct PpoConfig {
    /// Seed of network init, sampling, shuffling and training workloads.
    pub seed: u64,
    /// PPO iterations (rollout + update).
    pub iterations: usize,
    /// Episodes (one generated workload each) per iteration.
    pub episodes_per_iter: usize,
    /// Optimisation epochs over each rollout.
    pub epochs: usize,
    /// Minibatch size (steps).
    pub minibatch: usize,
    /// Adam learning rate.
    pub lr: f64,
    /// Discount factor.
    pub gamma: f32,
    /// GAE lambda.
    pub lam: f32,
    /// Clip range of the probability ratio.
    pub clip: f32,
    /// Entropy bonus weight.
    pub ent_coef: f32,
    /// Largest global gradient norm.
    pub max_grad_norm: f32,
    /// Reward = -(latency / `reward_scale_ms`) - `slo_penalty` if over the SLO.
    pub reward_scale_ms: f64,
    /// Extra penalty per SLO violation, in reward units.
    pub slo_penalty: f64,
    /// Weight of the blocked-container charge (`train/blame.rs`): the latency a request pays
    /// beyond an idle warm container it could not use for want of cores is charged, times
    /// this, to the decisions holding those cores. 0 (the default) charges nothing.
    pub blame: f64,
    /// Largest excess latency charged per blocked request, ms.
    pub blame_cap_ms: f64,
    /// Evaluate every this many iterations (and after the last).
    pub eval_every: usize,
    /// Held-out workload seeds for evaluation (validation; keep apart from test seeds).
    pub eval_seeds: Vec<u64>,
    /// Keep the checkpoint with the lowest `max(mean / greedy mean, P99 / greedy P99)` on the
    /// evaluation seeds instead of the lowest mean.
    pub select_on_p99: bool,
    /// Shape of each training/eval workload (its seed is replaced per episode).
    pub workload: WorkloadConfig,
    /// Functions in the catalogue and the catalogue's seed.
    pub functions: (usize, u64),
    /// Simulator parameters.
    pub sim: SimConfig,
}

impl Default for PpoConfig {
    fn default() -> Self {
        Self {
            seed: 1,
            iterations: 40,
            episodes_per_iter: 4,
            epochs: 4,
            minibatch: 256,
            lr: 1e-3,
            gamma: 0.9,
            lam: 0.95,
            clip: 0.2,
            ent_coef: 0.003,
            max_grad_norm: 0.5,
            reward_scale_ms: 100.0,
            slo_penalty: 1.0,
            blame: 0.0,
            blame_cap_ms: 2000.0,
            eval_every: 5,
            eval_seeds: crate::eval::VALIDATION_SEEDS.to_vec(),
            select_on_p99: false,
            workload: WorkloadConfig {
                requests: 512,
                ..Default::default()
            },
            functions: (200, 7),
            sim: SimConfig::default(),
        }
    }
}

/// One line of the training metrics CSV.
#[derive(Debug, Clone, PartialEq)]
pub struct IterMetrics {
    /// Iteration (1-based).
    pub iteration: usize,
    /// Environment steps so far.
    pub steps: usize,
    /// Mean undiscounted episode return of this iteration's rollouts.
    pub mean_return: f64,
    /// Mean latency of this iteration's rollouts, ms.
    pub train_mean_ms: f64,
    /// Clipped surrogate loss (last minibatch).
    pub policy_loss: f32,
    /// Value loss (last minibatch).
    pub value_loss: f32,
    /// Policy entropy (last minibatch).
    pub entropy: f32,
    /// Held-out evaluation, when run this iteration.
    pub eval: Option<Summary>,
}

impl IterMetrics {
    /// CSV header.
    pub const CSV_HEADER: &'static str =
        "iteration,steps,mean_return,train_mean_ms,policy_loss,value_loss,entropy,eval_mean_ms,eval_p99_ms,eval_slo_violation";

    /// One CSV row (eval columns empty when not evaluated).
    pub fn csv_row(&self) -> String {
        let e = self.eval.as_ref().map_or(",,".to_owned(), |s| {
            format!("{:.3},{:.3},{:.5}", s.mean_ms, s.p99_ms, s.slo_violation)
        });
        format!(
            "{},{},{:.4},{:.3},{:.5},{:.5},{:.5},{e}",
            self.iteration,
            self.steps,
            self.mean_return,
            self.train_mean_ms,
            self.policy_loss,
            self.value_loss,
            self.entropy
        )
    }
}

/// What training returns: the best policy on the evaluation seeds and the per-iteration log.
#[derive(Debug, Clone)]
pub struct TrainReport {
    /// The policy with the best held-out score seen (see [`PpoConfig::select_on_p99`]).
    pub policy: PpoPolicy,
    /// Per-iteration metrics.
    pub metrics: Vec<IterMetrics>,
}

/// Rollout buffer, one entry per decision.
#[derive(Default)]
struct Buffer {
    options: Vec<f32>,
    mask: Vec<f32>,
    global: Vec<f32>,
    action: Vec<usize>,
    logp: Vec<f32>,
    value: Vec<f32>,
    reward: Vec<f32>,
    done: Vec<bool>,
}

fn dense<const I: usize, const O: usize>(l: &dfdx::nn::modules::Linear<I, O, f32, Cpu>) -> Dense {
    Dense {
        inputs: I,
        outputs: O,
        weight: l.weight.as_vec(),
        bias: l.bias.as_vec(),
    }
}

fn export(actor: &Actor, critic: &Critic, link: crate::model::LinkModel) -> PpoPolicy {
    let a = Mlp {
        layers: vec![dense(&actor.0), dense(&actor.2), dense(&actor.4)],
    };
    let c = Mlp {
        layers: vec![dense(&critic.0), dense(&critic.2), dense(&critic.4)],
    };
    PpoPolicy::new(link, a, c)
}

/// Builds the workload of `seed` for this configuration.
pub fn workload_for(topo: &Topology, cfg: &PpoConfig, seed: u64) -> Workload {
    Workload::for_topology(
        topo,
        cfg.functions,
        &WorkloadConfig {
            seed,
            ..cfg.workload.clone()
        },
    )
}

/// Evaluates `policy` on the given workload seeds (outcomes concatenated).
pub fn evaluate(
    topo: &Topology,
    cfg: &PpoConfig,
    policy: &dyn crate::Policy,
    seeds: &[u64],
) -> Summary {
    let mut all = Vec::new();
    for &s in seeds {
        let wl = workload_for(topo, cfg, s);
        all.extend(Simulator::run(topo, &wl, cfg.sim, policy));
    }
    Summary::new(policy.name(), &all)
}

mod blame;
mod update;

/// Trains a PPO policy on `topo`; `on_iter` sees each iteration's metrics (progress bars).
pub fn train(
    topo: &Topology,
    cfg: &PpoConfig,
    mut on_iter: impl FnMut(&IterMetrics),
) -> Result<TrainReport> {
    let dev = Cpu::seed_from_u64(cfg.seed);
    let mut actor = dev.build_module::<ActorNet, f32>();
    let mut critic = dev.build_module::<CriticNet, f32>();
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed ^ 0x9e37_79b9);
    let mut opt = update::Optimisers::new(&actor, &critic, cfg.lr);
    let mut best: Option<(f64, PpoPolicy)> = None;
    let base = if cfg.select_on_p99 {
        let greedy = crate::baselines::GreedyPolicy::new(cfg.sim.link);
        evaluate(topo, cfg, &greedy, &cfg.eval_seeds)
    } else {
        Summary::new("none", &[])
    };
    let score = |s: &Summary| {
        if cfg.select_on_p99 {
            (s.mean_ms / base.mean_ms).max(s.p99_ms / base.p99_ms)
        } else {
            s.mean_ms
        }
    };
    let mut metrics = Vec::new();
    let mut steps = 0;
    for it in 1..=cfg.iterations {
        let policy = export(&actor, &critic, cfg.sim.link);
        let (buf, mean_return, train_mean_ms) = rollout(topo, cfg, &policy, it, &mut rng);
        steps += buf.action.len();
        let (pl, vl, ent) = opt.update(&dev, &mut actor, &mut critic, &buf, cfg, &mut rng);
        let mut m = IterMetrics {
            iteration: it,
            steps,
            mean_return,
            train_mean_ms,
            policy_loss: pl,
            value_loss: vl,
            entropy: ent,
            eval: None,
        };
        if it % cfg.eval_every.max(1) == 0 || it == cfg.iterations {
            let p = export(&actor, &critic, cfg.sim.link);
            let s = evaluate(topo, cfg, &p, &cfg.eval_seeds);
            if best.as_ref().is_none_or(|(b, _)| score(&s) < *b) {
                best = Some((score(&s), p));
            }
            m.eval = Some(s);
        }
        on_iter(&m);
        metrics.push(m);
    }
    let policy = best
        .map(|(_, p)| p)
        .unwrap_or_else(|| export(&actor, &critic, cfg.sim.link));
    Ok(TrainReport { policy, metrics })
}

/// Runs `episodes_per_iter` episodes with the stochastic policy; returns the buffer (with
/// advantages' inputs), mean episode return and mean latency.
fn rollout(
    topo: &Topology,
    cfg: &PpoConfig,
    policy: &PpoPolicy,
    it: usize,
    rng: &mut ChaCha8Rng,
) -> (Buffer, f64, f64) {
    let mut buf = Buffer::default();
    let (mut ret, mut lat, mut n) = (0.0, 0.0, 0usize);
    for ep in 0..cfg.episodes_per_iter {
        let seed = crate::eval::training_seed(cfg.seed, it, cfg.episodes_per_iter, ep);
        let wl = workload_for(topo, cfg, seed);
        let mut sim = Simulator::new(topo, &wl, cfg.sim);
        sim.warm_up();
        let mut blame = blame::Blame::new(topo.nodes.len());
        while let Some(obs) = sim.next_observation() {
            let now = wl.requests[wl.requests.len() - sim.remaining()].arrival_ms;
            let f = featurize(&cfg.sim.link, &obs);
            if f.is_empty() {
                sim.step(None, 0);
                continue;
            }
            let logits = policy.logits(&f);
            let mx = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let z: f32 = logits.iter().map(|l| (l - mx).exp()).sum();
            let u: f32 = rng.gen::<f32>() * z;
            let (mut acc, mut slot) = (0.0, 0);
            for (i, l) in logits.iter().enumerate() {
                if f.actions[i].is_none() {
                    continue;
                }
                slot = i;
                acc += (l - mx).exp();
                if acc >= u {
                    break;
                }
            }
            let o = sim.step(f.actions[slot], 0);
            let r = -(o.latency.total() / cfg.reward_scale_ms)
                - if o.violates_slo() {
                    cfg.slo_penalty
                } else {
                    0.0
                };
            ret += r;
            lat += o.latency.total();
            n += 1;
            buf.options.extend(f.options.iter().flatten());
            buf.mask.extend(
                f.actions
                    .iter()
                    .map(|a| if a.is_some() { 0.0 } else { -1e9 }),
            );
            buf.global.extend(f.global);
            buf.action.push(slot);
            buf.logp.push(logits[slot] - mx - z.ln());
            buf.value.push(policy.value(&f));
            buf.reward.push(r as f32);
            buf.done.push(sim.remaining() == 0);
            if cfg.blame > 0.0 {
                let lat = o.latency.total();
                blame.charge(
                    &cfg.sim.link,
                    &obs,
                    now,
                    lat,
                    &mut buf.reward,
                    cfg.blame,
                    cfg.reward_scale_ms,
                    cfg.blame_cap_ms,
                );
                if let (Some(node), Some(a)) = (o.node, f.actions[slot]) {
                    if o.cold || !obs.queues(a) {
                        blame.hold(node, now, now + lat, buf.reward.len() - 1);
                    }
                }
            }
        }
        if let Some(d) = buf.done.last_mut() {
            *d = true;
        }
    }
    let eps = cfg.episodes_per_iter.max(1) as f64;
    (buf, ret / eps, lat / n.max(1) as f64)
}
