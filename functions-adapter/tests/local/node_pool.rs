//! New Node.js instances, a function's first one included, are generic workers of the runtime's
//! pool (`node_spares`) started before the function was known: each loads one function and
//! serves only it (nothing another instance or function did is seen), the version's environment
//! reaches it, the pool refills in the background, its workers run under the same limits as any
//! instance, are not counted as instances, and stop with the runtime.

use std::time::Duration;

use geofaas_config::LocalBackend;
use geofaas_functions::local::{LocalError, LocalRuntime};
use geofaas_functions::{ContainerChoice, InvokeError};

use crate::{
    assert_gone, call, call_with, empty, eventually, fixtures, ok_text, pid_of, runtime,
    write_function,
};

/// (pid, module calls, globalThis calls) of a `node-globals` call.
async fn globals(rt: &LocalRuntime, choice: ContainerChoice) -> (u32, u32, u32) {
    let out = call_with(rt, "node-globals", "", choice, Duration::from_secs(15))
        .await
        .expect("node-globals call");
    let text = String::from_utf8_lossy(out.body.full().expect("a whole body")).into_owned();
    let n: Vec<u32> = text.split(' ').filter_map(|w| w.parse().ok()).collect();
    assert_eq!(n.len(), 4, "unexpected output {text:?}");
    (n[0], n[2], n[3])
}

/// Waits (bounded) until the runtime has `count` generic workers ready; returns their pids.
async fn workers_ready(rt: &LocalRuntime, count: usize) -> Vec<u32> {
    assert!(
        eventually(|| rt.node_worker_pids().len() == count).await,
        "never had {count} generic node workers: {:?}",
        rt.node_worker_pids()
    );
    rt.node_worker_pids()
}

/// A Node function answering `"<pid> <value of VAR> <cwd> <global mark seen at load>"`.
const NODE_FN: &str = "const seen = globalThis.geofaasMark || '-';\n\
    globalThis.geofaasMark = __filename;\n\
    module.exports = (req, res) => res.send(\
    `${process.pid} ${process.env.VAR || '-'} ${process.cwd()} ${seen}`);\n";

fn pool_of(dir: &std::path::Path, node_spares: usize) -> LocalBackend {
    LocalBackend {
        node_spares,
        ..empty(dir)
    }
}

#[tokio::test]
async fn first_calls_take_workers_started_before_the_function_existed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = runtime(&pool_of(dir.path(), 2));
    let before = workers_ready(&rt, 2).await;
    // Written and loaded only now: the workers cannot have loaded it ahead.
    let src = tempfile::tempdir().expect("tempdir");
    let mut taken = Vec::new();
    for name in ["late-a", "late-b"] {
        let spec = write_function(src.path(), name, "index.js", NODE_FN);
        let folder = spec.dir.clone();
        rt.activate(rt.prepare_cold(spec).expect("load"), None);
        assert_eq!(rt.spare_pids(name), rt.node_worker_pids());
        let (text, out) = ok_text(&rt, name, "").await;
        assert!(out.cold_start);
        let words: Vec<&str> = text.split(' ').collect();
        let pid = pid_of(&text);
        assert!(
            before.contains(&pid),
            "{name}: {pid} is not one of {before:?}"
        );
        assert!(!taken.contains(&pid), "a worker serves one function only");
        assert_eq!(std::path::Path::new(words[2]), folder.as_path());
        assert_eq!(
            words[3], "-",
            "{name} saw another function's globals: {text:?}"
        );
        taken.push(pid);
        // Refilled in the background with new processes.
        assert!(
            eventually(|| {
                let now = rt.node_worker_pids();
                now.len() == 2 && !now.iter().any(|p| taken.contains(p))
            })
            .await,
            "pool not refilled: {:?}",
            rt.node_worker_pids()
        );
    }
    let stats = rt.stats("late-a").expect("stats");
    assert_eq!(
        (stats.idle, stats.busy),
        (1, 0),
        "generic workers are not counted as instances"
    );
}

#[tokio::test]
async fn a_new_instance_saw_nothing_of_earlier_calls() {
    let cfg = LocalBackend {
        node_spares: 2,
        ..fixtures()
    };
    let rt = runtime(&cfg);
    let (first, calls, global) = globals(&rt, ContainerChoice::Any).await;
    assert_eq!((calls, global), (1, 1));
    let (same, calls, global) = globals(&rt, ContainerChoice::Reuse).await;
    assert_eq!(
        (same, calls, global),
        (first, 2, 2),
        "a warm instance keeps its state"
    );
    let mut seen = vec![first];
    for round in 0..4 {
        let ready = workers_ready(&rt, 2).await;
        let (pid, calls, global) = globals(&rt, ContainerChoice::New).await;
        assert!(
            ready.contains(&pid),
            "round {round}: instance {pid} is not one of the generic workers {ready:?}"
        );
        assert_eq!(
            (calls, global),
            (1, 1),
            "round {round}: a new instance sees nothing an earlier one changed"
        );
        assert!(!seen.contains(&pid), "a new process each time");
        seen.push(pid);
    }
}

