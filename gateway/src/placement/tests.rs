//! Table tests of the plans: every row is a call's facts and what the node must do with it.

use std::time::Duration;

use geofaas_config::Topology;
use geofaas_functions::{ContainerChoice as C, InvokeError};

use super::*;
use crate::geo::Source;

const EDGE: Facts = Facts {
    served_here: true,
    cloud_serves: Knows::Yes,
    has_cloud: true,
    pinned: false,
    admitted: true,
    policy: Policy::None,
};

const CLOUD: Facts = Facts {
    has_cloud: false,
    cloud_serves: Knows::Unknown,
    ..EDGE
};

fn serve(container: C, why: &'static str) -> Plan {
    Plan::Serve { container, why }
}

fn offload(reason: OffloadReason) -> Plan {
    Plan::Offload {
        reason,
        why: reason.label(),
    }
}

#[test]
fn place_follows_who_serves_what_admission_and_the_policy() {
    use OffloadReason::*;
    let chose = |p, name| Policy::Chose(p, name);
    let rows: &[(&str, Facts, Plan)] = &[
        ("edge, no policy", EDGE, serve(C::Any, why::NO_POLICY)),
        ("cloud, no policy", CLOUD, serve(C::Any, why::NO_POLICY)),
        (
            "not here: the cloud",
            Facts { served_here: false, ..EDGE },
            offload(NotHere),
        ),
        (
            "not here, the cloud's list unknown: it answers for itself",
            Facts { served_here: false, cloud_serves: Knows::Unknown, ..EDGE },
            offload(NotHere),
        ),
        (
            "not here, nor in the cloud's list: the cloud answers for itself (a deploy may be newer)",
            Facts { served_here: false, cloud_serves: Knows::No, ..EDGE },
            offload(NotHere),
        ),
        (
            "not at the cloud",
            Facts { served_here: false, ..CLOUD },
            Plan::Refuse(Refusal::UnknownFunction),
        ),
        (
            "not here, pinned: never sent on",
            Facts { served_here: false, pinned: true, ..EDGE },
            Plan::Refuse(Refusal::UnknownFunction),
        ),
        (
            "full edge",
            Facts { admitted: false, ..EDGE },
            offload(Overloaded),
        ),
        (
            "full edge, the cloud does not serve it",
            Facts { admitted: false, cloud_serves: Knows::No, ..EDGE },
            Plan::Refuse(Refusal::Overloaded),
        ),
        (
            "full cloud",
            Facts { admitted: false, ..CLOUD },
            Plan::Refuse(Refusal::Overloaded),
        ),
        (
            "pinned",
            Facts { pinned: true, ..EDGE },
            serve(C::Any, why::FORWARDED),
        ),
        (
            "policy: warm",
            Facts { policy: chose(Placement::Reuse, "ppo"), ..EDGE },
            serve(C::Reuse, "ppo"),
        ),
        (
            "policy: new",
            Facts { policy: chose(Placement::New, "greedy"), ..EDGE },
            serve(C::New, "greedy"),
        ),
        (
            "policy: the cloud",
            Facts { policy: chose(Placement::Cloud, "ppo"), ..EDGE },
            Plan::Offload { reason: Scheduler, why: "ppo" },
        ),
        (
            "policy: the cloud, which does not serve it: here",
            Facts { policy: chose(Placement::Cloud, "ppo"), cloud_serves: Knows::No, ..EDGE },
            serve(C::Any, why::NO_DECISION),
        ),
        (
            "policy: a neighbour",
            Facts { policy: chose(Placement::Neighbor(2), "greedy"), ..EDGE },
            Plan::Forward { neighbor: 2, why: "greedy" },
        ),
        (
            "policy: a neighbour, but the call was sent here",
            Facts { policy: chose(Placement::Neighbor(2), "greedy"), pinned: true, ..EDGE },
            serve(C::Any, why::FORWARDED),
        ),
        (
            "policy: warm, pinned",
            Facts { policy: chose(Placement::Reuse, "ppo"), pinned: true, ..EDGE },
            serve(C::Reuse, why::FORWARDED),
        ),
        (
            "policy: no decision",
            Facts { policy: Policy::NoDecision, ..EDGE },
            serve(C::Any, why::NO_DECISION),
        ),
        (
            "policy: warm, but no permit",
            Facts { policy: chose(Placement::Reuse, "ppo"), admitted: false, ..EDGE },
            offload(Overloaded),
        ),
    ];
    for (what, facts, want) in rows {
        assert_eq!(place(facts), *want, "{what}");
    }
}

