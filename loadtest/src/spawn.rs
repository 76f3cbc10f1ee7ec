//! `--spawn`: every node of a topology as its own `geofaas node` child process, with a fresh CA
//! and node certificate (rcgen) and a derived topology file that names them, so a run can kill
//! one node for real (SIGKILL) while the others keep serving.
//!
//! The state folder (a temporary one unless `--state-dir` names one) holds `ca.pem`,
//! `node.pem`, `node-key.pem`, `topology.toml` and one `<node>.log` per node.
//!
//! With a [`DelaySpec`] (the loadtest's own delay model, `--spawn` without `--no-delays`), every
//! node gets a [`Relay`] on its own address (a free port) in front of its `listen` address, and
//! the derived topology's `public_url` of the node names the relay. Everything that reaches a
//! node through its public URL therefore crosses its link: the cloud's relay delays each
//! direction by half the cloud round-trip time (25 ms in the paper), each edge's by half the
//! edge-to-edge one (5 ms). That covers an edge's offloads (the gateway's cloud link is built
//! from the cloud's `public_url`), the client's retries at the cloud and every `307` (its
//! `Location` is the target's `public_url`). Only the client's first connection, to the edge
//! whose area holds it (its home edge, [`Spawned::entry_url`]), goes to the node directly: the
//! client sits in its home edge's network, the other edge is one edge-to-edge link away and the
//! cloud 25 ms away from everything. The node's certificate names the same IP addresses, so TLS
//! still verifies through a relay.

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use geofaas_config::{AreaConfig, BackendConfig, Role, TlsSettings, Topology};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use rand::RngCore;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use url::Url;

use crate::delay::Relay;

/// How long the nodes get to answer `/readyz` after they were started.
const READY_DEADLINE: Duration = Duration::from_secs(60);
/// How long a node gets to stop after SIGTERM before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// The loadtest's own delay model: round-trip times a relay adds in front of each node.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DelaySpec {
    /// Round-trip time to reach an edge through its public URL (the paper's edge-to-edge link).
    pub edge_rtt: Duration,
    /// Round-trip time to reach the cloud (the paper's 25 ms ping to London).
    pub cloud_rtt: Duration,
}

impl DelaySpec {
    /// The paper's figures: 5 ms between edges, 25 ms to the cloud.
    pub const PAPER: Self = Self {
        edge_rtt: Duration::from_millis(5),
        cloud_rtt: Duration::from_millis(25),
    };
}

/// One relay of the delay model, as `summary.json` reports it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct DelayLink {
    /// The node behind the relay.
    pub node: String,
    /// `edge` or `cloud`.
    pub role: String,
    /// Where the relay listens (the node's `public_url` in the derived topology).
    pub relay: SocketAddr,
    /// The node's own address (its `listen`).
    pub target: SocketAddr,
    /// Delay of each direction, ms.
    pub one_way_ms: f64,
    /// Round-trip time the relay adds, ms.
    pub rtt_ms: f64,
}

/// The node processes of one run.
#[derive(Debug)]
pub struct Spawned {
    _tmp: Option<tempfile::TempDir>,
    launch: Launch,
    /// Folder with the certificates, the derived topology and the node logs.
    pub state_dir: PathBuf,
    /// The derived topology (absolute paths, `[tls]` set) as the nodes loaded it.
    pub topology: Topology,
    /// The generated CA, for the client.
    pub ca_pem: Vec<u8>,
    children: Mutex<BTreeMap<String, Child>>,
    /// The delay model's relays (none without one). Dropped after the nodes.
    relays: Vec<Relay>,
    /// What the relays do, per node.
    pub links: Vec<DelayLink>,
    /// The delay model, if any.
    pub delays: Option<DelaySpec>,
    /// Each node's own address as a URL (what the client's home edge is called at).
    direct: BTreeMap<String, Url>,
}

/// A node that was killed.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Killed {
    /// Node id.
    pub node: String,
    /// Its process id.
    pub pid: u32,
    /// The signal that ended it (9 for SIGKILL), as the kernel reported it.
    pub signal: Option<i32>,
}

/// A node that was restarted.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Restarted {
    /// Node id.
    pub node: String,
    /// The process that was stopped.
    pub old_pid: u32,
    /// The process started in its place.
    pub new_pid: u32,
    /// How the old process ended (`exit status: 0` after a clean drain).
    pub exit: String,
    /// From SIGTERM to the old process's exit.
    #[serde(serialize_with = "as_ms")]
    pub stopped: Duration,
    /// From SIGTERM to the new process answering `/readyz`.
    #[serde(serialize_with = "as_ms")]
    pub ready: Duration,
}

