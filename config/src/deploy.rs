//! `[deploy]`: how a node takes deployed functions (`geofaas deploy`, `docs/deploy.md`).

use serde::{Deserialize, Serialize};

/// Limits and retention of deployed function versions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeploySettings {
    /// Largest bundle a node accepts, in bytes, both as sent (gzip'd tar) and unpacked.
    /// Default 64 MiB.
    #[serde(default = "default_max_bundle_bytes")]
    pub max_bundle_bytes: usize,
    /// Versions of each function a node keeps on disk for rollbacks (the live one and a
    /// rollout's always among them). Default 10.
    #[serde(default = "default_keep_versions")]
    pub keep_versions: usize,
}

fn default_max_bundle_bytes() -> usize {
    64 << 20
}

fn default_keep_versions() -> usize {
    10
}

impl Default for DeploySettings {
    fn default() -> Self {
        Self {
            max_bundle_bytes: default_max_bundle_bytes(),
            keep_versions: default_keep_versions(),
        }
    }
}

impl DeploySettings {
    /// What is wrong with these settings: (field, value, reason).
    pub(crate) fn check(&self) -> Result<(), crate::security::Problem> {
        if self.max_bundle_bytes == 0 {
            return Err(problem("max_bundle_bytes", "0", "must be at least 1"));
        }
        if self.keep_versions < 2 {
            let value = self.keep_versions.to_string();
            return Err(problem(
                "keep_versions",
                &value,
                "must be at least 2 (the live version and one to roll back to)",
            ));
        }
        Ok(())
    }
}

fn problem(field: &str, value: &str, reason: &str) -> crate::security::Problem {
    (
        format!("deploy.{field}"),
        value.to_owned(),
        reason.to_owned(),
    )
}
