//! Integration tests of the gateway: three real nodes over TLS on loopback.

mod activations;
mod answer;
mod backends;
mod chaos;
mod cloud_only;
mod cluster;
mod deploy;
mod dns_reload;
mod errors;
mod fleet;
mod geo;
mod handover;
mod http2;
mod idempotency;
mod lifecycle;
mod loadtest;
mod offload;
mod placement;
mod prewarm;
mod properties;
mod proxy;
mod remote_deploy;
mod router;
mod scheduler;
mod security;
