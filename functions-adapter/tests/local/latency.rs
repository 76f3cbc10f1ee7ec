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

/// P50 and P99 of `samples`.
fn percentiles(mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    (at(0.5), at(0.99))
}

#[tokio::test]
#[ignore = "measurement, prints numbers; run on demand in release mode"]
async fn new_instance_cold_start_percentiles() {
    const N: usize = 200;
    let timeout = Duration::from_secs(10);
    for (function, fork_server) in [("sieve", true), ("sieve", false), ("hello-node", true)] {
        let cfg = LocalBackend {
            functions_dir: PathBuf::from("../functions"),
            functions: Some(vec![function.into()]),
            fork_server,
            ..LocalBackend::default()
        };
        let rt = runtime(&cfg);
        // The first instance starts the interpreter (and, with it, the fork server).
        call_with(&rt, function, "", ContainerChoice::New, timeout)
            .await
            .expect("first call");
        let (mut cold, mut first_call) = (Vec::new(), Vec::new());
        for _ in 0..N {
            let t = Instant::now();
            let out = call_with(&rt, function, "", ContainerChoice::New, timeout)
                .await
                .expect("cold call");
            assert!(out.cold_start);
            cold.push(out.cold);
            first_call.push(t.elapsed());
        }
        let (c50, c99) = percentiles(cold);
        let (w50, w99) = percentiles(first_call);
        println!(
            "{function} fork_server={fork_server}: {N} new instances, start P50 {:.2} ms P99 {:.2} ms; \
             first call served P50 {:.2} ms P99 {:.2} ms",
            c50.as_secs_f64() * 1e3,
            c99.as_secs_f64() * 1e3,
            w50.as_secs_f64() * 1e3,
            w99.as_secs_f64() * 1e3
        );
    }
}
