//! `--spawn`: every node of a topology as its own `geofaas node` child process, with a fresh CA
//! and node certificate (rcgen) and a derived topology file that names them, so a run can kill
//! one node for real (SIGKILL) while the others keep serving.
//!
//! The state folder (a temporary one unless `--state-dir` names one) holds `ca.pem`,
//! `node.pem`, `node-key.pem`, `topology.toml` and one `<node>.log` per node.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::Context;
use geofaas_config::{AreaConfig, BackendConfig, TlsSettings, Topology};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use rand::RngCore;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

/// How long the nodes get to answer `/readyz` after they were started.
const READY_DEADLINE: Duration = Duration::from_secs(60);
/// How long a node gets to stop after SIGTERM before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// The node processes of one run.
#[derive(Debug)]
pub struct Spawned {
    _tmp: Option<tempfile::TempDir>,
    /// Folder with the certificates, the derived topology and the node logs.
    pub state_dir: PathBuf,
    /// The derived topology (absolute paths, `[tls]` set) as the nodes loaded it.
    pub topology: Topology,
    /// The generated CA, for the client.
    pub ca_pem: Vec<u8>,
    children: Mutex<BTreeMap<String, Child>>,
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

impl Spawned {
    /// Starts every node of `topology` with the `geofaas` binary `bin` and waits until each one
    /// answers `/readyz`.
    pub async fn start(
        topology: &Topology,
        bin: &Path,
        state_dir: Option<&Path>,
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
        let derived = derive_topology(topology, &dir)?;
        let path = dir.join("topology.toml");
        std::fs::write(&path, toml::to_string(&derived)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
        let derived = Topology::load(&path).context("the derived topology does not load")?;
        let mut secret = [0u8; 32];
        rand::thread_rng().fill_bytes(&mut secret);
        let secret: String = secret.iter().map(|b| format!("{b:02x}")).collect();
        let log_filter = std::env::var("GEOFAAS_NODE_LOG").unwrap_or_else(|_| "warn".into());
        let mut children = BTreeMap::new();
        for node in &derived.nodes {
            let log = dir.join(format!("{}.log", node.id));
            let out = std::fs::File::create(&log)?;
            let child = Command::new(bin)
                .arg("node")
                .arg("--config")
                .arg(&path)
                .arg("--node")
                .arg(&node.id)
                .env(&derived.security.offload_secret_env, &secret)
                .env("RUST_LOG", &log_filter)
                .stdin(Stdio::null())
                .stdout(out.try_clone()?)
                .stderr(out)
                .spawn()
                .with_context(|| format!("cannot start {} node", bin.display()))?;
            tracing::debug!(node = %node.id, pid = child.id(), "node started");
            children.insert(node.id.clone(), child);
        }
        let spawned = Self {
            _tmp: tmp,
            state_dir: dir,
            topology: derived,
            ca_pem: ca_pem.into_bytes(),
            children: Mutex::new(children),
        };
        spawned.wait_ready().await?;
        Ok(spawned)
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

    /// The last lines of a node's log, for error messages.
    pub fn log_tail(&self, node: &str) -> String {
        let text =
            std::fs::read_to_string(self.state_dir.join(format!("{node}.log"))).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(10)..].join("\n")
    }

    fn children(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Child>> {
        self.children.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn wait_ready(&self) -> anyhow::Result<()> {
        let http = reqwest::Client::builder()
            .use_rustls_tls()
            .add_root_certificate(reqwest::Certificate::from_pem(&self.ca_pem)?)
            .timeout(Duration::from_secs(1))
            .build()?;
        let deadline = Instant::now() + READY_DEADLINE;
        for node in &self.topology.nodes {
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
    t.tls = Some(TlsSettings {
        cert: dir.join("node.pem"),
        key: dir.join("node-key.pem"),
        ca: Some(dir.join("ca.pem")),
    });
    Ok(t)
}

/// Every host name and address the nodes are reached at, for the certificate.
fn certificate_hosts(topology: &Topology) -> Vec<String> {
    let mut hosts = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
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
