//! `geofaas fleet ls`: the registered nodes with their areas, health, load and lease, read once
//! from etcd, and each node's own word on its health (its `/readyz`, probed at once, and the
//! age of its last load report; [`crate::fleet_health`]).

use std::path::PathBuf;

use anyhow::Context;
use geofaas_config::{RegistrySettings, Topology};
use geofaas_fleet::{record::now_ms, Etcd, LoadReport, NodeRecord};

/// Flags of `geofaas fleet`.
#[derive(Debug, clap::Args)]
pub struct FleetArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: FleetCommand,
}

/// Subcommands of `geofaas fleet`.
#[derive(Debug, clap::Subcommand)]
pub enum FleetCommand {
    /// List the registered nodes: role, area, health, load, lease.
    Ls(LsArgs),
}

/// Flags of `geofaas fleet ls`.
#[derive(Debug, clap::Args)]
pub struct LsArgs {
    /// Topology file whose `[registry]` to read.
    #[arg(long, short, required_unless_present = "etcd")]
    pub config: Option<PathBuf>,
    /// etcd client URL instead of the file's (repeat for more), with default settings.
    #[arg(long)]
    pub etcd: Vec<url::Url>,
    /// Print the full area WKT instead of its first 40 characters.
    #[arg(long)]
    pub wide: bool,
    /// CA certificate the nodes' certificates are checked against when probing their
    /// `/readyz` (default: the topology's `[tls] ca`, else the system's roots).
    #[arg(long)]
    pub cacert: Option<PathBuf>,
}

/// Runs `geofaas fleet`.
pub async fn run(args: FleetArgs) -> anyhow::Result<()> {
    match args.command {
        FleetCommand::Ls(ls) => {
            let settings = settings(&ls)?;
            let probe = crate::fleet_health::Prober::new(ca(&ls)?.as_deref())?;
            let table = list(&settings, &probe, ls.wide).await?;
            print!("{table}");
            Ok(())
        }
    }
}

/// The CA to check nodes against: `--cacert`, else the topology's `[tls] ca`.
fn ca(ls: &LsArgs) -> anyhow::Result<Option<PathBuf>> {
    if ls.cacert.is_some() {
        return Ok(ls.cacert.clone());
    }
    let Some(path) = &ls.config else {
        return Ok(None);
    };
    let topology = Topology::load(path)?;
    let ca = topology.tls.as_ref().and_then(|t| t.ca.as_ref());
    Ok(ca.map(|p| topology.resolve(p)))
}

fn settings(ls: &LsArgs) -> anyhow::Result<RegistrySettings> {
    if !ls.etcd.is_empty() {
        return Ok(RegistrySettings::new(ls.etcd.clone()));
    }
    let path = ls.config.as_ref().context("--config or --etcd")?;
    let topology = Topology::load(path)?;
    topology
        .registry
        .with_context(|| format!("{}: no [registry] section", topology.source))
}

/// The table `geofaas fleet ls` prints; `probe` asks each node for its `/readyz`.
pub async fn list(
    settings: &RegistrySettings,
    probe: &crate::fleet_health::Prober,
    wide: bool,
) -> anyhow::Result<String> {
    let etcd = Etcd::connect(settings)?;
    let prefix = &settings.prefix;
    let (nodes, _) = etcd
        .range_prefix(format!("{prefix}nodes/").as_bytes())
        .await
        .context("reading the registry")?;
    let (loads, _) = etcd
        .range_prefix(format!("{prefix}load/").as_bytes())
        .await?;
    let loads: Vec<LoadReport> = loads
        .iter()
        .filter_map(|kv| serde_json::from_slice(&kv.value).ok())
        .collect();
    let records: Vec<(NodeRecord, i64)> = nodes
        .iter()
        .filter_map(|kv| Some((serde_json::from_slice(&kv.value).ok()?, kv.lease)))
        .collect();
    let urls: Vec<&url::Url> = records.iter().map(|(r, _)| &r.public_url).collect();
    let probes = probe.all(&urls).await;
    let mut notes = String::new();
    let mut out = format!(
        "{:<16} {:<6} {:<28} {:<9} {:>7} {:>6} {:>7} {:>6} {:>8} {:>12} {:>9}  {}\n",
        "NODE",
        "ROLE",
        "URL",
        "HEALTH",
        "REPORT",
        "QUEUE",
        "RUNNING",
        "CPU%",
        "MEM_MB",
        "WARM(b/i)",
        "LEASE",
        "AREA"
    );
    for ((rec, lease), answer) in records.iter().zip(&probes) {
        let probe = &answer.probe;
        let lease = match etcd.time_to_live(*lease).await {
            Ok(Some((left, granted))) => format!("{left}/{granted}s"),
            Ok(None) => "expired".to_owned(),
            Err(_) => "?".to_owned(),
        };
        let load = loads.iter().find(|l| l.node == rec.id);
        let age_ms = load.map(|l| now_ms().saturating_sub(l.at_ms));
        let interval = settings.load_interval_ms;
        let health = crate::fleet_health::health(probe, age_ms, interval);
        let fresh = load.filter(|_| crate::fleet_health::is_fresh(age_ms, interval));
        if let crate::fleet_health::Probe::Unreachable(why) = probe {
            notes.push_str(&format!("{}: /readyz: {why}\n", rec.id));
        }
        if let Some(note) = crate::fleet_health::clock_note(&rec.id, answer.clock_offset_s) {
            notes.push_str(&note);
            notes.push('\n');
        }
        let report =
            age_ms.map_or_else(|| "-".to_owned(), |a| format!("{:.1}s", a as f64 / 1000.0));
        let (busy, idle) = fresh.map_or((0, 0), |l| {
            l.load
                .functions
                .values()
                .fold((0, 0), |(b, i), f| (b + f.busy, i + f.idle))
        });
        let area = if wide || rec.area.len() <= 40 {
            rec.area.clone()
        } else {
            format!("{}...", rec.area.chars().take(40).collect::<String>())
        };
        let role = format!("{:?}", rec.role).to_lowercase();
        let num = |f: &dyn Fn(&LoadReport) -> String| fresh.map_or_else(|| "-".to_owned(), f);
        out.push_str(&format!(
            "{:<16} {:<6} {:<28} {:<9} {:>7} {:>6} {:>7} {:>6} {:>8} {:>12} {:>9}  {}\n",
            rec.id,
            role,
            rec.public_url.as_str(),
            health,
            report,
            num(&|l| l.load.queued.to_string()),
            num(&|l| l.load.running.to_string()),
            num(&|l| format!("{:.1}", l.cpu_percent)),
            num(&|l| (l.memory_bytes / (1024 * 1024)).to_string()),
            format!("{busy}/{idle}"),
            lease,
            area,
        ));
    }
    if nodes.is_empty() {
        out.push_str("(no node registered)\n");
    }
    out.push_str(&notes);
    Ok(out)
}
