//! The `[queue]` section: the NATS JetStream servers a fleet keeps its asynchronous calls and
//! their answers in (docs/events.md, "The fleet's queue").
//!
//! Without it each node keeps the calls it accepted in its own journal. With it, an accepted
//! call is published to a JetStream stream before the `202`, consumed by a node that serves
//! the function, delivered again when that node dies before it acknowledged the call, and its
//! answer is readable at every node.

use serde::{Deserialize, Serialize};
use url::Url;

/// Where and how a fleet queues asynchronous calls.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueSettings {
    /// NATS server URLs, `nats://` or `tls://`, e.g. `["nats://127.0.0.1:4222"]`. No default:
    /// at least one. Credentials come from the environment: `NATS_CREDS` (a `.creds` file),
    /// `NATS_TOKEN`, or `NATS_USER` with `NATS_PASSWORD`.
    pub nats: Vec<Url>,
    /// The JetStream stream of accepted calls (a work queue). Default `GEOFAAS_CALLS`.
    #[serde(default = "default_stream")]
    pub stream: String,
    /// The JetStream stream that keeps each activation's state and answer, one message per
    /// activation. Default `GEOFAAS_ACTIVATIONS`.
    #[serde(default = "default_answers")]
    pub answers: String,
    /// Seconds a node may hold a call without acknowledging it before JetStream hands it to
    /// another node; a node running a call renews its hold every third of it. Default 30.
    #[serde(default = "default_ack_wait_s")]
    pub ack_wait_s: u64,
    /// Copies JetStream keeps of each stream (1, or 3 or 5 with a NATS cluster). Default 1.
    #[serde(default = "default_replicas")]
    pub replicas: usize,
    /// Most calls one node runs from the queue at once; past it the cloud takes the edge's
    /// waiting calls. Default 256.
    #[serde(default = "default_max_in_flight")]
    pub max_in_flight: usize,
}

fn default_stream() -> String {
    "GEOFAAS_CALLS".to_owned()
}
fn default_answers() -> String {
    "GEOFAAS_ACTIVATIONS".to_owned()
}
fn default_ack_wait_s() -> u64 {
    30
}
fn default_replicas() -> usize {
    1
}
fn default_max_in_flight() -> usize {
    256
}

/// A JetStream stream name: letters, digits, `-` and `_` (no `.`, `*`, `>` or spaces).
fn stream_name_ok(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

impl QueueSettings {
    /// What is wrong with these settings: (field, value, reason).
    pub(crate) fn check(&self) -> Result<(), crate::security::Problem> {
        let problem = |field: &str, value: &dyn std::fmt::Display, reason: &str| {
            Err((
                format!("queue.{field}"),
                value.to_string(),
                reason.to_owned(),
            ))
        };
        if self.nats.is_empty() {
            return problem(
                "nats",
                &"[]",
                "give at least one NATS URL, e.g. [\"nats://127.0.0.1:4222\"]",
            );
        }
        for url in &self.nats {
            if !matches!(url.scheme(), "nats" | "tls") || url.host_str().is_none() {
                return problem(
                    "nats",
                    url,
                    "must be a nats://host:port or tls://host:port URL",
                );
            }
        }
        for (field, name) in [("stream", &self.stream), ("answers", &self.answers)] {
            if !stream_name_ok(name) {
                return problem(
                    field,
                    name,
                    "must be 1 to 64 letters, digits, '-' or '_' (a JetStream stream name)",
                );
            }
        }
        if self.stream == self.answers {
            return problem("answers", &self.answers, "must differ from queue.stream");
        }
        if !(1..=3600).contains(&self.ack_wait_s) {
            return problem("ack_wait_s", &self.ack_wait_s, "must be 1 to 3600 seconds");
        }
        if !matches!(self.replicas, 1 | 3 | 5) {
            return problem("replicas", &self.replicas, "must be 1, 3 or 5");
        }
        if !(1..=10_000).contains(&self.max_in_flight) {
            return problem("max_in_flight", &self.max_in_flight, "must be 1 to 10000");
        }
        Ok(())
    }
}
