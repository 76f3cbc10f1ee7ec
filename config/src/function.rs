//! Functions a topology offers and the profile the scheduler plans with.

use serde::{Deserialize, Serialize};

/// One function of the topology and its resource profile (paper Eqs. 1-4).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FunctionConfig {
    /// Name used in `/fn/{name}`: letters, digits, `-` and `_`.
    pub name: String,
    /// CPU time of one call on one reference core, in milliseconds. Default 10.
    #[serde(default = "default_cpu_ms")]
    pub cpu_ms: f64,
    /// Memory of one instance, in MiB. Default 128.
    #[serde(default = "default_memory_mb")]
    pub memory_mb: f64,
    /// Size of the function's image or package, in MB (cold start pulls it). Default 50.
    #[serde(default = "default_image_mb")]
    pub image_mb: f64,
    /// Time to initialise a new instance after its image is present, in milliseconds. Default 100.
    #[serde(default = "default_init_ms")]
    pub init_ms: f64,
    /// Typical request body size, in KiB. Default 1.
    #[serde(default = "default_input_kb")]
    pub input_kb: f64,
    /// Latency objective of one call, in milliseconds. Default 300 (the paper draws 200-400).
    #[serde(default = "default_slo_ms")]
    pub slo_ms: f64,
    /// If the function's output starts with this marker, the call counts as failed
    /// (for backends such as tinyFaaS that answer 200 even when the function failed). Default none.
    #[serde(default)]
    pub failure_marker: Option<String>,
    /// Offload a call to the cloud (or try the next backend) also when the function ran and
    /// failed, as the GeoFaaS paper does: the function may then run twice, so only for
    /// functions without side effects. Default false: a function that ran and failed is
    /// answered with its failure at once.
    #[serde(default)]
    pub retry_on_error: bool,
    /// What a remote backend (Lambda, OpenWhisk) sends this function and expects back:
    /// `"http"` or `"raw"`, overriding the backend's `event`. Default: the backend's.
    #[serde(default)]
    pub event: Option<crate::backend::EventStyle>,
}

fn default_cpu_ms() -> f64 {
    10.0
}
fn default_memory_mb() -> f64 {
    128.0
}
fn default_image_mb() -> f64 {
    50.0
}
fn default_init_ms() -> f64 {
    100.0
}
fn default_input_kb() -> f64 {
    1.0
}
fn default_slo_ms() -> f64 {
    300.0
}

impl FunctionConfig {
    /// A function with the default profile.
    pub fn named(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            cpu_ms: default_cpu_ms(),
            memory_mb: default_memory_mb(),
            image_mb: default_image_mb(),
            init_ms: default_init_ms(),
            input_kb: default_input_kb(),
            slo_ms: default_slo_ms(),
            failure_marker: None,
            retry_on_error: false,
            event: None,
        }
    }
}

/// Whether `name` is usable as a function name (and as a path segment and folder name).
pub fn valid_function_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}
