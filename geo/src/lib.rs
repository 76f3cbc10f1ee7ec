//! What the geo DNS and every gateway share about the fleet's geography: where a client address
//! is (a MaxMind-format database, [`GeoDb`]; writing one, [`write`]) and which gateways are up
//! (a table of healthy flags and the `/readyz` probes that fill it, [`health`]).
//!
//! Its own crate so that a node links neither hickory nor the DNS server to locate a client or
//! to probe its peers.

#![forbid(unsafe_code)]

pub mod db;
mod error;
pub mod health;
pub mod write;

pub use db::{GeoDb, NetKey};
pub use error::GeoError;
pub use health::HealthTable;
pub use write::{write_demo_mmdb, write_mmdb, MmdbEntry, MmdbSchema};
