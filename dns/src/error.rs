//! Errors of setting up and running the geo DNS server.

/// Why the DNS server could not start or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DnsError {
    /// The topology is not usable (invalid, or a zone name hickory rejects).
    #[error("topology: {0}")]
    Topology(String),
    /// The GeoIP database, or the health probes' set-up (`geofaas-geo`).
    #[error(transparent)]
    Geo(#[from] geofaas_geo::GeoError),
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
        match self {
            Self::Topology(_) => true,
            Self::Geo(e) => e.is_config(),
            _ => false,
        }
    }
}
