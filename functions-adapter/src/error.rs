//! Errors of a function call, classified so callers can fail over without string matching.

use std::time::Duration;

/// Whose fault a failed call was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The function itself failed (crashed, threw, returned an error body).
    Function,
    /// The backend platform failed or refused (overloaded, misconfigured, down).
    Backend,
    /// The network between the gateway and the backend failed.
    Network,
    /// The caller's request was unusable (unknown function, bad input).
    Client,
}

/// A failed function call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InvokeError {
    /// The backend does not serve this function.
    #[error("function {0:?} is not deployed on this backend")]
    UnknownFunction(String),
    /// The function ran and failed; `body` is what it reported (passed to the client where safe).
    #[error("function failed: {message}")]
    FunctionFailed {
        /// Short description of the failure.
        message: String,
        /// The function's own error output, if any.
        body: Option<bytes::Bytes>,
    },
    /// The call did not complete before its deadline.
    #[error("call timed out after {0:?}")]
    Timeout(Duration),
    /// The function's output exceeded the configured limit.
    #[error("function output exceeded {limit} bytes")]
    OutputTooLarge {
        /// Configured limit in bytes.
        limit: usize,
    },
    /// The backend has no capacity now (throttled, pool exhausted); `retry_after` when it said.
    #[error("backend overloaded")]
    Overloaded {
        /// How long the backend asked callers to wait, if it did.
        retry_after: Option<Duration>,
    },
    /// The backend rejected our credentials.
    #[error("backend rejected credentials: {0}")]
    Auth(String),
    /// The backend is unreachable, or refused the call before the function started.
    #[error("backend unavailable: {0}")]
    Unavailable(String),
    /// Transport failure after the request was (partly) sent: the function may have run.
    #[error("network error: {0}")]
    Network(String),
    /// The backend answered something that does not follow its protocol.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The backend cannot take what was asked as it was asked (a deploy of a runtime or a name
    /// the platform has no place for, or a deploy the platform refused with a 4xx); the string
    /// names the platform, the function and the platform's words. Retrying will not help.
    #[error("{0}")]
    Refused(String),
    /// The circuit breaker is open: the backend failed recently and is skipped for now.
    #[error("backend skipped: circuit open")]
    CircuitOpen,
    /// The function answered something that is not a valid HTTP response (a status outside
    /// 200-599, a header with CR/LF in it); the string names the function and what was wrong.
    /// Nothing of the answer reaches the client.
    #[error("{0}")]
    BadAnswer(String),
}

impl InvokeError {
    /// Whose fault the failure was.
    pub fn fault(&self) -> Fault {
        match self {
            Self::UnknownFunction(_) | Self::Refused(_) => Fault::Client,
            Self::FunctionFailed { .. } | Self::OutputTooLarge { .. } | Self::BadAnswer(_) => {
                Fault::Function
            }
            Self::Timeout(_) | Self::Network(_) => Fault::Network,
            Self::Overloaded { .. }
            | Self::Auth(_)
            | Self::Unavailable(_)
            | Self::Protocol(_)
            | Self::CircuitOpen => Fault::Backend,
        }
    }

    /// Whether the function may have started running before this failure, so that running the
    /// call again elsewhere could repeat its side effects.
    ///
    /// `false` only where the call never reached the function: not deployed, no capacity,
    /// circuit open, credentials refused, backend unreachable or refusing before the start
    /// ([`InvokeError::Unavailable`]). A function that ran and failed (or crashed, or wrote too
    /// much), a connection lost after the request was sent ([`InvokeError::Network`]), a reply
    /// that breaks the protocol and a timeout all may have run. The gateway moves a call to
    /// another backend or node only when this is `false`, and on a timeout (docs/backends.md).
    pub fn may_have_run(&self) -> bool {
        match self {
            Self::FunctionFailed { .. }
            | Self::OutputTooLarge { .. }
            | Self::BadAnswer(_)
            | Self::Timeout(_)
            | Self::Network(_)
            | Self::Protocol(_) => true,
            Self::UnknownFunction(_)
            | Self::Refused(_)
            | Self::Overloaded { .. }
            | Self::Auth(_)
            | Self::Unavailable(_)
            | Self::CircuitOpen => false,
        }
    }

    /// Whether retrying the same call on the same backend later may succeed.
    ///
    /// Failover to another backend or the cloud is decided by the gateway and is
    /// allowed for every error but a client fault.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Self::Overloaded { .. }
                | Self::Unavailable(_)
                | Self::Network(_)
                | Self::Timeout(_)
                | Self::CircuitOpen
        )
    }
}
