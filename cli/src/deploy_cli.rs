//! `geofaas deploy`, `geofaas rollback` and `geofaas functions ls|rm`: the admin API of
//! deployed functions ([`geofaas_gateway::admin::deploy`]) on every node, at once.
//!
//! The nodes come from the running `geofaas up` of the state folder (its `up.json`), or with
//! `--config` from the topology and, with `[registry]`, the nodes registered in etcd. The admin
//! key, where nodes have keys, comes from `GEOFAAS_ADMIN_KEY`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use geofaas_config::Topology;
use serde_json::Value;

use geofaas_gateway::deploy::bundle::Bundle;
use geofaas_gateway::deploy::store::VersionEnv;
use geofaas_gateway::deploy::wire::{CRON_HEADER, ENV_HEADER, ON_HEADER, SECRET_HEADER};

/// Environment variable holding the admin key sent as a bearer token.
pub const ADMIN_KEY_ENV: &str = "GEOFAAS_ADMIN_KEY";
/// How long one node may take to answer an admin request (a deploy starts an instance).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
/// How long connecting to one node may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Which nodes a command goes to.
#[derive(Debug, Clone, clap::Args)]
pub struct Target {
    /// State folder of a running `geofaas up`, whose nodes are used when no --config is given.
    #[arg(long, default_value = ".geofaas")]
    pub state_dir: PathBuf,
    /// Topology file: every node of it, and of its etcd `[registry]`.
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// Only this node (repeat for more).
    #[arg(long = "node", value_name = "ID")]
    pub nodes: Vec<String>,
    /// CA certificate the nodes' certificates are checked against (default: up's, or the
    /// topology's `[tls] ca`).
    #[arg(long)]
    pub cacert: Option<PathBuf>,
}

/// Flags of `geofaas deploy`.
#[derive(Debug, clap::Args)]
pub struct DeployArgs {
    /// The function folder (tinyFaaS format: fn.py, index.js/package.json or fn.sh).
    pub dir: PathBuf,
    /// Function name (default: the folder's name).
    #[arg(long)]
    pub name: Option<String>,
    /// An environment variable of the function's processes (repeat for more).
    #[arg(long = "env", value_name = "KEY=VALUE")]
    pub env: Vec<String>,
    /// A secret: KEY gets the value of ENV_VAR in this shell's environment (repeat for more).
    /// Secret values are never printed, logged or shown by `functions ls`.
    #[arg(long = "secret", value_name = "KEY=ENV_VAR")]
    pub secret: Vec<String>,
    /// Roll out to this percentage of callers (1-99; the same caller keeps its version) until
    /// a deploy without --percent promotes it or `rollback` ends it.
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=100))]
    pub percent: Option<u8>,
    /// Call the function on this schedule (repeat for more): a cron expression in UTC, five
    /// fields (`*/5 * * * *`: every five minutes), six with seconds first (`*/2 * * * * *`),
    /// or `@hourly`, `@daily`, .... Each tick runs once across the fleet; see docs/events.md.
    #[arg(long = "cron", value_name = "EXPR")]
    pub cron: Vec<String>,
    /// Call the function with each message published on this NATS subject (repeat for more):
    /// `nats:SUBJECT`, wildcards `*` and `>` allowed. Needs the fleet's queue (`[queue]`);
    /// each message runs at least once, with the retries of an asynchronous call; see
    /// docs/events.md.
    #[arg(long = "on", value_name = "nats:SUBJECT")]
    pub on: Vec<String>,
    /// Which nodes.
    #[command(flatten)]
    pub target: Target,
}

/// Flags of `geofaas rollback`.
#[derive(Debug, clap::Args)]
pub struct RollbackArgs {
    /// Function name.
    pub name: String,
    /// The version to switch to (default: the one deployed before the live one; during a
    /// rollout, rollback ends the rollout).
    #[arg(long)]
    pub to: Option<String>,
    /// Which nodes.
    #[command(flatten)]
    pub target: Target,
}

