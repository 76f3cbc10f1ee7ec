//! Python processes are forked from one zygote per runtime: a function's first call is served
//! by a process the zygote forked (no interpreter start), later instances by the version's fork
//! server (the zygote's child, forked after that first call), every instance
//! starts from the freshly imported module (no state from earlier instances, of this function
//! or another), the version's environment reaches it, an import error fails the first call and
//! `prepare`, and a killed zygote is replaced.

use std::time::Duration;

use geofaas_config::LocalBackend;
use geofaas_functions::local::{LocalError, LocalRuntime};
use geofaas_functions::{ContainerChoice, InvokeError};

use crate::{
    alive, assert_gone, call, call_with, empty, eventually, fixtures, ok_text, parent_of, pid_of,
    runtime, write_function,
};

/// (pid, parent pid, calls this instance has served) of a `globals` call.
async fn globals(rt: &LocalRuntime, choice: ContainerChoice) -> (u32, u32, u32) {
    let out = call_with(rt, "globals", "", choice, Duration::from_secs(15))
        .await
        .expect("globals call");
    let text = String::from_utf8_lossy(out.body.full().expect("a whole body")).into_owned();
    let n: Vec<u32> = text.split(' ').map(|w| w.parse().unwrap()).collect();
    (n[0], n[1], n[2])
}

/// The zygote's pid once it has started (bounded wait).
async fn zygote_of(rt: &LocalRuntime) -> u32 {
    assert!(
        eventually(|| rt.zygote_pid().is_some()).await,
        "the zygote never started"
    );
    rt.zygote_pid().unwrap_or_default()
}

/// A function answering `"<pid> <ppid> <value of VAR> <cwd>"`.
const ENV_FN: &str = "import os\n\ndef fn(input, headers):\n    \
    return f\"{os.getpid()} {os.getppid()} {os.environ.get('VAR', '-')} {os.getcwd()}\"\n";

/// Asks for new `globals` instances until one is forked by the version's fork server (which
/// is forked in the background after the first instance's first call); (instance, server).
/// Every instance on the way is fresh and forked by the zygote itself.
async fn from_fork_server(rt: &LocalRuntime, zygote: u32) -> (u32, u32) {
    for _ in 0..200 {
        let (pid, parent, calls) = globals(rt, ContainerChoice::New).await;
        assert_eq!(
            calls, 1,
            "a new instance sees nothing an earlier one changed"
        );
        if parent != zygote {
            assert_eq!(
                parent_of(parent),
                zygote,
                "the fork server is the zygote's child"
            );
            return (pid, parent);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no instance was ever forked by a fork server");
}

#[tokio::test]
async fn the_zygote_starts_with_the_runtime_and_forks_every_first_instance() {
    let rt = runtime(&fixtures());
    let zygote = zygote_of(&rt).await;
    assert_eq!(
        parent_of(zygote),
        std::process::id(),
        "the runtime's own child"
    );
    let (first, parent, calls) = globals(&rt, ContainerChoice::Any).await;
    assert_eq!(calls, 1);
    assert_eq!(
        parent, zygote,
        "the first instance is forked by the zygote started with the runtime"
    );
    let (same, _, calls) = globals(&rt, ContainerChoice::Reuse).await;
    assert_eq!((same, calls), (first, 2), "a warm instance keeps its state");
    // Later instances come from the version's fork server, each a fresh process.
    let (mut last, server) = from_fork_server(&rt, zygote).await;
    let mut pids = vec![first, last];
    for _ in 0..4 {
        let (pid, parent, calls) = globals(&rt, ContainerChoice::New).await;
        assert_eq!(
            calls, 1,
            "a new instance sees nothing an earlier one changed"
        );
        assert_eq!(parent, server, "forked by the version's fork server");
        assert!(!pids.contains(&pid), "a new process each time");
        pids.push(pid);
        last = pid;
    }
    assert!(crate::alive(last));
    // Another function's first instance: from the same zygote.
    let (text, _) = ok_text(&rt, "pid", "").await;
    assert_eq!(parent_of(pid_of(&text)), zygote);
}

#[tokio::test]
async fn no_module_state_reaches_another_function() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = runtime(&empty(dir.path()));
    let src = tempfile::tempdir().expect("tempdir");
    let marks = "import builtins\n\
        seen = getattr(builtins, 'geofaas_mark', None)\n\
        builtins.geofaas_mark = __file__\n\
        COUNT = [0]\n\
        def fn(input, headers):\n    COUNT[0] += 1\n    \
        return f\"{seen} {COUNT[0]}\"\n";
    for name in ["first", "second"] {
        let spec = write_function(src.path(), name, "fn.py", marks);
        let prepared = rt.prepare(spec, true).await.expect("prepare");
        rt.activate(prepared, None);
    }
    for name in ["first", "second", "first"] {
        let (text, _) = ok_text(&rt, name, "").await;
        assert!(
            text.starts_with("None "),
            "{name} saw the module-level state of another import: {text:?}"
        );
    }
    let (text, _) = ok_text(&rt, "first", "").await;
    assert_eq!(
        text, "None 3",
        "one warm instance counted every call of its function"
    );
}

#[tokio::test]
async fn the_version_environment_and_folder_reach_its_instances() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = runtime(&empty(dir.path()));
    let src = tempfile::tempdir().expect("tempdir");
    let spec = write_function(src.path(), "envfn", "fn.py", ENV_FN);
    let folder = spec.dir.clone();
    let v1 = spec
        .clone()
        .deployed("v1", vec![("VAR".into(), "one".into())]);
    let v2 = spec.deployed("v2", vec![("VAR".into(), "two".into())]);
    let p1 = rt.prepare(v1, true).await.expect("prepare v1");
    let p2 = rt.prepare(v2, true).await.expect("prepare v2");
    // Both live at once: callers of the rollout's bucket get v2.
    rt.activate(p1, Some((p2, 100)));
    let (text, out) = ok_text(&rt, "envfn", "").await;
    let words: Vec<&str> = text.split(' ').collect();
    assert_eq!(out.version.as_deref(), Some("v2"));
    assert_eq!(words[2], "two", "{text:?}");
    assert_eq!(std::path::Path::new(words[3]), folder.as_path());
    rt.activate(rt.loaded("envfn", "v1").expect("v1 loaded"), None);
    let (text, out) = ok_text(&rt, "envfn", "").await;
    assert_eq!(out.version.as_deref(), Some("v1"));
    assert_eq!(text.split(' ').nth(2), Some("one"), "{text:?}");
    // The zygote itself never got either: a function deployed without env sees none.
    let plain = write_function(src.path(), "plainenv", "fn.py", ENV_FN);
    rt.activate(rt.prepare_cold(plain).expect("load"), None);
    let (text, _) = ok_text(&rt, "plainenv", "").await;
    assert_eq!(text.split(' ').nth(2), Some("-"), "{text:?}");
}