fn as_ms<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64() * 1000.0)
}

/// How a node process is started: the same for its first start and a restart.
#[derive(Debug)]
struct Launch {
    bin: PathBuf,
    topology: PathBuf,
    dir: PathBuf,
    secret_env: String,
    secret: String,
    log_filter: String,
}

impl Launch {
    /// Starts node `id`, its output into `<dir>/<id>.log` (appended to after a restart).
    fn start(&self, id: &str, append: bool) -> anyhow::Result<Child> {
        let log = self.dir.join(format!("{id}.log"));
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(append)
            .write(true)
            .truncate(!append)
            .open(&log)
            .with_context(|| format!("cannot open {}", log.display()))?;
        let child = Command::new(&self.bin)
            .arg("node")
            .arg("--config")
            .arg(&self.topology)
            .arg("--node")
            .arg(id)
            // Each node's own state (deployed functions, the activation journal) under
            // this run's folder, not the shared `.geofaas` of the working directory.
            .arg("--state-dir")
            .arg(&self.dir)
            .env(&self.secret_env, &self.secret)
            .env("RUST_LOG", &self.log_filter)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("cannot start {} node", self.bin.display()))?;
        tracing::debug!(node = id, pid = child.id(), "node started");
        Ok(child)
    }
}

impl Spawned {
    /// Starts every node of `topology` with the `geofaas` binary `bin` and waits until each one
    /// answers `/readyz`.
    pub async fn start(
        topology: &Topology,
        bin: &Path,
        state_dir: Option<&Path>,
    ) -> anyhow::Result<Self> {
        Self::start_with(topology, bin, state_dir, None).await
    }

