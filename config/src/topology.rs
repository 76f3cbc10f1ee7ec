//! The topology file: nodes, their areas and backends, functions, and platform settings.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use url::Url;

use crate::area::{Area, AreaConfig};
use crate::backend::BackendConfig;
use crate::error::ConfigError;
use crate::function::{valid_function_name, FunctionConfig};
use crate::location::LatLon;
use crate::service_map::{NodeEntry, ServiceMap};

/// A whole geofaas deployment as one TOML file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    /// DNS zone the platform answers for, with the trailing dot. Default `geofaas.test.`.
    #[serde(default = "default_zone")]
    pub zone: String,
    /// Gateway settings shared by every node.
    #[serde(default)]
    pub gateway: GatewaySettings,
    /// How overlapping edge areas are treated.
    #[serde(default)]
    pub areas: AreaSettings,
    /// IP geolocation database; without one, clients without a location header are served where they land.
    #[serde(default)]
    pub geoip: Option<GeoIpSettings>,
    /// TLS certificate and trust for the gateways.
    #[serde(default)]
    pub tls: Option<TlsSettings>,
    /// Node-to-node authentication.
    #[serde(default)]
    pub security: SecuritySettings,
    /// Callers' API keys (`[[auth.key]]`); none means the node is open.
    #[serde(default)]
    pub auth: crate::AuthSettings,
    /// Rate limits, queue bound and slow-client timeouts.
    #[serde(default)]
    pub limits: crate::LimitSettings,
    /// The geo DNS server.
    #[serde(default)]
    pub dns: DnsSettings,
    /// Which placement policy an edge gateway asks before running a call.
    #[serde(default)]
    pub scheduler: SchedulerSettings,
    /// Limits and retention of deployed functions (`[deploy]`).
    #[serde(default)]
    pub deploy: crate::DeploySettings,
    /// Warming functions where moving clients are heading (`[prewarm]`).
    #[serde(default)]
    pub prewarm: crate::PrewarmSettings,
    /// Attempts and retention of asynchronous calls (`[activations]`).
    #[serde(default)]
    pub activations: crate::ActivationSettings,
    /// The etcd registry of a fleet (`[registry]`); without it the file is the whole deployment.
    /// Default none.
    #[serde(default)]
    pub registry: Option<crate::RegistrySettings>,
    /// The NATS JetStream queue of a fleet's asynchronous calls (`[queue]`); without it each
    /// node keeps its accepted calls in its own journal. Default none.
    #[serde(default)]
    pub queue: Option<crate::QueueSettings>,
    /// The nodes: edges and exactly one cloud.
    #[serde(rename = "node", default)]
    pub nodes: Vec<NodeConfig>,
    /// The functions the platform offers.
    #[serde(rename = "function", default)]
    pub functions: Vec<FunctionConfig>,
    /// Folder the file was loaded from; relative paths in the file are resolved against it.
    #[serde(skip)]
    pub base_dir: PathBuf,
    /// Name of the file, for messages (`<string>` when parsed from memory).
    #[serde(skip)]
    pub source: String,
}

/// Whether a node is an edge (serves an area) or the cloud (serves the rest of the world).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// An edge node with a bounded service area.
    Edge,
    /// The cloud node: responsible for every location outside all edge areas, and the offload target.
    Cloud,
}

/// One node of the topology.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    /// Node name: a DNS label (lowercase letters, digits, `-`), e.g. `tu-berlin`.
    pub id: String,
    /// Edge or cloud.
    pub role: Role,
    /// Where the node stands (for distances and the scheduler).
    pub location: LatLon,
    /// Service area; required for edges, `world` (the default) for the cloud.
    #[serde(default)]
    pub area: Option<AreaConfig>,
    /// The `https://` URL clients and other nodes reach this gateway at (used in 307 Location headers).
    pub public_url: Url,
    /// Socket address the gateway listens on, e.g. `0.0.0.0:8443`.
    pub listen: SocketAddr,
    /// Backends in order of preference.
    #[serde(rename = "backend", default)]
    pub backends: Vec<BackendConfig>,
    /// vCPU cores the scheduler plans with (one running call holds one). Default 8 for an
    /// edge, 64 for the cloud ([`NodeConfig::cores`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cores: Option<f64>,
    /// Memory in GB the scheduler plans with (instances hold their function's `memory_mb`).
    /// Default 16 for an edge, 256 for the cloud ([`NodeConfig::memory_gb`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_gb: Option<f64>,
    /// Bandwidth in Mbit/s for pulling a function's image on a cold start. Default 1000 for an
    /// edge, 10000 for the cloud ([`NodeConfig::bandwidth`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth: Option<f64>,
}

