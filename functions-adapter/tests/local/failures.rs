//! Failing functions map to the right `InvokeError` and never leave a broken worker behind.

use std::time::Duration;

use geofaas_config::LocalBackend;
use geofaas_functions::{ContainerChoice, Fault, InvokeError};

use crate::{assert_gone, call, call_with, eventually, fixtures, ok_text, pid_of, runtime};

fn failure_message(result: Result<geofaas_functions::InvokeOutput, InvokeError>) -> String {
    match result {
        Err(InvokeError::FunctionFailed { message, .. }) => message,
        other => panic!("expected FunctionFailed, got {other:?}"),
    }
}

#[tokio::test]
async fn exiting_worker_fails_the_call_and_the_next_call_gets_a_fresh_one() {
    let rt = runtime(&fixtures());
    let before = pid_of(&ok_text(&rt, "crash", "").await.0);
    let message = failure_message(call(&rt, "crash", "exit").await);
    assert!(message.contains("exited with status 3"), "{message}");
    assert!(
        message.contains("crash fixture exiting on purpose"),
        "{message}"
    );
    assert_eq!(
        rt.stats("crash").map(|s| s.idle + s.busy),
        Some(0),
        "dead worker dropped"
    );
    let (after, out) = ok_text(&rt, "crash", "").await;
    assert!(out.cold_start);
    assert_ne!(pid_of(&after), before);
}

#[tokio::test]
async fn segfault_is_reported_with_its_signal() {
    let rt = runtime(&fixtures());
    let message = failure_message(call(&rt, "crash", "segv").await);
    assert!(message.contains("signal 11"), "{message}");
    assert!(ok_text(&rt, "crash", "").await.1.cold_start);
}

#[tokio::test]
async fn raised_exception_fails_the_call_but_keeps_the_worker() {
    let rt = runtime(&fixtures());
    let before = pid_of(&ok_text(&rt, "crash", "").await.0);
    let err = call(&rt, "crash", "raise").await.expect_err("raise");
    assert_eq!(err.fault(), Fault::Function);
    let InvokeError::FunctionFailed { message, body } = err else {
        panic!("expected FunctionFailed, got {err:?}");
    };
    assert!(message.contains("ValueError: asked to raise"), "{message}");
    let body = body
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    assert!(body.contains("Traceback"), "{body}");
    assert_eq!(pid_of(&ok_text(&rt, "crash", "").await.0), before);
}

#[tokio::test]
async fn nodejs_throw_and_exit_are_function_failures() {
    let rt = runtime(&fixtures());
    let thrown = failure_message(call(&rt, "node-pid", "throw").await);
    assert!(thrown.contains("asked to throw"), "{thrown}");
    let exited = failure_message(call(&rt, "node-pid", "exit").await);
    assert!(exited.contains("exited with status 7"), "{exited}");
    assert!(ok_text(&rt, "node-pid", "ok").await.0.ends_with(" - ok"));
}

#[tokio::test]
async fn hanging_call_times_out_and_its_worker_is_killed() {
    let cfg = LocalBackend {
        timeout_ms: 2_000,
        max_instances: 1,
        ..fixtures()
    };
    let rt = runtime(&cfg);
    // Warm first, so the configured timeout is spent in the call and not in the cold start.
    let pid = pid_of(&ok_text(&rt, "hang", "pid").await.0);
    let err = call(&rt, "hang", "forever")
        .await
        .expect_err("must time out");
    assert!(matches!(err, InvokeError::Timeout(_)), "{err:?}");
    assert_gone(pid).await;
    let (again, out) = ok_text(&rt, "hang", "pid").await;
    assert!(out.cold_start);
    assert_ne!(pid_of(&again), pid);
}

#[tokio::test]
async fn invocation_deadline_shorter_than_the_config_timeout_wins() {
    let rt = runtime(&fixtures());
    let result = call_with(
        &rt,
        "hang",
        "x",
        ContainerChoice::Any,
        Duration::from_millis(400),
    )
    .await;
    assert!(matches!(result, Err(InvokeError::Timeout(_))), "{result:?}");
}

#[tokio::test]
async fn binary_failure_and_hang_kill_the_whole_process_group() {
    let cfg = LocalBackend {
        timeout_ms: 2_000,
        ..fixtures()
    };
    let rt = runtime(&cfg);
    let message = failure_message(call(&rt, "sh-fail", "").await);
    assert!(message.contains("exited with status 4"), "{message}");
    assert!(message.contains("something went wrong"), "{message}");

    let dir = tempfile::tempdir().expect("tempdir");
    let pid_file = dir.path().join("child.pid");
    let result = call(&rt, "sh-hang", &pid_file.display().to_string()).await;
    assert!(matches!(result, Err(InvokeError::Timeout(_))), "{result:?}");
    let child: u32 = std::fs::read_to_string(&pid_file)
        .expect("fn.sh wrote its child's pid")
        .trim()
        .parse()
        .expect("pid");
    assert_gone(child).await;
}

#[tokio::test]
async fn oversized_output_is_refused_and_the_worker_replaced() {
    let cfg = LocalBackend {
        max_output_bytes: 1000,
        ..fixtures()
    };
    let rt = runtime(&cfg);
    assert_eq!(ok_text(&rt, "big", "1000").await.0.len(), 1000);
    let result = call(&rt, "big", "1001").await;
    assert!(
        matches!(result, Err(InvokeError::OutputTooLarge { limit: 1000 })),
        "{result:?}"
    );
    assert!(
        ok_text(&rt, "big", "10").await.1.cold_start,
        "worker replaced"
    );
}

#[tokio::test]
async fn memory_limit_stops_a_hungry_function() {
    let cfg = LocalBackend {
        memory_limit_mb: 256,
        ..fixtures()
    };
    let rt = runtime(&cfg);
    let pid = pid_of(&ok_text(&rt, "hog", "16").await.0);
    let message = failure_message(call(&rt, "hog", "512").await);
    assert!(message.contains("MemoryError"), "{message}");
    assert_gone(pid).await;
    assert!(ok_text(&rt, "hog", "16").await.1.cold_start);
}

#[tokio::test]
async fn unknown_function_is_a_client_error() {
    let rt = runtime(&fixtures());
    let err = call(&rt, "nope", "").await.expect_err("unknown");
    assert!(
        matches!(&err, InvokeError::UnknownFunction(name) if name == "nope"),
        "{err:?}"
    );
    assert_eq!(err.fault(), Fault::Client);
}

#[tokio::test]
async fn full_pool_makes_callers_wait_then_overloaded() {
    let cfg = LocalBackend {
        max_instances: 1,
        timeout_ms: 10_000,
        ..fixtures()
    };
    let rt = runtime(&cfg);
    let pid = pid_of(&ok_text(&rt, "hang", "pid").await.0);
    let busy = {
        let rt = rt.clone();
        tokio::spawn(async move { call(&rt, "hang", "forever").await })
    };
    assert!(eventually(|| rt.stats("hang").is_some_and(|s| s.busy == 1)).await);
    let queued = call_with(
        &rt,
        "hang",
        "pid",
        ContainerChoice::Any,
        Duration::from_millis(300),
    )
    .await;
    assert!(
        matches!(queued, Err(InvokeError::Overloaded { .. })),
        "{queued:?}"
    );
    rt.shutdown().await;
    // The running call was cut off after the function started: lost, and it may have run (so
    // the gateway does not run it again elsewhere).
    let first = busy.await.expect("join");
    assert!(
        matches!(&first, Err(e @ InvokeError::Network(_)) if e.may_have_run()),
        "{first:?}"
    );
    assert_gone(pid).await;
}
