//! Measured profiles: what a live node learned of its functions and of its links to the other
//! nodes, in the JSON a node serves at `GET /node/profiles` (and `geofaas loadtest` can save).
//! The simulator reads such a file (`simulate --profiles FILE`) and replaces the model's
//! figures of the functions it names with the measured ones, so that a policy is trained and
//! evaluated on the system it runs in.
//!
//! A function's measured warm time becomes its CPU time at the reference clock (scaled by the
//! measuring node's clock), its cold start the init time with no image to pull; its memory is
//! the instance size the node used for it. A link's round trip becomes the access delay of the
//! node at its far end (half the round trip one way, less the propagation the model adds).

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::model::{FunctionProfile, REF_GHZ};
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
    /// Round trip in ms from the measuring node to each other node (by id).
    #[serde(default)]
    pub links: BTreeMap<String, f64>,
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
    /// Memory of one instance in MB (the configured size; the node does not measure it).
    pub memory_mb: f64,
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
        }
        for (node, rtt) in &self.links {
            check(format!("links.{node}"), *rtt)?;
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
            cpu_ms: m.warm_ms * base.cores * ghz / REF_GHZ,
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
        assert_eq!(fast.cpu_ms, 2.0);
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
        assert!(e.contains("x.json") && e.contains("expected a string"), "{e}");
    }
}
