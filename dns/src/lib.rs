//! geofaas geo DNS: an authoritative server for the topology's zone that answers `gw.<zone>` with the
//! nearest healthy edge gateway to each client.
//!
//! The client is located by the EDNS Client Subnet (ECS) address of the query, else by the resolver's
//! source address, in a MaxMind-format database (GeoIP2/GeoLite2 City or DB-IP's flat schema). The
//! answer is the edge whose service area contains the point, else the nearest edge within
//! `dns.max_distance_km`, else the cloud, skipping gateways whose `/readyz` probe failed.
//!
//! Modules: [`mod@route`] ranks the nodes for a location, [`ecs`] validates the ECS option (RFC 7871), [`handler`] answers
//! queries on hickory-server, [`server`] binds and runs it (TCP on hickory's `Server`; UDP by default on
//! `udp_batch`: one thread per `SO_REUSEPORT` socket, one socket per CPU unless `--udp-sockets` says
//! otherwise, each with a batched `recvmmsg`/`sendmmsg` loop; Linux only), [`cli`] is `geofaas dns`.
//! Reading the database, the health table and its probes, and the demo database `geofaas up`
//! writes are `geofaas-geo`'s, shared with the gateway (re-exported here).
//!
//! The hot query over UDP, `gw.<zone>` A/AAAA with or without ECS, skips hickory's message types: it is
//! parsed in place and answered from a wire template per node and record type that hickory's encoder
//! produced at start ([`GeoHandler::answer_fast`]); every other query, and TCP, takes hickory's decoder
//! and encoder ([`GeoHandler::answer_hickory`]). Differential tests hold the two to the same bytes.
//!
//! Metrics (through the `metrics` facade): `geofaas_dns_queries_total{rcode}` and
//! `geofaas_dns_gateway_answers_total{node}`.

#![forbid(unsafe_code)]

pub mod cli;
pub mod ecs;
mod error;
pub mod handler;
pub mod route;
pub mod server;
#[cfg(target_os = "linux")]
pub mod udp_batch;

pub use cli::{run_cli, DnsArgs};
pub use error::DnsError;
pub use geofaas_geo::{
    write_demo_mmdb, write_mmdb, GeoDb, GeoError, HealthTable, MmdbEntry, MmdbSchema,
};
pub use handler::GeoHandler;
pub use server::{serve, DnsOptions, DnsServer, HealthMode, UdpEngine};
