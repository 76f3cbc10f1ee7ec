//! The trained PPO actor as a [`Policy`]: a small MLP evaluated in plain Rust over weights read
//! from a safetensors file, so the gateway's hot path needs no dfdx (a few µs per decision).
//!
//! File layout (written by `train`): `actor.{0,2,4}.{weight,bias}` and `critic.{0,2,4}.{weight,bias}`,
//! f32, weight shape `[out, in]`, tanh between layers; the metadata records the feature layout.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use safetensors::SafeTensors;

use crate::error::{Result, SchedulerError};
use crate::features::{featurize, Featurized, GLOBAL_FEATURES, OPT_FEATURES, SLOTS};
use crate::model::LinkModel;
use crate::policy::{Action, Measured, Observation, Policy};

/// Feature-layout version stored in the weights' metadata.
pub const FEATURES_VERSION: &str = "2";

/// A dense layer, weight row-major `[out][in]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Dense {
    /// Input width.
    pub inputs: usize,
    /// Output width.
    pub outputs: usize,
    /// Weights, `outputs * inputs`.
    pub weight: Vec<f32>,
    /// Biases, `outputs`.
    pub bias: Vec<f32>,
}

impl Dense {
    /// `out = W x + b`, then tanh if `activate`.
    fn apply(&self, x: &[f32], out: &mut [f32], activate: bool) {
        for ((o, row), b) in out
            .iter_mut()
            .zip(self.weight.chunks_exact(self.inputs))
            .zip(&self.bias)
        {
            let v = dot(row, x) + b;
            *o = if activate { tanh(v) } else { v };
        }
    }
}

/// `tanh` through one `exp` (a short Taylor series near 0, where `1 - 2/(e^2x + 1)` would lose
/// digits): within 1e-6 relative of `f32::tanh`, at about a third of libm's `tanhf` time, which
/// was most of a PPO decision (256 per decision: eight options, two hidden layers of 16).
fn tanh(x: f32) -> f32 {
    let a = x.abs();
    let t = if a < 0.125 {
        let a2 = a * a;
        a * (1.0 + a2 * (-1.0 / 3.0 + a2 * (2.0 / 15.0 - a2 * (17.0 / 315.0))))
    } else if a > 9.0 {
        1.0
    } else {
        1.0 - 2.0 / ((2.0 * a).exp() + 1.0)
    };
    t.copysign(x)
}

/// Dot product with 8 independent accumulators, so the compiler can vectorise it.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let mut acc = [0.0f32; 8];
    let (ca, cb) = (a[..n].chunks_exact(8), b[..n].chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for j in 0..8 {
            acc[j] += x[j] * y[j];
        }
    }
    acc.iter().sum::<f32>() + ra.iter().zip(rb).map(|(x, y)| x * y).sum::<f32>()
}

/// Widest layer the allocation-free forward pass handles.
pub const MAX_WIDTH: usize = 64;

/// A tanh MLP: dense layers with tanh between them and none after the last.
#[derive(Debug, Clone, PartialEq)]
pub struct Mlp {
    /// The layers in order.
    pub layers: Vec<Dense>,
}

impl Mlp {
    /// Evaluates the network on `x` (its length must be the first layer's input width).
    pub fn forward(&self, x: &[f32]) -> Vec<f32> {
        let mut cur = x.to_vec();
        for (i, l) in self.layers.iter().enumerate() {
            let mut next = vec![0.0; l.outputs];
            l.apply(&cur, &mut next, i + 1 < self.layers.len());
            cur = next;
        }
        cur
    }

    /// The first output, without heap allocation when every layer is at most [`MAX_WIDTH`]
    /// wide (the decision hot path); falls back to [`Mlp::forward`] otherwise.
    pub fn forward1(&self, x: &[f32]) -> f32 {
        if x.len() > MAX_WIDTH || self.layers.iter().any(|l| l.outputs > MAX_WIDTH) {
            return self.forward(x)[0];
        }
        let (mut a, mut b) = ([0.0f32; MAX_WIDTH], [0.0f32; MAX_WIDTH]);
        a[..x.len()].copy_from_slice(x);
        let mut width = x.len();
        for (i, l) in self.layers.iter().enumerate() {
            l.apply(&a[..width], &mut b[..l.outputs], i + 1 < self.layers.len());
            width = l.outputs;
            std::mem::swap(&mut a, &mut b);
        }
        a[0]
    }

    /// Reads `prefix.{0,2,4}.{weight,bias}` from a safetensors file.
    fn read(st: &SafeTensors<'_>, prefix: &str, inputs: usize) -> Result<Self> {
        let mut layers = Vec::new();
        let mut width = inputs;
        for idx in [0, 2, 4] {
            let get = |name: &str| -> Result<(Vec<usize>, Vec<f32>)> {
                let key = format!("{prefix}.{idx}.{name}");
                let t = st
                    .tensor(&key)
                    .map_err(|e| SchedulerError::Weights(format!("{key}: {e}")))?;
                if t.dtype() != safetensors::Dtype::F32 {
                    return Err(SchedulerError::Weights(format!("{key}: not f32")));
                }
                let data = t
                    .data()
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect();
                Ok((t.shape().to_vec(), data))
            };
            let (ws, weight) = get("weight")?;
            let (_, bias) = get("bias")?;
            if ws.len() != 2 || ws[1] != width || bias.len() != ws[0] {
                return Err(SchedulerError::Weights(format!(
                    "{prefix}.{idx}: shape {ws:?}, expected [_, {width}]"
                )));
            }
            layers.push(Dense {
                inputs: ws[1],
                outputs: ws[0],
                weight,
                bias,
            });
            width = ws[0];
        }
        if width != 1 {
            return Err(SchedulerError::Weights(format!(
                "{prefix}: output width {width} != 1"
            )));
        }
        Ok(Self { layers })
    }
}

