//! Errors of setting up the local runtime (scanning function folders, preparing workers).
//!
//! Call-time failures are [`crate::InvokeError`]s; these are the start-up ones, each naming the
//! folder or file at fault.

use std::path::PathBuf;

/// The local runtime could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LocalError {
    /// The functions folder could not be read.
    #[error("cannot read functions folder {path}: {source}")]
    FunctionsDir {
        /// The folder.
        path: PathBuf,
        /// Why reading it failed.
        #[source]
        source: std::io::Error,
    },
    /// A function folder is unusable (no entry point, ambiguous runtime, bad name, ...).
    #[error("function folder {path}: {reason}")]
    BadFunction {
        /// The function folder.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The configuration lists a function that has no folder.
    #[error("function {name:?} is listed in the local backend but {path} does not exist")]
    MissingFunction {
        /// The listed name.
        name: String,
        /// Where its folder was expected.
        path: PathBuf,
    },
    /// A configuration value is out of range.
    #[error("local backend: {0}")]
    Config(String),
    /// The worker bootstrap scripts could not be written to a temporary folder.
    #[error("cannot write worker bootstrap scripts: {0}")]
    Bootstrap(#[source] std::io::Error),
    /// A new version could not start an instance (its import failed, no interpreter, ...).
    #[error("function {name:?} cannot start: {reason}")]
    Start {
        /// The function.
        name: String,
        /// Why no instance started.
        reason: String,
    },
    /// The runtime was created outside a tokio runtime (its keep-alive reaper needs one).
    #[error("LocalRuntime::new must be called inside a tokio runtime")]
    NoTokioRuntime,
}