impl NodeConfig {
    /// vCPU cores: `cores`, else 8 for an edge and 64 for the cloud.
    pub fn cores(&self) -> f64 {
        self.cores
            .unwrap_or(if self.role == Role::Cloud { 64.0 } else { 8.0 })
    }

    /// Memory in GB: `memory_gb`, else 16 for an edge and 256 for the cloud.
    pub fn memory_gb(&self) -> f64 {
        self.memory_gb.unwrap_or(if self.role == Role::Cloud {
            256.0
        } else {
            16.0
        })
    }

    /// Image-pull bandwidth in Mbit/s: `bandwidth`, else 1000 for an edge and 10000 for the
    /// cloud.
    pub fn bandwidth(&self) -> f64 {
        self.bandwidth.unwrap_or(if self.role == Role::Cloud {
            10_000.0
        } else {
            1_000.0
        })
    }
}

/// Settings of every gateway.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewaySettings {
    /// Largest accepted request body in bytes. Default 6 MiB (AWS Lambda's limit).
    #[serde(default = "default_max_body_bytes")]
    pub max_body_bytes: usize,
    /// Deadline of one call, including offload, in milliseconds. Default 30000.
    #[serde(default = "default_call_timeout_ms")]
    pub call_timeout_ms: u64,
    /// Most calls a node runs at once before it offloads to the cloud. Default 64.
    #[serde(default = "default_max_concurrent_calls")]
    pub max_concurrent_calls: usize,
    /// Largest request header section in bytes (names, values and 4 bytes per line of
    /// framing, as HTTP/1.1 sends it); more is `431`. Default 32768 (nginx's default).
    #[serde(default = "default_max_header_bytes")]
    pub max_header_bytes: usize,
    /// Largest single request header line in bytes (`name: value`); longer is `431`.
    /// Default 8192 (nginx's default).
    #[serde(default = "default_max_header_line_bytes")]
    pub max_header_line_bytes: usize,
    /// Seconds between refreshes of what the other nodes serve (the cloud's `/functions`).
    /// Default 30.
    #[serde(default = "default_peer_refresh_s")]
    pub peer_refresh_s: u64,
    /// On SIGTERM, milliseconds the node keeps answering while `/readyz` already says "not
    /// ready", so the geo DNS withdraws it before it stops accepting. Default 3000 (the DNS
    /// probes every second and withdraws after two failed probes).
    #[serde(default = "default_drain_grace_ms")]
    pub drain_grace_ms: u64,
    /// Then, milliseconds in-flight calls get to finish before the node exits. Default 30000.
    #[serde(default = "default_drain_timeout_ms")]
    pub drain_timeout_ms: u64,
    /// How many of the nearest other edges a node watches closely: it probes their `/readyz`
    /// every `dns.probe_interval_ms`, sends them its load reports and places calls on them.
    /// Edges whose areas touch its own are watched too, and the cloud always; any other node
    /// is probed only while this node hands clients over to it. Default 8.
    #[serde(default = "default_neighbours")]
    pub neighbours: usize,
}

