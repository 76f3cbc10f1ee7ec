//! Where a call goes: every routing decision of a node, as pure functions from the call's facts
//! to a plan. The rest of the gateway gathers the facts (location, health, who serves what,
//! admission, the policy's choice) and carries the plan out; nothing here does I/O.
//!
//! Three decisions, in the order a call meets them:
//! 1. [`route`]: serve the call on this node or hand the client over (a `307`) to the node
//!    responsible for its location, never to a node known to be down;
//! 2. [`place`]: on this node, in a warm or a new instance, on a neighbouring edge, in the
//!    cloud (with the reason), or an answer now (`404`, `503`);
//! 3. [`after_failure`]: when a backend here or another node failed, whether the call may move
//!    on ([`cloud_failed`]: what answers it when the cloud could not be reached). It moves only when it did not run where it failed ([`InvokeError::may_have_run`]), on
//!    a timeout (the paper's rule: the one case where a function may run twice), or when the
//!    function opts in (`retry_on_error = true`).
//!
//! A call that another node signed and sent here (offloaded, forwarded, or a client's retry at
//! the cloud: all "pinned") is served where it lands and never goes on.

use geofaas_config::{NodeEntry, ServiceMap};
use geofaas_functions::{ContainerChoice, Fault, InvokeError};

use crate::geo::ClientLocation;
use crate::routing::{self, Route};
use crate::schedule::Placement;

pub use crate::call::{why, OffloadReason};

/// What this node knows of whether another node serves a function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Knows {
    /// It serves it.
    Yes,
    /// It does not (its own list, or the registry's record, says so).
    No,
    /// Nothing is known (no list fetched yet): the other node answers for itself.
    Unknown,
}

/// What the policy said for this call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// No `[scheduler]` is configured.
    None,
    /// A policy is configured and had no decision (no profile, nothing feasible).
    NoDecision,
    /// The policy `name` chose this.
    Chose(Placement, &'static str),
}

/// The facts [`place`] decides on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Facts {
    /// Some backend of this node serves the function.
    pub served_here: bool,
    /// Whether the cloud serves it, at an edge.
    pub cloud_serves: Knows,
    /// This is an edge with a link to the cloud.
    pub has_cloud: bool,
    /// Another node sent the call here (it runs here or fails).
    pub pinned: bool,
    /// The call holds an admission permit.
    pub admitted: bool,
    /// The policy's choice.
    pub policy: Policy,
}

impl Facts {
    /// Whether the call may leave this node for the cloud.
    pub fn may_offload(&self) -> bool {
        self.has_cloud && !self.pinned && self.cloud_serves != Knows::No
    }

    /// Whether the call may leave this node at all (the cloud or a neighbour): the policy is
    /// asked with this, before it is known whether the cloud serves the function.
    pub fn may_forward(&self) -> bool {
        self.has_cloud && !self.pinned
    }
}

/// Why a call is answered at once with an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No node serves the function (`404`).
    UnknownFunction,
    /// This node is full and cannot hand the call on (`503` with `Retry-After`).
    Overloaded,
    /// The function failed (or its backend did) and it may not run again: the failure's answer.
    Failed,
}

/// What to do with a call on this node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// Run it on this node's backends.
    Serve {
        /// A warm instance, a new one, or whichever the backend has.
        container: ContainerChoice,
        /// `X-Placement-Reason`: the policy's name or one of [`why`].
        why: &'static str,
    },
    /// Send it, signed, to the cloud.
    Offload {
        /// Why.
        reason: OffloadReason,
        /// `X-Placement-Reason`: the policy's name when it chose the cloud, else the reason.
        why: &'static str,
    },
    /// Send it, signed, to the neighbouring edge the policy chose (its index).
    Forward {
        /// The neighbour's index in the scheduler's list.
        neighbor: usize,
        /// The policy's name.
        why: &'static str,
    },
    /// Answer now.
    Refuse(Refusal),
}

