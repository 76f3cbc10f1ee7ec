//! Measured profiles: what a live node learned of its functions and of its links to the other
//! nodes, in the JSON a node serves at `GET /node/profiles` (and `geofaas loadtest` can save).
//! The simulator reads such a file (`simulate --profiles FILE`) and replaces the model's
//! figures of the functions it names with the measured ones, so that a policy is trained and
//! evaluated on the system it runs in.
//!
//! A function's measured warm time becomes its CPU time at the reference clock (scaled by the
//! measuring node's clock), its cold start the init time with no image to pull; its memory is
//! what the node measured of its instances (the configured size until it had samples); its CPU
//! time comes from the backend's execution time where that is shorter than the warm time (see
//! [`MeasuredFunction::service_ms`]). A link's round trip (of the probes where the file has
//! them) becomes the access delay of the node at its far end, less the propagation
//! the model adds: the simulator charges a request's way to its node once, while live the
//! answer comes back over the same link, so the whole round trip is what a placement there
//! costs. Functions the file names and the topology does not are added with the default
//! profile, calibrated.
//!
//! The load, too, comes from the file: the rate at which each function's calls arrived at the
//! measuring node becomes the workload's mix and rate, from sources in that node's area, and
//! the CPUs the node's process could run on become its cores. So a file captured under a live
//! workload gives the simulator that workload, not the topology's default trace. Several
//! files (one per node of a fleet) give each node its measured cores; the first one's node is
//! the one whose functions, links and load calibrate the rest ([`calibrate_fleet`]).

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::model::{FunctionProfile, LinkModel, REF_GHZ};
use crate::topology::Topology;
use crate::{Result, SchedulerError};

/// One node's measured profiles.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MeasuredProfiles {
    /// The node that measured them.
    pub node: String,
    /// When, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// Per function name.
    pub functions: BTreeMap<String, MeasuredFunction>,
    /// Round trip in ms from the measuring node to each other node (by id): what a call
    /// forwarded there took beyond that node's own account, else its probes.
    #[serde(default)]
    pub links: BTreeMap<String, f64>,
    /// Round trip in ms of the probes and load reports to each other node alone: the network,
    /// without the waits of forwarded calls at an overloaded node that its `Server-Timing`
    /// does not show. The simulator prefers it; absent in older files.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub probes: BTreeMap<String, f64>,
    /// CPUs the measuring node's process may run on (its affinity mask and CPU quota);
    /// absent in files from before it was measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cores: Option<f64>,
}

/// What a node measured of one function.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MeasuredFunction {
    /// Calls measured.
    pub calls: u64,
    /// Time of a warm call, from its arrival at the node to its answer, in ms.
    pub warm_ms: f64,
    /// Extra time of a call that started a new instance, in ms; `None` when none was seen.
    #[serde(default)]
    pub cold_ms: Option<f64>,
    /// Memory of one instance in MB: the median of the measured samples
    /// (`memory_samples`), the configured size while there are none.
    pub memory_mb: f64,
    /// Memory samples behind `memory_mb` (0: it is the configured size).
    #[serde(default)]
    pub memory_samples: u64,
    /// Calls of it per second that arrived at the node, over its recent calls (served here
    /// or sent on); absent in files from before it was measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_per_s: Option<f64>,
    /// The same per backend kind (`local`, `tinyfaas`, ...), as the backends reported them.
    #[serde(default)]
    pub backends: BTreeMap<String, MeasuredBackend>,
}

/// What one backend reported of a function's calls.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MeasuredBackend {
    /// Calls it answered.
    pub calls: u64,
    /// Calls that started a new instance.
    pub cold_starts: u64,
    /// Mean execution time it reported, in ms.
    pub exec_ms: f64,
    /// Mean time it took to start a new instance, in ms (`None`: none started).
    #[serde(default)]
    pub cold_ms: Option<f64>,
}

