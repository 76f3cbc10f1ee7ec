//! Function folders in tinyFaaS format and how their runtime is detected.
//!
//! A function is a folder named after it holding one entry point:
//! `fn.py` (python3), `index.js` or a `package.json` with `main` (nodejs), or `fn.sh` (binary),
//! exactly the files tinyFaaS deploys. tinyFaaS takes the runtime from its upload command rather
//! than the folder, so a folder with more than one entry point must say which it is with a
//! `runtime` file holding `python3`, `nodejs` or `binary`.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use geofaas_config::function::valid_function_name;

use super::error::LocalError;

/// The language runtime a function folder runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Runtime {
    /// `fn.py` defining `fn(input, headers) -> str`, served by a warm python3 worker.
    Python3,
    /// A Node.js module exporting `(req, res) => res.send(str)`, served by a warm node worker.
    Nodejs,
    /// `fn.sh` run once per call: body on stdin, stdout is the output.
    Binary,
}

impl Runtime {
    /// The name tinyFaaS uses for this runtime.
    pub fn name(self) -> &'static str {
        match self {
            Runtime::Python3 => "python3",
            Runtime::Nodejs => "nodejs",
            Runtime::Binary => "binary",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s.trim() {
            "python3" | "python" => Some(Runtime::Python3),
            "nodejs" | "node" => Some(Runtime::Nodejs),
            "binary" => Some(Runtime::Binary),
            _ => None,
        }
    }
}

impl fmt::Display for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One deployable function: its name, folder and runtime.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FunctionSpec {
    /// Name used in calls (the folder name).
    pub name: String,
    /// Absolute path of the folder.
    pub dir: PathBuf,
    /// Detected runtime.
    pub runtime: Runtime,
    /// The deployed version's id (`None` for a folder of the configured `functions_dir`).
    pub version: Option<Arc<str>>,
    /// Extra environment of the function's processes (`geofaas deploy --env/--secret`).
    pub env: Vec<(String, String)>,
}

impl FunctionSpec {
    /// This spec as deployed version `version` with `env` in its processes' environment.
    pub fn deployed(mut self, version: &str, env: Vec<(String, String)>) -> Self {
        self.version = Some(Arc::from(version));
        self.env = env;
        self
    }
}

