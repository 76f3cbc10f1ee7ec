//! Zip archives of a function folder as each remote platform takes them for a deploy, with the
//! entry wrappers ([`shim.py`, `shim.js`](self)) that adapt the platform's calling convention
//! to the tinyFaaS format, and the unwrapping of what those wrappers return.
//!
//! - tinyFaaS: the folder as it is, plus what its runtime images need to build: an empty
//!   `requirements.txt` for `python3` when there is none (its Dockerfile runs
//!   `pip install -r requirements.txt`), a `package.json` named `fn` for `nodejs` (it runs
//!   `npm install ./fn` and `require("fn")`);
//! - OpenWhisk: `python3` folders get `__main__.py` (entry `main`) beside `fn.py`; `nodejs`
//!   folders go under `function/` with a `package.json` whose `main` is `geofaas_handler.js`;
//! - Lambda: `python3` folders get `geofaas_handler.py`, `nodejs` folders go under `function/`
//!   beside `geofaas_handler.js` (handler `geofaas_handler.handler` in both).
//!
//! Archives are deflated, list directories before their files (tinyFaaS's unzip does not create
//! parents), carry modes 0644 or 0755 (executable in the folder) and a fixed time, so the same
//! folder always gives the same bytes.

use std::collections::BTreeSet;
use std::io::Write as _;
use std::path::Path;

use bytes::Bytes;
use serde_json::Value;
use zip::write::SimpleFileOptions;

use crate::local::Runtime;
use crate::{InvokeError, RemoteDeploy};

/// The key of a wrapper's result that carries the function's output as text.
pub(crate) const BODY_KEY: &str = "geofaas_body";
/// The key of a wrapper's result that carries the function's output as base64 (bytes).
pub(crate) const BODY_BASE64_KEY: &str = "geofaas_body_base64";

/// The Python wrapper (OpenWhisk `main(args)`, Lambda `handler(event, context)`).
pub(crate) const SHIM_PY: &str = include_str!("shim.py");
/// The Node.js wrapper (OpenWhisk `exports.main`, Lambda `exports.handler`).
pub(crate) const SHIM_JS: &str = include_str!("shim.js");

/// The module and function Lambda calls (`geofaas_handler.handler`).
pub(crate) const LAMBDA_HANDLER: &str = "geofaas_handler.handler";

