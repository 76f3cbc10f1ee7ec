//! Errors of reading a GeoIP database, writing one, and setting up readiness probes.

use std::path::PathBuf;

/// Why a database could not be read or written, or the probes could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GeoError {
    /// The GeoIP database could not be opened or read.
    #[error("{path}: cannot read GeoIP database: {message}")]
    GeoIp {
        /// The `.mmdb` file.
        path: PathBuf,
        /// The reader's message.
        message: String,
    },
    /// A lookup in an opened database failed (corrupt tree or record).
    #[error("GeoIP lookup failed: {0}")]
    Lookup(String),
    /// Writing a database failed.
    #[error("cannot write GeoIP database {path}: {message}")]
    Write {
        /// The `.mmdb` file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The CA PEM for health probes could not be read or parsed.
    #[error("{path}: cannot use as CA for health probes: {message}")]
    Ca {
        /// The PEM file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// Building the HTTP client for health probes failed.
    #[error("health probe client: {0}")]
    Probe(String),
}

impl GeoError {
    /// Whether the error is the operator's to fix (files, paths), as opposed to the runtime's.
    pub fn is_config(&self) -> bool {
        matches!(
            self,
            Self::GeoIp { .. } | Self::Ca { .. } | Self::Write { .. }
        )
    }
}
