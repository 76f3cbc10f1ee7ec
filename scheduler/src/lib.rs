//! geofaas scheduler: which node serves a request, and in a warm or a new container.
//!
//! * [`model`]: the latency model of the Scale paper (cold start, compute, communication);
//! * [`policy`]: the [`Policy`] trait with its [`Observation`] and [`Action`], shared by the
//!   simulator and the live gateway; [`baselines`] (random, nearest, greedy), [`milp`] (exact
//!   MILP over a window) and [`ppo`] (a trained actor evaluated in plain Rust);
//! * [`sim`]: the event-driven simulator over a [`topology`] and a [`workload`] (generated, or
//!   loaded from the Huawei trace format by [`trace`]); [`metrics`] summarises and plots runs;
//! * [`eval`]: seed ranges, the contention-free lower bound and the per-seed report with
//!   bootstrap confidence intervals behind `simulate --held-out N`;
//! * `train` (feature `train`): PPO training in dfdx; `cli` (feature `cli`, with the plots):
//!   `geofaas train` / `simulate`. A node needs neither (`default-features = false`).

#![forbid(unsafe_code)]

pub mod baselines;
#[cfg(feature = "cli")]
pub mod cli;
mod error;
pub mod eval;
pub mod features;
pub mod measured;
pub mod metrics;
pub mod milp;
pub mod model;
pub mod policy;
pub mod ppo;
pub mod sim;
pub mod topology;
pub mod trace;
#[cfg(feature = "train")]
pub mod train;
pub mod workload;

pub use error::{Result, SchedulerError};
pub use policy::{Action, Candidate, Measured, Observation, Policy, RequestInfo};
