//! Integration tests of the geo DNS server: real sockets on 127.0.0.1, hickory's client and raw
//! packets, dig/kdig, and real HTTPS gateways for the health probes.
//!
//! `cargo nextest run -p geofaas-dns` (needs `dig` and `kdig`: Debian `dnsutils`, `knot-dnsutils`).

mod answers;
mod cli_tools;
mod fast_path;
mod formerr;
mod health;
mod support;
