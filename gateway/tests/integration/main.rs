//! Integration tests of the gateway: three real nodes over TLS on loopback.

mod activations;
mod backends;
mod cluster;
mod errors;
mod handover;
mod idempotency;
mod loadtest;
mod offload;
mod scheduler;