/// Why a folder could not be packed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PackError {
    /// Reading the folder failed.
    #[error("reading the function folder: {0}")]
    Io(#[from] std::io::Error),
    /// Writing the archive failed.
    #[error("writing the zip archive: {0}")]
    Zip(#[from] zip::result::ZipError),
    /// The folder holds something other than regular files and folders.
    #[error("{0} is not a regular file (links and devices are not deployed)")]
    NotRegular(String),
    /// A file of the folder has a name the wrapper needs.
    #[error("the folder has its own {0}, which the {1} wrapper needs")]
    Taken(String, &'static str),
    /// A `package.json` that is not a JSON object.
    #[error("package.json is not a JSON object: {0}")]
    Manifest(String),
}

/// A zip archive being written.
struct Archive {
    writer: zip::ZipWriter<std::io::Cursor<Vec<u8>>>,
    names: BTreeSet<String>,
}

impl Archive {
    fn new() -> Self {
        Self {
            writer: zip::ZipWriter::new(std::io::Cursor::new(Vec::new())),
            names: BTreeSet::new(),
        }
    }

    fn options(mode: u32) -> SimpleFileOptions {
        SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated)
            .last_modified_time(zip::DateTime::default())
            .unix_permissions(mode)
    }

    /// Adds the files of `dir` under `prefix` (`""` or `"function/"`), in sorted order with each
    /// directory before its files, leaving out the top-level names in `replaced`.
    fn add_folder(&mut self, dir: &Path, prefix: &str, replaced: &[&str]) -> Result<(), PackError> {
        if !prefix.is_empty() {
            self.add_dir(prefix)?;
        }
        let mut stack = vec![(dir.to_owned(), prefix.to_owned())];
        while let Some((folder, at)) = stack.pop() {
            let mut entries: Vec<_> = std::fs::read_dir(&folder)?.collect::<Result<_, _>>()?;
            entries.sort_by_key(|e| e.file_name());
            let mut subfolders = Vec::new();
            for entry in entries {
                let name = entry.file_name().to_string_lossy().into_owned();
                let path = format!("{at}{name}");
                if at == prefix && replaced.contains(&name.as_str()) {
                    continue;
                }
                let meta = std::fs::symlink_metadata(entry.path())?;
                if meta.is_dir() {
                    self.add_dir(&format!("{path}/"))?;
                    subfolders.push((entry.path(), format!("{path}/")));
                } else if meta.is_file() {
                    use std::os::unix::fs::PermissionsExt as _;
                    let mode = if meta.permissions().mode() & 0o111 != 0 {
                        0o755
                    } else {
                        0o644
                    };
                    self.add_file(&path, &std::fs::read(entry.path())?, mode)?;
                } else {
                    return Err(PackError::NotRegular(path));
                }
            }
            // Depth first, in name order: pushed reversed so the first pops first.
            stack.extend(subfolders.into_iter().rev());
        }
        Ok(())
    }

    fn add_dir(&mut self, path: &str) -> Result<(), PackError> {
        self.names.insert(path.to_owned());
        self.writer.add_directory(path, Self::options(0o755))?;
        Ok(())
    }

    fn add_file(&mut self, path: &str, data: &[u8], mode: u32) -> Result<(), PackError> {
        self.names.insert(path.to_owned());
        self.writer.start_file(path, Self::options(mode))?;
        self.writer.write_all(data)?;
        Ok(())
    }

    fn finish(self) -> Result<Vec<u8>, PackError> {
        Ok(self.writer.finish()?.into_inner())
    }
}

/// Fails when the folder has a top-level file named `name` (the wrapper's).
fn refuse_taken(dir: &Path, name: &str, platform: &'static str) -> Result<(), PackError> {
    if std::fs::symlink_metadata(dir.join(name)).is_ok() {
        return Err(PackError::Taken(name.to_owned(), platform));
    }
    Ok(())
}

/// The folder as tinyFaaS's runtime images build it (see the module docs; tinyFaaS has all
/// three runtimes, so this is never `None`).
pub(crate) fn tinyfaas_zip(dir: &Path, runtime: Runtime) -> Result<Option<Vec<u8>>, PackError> {
    let mut archive = Archive::new();
    match runtime {
        Runtime::Python3 => {
            archive.add_folder(dir, "", &[])?;
            if !dir.join("requirements.txt").is_file() {
                archive.add_file("requirements.txt", b"", 0o644)?;
            }
        }
        Runtime::Nodejs => {
            archive.add_folder(dir, "", &["package.json"])?;
            archive.add_file("package.json", &tinyfaas_manifest(dir)?, 0o644)?;
        }
        Runtime::Binary => archive.add_folder(dir, "", &[])?,
    }
    archive.finish().map(Some)
}

/// The folder's `package.json` with `"name": "fn"` (tinyFaaS requires the function as `fn`), or
/// a new one for an `index.js` folder.
fn tinyfaas_manifest(dir: &Path) -> Result<Vec<u8>, PackError> {
    let mut manifest = match std::fs::read(dir.join("package.json")) {
        Ok(text) => match serde_json::from_slice::<Value>(&text) {
            Ok(Value::Object(map)) => map,
            Ok(_) => return Err(PackError::Manifest("not an object".into())),
            Err(e) => return Err(PackError::Manifest(e.to_string())),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut map = serde_json::Map::new();
            map.insert("version".into(), "1.0.0".into());
            map.insert("main".into(), "index.js".into());
            map
        }
        Err(e) => return Err(e.into()),
    };
    manifest.insert("name".into(), "fn".into());
    Ok(Value::Object(manifest).to_string().into_bytes())
}

/// The archive of an OpenWhisk action (`None` for a runtime OpenWhisk has no kind for).
pub(crate) fn openwhisk_zip(dir: &Path, runtime: Runtime) -> Result<Option<Vec<u8>>, PackError> {
    let mut archive = Archive::new();
    match runtime {
        Runtime::Python3 => {
            refuse_taken(dir, "__main__.py", "OpenWhisk")?;
            archive.add_folder(dir, "", &[])?;
            archive.add_file("__main__.py", SHIM_PY.as_bytes(), 0o644)?;
        }
        Runtime::Nodejs => {
            let manifest = serde_json::json!({
                "name": "geofaas-action",
                "version": "1.0.0",
                "main": "geofaas_handler.js",
            });
            archive.add_file("package.json", manifest.to_string().as_bytes(), 0o644)?;
            archive.add_file("geofaas_handler.js", SHIM_JS.as_bytes(), 0o644)?;
            archive.add_folder(dir, "function/", &[])?;
        }
        Runtime::Binary => return Ok(None),
    }
    archive.finish().map(Some)
}

/// The archive of a Lambda function (`None` for a runtime Lambda has no runtime for).
pub(crate) fn lambda_zip(dir: &Path, runtime: Runtime) -> Result<Option<Vec<u8>>, PackError> {
    let mut archive = Archive::new();
    match runtime {
        Runtime::Python3 => {
            refuse_taken(dir, "geofaas_handler.py", "Lambda")?;
            archive.add_folder(dir, "", &[])?;
            archive.add_file("geofaas_handler.py", SHIM_PY.as_bytes(), 0o644)?;
        }
        Runtime::Nodejs => {
            archive.add_file("geofaas_handler.js", SHIM_JS.as_bytes(), 0o644)?;
            archive.add_folder(dir, "function/", &[])?;
        }
        Runtime::Binary => return Ok(None),
    }
    archive.finish().map(Some)
}

/// One of the `*_zip` functions: a folder's archive for one platform, `None` for a runtime the
/// platform has no place for.
pub(crate) type Packer = fn(&Path, Runtime) -> Result<Option<Vec<u8>>, PackError>;

/// Runs `pack` (one of the `*_zip` functions) off the async threads; a folder that cannot be
/// packed, or a runtime the platform has no place for (`None`), is [`InvokeError::Refused`].
pub(crate) async fn pack(
    platform: &'static str,
    fun: &RemoteDeploy,
    pack: Packer,
) -> Result<Vec<u8>, InvokeError> {
    let (dir, runtime) = (fun.dir.clone(), fun.runtime);
    let packed = tokio::task::spawn_blocking(move || pack(&dir, runtime))
        .await
        .map_err(|e| InvokeError::Unavailable(format!("packing {}: {e}", fun.name)))?;
    match packed {
        Ok(Some(zip)) => Ok(zip),
        Ok(None) => Err(InvokeError::Refused(format!(
            "{platform} has no runtime for {runtime} functions: cannot deploy {}",
            fun.name
        ))),
        Err(err) => Err(InvokeError::Refused(format!(
            "cannot deploy {} to {platform}: {err}",
            fun.name
        ))),
    }
}

/// The function's raw output when `result` is what a wrapper returned, else `None` (an action
/// or function that geofaas did not deploy).
pub(crate) fn unwrap_result(result: &Value) -> Option<Bytes> {
    let Value::Object(map) = result else {
        return None;
    };
    if map.len() != 1 {
        return None;
    }
    match map.iter().next()? {
        (k, Value::String(text)) if k == BODY_KEY => Some(Bytes::from(text.clone())),
        (k, Value::String(b64)) if k == BODY_BASE64_KEY => {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD
                .decode(b64)
                .ok()
                .map(Bytes::from)
        }
        _ => None,
    }
}

/// [`unwrap_result`] for a reply body, parsed only when it starts like a wrapper's result.
pub(crate) fn unwrap_body(body: &[u8]) -> Option<Bytes> {
    let start = body.iter().position(|b| !b.is_ascii_whitespace())?;
    let rest = body[start..].strip_prefix(b"{")?;
    let at = rest.iter().position(|b| !b.is_ascii_whitespace())?;
    if !rest[at..].starts_with(b"\"geofaas_body") {
        return None;
    }
    unwrap_result(&serde_json::from_slice(body).ok()?)
}

#[cfg(test)]
mod tests;
