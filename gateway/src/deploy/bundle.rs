//! Function bundles: a tinyFaaS-format function folder as a gzip'd tar, checked entry by entry
//! before anything is written, and the content-addressed id of a version.
//!
//! Only regular files and folders may be in a bundle, at relative paths without `..`; a link,
//! a device, a FIFO, an absolute path or one that climbs out of the folder refuses the whole
//! bundle. The bundle is read into memory (bounded by `[deploy] max_bundle_bytes`, unpacked
//! too) and only then written, so a refused bundle writes nothing.
//!
//! The version id is the first 12 hex digits of a SHA-256 over the bundle's canonical form:
//! every file in byte order of its path, each as `path NUL x|- NUL length NUL bytes`, then each
//! `--env` entry as `env NUL KEY=VALUE NUL` and each secret as `secret NUL KEY NUL sha256(value)
//! NUL` (values only through a hash). Modes other than the executable bit, owners and times
//! do not count, so the same folder packed on any machine is the same version.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Component, Path};

use super::store::VersionEnv;

/// Most files one bundle may hold.
pub const MAX_FILES: usize = 10_000;
/// Hex digits of the SHA-256 that make a version id.
const VERSION_HEX: usize = 12;

/// A checked bundle: its files by relative path (`/`-separated), in byte order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Bundle {
    files: BTreeMap<String, File>,
}

/// One regular file of a bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct File {
    /// Whether any executable bit was set (kept: `fn.sh` may be run directly).
    pub executable: bool,
    /// Its bytes.
    pub data: Vec<u8>,
}

/// Why a bundle was refused; each names the entry or limit at fault.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum BundleError {
    /// Over `max_bundle_bytes`, sent or unpacked.
    #[error("the bundle is larger than the limit of {limit} bytes ([deploy] max_bundle_bytes)")]
    TooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// More than [`MAX_FILES`] entries.
    #[error("the bundle holds more than {MAX_FILES} files")]
    TooManyFiles,
    /// Not a gzip'd tar, or truncated.
    #[error("the bundle is not a valid gzip'd tar archive: {0}")]
    Corrupt(String),
    /// An absolute path.
    #[error("the bundle holds an absolute path: {0:?}")]
    AbsolutePath(String),
    /// A path with `..`.
    #[error("the bundle holds a path that leaves its folder: {0:?}")]
    ParentPath(String),
    /// A symbolic or hard link.
    #[error("the bundle holds a link, which is not allowed: {0:?}")]
    Link(String),
    /// A device, FIFO or other special file.
    #[error("the bundle holds a {kind}, which is not allowed: {path:?}")]
    Special {
        /// The entry.
        path: String,
        /// What it is.
        kind: &'static str,
    },
    /// A path that is not UTF-8.
    #[error("the bundle holds a path that is not UTF-8: {0:?}")]
    NotUtf8(String),
    /// The same path twice.
    #[error("the bundle holds {0:?} twice")]
    Duplicate(String),
    /// No files at all.
    #[error("the bundle holds no files")]
    Empty,
}

