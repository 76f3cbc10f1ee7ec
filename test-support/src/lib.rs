//! Shared fakes and helpers for geofaas tests (never linked into the product).
//!
//! - [`eventually`]: waiting for a condition with a deadline;
//! - [`etcd`]: a real etcd server on free ports, for the fleet tests;
//! - [`faults`]: a TCP fault proxy (refuse, black-hole, delay, drop answers, heal) between nodes;
//! - [`nats`]: a real nats-server with JetStream, for the queue tests;
//! - [`memory`]: an in-memory function backend for router tests;
//! - [`delays`]: a backend whose functions take known times (live profile tests);
//! - [`server`]: run an axum router on `127.0.0.1:0` and kill it, connections included;
//! - [`tinyfaas`]: a protocol-faithful fake tinyFaaS (proxy + manager);
//! - [`openwhisk`]: a protocol-faithful fake Apache OpenWhisk controller;
//! - [`paths`]: the repository's files, found at run time (not where the test was compiled);
//! - [`peers`]: start real third-party peers (serverless-offline, moto) as child processes.

#![forbid(unsafe_code)]

pub mod delays;
pub mod etcd;
pub mod eventually;
pub mod faults;
pub mod memory;
pub mod nats;
pub mod openwhisk;
pub mod paths;
pub mod peers;
pub mod server;
pub mod tinyfaas;
