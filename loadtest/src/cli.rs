//! `geofaas loadtest`: the clap arguments and the set-up every mode shares (topology, the
//! spawned nodes, TLS trust, the output folder).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use clap::{Args, Subcommand};
use geofaas_config::{LatLon, Role, ServiceMap, Topology};
use indicatif::{ProgressBar, ProgressStyle};
use url::Url;

use crate::client::{ClientConfig, HttpVersion};
use crate::record::Summary;
use crate::runner::CallTemplate;
use crate::spawn::Spawned;

/// Arguments of `geofaas loadtest`.
#[derive(Debug, Args)]
#[command(
    about = "Reproduce the GeoFaaS paper's experiments (mobility, high load, outage) on any topology",
    long_about = "Reproduce the GeoFaaS paper's experiments on any topology with geo-aware clients \
that behave like the paper's GeoFaaS client: each call carries X-Client-Location, follows a 307 \
handover and caches the new node, and after a timeout or a connection failure is retried once at \
the cloud with X-GeoFaaS-Retry: 1.\n\nEach mode writes requests.csv (one row per call), \
summary.json and a PNG like the paper's figure into --out. With --spawn the nodes of the topology \
are started as child processes (fresh CA, derived topology in a state folder); without it a \
running deployment is called."
)]
pub struct LoadtestArgs {
    /// The experiment.
    #[command(subcommand)]
    pub mode: Mode,
}

/// The experiments.
#[derive(Debug, Subcommand)]
pub enum Mode {
    /// One client walks a path (name,lat,lon rows), one call per point, wait-for-response,
    /// following handovers. Plot: latency and client-to-server distance per step with a
    /// vertical line at each handover (paper Fig. 4).
    Mobility(MobilityArgs),
    /// Static clients (the first N of --clients-file for each N of --clients), each making
    /// --calls calls every --interval-ms, each call on its own task whatever the previous one
    /// does. Plot: edge vs offloaded calls per client count and each round's duration (Fig. 5).
    Highload(HighloadArgs),
    /// One static client, wait-for-response; after --kill-after answers the edge serving it
    /// is killed with SIGKILL (needs --spawn) and the rest must be answered by the cloud. Plot:
    /// 1-second moving average of latency, edge and cloud in two colours, the kill marked (Fig. 6).
    Outage(OutageArgs),
}

/// What every mode takes.
#[derive(Debug, Args)]
pub struct CommonArgs {
    /// Topology file (TOML) of the deployment, or of the nodes to start with --spawn.
    #[arg(long)]
    pub topology: PathBuf,
    /// Function to call.
    #[arg(long, default_value = "sieve")]
    pub function: String,
    /// Output folder for requests.csv, summary.json and the PNG.
    #[arg(long, default_value = "loadtest-out")]
    pub out: PathBuf,
    /// First node to call; default: the node whose area holds the (first) client location.
    #[arg(long)]
    pub entry: Option<Url>,
    /// PEM CA to trust; default: the topology's [tls] ca, or the generated one with --spawn.
    #[arg(long)]
    pub ca: Option<PathBuf>,
    /// Start every node of the topology as its own `geofaas node` process with a fresh CA.
    #[arg(long)]
    pub spawn: bool,
    /// With --spawn: keep certificates, derived topology and node logs here (default: a
    /// temporary folder removed at the end).
    #[arg(long, requires = "spawn")]
    pub state_dir: Option<PathBuf>,
    /// Put each node and the client in its own network namespace with tc netem delays (5 ms
    /// between edges, 25 ms to the cloud). Needs root and a kernel with sch_netem.
    #[arg(long)]
    pub netem: bool,
    /// Speak HTTP/1.1 instead of HTTP/2.
    #[arg(long)]
    pub http1: bool,
    /// Deadline of one attempt in ms; default 1000 (mobility, outage) or 30000 (highload).
    #[arg(long)]
    pub timeout_ms: Option<u64>,
    /// Never retry at the cloud.
    #[arg(long)]
    pub no_retry: bool,
    /// After a node failed, call the cloud directly for this many ms before trying it again.
    #[arg(long, default_value_t = 5000)]
    pub fallback_ms: u64,
    /// Send an Idempotency-Key with every call (kept across its retry).
    #[arg(long)]
    pub idempotency: bool,
    /// Request body of every call (e.g. the limit for sievehard).
    #[arg(long, default_value = "")]
    pub body: String,
    /// The `geofaas` binary that --spawn starts; default: this executable.
    #[arg(long, env = "GEOFAAS_BIN", hide = true)]
    pub geofaas_bin: Option<PathBuf>,
}