impl MeasuredProfiles {
    /// Reads and checks a profiles file; errors name the file, the field and the value.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| SchedulerError::io(path, e))?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parses and checks the JSON `text` (`source` names it in errors).
    pub fn parse(text: &str, source: &str) -> Result<Self> {
        let bad = |message: String| SchedulerError::Parse {
            what: format!("measured profiles {source}"),
            message,
        };
        let p: Self = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
        p.validate().map_err(bad)?;
        Ok(p)
    }

    fn validate(&self) -> std::result::Result<(), String> {
        let check = |field: String, v: f64| {
            if v.is_finite() && v >= 0.0 {
                Ok(())
            } else {
                Err(format!("{field} = {v}: must be a finite number >= 0"))
            }
        };
        for (name, f) in &self.functions {
            check(format!("functions.{name}.warm_ms"), f.warm_ms)?;
            check(format!("functions.{name}.memory_mb"), f.memory_mb)?;
            if let Some(c) = f.cold_ms {
                check(format!("functions.{name}.cold_ms"), c)?;
            }
            if let Some(r) = f.rate_per_s {
                check(format!("functions.{name}.rate_per_s"), r)?;
            }
        }
        if let Some(c) = self.cores {
            if !(c.is_finite() && c > 0.0) {
                return Err(format!("cores = {c}: must be a finite number > 0"));
            }
        }
        for (node, rtt) in &self.links {
            check(format!("links.{node}"), *rtt)?;
        }
        for (node, rtt) in &self.probes {
            check(format!("probes.{node}"), *rtt)?;
        }
        Ok(())
    }

    /// `base` with the measured figures of `name` when this file has any: CPU time from the
    /// warm time (measured on a node clocked at `ghz`), no image, the measured cold start as
    /// init time (the base's cold start when none was seen), the measured memory.
    pub fn calibrate(&self, name: &str, base: &FunctionProfile, ghz: f64) -> FunctionProfile {
        let Some(m) = self.functions.get(name).filter(|m| m.calls > 0) else {
            return base.clone();
        };
        let cold = m
            .cold_ms
            .unwrap_or_else(|| crate::model::cold_start_ms(base, 1000.0));
        FunctionProfile {
            cpu_ms: m.service_ms() * base.cores * ghz / REF_GHZ,
            image_mb: 0.0,
            init_ms: cold,
            memory_mb: if m.memory_mb > 0.0 {
                m.memory_mb
            } else {
                base.memory_mb
            },
            ..base.clone()
        }
    }
}

impl MeasuredFunction {
    /// What one call costs the instance that runs it, in ms: the execution time the backend
    /// that answered most calls reported, when it is below the warm time, else the warm time.
    /// Under load a warm call's time at the node also holds its wait for a busy instance
    /// (the local pool's queue is not the node's admission queue), which the simulator models
    /// itself; the node's own handling (well under a millisecond) is left out with it.
    pub fn service_ms(&self) -> f64 {
        self.backends
            .values()
            .filter(|b| b.calls > 0 && b.exec_ms > 0.0)
            .max_by_key(|b| b.calls)
            .map_or(self.warm_ms, |b| b.exec_ms.min(self.warm_ms))
    }
}

impl MeasuredProfiles {
    /// Calibrates `topo` to these figures: the measuring node's functions (see
    /// [`MeasuredProfiles::calibrate`]) and the access delays of the nodes it measured links to.
    pub fn calibrate_topology(&self, topo: &mut Topology, link: &LinkModel) -> Result<()> {
        let at = self.node_index(topo)?;
        let here = topo.nodes[at];
        let mut functions = topo.functions.take().unwrap_or_default();
        for (name, p) in &mut functions {
            *p = self.calibrate(name, p, here.ghz);
        }
        for name in self.functions.keys() {
            if !functions.iter().any(|(n, _)| n == name) {
                let base = FunctionProfile::from(&geofaas_config::FunctionConfig::named(name));
                functions.push((name.clone(), self.calibrate(name, &base, here.ghz)));
            }
        }
        topo.functions = (!functions.is_empty()).then_some(functions);
        // Per node its probes' round trip, else the link's.
        let mut links = self.links.clone();
        links.extend(self.probes.iter().map(|(id, ms)| (id.clone(), *ms)));
        for (id, rtt) in &links {
            let Some(j) = topo.ids.iter().position(|n| n == id).filter(|j| *j != at) else {
                continue;
            };
            let dist = here.location.distance_km(&topo.nodes[j].location);
            topo.nodes[j].access_ms = (rtt - dist / link.km_per_ms).max(0.0);
        }
        self.calibrate_load(topo, at);
        self.calibrate_cores(topo)
    }

