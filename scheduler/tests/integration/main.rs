//! Integration tests of the scheduler crate: training beats random, the CLI entry points run.

mod simulate_cli;
#[cfg(feature = "train")]
mod training;
