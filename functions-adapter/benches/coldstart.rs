//! The cold starts a user meets first, on a running embedded runtime: (a) the first call of a
//! function no one called yet, (b) `prepare(spec, true)` (what a deploy pays before it
//! switches), (c) the first call after the function's instances were evicted (`evict_idle`);
//! for python3 and nodejs. Every sample is a new function in a fresh temporary folder (and is
//! removed after), so nothing is cached per function. Not criterion: each sample changes the
//! state it measures, and what matters is the tail (P50, P99), not a mean.
//!
//! Run: `cargo bench -p geofaas-functions --bench coldstart`
//! (`bench/deploy/coldstart.sh` runs it on this tree and on an older one for a ratio.)
//!
//! Settings (environment): `COLDSTART_N` samples per case (default 100), `COLDSTART_PACE_MS`
//! pause before each sample (default 300: deploys and first calls arrive one at a time, and the
//! generic Node.js workers refill in the background), `COLDSTART_LABEL` (first column),
//! `COLDSTART_RUNTIMES` (default `python3,nodejs`), `COLDSTART_PY_IMPORTS` (comma-separated
//! modules the Python function imports, e.g. `http.client`: a function with dependencies;
//! default none), `GEOFAAS_PYTHON` / `GEOFAAS_NODE` (the interpreters; point them past slow
//! shims).
//! Prints one `| label | runtime | case | n | P50 | P99 | max |` row per case.

use std::path::Path;
use std::time::{Duration, Instant};

use geofaas_config::LocalBackend;
use geofaas_functions::local::{load_function, FunctionSpec, LocalRuntime};
use geofaas_functions::{FunctionBackend, Invocation};

const PYTHON_FN: &str = "def fn(input, headers):\n    return 'ok'\n";
const NODE_FN: &str = "module.exports = (req, res) => res.send('ok');\n";
const TIMEOUT: Duration = Duration::from_secs(10);

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Bench {
    rt: LocalRuntime,
    python_fn: String,
    src: tempfile::TempDir,
    next: usize,
    pace: Duration,
}

impl Bench {
    /// A new function of `runtime` ("python3" or "nodejs") in its own folder.
    fn function(&mut self, runtime: &str) -> FunctionSpec {
        self.next += 1;
        let name = format!("cold-{runtime}-{}", self.next);
        let dir = self.src.path().join(&name);
        std::fs::create_dir(&dir).expect("mkdir");
        let (file, text) = match runtime {
            "python3" => ("fn.py", self.python_fn.as_str()),
            _ => ("index.js", NODE_FN),
        };
        std::fs::write(dir.join(file), text).expect("write function");
        load_function(&name, &dir).expect("function folder")
    }

    async fn call(&self, name: &str) -> Duration {
        let started = Instant::now();
        let out = self
            .rt
            .invoke(Invocation::new(name, "", TIMEOUT))
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let took = started.elapsed();
        assert!(
            out.cold_start,
            "{name}: the measured call was not a cold start"
        );
        assert_eq!(&out.body.full().unwrap()[..], b"ok");
        took
    }

    /// (a) the first call of a function loaded without an instance.
    async fn first_call(&mut self, runtime: &str) -> Duration {
        let spec = self.function(runtime);
        let name = spec.name.clone();
        self.rt
            .activate(self.rt.prepare_cold(spec).expect("load"), None);
        tokio::time::sleep(self.pace).await;
        let took = self.call(&name).await;
        self.rt.remove(&name);
        took
    }

    /// (b) `prepare(spec, true)`, as a deploy calls it.
    async fn prepare(&mut self, runtime: &str) -> Duration {
        let spec = self.function(runtime);
        let name = spec.name.clone();
        tokio::time::sleep(self.pace).await;
        let started = Instant::now();
        let prepared = self.rt.prepare(spec, true).await.expect("prepare");
        let took = started.elapsed();
        self.rt.activate(prepared, None);
        self.rt.remove(&name);
        took
    }

    /// (c) the first call after the function's instances were evicted.
    async fn after_eviction(&mut self, runtime: &str) -> Duration {
        let spec = self.function(runtime);
        let name = spec.name.clone();
        self.rt
            .activate(self.rt.prepare_cold(spec).expect("load"), None);
        self.call(&name).await;
        tokio::time::sleep(self.pace).await;
        self.rt.evict_idle(Duration::ZERO);
        let took = self.call(&name).await;
        self.rt.remove(&name);
        took
    }
}

/// The `q` quantile of `samples` (hdrhistogram, microseconds, three significant digits).
fn percentile(samples: &[Duration], q: f64) -> Duration {
    let mut h = hdrhistogram::Histogram::<u64>::new(3).expect("histogram");
    for s in samples {
        h.saturating_record(s.as_micros() as u64);
    }
    Duration::from_micros(h.value_at_quantile(q))
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

async fn run() {
    let n = setting("COLDSTART_N", 100) as usize;
    let pace = Duration::from_millis(setting("COLDSTART_PACE_MS", 300));
    let label = std::env::var("COLDSTART_LABEL").unwrap_or_else(|_| "this tree".into());
    let served = tempfile::tempdir().expect("tempdir");
    let cfg = LocalBackend {
        functions_dir: served.path().to_path_buf(),
        ..LocalBackend::default()
    };
    let rt = LocalRuntime::new(&cfg, Path::new("/")).expect("runtime");
    let imports = std::env::var("COLDSTART_PY_IMPORTS").unwrap_or_default();
    let imports = imports.split(',').filter(|m| !m.is_empty());
    let python_fn: String = imports.map(|m| format!("import {m}\n")).collect();
    let runtimes = std::env::var("COLDSTART_RUNTIMES").unwrap_or_else(|_| "python3,nodejs".into());
    let mut bench = Bench {
        rt,
        python_fn: python_fn + PYTHON_FN,
        src: tempfile::tempdir().expect("tempdir"),
        next: 0,
        pace,
    };
    // What the runtime starts in the background is up before anything is measured.
    tokio::time::sleep(Duration::from_secs(2)).await;
    println!("| label | runtime | case | n | P50 | P99 | max |");
    println!("|---|---|---|---|---|---|---|");
    for runtime in runtimes.split(',') {
        // One unmeasured function of each case warms what is shared (page cache, the bench's
        // own code paths).
        bench.first_call(runtime).await;
        for case in [
            "first call",
            "prepare(spec, true)",
            "first call after evict_idle",
        ] {
            let mut samples = Vec::with_capacity(n);
            for _ in 0..n {
                let took = match case {
                    "first call" => bench.first_call(runtime).await,
                    "prepare(spec, true)" => bench.prepare(runtime).await,
                    _ => bench.after_eviction(runtime).await,
                };
                samples.push(took);
            }
            samples.sort();
            println!(
                "| {label} | {runtime} | {case} | {n} | {} | {} | {} |",
                ms(percentile(&samples, 0.5)),
                ms(percentile(&samples, 0.99)),
                ms(samples[samples.len() - 1]),
            );
        }
    }
    bench.rt.shutdown().await;
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(run());
}
