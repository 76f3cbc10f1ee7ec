//! HTTP functions on the embedded runtime: a streamed body arrives chunk by chunk as the
//! function produces it (a Node.js `ReadableStream`, a Python generator), the instance is free
//! again after the stream's end, and a stream dropped half-way stops its instance.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use geofaas_functions::{FunctionBackend, HttpRequest, Invocation, Payload};

use super::{fixtures, runtime};

fn get(function: &str) -> Invocation {
    let mut call = Invocation::new(function, "", Duration::from_secs(15));
    call.http = Arc::new(HttpRequest {
        method: http::Method::GET,
        url: format!("https://localhost/fn/{function}"),
        ..HttpRequest::default()
    });
    call
}

/// Each chunk of `payload` with the time it arrived after `started`.
async fn chunks(payload: Payload, started: Instant) -> Vec<(Duration, String)> {
    let Payload::Stream(mut s) = payload else {
        panic!("a whole body where a stream was expected");
    };
    let mut out = Vec::new();
    while let Some(chunk) = s.next().await {
        let chunk = chunk.unwrap_or_else(|e| panic!("the stream failed after {out:?}: {e}"));
        out.push((
            started.elapsed(),
            String::from_utf8_lossy(&chunk).into_owned(),
        ));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_bodies_arrive_as_they_are_produced_and_free_their_instance() {
    let rt = runtime(&fixtures());
    for function in ["http_ticker", "http_pyticks"] {
        for round in 0..2 {
            let started = Instant::now();
            let out = rt.invoke(get(function)).await.unwrap();
            assert_eq!(out.status, 200);
            let got = chunks(out.body, started).await;
            assert_eq!(got.len(), 5, "{function} round {round}: {got:?}");
            assert!(got[0].1.starts_with("data: {\"n\":0"), "{got:?}");
            // Four pauses of 300 ms between the first event and the last.
            assert!(
                got[4].0 - got[0].0 >= Duration::from_millis(1000),
                "{got:?}"
            );
            let stats = rt.stats(function).unwrap();
            assert_eq!(
                stats.busy, 0,
                "{function}: the instance is free after the stream"
            );
        }
        assert_eq!(
            rt.stats(function).unwrap().idle,
            1,
            "{function}: one instance served both"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_dropped_half_way_stops_its_instance() {
    let rt = runtime(&fixtures());
    let out = rt.invoke(get("http_pyticks")).await.unwrap();
    let Payload::Stream(mut s) = out.body else {
        panic!("a whole body where a stream was expected");
    };
    assert!(s.next().await.unwrap().is_ok());
    drop(s);
    // The instance was in the middle of its call: it is gone, and the next call starts one.
    let next = rt.invoke(get("http_pyticks")).await.unwrap();
    assert!(next.cold_start, "the next call started a new instance");
    assert_eq!(chunks(next.body, Instant::now()).await.len(), 5);
}