    /// The measured arrival rates as the topology's workload: mix, total rate, and sources
    /// around node `at` (where those calls came in). Nothing changes without rates.
    fn calibrate_load(&self, topo: &mut Topology, at: usize) {
        let Some(functions) = &topo.functions else {
            return;
        };
        let rates: Vec<f64> = functions
            .iter()
            .map(|(name, _)| {
                self.functions
                    .get(name)
                    .and_then(|m| m.rate_per_s)
                    .unwrap_or(0.0)
            })
            .collect();
        let total: f64 = rates.iter().sum();
        if total <= 0.0 {
            return;
        }
        topo.popularity = Some(rates);
        topo.defaults.rate = total;
        topo.sources = crate::topology::ring_sources(&topo.nodes[at..=at], 6.0, 8);
    }

    /// The measuring node's cores, when the file has them.
    fn calibrate_cores(&self, topo: &mut Topology) -> Result<()> {
        let at = self.node_index(topo)?;
        if let Some(c) = self.cores {
            topo.nodes[at].cores = c;
        }
        Ok(())
    }

    fn node_index(&self, topo: &Topology) -> Result<usize> {
        topo.ids
            .iter()
            .position(|id| *id == self.node)
            .ok_or_else(|| {
                SchedulerError::Invalid(format!(
                    "measured profiles: node = {:?} is not a node of topology {} ({})",
                    self.node,
                    topo.name,
                    topo.ids.join(", ")
                ))
            })
    }
}

/// Calibrates `topo` to a fleet's files: the first file's node gives the functions, links and
/// load ([`MeasuredProfiles::calibrate_topology`]), every file its own node's cores.
pub fn calibrate_fleet(
    files: &[MeasuredProfiles],
    topo: &mut Topology,
    link: &LinkModel,
) -> Result<()> {
    let Some((first, rest)) = files.split_first() else {
        return Ok(());
    };
    first.calibrate_topology(topo, link)?;
    for f in rest {
        f.calibrate_cores(topo)?;
    }
    // A function whose memory the first node could not measure (say, every instance there
    // was stopped at its deadline before it went idle) takes another node's measured figure.
    if let Some(functions) = &mut topo.functions {
        for (name, p) in functions.iter_mut() {
            let measured_first = first
                .functions
                .get(name)
                .is_some_and(|m| m.memory_samples > 0);
            let other = rest
                .iter()
                .filter_map(|f| f.functions.get(name))
                .find(|m| m.memory_samples > 0 && m.memory_mb > 0.0);
            if let (false, Some(m)) = (measured_first, other) {
                p.memory_mb = m.memory_mb;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"{
      "node": "tu-berlin", "at_ms": 1,
      "functions": {
        "fast": {"calls": 40, "warm_ms": 2.0, "cold_ms": 9.0, "memory_mb": 16,
                 "backends": {"local": {"calls": 40, "cold_starts": 1, "exec_ms": 1.5, "cold_ms": 8.0}}},
        "slow": {"calls": 40, "warm_ms": 200.0, "memory_mb": 64}
      },
      "links": {"potsdam": 5.5, "cloud": 26.0}
    }"#;

    #[test]
    fn a_profiles_file_calibrates_the_functions_it_names() {
        let p = MeasuredProfiles::parse(FILE, "test.json").unwrap();
        let base = FunctionProfile {
            cpu_ms: 1000.0,
            cores: 1.0,
            memory_mb: 512.0,
            image_mb: 50.0,
            init_ms: 300.0,
            input_kb: 1.0,
            slo_ms: 300.0,
        };
        let fast = p.calibrate("fast", &base, REF_GHZ);
        // The backend ran it in 1.5 of the node's 2.0 ms: the instance's cost is 1.5.
        assert_eq!(fast.cpu_ms, 1.5);
        assert_eq!(crate::model::cold_start_ms(&fast, 100.0), 9.0);
        assert_eq!(fast.memory_mb, 16.0);
        // No cold start seen: the model's (base image at 1 Gbit/s plus init) stays.
        let slow = p.calibrate("slow", &base, 2.0 * REF_GHZ);
        assert_eq!(slow.cpu_ms, 400.0);
        assert_eq!(slow.init_ms, 700.0);
        assert_eq!(p.calibrate("other", &base, REF_GHZ), base);
        assert_eq!(p.links["cloud"], 26.0);
    }

    #[test]
    fn bad_figures_are_refused_with_the_field_and_value() {
        let bad = FILE.replace("\"warm_ms\": 200.0", "\"warm_ms\": -1");
        let e = MeasuredProfiles::parse(&bad, "bad.json")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("bad.json") && e.contains("functions.slow.warm_ms = -1"),
            "{e}"
        );
        let e = MeasuredProfiles::parse("{\"node\": 1}", "x.json")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("x.json") && e.contains("expected a string"),
            "{e}"
        );
    }
}

