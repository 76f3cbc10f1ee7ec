//! The PPO update: GAE, clipped surrogate with entropy bonus for the actor, squared error for
//! the critic, global gradient-norm clipping (dfdx 0.13 has none built in), Adam.

use super::*;
use dfdx::nn::modules::Linear as Dense2;
use dfdx::optim::Adam;

/// Generalised advantage estimates and returns (`done` cuts the bootstrap).
pub(super) fn gae(
    reward: &[f32],
    value: &[f32],
    done: &[bool],
    gamma: f32,
    lam: f32,
) -> (Vec<f32>, Vec<f32>) {
    let n = reward.len();
    let mut adv = vec![0.0; n];
    let mut last = 0.0;
    for t in (0..n).rev() {
        let (next_v, live) = if done[t] {
            (0.0, 0.0)
        } else {
            (value[t + 1], 1.0)
        };
        let delta = reward[t] + gamma * next_v - value[t];
        last = delta + gamma * lam * live * last;
        adv[t] = last;
    }
    let ret = adv.iter().zip(value).map(|(a, v)| a + v).collect();
    (adv, ret)
}

fn sq<const I: usize, const O: usize>(
    g: &mut Gradients<f32, Cpu>,
    l: &Dense2<I, O, f32, Cpu>,
) -> f32 {
    let w: f32 = g
        .get_or_alloc_mut(&l.weight)
        .expect("cpu alloc")
        .iter()
        .map(|x| x * x)
        .sum();
    let b: f32 = g
        .get_or_alloc_mut(&l.bias)
        .expect("cpu alloc")
        .iter()
        .map(|x| x * x)
        .sum();
    w + b
}

fn scale<const I: usize, const O: usize>(
    g: &mut Gradients<f32, Cpu>,
    l: &Dense2<I, O, f32, Cpu>,
    s: f32,
) {
    g.get_or_alloc_mut(&l.weight)
        .expect("cpu alloc")
        .iter_mut()
        .for_each(|x| *x *= s);
    g.get_or_alloc_mut(&l.bias)
        .expect("cpu alloc")
        .iter_mut()
        .for_each(|x| *x *= s);
}

/// Scales the gradients of a 3-layer tanh MLP so their global L2 norm is at most `max`.
macro_rules! clip_mlp {
    ($g:expr, $net:expr, $max:expr) => {{
        let norm = (sq($g, &$net.0) + sq($g, &$net.2) + sq($g, &$net.4)).sqrt();
        if norm > $max {
            let s = $max / (norm + 1e-6);
            scale($g, &$net.0, s);
            scale($g, &$net.2, s);
            scale($g, &$net.4, s);
        }
    }};
}

/// Adam state and gradient buffers of both networks.
pub(super) struct Optimisers {
    actor: Adam<Actor, f32, Cpu>,
    critic: Adam<Critic, f32, Cpu>,
    ga: Option<Gradients<f32, Cpu>>,
    gc: Option<Gradients<f32, Cpu>>,
}

impl Optimisers {
    pub(super) fn new(actor: &Actor, critic: &Critic, lr: f64) -> Self {
        let c = AdamConfig {
            lr,
            ..Default::default()
        };
        Self {
            actor: Adam::new(actor, c),
            critic: Adam::new(critic, c),
            ga: Some(actor.alloc_grads()),
            gc: Some(critic.alloc_grads()),
        }
    }

    /// Runs the PPO epochs over `buf`; returns the last (policy loss, value loss, entropy).
    pub(super) fn update(
        &mut self,
        dev: &Cpu,
        actor: &mut Actor,
        critic: &mut Critic,
        buf: &Buffer,
        cfg: &PpoConfig,
        rng: &mut ChaCha8Rng,
    ) -> (f32, f32, f32) {
        let n = buf.action.len();
        if n == 0 {
            return (0.0, 0.0, 0.0);
        }
        let (mut adv, ret) = gae(&buf.reward, &buf.value, &buf.done, cfg.gamma, cfg.lam);
        let mean = adv.iter().sum::<f32>() / n as f32;
        let sd = (adv.iter().map(|a| (a - mean).powi(2)).sum::<f32>() / n as f32).sqrt() + 1e-8;
        adv.iter_mut().for_each(|a| *a = (*a - mean) / sd);
        let mut idx: Vec<usize> = (0..n).collect();
        let mut last = (0.0, 0.0, 0.0);
        for _ in 0..cfg.epochs {
            for i in (1..n).rev() {
                idx.swap(i, rng.gen_range(0..=i));
            }
            for chunk in idx.chunks(cfg.minibatch.max(1)) {
                let (pl, ent) = self.actor_step(dev, actor, buf, &adv, chunk, cfg);
                let vl = self.critic_step(dev, critic, buf, &ret, chunk, cfg);
                last = (pl, vl, ent);
            }
        }
        last
    }