impl Bundle {
    /// Reads a gzip'd tar of at most `limit` bytes unpacked, checking every entry.
    pub fn unpack(gzip: &[u8], limit: usize) -> Result<Self, BundleError> {
        if gzip.len() > limit {
            return Err(BundleError::TooLarge { limit });
        }
        let corrupt = |e: std::io::Error| BundleError::Corrupt(e.to_string());
        let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(gzip));
        let mut files = BTreeMap::new();
        let mut total: usize = 0;
        for (count, entry) in archive.entries().map_err(corrupt)?.enumerate() {
            if count >= MAX_FILES {
                return Err(BundleError::TooManyFiles);
            }
            let mut entry = entry.map_err(corrupt)?;
            let raw = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
            let kind = entry.header().entry_type();
            let path = checked_path(&entry.path_bytes(), &raw)?;
            match kind {
                // Folders are implied by their files; a pax global header (`git archive`) says
                // nothing about the files.
                tar::EntryType::Directory | tar::EntryType::XGlobalHeader => continue,
                tar::EntryType::Regular | tar::EntryType::Continuous => {}
                tar::EntryType::Symlink | tar::EntryType::Link => {
                    return Err(BundleError::Link(raw))
                }
                other => {
                    return Err(BundleError::Special {
                        path: raw,
                        kind: special_kind(other),
                    })
                }
            }
            let Some(path) = path else { continue };
            let size = usize::try_from(entry.size()).unwrap_or(usize::MAX);
            total = total.saturating_add(size);
            if total > limit {
                return Err(BundleError::TooLarge { limit });
            }
            let mut data = Vec::with_capacity(size);
            entry.read_to_end(&mut data).map_err(corrupt)?;
            let executable = entry.header().mode().is_ok_and(|m| m & 0o111 != 0);
            if files
                .insert(path.clone(), File { executable, data })
                .is_some()
            {
                return Err(BundleError::Duplicate(path));
            }
        }
        if files.is_empty() {
            return Err(BundleError::Empty);
        }
        Ok(Self { files })
    }

    /// Reads a function folder from disk (for `geofaas deploy`). Hidden entries at the top
    /// (`.git`, `.geofaas`) are left out; a link or special file inside is an error naming it.
    pub fn from_dir(dir: &Path) -> std::io::Result<Self> {
        Self::read_dir(dir, false)
    }

    /// Reads a kept version's folder back, hidden files included (it holds exactly what was
    /// deployed).
    pub fn from_version_dir(dir: &Path) -> std::io::Result<Self> {
        Self::read_dir(dir, true)
    }

    fn read_dir(dir: &Path, hidden: bool) -> std::io::Result<Self> {
        let mut bundle = Self::default();
        add_dir(&mut bundle, dir, "", hidden)?;
        if bundle.files.is_empty() {
            return Err(std::io::Error::other(format!(
                "{} holds no files",
                dir.display()
            )));
        }
        Ok(bundle)
    }

    /// The bundle as a gzip'd tar in canonical order, modes 0644 or 0755, owner 0, time 0.
    pub fn pack(&self) -> std::io::Result<Vec<u8>> {
        let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        let mut tar = tar::Builder::new(gz);
        for (path, file) in &self.files {
            let mut header = tar::Header::new_gnu();
            header.set_size(file.data.len() as u64);
            header.set_mode(if file.executable { 0o755 } else { 0o644 });
            header.set_mtime(0);
            header.set_uid(0);
            header.set_gid(0);
            header.set_entry_type(tar::EntryType::Regular);
            tar.append_data(&mut header, path, file.data.as_slice())?;
        }
        tar.into_inner()?.finish()
    }

    /// The files by relative path.
    pub fn files(&self) -> &BTreeMap<String, File> {
        &self.files
    }

    /// Total bytes of the files.
    pub fn size(&self) -> usize {
        self.files.values().map(|f| f.data.len()).sum()
    }

    /// The version id of these files with this environment (see the module docs).
    pub fn version(&self, env: &VersionEnv) -> String {
        let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
        for (path, file) in &self.files {
            ctx.update(path.as_bytes());
            ctx.update(if file.executable { b"\0x\0" } else { b"\0-\0" });
            ctx.update(file.data.len().to_string().as_bytes());
            ctx.update(b"\0");
            ctx.update(&file.data);
        }
        for (k, v) in &env.env {
            ctx.update(format!("env\0{k}={v}\0").as_bytes());
        }
        for expr in &env.cron {
            ctx.update(format!("cron\0{expr}\0").as_bytes());
        }
        for spec in &env.on {
            ctx.update(format!("on\0{spec}\0").as_bytes());
        }
        for (k, v) in &env.secrets {
            let hash = ring::digest::digest(&ring::digest::SHA256, v.as_bytes());
            ctx.update(format!("secret\0{k}\0").as_bytes());
            ctx.update(hash.as_ref());
            ctx.update(b"\0");
        }
        let digest = ctx.finish();
        let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        hex[..VERSION_HEX].to_owned()
    }

    /// Writes the files under `dir` (which must not exist yet; its parent must).
    pub fn write_to(&self, dir: &Path) -> std::io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir(dir)?;
        for (path, file) in &self.files {
            let target = dir.join(path);
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent)?;
            }
            let mut out = std::fs::File::create(&target)?;
            out.write_all(&file.data)?;
            let mode = if file.executable { 0o755 } else { 0o644 };
            out.set_permissions(std::fs::Permissions::from_mode(mode))?;
        }
        Ok(())
    }
}

/// The entry's path made relative and `/`-separated; `None` for the folder itself (`./`).
fn checked_path(bytes: &[u8], raw: &str) -> Result<Option<String>, BundleError> {
    let text = std::str::from_utf8(bytes).map_err(|_| BundleError::NotUtf8(raw.to_owned()))?;
    let mut parts = Vec::new();
    for c in Path::new(text).components() {
        match c {
            Component::Normal(p) => parts.push(p.to_string_lossy().into_owned()),
            Component::CurDir => {}
            Component::ParentDir => return Err(BundleError::ParentPath(raw.to_owned())),
            Component::RootDir | Component::Prefix(_) => {
                return Err(BundleError::AbsolutePath(raw.to_owned()))
            }
        }
    }
    Ok((!parts.is_empty()).then(|| parts.join("/")))
}

fn special_kind(kind: tar::EntryType) -> &'static str {
    match kind {
        tar::EntryType::Char => "character device",
        tar::EntryType::Block => "block device",
        tar::EntryType::Fifo => "FIFO",
        _ => "special entry",
    }
}

fn add_dir(bundle: &mut Bundle, dir: &Path, prefix: &str, hidden: bool) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !hidden && prefix.is_empty() && name.starts_with('.') {
            continue;
        }
        let path = entry.path();
        let rel = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        let meta = std::fs::symlink_metadata(&path)?;
        if meta.is_dir() {
            add_dir(bundle, &path, &rel, hidden)?;
        } else if meta.is_file() {
            let mut data = Vec::new();
            std::fs::File::open(&path)?.read_to_end(&mut data)?;
            let executable = meta.permissions().mode() & 0o111 != 0;
            bundle.files.insert(rel, File { executable, data });
        } else {
            return Err(std::io::Error::other(format!(
                "{} is a link or special file; a function folder holds only files and folders",
                path.display()
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "bundle_tests.rs"]
mod tests;
