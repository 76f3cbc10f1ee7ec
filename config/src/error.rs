//! Errors of loading and validating a topology, each naming the file, the field and the bad value.

use std::path::PathBuf;

/// A topology that could not be loaded or is not valid.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{path}: cannot read: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML for a topology (unknown field, wrong type, ...).
    #[error("{file}: {message}")]
    Parse {
        /// The file (or `<string>`).
        file: String,
        /// The TOML parser's message, which names the field and shows the line.
        message: String,
    },
    /// A field has a value the topology cannot use.
    #[error("{file}: {field} = {value:?}: {reason}")]
    Invalid {
        /// The file (or `<string>`).
        file: String,
        /// Dotted path of the field, e.g. `node[tu-berlin].area`.
        field: String,
        /// The offending value as written.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl ConfigError {
    /// The field path for [`ConfigError::Invalid`], for tests and tools.
    pub fn field(&self) -> Option<&str> {
        match self {
            Self::Invalid { field, .. } => Some(field),
            _ => None,
        }
    }
}

/// An area or location that could not be parsed; turned into a [`ConfigError`] with the file and field.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct ShapeError(pub String);
