//! Warm reuse, forced new instances and the three runtimes' calling conventions.

use std::time::Duration;

use geofaas_functions::{ContainerChoice, FunctionBackend, Invocation};
use http::HeaderValue;

use crate::{assert_gone, call_with, fixtures, ok_text, pid_of, runtime};

#[tokio::test]
async fn second_call_is_warm_on_the_same_worker() {
    let rt = runtime(&fixtures());
    let (first, out1) = ok_text(&rt, "pid", "").await;
    assert!(out1.cold_start, "first call must be a cold start");
    assert!(
        !out1.cold.is_zero(),
        "a cold start reports its start-up time"
    );
    let (second, out2) = ok_text(&rt, "pid", "").await;
    assert!(!out2.cold_start, "second call must reuse the warm worker");
    assert!(out2.cold.is_zero());
    assert_eq!(pid_of(&first), pid_of(&second), "same worker process");
    let stats = rt.stats("pid").expect("stats");
    assert_eq!((stats.idle, stats.busy, stats.max), (1, 0, 2));
}

#[tokio::test]
async fn function_prints_do_not_reach_the_output() {
    let rt = runtime(&fixtures());
    let mut inv = Invocation::new("pid", "body", Duration::from_secs(15));
    inv.headers
        .insert("x-test", HeaderValue::from_static("hdr"));
    let out = rt.invoke(inv).await.expect("call");
    let text = String::from_utf8_lossy(out.body.full().expect("a whole body"));
    assert!(text.ends_with(" hdr body"), "unexpected output {text:?}");
    assert!(!text.contains("noise"));
}

#[tokio::test]
async fn new_forces_a_fresh_process_and_stops_the_idle_one() {
    let rt = runtime(&fixtures());
    let old = pid_of(&ok_text(&rt, "pid", "").await.0);
    let forced = call_with(
        &rt,
        "pid",
        "",
        ContainerChoice::New,
        Duration::from_secs(15),
    )
    .await
    .expect("forced new");
    assert!(forced.cold_start);
    let new = pid_of(&String::from_utf8_lossy(
        forced.body.full().expect("a whole body"),
    ));
    assert_ne!(old, new, "New must not reuse the warm worker");
    assert_gone(old).await;
    let reuse = call_with(
        &rt,
        "pid",
        "",
        ContainerChoice::Reuse,
        Duration::from_secs(15),
    )
    .await
    .expect("reuse");
    assert!(!reuse.cold_start);
    assert_eq!(
        pid_of(&String::from_utf8_lossy(
            reuse.body.full().expect("a whole body")
        )),
        new
    );
}

#[tokio::test]
async fn nodejs_gets_body_and_headers_and_stays_warm() {
    let rt = runtime(&fixtures());
    let mut inv = Invocation::new("node-pid", "from test", Duration::from_secs(15));
    inv.headers
        .insert("x-test", HeaderValue::from_static("hdr"));
    let out = rt.invoke(inv).await.expect("node call");
    let text = String::from_utf8_lossy(out.body.full().expect("a whole body")).into_owned();
    assert!(out.cold_start);
    assert!(
        text.ends_with(" hdr from test"),
        "unexpected output {text:?}"
    );
    let (again, warm) = ok_text(&rt, "node-pid", "x").await;
    assert!(!warm.cold_start);
    assert_eq!(pid_of(&text), pid_of(&again));
}

#[tokio::test]
async fn binary_runs_per_call_with_a_cold_first_exec() {
    let cfg = geofaas_config::LocalBackend {
        functions_dir: "../functions".into(),
        functions: Some(vec!["echo-binary".into()]),
        ..fixtures()
    };
    let rt = runtime(&cfg);
    let (first, out1) = ok_text(&rt, "echo-binary", "abc").await;
    let (second, out2) = ok_text(&rt, "echo-binary", "def").await;
    assert_eq!((first.as_str(), second.as_str()), ("abc", "def"));
    assert!(out1.cold_start && !out2.cold_start);
    assert_eq!(
        rt.list().await.expect("list"),
        vec!["echo-binary".to_owned()]
    );
}

#[tokio::test]
async fn concurrent_calls_get_separate_workers_up_to_the_maximum() {
    let rt = runtime(&fixtures());
    let dir = tempfile::tempdir().expect("tempdir");
    let body = format!("{}:2", dir.path().display());
    let (a, b) = tokio::join!(
        ok_text(&rt, "rendezvous", &body),
        ok_text(&rt, "rendezvous", &body)
    );
    assert_ne!(
        pid_of(&a.0),
        pid_of(&b.0),
        "two calls ran at once on two workers"
    );
    let stats = rt.stats("rendezvous").expect("stats");
    assert_eq!((stats.idle, stats.busy), (2, 0));
}