/// Lanes of the decision kernel: a layer's outputs are computed 16 at a time.
const LANES: usize = 16;

/// A network repacked for the decision hot path ([`Policy::decide`]): each hidden layer's
/// weights transposed into blocks of [`LANES`] outputs (padded with zeros), so one input times
/// one block is a fixed-width multiply-add the compiler vectorises, and tanh runs over a whole
/// block ([`tanh_lanes`]); of the last layer only the first output's row is kept, as one dot
/// product. It computes what [`Mlp::forward1`] computes, with another summation order and tanh
/// (within 1e-5, tested). Training keeps [`Mlp`]'s arithmetic so that its results reproduce bit
/// for bit.
#[derive(Debug, Clone, PartialEq)]
struct Lanes {
    hidden: Vec<LaneLayer>,
    /// The last layer's first row, padded to whole lanes.
    out_weight: Vec<[f32; LANES]>,
    out_bias: f32,
}

/// A hidden layer: `bias[b]` and the block-major weights `weight[b * inputs + i][l]` =
/// W[b * LANES + l][i] of each block `b` of outputs.
#[derive(Debug, Clone, PartialEq)]
struct LaneLayer {
    inputs: usize,
    weight: Vec<[f32; LANES]>,
    bias: Vec<[f32; LANES]>,
}

/// Blocks of the widest layer [`Lanes`] handles (64 outputs).
const MAX_BLOCKS: usize = MAX_WIDTH / LANES;

impl Lanes {
    /// The repacked network; `None` when a layer is wider than [`MAX_WIDTH`].
    fn new(mlp: &Mlp) -> Option<Self> {
        let (last, hidden) = mlp.layers.split_last()?;
        if mlp
            .layers
            .iter()
            .any(|l| l.inputs > MAX_WIDTH || l.outputs > MAX_WIDTH)
        {
            return None;
        }
        let hidden = hidden
            .iter()
            .map(|l| {
                let blocks = l.outputs.div_ceil(LANES);
                let mut weight = vec![[0.0; LANES]; l.inputs * blocks];
                let mut bias = vec![[0.0; LANES]; blocks];
                for (o, row) in l.weight.chunks_exact(l.inputs).enumerate() {
                    let (b, lane) = (o / LANES, o % LANES);
                    bias[b][lane] = l.bias[o];
                    for (i, w) in row.iter().enumerate() {
                        weight[b * l.inputs + i][lane] = *w;
                    }
                }
                LaneLayer {
                    inputs: l.inputs,
                    weight,
                    bias,
                }
            })
            .collect();
        let mut out_weight = vec![[0.0; LANES]; last.inputs.div_ceil(LANES)];
        out_weight.as_flattened_mut()[..last.inputs].copy_from_slice(&last.weight[..last.inputs]);
        Some(Self {
            hidden,
            out_weight,
            out_bias: last.bias[0],
        })
    }

    /// The first output for input `x` (as long as the first layer's input width).
    fn forward1(&self, x: &[f32]) -> f32 {
        let (mut a, mut b) = ([[0.0f32; LANES]; MAX_BLOCKS], [[0.0f32; LANES]; MAX_BLOCKS]);
        let (mut cur, mut next) = (&mut a, &mut b);
        cur.as_flattened_mut()[..x.len()].copy_from_slice(x);
        for l in &self.hidden {
            let input = &cur.as_flattened()[..l.inputs];
            let rows = l.weight.chunks_exact(l.inputs);
            for ((out, w), bias) in next.iter_mut().zip(rows).zip(&l.bias) {
                *out = block(input, w, bias);
                tanh_lanes(out);
            }
            std::mem::swap(&mut cur, &mut next);
        }
        // Lanes past the last hidden width are 0 in `cur` and in the padded row.
        let mut acc = [0.0f32; LANES];
        for (x, w) in cur.iter().zip(&self.out_weight) {
            for lane in 0..LANES {
                acc[lane] += x[lane] * w[lane];
            }
        }
        self.out_bias + acc.iter().sum::<f32>()
    }
}

/// One block of a layer's outputs: `bias + Σ x[i] · weight[i]`, lane by lane (vectorised).
fn block(x: &[f32], weight: &[[f32; LANES]], bias: &[f32; LANES]) -> [f32; LANES] {
    let mut acc = *bias;
    for (xi, w) in x.iter().zip(weight) {
        for lane in 0..LANES {
            acc[lane] += xi * w[lane];
        }
    }
    acc
}