fn default_max_body_bytes() -> usize {
    6 * 1024 * 1024
}
fn default_call_timeout_ms() -> u64 {
    30_000
}
fn default_max_concurrent_calls() -> usize {
    64
}
fn default_max_header_bytes() -> usize {
    32 * 1024
}
fn default_max_header_line_bytes() -> usize {
    8 * 1024
}
fn default_peer_refresh_s() -> u64 {
    30
}
fn default_drain_grace_ms() -> u64 {
    3000
}
fn default_drain_timeout_ms() -> u64 {
    30_000
}
fn default_neighbours() -> usize {
    8
}

impl Default for GatewaySettings {
    fn default() -> Self {
        Self {
            max_body_bytes: default_max_body_bytes(),
            call_timeout_ms: default_call_timeout_ms(),
            max_concurrent_calls: default_max_concurrent_calls(),
            max_header_bytes: default_max_header_bytes(),
            max_header_line_bytes: default_max_header_line_bytes(),
            peer_refresh_s: default_peer_refresh_s(),
            drain_grace_ms: default_drain_grace_ms(),
            drain_timeout_ms: default_drain_timeout_ms(),
            neighbours: default_neighbours(),
        }
    }
}

/// How overlapping edge areas are treated.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AreaSettings {
    /// Overlaps of two edge areas narrower than this, in metres, are tolerated with a warning
    /// (points in them go to the nearer node centre); wider ones are an error. Default 50.
    #[serde(default = "default_sliver_tolerance_m")]
    pub sliver_tolerance_m: f64,
}

fn default_sliver_tolerance_m() -> f64 {
    50.0
}

impl Default for AreaSettings {
    fn default() -> Self {
        Self {
            sliver_tolerance_m: default_sliver_tolerance_m(),
        }
    }
}

/// An IP geolocation database in MaxMind format.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GeoIpSettings {
    /// Path of the `.mmdb` file (GeoIP2/GeoLite2 City or DB-IP City Lite), relative to the topology file.
    pub mmdb: PathBuf,
}

/// TLS material of the gateways.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsSettings {
    /// PEM certificate chain of the gateways.
    pub cert: PathBuf,
    /// PEM private key.
    pub key: PathBuf,
    /// PEM CA that node-to-node calls trust (in addition to the system roots). Default none.
    #[serde(default)]
    pub ca: Option<PathBuf>,
}

/// Node-to-node authentication of offloaded calls.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecuritySettings {
    /// Environment variable holding the shared offload secret (never the secret itself).
    /// Default `GEOFAAS_OFFLOAD_SECRET`.
    #[serde(default = "default_secret_env")]
    pub offload_secret_env: String,
}

fn default_secret_env() -> String {
    "GEOFAAS_OFFLOAD_SECRET".to_owned()
}

impl Default for SecuritySettings {
    fn default() -> Self {
        Self {
            offload_secret_env: default_secret_env(),
        }
    }
}

/// The live scheduler of the edge gateways.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchedulerSettings {
    /// Policy an edge asks, per call, which node runs the call (this edge, a neighbouring
    /// edge or the cloud) and in a warm or a new instance. Default `none`.
    #[serde(default)]
    pub policy: SchedulerPolicy,
    /// The PPO actor's weights (safetensors, as `geofaas train --topology FILE --out PATH`
    /// writes them), relative to this file. Default none: the shipped Berlin weights. A file
    /// that is missing or does not load makes the node use `greedy` (logged once per load).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights: Option<PathBuf>,
    /// Under `ppo`, the actor chooses only among the placements whose predicted latency is
    /// within this fraction of the best one's (e.g. `0.25`: at most 25 % slower by the
    /// model); where the model puts an option clearly behind, it is never taken. `0` places
    /// as greedy does. An option is weighed with what sharing its node costs on average: its
    /// time there alone times the node's calls per core over its last seconds. Default none:
    /// the actor chooses among every feasible placement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub margin: Option<f64>,
    /// Under `margin`, a narrower one for the placements on a busy node: where the call
    /// would share the node's cores with calls running there, or wait behind a busy instance
    /// (it slows the calls it joins too, which its own predicted latency does not count), so
    /// the actor may take them only this far behind the best (e.g. `0.05`). A placement on a
    /// node with room keeps `margin`. Default none: `margin` for every placement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub busy_margin: Option<f64>,
    /// Without a `[registry]`, milliseconds between the load reports each node sends the
    /// edges (signed with the offload secret); a report older than three intervals is
    /// ignored. With a registry its `load_interval_ms` applies. Default 1000.
    #[serde(default = "default_load_interval_ms")]
    pub load_interval_ms: u64,
}

