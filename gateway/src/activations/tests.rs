//! The journal and its replay, without a node.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use bytes::Bytes;

use super::journal::Journal;
use super::saved::{Record, SavedAnswer, SavedCall, SavedError};
use super::*;

fn call(function: &str, body: &'static [u8]) -> Call {
    let mut headers = HeaderMap::new();
    headers.insert("x-custom", HeaderValue::from_static("Yes"));
    // Not text: kept byte for byte.
    headers.insert("x-raw", HeaderValue::from_bytes(b"\xff\xfe").unwrap());
    Call {
        function: function.to_owned(),
        http: Arc::new(geofaas_functions::HttpRequest {
            method: Method::PUT,
            path: "/users/7".into(),
            query: "a=1".into(),
            url: "https://h/fn/x/users/7?a=1".into(),
            source_ip: Some("10.0.0.1".parse().unwrap()),
        }),
        method: Method::PUT,
        path_and_query: format!("/fn/{function}/users/7?a=1"),
        headers,
        context: vec![(
            axum::http::HeaderName::from_static("x-geo-node"),
            HeaderValue::from_static("edge"),
        )]
        .into(),
        body: Bytes::from_static(body),
        location: Some(geofaas_config::LatLon {
            lat: 52.5,
            lon: 13.4,
        }),
        received: Instant::now(),
        route_time: Duration::ZERO,
        request_id: HeaderValue::from_static("req-1"),
        pinned: false,
        caller: 42,
    }
}

fn accepted_record(id: &str, function: &str) -> Record {
    Record::Accepted {
        id: id.into(),
        accepted_ms: now_ms(),
        owner: Some("app".into()),
        key: Some((format!("{function}\nk-{id}"), 7)),
        call: SavedCall::of(&call(function, b"\x00binary body\xff")),
        callback: None,
    }
}

fn finished_record(id: &str, dead: bool, keep_for: Duration) -> Record {
    let stored = Stored {
        status: StatusCode::CREATED,
        headers: vec![(
            axum::http::header::SET_COOKIE,
            HeaderValue::from_static("a=1"),
        )],
        body: Bytes::from_static(b"made"),
        request: 0,
    };
    Record::Finished {
        id: id.into(),
        function: "f".into(),
        owner: None,
        accepted_ms: now_ms(),
        finished_ms: now_ms(),
        keep_until_ms: now_ms() + keep_for.as_millis() as u64,
        answer: SavedAnswer::of(&stored),
        attempts: vec![SavedError {
            at_ms: now_ms(),
            status: 503,
            code: "overloaded".into(),
            message: "no backend".into(),
        }],
        call: dead.then(|| SavedCall::of(&call("f", b"x"))),
        callback: None,
    }
}

#[test]
fn a_saved_call_comes_back_byte_for_byte() {
    let original = call("f", b"\x00binary body\xff");
    let saved = SavedCall::of(&original);
    let text = serde_json::to_string(&saved).unwrap();
    let back: SavedCall = serde_json::from_str(&text).unwrap();
    let c = back.to_call().unwrap();
    assert_eq!(c.body, original.body);
    assert_eq!(c.method, Method::PUT);
    assert_eq!(c.http.path, "/users/7");
    assert_eq!(c.http.query, "a=1");
    assert_eq!(c.http.source_ip, original.http.source_ip);
    assert_eq!(c.headers["x-custom"], "Yes");
    assert_eq!(c.headers["x-raw"].as_bytes(), b"\xff\xfe");
    assert_eq!(c.context[0].1, "edge");
    assert_eq!(c.request_id, "req-1");
    assert_eq!((c.caller, c.pinned), (42, false));
    assert_eq!(c.location, original.location);
}

