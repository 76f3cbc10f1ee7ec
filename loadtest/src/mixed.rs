//! `geofaas loadtest mixed`: many functions of different weights, Zipf-popular, called by
//! static clients spread over the edge areas, with cold starts.
//!
//! The run writes `--functions` generated Python functions into `<out>/functions` (each a
//! sieve of its own fixed size: ranks 1, 5, 9, ... count primes below 10 000, ranks 2, 6, ...
//! below 100 000, then 1 000 000 and 3 000 000, so every weight is among the popular and the
//! rare ones) and points every node's embedded runtime at them with `keep_alive_s =
//! --keep-alive-s`: a function called less often than that finds its instances evicted and pays a
//! cold start. Calls arrive open loop, Poisson at `--rate`; each picks a client uniformly and a
//! function by Zipf rank (`--zipf`), all from `--seed`. It needs `--spawn` (the nodes must run
//! the generated functions).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use geofaas_config::{BackendConfig, LatLon, Role, ServiceMap, Topology};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp};
use serde::Serialize;
use serde_json::json;

use crate::cli::{Ctx, MixedArgs};
use crate::client::{CallRequest, GeoClient};
use crate::mobility::print_result;
use crate::points::Point;
use crate::record::{write_csv, LatencyStats, Row, Summary};
use crate::runner::{run_open_requests, warm_every_node, Planned};
use crate::zipf::Zipf;

/// The sieve sizes of the generated functions, by rank modulo their number.
pub const SIEVE_LIMITS: [u64; 4] = [10_000, 100_000, 1_000_000, 3_000_000];

/// One generated function.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MixedFunction {
    /// Its name (`mix00`, `mix01`, ...; `mix00` the most popular).
    pub name: String,
    /// Popularity rank, from 1.
    pub rank: usize,
    /// It counts the primes below this.
    pub sieve_limit: u64,
    /// The probability that a call is of this function.
    pub probability: f64,
}

/// The catalogue: `n` functions with their Zipf probabilities at exponent `s`.
pub fn catalogue(zipf: &Zipf) -> Vec<MixedFunction> {
    (0..zipf.len())
        .map(|i| MixedFunction {
            name: format!("mix{i:02}"),
            rank: i + 1,
            sieve_limit: SIEVE_LIMITS[i % SIEVE_LIMITS.len()],
            probability: zipf.probability(i),
        })
        .collect()
}

