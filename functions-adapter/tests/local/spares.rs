//! New Node.js instances are taken from pre-started spares (`node_spares`): each spare is its own
//! process that has never run a call (nothing an earlier instance changed is seen), runs under
//! the same limits as any instance, is not counted as an instance, and is stopped with the
//! runtime.

use std::path::Path;
use std::time::Duration;

use geofaas_config::LocalBackend;
use geofaas_functions::local::LocalRuntime;
use geofaas_functions::{ContainerChoice, InvokeError};

use crate::{alive, assert_gone, call, call_with, eventually, fixtures, runtime};

/// (pid, module calls, globalThis calls) of a `node-globals` call.
async fn globals(rt: &LocalRuntime, choice: ContainerChoice) -> (u32, u32, u32) {
    let out = call_with(rt, "node-globals", "", choice, Duration::from_secs(15))
        .await
        .expect("node-globals call");
    let text = String::from_utf8_lossy(&out.body).into_owned();
    let n: Vec<u32> = text.split(' ').filter_map(|w| w.parse().ok()).collect();
    assert_eq!(n.len(), 4, "unexpected output {text:?}");
    (n[0], n[2], n[3])
}

/// Waits (bounded) until `function` has `count` spares ready; returns their pids.
async fn spares_ready(rt: &LocalRuntime, function: &str, count: usize) -> Vec<u32> {
    assert!(
        eventually(|| rt.spare_pids(function).len() == count).await,
        "{function} never had {count} spares: {:?}",
        rt.spare_pids(function)
    );
    rt.spare_pids(function)
}

/// Live processes whose command line mentions `dir` (the workers of a function folder).
fn processes_of(dir: &Path) -> Vec<u32> {
    let needle = dir.display().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&needle))
        })
        .filter(|pid| alive(*pid))
        .collect()
}

/// A functions folder holding one Node function, `spare-fn`, at a path no other test uses.
fn own_node_function() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let function = dir.path().join("spare-fn");
    std::fs::create_dir(&function).expect("mkdir");
    std::fs::write(
        function.join("index.js"),
        "module.exports = (req, res) => res.send(String(process.pid));\n",
    )
    .expect("write index.js");
    dir
}

fn spares_of(dir: &Path, node_spares: usize) -> LocalBackend {
    LocalBackend {
        functions_dir: dir.to_path_buf(),
        node_spares,
        ..fixtures()
    }
}

#[tokio::test]
async fn a_new_instance_is_a_spare_that_saw_nothing_of_earlier_calls() {
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
    // The spares started while (and after) the first instance changed its globals.
    let spares = spares_ready(&rt, "node-globals", 2).await;
    assert!(!spares.contains(&first));
    let stats = rt.stats("node-globals").expect("stats");
    assert_eq!(
        (stats.idle, stats.busy),
        (1, 0),
        "spares are not counted as instances"
    );
    let mut seen = vec![first];
    for round in 0..4 {
        let ready = spares_ready(&rt, "node-globals", 2).await;
        let (pid, calls, global) = globals(&rt, ContainerChoice::New).await;
        assert!(
            ready.contains(&pid),
            "round {round}: instance {pid} is not one of the spares {ready:?}"
        );
        assert_eq!(
            (calls, global),
            (1, 1),
            "round {round}: a new instance sees nothing an earlier one changed"
        );
        assert!(!seen.contains(&pid), "a new process each time");
        seen.push(pid);
        let stats = rt.stats("node-globals").expect("stats");
        assert_eq!(
            (stats.idle, stats.busy),
            (1, 0),
            "New replaced the idle one"
        );
    }
}

#[tokio::test]
async fn spares_run_under_the_memory_limit() {
    let cfg = LocalBackend {
        memory_limit_mb: 1536,
        node_spares: 1,
        ..fixtures()
    };
    let rt = runtime(&cfg);
    globals(&rt, ContainerChoice::Any).await;
    let spares = spares_ready(&rt, "node-globals", 1).await;
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", spares[0])).expect("limits");
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max address space"))
        .unwrap_or_else(|| panic!("no address-space line in {limits}"));
    let soft: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(
        soft.get(3).copied(),
        Some((1536u64 * 1024 * 1024).to_string().as_str()),
        "{line}"
    );
}

