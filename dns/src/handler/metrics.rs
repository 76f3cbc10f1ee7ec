//! Query counters, registered once with bounded labels (node id from the topology, response code).
//!
//! `geofaas_dns_queries_total{rcode}` counts every response by code; `geofaas_dns_gateway_answers_total{node}`
//! counts `gw.<zone>` answers by the node they named. Handles are created when the handler is built, so
//! the recorder must be installed before (the binary does that first).

use hickory_server::proto::op::ResponseCode;
use metrics::{counter, Counter};

use crate::route::NodeAddr;

/// Response codes with their own label; everything else counts as `other`.
const RCODES: [(ResponseCode, &str); 6] = [
    (ResponseCode::NoError, "noerror"),
    (ResponseCode::NXDomain, "nxdomain"),
    (ResponseCode::Refused, "refused"),
    (ResponseCode::FormErr, "formerr"),
    (ResponseCode::NotImp, "notimp"),
    (ResponseCode::ServFail, "servfail"),
];

/// Pre-registered counter handles.
#[derive(Debug)]
pub(super) struct Metrics {
    by_node: Vec<Counter>,
    by_rcode: Vec<Counter>,
    other_rcode: Counter,
}

impl Metrics {
    pub fn new(nodes: &[NodeAddr]) -> Self {
        Self {
            by_node: nodes
                .iter()
                .map(|n| counter!("geofaas_dns_gateway_answers_total", "node" => n.id.clone()))
                .collect(),
            by_rcode: RCODES
                .iter()
                .map(|(_, label)| counter!("geofaas_dns_queries_total", "rcode" => *label))
                .collect(),
            other_rcode: counter!("geofaas_dns_queries_total", "rcode" => "other"),
        }
    }

    /// Counts a `gw` answer naming node `i`.
    pub fn answered(&self, i: usize) {
        if let Some(c) = self.by_node.get(i) {
            c.increment(1);
        }
    }

    /// Counts a response by its code.
    pub fn rcode(&self, rcode: ResponseCode) {
        match RCODES.iter().position(|(c, _)| *c == rcode) {
            Some(i) => self.by_rcode[i].increment(1),
            None => self.other_rcode.increment(1),
        }
    }
}