fn default_load_interval_ms() -> u64 {
    1000
}

impl Default for SchedulerSettings {
    fn default() -> Self {
        Self {
            policy: SchedulerPolicy::None,
            weights: None,
            margin: None,
            busy_margin: None,
            load_interval_ms: default_load_interval_ms(),
        }
    }
}

/// A placement policy the gateway can run live.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SchedulerPolicy {
    /// No scheduler: serve at the edge, offload only on failure or when the edge is full.
    #[default]
    None,
    /// Lowest latency the scheduler's model estimates (cold start + compute + communication).
    Greedy,
    /// The PPO actor of `weights` (default the shipped `scheduler/weights/berlin.safetensors`).
    Ppo,
}

/// The geo DNS server.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DnsSettings {
    /// UDP and TCP address to listen on. Default `127.0.0.1:5353`.
    #[serde(default = "default_dns_listen")]
    pub listen: SocketAddr,
    /// TTL of answers in seconds. Default 30.
    #[serde(default = "default_ttl_s")]
    pub ttl_s: u32,
    /// A client outside every edge area gets the nearest edge within this distance, else the cloud. Default 50 km.
    #[serde(default = "default_max_distance_km")]
    pub max_distance_km: f64,
    /// Interval of the gateway health probes in milliseconds. Default 1000.
    #[serde(default = "default_probe_interval_ms")]
    pub probe_interval_ms: u64,
}

fn default_dns_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 5353))
}
fn default_ttl_s() -> u32 {
    30
}
fn default_max_distance_km() -> f64 {
    50.0
}
fn default_probe_interval_ms() -> u64 {
    1000
}

impl Default for DnsSettings {
    fn default() -> Self {
        Self {
            listen: default_dns_listen(),
            ttl_s: default_ttl_s(),
            max_distance_km: default_max_distance_km(),
            probe_interval_ms: default_probe_interval_ms(),
        }
    }
}

fn default_zone() -> String {
    "geofaas.test.".to_owned()
}