/// Reads every function folder under `dir`, or only `only` when given. Hidden entries and plain
/// files at the top level are skipped; a folder that is not a usable function is an error.
pub fn scan(dir: &Path, only: Option<&[String]>) -> Result<Vec<FunctionSpec>, LocalError> {
    let dir = std::fs::canonicalize(dir).map_err(|source| LocalError::FunctionsDir {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut specs = Vec::new();
    if let Some(names) = only {
        for name in names {
            let path = dir.join(name);
            if !path.is_dir() {
                return Err(LocalError::MissingFunction {
                    name: name.clone(),
                    path,
                });
            }
            specs.push(load(name, &path)?);
        }
        return Ok(specs);
    }
    let entries = std::fs::read_dir(&dir).map_err(|source| LocalError::FunctionsDir {
        path: dir.clone(),
        source,
    })?;
    for entry in entries {
        let entry = entry.map_err(|source| LocalError::FunctionsDir {
            path: dir.clone(),
            source,
        })?;
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || !path.is_dir() {
            continue;
        }
        specs.push(load(&name, &path)?);
    }
    specs.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(specs)
}

/// Checks one function folder and detects its runtime.
pub fn load(name: &str, dir: &Path) -> Result<FunctionSpec, LocalError> {
    let bad = |reason: String| LocalError::BadFunction {
        path: dir.to_path_buf(),
        reason,
    };
    if !valid_function_name(name) {
        return Err(bad(format!(
            "{name:?} is not a valid function name (letters, digits, '-' and '_', at most 64)"
        )));
    }
    let runtime = match std::fs::read_to_string(dir.join("runtime")) {
        Ok(text) => Runtime::parse(&text).ok_or_else(|| {
            bad(format!(
                "the runtime file says {:?}; expected python3, nodejs or binary",
                text.trim()
            ))
        })?,
        Err(_) => detect(dir).map_err(bad)?,
    };
    check_entry(dir, runtime).map_err(bad)?;
    Ok(FunctionSpec {
        name: name.to_owned(),
        dir: dir.to_path_buf(),
        runtime,
        version: None,
        env: Vec::new(),
    })
}

fn detect(dir: &Path) -> Result<Runtime, String> {
    let found: Vec<Runtime> = [
        (dir.join("fn.py").is_file(), Runtime::Python3),
        (
            dir.join("index.js").is_file() || dir.join("package.json").is_file(),
            Runtime::Nodejs,
        ),
        (dir.join("fn.sh").is_file(), Runtime::Binary),
    ]
    .into_iter()
    .filter_map(|(present, runtime)| present.then_some(runtime))
    .collect();
    match found.as_slice() {
        [one] => Ok(*one),
        [] => Err(
            "no entry point: expected fn.py (python3), index.js or package.json (nodejs), \
                   or fn.sh (binary)"
                .to_owned(),
        ),
        many => Err(format!(
            "more than one entry point ({}): add a `runtime` file naming one",
            many.iter().map(|r| r.name()).collect::<Vec<_>>().join(", ")
        )),
    }
}

fn check_entry(dir: &Path, runtime: Runtime) -> Result<(), String> {
    match runtime {
        Runtime::Python3 if !dir.join("fn.py").is_file() => {
            Err("runtime python3 needs fn.py".into())
        }
        Runtime::Binary if !dir.join("fn.sh").is_file() => Err("runtime binary needs fn.sh".into()),
        Runtime::Nodejs => node_entry(dir).map(|_| ()),
        _ => Ok(()),
    }
}

/// The file Node's `require(dir)` loads: `package.json`'s `main`, else `index.js`.
fn node_entry(dir: &Path) -> Result<PathBuf, String> {
    let manifest = dir.join("package.json");
    if manifest.is_file() {
        let text = std::fs::read_to_string(&manifest)
            .map_err(|e| format!("cannot read package.json: {e}"))?;
        let json: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| format!("package.json is not JSON: {e}"))?;
        if let Some(main) = json.get("main").and_then(|m| m.as_str()) {
            let path = dir.join(main);
            let candidates = [
                path.clone(),
                path.with_extension("js"),
                path.join("index.js"),
            ];
            return candidates
                .into_iter()
                .find(|p| p.is_file())
                .ok_or_else(|| format!("package.json main {main:?} does not exist"));
        }
    }
    let index = dir.join("index.js");
    if index.is_file() {
        Ok(index)
    } else {
        Err("runtime nodejs needs index.js or a package.json with main".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text).expect("write fixture");
        }
        dir
    }

    #[test]
    fn detects_each_runtime_by_its_entry_point() {
        let py = folder(&[("fn.py", "def fn(i, h): return i")]);
        let js = folder(&[("index.js", "module.exports = (q, r) => r.send('')")]);
        let sh = folder(&[("fn.sh", "cat")]);
        assert_eq!(
            load("a", py.path()).map(|s| s.runtime).ok(),
            Some(Runtime::Python3)
        );
        assert_eq!(
            load("a", js.path()).map(|s| s.runtime).ok(),
            Some(Runtime::Nodejs)
        );
        assert_eq!(
            load("a", sh.path()).map(|s| s.runtime).ok(),
            Some(Runtime::Binary)
        );
    }

    #[test]
    fn package_json_main_must_exist() {
        let js = folder(&[("package.json", r#"{"main": "missing.js"}"#)]);
        let err = load("a", js.path()).expect_err("missing main");
        assert!(err.to_string().contains("missing.js"), "{err}");
    }

    #[test]
    fn ambiguous_folder_needs_a_runtime_file() {
        let both = folder(&[("fn.py", ""), ("fn.sh", "")]);
        let err = load("a", both.path()).expect_err("ambiguous");
        assert!(err.to_string().contains("runtime"), "{err}");
        std::fs::write(both.path().join("runtime"), "binary\n").expect("write");
        assert_eq!(
            load("a", both.path()).map(|s| s.runtime).ok(),
            Some(Runtime::Binary)
        );
    }

    #[test]
    fn empty_or_badly_named_folders_are_rejected_by_path() {
        let empty = folder(&[]);
        let err = load("a", empty.path()).expect_err("empty");
        assert!(
            err.to_string()
                .contains(&empty.path().display().to_string()),
            "{err}"
        );
        let ok = folder(&[("fn.sh", "cat")]);
        assert!(load("has space", ok.path()).is_err());
    }
}
