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

use crate::client::{ClientConfig, HttpVersion, LocationHeader};
use crate::record::Summary;
use crate::runner::CallTemplate;
use crate::spawn::{DelaySpec, Spawned};

/// Arguments of `geofaas loadtest`.
#[derive(Debug, Args)]
#[command(
    about = "Reproduce the GeoFaaS paper's experiments (mobility, high load, outage) and a mixed Zipf workload on any topology",
    long_about = "Reproduce the GeoFaaS paper's experiments on any topology with geo-aware clients \
that behave like the paper's GeoFaaS client: each call carries X-Client-Location, follows a 307 \
handover and caches the new node, and after a timeout or a connection failure is retried once at \
the cloud with X-GeoFaaS-Retry: 1.\n\nEach mode writes requests.csv (one row per call), \
summary.json and (but mixed) a PNG like the paper's figure into --out. With --spawn the nodes of \
the topology are started as child processes (fresh CA, derived topology in a state folder), and \
mobility, highload and mixed keep each node's /metrics at the end as metrics-<node>.txt; without \
it a running deployment is called. `mixed` adds a workload of many generated functions with Zipf \
popularity and cold starts."
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
    /// A mixed workload over many functions (needs --spawn): --functions generated Python
    /// sieves of four sizes (primes below 10 000, 100 000, 1 000 000, 3 000 000, by rank in
    /// turn) written to <out>/functions and served by every node's embedded runtime, whose idle
    /// instances are evicted after --keep-alive-s, so rarely called functions start cold.
    /// --clients-per-edge static clients stand in each edge's area; --calls calls arrive open
    /// loop, Poisson at --rate, each from a uniform client to a function drawn by Zipf
    /// popularity (exponent --zipf), all from --seed. --function and --body are not used.
    /// Writes requests.csv (with each call's function and cold start) and summary.json (per
    /// function: rank, probability, calls, cold starts, latency; SLO violations against
    /// --slo-ms).
    Mixed(MixedArgs),
    /// The fleet under steady load for a long time (needs --spawn): Poisson calls at --rate
    /// from static clients in every edge's area to a mix of functions, a new version of the
    /// function `soak` deployed with `geofaas deploy` every --deploy-every-s, one node
    /// restarted (SIGTERM, then started again) every --restart-every-s, and every node
    /// process's memory, descriptors and threads read from /proc every --sample-every-s.
    /// Writes windows.csv, failures.csv, resources.csv, events.csv as it goes, then
    /// summary.json (goals: no failed call, growth under 5 % after --settle-s) and soak.png.
    /// bench/soak/run.sh runs the hour.
    Soak(SoakArgs),
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
    /// between edges, 25 ms to the cloud). Needs root and a kernel with sch_netem; not
    /// implemented yet (it stops with the reason). Without it, --spawn uses the loadtest's own
    /// delay model (see --no-delays).
    #[arg(long, conflicts_with = "no_delays")]
    pub netem: bool,
    /// With --spawn: no delay model, every node straight on loopback. By default --spawn puts a
    /// TCP relay in front of each node that delays each direction by half a round-trip time
    /// (--cloud-rtt-ms for the cloud, --edge-rtt-ms for an edge) and makes it the node's public
    /// URL, so offloads, retries at the cloud and handovers cross it; the client reaches the
    /// edge whose area holds it (its home edge) directly.
    #[arg(long, requires = "spawn")]
    pub no_delays: bool,
    /// Delay model: round-trip time added to reach the cloud, ms (the paper's 25 ms ping).
    #[arg(long, default_value_t = 25.0)]
    pub cloud_rtt_ms: f64,
    /// Delay model: round-trip time added to reach an edge other than the client's home edge,
    /// ms (the paper's 5 ms between edges).
    #[arg(long, default_value_t = 5.0)]
    pub edge_rtt_ms: f64,
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
    /// Send the location as a `Sec-CH-Geohash` of this many characters (1-12) instead of
    /// `X-Client-Location`.
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=12))]
    pub geohash: Option<u8>,
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
    /// Walk three times, each time on a freshly started (cold) fleet: without pre-warming
    /// (`[prewarm] prewarm_s = 0`), with it (`--prewarm-s`) by a client that ignores the
    /// nodes' `Link: rel=preconnect` hints, and with it by a client that opens a connection to
    /// the hinted node ahead; always as a client with an `X-Client-Id` calling at `--rate`
    /// (default 5 per second). Then a second client stands at the walk's last point before its
    /// first handover for `--standing-calls` calls. Needs --spawn. Writes
    /// requests-without.csv, requests-prewarm-only.csv, requests-with.csv, summary.json and
    /// mobility-prewarm.png.
    #[arg(long, conflicts_with = "warm")]
    pub compare_prewarm: bool,
    /// With --compare-prewarm: how far ahead nodes look along the walker's path, seconds.
    #[arg(long, default_value_t = 10.0)]
    pub prewarm_s: f64,
    /// With --compare-prewarm: calls of the client standing still.
    #[arg(long, default_value_t = 20)]
    pub standing_calls: u64,
    /// Background load while the walk runs: static clients at these locations (`name,lat,lon`
    /// rows), each calling `--background-function` once every `--background-interval-ms`,
    /// open loop, from the walk's start to its end. Their calls are written to
    /// background.csv, not to requests.csv.
    #[arg(long, conflicts_with = "compare_prewarm")]
    pub background_clients: Option<PathBuf>,
    /// With --background-clients: how many of its locations call (default: all).
    #[arg(long)]
    pub background_count: Option<usize>,
    /// With --background-clients: the function they call (default: the walk's).
    #[arg(long)]
    pub background_function: Option<String>,
    /// With --background-clients: the body of their calls (default: the walk's).
    #[arg(long)]
    pub background_body: Option<String>,
    /// With --background-clients: ms between two calls of one background client.
    #[arg(long, default_value_t = 1000)]
    pub background_interval_ms: u64,
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

