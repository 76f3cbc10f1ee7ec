//! The trained PPO actor as a [`Policy`]: a small MLP evaluated in plain Rust over weights read
//! from a safetensors file, so the gateway's hot path needs no dfdx (a few µs per decision).
//!
//! File layout (written by `train`): `actor.{0,2,4}.{weight,bias}` and `critic.{0,2,4}.{weight,bias}`,
//! f32, weight shape `[out, in]`, tanh between layers; the metadata records the feature layout.

use std::path::Path;

use safetensors::SafeTensors;

use crate::error::{Result, SchedulerError};
use crate::features::{featurize, Featurized, GLOBAL_FEATURES, OPT_FEATURES, SLOTS};
use crate::model::LinkModel;
use crate::policy::{Action, Observation, Policy};

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

/// The PPO actor as a policy: picks the highest-scoring unmasked slot (deterministic).
#[derive(Debug, Clone)]
pub struct PpoPolicy {
    link: LinkModel,
    actor: Mlp,
    critic: Mlp,
    name: String,
}

impl PpoPolicy {
    /// A policy from actor and critic networks.
    pub fn new(link: LinkModel, actor: Mlp, critic: Mlp) -> Self {
        Self {
            link,
            actor,
            critic,
            name: "ppo".into(),
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
        let f = featurize(&self.link, obs);
        let logits = self.logits(&f);
        let best = (0..SLOTS)
            .filter(|&i| f.actions[i].is_some())
            .max_by(|&a, &b| logits[a].total_cmp(&logits[b]).then(b.cmp(&a)))?;
        f.actions[best]
    }
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
    let meta = std::collections::HashMap::from([
        ("features_version".to_owned(), FEATURES_VERSION.to_owned()),
        ("slots".to_owned(), SLOTS.to_string()),
    ]);
    safetensors::serialize(views, &Some(meta)).map_err(|e| SchedulerError::Weights(e.to_string()))
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
    fn fast_tanh_is_libms_to_within_a_millionth() {
        for i in -40_000..=40_000 {
            let x = i as f32 * 2.5e-4;
            let (got, want) = (tanh(x), x.tanh());
            let err = (got - want).abs() / want.abs().max(f32::MIN_POSITIVE);
            assert!(err < 1e-6, "tanh({x}) = {got}, libm {want}");
        }
        for x in [
            0.0f32,
            -0.0,
            9.5,
            -9.5,
            1e30,
            -1e30,
            f32::INFINITY,
            f32::NEG_INFINITY,
        ] {
            assert_eq!(tanh(x), x.tanh(), "{x}");
        }
        assert!(tanh(f32::NAN).is_nan());
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
    fn safetensors_round_trip() {
        let (a, c) = (mlp(OPT_FEATURES, 1.0), mlp(GLOBAL_FEATURES, 2.0));
        let bytes = to_safetensors(&a, &c).unwrap();
        let p = PpoPolicy::from_bytes(&bytes, LinkModel::default()).unwrap();
        assert_eq!(p.actor, a);
        assert_eq!(p.critic, c);
        assert!(PpoPolicy::from_bytes(&bytes[..10], LinkModel::default()).is_err());
    }
}
