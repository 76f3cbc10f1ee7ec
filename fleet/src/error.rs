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
    /// A `[registry]` setting that cannot be used (a TLS file, a credentials variable).
    #[error("{field}: {reason}")]
    Setting {
        /// The field, e.g. `registry.tls.ca`.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// etcd refused the credentials (wrong user or password, or auth not enabled there).
    #[error("etcd credentials refused: {0}")]
    Credentials(String),
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
        // The causes say what a bare "transport error" hides (refused, TLS handshake).
        let mut text = s.message().to_owned();
        let mut cause = std::error::Error::source(&s);
        while let Some(c) = cause {
            let c_text = c.to_string();
            if !text.contains(&c_text) {
                text = format!("{text}: {c_text}");
            }
            cause = c.source();
        }
        match s.code() {
            tonic::Code::Unavailable | tonic::Code::DeadlineExceeded | tonic::Code::Cancelled => {
                Self::Unavailable(text)
            }
            tonic::Code::Unauthenticated | tonic::Code::PermissionDenied => Self::Credentials(text),
            _ => Self::Etcd(format!("{:?}: {text}", s.code())),
        }
    }
}