/// Subcommands of `geofaas functions`.
#[derive(Debug, clap::Subcommand)]
pub enum FunctionsCommand {
    /// Each deployed function: live version per node, rollout share, kept versions.
    Ls(Target),
    /// Stop serving a deployed function and delete its versions on every node.
    Rm {
        /// Function name.
        name: String,
        /// Which nodes.
        #[command(flatten)]
        target: Target,
    },
}

/// One node to talk to.
#[derive(Debug, Clone)]
pub(crate) struct Node {
    pub(crate) id: String,
    pub(crate) url: String,
}

/// The nodes and an HTTPS client that trusts them.
pub(crate) struct Nodes {
    pub(crate) nodes: Vec<Node>,
    client: reqwest::Client,
    key: Option<String>,
}

impl Nodes {
    pub(crate) async fn resolve(target: &Target) -> anyhow::Result<Self> {
        Self::resolve_with(target, Some(REQUEST_TIMEOUT)).await
    }

    /// The nodes of `target`, with a client whose requests end after `timeout` (`None`: only
    /// connecting is bounded, for answers that stream).
    pub(crate) async fn resolve_with(
        target: &Target,
        timeout: Option<Duration>,
    ) -> anyhow::Result<Self> {
        let (mut nodes, ca) = match &target.config {
            Some(path) => from_topology(path).await?,
            None => from_up(&target.state_dir)?,
        };
        if !target.nodes.is_empty() {
            let known: Vec<String> = nodes.iter().map(|n| n.id.clone()).collect();
            for id in &target.nodes {
                anyhow::ensure!(
                    known.contains(id),
                    "--node {id}: no such node; nodes are {}",
                    known.join(", ")
                );
            }
            nodes.retain(|n| target.nodes.contains(&n.id));
        }
        let mut client = reqwest::Client::builder().connect_timeout(CONNECT_TIMEOUT);
        if let Some(timeout) = timeout {
            client = client.timeout(timeout);
        }
        if let Some(ca) = target.cacert.clone().or(ca) {
            let pem = std::fs::read(&ca).with_context(|| format!("reading {}", ca.display()))?;
            client = client.add_root_certificate(reqwest::Certificate::from_pem(&pem)?);
        }
        let key = std::env::var(ADMIN_KEY_ENV).ok().filter(|k| !k.is_empty());
        Ok(Self {
            nodes,
            client: client.build()?,
            key,
        })
    }

    pub(crate) fn request(
        &self,
        method: reqwest::Method,
        node: &Node,
        path: &str,
    ) -> reqwest::RequestBuilder {
        let url = format!("{}{path}", node.url.trim_end_matches('/'));
        let req = self.client.request(method, url);
        match &self.key {
            Some(k) => req.bearer_auth(k),
            None => req,
        }
    }

    /// Sends one request per node at once; each node's JSON answer or error message.
    pub(crate) async fn each(
        &self,
        make: impl Fn(&Node) -> reqwest::RequestBuilder,
    ) -> Vec<(Node, Result<Value, String>)> {
        let calls = self.nodes.iter().map(|n| {
            let req = make(n);
            async move { (n.clone(), answer(req).await) }
        });
        futures::future::join_all(calls).await
    }
}

/// The nodes of the `geofaas up` running from `state_dir`.
fn from_up(state_dir: &Path) -> anyhow::Result<(Vec<Node>, Option<PathBuf>)> {
    let running = crate::up::RunningDemo::read(state_dir)?.with_context(|| {
        format!(
            "no `geofaas up` runs from this folder ({} has no up.json); start one here, or \
             pass --state-dir or --config",
            state_dir.display()
        )
    })?;
    let nodes = running
        .nodes
        .into_iter()
        .map(|n| Node {
            id: n.id,
            url: n.url,
        })
        .collect();
    Ok((nodes, Some(running.ca)))
}