#[tokio::test]
async fn shutdown_stops_ready_spares_and_refuses_calls() {
    let dir = own_node_function();
    let rt = runtime(&spares_of(dir.path(), 2));
    call(&rt, "spare-fn", "").await.expect("first call");
    let spares = spares_ready(&rt, "spare-fn", 2).await;
    rt.shutdown().await;
    for pid in spares {
        assert_gone(pid).await;
    }
    assert!(rt.spare_pids("spare-fn").is_empty());
    assert!(eventually(|| processes_of(dir.path()).is_empty()).await);
    let after = call(&rt, "spare-fn", "").await;
    assert!(
        matches!(after, Err(InvokeError::Unavailable(_))),
        "{after:?}"
    );
}

#[tokio::test]
async fn shutdown_while_spares_start_leaves_no_process_behind() {
    let dir = own_node_function();
    let rt = runtime(&spares_of(dir.path(), 2));
    // The first instance starts the spares; stop at once, while they are still starting.
    call(&rt, "spare-fn", "").await.expect("first call");
    rt.shutdown().await;
    assert!(
        eventually(|| processes_of(dir.path()).is_empty()).await,
        "left running: {:?}",
        processes_of(dir.path())
    );
}

#[tokio::test]
async fn dropping_the_runtime_stops_its_spares() {
    let dir = own_node_function();
    let rt = runtime(&spares_of(dir.path(), 1));
    call(&rt, "spare-fn", "").await.expect("first call");
    let spares = spares_ready(&rt, "spare-fn", 1).await;
    drop(rt);
    assert_gone(spares[0]).await;
    assert!(eventually(|| processes_of(dir.path()).is_empty()).await);
}

#[tokio::test]
async fn a_function_that_fails_to_load_reports_it_and_keeps_no_spares() {
    let dir = tempfile::tempdir().expect("tempdir");
    let function = dir.path().join("broken");
    std::fs::create_dir(&function).expect("mkdir");
    // Each load appends a line to `loads` before it throws.
    std::fs::write(
        function.join("index.js"),
        "require('fs').appendFileSync(__dirname + '/loads', 'x\\n');\n\
         throw new Error('broken on load');\n",
    )
    .expect("write index.js");
    let rt = runtime(&LocalBackend {
        functions_dir: dir.path().to_path_buf(),
        node_spares: 2,
        ..fixtures()
    });
    for _ in 0..3 {
        let err = call(&rt, "broken", "").await.expect_err("cannot load");
        assert!(
            matches!(&err, InvokeError::FunctionFailed { message, .. } if message.contains("broken on load")),
            "{err:?}"
        );
    }
    assert!(rt.spare_pids("broken").is_empty());
    rt.shutdown().await;
    assert!(eventually(|| processes_of(dir.path()).is_empty()).await);
    let loads = std::fs::read_to_string(function.join("loads")).unwrap_or_default();
    // One start per call: no spare is started for a function that never answered a call.
    assert!(
        loads.lines().count() <= 3,
        "{} loads for 3 calls: spares kept being started",
        loads.lines().count()
    );
}

#[tokio::test]
async fn without_spares_a_new_node_instance_is_started_for_the_call() {
    let cfg = LocalBackend {
        node_spares: 0,
        ..fixtures()
    };
    let rt = runtime(&cfg);
    let (first, _, _) = globals(&rt, ContainerChoice::Any).await;
    let (second, calls, _) = globals(&rt, ContainerChoice::New).await;
    assert_ne!(first, second);
    assert_eq!(calls, 1);
    assert!(rt.spare_pids("node-globals").is_empty());
}

#[test]
fn too_many_spares_is_an_error_naming_the_field() {
    let cfg = LocalBackend {
        node_spares: 17,
        ..fixtures()
    };
    let err = LocalRuntime::new(&cfg, crate::crate_dir()).expect_err("node_spares = 17");
    assert!(err.to_string().contains("node_spares"), "{err}");
}