fn failed() -> InvokeError {
    InvokeError::FunctionFailed {
        message: "ValueError".into(),
        body: None,
    }
}

/// What, the facts, where it failed, the error, `retry_on_error`, the plan.
type FailureRow = (
    &'static str,
    Facts,
    FailedAt,
    InvokeError,
    bool,
    Option<Plan>,
);

#[test]
fn a_call_moves_on_only_when_it_did_not_run_or_may_run_again() {
    use FailedAt::*;
    use OffloadReason::*;
    let unavailable = || InvokeError::Unavailable("connection refused".into());
    let rows: Vec<FailureRow> = vec![
        (
            "refused before it ran: next backend",
            EDGE,
            Backend,
            unavailable(),
            false,
            None,
        ),
        (
            "circuit open: next backend",
            EDGE,
            Backend,
            InvokeError::CircuitOpen,
            false,
            None,
        ),
        (
            "overloaded backend: next backend",
            EDGE,
            Backend,
            InvokeError::Overloaded { retry_after: None },
            false,
            None,
        ),
        (
            "ran and failed: answered at once, never again",
            EDGE,
            Backend,
            failed(),
            false,
            Some(Plan::Refuse(Refusal::Failed)),
        ),
        (
            "ran and failed, the function opts in: next backend",
            EDGE,
            Backend,
            failed(),
            true,
            None,
        ),
        (
            "ran and failed at the last backend, opted in: the cloud",
            EDGE,
            LastBackend,
            failed(),
            true,
            Some(offload(BackendFailed)),
        ),
        (
            "the network failed after it was sent: may have run",
            EDGE,
            LastBackend,
            InvokeError::Network("reset".into()),
            false,
            Some(Plan::Refuse(Refusal::Failed)),
        ),
        (
            "a timeout: the cloud (the paper's rule)",
            EDGE,
            LastBackend,
            InvokeError::Timeout(Duration::from_secs(1)),
            false,
            Some(offload(BackendFailed)),
        ),
        (
            "not deployed after all: the lists were stale",
            EDGE,
            LastBackend,
            InvokeError::UnknownFunction("f".into()),
            false,
            Some(offload(NotHere)),
        ),
        (
            "the last backend refused, at the cloud: its failure",
            CLOUD,
            LastBackend,
            unavailable(),
            false,
            Some(Plan::Refuse(Refusal::Failed)),
        ),
        (
            "refused, pinned: its failure",
            Facts {
                pinned: true,
                ..EDGE
            },
            LastBackend,
            unavailable(),
            false,
            Some(Plan::Refuse(Refusal::Failed)),
        ),
        (
            "refused, the cloud does not serve it: its failure",
            Facts {
                cloud_serves: Knows::No,
                ..EDGE
            },
            LastBackend,
            unavailable(),
            false,
            Some(Plan::Refuse(Refusal::Failed)),
        ),
        (
            "the neighbour could not be reached: the cloud",
            EDGE,
            Neighbor,
            unavailable(),
            false,
            Some(offload(NeighborUnreachable)),
        ),
        (
            "the neighbour's link broke after sending: may have run",
            EDGE,
            Neighbor,
            InvokeError::Network("reset".into()),
            false,
            Some(Plan::Refuse(Refusal::Failed)),
        ),
    ];
    for (what, facts, at, err, opt_in, want) in rows {
        assert_eq!(after_failure(&facts, at, &err, opt_in), want, "{what}");
    }
}