    fn actor_step(
        &mut self,
        dev: &Cpu,
        actor: &mut Actor,
        buf: &Buffer,
        adv: &[f32],
        chunk: &[usize],
        cfg: &PpoConfig,
    ) -> (f32, f32) {
        let m = chunk.len();
        let per = SLOTS * OPT_FEATURES;
        let opts: Vec<f32> = chunk
            .iter()
            .flat_map(|&i| buf.options[i * per..(i + 1) * per].iter().copied())
            .collect();
        let mask: Vec<f32> = chunk
            .iter()
            .flat_map(|&i| buf.mask[i * SLOTS..(i + 1) * SLOTS].iter().copied())
            .collect();
        let mut onehot = vec![0.0f32; m * SLOTS];
        chunk
            .iter()
            .enumerate()
            .for_each(|(k, &i)| onehot[k * SLOTS + buf.action[i]] = 1.0);
        let old: Vec<f32> = chunk.iter().map(|&i| buf.logp[i]).collect();
        let a: Vec<f32> = chunk.iter().map(|&i| adv[i]).collect();

        let grads = self.ga.take().expect("actor grads");
        let x = dev.tensor_from_vec(opts, (m * SLOTS, Const::<OPT_FEATURES>));
        let logits = actor
            .forward_mut(x.traced(grads))
            .reshape_like(&(m, Const::<SLOTS>));
        let logp =
            (logits + dev.tensor_from_vec(mask, (m, Const::<SLOTS>))).log_softmax::<Axis<1>>();
        let lp_a = (logp.with_empty_tape() * dev.tensor_from_vec(onehot, (m, Const::<SLOTS>)))
            .sum::<(usize,), Axis<1>>();
        let ratio = (lp_a - dev.tensor_from_vec(old, (m,))).exp();
        let adv_t = dev.tensor_from_vec(a, (m,));
        let s1 = ratio.with_empty_tape() * adv_t.clone();
        let s2 = ratio.clamp(1.0 - cfg.clip, 1.0 + cfg.clip) * adv_t;
        let pg = s1.minimum(s2).mean().negate();
        let ent = (logp.with_empty_tape().exp() * logp)
            .sum::<(usize,), Axis<1>>()
            .mean()
            .negate();
        let (pl, el) = (pg.array(), ent.array());
        let loss = pg + ent * (-cfg.ent_coef);
        let mut grads = loss.backward();
        clip_mlp!(&mut grads, actor, cfg.max_grad_norm);
        self.actor.update(actor, &grads).expect("adam update");
        actor.zero_grads(&mut grads);
        self.ga = Some(grads);
        (pl, el)
    }

    fn critic_step(
        &mut self,
        dev: &Cpu,
        critic: &mut Critic,
        buf: &Buffer,
        ret: &[f32],
        chunk: &[usize],
        cfg: &PpoConfig,
    ) -> f32 {
        let m = chunk.len();
        let g: Vec<f32> = chunk
            .iter()
            .flat_map(|&i| {
                buf.global[i * GLOBAL_FEATURES..(i + 1) * GLOBAL_FEATURES]
                    .iter()
                    .copied()
            })
            .collect();
        let r: Vec<f32> = chunk.iter().map(|&i| ret[i]).collect();
        let grads = self.gc.take().expect("critic grads");
        let x = dev.tensor_from_vec(g, (m, Const::<GLOBAL_FEATURES>));
        let v = critic.forward_mut(x.traced(grads)).reshape_like(&(m,));
        let loss = (v - dev.tensor_from_vec(r, (m,))).square().mean();
        let vl = loss.array();
        let mut grads = loss.backward();
        clip_mlp!(&mut grads, critic, cfg.max_grad_norm);
        self.critic.update(critic, &grads).expect("adam update");
        critic.zero_grads(&mut grads);
        self.gc = Some(grads);
        vl
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gae_matches_hand_computation() {
        // Two steps, terminal at the end: delta1 = 1 - 0.5 = 0.5;
        // delta0 = 1 + 0.9 * 0.5 - 0.2 = 1.25; adv0 = 1.25 + 0.9 * 0.8 * 0.5 = 1.61.
        let (adv, ret) = gae(&[1.0, 1.0], &[0.2, 0.5], &[false, true], 0.9, 0.8);
        assert!(
            (adv[1] - 0.5).abs() < 1e-6 && (adv[0] - 1.61).abs() < 1e-6,
            "{adv:?}"
        );
        assert!((ret[0] - 1.81).abs() < 1e-6);
    }
}
