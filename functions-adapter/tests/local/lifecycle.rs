//! Start-up checks, keep-alive eviction, shutdown and drop: no worker outlives its runtime.

use std::path::PathBuf;

use geofaas_config::LocalBackend;
use geofaas_functions::local::{LocalError, LocalRuntime};
use geofaas_functions::{FunctionBackend, Health, InvokeError};

use crate::{assert_gone, call, fixtures, ok_text, pid_of, runtime};

#[tokio::test]
async fn idle_workers_are_stopped_after_keep_alive() {
    let cfg = LocalBackend {
        keep_alive_s: 1,
        ..fixtures()
    };
    let rt = runtime(&cfg);
    let pid = pid_of(&ok_text(&rt, "pid", "").await.0);
    assert_eq!(rt.stats("pid").map(|s| s.idle), Some(1));
    assert_gone(pid).await;
    assert_eq!(rt.stats("pid").map(|s| s.idle), Some(0));
    assert!(ok_text(&rt, "pid", "").await.1.cold_start);
}

#[tokio::test]
async fn shutdown_kills_every_worker_and_refuses_calls() {
    let rt = runtime(&fixtures());
    let py = pid_of(&ok_text(&rt, "pid", "").await.0);
    let js = pid_of(&ok_text(&rt, "node-pid", "").await.0);
    assert_eq!(rt.health().await, Health::Healthy);
    rt.shutdown().await;
    assert_gone(py).await;
    assert_gone(js).await;
    assert!(matches!(rt.health().await, Health::Unhealthy(_)));
    let after = call(&rt, "pid", "").await;
    assert!(
        matches!(after, Err(InvokeError::Unavailable(_))),
        "{after:?}"
    );
}

#[tokio::test]
async fn dropping_the_runtime_kills_its_workers() {
    let rt = runtime(&fixtures());
    let pid = pid_of(&ok_text(&rt, "pid", "").await.0);
    drop(rt);
    assert_gone(pid).await;
}

#[tokio::test]
async fn bad_function_folder_is_named_in_the_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("empty-fn")).expect("mkdir");
    let cfg = LocalBackend {
        functions_dir: dir.path().to_path_buf(),
        ..LocalBackend::default()
    };
    let err = LocalRuntime::new(&cfg, &PathBuf::from("/")).expect_err("bad folder");
    assert!(matches!(err, LocalError::BadFunction { .. }), "{err:?}");
    assert!(err.to_string().contains("empty-fn"), "{err}");
}

#[tokio::test]
async fn listed_function_without_folder_is_an_error() {
    let cfg = LocalBackend {
        functions: Some(vec!["pid".into(), "missing".into()]),
        ..fixtures()
    };
    let err = LocalRuntime::new(&cfg, &crate::crate_dir()).expect_err("missing");
    assert!(err.to_string().contains("missing"), "{err}");
}

#[test]
fn new_outside_tokio_is_an_error() {
    let err = LocalRuntime::new(&fixtures(), &crate::crate_dir()).expect_err("no runtime");
    assert!(matches!(err, LocalError::NoTokioRuntime), "{err:?}");
}
