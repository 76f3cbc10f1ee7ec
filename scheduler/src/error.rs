//! Errors of the scheduler crate: loading topologies, traces and weights, solving the MILP.

use std::path::PathBuf;

/// Everything that can go wrong in the scheduler library.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SchedulerError {
    /// A file could not be read or written.
    #[error("i/o error on {path}: {source}")]
    Io {
        /// The file concerned.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A CSV or JSON input did not have the documented shape.
    #[error("bad input {what}: {message}")]
    Parse {
        /// What was being parsed (file name, line).
        what: String,
        /// What was wrong.
        message: String,
    },
    /// A weights file was missing a tensor or had the wrong shape.
    #[error("bad weights: {0}")]
    Weights(String),
    /// The MILP solver failed (not merely infeasible: the model always has a reject option).
    #[error("MILP solver failed: {0}")]
    Solver(String),
    /// A topology or workload that cannot be simulated (no nodes, no functions ...).
    #[error("invalid setup: {0}")]
    Invalid(String),
}

impl SchedulerError {
    /// Builds an [`SchedulerError::Io`] for `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }

    /// Builds a [`SchedulerError::Parse`].
    pub fn parse(what: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Parse {
            what: what.into(),
            message: message.into(),
        }
    }

    /// True when the error is the caller's input (a file to fix), not a bug or the environment.
    pub fn is_input_error(&self) -> bool {
        matches!(
            self,
            Self::Parse { .. } | Self::Weights(_) | Self::Invalid(_)
        )
    }
}

/// Result alias of this crate.
pub type Result<T, E = SchedulerError> = std::result::Result<T, E>;
