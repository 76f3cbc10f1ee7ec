//! Integration tests of the scheduler crate: training beats random, the CLI entry points run.

mod simulate_cli;
mod topology_file;
#[cfg(feature = "train")]
mod training;
