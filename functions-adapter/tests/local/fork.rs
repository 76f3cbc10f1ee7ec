//! New Python instances are forked from one fork server per function: each is its own process,
//! starts from the freshly imported module (no state from earlier instances), and the servers
//! keep the runtime's limits and diagnostics (see `failures.rs`, which runs through it too).

use std::time::Duration;

use geofaas_config::LocalBackend;
use geofaas_functions::ContainerChoice;

use crate::{call_with, fixtures, runtime};

/// (pid, parent pid, calls this instance has served) of a `globals` call.
async fn globals(
    rt: &geofaas_functions::local::LocalRuntime,
    choice: ContainerChoice,
) -> (u32, u32, u32) {
    let out = call_with(rt, "globals", "", choice, Duration::from_secs(15))
        .await
        .expect("globals call");
    let text = String::from_utf8_lossy(&out.body).into_owned();
    let n: Vec<u32> = text.split(' ').map(|w| w.parse().unwrap()).collect();
    (n[0], n[1], n[2])
}

#[tokio::test]
async fn new_instances_are_forked_processes_that_start_from_the_imported_module() {
    let rt = runtime(&fixtures());
    let (first, server, calls) = globals(&rt, ContainerChoice::Any).await;
    assert_eq!(calls, 1);
    assert_ne!(
        server,
        std::process::id(),
        "the instance is the fork server's child"
    );
    let (same, _, calls) = globals(&rt, ContainerChoice::Reuse).await;
    assert_eq!((same, calls), (first, 2), "a warm instance keeps its state");
    let mut pids = vec![first];
    for _ in 0..5 {
        let (pid, parent, calls) = globals(&rt, ContainerChoice::New).await;
        assert_eq!(
            calls, 1,
            "a new instance sees nothing an earlier one changed"
        );
        assert_eq!(parent, server, "forked by the same server");
        assert!(!pids.contains(&pid), "a new process each time");
        pids.push(pid);
    }
}

#[tokio::test]
async fn without_the_fork_server_each_instance_is_our_own_child() {
    let cfg = LocalBackend {
        fork_server: false,
        ..fixtures()
    };
    let rt = runtime(&cfg);
    let (_, parent, _) = globals(&rt, ContainerChoice::New).await;
    assert_eq!(parent, std::process::id());
}