/// Serve here or hand over: to the node responsible for the client's location; `healthy`
/// says whether a node is up (by id). A handover to a dead edge goes to the cloud instead,
/// and a dead cloud's clients (or the cloud's own, for a dead edge) are served here.
pub fn route<'a>(
    map: &'a ServiceMap,
    me: &str,
    location: Option<&ClientLocation>,
    pinned: bool,
    healthy: impl Fn(&str) -> bool,
) -> Route<'a> {
    match routing::decide(map, me, location, pinned) {
        Route::Handover(target) if !healthy(&target.id) => {
            let cloud: &NodeEntry = map.cloud();
            if cloud.id == me || cloud.id == target.id {
                Route::Serve
            } else {
                Route::Handover(cloud)
            }
        }
        other => other,
    }
}

/// Where a call served by this node runs.
pub fn place(f: &Facts) -> Plan {
    if !f.served_here {
        // The cloud answers for itself, even when its list (perhaps older than a deploy) does
        // not have the function: its 404 is the answer then.
        return if f.may_forward() {
            offload(OffloadReason::NotHere)
        } else {
            Plan::Refuse(Refusal::UnknownFunction)
        };
    }
    let container = match f.policy {
        Policy::Chose(Placement::Cloud, why) if f.may_offload() => {
            return Plan::Offload {
                reason: OffloadReason::Scheduler,
                why,
            }
        }
        Policy::Chose(Placement::Neighbor(neighbor), why) if f.may_forward() => {
            return Plan::Forward { neighbor, why }
        }
        Policy::Chose(Placement::Reuse, _) => ContainerChoice::Reuse,
        Policy::Chose(Placement::New, _) => ContainerChoice::New,
        // The cloud or a neighbour where the call may not go: here, as without a decision.
        Policy::Chose(..) | Policy::NoDecision | Policy::None => ContainerChoice::Any,
    };
    if !f.admitted {
        return if f.may_offload() {
            offload(OffloadReason::Overloaded)
        } else {
            Plan::Refuse(Refusal::Overloaded)
        };
    }
    let why = match f.policy {
        _ if f.pinned => why::FORWARDED,
        Policy::Chose(Placement::Reuse | Placement::New, name) => name,
        Policy::Chose(..) | Policy::NoDecision => why::NO_DECISION,
        Policy::None => why::NO_POLICY,
    };
    Plan::Serve { container, why }
}

/// Where the call may fail in [`after_failure`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailedAt {
    /// A backend of this node (more may follow).
    Backend,
    /// The last backend of this node that serves the function.
    LastBackend,
    /// The neighbouring edge the policy chose.
    Neighbor,
}

/// What to do after the call failed with `err` at `at`: `None` to try this node's next
/// backend, else the plan. `retry_on_error` is the function's opt-in to run again after it
/// ran and failed.
pub fn after_failure(
    f: &Facts,
    at: FailedAt,
    err: &InvokeError,
    retry_on_error: bool,
) -> Option<Plan> {
    let may_move_on =
        !err.may_have_run() || matches!(err, InvokeError::Timeout(_)) || retry_on_error;
    if !may_move_on {
        return Some(Plan::Refuse(Refusal::Failed));
    }
    let reason = match (at, err.fault()) {
        (FailedAt::Backend, _) => return None,
        (FailedAt::Neighbor, _) => OffloadReason::NeighborUnreachable,
        // Every backend here said "not deployed" after all: the lists were stale.
        (FailedAt::LastBackend, Fault::Client) => OffloadReason::NotHere,
        (FailedAt::LastBackend, Fault::Function | Fault::Backend | Fault::Network) => {
            OffloadReason::BackendFailed
        }
    };
    Some(if f.may_offload() {
        offload(reason)
    } else {
        Plan::Refuse(Refusal::Failed)
    })
}

/// How a call that finds no admission permit here waits: one that may go elsewhere does not
/// wait (a full edge places it elsewhere before anything queues), one that cannot waits in the
/// node's bounded queue.
pub fn waits_for_admission(f: &Facts) -> bool {
    !f.may_forward()
}

/// What answers a call the cloud could not take (the link failed, `reason` being why it was
/// sent): a full edge sheds the call as overloaded, any other call answers the link's failure.
pub fn cloud_failed(reason: OffloadReason) -> Refusal {
    if reason == OffloadReason::Overloaded {
        Refusal::Overloaded
    } else {
        Refusal::Failed
    }
}

fn offload(reason: OffloadReason) -> Plan {
    Plan::Offload {
        reason,
        why: reason.label(),
    }
}

#[cfg(test)]
mod tests;