/// The nodes of a topology file and of its registry.
async fn from_topology(path: &Path) -> anyhow::Result<(Vec<Node>, Option<PathBuf>)> {
    let topology = Topology::load(path)?;
    let mut nodes: BTreeMap<String, Node> = topology
        .nodes
        .iter()
        .map(|n| {
            let node = Node {
                id: n.id.clone(),
                url: n.public_url.to_string(),
            };
            (n.id.clone(), node)
        })
        .collect();
    if let Some(registry) = &topology.registry {
        let etcd = geofaas_fleet::Etcd::connect(registry)?;
        let prefix = format!("{}nodes/", registry.prefix);
        let (kvs, _) = etcd
            .range_prefix(prefix.as_bytes())
            .await
            .context("reading the registry's nodes")?;
        for kv in kvs {
            if let Ok(r) = serde_json::from_slice::<geofaas_fleet::NodeRecord>(&kv.value) {
                let node = Node {
                    id: r.id.clone(),
                    url: r.public_url.to_string(),
                };
                nodes.insert(r.id, node);
            }
        }
    }
    let ca = topology
        .tls
        .as_ref()
        .and_then(|t| t.ca.as_ref())
        .map(|p| topology.resolve(p));
    Ok((nodes.into_values().collect(), ca))
}

/// The JSON of a 2xx answer, else the error's message as the node said it.
async fn answer(req: reqwest::RequestBuilder) -> Result<Value, String> {
    let resp = req.send().await.map_err(|e| describe(&e))?;
    let status = resp.status();
    let bytes = resp.bytes().await.map_err(|e| describe(&e))?;
    let json: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    if status.is_success() {
        return Ok(json);
    }
    Err(json["error"]["message"]
        .as_str()
        .map(|m| format!("{status}: {m}"))
        .unwrap_or_else(|| format!("{status}: {}", String::from_utf8_lossy(&bytes).trim())))
}

pub(crate) fn describe(e: &reqwest::Error) -> String {
    let mut msg = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        source = s.source();
    }
    if let Some(hint) = certificate_hint(&msg) {
        msg.push_str(hint);
    }
    msg
}

/// What to do about a node certificate this command does not trust (rustls says
/// `UnknownIssuer`): the usual cause is a topology run by `geofaas up`, whose CA lives in its
/// state folder, not in the topology's `[tls] ca`.
fn certificate_hint(msg: &str) -> Option<&'static str> {
    msg.contains("UnknownIssuer").then_some(
        " (the node's certificate is not signed by the CA this command trusts: pass --cacert \
         with the CA that signed it; a `geofaas up` writes its CA to STATE_DIR/ca.pem, and \
         `--state-dir STATE_DIR` without --config uses it)",
    )
}

/// `KEY=VALUE` split at the first `=`.
fn pair(flag: &str, text: &str) -> anyhow::Result<(String, String)> {
    let (k, v) = text
        .split_once('=')
        .with_context(|| format!("{flag} {text:?}: expected KEY=VALUE"))?;
    anyhow::ensure!(!k.is_empty(), "{flag} {text:?}: the name is empty");
    Ok((k.to_owned(), v.to_owned()))
}