/// tanh of every lane, branch-free so that it vectorises: `e / (e + 2)` with `e = expm1(2|x|)`,
/// from `2|x| = n ln 2 + r` (|r| <= ln 2 / 2), a degree-7 Taylor series of `expm1(r)` and
/// `2^n` built from its exponent bits; `|x|` is capped at 9, where tanh is 1 in `f32`.
/// Within 1e-6 relative of `f32::tanh` (tested), like the scalar [`tanh`].
fn tanh_lanes(v: &mut [f32; LANES]) {
    const MAGIC: f32 = 12_582_912.0; // 1.5 * 2^23: adding it rounds to an integer
    const LN2_HI: f32 = 0.693_145_75; // ln 2 in 16 bits: n * LN2_HI is exact
    const LN2_LO: f32 = 1.428_606_8e-6;
    for x in v.iter_mut() {
        let a = x.abs();
        // Not `min`: a NaN stays NaN.
        let a = if a > 9.0 { 9.0 } else { a };
        let y = 2.0 * a;
        let t = y * std::f32::consts::LOG2_E + MAGIC;
        let n = t - MAGIC;
        let r = (y - n * LN2_HI) - n * LN2_LO;
        let p = r
            * (1.0
                + r * (0.5
                    + r * (1.0 / 6.0
                        + r * (1.0 / 24.0
                            + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r * (1.0 / 5040.0)))))));
        // t's low mantissa bits hold n (0..=26 here); 2^n from the exponent field.
        let k = t.to_bits().wrapping_sub(MAGIC.to_bits());
        let scale = f32::from_bits(k.wrapping_add(127) << 23);
        let e = scale * p + (scale - 1.0);
        *x = (e / (e + 2.0)).copysign(*x);
    }
}

/// The PPO actor as a policy: picks the highest-scoring unmasked slot (deterministic).
#[derive(Debug, Clone)]
pub struct PpoPolicy {
    link: LinkModel,
    actor: Mlp,
    /// The actor repacked for [`Policy::decide`] (`None`: too wide, decide uses `actor`).
    fast: Option<Lanes>,
    critic: Mlp,
    name: String,
    /// See [`PpoPolicy::with_margin`] (`None`: every feasible slot).
    margin: Option<f64>,
    /// See [`PpoPolicy::with_busy_margin`] (`None`: `margin`).
    busy_margin: Option<f64>,
}

impl PpoPolicy {
    /// A policy from actor and critic networks.
    pub fn new(link: LinkModel, actor: Mlp, critic: Mlp) -> Self {
        Self {
            link,
            fast: Lanes::new(&actor),
            actor,
            critic,
            name: "ppo".into(),
            margin: None,
            busy_margin: None,
        }
    }

    /// Parses safetensors bytes.
    pub fn from_bytes(bytes: &[u8], link: LinkModel) -> Result<Self> {
        let st =
            SafeTensors::deserialize(bytes).map_err(|e| SchedulerError::Weights(e.to_string()))?;
        let actor = Mlp::read(&st, "actor", OPT_FEATURES)?;
        let critic = Mlp::read(&st, "critic", GLOBAL_FEATURES)?;
        Ok(Self::new(link, actor, critic))
    }