#[cfg(test)]
mod topology_tests {
    use super::*;

    /// This crate's folder, as cargo or nextest set it when running the test (not where the
    /// binary was compiled: a shared target dir reuses it from another clone).
    fn crate_dir() -> std::path::PathBuf {
        std::env::var_os("CARGO_MANIFEST_DIR")
            .expect("set by cargo")
            .into()
    }

    fn small_edge() -> Topology {
        let file = crate_dir().join("../examples/berlin-small-edge.toml");
        Topology::load_config(&file).unwrap()
    }

    #[test]
    fn the_measured_load_and_cores_become_the_workload_and_capacities() {
        let potsdam = MeasuredProfiles::parse(
            r#"{"node": "potsdam", "at_ms": 1, "cores": 1,
                "functions": {
                  "sievehard": {"calls": 60, "warm_ms": 90.0, "cold_ms": 20.0, "memory_mb": 9.5,
                                "memory_samples": 12, "rate_per_s": 12.0},
                  "echo": {"calls": 5, "warm_ms": 0.5, "memory_mb": 16, "rate_per_s": 4.0}
                },
                "links": {"tu-berlin": 6.0, "cloud": 6000.0}, "probes": {"cloud": 27.0}}"#,
            "potsdam.json",
        )
        .unwrap();
        let tu = MeasuredProfiles::parse(
            r#"{"node": "tu-berlin", "at_ms": 1, "cores": 2, "functions": {
                  "echo": {"calls": 9, "warm_ms": 0.4, "memory_mb": 5.5, "memory_samples": 4},
                  "sievehard": {"calls": 9, "warm_ms": 80.0, "memory_mb": 30, "memory_samples": 4}}}"#,
            "tu.json",
        )
        .unwrap();
        let mut topo = small_edge();
        let link = LinkModel::default();
        calibrate_fleet(&[potsdam, tu], &mut topo, &link).unwrap();
        let at = |id: &str| topo.ids.iter().position(|n| n == id).unwrap();
        assert_eq!(topo.nodes[at("potsdam")].cores, 1.0);
        assert_eq!(topo.nodes[at("tu-berlin")].cores, 2.0);
        assert_eq!(
            topo.nodes[at("cloud")].cores,
            64.0,
            "no file: the topology's"
        );
        assert_eq!(topo.defaults.rate, 16.0);
        // The cloud 27 ms away by its probes (not the 6 s its forwarded calls waited), the
        // other edge 6 ms by the only figure there is.
        let rtt = |id: &str| {
            let dist = topo.nodes[at("potsdam")]
                .location
                .distance_km(&topo.nodes[at(id)].location);
            crate::model::comm_ms(&link, 0.0, dist, topo.nodes[at(id)].access_ms)
        };
        assert!((rtt("cloud") - 27.0).abs() < 1e-9, "{}", rtt("cloud"));
        assert!(
            (rtt("tu-berlin") - 6.0).abs() < 1e-9,
            "{}",
            rtt("tu-berlin")
        );
        let names: Vec<&str> = topo
            .functions
            .as_ref()
            .unwrap()
            .iter()
            .map(|(n, _)| n.as_str())
            .collect();
        let mix = topo.popularity.clone().unwrap();
        let rate = |n: &str| mix[names.iter().position(|x| *x == n).unwrap()];
        assert_eq!(
            (rate("sievehard"), rate("echo"), rate("sieve")),
            (12.0, 4.0, 0.0)
        );
        let hard = &topo.functions.as_ref().unwrap()
            [names.iter().position(|x| *x == "sievehard").unwrap()]
        .1;
        assert_eq!(hard.memory_mb, 9.5, "measured at potsdam: its own figure");
        let echo =
            &topo.functions.as_ref().unwrap()[names.iter().position(|x| *x == "echo").unwrap()].1;
        assert_eq!(echo.memory_mb, 5.5, "not measured at potsdam: tu-berlin's");
        assert_eq!(echo.cpu_ms, 0.5, "the times are potsdam's");
        // Every request comes from Potsdam's surroundings and is of a function that was called.
        let wl = crate::workload::Workload::for_topology(
            &topo,
            (0, 0),
            &crate::workload::WorkloadConfig {
                requests: 2000,
                rate_per_s: topo.defaults.rate,
                ..Default::default()
            },
        );
        let here = topo.nodes[at("potsdam")].location;
        assert!(wl
            .requests
            .iter()
            .all(|r| r.source.distance_km(&here) < 7.0));
        let hard_calls = wl
            .requests
            .iter()
            .filter(|r| names[r.function] == "sievehard")
            .count();
        assert!(wl.requests.iter().all(|r| names[r.function] != "sieve"));
        assert!(
            (1350..1650).contains(&hard_calls),
            "{hard_calls} of 2000, expected about 1500"
        );
        let span_s = wl.requests.last().unwrap().arrival_ms / 1000.0;
        assert!(
            (110.0..140.0).contains(&span_s),
            "2000 calls at 16/s took {span_s} s"
        );
    }

    #[test]
    fn on_the_captured_high_load_keeping_calls_at_home_is_far_behind_greedy() {
        let dir = crate_dir().join("testdata/profiles/highload-small-edge");
        let files: Vec<MeasuredProfiles> = ["potsdam", "tu-berlin", "cloud"]
            .iter()
            .map(|n| MeasuredProfiles::load(&dir.join(format!("{n}.json"))).unwrap())
            .collect();
        let mut topo = small_edge();
        let link = LinkModel::default();
        calibrate_fleet(&files, &mut topo, &link).unwrap();
        assert!(
            (15.0..16.0).contains(&topo.defaults.rate),
            "{}",
            topo.defaults.rate
        );
        let wl = crate::workload::Workload::for_topology(
            &topo,
            (0, 0),
            &crate::workload::WorkloadConfig {
                requests: 320,
                rate_per_s: topo.defaults.rate,
                seed: 7001,
                ..Default::default()
            },
        );
        let cfg = crate::sim::SimConfig {
            warmup: 0,
            ..Default::default()
        };
        let mean = |p: &dyn crate::policy::Policy| {
            let out = crate::sim::Simulator::run(&topo, &wl, cfg, p);
            out.iter().map(|o| o.latency.total()).sum::<f64>() / out.len() as f64
        };
        let home = mean(&crate::baselines::NearestPolicy);
        let greedy = mean(&crate::baselines::GreedyPolicy::new(link));
        assert!(
            home > 3.0 * greedy,
            "nearest {home:.0} ms, greedy {greedy:.0} ms"
        );
    }

    #[test]
    fn a_file_without_rates_leaves_the_load_alone_and_bad_cores_are_refused() {
        let mut topo = small_edge();
        let before = (topo.defaults, topo.sources.clone());
        let p = MeasuredProfiles::parse(
            r#"{"node": "potsdam", "at_ms": 1,
                "functions": {"sieve": {"calls": 40, "warm_ms": 3.0, "memory_mb": 32}}}"#,
            "old.json",
        )
        .unwrap();
        p.calibrate_topology(&mut topo, &LinkModel::default())
            .unwrap();
        assert_eq!((topo.defaults, topo.sources.clone()), before);
        assert_eq!(topo.popularity, None);
        let e = MeasuredProfiles::parse(
            r#"{"node": "potsdam", "at_ms": 1, "cores": 0, "functions": {}}"#,
            "c.json",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("c.json") && e.contains("cores = 0"), "{e}");
    }

    #[test]
    fn the_simulator_reads_a_measured_profile_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tu-berlin.json");
        std::fs::write(
            &path,
            r#"{"node": "tu-berlin", "at_ms": 1,
                "functions": {
                  "sieve": {"calls": 40, "warm_ms": 3.0, "cold_ms": 12.0, "memory_mb": 32},
                  "fresh": {"calls": 9, "warm_ms": 50.0, "memory_mb": 128}
                },
                "links": {"potsdam": 6.0, "cloud": 30.0}}"#,
        )
        .unwrap();
        let file = crate_dir().join("../examples/berlin.toml");
        let mut topo = Topology::load_config(&file).unwrap();
        let link = LinkModel::default();
        MeasuredProfiles::load(&path)
            .unwrap()
            .calibrate_topology(&mut topo, &link)
            .unwrap();
        let f = topo.functions.as_ref().unwrap();
        let sieve = &f.iter().find(|(n, _)| n == "sieve").unwrap().1;
        assert_eq!(sieve.cpu_ms, 3.0);
        assert_eq!(crate::model::cold_start_ms(sieve, 1000.0), 12.0);
        // Not in the topology: added, calibrated.
        let fresh = &f.iter().find(|(n, _)| n == "fresh").unwrap().1;
        assert_eq!(fresh.cpu_ms, 50.0);
        // The cloud is 30 ms there and back: its propagation plus the access delay.
        let cloud = topo.ids.iter().position(|n| n == "cloud").unwrap();
        let tu = topo.ids.iter().position(|n| n == "tu-berlin").unwrap();
        let dist = topo.nodes[tu]
            .location
            .distance_km(&topo.nodes[cloud].location);
        let comm = crate::model::comm_ms(&link, 0.0, dist, topo.nodes[cloud].access_ms);
        assert!((comm - 30.0).abs() < 1e-9, "{comm}");
        // The simulator runs on it: every request of the calibrated functions is placed.
        let wl = crate::workload::Workload::for_topology(
            &topo,
            (0, 0),
            &crate::workload::WorkloadConfig {
                requests: 200,
                rate_per_s: 20.0,
                ..Default::default()
            },
        );
        assert!(wl.functions.iter().any(|p| p.cpu_ms == 50.0));
        let cfg = crate::sim::SimConfig {
            warmup: 0,
            ..Default::default()
        };
        let greedy = crate::baselines::GreedyPolicy::new(link);
        let out = crate::sim::Simulator::run(&topo, &wl, cfg, &greedy);
        assert_eq!(out.len(), 200);
        // A file from a node the topology lacks is refused, naming it.
        let mut other = Topology::load_config(&file).unwrap();
        let mut p = MeasuredProfiles::load(&path).unwrap();
        p.node = "lisbon".into();
        let e = p
            .calibrate_topology(&mut other, &link)
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"lisbon\""), "{e}");
    }
}