/// Writes each function of `functions` as a tinyFaaS-format Python folder under `dir`. With
/// `init_ms > 0` each instance spends that many ms of CPU at its first call before it answers
/// (what loading a model or filling a cache costs at first use), so a new instance costs
/// more than a fork: the runtime's fork server imports a function once, but this work is per
/// instance.
pub fn write_functions(
    dir: &Path,
    functions: &[MixedFunction],
    init_ms: u64,
) -> anyhow::Result<()> {
    for f in functions {
        let folder = dir.join(&f.name);
        std::fs::create_dir_all(&folder)
            .with_context(|| format!("cannot create {}", folder.display()))?;
        let code = format!(
            "\"\"\"{name}: a generated function of `geofaas loadtest mixed` (rank {rank}): counts \
             the primes below {limit}.\"\"\"\n\nimport time\n\nLIMIT = {limit}\nINIT_MS = {init_ms}\n\
             _ready = False\n\n\ndef count_primes(limit):\n    \
             sieve = bytearray([1]) * limit\n    sieve[0:2] = b\"\\x00\\x00\"\n    \
             for i in range(2, int(limit**0.5) + 1):\n        if sieve[i]:\n            \
             sieve[i * i :: i] = bytes(len(range(i * i, limit, i)))\n    return sum(sieve)\n\n\n\
             def first_use():\n    \"\"\"INIT_MS ms of CPU, once per instance.\"\"\"\n    \
             end = time.process_time() + INIT_MS / 1000\n    while time.process_time() < end:\n        \
             pass\n\n\n\
             def fn(input, headers):\n    global _ready\n    if not _ready:\n        first_use()\n        \
             _ready = True\n    return f\"{name}: {{count_primes(LIMIT)}} primes under {{LIMIT}}\"\n",
            name = f.name,
            rank = f.rank,
            limit = f.sieve_limit,
        );
        let path = folder.join("fn.py");
        std::fs::write(&path, code).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

/// `topology` with every embedded runtime serving the functions in `dir` only, idle instances
/// evicted after `keep_alive_s`.
pub fn with_functions(mut topology: Topology, dir: &Path, keep_alive_s: u64) -> Topology {
    for node in &mut topology.nodes {
        for b in &mut node.backends {
            if let BackendConfig::Local(l) = b {
                l.functions_dir = dir.to_owned();
                l.functions = None;
                l.keep_alive_s = keep_alive_s;
            }
        }
    }
    topology
}

/// `per_edge` static client locations in each edge's area: drawn around the edge's location
/// (up to `radius_km`, the radius halving after every 200 misses), kept where the area lookup
/// gives that edge, named `<edge>-<i>`.
pub fn edge_clients(
    map: &ServiceMap,
    topology: &Topology,
    per_edge: usize,
    radius_km: f64,
    rng: &mut impl Rng,
) -> anyhow::Result<Vec<Point>> {
    let mut points = Vec::new();
    for node in topology.nodes.iter().filter(|n| n.role == Role::Edge) {
        let (mut r, mut misses, mut found) = (radius_km, 0, 0);
        while found < per_edge {
            anyhow::ensure!(
                misses < 2000,
                "no client location found in the area of {} within {radius_km} km of its location",
                node.id
            );
            let d = r * rng.gen::<f64>().sqrt();
            let bearing = rng.gen_range(0.0..std::f64::consts::TAU);
            let lat = node.location.lat + d / 111.2 * bearing.cos();
            let lon = node.location.lon
                + d / (111.2 * node.location.lat.to_radians().cos().max(0.01)) * bearing.sin();
            match LatLon::new(lat, lon) {
                Ok(p) if map.responsible(p).id == node.id => {
                    points.push(Point {
                        name: format!("{}-{found}", node.id),
                        location: p,
                    });
                    found += 1;
                }
                _ => {
                    misses += 1;
                    if misses % 200 == 0 {
                        r /= 2.0;
                    }
                }
            }
        }
    }
    anyhow::ensure!(
        !points.is_empty(),
        "the topology has no edge to place clients in"
    );
    Ok(points)
}

/// The calls: Poisson arrivals at `rate` per second, a uniform client and a Zipf function each.
pub fn plan(
    clients: &[Point],
    functions: &[MixedFunction],
    zipf: &Zipf,
    calls: u64,
    rate: f64,
    rng: &mut impl Rng,
) -> anyhow::Result<(Vec<Planned>, Vec<CallRequest>)> {
    let gap = Exp::new(rate)
        .ok()
        .filter(|_| rate.is_finite() && rate > 0.0)
        .ok_or_else(|| {
            anyhow::anyhow!("--rate {rate}: must be a number of calls per second > 0")
        })?;
    let (mut at, mut plan, mut requests) = (0.0, Vec::new(), Vec::new());
    for seq in 0..calls {
        let c = rng.gen_range(0..clients.len());
        let f = &functions[zipf.sample(rng)];
        plan.push(Planned {
            client: c,
            name: clients[c].name.clone(),
            round: 0,
            seq,
            offset: Duration::from_secs_f64(at),
            location: clients[c].location,
        });
        requests.push(CallRequest {
            function: f.name.clone(),
            location: Some(clients[c].location),
            ..Default::default()
        });
        at += gap.sample(rng);
    }
    Ok((plan, requests))
}

/// Per function: calls, answered calls, cold starts seen, latency.
fn per_function(functions: &[MixedFunction], rows: &[Row]) -> Vec<serde_json::Value> {
    functions
        .iter()
        .map(|f| {
            let mine: Vec<&Row> = rows.iter().filter(|r| r.function == f.name).collect();
            json!({
                "name": f.name,
                "rank": f.rank,
                "sieve_limit": f.sieve_limit,
                "probability": f.probability,
                "calls": mine.len(),
                "ok": mine.iter().filter(|r| r.ok()).count(),
                "cold_starts": mine.iter().filter(|r| r.cold_start == Some(true)).count(),
                "latency": LatencyStats::of(mine.iter().copied().filter(|r| r.ok())),
            })
        })
        .collect()
}

/// Generates the functions, starts the nodes on them, runs the calls and writes requests.csv
/// and summary.json.
pub async fn run(args: &MixedArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.common.spawn,
        "loadtest mixed needs --spawn: the nodes must run the functions it generates"
    );
    let zipf = Zipf::new(args.functions, args.zipf)?;
    anyhow::ensure!(
        args.clients_per_edge > 0,
        "--clients-per-edge 0: must be at least 1"
    );
    let functions = catalogue(&zipf);
    std::fs::create_dir_all(&args.common.out)
        .with_context(|| format!("cannot create {}", args.common.out.display()))?;
    let dir: PathBuf = std::path::absolute(args.common.out.join("functions"))?;
    write_functions(&dir, &functions, args.init_ms)?;
    let topology = with_functions(
        Topology::load(&args.common.topology)?,
        &dir,
        args.keep_alive_s,
    );
    let mut rng = ChaCha8Rng::seed_from_u64(args.seed);
    let map = topology.service_map()?;
    let clients = edge_clients(&map, &topology, args.clients_per_edge, 5.0, &mut rng)?;
    let (plan, requests) = plan(&clients, &functions, &zipf, args.calls, args.rate, &mut rng)?;
    let ctx = Ctx::setup_topology(&args.common, 30_000, topology).await?;
    let geo = clients
        .iter()
        .map(|p| GeoClient::new(&ctx.client_config(p.location)).map(Arc::new))
        .collect::<anyhow::Result<Vec<_>>>()?;
    if args.warm {
        let names: Vec<String> = functions.iter().map(|f| f.name.clone()).collect();
        warm_every_node(&ctx, &names).await?;
        let probe = ctx.topology.dns.probe_interval_ms.max(50);
        tokio::time::sleep(Duration::from_millis(2 * probe)).await;
    }
    let pb = ctx.progress(plan.len() as u64, "mixed");
    let started = Instant::now();
    let rows = run_open_requests(&geo, &plan, &requests, &pb, None).await;
    pb.finish_and_clear();
    write_csv(&ctx.out_file("requests.csv"), &rows)?;
    crate::scrape::save_metrics(&ctx).await?;
    let mut summary = Summary::of("mixed", &rows, started.elapsed().as_secs_f64());
    ctx.finish_summary(&mut summary, Some(args.rate));
    summary.function = format!(
        "{} generated functions ({}..)",
        functions.len(),
        functions[0].name
    );
    summary.load = format!(
        "open loop: Poisson arrivals at {} calls/s, each from a uniform client, Zipf({}) over the functions",
        args.rate, args.zipf
    );
    let cold = rows.iter().filter(|r| r.cold_start == Some(true)).count();
    let late = rows
        .iter()
        .filter(|r| !r.ok() || r.latency_ms > args.slo_ms)
        .count();
    summary.mode_results = json!({
        "functions": per_function(&functions, &rows),
        "zipf_exponent": args.zipf,
        "seed": args.seed,
        "rate": args.rate,
        "keep_alive_s": args.keep_alive_s,
        "init_ms": args.init_ms,
        "warmed_every_node_first": args.warm,
        "slo_ms": args.slo_ms,
        "slo_violations": late,
        "cold_starts": cold,
        "clients": clients.iter().map(|p| json!({"name": p.name, "lat": p.location.lat, "lon": p.location.lon})).collect::<Vec<_>>(),
    });
    summary.write(&ctx.out_file("summary.json"))?;
    print_result(&summary);
    println!(
        "{cold} cold starts, {late} calls over the {} ms SLO or failed",
        args.slo_ms
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lisbon() -> Topology {
        let text = r#"
zone = "lisbon.test."
[[node]]
id = "alfama"
role = "edge"
location = { lat = 38.711, lon = -9.13 }
area.circle = { center = { lat = 38.711, lon = -9.13 }, radius_km = 2 }
public_url = "https://127.0.0.1:1"
listen = "127.0.0.1:1"
[[node.backend]]
kind = "local"
[[node]]
id = "belem"
role = "edge"
location = { lat = 38.697, lon = -9.206 }
area.circle = { center = { lat = 38.697, lon = -9.206 }, radius_km = 2 }
public_url = "https://127.0.0.1:2"
listen = "127.0.0.1:2"
[[node.backend]]
kind = "local"
[[node]]
id = "cloud"
role = "cloud"
location = { lat = 50.11, lon = 8.68 }
area = "world"
public_url = "https://127.0.0.1:3"
listen = "127.0.0.1:3"
[[node.backend]]
kind = "local"
"#;
        Topology::parse(text, "lisbon.toml", Path::new(".")).unwrap()
    }

    #[test]
    fn clients_stand_in_their_edges_areas() {
        let t = lisbon();
        let map = t.service_map().unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let clients = edge_clients(&map, &t, 5, 5.0, &mut rng).unwrap();
        assert_eq!(clients.len(), 10);
        for c in &clients {
            let edge = c.name.rsplit_once('-').unwrap().0;
            assert_eq!(map.responsible(c.location).id, edge, "{c:?}");
        }
    }

    #[test]
    fn the_plan_follows_the_seed_and_the_popularity() {
        let t = lisbon();
        let map = t.service_map().unwrap();
        let zipf = Zipf::new(20, 1.0).unwrap();
        let functions = catalogue(&zipf);
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        let clients = edge_clients(&map, &t, 2, 5.0, &mut rng).unwrap();
        let draw = |seed| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            plan(&clients, &functions, &zipf, 2000, 50.0, &mut rng).unwrap()
        };
        let (p, r) = draw(4);
        assert_eq!((p.len(), r.len()), (2000, 2000));
        let names = |r: &[CallRequest]| {
            r.iter()
                .map(|q| (q.function.clone(), q.location))
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&r), names(&draw(4).1));
        let count = |name: &str| r.iter().filter(|q| q.function == name).count();
        // Rank 1 is called about 20 times as often as rank 20 at s = 1.
        assert!(
            count("mix00") > 5 * count("mix19").max(1),
            "{} {}",
            count("mix00"),
            count("mix19")
        );
        // Arrivals rise and average about 1/50 s apart.
        assert!(p.windows(2).all(|w| w[0].offset <= w[1].offset));
        let mean_gap = p.last().unwrap().offset.as_secs_f64() / 1999.0;
        assert!((mean_gap - 0.02).abs() < 0.002, "{mean_gap}");
        assert!(plan(&clients, &functions, &zipf, 1, 0.0, &mut rng).is_err());
    }

    #[test]
    fn generated_functions_cover_every_weight_and_every_runtime_serves_them() {
        let zipf = Zipf::new(8, 1.0).unwrap();
        let functions = catalogue(&zipf);
        let limits: Vec<u64> = functions.iter().map(|f| f.sieve_limit).collect();
        assert_eq!(limits, [SIEVE_LIMITS, SIEVE_LIMITS].concat());
        let dir = tempfile::tempdir().unwrap();
        write_functions(dir.path(), &functions, 40).unwrap();
        let code = std::fs::read_to_string(dir.path().join("mix02/fn.py")).unwrap();
        assert!(code.contains("LIMIT = 1000000\nINIT_MS = 40\n"), "{code}");
        let t = with_functions(lisbon(), dir.path(), 3);
        for n in &t.nodes {
            let BackendConfig::Local(l) = &n.backends[0] else {
                panic!("local")
            };
            assert_eq!((l.functions_dir.as_path(), l.keep_alive_s), (dir.path(), 3));
        }
    }
}