impl Topology {
    /// Reads, parses and validates a topology file.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let base = path.parent().map(Path::to_owned).unwrap_or_default();
        Self::parse(&text, &path.display().to_string(), &base)
    }

    /// [`Topology::load`] on a thread of its own that ends a moment after it, for a process's
    /// start. Parsing a large topology makes scratch memory many times the file's size (86 MiB
    /// at peak for the 3 MB file of 10 000 edges); mimalloc, the allocator of the `geofaas`
    /// binary, returns a thread's freed pages to the system when the thread ends, once they have
    /// been free for its purge delay, where the main thread, parked in the runtime from then on,
    /// would keep them for the process's life. The caller goes on as soon as the parse is done.
    pub fn load_apart(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        const LINGER: std::time::Duration = std::time::Duration::from_millis(200);
        let path = path.as_ref().to_owned();
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let parser = std::thread::Builder::new().name("topology".into()).spawn({
            let path = path.clone();
            move || {
                let _ = tx.send(Self::load(path));
                std::thread::sleep(LINGER);
            }
        });
        match parser {
            Ok(_) => rx.recv().unwrap_or_else(|_| Self::load(&path)),
            Err(_) => Self::load(&path),
        }
    }

    /// Parses and validates topology text; `source` names it in errors, `base_dir` resolves relative paths.
    pub fn parse(text: &str, source: &str, base_dir: &Path) -> Result<Self, ConfigError> {
        let mut topo: Topology = toml::from_str(text).map_err(|e| ConfigError::Parse {
            file: source.to_owned(),
            message: e.to_string(),
        })?;
        topo.source = source.to_owned();
        topo.base_dir = base_dir.to_owned();
        // The parser grows each list as it reads; a node's one backend would otherwise hold room
        // for four (1.2 KB per node, 12 MB in a 10 000-edge fleet).
        topo.nodes.shrink_to_fit();
        for node in &mut topo.nodes {
            node.backends.shrink_to_fit();
        }
        if let Some(r) = &mut topo.registry {
            r.resolve_paths(base_dir);
        }
        topo.validate()?;
        Ok(topo)
    }

    /// Resolves a path from the file against the file's folder.
    pub fn resolve(&self, path: &Path) -> PathBuf {
        self.base_dir.join(path)
    }

    /// The node with this id.
    pub fn node(&self, id: &str) -> Option<&NodeConfig> {
        self.nodes.iter().find(|n| n.id == id)
    }

    /// The function with this name.
    pub fn function(&self, name: &str) -> Option<&FunctionConfig> {
        self.functions.iter().find(|f| f.name == name)
    }

    pub(crate) fn invalid(
        &self,
        field: String,
        value: impl ToString,
        reason: impl ToString,
    ) -> ConfigError {
        ConfigError::Invalid {
            file: self.source.clone(),
            field,
            value: value.to_string(),
            reason: reason.to_string(),
        }
    }

    /// Checks everything a running platform relies on; see [`ConfigError::Invalid`].
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.auth
            .check()
            .and_then(|()| self.limits.check())
            .and_then(|()| self.deploy.check())
            .and_then(|()| self.prewarm.check())
            .and_then(|()| self.activations.check())
            .and_then(|()| self.registry.as_ref().map_or(Ok(()), |r| r.check()))
            .and_then(|()| self.queue.as_ref().map_or(Ok(()), |q| q.check()))
            .map_err(|(field, value, reason)| self.invalid(field, value, reason))?;
        self.service_map().map(|_| ())
    }

    /// Validates the topology and builds the area lookup the gateway and DNS use.
    pub fn service_map(&self) -> Result<ServiceMap, ConfigError> {
        if !self.zone.ends_with('.') || self.zone.len() < 2 {
            return Err(self.invalid(
                "zone".into(),
                &self.zone,
                "a DNS zone with a trailing dot, e.g. \"geofaas.test.\"",
            ));
        }
        let mut ids = HashSet::new();
        let mut entries = Vec::with_capacity(self.nodes.len());
        for node in &self.nodes {
            let field = |f: &str| format!("node[{}].{f}", node.id);
            if !valid_node_id(&node.id) {
                return Err(self.invalid(
                    "node.id".into(),
                    &node.id,
                    "a node id is a DNS label: lowercase letters, digits and '-', at most 63",
                ));
            }
            if !ids.insert(node.id.as_str()) {
                return Err(self.invalid(field("id"), &node.id, "duplicate node id"));
            }
            LatLon::new(node.location.lat, node.location.lon)
                .map_err(|e| self.invalid(field("location"), node.location, e))?;
            for (name, value, unit) in [
                ("cores", node.cores, "vCPU cores"),
                ("memory_gb", node.memory_gb, "GB"),
                ("bandwidth", node.bandwidth, "Mbit/s"),
            ] {
                if let Some(v) = value.filter(|v| !v.is_finite() || *v <= 0.0) {
                    return Err(self.invalid(
                        field(name),
                        v,
                        format!("must be a positive number of {unit}"),
                    ));
                }
            }
            if node.public_url.scheme() != "https" {
                return Err(self.invalid(
                    field("public_url"),
                    &node.public_url,
                    "gateways serve HTTPS only: use an https:// URL",
                ));
            }
            if node.public_url.host().is_none() {
                return Err(self.invalid(
                    field("public_url"),
                    &node.public_url,
                    "the URL has no host",
                ));
            }
            for (i, backend) in node.backends.iter().enumerate() {
                backend.check().map_err(|(f, value, reason)| {
                    self.invalid(field(&format!("backend[{i}].{f}")), value, reason)
                })?;
            }
            let area = match (&node.area, node.role) {
                (None, Role::Cloud) => Area::World,
                (None, Role::Edge) => {
                    return Err(self.invalid(
                        field("area"),
                        "(missing)",
                        "an edge node needs a service area",
                    ))
                }
                (Some(cfg), role) => {
                    let area = cfg
                        .build(&self.base_dir)
                        .map_err(|e| self.invalid(field("area"), area_text(cfg), e))?;
                    if role == Role::Cloud && !area.is_world() {
                        return Err(self.invalid(field("area"), area_text(cfg), "the cloud node's area is the world (leave area out or write \"world\")"));
                    }
                    if role == Role::Edge && area.is_world() {
                        return Err(self.invalid(
                            field("area"),
                            area_text(cfg),
                            "an edge area cannot be the whole world; that is the cloud's",
                        ));
                    }
                    area
                }
            };
            entries.push(NodeEntry {
                id: node.id.clone(),
                role: node.role,
                location: node.location,
                area,
                public_url: node.public_url.clone(),
            });
        }
        match self.nodes.iter().filter(|n| n.role == Role::Cloud).count() {
            0 => return Err(self.invalid("node.role".into(), "(none is \"cloud\")", "a topology needs exactly one cloud node: it serves every location outside the edge areas")),
            1 => {}
            _ => return Err(self.invalid("node.role".into(), "cloud", "more than one cloud node")),
        }
        let mut names = HashSet::new();
        for f in &self.functions {
            if !valid_function_name(&f.name) {
                return Err(self.invalid(
                    "function.name".into(),
                    &f.name,
                    "letters, digits, '-' and '_' only",
                ));
            }
            if !names.insert(f.name.as_str()) {
                return Err(self.invalid(
                    format!("function[{}].name", f.name),
                    &f.name,
                    "duplicate function",
                ));
            }
            for (field, v) in [
                ("cpu_ms", f.cpu_ms),
                ("memory_mb", f.memory_mb),
                ("image_mb", f.image_mb),
                ("init_ms", f.init_ms),
                ("input_kb", f.input_kb),
                ("slo_ms", f.slo_ms),
            ] {
                if !v.is_finite() || v < 0.0 {
                    return Err(self.invalid(
                        format!("function[{}].{field}", f.name),
                        v,
                        "must be a non-negative number",
                    ));
                }
            }
        }
        for (field, margin) in [
            ("margin", self.scheduler.margin),
            ("busy_margin", self.scheduler.busy_margin),
        ] {
            if let Some(m) = margin.filter(|m| !(m.is_finite() && *m >= 0.0)) {
                return Err(self.invalid(
                    format!("scheduler.{field}"),
                    m,
                    "must be a non-negative fraction, e.g. 0.25",
                ));
            }
        }
        if self.scheduler.load_interval_ms == 0 {
            return Err(self.invalid(
                "scheduler.load_interval_ms".into(),
                0,
                "must be a positive number of milliseconds",
            ));
        }
        if self.areas.sliver_tolerance_m.is_nan() || self.areas.sliver_tolerance_m < 0.0 {
            return Err(self.invalid(
                "areas.sliver_tolerance_m".into(),
                self.areas.sliver_tolerance_m,
                "must be a non-negative number of metres",
            ));
        }
        ServiceMap::new(entries, self.areas.sliver_tolerance_m).map_err(|(a, b, width)| {
            self.invalid(
                format!("node[{a}].area"),
                format!("overlaps node[{b}].area by {width:.0} m"),
                format!("edge areas may overlap only in slivers narrower than areas.sliver_tolerance_m = {} m", self.areas.sliver_tolerance_m),
            )
        })
    }
}

fn area_text(cfg: &AreaConfig) -> String {
    match cfg {
        AreaConfig::Wkt(w) => w.clone(),
        other => format!("{other:?}"),
    }
}

fn valid_node_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 63
        && !id.starts_with('-')
        && !id.ends_with('-')
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}