    /// Loads a weights file written by `geofaas train`.
    pub fn load(path: &Path, link: LinkModel) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(|e| SchedulerError::io(path, e))?;
        Self::from_bytes(&bytes, link)
    }

    /// The same policy under another name (tables comparing several weights).
    pub fn named(mut self, name: &str) -> Self {
        self.name = name.to_owned();
        self
    }

    /// The same policy choosing only among the options whose estimated latency is within
    /// `margin` (a fraction, e.g. 0.25) of the best option's: where the model cannot tell
    /// options apart (its predictions are off by that much), the actor decides; an option the
    /// model puts clearly behind is never taken. `0` is greedy; a negative or non-finite
    /// margin leaves every option to the actor.
    pub fn with_margin(mut self, margin: f64) -> Self {
        self.margin = (margin.is_finite() && margin >= 0.0).then_some(margin);
        self
    }

    /// The margin of [`PpoPolicy::with_margin`], if any.
    pub fn margin(&self) -> Option<f64> {
        self.margin
    }

    /// Under a margin ([`PpoPolicy::with_margin`]), a narrower one for the options on a busy
    /// node: where the call would share the node's cores with calls already running there
    /// (its measured queueing term is above zero) or wait behind a busy instance. Such an
    /// option slows the calls it joins as well as its own, which the model's latency of this
    /// call does not count, so the actor may take it only this far behind the best; an option
    /// on a node with room keeps the wide margin (a warm call there keeps its instance from
    /// being evicted, a new one starts what later calls reuse). A negative or non-finite
    /// value leaves the one margin for every option.
    pub fn with_busy_margin(mut self, margin: f64) -> Self {
        self.busy_margin = (margin.is_finite() && margin >= 0.0).then_some(margin);
        self
    }

    /// The margin of [`PpoPolicy::with_busy_margin`], if any.
    pub fn busy_margin(&self) -> Option<f64> {
        self.busy_margin
    }

    /// Masks the slots of `f` outside the margins (none without a margin; the best option
    /// never).
    ///
    /// An option is weighed with what sharing its node costs on average, beyond the calls
    /// there at this instant: its time there alone ([`alone_ms`]: with its instance's start,
    /// when it starts one) times the node's calls per core over its last seconds
    /// ([`Measured::calls_per_core`]): the calls it joins run longer by about that
    /// much in all, and so does it while calls arrive. A node busy most of the time is often
    /// idle at the instant a call arrives (at 60 % busy, 40 % of calls find it so); weighed by
    /// the instant alone, the margin let PPO keep up to 60 % of a small edge's long calls there
    /// ahead of a faster cloud, slowing the short calls that came by. Where nothing was
    /// measured (the simulator) the term is 0.
    ///
    /// An option that starts the function's first instance on a node may be the best one (the
    /// one the margins are measured from) by what it saves the calls that will reuse it
    /// ([`reuse_credit`]), where the latency of this call alone puts it behind a warm one
    /// elsewhere; what it saves never widens the margin for it (where it did, PPO started three
    /// times greedy's instances at small edges, most for functions with a call or two in the
    /// last seconds, and its mean came out 1.1x greedy's).
    fn shield(&self, obs: &Observation, f: &mut Featurized) {
        let Some(m) = self.margin else { return };
        let narrow = self.busy_margin.unwrap_or(m);
        let mut costs = [f64::INFINITY; SLOTS];
        for (i, slot) in f.actions.iter().enumerate() {
            if let Some(a) = *slot {
                costs[i] = f.totals[i] - reuse_credit(obs, &f.actions, a, f.totals[i]);
            }
        }
        let (best, _) = costs
            .iter()
            .enumerate()
            .min_by(|x, y| x.1.total_cmp(y.1))
            .map_or((0, f64::INFINITY), |(i, c)| (i, *c));
        for (i, slot) in f.actions.iter_mut().enumerate() {
            let Some(a) = *slot else { continue };
            if i == best {
                continue;
            }
            let measured = obs.candidates[a.candidate].measured;
            let busy = obs.queues(a) || measured.is_some_and(|m| m.queue_ms > 0.0);
            let sharing = measured.map_or(0.0, |m| alone_ms(m, a) * m.calls_per_core);
            if f.totals[i] + sharing > costs[best] * (1.0 + if busy { narrow } else { m }) {
                *slot = None;
            }
        }
    }

    /// The actor network.
    pub fn actor(&self) -> &Mlp {
        &self.actor
    }

    /// The critic network.
    pub fn critic(&self) -> &Mlp {
        &self.critic
    }

    /// Slot scores (masked slots are `-inf`).
    pub fn logits(&self, f: &Featurized) -> [f32; SLOTS] {
        let mut out = [f32::NEG_INFINITY; SLOTS];
        for (i, a) in f.actions.iter().enumerate() {
            if a.is_some() {
                out[i] = self.actor.forward1(&f.options[i]);
            }
        }
        out
    }

    /// The critic's value estimate of a decision state.
    pub fn value(&self, f: &Featurized) -> f32 {
        self.critic.forward1(&f.global)
    }
}

impl Policy for PpoPolicy {
    fn name(&self) -> &str {
        &self.name
    }

    fn decide(&self, obs: &Observation) -> Option<Action> {
        let mut f = featurize(&self.link, obs);
        self.shield(obs, &mut f);
        let Some(fast) = &self.fast else {
            let logits = self.logits(&f);
            return best_slot(&f, &logits);
        };
        let mut logits = [f32::NEG_INFINITY; SLOTS];
        for (i, a) in f.actions.iter().enumerate() {
            if a.is_some() {
                logits[i] = fast.forward1(&f.options[i]);
            }
        }
        best_slot(&f, &logits)
    }
}

/// What option `a` (latency `total`) saves later calls: where it starts the function's first
/// instance on its node, each call expected to reuse it ([`Measured::reuses`]) runs warm there
/// instead of warm at the fastest other node among `options`, when that is slower; never
/// more than brings the option below a warm call there. 0 for every other option.
fn reuse_credit(obs: &Observation, options: &[Option<Action>], a: Action, total: f64) -> f64 {
    let c = &obs.candidates[a.candidate];
    let warm = |m: &Measured| m.exec_ms + m.link_ms + m.queue_ms;
    let Some(here) = c.measured else { return 0.0 };
    // The calls that reuse it run there with the node's calls on average, not alone.
    let warm_here = warm(&here) + here.exec_ms * here.calls_per_core;
    if !a.new_container || c.idle + c.busy > 0 || here.reuses <= 0.0 {
        return 0.0;
    }
    let elsewhere = options
        .iter()
        .flatten()
        .filter(|b| b.candidate != a.candidate)
        .filter_map(|b| obs.candidates[b.candidate].measured.as_ref().map(warm))
        .fold(f64::INFINITY, f64::min);
    let saved = elsewhere - warm_here;
    if !saved.is_finite() || saved <= 0.0 {
        return 0.0;
    }
    (here.reuses * saved).min(total - warm_here).max(0.0)
}

/// The time option `a` holds its node's cores: the call's execution, and the instance's start
/// when it starts one (a start runs on the same cores, and on a small edge it is the longest
/// part: a 140 ms start beside a 4 ms call).
fn alone_ms(m: Measured, a: Action) -> f64 {
    m.exec_ms + if a.new_container { m.cold_ms } else { 0.0 }
}

