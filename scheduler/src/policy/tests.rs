//! Masking and baseline behaviour on hand-made observations.

use super::*;
use crate::baselines::{GreedyPolicy, NearestPolicy, RandomPolicy};

pub(crate) fn profile() -> FunctionProfile {
    FunctionProfile {
        cpu_ms: 50.0,
        cores: 1.0,
        memory_mb: 512.0,
        image_mb: 50.0,
        init_ms: 300.0,
        input_kb: 100.0,
        slo_ms: 300.0,
    }
}

pub(crate) fn cand(lon: f64, free_cores: f64, free_mem: f64, idle: u32) -> Candidate {
    Candidate {
        node: NodeSpec {
            location: GeoPoint::new(0.0, lon),
            cores: 8.0,
            ghz: 3.0,
            memory_mb: 16_000.0,
            bandwidth_mbps: 1000.0,
            access_ms: 0.0,
        },
        free_cores,
        free_memory_mb: free_mem,
        evictable_memory_mb: 0.0,
        blocked_cold_ms: 0.0,
        idle,
        busy: 0,
        wait_ms: f64::INFINITY,
        measured: None,
    }
}

pub(crate) fn obs(candidates: Vec<Candidate>) -> Observation {
    Observation {
        request: RequestInfo {
            function_id: 0,
            profile: profile(),
            source: GeoPoint::new(0.0, 0.0),
            input_kb: 100.0,
            slo_ms: 300.0,
        },
        candidates,
    }
}

#[test]
fn reuse_needs_an_idle_container_and_new_needs_memory() {
    let o = obs(vec![
        cand(0.0, 4.0, 100.0, 0),
        cand(0.01, 4.0, 10_000.0, 1),
        cand(0.02, 0.5, 10_000.0, 3),
    ]);
    let a = |candidate, new_container| Action {
        candidate,
        new_container,
    };
    assert!(!o.is_feasible(a(0, false)), "no idle container");
    assert!(!o.is_feasible(a(0, true)), "512 MB do not fit in 100 MB");
    assert!(o.is_feasible(a(1, false)) && o.is_feasible(a(1, true)));
    assert!(
        !o.is_feasible(a(2, false)) && !o.is_feasible(a(2, true)),
        "0.5 free cores < 1"
    );
    assert!(!o.is_feasible(a(7, false)), "out of range");
    assert_eq!(o.feasible_actions().count(), 2);
}

#[test]
fn evictable_memory_counts_for_new_containers() {
    let mut c = cand(0.0, 4.0, 100.0, 0);
    c.evictable_memory_mb = 500.0;
    let o = obs(vec![c]);
    assert!(o.is_feasible(Action {
        candidate: 0,
        new_container: true
    }));
}

#[test]
fn baselines_pick_what_they_promise() {
    // Candidate 0 is at the source but has no warm container; candidate 1 is 1.1 km away and warm.
    let o = obs(vec![
        cand(0.0, 4.0, 10_000.0, 0),
        cand(0.01, 4.0, 10_000.0, 1),
    ]);
    let nearest = NearestPolicy.decide(&o).unwrap();
    assert_eq!(
        nearest,
        Action {
            candidate: 0,
            new_container: true
        }
    );
    // Warm 1.1 km away (~3 ms) beats a 700 ms cold start next door.
    let greedy = GreedyPolicy::default().decide(&o).unwrap();
    assert_eq!(
        greedy,
        Action {
            candidate: 1,
            new_container: false
        }
    );
    let r = RandomPolicy::new(1);
    for _ in 0..20 {
        assert!(o.is_feasible(r.decide(&o).unwrap()));
    }
    let full = obs(vec![cand(0.0, 0.0, 0.0, 0)]);
    assert_eq!(GreedyPolicy::default().decide(&full), None);
    assert_eq!(NearestPolicy.decide(&full), None);
    assert_eq!(r.decide(&full), None);
}

#[test]
fn measured_terms_replace_the_model_in_estimates_and_features() {
    // The model says a 700 ms cold start next door loses to a warm instance 1.1 km away; the
    // node next door measured its cold start at 2 ms and its warm calls at 1 ms, the other
    // node is 30 ms away and back: the measured figures decide.
    let mut here = cand(0.0, 4.0, 10_000.0, 0);
    let mut there = cand(0.01, 4.0, 10_000.0, 1);
    here.measured = Some(Measured {
        cold_ms: 2.0,
        exec_ms: 1.0,
        link_ms: 0.0,
        queue_ms: 0.0,
        calls_per_core: 0.0,
        reuses: 0.0,
    });
    there.measured = Some(Measured {
        cold_ms: 5.0,
        exec_ms: 1.0,
        link_ms: 30.0,
        queue_ms: 0.0,
        calls_per_core: 0.0,
        reuses: 0.0,
    });
    let o = obs(vec![here, there]);
    let new_here = Action {
        candidate: 0,
        new_container: true,
    };
    assert_eq!(o.estimate(&LinkModel::default(), new_here).total(), 3.0);
    let reuse_there = Action {
        candidate: 1,
        new_container: false,
    };
    assert_eq!(o.estimate(&LinkModel::default(), reuse_there).total(), 31.0);
    assert_eq!(GreedyPolicy::default().decide(&o), Some(new_here));
    let f = crate::features::featurize(&LinkModel::default(), &o);
    assert_eq!(f.actions[0], Some(new_here));
    assert_eq!(f.actions[1], Some(reuse_there));
}

#[test]
fn a_measured_queue_delays_every_action_there_and_a_queued_call_waits_at_least_for_its_instance() {
    // Here is busy: its cores are shared with calls already there (400 ms more); next door is
    // idle but 30 ms away. Greedy sends the call next door; the queue shows in the estimate
    // and in the slot's queue feature.
    let mut here = cand(0.0, 4.0, 10_000.0, 1);
    let mut there = cand(0.01, 4.0, 10_000.0, 1);
    here.measured = Some(Measured {
        cold_ms: 2.0,
        exec_ms: 100.0,
        link_ms: 0.0,
        queue_ms: 400.0,
        calls_per_core: 0.0,
        reuses: 0.0,
    });
    there.measured = Some(Measured {
        cold_ms: 2.0,
        exec_ms: 100.0,
        link_ms: 30.0,
        queue_ms: 0.0,
        calls_per_core: 0.0,
        reuses: 0.0,
    });
    let link = LinkModel::default();
    let at = |candidate, new_container| Action {
        candidate,
        new_container,
    };
    let o = obs(vec![here.clone(), there]);
    assert_eq!(o.estimate(&link, at(0, false)).total(), 500.0);
    assert_eq!(o.estimate(&link, at(0, true)).total(), 502.0);
    assert_eq!(o.estimate(&link, at(1, false)).total(), 130.0);
    assert_eq!(GreedyPolicy::default().decide(&o), Some(at(1, false)));
    let f = crate::features::featurize(&link, &o);
    let slot = f
        .actions
        .iter()
        .position(|a| *a == Some(at(0, false)))
        .unwrap();
    assert_eq!(f.options[slot][15], 4.0);
    // With no idle instance here the call queues behind the busy one: at least its wait.
    here.idle = 0;
    here.busy = 1;
    here.wait_ms = 600.0;
    let o = obs(vec![here]);
    assert_eq!(o.estimate(&link, at(0, false)).queue_ms, 600.0);
}
