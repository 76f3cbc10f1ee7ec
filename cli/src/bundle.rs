//! The demo `geofaas up` runs without a checkout: the Berlin topology and the example
//! functions, embedded in the binary and written out under the state dir, so an installed
//! `geofaas` (`cargo install --path cli`) starts the demo from any folder.

use std::path::{Path, PathBuf};

use anyhow::Context;

/// The embedded topology, as `examples/berlin.toml` in the repository.
pub const TOPOLOGY: &str = include_str!("../../examples/berlin.toml");

/// The example functions: path under `functions/`, contents, executable.
pub const FUNCTIONS: &[(&str, &str, bool)] = &[
    (
        "README.md",
        include_str!("../../functions/README.md"),
        false,
    ),
    (
        "echo/fn.py",
        include_str!("../../functions/echo/fn.py"),
        false,
    ),
    (
        "echo-binary/fn.sh",
        include_str!("../../functions/echo-binary/fn.sh"),
        true,
    ),
    (
        "hello-node/index.js",
        include_str!("../../functions/hello-node/index.js"),
        false,
    ),
    (
        "hello-node/package.json",
        include_str!("../../functions/hello-node/package.json"),
        false,
    ),
    (
        "rest-py/fn.py",
        include_str!("../../functions/rest-py/fn.py"),
        false,
    ),
    (
        "sieve/fn.py",
        include_str!("../../functions/sieve/fn.py"),
        false,
    ),
    (
        "sievehard/fn.py",
        include_str!("../../functions/sievehard/fn.py"),
        false,
    ),
    (
        "sse-node/index.js",
        include_str!("../../functions/sse-node/index.js"),
        false,
    ),
];

/// Writes the demo under `dir` (`dir/examples/berlin.toml`, `dir/functions/...`, the layout
/// of the repository, so the topology's relative `functions_dir` holds) and returns the
/// topology's path. Files are rewritten each time: they belong to this binary.
pub fn write(dir: &Path) -> anyhow::Result<PathBuf> {
    let topology = dir.join("examples").join("berlin.toml");
    write_file(&topology, TOPOLOGY, false)?;
    for (path, text, executable) in FUNCTIONS {
        write_file(&dir.join("functions").join(path), text, *executable)?;
    }
    Ok(topology)
}

fn write_file(path: &Path, text: &str, executable: bool) -> anyhow::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))?;
    #[cfg(unix)]
    if executable {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
            .with_context(|| format!("cannot make {} executable", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A function added to `functions/` must be added to the bundle too.
    #[test]
    fn bundle_holds_every_example_function_file() {
        let root = geofaas_test_support::paths::manifest_dir().join("../functions");
        let mut on_disk = Vec::new();
        let mut stack = vec![root.clone()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                } else {
                    let rel = path.strip_prefix(&root).unwrap();
                    on_disk.push(rel.to_string_lossy().into_owned());
                }
            }
        }
        on_disk.sort();
        let mut bundled: Vec<String> = FUNCTIONS.iter().map(|(p, _, _)| p.to_string()).collect();
        bundled.sort();
        assert_eq!(bundled, on_disk);
    }

    #[test]
    fn written_demo_loads_from_another_folder() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path()).unwrap();
        let topology = geofaas_config::Topology::load(&path).unwrap();
        assert_eq!(topology.nodes.len(), 3);
        assert!(dir.path().join("functions/sieve/fn.py").is_file());
    }
}