/// Arguments of `geofaas loadtest mobility`.
#[derive(Debug, Args)]
pub struct MobilityArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub common: CommonArgs,
    /// The path: CSV with name,lat,lon rows, one call per row.
    #[arg(long)]
    pub path: PathBuf,
    /// Open loop: send one call every 1/RATE s whatever the answers do (default: closed loop).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Call the function once at every node before the walk (not recorded), so the walk's
    /// latency peaks are handovers, not cold starts.
    #[arg(long)]
    pub warm: bool,
}

/// Arguments of `geofaas loadtest highload`.
#[derive(Debug, Args)]
pub struct HighloadArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub common: CommonArgs,
    /// Static client locations, CSV with name,lat,lon rows; round N uses the first N.
    #[arg(long)]
    pub clients_file: PathBuf,
    /// Client counts, one round each.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16")]
    pub clients: Vec<u32>,
    /// Calls per client.
    #[arg(long, default_value_t = 10)]
    pub calls: u64,
    /// Time between two calls of a client, ms.
    #[arg(long, default_value_t = 1000)]
    pub interval_ms: u64,
}

/// Arguments of `geofaas loadtest outage`.
#[derive(Debug, Args)]
pub struct OutageArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub common: CommonArgs,
    /// Calls to make (after the warm-up).
    #[arg(long, default_value_t = 100_000)]
    pub calls: u64,
    /// Kill the edge serving the client after this many answers.
    #[arg(long, default_value_t = 50_000)]
    pub kill_after: u64,
    /// Calls made first and not recorded (the prototype used 5000).
    #[arg(long, default_value_t = 0)]
    pub warmup: u64,
    /// Where the client stands, LAT,LON; default: the first edge node's location.
    #[arg(long, allow_hyphen_values = true)]
    pub location: Option<LatLon>,
    /// Open loop: send one call every 1/RATE s whatever the answers do (default: closed loop).
    #[arg(long)]
    pub rate: Option<f64>,
}

/// Runs one mode.
pub async fn run(args: LoadtestArgs) -> anyhow::Result<()> {
    match args.mode {
        Mode::Mobility(a) => {
            let ctx = Ctx::setup(&a.common, 1000).await?;
            crate::mobility::run(&ctx, &a).await
        }
        Mode::Highload(a) => {
            let ctx = Ctx::setup(&a.common, 30_000).await?;
            crate::highload::run(&ctx, &a).await
        }
        Mode::Outage(a) => {
            let ctx = Ctx::setup(&a.common, 1000).await?;
            crate::outage::run(&ctx, &a).await
        }
    }
}

/// What a mode runs with.
pub struct Ctx {
    /// The topology the nodes run (the derived one with --spawn).
    pub topology: Topology,
    /// Its area lookup.
    pub map: ServiceMap,
    /// The nodes this run started, if any.
    pub spawned: Option<Arc<Spawned>>,
    /// What each call sends.
    pub template: CallTemplate,
    /// Output folder (created).
    pub out: PathBuf,
    entry: Option<Url>,
    client: ClientConfig,
    topology_arg: PathBuf,
}