/// Arguments of `geofaas loadtest mixed`.
#[derive(Debug, Args)]
pub struct MixedArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub common: CommonArgs,
    /// Functions generated (mix00 the most popular).
    #[arg(long, default_value_t = 24)]
    pub functions: usize,
    /// Zipf exponent of the functions' popularity: rank k is called with probability
    /// proportional to k^-s (0: uniform).
    #[arg(long, default_value_t = 1.0)]
    pub zipf: f64,
    /// Seed of the client locations, the arrivals and the functions drawn.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Calls to make.
    #[arg(long, default_value_t = 600)]
    pub calls: u64,
    /// Mean arrival rate, calls per second (Poisson arrivals).
    #[arg(long, default_value_t = 10.0)]
    pub rate: f64,
    /// Static clients in each edge's area.
    #[arg(long, default_value_t = 4)]
    pub clients_per_edge: usize,
    /// Seconds an idle instance is kept before it is stopped (the nodes' `keep_alive_s`).
    #[arg(long, default_value_t = 5)]
    pub keep_alive_s: u64,
    /// CPU ms each new instance of a generated function spends at its first call before it
    /// answers (a model loaded, a cache filled: a cold start that costs more than a fork).
    #[arg(long, default_value_t = 0)]
    pub init_ms: u64,
    /// Latency objective of every call, ms, for the SLO violations in summary.json.
    #[arg(long, default_value_t = 1000.0)]
    pub slo_ms: f64,
    /// Call every function once at every node before the measured calls (not recorded), then
    /// wait two probe intervals for the nodes' load reports to carry what they measured: every
    /// measured call is then placed by the nodes' policies, none is the first call of its
    /// function, which no policy places (nothing is known of it). Idle instances are still
    /// evicted after --keep-alive-s, so rare functions still start cold.
    #[arg(long)]
    pub warm: bool,
}