#[tokio::test]
async fn the_version_environment_reaches_the_worker_that_loads_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = runtime(&pool_of(dir.path(), 2));
    workers_ready(&rt, 2).await;
    let src = tempfile::tempdir().expect("tempdir");
    let spec = write_function(src.path(), "envjs", "index.js", NODE_FN);
    let v1 = spec
        .clone()
        .deployed("v1", vec![("VAR".into(), "one".into())]);
    let v2 = spec.deployed("v2", vec![("VAR".into(), "two".into())]);
    let p1 = rt.prepare(v1, true).await.expect("prepare v1");
    let p2 = rt.prepare(v2, true).await.expect("prepare v2");
    rt.activate(p1, Some((p2, 100)));
    let (text, out) = ok_text(&rt, "envjs", "").await;
    assert_eq!(out.version.as_deref(), Some("v2"));
    assert_eq!(text.split(' ').nth(1), Some("two"), "{text:?}");
    rt.activate(rt.loaded("envjs", "v1").expect("v1"), None);
    let (text, _) = ok_text(&rt, "envjs", "").await;
    assert_eq!(text.split(' ').nth(1), Some("one"), "{text:?}");
}

#[tokio::test]
async fn a_function_that_fails_to_load_fails_prepare_and_its_calls() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = runtime(&pool_of(dir.path(), 2));
    let src = tempfile::tempdir().expect("tempdir");
    // Each load appends a line to `loads` before it throws.
    let broken = "require('fs').appendFileSync(__dirname + '/loads', 'x\\n');\n\
         throw new Error('broken on load');\n";
    let spec = write_function(src.path(), "broken", "index.js", broken);
    let folder = spec.dir.clone();
    let err = rt
        .prepare(spec.clone(), true)
        .await
        .expect_err("cannot load");
    assert!(
        matches!(&err, LocalError::Start { reason, .. } if reason.contains("broken on load")),
        "{err:?}"
    );
    rt.activate(rt.prepare_cold(spec).expect("load"), None);
    for _ in 0..3 {
        let err = call(&rt, "broken", "").await.expect_err("cannot load");
        assert!(
            matches!(&err, InvokeError::FunctionFailed { message, .. } if message.contains("broken on load")),
            "{err:?}"
        );
    }
    // The pool refills after the failures, and nothing loads the function on its own.
    workers_ready(&rt, 2).await;
    let loads = std::fs::read_to_string(folder.join("loads")).unwrap_or_default();
    assert_eq!(
        loads.lines().count(),
        4,
        "one load per prepare and per call"
    );
}

#[tokio::test]
async fn generic_workers_run_under_the_memory_limit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = LocalBackend {
        memory_limit_mb: 1536,
        ..pool_of(dir.path(), 1)
    };
    let rt = runtime(&cfg);
    let workers = workers_ready(&rt, 1).await;
    assert_eq!(
        crate::address_space_limit(workers[0]),
        (1536u64 * 1024 * 1024).to_string()
    );
}

#[tokio::test]
async fn shutdown_stops_the_workers_and_refuses_calls() {
    let rt = runtime(&LocalBackend {
        node_spares: 2,
        ..fixtures()
    });
    let workers = workers_ready(&rt, 2).await;
    let (instance, _, _) = globals(&rt, ContainerChoice::Any).await;
    rt.shutdown().await;
    for pid in workers.into_iter().chain([instance]) {
        assert_gone(pid).await;
    }
    assert!(rt.node_worker_pids().is_empty());
    let after = call(&rt, "node-globals", "").await;
    assert!(
        matches!(after, Err(InvokeError::Unavailable(_))),
        "{after:?}"
    );
}

#[tokio::test]
async fn shutdown_while_workers_start_leaves_no_process_behind() {
    let rt = runtime(&LocalBackend {
        node_spares: 2,
        ..fixtures()
    });
    // The runtime is stopped at once, while its first worker is still starting.
    rt.shutdown().await;
    let children = || {
        let me = std::process::id();
        std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter(|&pid| crate::alive(pid))
            .filter(|&pid| {
                std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .ok()
                    .and_then(|s| s.rsplit_once(')').map(|(_, r)| r.to_owned()))
                    .and_then(|r| r.split_whitespace().nth(1).map(str::to_owned))
                    .is_some_and(|ppid| ppid == me.to_string())
            })
            .count()
    };
    assert!(
        eventually(|| children() == 0).await,
        "{} children left",
        children()
    );
}

#[tokio::test]
async fn dropping_the_runtime_stops_its_workers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = runtime(&pool_of(dir.path(), 2));
    let workers = workers_ready(&rt, 2).await;
    drop(rt);
    for pid in workers {
        assert_gone(pid).await;
    }
}

#[tokio::test]
async fn without_the_pool_a_new_node_instance_is_started_for_the_call() {
    let cfg = LocalBackend {
        node_spares: 0,
        ..fixtures()
    };
    let rt = runtime(&cfg);
    let (first, _, _) = globals(&rt, ContainerChoice::Any).await;
    let (second, calls, _) = globals(&rt, ContainerChoice::New).await;
    assert_ne!(first, second);
    assert_eq!(calls, 1);
    assert!(rt.node_worker_pids().is_empty());
    assert!(rt.spare_pids("node-globals").is_empty());
}

#[test]
fn too_many_workers_is_an_error_naming_the_field() {
    let cfg = LocalBackend {
        node_spares: 17,
        ..fixtures()
    };
    let err = LocalRuntime::new(&cfg, &crate::crate_dir()).expect_err("node_spares = 17");
    assert!(err.to_string().contains("node_spares"), "{err}");
}