/// Runs `geofaas deploy`.
pub async fn deploy(args: DeployArgs) -> anyhow::Result<()> {
    let dir = &args.dir;
    let name = match &args.name {
        Some(n) => n.clone(),
        None => std::path::absolute(dir)?
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .with_context(|| format!("{}: give the function a --name", dir.display()))?,
    };
    let mut env = Vec::new();
    for e in &args.env {
        env.push(pair("--env", e)?);
    }
    let mut secrets = Vec::new();
    for s in &args.secret {
        let (key, var) = pair("--secret", s)?;
        let value = std::env::var(&var).with_context(|| {
            format!("--secret {key}={var}: the environment variable {var} is not set")
        })?;
        secrets.push((key, value));
    }
    let bundle = Bundle::from_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
    // Checked here as the node will: a folder the runtime cannot serve is not sent at all.
    geofaas_functions::local::load_function(&name, dir).map_err(|e| anyhow::anyhow!("{e}"))?;
    let version = bundle.version(&VersionEnv {
        env: env.clone(),
        secrets: secrets.clone(),
        cron: args.cron.iter().map(|c| c.trim().to_owned()).collect(),
        on: args.on.iter().map(|c| c.trim().to_owned()).collect(),
    });
    let packed = bundle.pack()?;
    let nodes = Nodes::resolve(&args.target).await?;
    println!(
        "deploying {name} version {version} ({} files, {} bytes packed) to {} node(s)",
        bundle.files().len(),
        packed.len(),
        nodes.nodes.len()
    );
    let path = match args.percent {
        Some(p) => format!("/admin/functions/{name}?percent={p}"),
        None => format!("/admin/functions/{name}"),
    };
    let started = Instant::now();
    let results = nodes
        .each(|n| {
            let mut req = nodes
                .request(reqwest::Method::PUT, n, &path)
                .header(reqwest::header::CONTENT_TYPE, "application/gzip")
                .body(packed.clone());
            for (k, v) in &env {
                req = req.header(ENV_HEADER, format!("{k}={v}"));
            }
            for (k, v) in &secrets {
                req = req.header(SECRET_HEADER, format!("{k}={v}"));
            }
            for expr in &args.cron {
                req = req.header(CRON_HEADER, expr.trim());
            }
            for spec in &args.on {
                req = req.header(ON_HEADER, spec.trim());
            }
            req
        })
        .await;
    report(&results, started, |json| {
        let f = &json["function"];
        format!(
            "version {} {}{}",
            json["version"].as_str().unwrap_or("?"),
            serving(f),
            registry_note(json)
        )
    })
}

/// What a node said about the fleet's record, when etcd did not take it.
fn registry_note(json: &Value) -> String {
    match json["registry_error"].as_str() {
        Some(e) => format!(" (served here; {e})"),
        None => String::new(),
    }
}

/// Runs `geofaas rollback`.
pub async fn rollback(args: RollbackArgs) -> anyhow::Result<()> {
    let nodes = Nodes::resolve(&args.target).await?;
    let path = match &args.to {
        Some(to) => format!("/admin/functions/{}/rollback?to={to}", args.name),
        None => format!("/admin/functions/{}/rollback", args.name),
    };
    let started = Instant::now();
    let results = nodes
        .each(|n| nodes.request(reqwest::Method::POST, n, &path))
        .await;
    report(&results, started, |json| {
        format!("{}{}", serving(&json["function"]), registry_note(json))
    })
}

/// Runs `geofaas functions ls|rm`.
pub async fn functions(cmd: FunctionsCommand) -> anyhow::Result<()> {
    match cmd {
        FunctionsCommand::Ls(target) => {
            let nodes = Nodes::resolve(&target).await?;
            let results = nodes
                .each(|n| nodes.request(reqwest::Method::GET, n, "/admin/functions"))
                .await;
            print!("{}", ls_table(&results));
            let mut failed = Vec::new();
            for (node, result) in &results {
                if let Err(why) = result {
                    eprintln!("{}: {why}", node.id);
                    failed.push(node.id.as_str());
                }
            }
            anyhow::ensure!(failed.is_empty(), "no answer from {}", failed.join(", "));
            Ok(())
        }
        FunctionsCommand::Rm { name, target } => {
            let nodes = Nodes::resolve(&target).await?;
            let path = format!("/admin/functions/{name}");
            let started = Instant::now();
            let results = nodes
                .each(|n| nodes.request(reqwest::Method::DELETE, n, &path))
                .await;
            // With a registry a node may have removed it already, following another node's
            // removal through etcd: that is not a failure, unless no node had it.
            let any_removed = results.iter().any(|(_, r)| r.is_ok());
            let results: Vec<_> = results
                .into_iter()
                .map(|(n, r)| match r {
                    Err(e) if any_removed && e.starts_with("404") => {
                        (n, Ok(serde_json::json!({"already": true})))
                    }
                    r => (n, r),
                })
                .collect();
            report(&results, started, |j| match j["already"].as_bool() {
                Some(true) => "already removed (it followed the fleet)".to_owned(),
                _ => "removed".to_owned(),
            })
        }
    }
}

