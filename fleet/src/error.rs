//! Errors of the fleet: etcd unreachable or answering oddly, records that do not parse, a node
//! refused by the registry.

/// What went wrong talking to the registry.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FleetError {
    /// An etcd URL tonic cannot use, or TLS (not built yet).
    #[error("etcd endpoint {url}: {reason}")]
    Endpoint {
        /// The URL as configured.
        url: String,
        /// Why it cannot be used.
        reason: String,
    },
    /// etcd did not answer in time or the connection failed.
    #[error("etcd unavailable: {0}")]
    Unavailable(String),
    /// etcd answered with an error status.
    #[error("etcd refused the request: {0}")]
    Etcd(String),
    /// A node may not register: its area overlaps a registered one's, or it is a second cloud.
    #[error("registration refused: {0}")]
    Refused(String),
}

impl FleetError {
    /// Whether trying again later may succeed (etcd down or overloaded).
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Unavailable(_) | Self::Etcd(_))
    }
}

impl From<tonic::Status> for FleetError {
    fn from(s: tonic::Status) -> Self {
        match s.code() {
            tonic::Code::Unavailable | tonic::Code::DeadlineExceeded | tonic::Code::Cancelled => {
                Self::Unavailable(s.message().to_owned())
            }
            _ => Self::Etcd(format!("{:?}: {}", s.code(), s.message())),
        }
    }
}
