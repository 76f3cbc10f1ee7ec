//! Deployed versions on disk, in the node's state folder, so they survive a restart.
//!
//! ```text
//! <state>/functions/<name>/state.json          live version, rollout, versions in deploy order
//! <state>/functions/<name>/versions/<id>/      the version's function folder
//! <state>/functions/<name>/env/<id>.json       its environment and secrets (mode 0600)
//! ```
//!
//! Every file is written to a temporary name and renamed into place, so a node killed during
//! a deploy finds either the old state or the new one. The environment lives apart from the
//! version folders: Node's `require(dir)` would load a `<dir>.json` beside the folder instead.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::bundle::Bundle;

/// What a function serves, as kept in `state.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionState {
    /// The live version's id.
    pub live: Option<String>,
    /// A rollout's version and the percentage of callers it takes.
    pub rollout: Option<Rollout>,
    /// Kept versions, oldest first, in the order they were deployed.
    pub versions: Vec<VersionInfo>,
}

/// A percentage rollout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rollout {
    /// The version on trial.
    pub version: String,
    /// Percentage of callers (1-99) it takes.
    pub percent: u8,
}

/// One kept version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionInfo {
    /// The id.
    pub id: String,
    /// When it was first deployed here (seconds since the Unix epoch).
    pub deployed_at: u64,
}

/// A version's environment, kept beside its folder.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionEnv {
    /// `--env` entries.
    pub env: Vec<(String, String)>,
    /// `--secret` entries (values in the clear: the function's processes need them).
    pub secrets: Vec<(String, String)>,
    /// `--cron` schedules ([`crate::cron`]): kept with the version, so a rollback brings back
    /// the schedules it had.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cron: Vec<String>,
    /// `--on` queue triggers, `nats:SUBJECT` ([`crate::triggers`]), kept like the schedules.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub on: Vec<String>,
}

/// The deployed functions under one state folder.
#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
}

impl Store {
    /// The store under `state_dir`, created with the first deploy. Its paths are absolute:
    /// function processes run in their version's folder.
    pub fn open(state_dir: &Path) -> std::io::Result<Self> {
        let root = std::path::absolute(state_dir)?.join("functions");
        Ok(Self { root })
    }

    /// Names of the functions with a state file, sorted.
    pub fn names(&self) -> std::io::Result<Vec<String>> {
        let mut names = Vec::new();
        let entries = match std::fs::read_dir(&self.root) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(names),
            Err(e) => return Err(e),
        };
        for entry in entries {
            let entry = entry?;
            if entry.path().join("state.json").is_file() {
                names.push(entry.file_name().to_string_lossy().into_owned());
            }
        }
        names.sort();
        Ok(names)
    }

    /// The function's state (the default when it has none).
    pub fn state(&self, name: &str) -> std::io::Result<FunctionState> {
        match std::fs::read(self.function_dir(name).join("state.json")) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(std::io::Error::other),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(FunctionState::default()),
            Err(e) => Err(e),
        }
    }

    /// Replaces the function's state.
    pub fn set_state(&self, name: &str, state: &FunctionState) -> std::io::Result<()> {
        let dir = self.function_dir(name);
        std::fs::create_dir_all(dir.join("versions"))?;
        let bytes = serde_json::to_vec_pretty(state).map_err(std::io::Error::other)?;
        write_atomic(&dir.join("state.json"), &bytes, 0o644)
    }

    /// The folder of version `id` of `name`.
    pub fn version_dir(&self, name: &str, id: &str) -> PathBuf {
        self.function_dir(name).join("versions").join(id)
    }

    /// Whether version `id` of `name` is on disk.
    pub fn has_version(&self, name: &str, id: &str) -> bool {
        self.version_dir(name, id).is_dir()
    }

    /// Writes version `id` of `name` (a no-op when it is already there), checking the
    /// written folder with `check` before it takes its final name.
    pub fn put_version<E>(
        &self,
        name: &str,
        id: &str,
        bundle: &Bundle,
        env: &VersionEnv,
        check: impl FnOnce(&Path) -> Result<(), E>,
    ) -> Result<(), PutError<E>> {
        let versions = self.function_dir(name).join("versions");
        std::fs::create_dir_all(&versions)?;
        let target = versions.join(id);
        if target.is_dir() {
            return Ok(());
        }
        let tmp = versions.join(format!(".tmp-{id}-{:08x}", rand::random::<u32>()));
        let written = bundle.write_to(&tmp).map_err(PutError::Io).and_then(|()| {
            check(&tmp).map_err(PutError::Check)?;
            let bytes = serde_json::to_vec(env).map_err(std::io::Error::other)?;
            let env_dir = self.function_dir(name).join("env");
            std::fs::create_dir_all(&env_dir)?;
            write_atomic(&env_dir.join(format!("{id}.json")), &bytes, 0o600)?;
            match std::fs::rename(&tmp, &target) {
                // Written meanwhile by another path (a deploy and a fetch of the same id): the
                // same bytes, as the id says.
                Err(_) if target.is_dir() => {
                    let _ = std::fs::remove_dir_all(&tmp);
                    Ok(())
                }
                other => other.map_err(PutError::Io),
            }
        });
        if written.is_err() {
            let _ = std::fs::remove_dir_all(&tmp);
        }
        written
    }

    /// The environment of version `id` of `name`.
    pub fn version_env(&self, name: &str, id: &str) -> std::io::Result<VersionEnv> {
        let path = self
            .function_dir(name)
            .join("env")
            .join(format!("{id}.json"));
        let bytes = std::fs::read(path)?;
        serde_json::from_slice(&bytes).map_err(std::io::Error::other)
    }

    /// Deletes version `id` of `name` from disk.
    pub fn delete_version(&self, name: &str, id: &str) -> std::io::Result<()> {
        let versions = self.function_dir(name).join("versions");
        let env = self
            .function_dir(name)
            .join("env")
            .join(format!("{id}.json"));
        let _ = std::fs::remove_file(env);
        match std::fs::remove_dir_all(versions.join(id)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Deletes everything of `name`.
    pub fn delete_function(&self, name: &str) -> std::io::Result<()> {
        match std::fs::remove_dir_all(self.function_dir(name)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    fn function_dir(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }
}

/// Why a version could not be written.
#[derive(Debug)]
pub enum PutError<E> {
    /// The disk.
    Io(std::io::Error),
    /// The written folder failed its check.
    Check(E),
}

impl<E> From<std::io::Error> for PutError<E> {
    fn from(e: std::io::Error) -> Self {
        Self::Io(e)
    }
}

fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp-{:08x}", rand::random::<u32>()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)
}