#[tokio::test]
async fn records_are_read_back_in_order_after_a_restart_and_a_torn_line_is_skipped() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (journal, old) = Journal::open(dir.path()).unwrap();
        assert!(old.is_empty());
        journal
            .write_synced(&accepted_record("a", "f"))
            .await
            .unwrap();
        journal
            .write_synced(&Record::Attempt {
                id: "a".into(),
                error: SavedError {
                    at_ms: 1,
                    status: 504,
                    code: "timeout".into(),
                    message: "slow".into(),
                },
            })
            .await
            .unwrap();
        journal
            .write_synced(&finished_record("b", false, Duration::from_secs(60)))
            .await
            .unwrap();
    }
    // A crash cut the last write short.
    let seg = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "log"))
        .unwrap();
    let mut text = std::fs::read(&seg).unwrap();
    text.extend_from_slice(b"{\"record\":\"accepted\",\"id\":\"c");
    std::fs::write(&seg, text).unwrap();

    let (_journal, records) = Journal::open(dir.path()).unwrap();
    let kinds: Vec<&str> = records
        .iter()
        .map(|r| match r {
            Record::Accepted { .. } => "accepted",
            Record::Attempt { .. } => "attempt",
            Record::Finished { .. } => "finished",
            Record::Delivered { .. } => "delivered",
        })
        .collect();
    assert_eq!(kinds, ["accepted", "attempt", "finished"]);
}

#[tokio::test]
async fn a_second_writer_on_the_same_folder_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (_first, _) = Journal::open(dir.path()).unwrap();
    let err = Journal::open(dir.path()).unwrap_err();
    assert!(err.to_string().contains("another process"), "{err}");
}

#[tokio::test]
async fn concurrent_writes_are_committed_together_and_all_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let (journal, _) = Journal::open(dir.path()).unwrap();
    let journal = Arc::new(journal);
    let writes = (0..200).map(|i| {
        let j = journal.clone();
        tokio::spawn(async move {
            j.write_synced(&accepted_record(&format!("id{i}"), "f"))
                .await
        })
    });
    for w in futures::future::join_all(writes).await {
        w.unwrap().unwrap();
    }
    drop(journal);
    let (_j, records) = Journal::open(dir.path()).unwrap();
    assert_eq!(records.len(), 200);
}

#[tokio::test]
async fn replay_runs_the_unfinished_and_keeps_answers_and_dead_letters() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (journal, _) = Journal::open(dir.path()).unwrap();
        for r in [
            accepted_record("pending", "f"),
            accepted_record("done", "f"),
            finished_record("done", false, Duration::from_secs(60)),
            accepted_record("dead", "f"),
            finished_record("dead", true, Duration::from_secs(60)),
            accepted_record("expired", "f"),
            finished_record("expired", false, Duration::ZERO),
        ] {
            journal.write_synced(&r).await.unwrap();
        }
    }
    let a = Activations::open(dir.path()).unwrap();
    let recovered: Vec<String> = a
        .recovered
        .lock()
        .iter()
        .map(|(id, _)| id.clone())
        .collect();
    assert_eq!(recovered, ["pending"]);
    let done = a.get("done", None, true).await.unwrap();
    assert_eq!(done.status(), StatusCode::CREATED);
    assert_eq!(done.headers()["set-cookie"], "a=1");
    let failed = a.list(true);
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["id"], "dead");
    assert_eq!(failed[0]["status"], "failed");
    assert_eq!(a.show("dead").unwrap()["attempts"][0]["code"], "overloaded");
    assert_eq!(a.get("expired", None, true).await.unwrap_err().status, 404);
    // The pending call's owner still hides it from other keys.
    assert_eq!(
        a.get("pending", Some("web"), false)
            .await
            .unwrap_err()
            .status,
        404
    );
    assert_eq!(
        a.get("pending", Some("app"), false).await.unwrap().status(),
        202
    );
}

#[test]
fn only_failures_of_the_failover_classes_are_tried_again() {
    let e = |status, code| ApiError::new(status, code, "x");
    assert!(retryable(
        &e(StatusCode::SERVICE_UNAVAILABLE, "overloaded"),
        false
    ));
    assert!(retryable(&e(StatusCode::GATEWAY_TIMEOUT, "timeout"), false));
    assert!(retryable(
        &e(StatusCode::BAD_GATEWAY, "backend_failed"),
        false
    ));
    assert!(!retryable(
        &e(StatusCode::BAD_GATEWAY, "function_failed"),
        false
    ));
    assert!(retryable(
        &e(StatusCode::BAD_GATEWAY, "function_failed"),
        true
    ));
    assert!(!retryable(
        &e(StatusCode::NOT_FOUND, "unknown_function"),
        true
    ));
    assert!(!retryable(
        &e(StatusCode::BAD_REQUEST, "not_supported"),
        true
    ));
}
