//! The geofaas client library and load generator.
//!
//! [`GeoClient`] behaves like the GeoFaaS paper's client, over HTTPS: every call carries
//! `X-Client-Location` (or, with [`LocationHeader::Geohash`], a `Sec-CH-Geohash` hint); a `307` handover is followed and the responsible node cached, so the
//! next call goes to it directly; a call that timed out or could not connect is retried once
//! at the cloud with `X-GeoFaaS-Retry: 1` (and the cloud is used directly for a while after);
//! an `Idempotency-Key` can be attached; an answer's `Link: <origin>; rel=preconnect` makes the
//! client open a connection to that origin ahead, in the background ([`preconnect`]). Each call returns a [`CallReport`]: the node that
//! served it, the edge that offloaded it, attempts, redirects, status, latency. It speaks
//! HTTP/2 by default and HTTP/1.1 on request, and depends on `geofaas-config` only.
//!
//! ```no_run
//! use geofaas_config::{LatLon, Topology};
//! use geofaas_loadtest::{CallRequest, ClientConfig, GeoClient};
//!
//! # async fn demo() -> anyhow::Result<()> {
//! let topology = Topology::load("examples/berlin.toml")?;
//! let here: LatLon = "52.51,13.32".parse()?;
//! let mut cfg = ClientConfig::for_topology(&topology, here)?;
//! cfg.ca_pem = Some(std::fs::read(".geofaas/ca.pem")?);
//! let client = GeoClient::new(&cfg)?;
//! let report = client
//!     .call(&CallRequest {
//!         function: "sieve".into(),
//!         location: Some(here),
//!         ..Default::default()
//!     })
//!     .await;
//! assert!(report.is_success());
//! println!(
//!     "served by {:?} in {:?} after {} attempt(s)",
//!     report.served_by, report.latency, report.attempts
//! );
//! # Ok(()) }
//! ```
//!
//! The load generator behind `geofaas loadtest` ([`cli`]) reproduces the paper's three
//! experiments on any topology: [`mobility`], [`highload`] and [`outage`], and a mixed workload
//! of many Zipf-popular functions with cold starts, [`mixed`] (popularity from [`zipf`]), each writing
//! `requests.csv` ([`record`]), `summary.json` and a PNG like the paper's figure ([`plot`]).
//! [`spawn`] starts the nodes as child processes so an outage can kill one for real.

#![forbid(unsafe_code)]

pub mod background;
pub mod cli;
pub mod client;
pub mod delay;
pub mod headers;
pub mod highload;
pub mod mixed;
pub mod mobility;
pub mod netem;
pub mod outage;
pub mod plot;
pub mod points;
pub mod preconnect;
pub mod prewarm;
pub mod record;
pub mod route;
pub mod runner;
pub mod scrape;
pub mod soak;
pub mod spawn;
pub mod zipf;

pub use client::{CallReport, CallRequest, ClientConfig, GeoClient, HttpVersion, LocationHeader};