    /// [`Spawned::start`], with the delay model's relays in front of the nodes if `delays`.
    pub async fn start_with(
        topology: &Topology,
        bin: &Path,
        state_dir: Option<&Path>,
        delays: Option<DelaySpec>,
    ) -> anyhow::Result<Self> {
        let (tmp, dir) = match state_dir {
            Some(d) => {
                std::fs::create_dir_all(d)
                    .with_context(|| format!("cannot create {}", d.display()))?;
                (None, std::path::absolute(d)?)
            }
            None => {
                let t = tempfile::Builder::new()
                    .prefix("geofaas-loadtest-")
                    .tempdir()?;
                let p = t.path().to_owned();
                (Some(t), p)
            }
        };
        let ca_pem = write_tls(&dir, &certificate_hosts(topology))?;
        let mut derived = derive_topology(topology, &dir)?;
        let mut relays = Vec::new();
        let mut links = Vec::new();
        let mut direct = BTreeMap::new();
        for node in &mut derived.nodes {
            let target = reachable(node.listen);
            direct.insert(node.id.clone(), Url::parse(&format!("https://{target}/"))?);
            let Some(spec) = delays else { continue };
            let rtt = match node.role {
                Role::Cloud => spec.cloud_rtt,
                _ => spec.edge_rtt,
            };
            let relay = Relay::start(SocketAddr::new(target.ip(), 0), target, rtt / 2)
                .await
                .with_context(|| format!("cannot start the delay relay of {}", node.id))?;
            let at = relay.local_addr();
            node.public_url = Url::parse(&format!("https://{at}/"))?;
            links.push(DelayLink {
                node: node.id.clone(),
                role: format!("{:?}", node.role).to_lowercase(),
                relay: at,
                target,
                one_way_ms: (rtt / 2).as_secs_f64() * 1000.0,
                rtt_ms: rtt.as_secs_f64() * 1000.0,
            });
            relays.push(relay);
        }
        let path = dir.join("topology.toml");
        std::fs::write(&path, toml::to_string(&derived)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
        let derived = Topology::load(&path).context("the derived topology does not load")?;
        let mut secret = [0u8; 32];
        rand::thread_rng().fill_bytes(&mut secret);
        let launch = Launch {
            bin: bin.to_owned(),
            topology: path,
            dir: dir.clone(),
            secret_env: derived.security.offload_secret_env.clone(),
            secret: secret.iter().map(|b| format!("{b:02x}")).collect(),
            log_filter: std::env::var("GEOFAAS_NODE_LOG").unwrap_or_else(|_| "warn".into()),
        };
        let mut children = BTreeMap::new();
        for node in &derived.nodes {
            children.insert(node.id.clone(), launch.start(&node.id, false)?);
        }
        let spawned = Self {
            _tmp: tmp,
            launch,
            state_dir: dir,
            topology: derived,
            ca_pem: ca_pem.into_bytes(),
            children: Mutex::new(children),
            relays,
            links,
            delays,
            direct,
        };
        spawned.wait_ready().await?;
        Ok(spawned)
    }

    /// The URL a client whose area is `node`'s enters at: the node's own address for an edge
    /// under the delay model (the client's home edge is reached directly), else its public URL.
    pub fn entry_url(&self, node: &str) -> Option<Url> {
        let n = self.topology.nodes.iter().find(|n| n.id == node)?;
        match (self.delays, n.role) {
            (Some(_), Role::Edge) => self.direct.get(node).cloned(),
            _ => Some(n.public_url.clone()),
        }
    }

    /// Whether every relay still runs.
    pub fn relays_running(&self) -> bool {
        self.relays.iter().all(Relay::is_running)
    }

    /// The process id of a running node.
    pub fn pid(&self, node: &str) -> Option<u32> {
        self.children().get(node).map(Child::id)
    }

    /// Kills `node` with SIGKILL and reaps it.
    pub fn kill(&self, node: &str) -> anyhow::Result<Killed> {
        let mut child = self
            .children()
            .remove(node)
            .with_context(|| format!("no running node {node:?} to kill"))?;
        let pid = child.id();
        kill(Pid::from_raw(pid as i32), Signal::SIGKILL)
            .with_context(|| format!("SIGKILL to {node} (pid {pid})"))?;
        let status = child.wait()?;
        use std::os::unix::process::ExitStatusExt;
        Ok(Killed {
            node: node.to_owned(),
            pid,
            signal: status.signal(),
        })
    }

    /// Stops `node` as an operator would (SIGTERM: it drains, its calls in flight finish; SIGKILL
    /// after `grace`), starts it again with the same arguments and state folder, and waits
    /// until it answers `/readyz`.
    pub async fn restart(&self, node: &str, grace: Duration) -> anyhow::Result<Restarted> {
        let mut child = self
            .children()
            .remove(node)
            .with_context(|| format!("no running node {node:?} to restart"))?;
        let (pid, started) = (child.id(), Instant::now());
        kill(Pid::from_raw(pid as i32), Signal::SIGTERM)
            .with_context(|| format!("SIGTERM to {node} (pid {pid})"))?;
        let deadline = started + grace;
        let status = loop {
            match child.try_wait()? {
                Some(s) => break s,
                None if Instant::now() >= deadline => {
                    let _ = child.kill();
                    break child.wait()?;
                }
                // Polling the child's exit, bounded by `grace`.
                None => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        };
        let stopped = started.elapsed();
        let new = self.launch.start(node, true)?;
        let new_pid = new.id();
        self.children().insert(node.to_owned(), new);
        self.wait_ready_of(&[node]).await?;
        Ok(Restarted {
            node: node.to_owned(),
            old_pid: pid,
            new_pid,
            exit: status.to_string(),
            stopped,
            ready: started.elapsed(),
        })
    }

    /// The last lines of a node's log, for error messages.
    pub fn log_tail(&self, node: &str) -> String {
        let text =
            std::fs::read_to_string(self.state_dir.join(format!("{node}.log"))).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(10)..].join("\n")
    }

    fn children(&self) -> parking_lot::MutexGuard<'_, BTreeMap<String, Child>> {
        self.children.lock()
    }

    async fn wait_ready(&self) -> anyhow::Result<()> {
        let ids: Vec<&str> = self.topology.nodes.iter().map(|n| n.id.as_str()).collect();
        self.wait_ready_of(&ids).await
    }

