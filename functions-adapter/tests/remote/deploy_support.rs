//! Function folders and deploy requests shared by the deploy tests.

use std::path::Path;

use geofaas_functions::local::Runtime;
use geofaas_functions::RemoteDeploy;

/// A temporary function folder holding `files` (`path`, text).
pub fn folder(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    for (path, text) in files {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    dir
}

/// A deploy of `dir` as `name`, version `version`, with `env`.
pub fn deploy(
    name: &str,
    version: &str,
    runtime: Runtime,
    dir: &Path,
    env: &[(&str, &str)],
) -> RemoteDeploy {
    RemoteDeploy {
        name: name.to_owned(),
        version: version.to_owned(),
        runtime,
        dir: dir.to_owned(),
        env: env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    }
}

/// A python3 function greeting its input with `$GREETING`.
pub const GREET_PY: &str = "import os\n\n\ndef fn(input, headers):\n    \
    return f\"{os.environ.get('GREETING', 'no greeting')} {input}\"\n";
