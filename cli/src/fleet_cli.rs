//! `geofaas fleet ls`: the registered nodes with their areas, health, load and lease, read once
//! from etcd.

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
}

/// Runs `geofaas fleet`.
pub async fn run(args: FleetArgs) -> anyhow::Result<()> {
    match args.command {
        FleetCommand::Ls(ls) => {
            let settings = settings(&ls)?;
            let table = list(&settings, ls.wide).await?;
            print!("{table}");
            Ok(())
        }
    }
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

/// The table `geofaas fleet ls` prints.
pub async fn list(settings: &RegistrySettings, wide: bool) -> anyhow::Result<String> {
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
    let stale_ms = settings.load_interval_ms.saturating_mul(3);
    let mut out = format!(
        "{:<16} {:<6} {:<28} {:<8} {:>6} {:>7} {:>6} {:>8} {:>12} {:>9}  {}\n",
        "NODE",
        "ROLE",
        "URL",
        "HEALTH",
        "QUEUE",
        "RUNNING",
        "CPU%",
        "MEM_MB",
        "WARM(b/i)",
        "LEASE",
        "AREA"
    );
    for kv in &nodes {
        let Ok(rec) = serde_json::from_slice::<NodeRecord>(&kv.value) else {
            continue;
        };
        let lease = match etcd.time_to_live(kv.lease).await {
            Ok(Some((left, granted))) => format!("{left}/{granted}s"),
            Ok(None) => "expired".to_owned(),
            Err(_) => "?".to_owned(),
        };
        let load = loads.iter().find(|l| l.node == rec.id);
        let fresh = load.filter(|l| now_ms().saturating_sub(l.at_ms) <= stale_ms);
        let health = match (load, fresh) {
            (_, Some(_)) => "up",
            (Some(_), None) => "stale",
            (None, _) => "no-load",
        };
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
            "{:<16} {:<6} {:<28} {:<8} {:>6} {:>7} {:>6} {:>8} {:>12} {:>9}  {}\n",
            rec.id,
            role,
            rec.public_url.as_str(),
            health,
            num(&|l| l.load.queued.to_string()),
            num(&|l| l.load.running.to_string()),
            num(&|l| format!("{:.0}", l.cpu_percent)),
            num(&|l| (l.memory_bytes / (1024 * 1024)).to_string()),
            format!("{busy}/{idle}"),
            lease,
            area,
        ));
    }
    if nodes.is_empty() {
        out.push_str("(no node registered)\n");
    }
    Ok(out)
}
