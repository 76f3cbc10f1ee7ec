//! Integration tests of the gateway: three real nodes over TLS on loopback.

mod cluster;
mod errors;
mod handover;
mod offload;