    async fn wait_ready_of(&self, ids: &[&str]) -> anyhow::Result<()> {
        let http = reqwest::Client::builder()
            .use_rustls_tls()
            .add_root_certificate(reqwest::Certificate::from_pem(&self.ca_pem)?)
            .timeout(Duration::from_secs(1))
            .build()?;
        let deadline = Instant::now() + READY_DEADLINE;
        for node in self
            .topology
            .nodes
            .iter()
            .filter(|n| ids.contains(&n.id.as_str()))
        {
            let url = node.public_url.join("readyz")?;
            loop {
                if let Some(status) = self
                    .children()
                    .get_mut(&node.id)
                    .and_then(|c| c.try_wait().transpose())
                {
                    anyhow::bail!(
                        "node {} exited ({}) before it was ready:\n{}",
                        node.id,
                        status.map_or_else(|e| e.to_string(), |s| s.to_string()),
                        self.log_tail(&node.id)
                    );
                }
                match http.get(url.clone()).send().await {
                    Ok(r) if r.status().is_success() => break,
                    _ if Instant::now() > deadline => anyhow::bail!(
                        "node {} did not answer {url} within {READY_DEADLINE:?}:\n{}",
                        node.id,
                        self.log_tail(&node.id)
                    ),
                    // Polling a condition (the node is listening), not waiting for time to pass.
                    _ => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            }
        }
        Ok(())
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let mut children = std::mem::take(&mut *self.children());
        for child in children.values() {
            let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
        }
        let deadline = Instant::now() + STOP_GRACE;
        for child in children.values_mut() {
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            if matches!(child.try_wait(), Ok(None)) {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// Where a node listening on `listen` is reached (an unspecified address on loopback).
fn reachable(listen: SocketAddr) -> SocketAddr {
    match listen.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => {
            SocketAddr::new(Ipv4Addr::LOCALHOST.into(), listen.port())
        }
        IpAddr::V6(ip) if ip.is_unspecified() => {
            SocketAddr::new(Ipv6Addr::LOCALHOST.into(), listen.port())
        }
        _ => listen,
    }
}

/// The topology with absolute paths (it is written into another folder) and `[tls]` naming the
/// generated files.
fn derive_topology(topology: &Topology, dir: &Path) -> anyhow::Result<Topology> {
    let base = if topology.base_dir.as_os_str().is_empty() {
        std::env::current_dir()?
    } else {
        std::path::absolute(&topology.base_dir)?
    };
    let mut t = topology.clone();
    for node in &mut t.nodes {
        for backend in &mut node.backends {
            if let BackendConfig::Local(l) = backend {
                l.functions_dir = base.join(&l.functions_dir);
            }
        }
        if let Some(AreaConfig::Registry { file, .. }) = &mut node.area {
            *file = base.join(&*file);
        }
    }
    if let Some(g) = &mut t.geoip {
        g.mmdb = base.join(&g.mmdb);
    }
    // Else a node would not find its PPO weights and run greedy instead (with one warning).
    if let Some(w) = &mut t.scheduler.weights {
        *w = base.join(&*w);
    }
    t.tls = Some(TlsSettings {
        cert: dir.join("node.pem"),
        key: dir.join("node-key.pem"),
        ca: Some(dir.join("ca.pem")),
    });
    Ok(t)
}

/// Every host name and address the nodes are reached at, for the certificate.
fn certificate_hosts(topology: &Topology) -> Vec<String> {
    let mut hosts = vec![
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        "::1".to_owned(),
    ];
    for node in &topology.nodes {
        if let Some(h) = node.public_url.host_str() {
            hosts.push(h.trim_start_matches('[').trim_end_matches(']').to_owned());
        }
        if !node.listen.ip().is_unspecified() {
            hosts.push(node.listen.ip().to_string());
        }
    }
    hosts.sort();
    hosts.dedup();
    hosts
}

/// Writes a new CA and a node certificate for `hosts` into `dir`; returns the CA's PEM.
fn write_tls(dir: &Path, hosts: &[String]) -> anyhow::Result<String> {
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "geofaas loadtest CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
    ];
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?)?;
    let mut params = CertificateParams::new(hosts.to_vec()).context("certificate host names")?;
    params
        .distinguished_name
        .push(DnType::CommonName, "geofaas node");
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &ca)?;
    std::fs::write(dir.join("ca.pem"), ca.pem())?;
    std::fs::write(dir.join("node.pem"), cert.pem())?;
    let key_path = dir.join("node-key.pem");
    std::fs::write(&key_path, key.serialize_pem())?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600))?;
    Ok(ca.pem())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_derived_topology_keeps_every_file_it_names_reachable() {
        let examples =
            std::path::PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"))
                .join("../examples");
        let topology = Topology::load(examples.join("berlin-small-edge.toml")).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let t = derive_topology(&topology, dir.path()).unwrap();
        let weights = t
            .scheduler
            .weights
            .expect("the small edge names its weights");
        assert!(
            weights.is_absolute() && weights.is_file(),
            "{}",
            weights.display()
        );
        for node in &t.nodes {
            for backend in &node.backends {
                if let BackendConfig::Local(l) = backend {
                    assert!(l.functions_dir.is_dir(), "{}", l.functions_dir.display());
                }
            }
        }
    }
}