#[tokio::test]
async fn an_import_error_fails_prepare_and_the_first_call_with_its_traceback() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = runtime(&empty(dir.path()));
    let src = tempfile::tempdir().expect("tempdir");
    let broken = "import os\nraise RuntimeError('cannot load the model file')\n";
    let spec = write_function(src.path(), "broken", "fn.py", broken);
    let err = rt.prepare(spec.clone(), true).await.expect_err("must fail");
    assert!(
        matches!(&err, LocalError::Start { reason, .. }
            if reason.contains("RuntimeError: cannot load the model file")),
        "{err:?}"
    );
    rt.activate(rt.prepare_cold(spec).expect("load"), None);
    let err = call(&rt, "broken", "").await.expect_err("must fail");
    let InvokeError::FunctionFailed { message, body } = err else {
        panic!("expected FunctionFailed, got {err:?}");
    };
    assert!(message.contains("cannot load the model file"), "{message}");
    let body = String::from_utf8_lossy(&body.unwrap_or_default()).into_owned();
    assert!(body.contains("Traceback"), "{body}");
    // The zygote is unharmed: another function still starts from it.
    let ok = write_function(src.path(), "fine", "fn.py", ENV_FN);
    rt.activate(rt.prepare(ok, true).await.expect("prepare"), None);
    ok_text(&rt, "fine", "").await;
}

#[tokio::test]
async fn a_killed_zygote_is_replaced_on_the_next_first_call() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = runtime(&empty(dir.path()));
    let src = tempfile::tempdir().expect("tempdir");
    let old = zygote_of(&rt).await;
    let killed = std::process::Command::new("kill")
        .args(["-9", &old.to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    assert_gone(old).await;
    let spec = write_function(src.path(), "after", "fn.py", ENV_FN);
    rt.activate(rt.prepare_cold(spec).expect("load"), None);
    let (text, _) = ok_text(&rt, "after", "").await;
    let parent: u32 = text.split(' ').nth(1).and_then(|p| p.parse().ok()).unwrap();
    let new = rt.zygote_pid().expect("a zygote runs again");
    assert_ne!(new, old);
    assert!(alive(new));
    assert_eq!(parent, new, "forked by the replacement");
}

#[tokio::test]
async fn shutdown_and_drop_stop_the_zygote_and_its_fork_servers() {
    let rt = runtime(&fixtures());
    let zygote = zygote_of(&rt).await;
    globals(&rt, ContainerChoice::Any).await;
    let (instance, server) = from_fork_server(&rt, zygote).await;
    rt.shutdown().await;
    for pid in [zygote, server, instance] {
        assert_gone(pid).await;
    }
    assert_eq!(rt.zygote_pid(), None);

    let rt = runtime(&fixtures());
    let zygote = zygote_of(&rt).await;
    globals(&rt, ContainerChoice::Any).await;
    let (instance, server) = from_fork_server(&rt, zygote).await;
    drop(rt);
    for pid in [zygote, server, instance] {
        assert_gone(pid).await;
    }
}

#[tokio::test]
async fn the_zygote_runs_under_the_memory_limit() {
    let cfg = LocalBackend {
        memory_limit_mb: 768,
        ..fixtures()
    };
    let rt = runtime(&cfg);
    let zygote = zygote_of(&rt).await;
    let (instance, _, _) = globals(&rt, ContainerChoice::Any).await;
    for pid in [zygote, instance] {
        assert_eq!(
            crate::address_space_limit(pid),
            (768u64 * 1024 * 1024).to_string(),
            "process {pid}"
        );
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
    assert_eq!(rt.zygote_pid(), None, "no zygote is started");
}