/// The action of the highest-scoring usable slot (ties: the earlier, cheaper slot).
fn best_slot(f: &Featurized, logits: &[f32; SLOTS]) -> Option<Action> {
    let best = (0..SLOTS)
        .filter(|&i| f.actions[i].is_some())
        .max_by(|&a, &b| logits[a].total_cmp(&logits[b]).then(b.cmp(&a)))?;
    f.actions[best]
}

/// Serialises networks into safetensors bytes (the format [`PpoPolicy::load`] reads).
pub fn to_safetensors(actor: &Mlp, critic: &Mlp) -> Result<Vec<u8>> {
    let mut tensors: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    for (prefix, net) in [("actor", actor), ("critic", critic)] {
        for (i, l) in net.layers.iter().enumerate() {
            let bytes = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
            tensors.push((
                format!("{prefix}.{}.weight", 2 * i),
                vec![l.outputs, l.inputs],
                bytes(&l.weight),
            ));
            tensors.push((
                format!("{prefix}.{}.bias", 2 * i),
                vec![l.outputs],
                bytes(&l.bias),
            ));
        }
    }
    let views = tensors
        .iter()
        .map(|(n, s, d)| {
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), d)
                .map(|v| (n.clone(), v))
                .map_err(|e| SchedulerError::Weights(e.to_string()))
        })
        .collect::<Result<Vec<_>>>()?;
    let meta = HashMap::from([
        ("features_version".to_owned(), FEATURES_VERSION.to_owned()),
        ("slots".to_owned(), SLOTS.to_string()),
    ]);
    let bytes = safetensors::serialize(views, &Some(meta.clone()))
        .map_err(|e| SchedulerError::Weights(e.to_string()))?;
    sort_metadata(bytes, &meta)
}

/// `safetensors::serialize` writes the metadata in the `HashMap`'s order, which differs from
/// run to run: this rewrites it in key order (same bytes, other order, same length), so that
/// training reproduces its weights file byte for byte.
fn sort_metadata(mut bytes: Vec<u8>, meta: &HashMap<String, String>) -> Result<Vec<u8>> {
    let bad = || SchedulerError::Weights("unexpected safetensors header".into());
    let sorted: BTreeMap<&String, &String> = meta.iter().collect();
    let want = serde_json::to_vec(&sorted).map_err(|e| SchedulerError::Weights(e.to_string()))?;
    let len = bytes
        .get(..8)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map(u64::from_le_bytes)
        .ok_or_else(bad)?;
    let header_end = 8 + usize::try_from(len).map_err(|_| bad())?;
    let key = b"\"__metadata__\":";
    let header = bytes.get(8..header_end).ok_or_else(bad)?;
    let start = 8
        + key.len()
        + header
            .windows(key.len())
            .position(|w| w == key)
            .ok_or_else(bad)?;
    // Our metadata values are plain numbers: the first `}` closes the object.
    let end = start
        + bytes[start..header_end]
            .iter()
            .position(|&b| b == b'}')
            .ok_or_else(bad)?
        + 1;
    if end - start != want.len() {
        return Err(bad());
    }
    bytes[start..end].copy_from_slice(&want);
    Ok(bytes)
}

