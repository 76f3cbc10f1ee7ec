//! Desired versions of deployed functions, one record per function under
//! `{prefix}functions/{name}`: the version every node should serve, a rollout's version and
//! share, and which nodes hold the bundles. The bundles themselves never travel through etcd:
//! a node that lacks a version fetches it by id from a node named in `sources` over the signed
//! node link and checks it against the id. Secrets are not in the record.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// What every node should serve of one function.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DesiredFunction {
    /// Function name.
    pub name: String,
    /// The version new calls run on.
    pub live: String,
    /// A rollout: its version and the percentage of callers it takes.
    pub rollout: Option<DesiredRollout>,
    /// Nodes that hold the versions (the node that took the deploy first).
    pub sources: Vec<String>,
    /// When the record was written (ms since the Unix epoch).
    pub updated_ms: u64,
}

/// A percentage rollout in a [`DesiredFunction`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DesiredRollout {
    /// The version on trial.
    pub version: String,
    /// Percentage of callers (1-99).
    pub percent: u8,
}

/// Every function's desired record, by name.
pub type DesiredFunctions = BTreeMap<String, DesiredFunction>;

/// The key of `name`'s record under `prefix`.
pub(crate) fn key(prefix: &str, name: &str) -> String {
    format!("{prefix}functions/{name}")
}
