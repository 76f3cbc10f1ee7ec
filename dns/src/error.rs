//! Errors of setting up and running the geo DNS server.

use std::path::PathBuf;

/// Why the DNS server could not start or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DnsError {
    /// The topology is not usable (invalid, or a zone name hickory rejects).
    #[error("topology: {0}")]
    Topology(String),
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
    /// Binding or serving a socket failed.
    #[error("{addr}: {source}")]
    Io {
        /// The address being bound or served.
        addr: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The hickory server stopped with an error.
    #[error("DNS server: {0}")]
    Server(String),
}

impl DnsError {
    /// Whether the error is the operator's to fix (configuration, files), as opposed to the runtime's.
    pub fn is_config(&self) -> bool {
        matches!(
            self,
            Self::Topology(_) | Self::GeoIp { .. } | Self::Ca { .. } | Self::Write { .. }
        )
    }
}