/// Shipped weights of the built-in topologies.
pub fn shipped_weights(topology: &str) -> Option<&'static [u8]> {
    match topology {
        "melbourne" | "eua" => Some(include_bytes!("../weights/melbourne.safetensors")),
        "berlin" => Some(include_bytes!("../weights/berlin.safetensors")),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mlp(inputs: usize, seed: f32) -> Mlp {
        let dense = |i: usize, o: usize| Dense {
            inputs: i,
            outputs: o,
            weight: (0..i * o)
                .map(|k| ((k as f32 + seed) * 0.37).sin() * 0.3)
                .collect(),
            bias: vec![0.01; o],
        };
        Mlp {
            layers: vec![dense(inputs, 8), dense(8, 8), dense(8, 1)],
        }
    }

    #[test]
    fn both_fast_tanhs_are_libms_to_within_a_millionth() {
        let mut xs: Vec<f32> = (-40_000..=40_000).map(|i| i as f32 * 2.5e-4).collect();
        let special = [
            0.0,
            -0.0,
            9.5,
            -9.5,
            1e30,
            -1e30,
            f32::INFINITY,
            f32::NEG_INFINITY,
        ];
        xs.extend(special);
        xs.extend([
            1e-30,
            -1e-30,
            f32::MIN_POSITIVE,
            1e-3,
            0.124_999,
            0.125,
            0.346_57,
        ]);
        let check = |x: f32, got: f32, which: &str| {
            let want = x.tanh();
            let err = (got - want).abs() / want.abs().max(f32::MIN_POSITIVE);
            assert!(err < 1e-6, "{which} tanh({x}) = {got}, libm {want}");
            assert_eq!(
                got.is_sign_negative(),
                want.is_sign_negative(),
                "{which} tanh({x})"
            );
        };
        for chunk in xs.chunks(LANES) {
            let mut v = [0.0f32; LANES];
            v[..chunk.len()].copy_from_slice(chunk);
            tanh_lanes(&mut v);
            for (&x, got) in chunk.iter().zip(v) {
                check(x, got, "lane");
                check(x, tanh(x), "scalar");
            }
        }
        for x in special {
            assert_eq!(tanh(x), x.tanh(), "{x}");
        }
        let mut v = [f32::NAN; LANES];
        tanh_lanes(&mut v);
        assert!(v.iter().all(|x| x.is_nan()) && tanh(f32::NAN).is_nan());
    }

    /// A network of the given widths with weights in [-1, 1].
    fn net(widths: &[usize], seed: f32) -> Mlp {
        let layers = widths
            .windows(2)
            .enumerate()
            .map(|(k, w)| Dense {
                inputs: w[0],
                outputs: w[1],
                weight: (0..w[0] * w[1])
                    .map(|i| ((i as f32 + seed + k as f32 * 7.0) * 0.618).sin())
                    .collect(),
                bias: (0..w[1])
                    .map(|i| (i as f32 * 1.3 + seed).cos() * 0.5)
                    .collect(),
            })
            .collect();
        Mlp { layers }
    }

    #[test]
    fn the_lane_kernel_computes_what_the_reference_does() {
        let shapes: [&[usize]; 6] = [
            &[OPT_FEATURES, 16, 16, 1],
            &[GLOBAL_FEATURES, 16, 16, 1],
            &[OPT_FEATURES, 32, 32, 1],
            &[5, 7, 3],
            &[OPT_FEATURES, 64, 17, 1],
            &[3, 1],
        ];
        for (s, widths) in shapes.iter().enumerate() {
            let m = net(widths, s as f32);
            let fast = Lanes::new(&m).expect("fits");
            for k in 0..200 {
                let x: Vec<f32> = (0..widths[0])
                    .map(|i| ((i * 31 + k * 17) as f32 * 0.37).sin() * 3.0)
                    .collect();
                let (want, got) = (m.forward1(&x), fast.forward1(&x));
                assert!(
                    (got - want).abs() <= 1e-5 * want.abs().max(1.0),
                    "{widths:?} input {k}: lanes {got}, reference {want}"
                );
            }
        }
        assert!(Lanes::new(&net(&[4, MAX_WIDTH + 1, 1], 0.0)).is_none());
    }

    #[test]
    fn a_margin_leaves_the_actor_only_the_options_near_the_best() {
        use crate::baselines::greedy_decide;
        use crate::sim::{SimConfig, Simulator};
        use crate::topology::Topology;
        use crate::workload::{Workload, WorkloadConfig};
        let topo = Topology::melbourne();
        let link = SimConfig::default().link;
        let weights = crate::cli::shipped_weights("melbourne").expect("shipped");
        let free = PpoPolicy::from_bytes(weights, link).unwrap();
        let greedy_like = free.clone().with_margin(0.0);
        let shielded = free.clone().with_margin(0.25);
        let two = shielded.clone().with_busy_margin(0.05);
        assert_eq!(shielded.clone().with_busy_margin(-1.0).busy_margin(), None);
        assert_eq!(free.clone().with_margin(f64::NAN).margin(), None);
        assert_eq!(free.clone().with_margin(-1.0).margin(), None);
        let cfg = WorkloadConfig {
            requests: 800,
            ..Default::default()
        };
        let wl = Workload::for_topology(&topo, (300, 5), &cfg);
        let mut sim = Simulator::new(&topo, &wl, SimConfig::default());
        let (mut differ, mut within, mut roomy, mut narrowed) = (0, 0, 0, 0);
        while let Some(obs) = sim.next_observation() {
            let f = featurize(&link, &obs);
            let best = f.totals[0];
            // Margin 0 keeps the best slot (and any tied with it): greedy's estimate.
            if let Some(a) = greedy_like.decide(&obs) {
                let g = greedy_decide(&link, &obs).expect("feasible");
                let est = |a| obs.estimate(&link, a).total();
                assert!(
                    (est(a) - est(g)).abs() < 1e-9,
                    "{a:?} against greedy's {g:?}"
                );
            }
            let (a, b) = (free.decide(&obs), shielded.decide(&obs));
            if let Some(b) = b {
                let t = obs.estimate(&link, b).total();
                assert!(t <= best * 1.25 + 1e-9, "{t} ms against the best {best} ms");
                within += usize::from(t > best + 1e-9);
            }
            // Under the busy margin, an option more than 5 % behind the best must be on a
            // node with room: no queueing behind a busy instance (the simulator's nodes have
            // no measured sharing term).
            if let Some(c) = two.decide(&obs) {
                let t = obs.estimate(&link, c).total();
                assert!(t <= best * 1.25 + 1e-9, "{t} ms against the best {best} ms");
                if t > best * 1.05 + 1e-9 {
                    assert!(
                        !obs.queues(c),
                        "{c:?}: {t} ms against the best {best} ms, queued"
                    );
                    roomy += 1;
                }
                narrowed += usize::from(Some(c) != b);
            }
            differ += usize::from(a != greedy_like.decide(&obs));
            sim.step(a, 0);
        }
        // The test can fail: the unshielded actor must leave the best option somewhere (so a
        // margin of 0 changes its decisions), and the shielded one must still choose among
        // several.
        assert!(differ > 0, "the margin never changed a decision");
        assert!(within > 0, "the shielded actor never left the best option");
        // And the busy margin must both narrow some choices and leave the wide one to some
        // options on nodes with room.
        assert!(narrowed > 0, "the busy margin never changed a decision");
        assert!(
            roomy > 0,
            "no option on a node with room was taken beyond the busy margin"
        );
    }

    #[test]
    fn the_busy_margin_masks_only_options_on_busy_nodes() {
        use crate::model::GeoPoint;
        use crate::Measured;
        let link = crate::sim::SimConfig::default().link;
        let here = GeoPoint::new(52.52, 13.40);
        // Warm everywhere; measured: the best at 100 ms, a roomy node 20 % behind, a busy one
        // (calls share its cores) 20 % behind, and one 40 % behind.
        let node = |exec_ms, queue_ms| {
            let m = Measured {
                cold_ms: 1000.0,
                exec_ms,
                queue_ms,
                ..Measured::default()
            };
            roomy_node(here, 1, m)
        };
        let obs = Observation {
            request: one_core_request(here, 50.0, 128.0, 50.0),
            candidates: vec![
                node(100.0, 0.0),
                node(120.0, 0.0),
                node(100.0, 20.0),
                node(140.0, 0.0),
            ],
        };
        let weights = crate::cli::shipped_weights("melbourne").expect("shipped");
        let p = PpoPolicy::from_bytes(weights, link)
            .unwrap()
            .with_margin(0.25);
        let kept_obs = |p: &PpoPolicy| kept(p, &obs);
        // One margin: the three warm options within 25 %; the 40 % one and the cold starts not.
        assert_eq!(kept_obs(&p), vec![(0, false), (1, false), (2, false)]);
        // The busy margin drops the busy node's option, not the roomy one's 20 % behind.
        let narrow = p.clone().with_busy_margin(0.05);
        assert_eq!(kept_obs(&narrow), vec![(0, false), (1, false)]);
        // And without a margin, every option stays.
        assert_eq!(kept_obs(&p.clone().with_margin(-1.0)).len(), 8);
        // Nodes 0 and 1 with room now but busy on average (half a call per core over their
        // last seconds): node 1's option 20 % behind counts 60 ms more and is dropped; the best
        // is never dropped, and node 2's 20 % behind (busy now, but not on average) stays under
        // the one margin.
        let mut loaded = obs.clone();
        for c in [0, 1] {
            if let Some(m) = loaded.candidates[c].measured.as_mut() {
                m.calls_per_core = 0.5;
            }
        }
        assert_eq!(kept(&p, &loaded), vec![(0, false), (2, false)]);
    }

    /// A 4-core node at `at` with room, `idle` instances of the function and `m` measured.
    fn roomy_node(at: crate::model::GeoPoint, idle: u32, m: crate::Measured) -> crate::Candidate {
        crate::Candidate {
            node: crate::model::NodeSpec {
                location: at,
                cores: 4.0,
                ghz: 2.4,
                memory_mb: 8192.0,
                bandwidth_mbps: 1000.0,
                access_ms: 0.0,
            },
            free_cores: 4.0,
            free_memory_mb: 4096.0,
            evictable_memory_mb: 0.0,
            blocked_cold_ms: 0.0,
            idle,
            busy: 0,
            wait_ms: 0.0,
            measured: Some(m),
        }
    }

    /// A one-core call from `at` with a 1 s SLO.
    fn one_core_request(
        at: crate::model::GeoPoint,
        cpu_ms: f64,
        memory_mb: f64,
        image_mb: f64,
    ) -> crate::RequestInfo {
        crate::RequestInfo {
            function_id: 0,
            profile: crate::model::FunctionProfile {
                cpu_ms,
                cores: 1.0,
                memory_mb,
                image_mb,
                init_ms: 100.0,
                input_kb: 1.0,
                slo_ms: 1000.0,
            },
            source: at,
            input_kb: 1.0,
            slo_ms: 1000.0,
        }
    }

    /// The options `p`'s margins leave of `obs`: (candidate, new instance), sorted.
    fn kept(p: &PpoPolicy, obs: &Observation) -> Vec<(usize, bool)> {
        let mut f = featurize(&p.link, obs);
        p.shield(obs, &mut f);
        let mut c: Vec<(usize, bool)> = f
            .actions
            .iter()
            .flatten()
            .map(|a| (a.candidate, a.new_container))
            .collect();
        c.sort_unstable();
        c
    }

    #[test]
    fn a_first_instance_is_weighed_with_what_it_saves_the_calls_that_reuse_it() {
        use crate::model::GeoPoint;
        use crate::Measured;
        let link = crate::sim::SimConfig::default().link;
        let here = GeoPoint::new(52.52, 13.40);
        let node = |idle, cold_ms, exec_ms, link_ms| {
            let m = Measured {
                cold_ms,
                exec_ms,
                link_ms,
                ..Measured::default()
            };
            roomy_node(here, idle, m)
        };
        // This edge: no instance yet, a new one 160 ms + 6 ms; the cloud: warm, 12 ms and
        // 28 ms there and back (40 ms), a new instance there 100 ms.
        let mut obs = Observation {
            request: one_core_request(here, 5.0, 64.0, 10.0),
            candidates: vec![node(0, 160.0, 6.0, 0.0), node(1, 60.0, 12.0, 28.0)],
        };
        let weights = crate::cli::shipped_weights("berlin").expect("shipped");
        let p = PpoPolicy::from_bytes(weights, link)
            .unwrap()
            .with_margin(0.25)
            .with_busy_margin(0.05);
        let reusing = |obs: &mut Observation, n: f64| {
            if let Some(m) = obs.candidates[0].measured.as_mut() {
                m.reuses = n;
            }
        };
        // Nobody to reuse it: the warm cloud call alone.
        assert_eq!(kept(&p, &obs), vec![(1, false)]);
        // Two later calls save 2 x 34 ms: 166 - 68 = 98 is still more than 25 % behind 40.
        reusing(&mut obs, 2.0);
        assert_eq!(kept(&p, &obs), vec![(1, false)]);
        // Six save more than the instance costs beyond a warm call here: it is the best
        // option now, the warm cloud call (40 against 6) far behind it.
        reusing(&mut obs, 6.0);
        assert_eq!(kept(&p, &obs), vec![(0, true)]);
        let new_here = Action {
            candidate: 0,
            new_container: true,
        };
        assert_eq!(p.decide(&obs), Some(new_here));
        // With an idle instance here already, a new one saves nothing: the warm call here wins.
        obs.candidates[0].idle = 1;
        assert_eq!(kept(&p, &obs), vec![(0, false)]);
        // Where a warm call here would be slower than at the cloud, there is nothing to save.
        obs.candidates[0].idle = 0;
        if let Some(m) = obs.candidates[0].measured.as_mut() {
            m.exec_ms = 50.0;
        }
        assert_eq!(kept(&p, &obs), vec![(1, false)]);
        // Warm nowhere, nothing to reuse: a new instance here (100 + 10 ms) is 10 % behind one
        // at the cloud (60 + 12 + 28 ms), inside the margin; on an edge with 0.2 calls per core
        // on average its start counts as well as its call (22 ms more, not 2) and drops it.
        obs.candidates[1].idle = 0;
        if let Some(m) = obs.candidates[0].measured.as_mut() {
            (m.cold_ms, m.exec_ms, m.reuses) = (100.0, 10.0, 0.0);
        }
        assert_eq!(kept(&p, &obs), vec![(0, true), (1, true)]);
        if let Some(m) = obs.candidates[0].measured.as_mut() {
            m.calls_per_core = 0.2;
        }
        assert_eq!(kept(&p, &obs), vec![(1, true)]);
    }

    #[test]
    fn decide_picks_what_the_reference_logits_pick() {
        use crate::sim::{SimConfig, Simulator};
        use crate::topology::Topology;
        use crate::workload::{Workload, WorkloadConfig};
        let topo = Topology::melbourne();
        let link = SimConfig::default().link;
        let p = PpoPolicy::from_bytes(
            crate::cli::shipped_weights("melbourne").expect("shipped"),
            link,
        )
        .unwrap();
        assert!(p.fast.is_some());
        let cfg = WorkloadConfig {
            requests: 600,
            ..Default::default()
        };
        let wl = Workload::for_topology(&topo, (200, 11), &cfg);
        let sim_cfg = SimConfig {
            warmup: 200,
            ..Default::default()
        };
        let mut sim = Simulator::new(&topo, &wl, sim_cfg);
        sim.warm_up();
        let mut decided = 0;
        while let Some(obs) = sim.next_observation() {
            let f = featurize(&link, &obs);
            let reference = best_slot(&f, &p.logits(&f));
            let got = p.decide(&obs);
            assert_eq!(got, reference);
            decided += usize::from(got.is_some());
            sim.step(got, 0);
        }
        assert!(decided > 300, "{decided} decisions");
    }

    #[test]
    fn forward_matches_a_hand_computation() {
        let m = Mlp {
            layers: vec![
                Dense {
                    inputs: 2,
                    outputs: 1,
                    weight: vec![1.0, -1.0],
                    bias: vec![0.5],
                },
                Dense {
                    inputs: 1,
                    outputs: 1,
                    weight: vec![2.0],
                    bias: vec![0.0],
                },
            ],
        };
        // tanh(3 - 1 + 0.5) * 2
        let y = m.forward(&[3.0, 1.0])[0];
        assert!((y - 2.5f32.tanh() * 2.0).abs() < 1e-6);
    }

    #[test]
    fn the_weights_file_is_the_same_bytes_every_time() {
        let (a, c) = (mlp(OPT_FEATURES, 1.0), mlp(GLOBAL_FEATURES, 2.0));
        let first = to_safetensors(&a, &c).unwrap();
        let header = String::from_utf8_lossy(&first[8..200]).into_owned();
        assert!(
            header.starts_with(&format!(
                "{{\"__metadata__\":{{\"features_version\":\"{FEATURES_VERSION}\",\"slots\":\"{SLOTS}\"}}"
            )),
            "{header}"
        );
        // HashMap order changes between maps: many writes, one result.
        for _ in 0..50 {
            assert_eq!(to_safetensors(&a, &c).unwrap(), first);
        }
    }

    #[test]
    fn safetensors_round_trip() {
        let (a, c) = (mlp(OPT_FEATURES, 1.0), mlp(GLOBAL_FEATURES, 2.0));
        let bytes = to_safetensors(&a, &c).unwrap();
        let p = PpoPolicy::from_bytes(&bytes, LinkModel::default()).unwrap();
        assert_eq!(p.actor, a);
        assert_eq!(p.critic, c);
        assert!(PpoPolicy::from_bytes(&bytes[..10], LinkModel::default()).is_err());
    }
}
