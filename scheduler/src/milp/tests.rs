//! The MILP finds the known optimum of small hand-made windows.

use super::*;
use crate::policy::tests::{cand, obs};
use crate::policy::Policy;

fn a(candidate: usize, new_container: bool) -> Action {
    Action {
        candidate,
        new_container,
    }
}

#[test]
fn joint_assignment_beats_sequential_greedy() {
    // Two nodes with one free core each, each holding one idle container of function 0.
    // Request 0 (function 0) sits at node 0; request 1 (function 1) has a warm container only
    // on node 0. Greedy sends request 0 to node 0 and forces request 1 into a cold start;
    // the optimum sends request 0 to node 1 and request 1 to node 0.
    let mut r0 = obs(vec![
        cand(0.0, 1.0, 10_000.0, 1),
        cand(0.01, 1.0, 10_000.0, 1),
    ]);
    r0.request.function_id = 0;
    let mut r1 = obs(vec![
        cand(0.0, 1.0, 10_000.0, 1),
        cand(0.01, 1.0, 10_000.0, 0),
    ]);
    r1.request.function_id = 1;
    let m = MilpPolicy::new(LinkModel::default(), 100.0);
    let (acts, total) = m.solve(&[r0.clone(), r1.clone()]).unwrap();
    assert_eq!(acts, vec![Some(a(1, false)), Some(a(0, false))]);
    let link = LinkModel::default();
    let expected =
        r0.estimate(&link, a(1, false)).total() + r1.estimate(&link, a(0, false)).total();
    assert!((total - expected).abs() < 1e-6, "{total} vs {expected}");
    assert_eq!(m.stats().solves, 1);
}

#[test]
fn idle_containers_are_not_reused_twice() {
    // Three requests of one function at one node with 2 idle containers: two take them, the
    // third queues behind one of them (~51 ms) rather than cold starting (700 ms).
    let c = cand(0.0, 8.0, 600.0, 2);
    let w = vec![obs(vec![c.clone()]), obs(vec![c.clone()]), obs(vec![c])];
    let m = MilpPolicy::new(LinkModel::default(), 100.0);
    let (acts, total) = m.solve(&w).unwrap();
    assert!(acts.iter().all(|x| *x == Some(a(0, false))), "{acts:?}");
    let one = w[0].estimate(&LinkModel::default(), a(0, false)).total();
    assert!((total - 4.0 * one).abs() < 1e-6, "{total} vs 4 x {one}");
}

#[test]
fn cores_bound_and_overflow_is_rejected() {
    // One node with 2 free cores and no container yet, three 1-core requests that must each
    // start one: one is rejected.
    let c = cand(0.0, 2.0, 10_000.0, 0);
    let w = vec![obs(vec![c.clone()]), obs(vec![c.clone()]), obs(vec![c])];
    let m = MilpPolicy::new(LinkModel::default(), 100.0);
    let (acts, _) = m.solve(&w).unwrap();
    assert_eq!(acts.iter().filter(|x| x.is_none()).count(), 1);
    assert_eq!(m.decide(&obs(vec![cand(0.0, 0.0, 0.0, 0)])), None);
}

#[test]
fn slo_penalty_prefers_the_option_within_slo() {
    // Node 0: warm but slow clock; node 1: warm, faster. Both under SLO: plain minimum wins.
    let mut slow = cand(0.0, 4.0, 10_000.0, 1);
    slow.node.ghz = 1.0;
    let w = vec![obs(vec![slow, cand(0.001, 4.0, 10_000.0, 1)])];
    let m = MilpPolicy::new(LinkModel::default(), 100.0);
    assert_eq!(m.solve(&w).unwrap().0, vec![Some(a(1, false))]);
}
