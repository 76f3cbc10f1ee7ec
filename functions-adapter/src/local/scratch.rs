//! The runtime's scratch folder (bootstrap scripts, fork-server sockets), and the removal of
//! folders left behind by runtimes that died without cleaning up (`kill -9`, the OOM killer).
//!
//! Each folder holds an `owner.lock` file that its runtime keeps locked (`flock`) for as long as
//! it lives; the kernel drops the lock when the process dies, however it dies. A new runtime
//! removes every `geofaas-local-*` folder in the temporary directory whose lock it can take,
//! which means its owner is gone. Folders younger than [`MIN_AGE`] are left alone: their owner
//! may not have taken its lock yet. Folders without a lock file (from older versions) are kept.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

const PREFIX: &str = "geofaas-local-";
const LOCK: &str = "owner.lock";
/// How old an unlocked folder must be before it counts as abandoned.
const MIN_AGE: Duration = Duration::from_secs(10);

/// A scratch folder, removed when dropped.
#[derive(Debug)]
pub(super) struct Scratch {
    dir: tempfile::TempDir,
    /// Held locked for the runtime's lifetime; declared after `dir`, so it is closed after the
    /// folder is gone and a sweeper never sees the folder unlocked while it exists.
    _lock: File,
}

impl Scratch {
    /// Removes abandoned folders, then creates and locks a new one in the temporary directory.
    pub(super) fn create() -> io::Result<Self> {
        Self::create_in(&std::env::temp_dir(), MIN_AGE)
    }

    fn create_in(tmp: &Path, min_age: Duration) -> io::Result<Self> {
        for removed in sweep(tmp, min_age) {
            tracing::info!(dir = %removed.display(), "removed the scratch folder of a runtime that is gone");
        }
        let dir = tempfile::Builder::new().prefix(PREFIX).tempdir_in(tmp)?;
        let lock = File::create(dir.path().join(LOCK))?;
        lock.lock()?;
        Ok(Self { dir, _lock: lock })
    }

    pub(super) fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// Removes the scratch folders under `tmp` whose lock nobody holds and that are older than
/// `min_age`; returns the folders removed. Errors (a folder of another user, one removed by
/// someone else meanwhile) skip that folder.
fn sweep(tmp: &Path, min_age: Duration) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return Vec::new();
    };
    let now = SystemTime::now();
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        if !entry.file_name().to_string_lossy().starts_with(PREFIX) {
            continue;
        }
        let dir = entry.path();
        let old_enough = entry
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| now.duration_since(t).unwrap_or_default() >= min_age);
        if !old_enough {
            continue;
        }
        let Ok(lock) = File::open(dir.join(LOCK)) else {
            continue;
        };
        if lock.try_lock().is_ok() && std::fs::remove_dir_all(&dir).is_ok() {
            removed.push(dir);
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder(tmp: &Path, name: &str, with_lock: bool) -> PathBuf {
        let dir = tmp.join(format!("{PREFIX}{name}"));
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("worker.py"), "x").unwrap();
        if with_lock {
            File::create(dir.join(LOCK)).unwrap();
        }
        dir
    }

    #[test]
    fn only_folders_whose_owner_is_gone_are_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let abandoned = folder(tmp.path(), "dead", true);
        let alive = folder(tmp.path(), "alive", true);
        let held = File::open(alive.join(LOCK)).unwrap();
        held.lock().unwrap();
        let legacy = folder(tmp.path(), "legacy", false);
        let other = tmp.path().join("something-else");
        std::fs::create_dir(&other).unwrap();

        assert_eq!(sweep(tmp.path(), Duration::ZERO), vec![abandoned.clone()]);
        assert!(!abandoned.exists());
        assert!(alive.join("worker.py").exists(), "a locked folder is kept");
        assert!(legacy.exists(), "a folder without a lock file is kept");
        assert!(other.exists());

        drop(held);
        assert_eq!(sweep(tmp.path(), Duration::ZERO), vec![alive]);
    }

    #[test]
    fn a_young_unlocked_folder_is_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let young = folder(tmp.path(), "young", true);
        assert!(sweep(tmp.path(), Duration::from_secs(3600)).is_empty());
        assert!(young.exists());
    }

    #[test]
    fn a_live_scratch_folder_survives_a_sweep_and_goes_when_dropped() {
        let tmp = tempfile::tempdir().unwrap();
        let abandoned = folder(tmp.path(), "dead", true);
        let scratch = Scratch::create_in(tmp.path(), Duration::ZERO).unwrap();
        assert!(!abandoned.exists(), "creating one sweeps first");
        let path = scratch.path().to_owned();
        assert!(sweep(tmp.path(), Duration::ZERO).is_empty());
        assert!(path.join(LOCK).exists());
        drop(scratch);
        assert!(!path.exists());
    }
}
