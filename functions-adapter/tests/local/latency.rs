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