impl Ctx {
    /// Loads the topology, starts the nodes with --spawn, prepares the output folder.
    pub async fn setup(a: &CommonArgs, default_timeout_ms: u64) -> anyhow::Result<Self> {
        if a.netem {
            crate::netem::check()?;
        }
        let topology = Topology::load(&a.topology)?;
        if topology.function(&a.function).is_none() && !topology.functions.is_empty() {
            // The nodes may still serve it (a backend lists its own functions): warn only.
            eprintln!(
                "warning: {} has no [[function]] {:?} (it lists {:?})",
                topology.source,
                a.function,
                topology
                    .functions
                    .iter()
                    .map(|f| &f.name)
                    .collect::<Vec<_>>()
            );
        }
        std::fs::create_dir_all(&a.out)
            .with_context(|| format!("cannot create {}", a.out.display()))?;
        let (topology, spawned) = if a.spawn {
            let bin = match &a.geofaas_bin {
                Some(b) => b.clone(),
                None => std::env::current_exe()?,
            };
            eprintln!("starting {} nodes ...", topology.nodes.len());
            let s = Spawned::start(&topology, &bin, a.state_dir.as_deref()).await?;
            (s.topology.clone(), Some(Arc::new(s)))
        } else {
            (topology, None)
        };
        let ca_pem = match (&a.ca, &spawned, &topology.tls) {
            (Some(p), _, _) => Some(read(p)?),
            (None, Some(s), _) => Some(s.ca_pem.clone()),
            (None, None, Some(tls)) => tls
                .ca
                .as_ref()
                .map(|p| read(&topology.resolve(p)))
                .transpose()?,
            _ => None,
        };
        let map = topology.service_map()?;
        let mut client = ClientConfig::new(
            map.cloud().public_url.clone(),
            map.cloud().public_url.clone(),
        );
        client.ca_pem = ca_pem;
        client.http = if a.http1 {
            HttpVersion::Http1
        } else {
            HttpVersion::Http2
        };
        client.timeout = Duration::from_millis(a.timeout_ms.unwrap_or(default_timeout_ms));
        client.retry = !a.no_retry;
        client.fallback_ttl = Duration::from_millis(a.fallback_ms);
        let run_id = format!("{:x}", rand::random::<u64>());
        Ok(Self {
            template: CallTemplate {
                function: a.function.clone(),
                body: Bytes::from(a.body.clone().into_bytes()),
                idempotency_prefix: a.idempotency.then_some(run_id),
            },
            topology,
            map,
            spawned,
            out: a.out.clone(),
            entry: a.entry.clone(),
            client,
            topology_arg: a.topology.clone(),
        })
    }

    /// The client configuration of a client at `location`: it enters at --entry or at the
    /// node responsible for `location`.
    pub fn client_config(&self, location: LatLon) -> ClientConfig {
        let mut c = self.client.clone();
        c.entry = self
            .entry
            .clone()
            .unwrap_or_else(|| self.map.responsible(location).public_url.clone());
        c
    }

    /// The role of a node id (None for an unknown or empty id).
    pub fn role(&self, node: &str) -> Option<Role> {
        self.map.node(node).map(|n| n.role)
    }

    /// A progress bar over `n` calls (hidden when stderr is not a terminal).
    pub fn progress(&self, n: u64, what: &str) -> ProgressBar {
        let pb = ProgressBar::new(n);
        pb.set_style(
            ProgressStyle::with_template(
                "{msg} [{elapsed_precise}] {wide_bar} {pos}/{len} calls ({per_sec}, eta {eta})",
            )
            .expect("valid template"),
        );
        pb.set_message(what.to_owned());
        pb
    }

    /// Fills in what every summary states about the run.
    pub fn finish_summary(&self, summary: &mut Summary, open_loop_rate: Option<f64>) {
        summary.topology = self.topology_arg.display().to_string();
        summary.function = self.template.function.clone();
        summary.spawned = self.spawned.is_some();
        summary.delays = "none: loopback, no netem".to_owned();
        summary.load = match open_loop_rate {
            Some(r) => format!("open loop at {r} calls/s (latency from the planned send time)"),
            None => "closed loop (each call waits for the previous answer)".to_owned(),
        };
    }

    /// `out/<name>`.
    pub fn out_file(&self, name: &str) -> PathBuf {
        self.out.join(name)
    }
}

fn read(p: &Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(p).with_context(|| format!("cannot read {}", p.display()))
}
