//! Where a test finds the repository's files.
//!
//! A test binary must not bake in the path it was compiled at (`env!("CARGO_MANIFEST_DIR")`):
//! two clones that share one `CARGO_TARGET_DIR` (CI's clone and a working copy, `.ci/run`)
//! reuse each other's unchanged test binaries, which then read the other clone's fixtures, or
//! fail once it is gone. Cargo and nextest set `CARGO_MANIFEST_DIR` when they run a test, to
//! the package of the test being run in the workspace they were started in; these read that.

use std::path::{Path, PathBuf};

/// The package directory of the test being run (`cli/` for the CLI's tests).
pub fn manifest_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .expect("CARGO_MANIFEST_DIR is set by cargo and nextest when they run a test")
}

/// The workspace root: the nearest directory above the test's package holding `Cargo.lock`.
pub fn workspace_root() -> PathBuf {
    let dir = manifest_dir();
    dir.ancestors()
        .find(|d| d.join("Cargo.lock").is_file())
        .map_or_else(|| dir.join(".."), Path::to_path_buf)
}