/// Lisbon: two edges and a cloud.
fn lisbon() -> ServiceMap {
    let node = |id: &str, role: &str, area: &str, lat: f64, lon: f64, port: u16| {
        format!(
            "[[node]]\nid = \"{id}\"\nrole = \"{role}\"\nlocation = {{ lat = {lat}, lon = {lon} }}\n\
             {area}\npublic_url = \"https://127.0.0.1:{port}\"\nlisten = \"127.0.0.1:{port}\"\n\n"
        )
    };
    let text = [
        "zone = \"lisbon.test.\"\n\n".to_owned(),
        node(
            "baixa",
            "edge",
            "area.circle = { center = { lat = 38.711, lon = -9.139 }, radius_km = 2 }",
            38.711,
            -9.139,
            1,
        ),
        node(
            "belem",
            "edge",
            "area.circle = { center = { lat = 38.697, lon = -9.206 }, radius_km = 2 }",
            38.697,
            -9.206,
            2,
        ),
        node("cloud", "cloud", "area = \"world\"", 50.11, 8.68, 3),
    ]
    .concat();
    Topology::parse(&text, "lisbon.toml", std::path::Path::new("."))
        .unwrap()
        .service_map()
        .unwrap()
}

fn at(lat: f64, lon: f64) -> ClientLocation {
    ClientLocation::point(
        geofaas_config::LatLon::new(lat, lon).unwrap(),
        Source::Header,
        None,
    )
}

/// What, this node, the client's location, pinned, the node that is down, the route.
type RouteRow<'a> = (
    &'static str,
    &'static str,
    Option<&'a ClientLocation>,
    bool,
    &'static str,
    &'static str,
);

#[test]
fn route_hands_over_to_live_nodes_only() {
    let map = lisbon();
    let belem = at(38.697, -9.206);
    let madrid = at(40.42, -3.70);
    let rows: &[RouteRow] = &[
        (
            "a client in its area",
            "belem",
            Some(&belem),
            false,
            "",
            "serve",
        ),
        (
            "a client in another edge's area",
            "baixa",
            Some(&belem),
            false,
            "",
            "belem",
        ),
        (
            "that edge is down: the cloud",
            "baixa",
            Some(&belem),
            false,
            "belem",
            "cloud",
        ),
        (
            "at the cloud, that edge is down: served",
            "cloud",
            Some(&belem),
            false,
            "belem",
            "serve",
        ),
        (
            "far away: the cloud",
            "baixa",
            Some(&madrid),
            false,
            "",
            "cloud",
        ),
        (
            "far away, the cloud is down: served",
            "baixa",
            Some(&madrid),
            false,
            "cloud",
            "serve",
        ),
        (
            "pinned: served where it lands",
            "baixa",
            Some(&belem),
            true,
            "",
            "serve",
        ),
        (
            "no location: served (the DNS chose this node)",
            "baixa",
            None,
            false,
            "",
            "serve",
        ),
    ];
    for &(what, me, location, pinned, dead, want) in rows {
        let got = match route(&map, me, location, pinned, |id| id != dead) {
            Route::Serve => "serve",
            Route::Handover(n) => n.id.as_str(),
        };
        assert_eq!(got, want, "{what}");
    }
}

#[test]
fn a_full_edge_sheds_what_the_cloud_cannot_take_and_only_a_pinned_or_lone_node_queues() {
    for (reason, want) in [
        (OffloadReason::Overloaded, Refusal::Overloaded),
        (OffloadReason::NotHere, Refusal::Failed),
        (OffloadReason::Scheduler, Refusal::Failed),
        (OffloadReason::BackendFailed, Refusal::Failed),
        (OffloadReason::NeighborUnreachable, Refusal::Failed),
    ] {
        assert_eq!(cloud_failed(reason), want, "{reason:?}");
    }
    let edge = Facts {
        served_here: true,
        cloud_serves: Knows::Yes,
        has_cloud: true,
        pinned: false,
        admitted: false,
        policy: Policy::None,
    };
    assert!(
        !waits_for_admission(&edge),
        "an edge places the call elsewhere"
    );
    assert!(
        waits_for_admission(&Facts {
            pinned: true,
            ..edge
        }),
        "a pinned call waits"
    );
    assert!(
        waits_for_admission(&Facts {
            has_cloud: false,
            ..edge
        }),
        "the cloud waits"
    );
}
