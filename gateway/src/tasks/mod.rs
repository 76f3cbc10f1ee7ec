//! The node's background work: each task runs over the node's live state ([`crate::node::Live`],
//! so a reload's new state is the next round's), is started by [`crate::NodeHandle::spawn`] (or
//! [`crate::run_node`]) and is stopped with the node.
//!
//! - [`exchange`]: sends this node's load reports and collects the others';
//! - [`cron`]: claims and runs the ticks of the deployed functions' schedules;
//! - [`deploys`]: with a registry, converges the node on the fleet's deployed versions;
//! - [`triggers`]: turns the messages of the deployed functions' NATS subjects into calls.

pub mod cron;
pub mod deploys;
pub mod exchange;
pub mod triggers;