/// `live X` or `live X, rollout Y at P %`.
fn serving(f: &Value) -> String {
    let live = f["live"].as_str().unwrap_or("-");
    match f["rollout"].as_object() {
        Some(r) => format!(
            "live {live}, rollout {} at {} %",
            r.get("version").and_then(Value::as_str).unwrap_or("?"),
            r.get("percent").and_then(Value::as_u64).unwrap_or(0)
        ),
        None => format!("live {live}"),
    }
}

/// Prints one line per node; an error naming every node that failed.
fn report(
    results: &[(Node, Result<Value, String>)],
    started: Instant,
    ok: impl Fn(&Value) -> String,
) -> anyhow::Result<()> {
    let width = results.iter().map(|(n, _)| n.id.len()).max().unwrap_or(4);
    let mut failed = Vec::new();
    for (node, result) in results {
        match result {
            Ok(json) => println!("  {:<width$}  ok      {}", node.id, ok(json)),
            Err(e) => {
                println!("  {:<width$}  FAILED  {e}", node.id);
                failed.push(node.id.as_str());
            }
        }
    }
    println!("({} ms)", started.elapsed().as_millis());
    anyhow::ensure!(
        failed.is_empty(),
        "{} of {} node(s) did not take it: {}",
        failed.len(),
        results.len(),
        failed.join(", ")
    );
    Ok(())
}

/// The table `geofaas functions ls` prints: one row per function and node.
fn ls_table(results: &[(Node, Result<Value, String>)]) -> String {
    let mut out = format!(
        "{:<20} {:<12} {:<13} {:<20} {:<27} {}\n",
        "FUNCTION", "NODE", "LIVE", "ROLLOUT", "PREVIOUS", "TRIGGERS"
    );
    let mut rows = Vec::new();
    for (node, result) in results {
        let Ok(json) = result else {
            rows.push((
                "~".to_owned(),
                format!("{:<20} {:<12} (no answer)\n", "?", node.id),
            ));
            continue;
        };
        for f in json["functions"].as_array().into_iter().flatten() {
            let name = f["name"].as_str().unwrap_or("?").to_owned();
            let live = f["live"].as_str().unwrap_or("-");
            let rollout = f["rollout"].as_object().map_or("-".to_owned(), |r| {
                format!(
                    "{} {}%",
                    r.get("version").and_then(Value::as_str).unwrap_or("?"),
                    r.get("percent").and_then(Value::as_u64).unwrap_or(0)
                )
            });
            let previous: Vec<&str> = f["versions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v["id"].as_str())
                .filter(|id| *id != live)
                .collect();
            let previous = if previous.is_empty() {
                "-".to_owned()
            } else {
                previous.join(" ")
            };
            let cron: Vec<&str> = ["cron", "on"]
                .iter()
                .flat_map(|k| f[k].as_array().into_iter().flatten())
                .filter_map(Value::as_str)
                .collect();
            let cron = if cron.is_empty() {
                "-".to_owned()
            } else {
                cron.join("; ")
            };
            let row = format!(
                "{name:<20} {:<12} {live:<13} {rollout:<20} {previous:<27} {cron}\n",
                node.id
            );
            rows.push((name, row));
        }
    }
    rows.sort();
    for (_, row) in rows {
        out.push_str(&row);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_untrusted_node_certificate_gets_a_hint_naming_the_flags() {
        let rustls = "error sending request for url (https://127.0.0.71:9443/admin/functions): \
                      client error (Connect): invalid peer certificate: UnknownIssuer";
        let hint = certificate_hint(rustls).expect("a hint");
        assert!(
            hint.contains("--cacert") && hint.contains("ca.pem"),
            "{hint}"
        );
        assert!(certificate_hint("connection refused").is_none());
    }
}
