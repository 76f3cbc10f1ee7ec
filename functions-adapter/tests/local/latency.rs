//! A quick latency measurement of `sieve` (not a pass/fail test: ignored by default).
//!
//! Run: `cargo nextest run -p geofaas-functions --release --test local --run-ignored only
//! latency --no-capture`

use std::path::PathBuf;
use std::time::{Duration, Instant};

use geofaas_config::LocalBackend;
use geofaas_functions::ContainerChoice;

use crate::{call_with, runtime};

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples.get(samples.len() / 2).copied().unwrap_or_default()
}

#[tokio::test]
#[ignore = "measurement, prints numbers; run on demand in release mode"]
async fn sieve_cold_and_warm_latency() {
    let cfg = LocalBackend {
        functions_dir: PathBuf::from("../functions"),
        functions: Some(vec!["sieve".into()]),
        ..LocalBackend::default()
    };
    let rt = runtime(&cfg);
    let timeout = Duration::from_secs(10);
    let (mut cold_wall, mut cold_start, mut warm_wall, mut warm_exec) =
        (vec![], vec![], vec![], vec![]);
    for _ in 0..20 {
        let t = Instant::now();
        let out = call_with(&rt, "sieve", "", ContainerChoice::New, timeout)
            .await
            .expect("cold call");
        cold_wall.push(t.elapsed());
        assert!(out.cold_start);
        cold_start.push(out.cold);
        for _ in 0..20 {
            let t = Instant::now();
            let out = call_with(&rt, "sieve", "", ContainerChoice::Reuse, timeout)
                .await
                .expect("warm call");
            warm_wall.push(t.elapsed());
            assert!(!out.cold_start);
            warm_exec.push(out.exec);
        }
    }
    println!(
        "sieve: cold call median {:?} (reported cold start {:?}) over {} runs; warm call median {:?} (reported exec {:?}) over {} runs",
        median(cold_wall.clone()),
        median(cold_start),
        cold_wall.len(),
        median(warm_wall.clone()),
        median(warm_exec),
        warm_wall.len()
    );
}

/// P50 and P99 of `samples` (hdrhistogram, microseconds, three significant digits).
fn percentiles(samples: Vec<Duration>) -> (Duration, Duration) {
    let mut h = hdrhistogram::Histogram::<u64>::new(3).expect("histogram");
    for s in &samples {
        h.saturating_record(s.as_micros() as u64);
    }
    let at = |q: f64| Duration::from_micros(h.value_at_quantile(q));
    (at(0.5), at(0.99))
}

/// One configuration of the new-instance measurement.
struct Case {
    function: &'static str,
    fork_server: bool,
    node_spares: usize,
    /// Time from one new instance to the next; `None`: back to back.
    pace: Option<Duration>,
}

const fn case(function: &'static str, fork_server: bool, node_spares: usize) -> Case {
    Case {
        function,
        fork_server,
        node_spares,
        pace: None,
    }
}

/// New instances, back to back and paced: python3 with and without the zygote (`fork_server`),
/// nodejs without generic workers (node started per instance) and with one or two (the
/// default). Back to back, a new Node instance is asked for faster than one filler can start
/// node, so most wait for the worker being started; paced slower than node starts, each finds a
/// ready one. The first call of a new function is measured by `benches/coldstart.rs`.
///
/// Run: `cargo nextest run -p geofaas-functions --release --test local --run-ignored only
/// new_instance --no-capture`
#[tokio::test]
#[ignore = "measurement, prints numbers; run on demand in release mode"]
async fn new_instance_cold_start_percentiles() {
    const N: usize = 200;
    let paced = Some(Duration::from_millis(250));
    let cases = [
        case("sieve", true, 0),
        case("sieve", false, 0),
        case("hello-node", true, 0),
        case("hello-node", true, 1),
        Case {
            pace: paced,
            ..case("hello-node", true, 1)
        },
        case("hello-node", true, 2),
        Case {
            pace: paced,
            ..case("hello-node", true, 2)
        },
        Case {
            pace: Some(Duration::from_millis(125)),
            ..case("hello-node", true, 2)
        },
    ];
    for c in cases {
        measure(&c, N).await;
    }
}

async fn measure(c: &Case, n: usize) {
    let timeout = Duration::from_secs(10);
    let cfg = LocalBackend {
        functions_dir: PathBuf::from("../functions"),
        functions: Some(vec![c.function.into()]),
        fork_server: c.fork_server,
        node_spares: c.node_spares,
        ..LocalBackend::default()
    };
    let rt = runtime(&cfg);
    // The first instance forks the version's fork server (or takes a generic worker).
    call_with(&rt, c.function, "", ContainerChoice::New, timeout)
        .await
        .expect("first call");
    for _ in 0..1000 {
        if rt.spare_pids(c.function).len() >= c.node_spares {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut tick = tokio::time::interval(c.pace.unwrap_or(Duration::from_millis(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (mut cold, mut first_call) = (Vec::new(), Vec::new());
    for _ in 0..n {
        if c.pace.is_some() {
            tick.tick().await;
        }
        let t = Instant::now();
        let out = call_with(&rt, c.function, "", ContainerChoice::New, timeout)
            .await
            .expect("cold call");
        assert!(out.cold_start);
        cold.push(out.cold);
        first_call.push(t.elapsed());
    }
    let under_10ms = cold.iter().filter(|d| d.as_millis() < 10).count();
    let (c50, c99) = percentiles(cold);
    let (w50, w99) = percentiles(first_call);
    let pace = c
        .pace
        .map_or("back to back".to_owned(), |p| format!("one per {p:?}"));
    println!(
        "{} fork_server={} node_spares={} ({pace}): {n} new instances, start P50 {:.2} ms P99 {:.2} ms \
         ({under_10ms} under 10 ms); first call served P50 {:.2} ms P99 {:.2} ms",
        c.function,
        c.fork_server,
        c.node_spares,
        c50.as_secs_f64() * 1e3,
        c99.as_secs_f64() * 1e3,
        w50.as_secs_f64() * 1e3,
        w99.as_secs_f64() * 1e3
    );
    rt.shutdown().await;
}