/// Arguments of `geofaas loadtest soak`.
#[derive(Debug, Args)]
pub struct SoakArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub common: CommonArgs,
    /// How long the load runs, seconds.
    #[arg(long, default_value_t = 3600)]
    pub duration_s: u64,
    /// Mean arrival rate, calls per second (Poisson arrivals, open loop).
    #[arg(long, default_value_t = 200.0)]
    pub rate: f64,
    /// The functions called besides the deployed one, drawn uniformly (comma-separated); each
    /// must answer 2xx to a POST of an empty body at its root.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "echo,hello-node,sieve,echo-binary"
    )]
    pub function_mix: Vec<String>,
    /// Deploy a new version of `soak` to every node this often, seconds (0: never, and
    /// `soak` is not called).
    #[arg(long, default_value_t = 60)]
    pub deploy_every_s: u64,
    /// Restart one node this often, seconds (0: never); half a deploy interval after a
    /// deploy.
    #[arg(long, default_value_t = 600)]
    pub restart_every_s: u64,
    /// The node restarted (default: the topology's last edge).
    #[arg(long)]
    pub restart_node: Option<String>,
    /// Read every node process from /proc this often, seconds.
    #[arg(long, default_value_t = 10)]
    pub sample_every_s: u64,
    /// Width of one window of windows.csv (and of the plot's points), seconds.
    #[arg(long, default_value_t = 10)]
    pub window_s: u64,
    /// Growth is measured from this long after a process started (the fleet warming up).
    #[arg(long, default_value_t = 600)]
    pub settle_s: u64,
    /// Static clients in each edge's area.
    #[arg(long, default_value_t = 4)]
    pub clients_per_edge: usize,
    /// Seed of the client locations, the arrivals and the functions drawn.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
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
        Mode::Mobility(a) if a.compare_prewarm => crate::prewarm::run(&a).await,
        Mode::Mobility(a) => {
            let ctx = Ctx::setup(&a.common, 1000).await?;
            crate::mobility::run(&ctx, &a).await?;
            crate::scrape::save_metrics(&ctx).await
        }
        Mode::Highload(a) => {
            let ctx = Ctx::setup(&a.common, 30_000).await?;
            crate::highload::run(&ctx, &a).await?;
            crate::scrape::save_metrics(&ctx).await
        }
        Mode::Outage(a) => {
            let ctx = Ctx::setup(&a.common, 1000).await?;
            crate::outage::run(&ctx, &a).await
        }
        Mode::Mixed(a) => crate::mixed::run(&a).await,
        Mode::Soak(a) => crate::soak::run(&a).await,
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
        let topology = Topology::load(&a.topology)?;
        Self::setup_topology(a, default_timeout_ms, topology).await
    }

    /// [`Ctx::setup`] with `topology` loaded (and changed) by the caller.
    pub async fn setup_topology(
        a: &CommonArgs,
        default_timeout_ms: u64,
        topology: Topology,
    ) -> anyhow::Result<Self> {
        if a.netem {
            crate::netem::check()?;
        }
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
            let delays = (!a.no_delays && !a.netem)
                .then(|| -> anyhow::Result<DelaySpec> {
                    let ms = |v: f64, name: &str| {
                        anyhow::ensure!(
                            v.is_finite() && v >= 0.0,
                            "--{name} must be a number of ms >= 0"
                        );
                        Ok(Duration::from_secs_f64(v / 1000.0))
                    };
                    Ok(DelaySpec {
                        edge_rtt: ms(a.edge_rtt_ms, "edge-rtt-ms")?,
                        cloud_rtt: ms(a.cloud_rtt_ms, "cloud-rtt-ms")?,
                    })
                })
                .transpose()?;
            eprintln!("starting {} nodes ...", topology.nodes.len());
            let s = Spawned::start_with(&topology, &bin, a.state_dir.as_deref(), delays).await?;
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
        client.location_header = match a.geohash {
            Some(len) => LocationHeader::Geohash(len.into()),
            None => LocationHeader::ClientLocation,
        };
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
        let home = self.map.responsible(location);
        c.entry = self.entry.clone().unwrap_or_else(|| {
            self.spawned
                .as_ref()
                .and_then(|s| s.entry_url(&home.id))
                .unwrap_or_else(|| home.public_url.clone())
        });
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
        let (delays, model) = self.delay_model();
        summary.delays = delays;
        summary.delay_model = model;
        summary.load = match open_loop_rate {
            Some(r) => format!("open loop at {r} calls/s (latency from the planned send time)"),
            None => "closed loop (each call waits for the previous answer)".to_owned(),
        };
    }

    /// What `summary.json` says about network delays: a sentence and the figures.
    pub fn delay_model(&self) -> (String, serde_json::Value) {
        let Some(s) = &self.spawned else {
            return (
                "none injected: a running deployment, whatever its network adds".to_owned(),
                serde_json::json!({ "kind": "none" }),
            );
        };
        let Some(spec) = s.delays else {
            return (
                "none: loopback, no netem, --no-delays".to_owned(),
                serde_json::json!({ "kind": "none" }),
            );
        };
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let text = format!(
            "loadtest delay model (userspace TCP relays, not netem: this kernel has no sch_netem): \
             +{} ms round trip ({} ms each way) to the cloud, +{} ms round trip ({} ms each way) \
             to an edge through its public URL; the client reaches its home edge directly",
            ms(spec.cloud_rtt),
            ms(spec.cloud_rtt) / 2.0,
            ms(spec.edge_rtt),
            ms(spec.edge_rtt) / 2.0,
        );
        let model = serde_json::json!({
            "kind": "relay",
            "cloud_rtt_ms": ms(spec.cloud_rtt),
            "cloud_one_way_ms": ms(spec.cloud_rtt) / 2.0,
            "edge_rtt_ms": ms(spec.edge_rtt),
            "edge_one_way_ms": ms(spec.edge_rtt) / 2.0,
            "client_to_home_edge": "direct (0 ms): the client's first connection goes to the node's listen address",
            "crosses_the_cloud_link": "every connection to the cloud's public URL: client retries and fallback calls, 307s to the cloud, edge-to-cloud offloads",
            "crosses_an_edge_link": "every connection to an edge's public URL: 307 handovers to another edge and the calls after them",
            "not_modelled": "the TCP handshake with a relay (completes at once on loopback; TLS handshakes and data are delayed), bandwidth, loss",
            "links": s.links,
        });
        (text, model)
    }

    /// `out/<name>`.
    pub fn out_file(&self, name: &str) -> PathBuf {
        self.out.join(name)
    }
}

fn read(p: &Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(p).with_context(|| format!("cannot read {}", p.display()))
}
