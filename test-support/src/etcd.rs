//! A real etcd server (Debian's `etcd-server`) for the fleet tests: a single member on free
//! loopback ports with its data in a temporary folder, killed when dropped. It runs over plain
//! HTTP or over TLS requiring client certificates ([`EtcdServer::start_tls`], certificates made
//! with rcgen), and can have etcd's authentication switched on ([`EtcdServer::enable_auth`]).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use base64::Engine;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
};
use tokio::process::{Child, Command};

use crate::peers::free_port;

/// A running etcd.
#[derive(Debug)]
pub struct EtcdServer {
    child: Child,
    url: String,
    http: reqwest::Client,
    tls: Option<EtcdTls>,
    dir: tempfile::TempDir,
}

/// The PEM files of a TLS etcd: its CA, and a client certificate and key the CA signed.
#[derive(Clone, Debug)]
pub struct EtcdTls {
    /// CA certificate (signed etcd's server certificate and the client's).
    pub ca: PathBuf,
    /// Client certificate.
    pub cert: PathBuf,
    /// Client key.
    pub key: PathBuf,
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate, written into `dir`.
fn make_certs(dir: &Path) -> anyhow::Result<(EtcdTls, PathBuf, PathBuf)> {
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "etcd test CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?)?;
    let leaf = |names: Vec<String>, cn: &str| -> anyhow::Result<(String, String)> {
        let mut params = CertificateParams::new(names)?;
        params.distinguished_name.push(DnType::CommonName, cn);
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &ca)?;
        Ok((cert.pem(), key.serialize_pem()))
    };
    let (server_cert, server_key) = leaf(vec!["127.0.0.1".into(), "localhost".into()], "etcd")?;
    let (client_cert, client_key) = leaf(Vec::new(), "geofaas-test-client")?;
    let write = |name: &str, text: &str| -> anyhow::Result<PathBuf> {
        let path = dir.join(name);
        std::fs::write(&path, text)?;
        Ok(path)
    };
    let tls = EtcdTls {
        ca: write("ca.pem", &ca.pem())?,
        cert: write("client.pem", &client_cert)?,
        key: write("client-key.pem", &client_key)?,
    };
    let server = (
        write("server.pem", &server_cert)?,
        write("server-key.pem", &server_key)?,
    );
    Ok((tls, server.0, server.1))
}

impl EtcdServer {
    /// Starts etcd over plain HTTP and waits (at most 30 s) until `/health` says it is healthy.
    pub async fn start() -> anyhow::Result<Self> {
        Self::launch(false).await
    }

    /// Starts etcd over TLS, requiring a client certificate signed by its CA ([`Self::tls`]).
    pub async fn start_tls() -> anyhow::Result<Self> {
        Self::launch(true).await
    }

    async fn launch(tls: bool) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let (client, peer) = (free_port()?, free_port()?);
        let scheme = if tls { "https" } else { "http" };
        let url = format!("{scheme}://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let log = std::fs::File::create(dir.path().join("etcd.log"))?;
        let mut http = reqwest::Client::builder().timeout(Duration::from_secs(2));
        let mut tls_args = Vec::new();
        let tls = match tls {
            false => None,
            true => {
                let (files, cert, key) = make_certs(dir.path())?;
                tls_args = vec![
                    format!("--cert-file={}", cert.display()),
                    format!("--key-file={}", key.display()),
                    format!("--trusted-ca-file={}", files.ca.display()),
                    "--client-cert-auth".to_owned(),
                ];
                let ca = std::fs::read(&files.ca)?;
                let mut identity = std::fs::read(&files.cert)?;
                identity.extend(std::fs::read(&files.key)?);
                http = http
                    .add_root_certificate(reqwest::Certificate::from_pem(&ca)?)
                    .identity(reqwest::Identity::from_pem(&identity)?);
                Some(files)
            }
        };
        let child = Command::new("etcd")
            .arg("--name=test")
            .arg(format!("--data-dir={}", dir.path().join("data").display()))
            .arg(format!("--listen-client-urls={url}"))
            .arg(format!("--advertise-client-urls={url}"))
            .arg(format!("--listen-peer-urls={peer_url}"))
            .arg(format!("--initial-advertise-peer-urls={peer_url}"))
            .arg(format!("--initial-cluster=test={peer_url}"))
            // Short elections let the tests use leases of a second or two.
            .args(["--heartbeat-interval=50", "--election-timeout=500"])
            .args(&tls_args)
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .context(
                "cannot run `etcd` (Debian package etcd-server; scripts/test.sh installs it)",
            )?;
        let mut server = Self {
            child,
            url,
            http: http.build()?,
            tls,
            dir,
        };
        server.wait_healthy().await?;
        Ok(server)
    }

    async fn wait_healthy(&mut self) -> anyhow::Result<()> {
        let client = self.http.clone();
        let health = format!("{}/health", self.url);
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(30) {
            if let Some(status) = self.child.try_wait()? {
                let log =
                    std::fs::read_to_string(self.dir.path().join("etcd.log")).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(5).collect();
                bail!("etcd exited during start-up with {status}: {tail:?}");
            }
            let probe = client
                .get(&health)
                .timeout(Duration::from_secs(1))
                .send()
                .await;
            if let Ok(r) = probe {
                if r.text().await.unwrap_or_default().contains("true") {
                    return Ok(());
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        bail!("etcd did not become healthy at {health} within 30 s")
    }

    /// Switches etcd's authentication on with a `root` user (password `root_password`) and
    /// `user` (password `password`), whose role may read and write every key under `prefix`.
    /// Done through etcd's JSON gateway, as `etcdctl user add` / `role grant-permission` /
    /// `auth enable` would.
    pub async fn enable_auth(
        &self,
        root_password: &str,
        user: &str,
        password: &str,
        prefix: &str,
    ) -> anyhow::Result<()> {
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        let mut end = prefix.as_bytes().to_vec();
        if let Some(last) = end.last_mut() {
            *last += 1;
        }
        let steps = [
            (
                "user/add",
                serde_json::json!({"name": "root", "password": root_password}),
            ),
            (
                "user/grant",
                serde_json::json!({"user": "root", "role": "root"}),
            ),
            ("role/add", serde_json::json!({"name": "fleet"})),
            (
                "role/grant",
                serde_json::json!({"name": "fleet", "perm": {"permType": 2, "key": b64(prefix.as_bytes()), "range_end": b64(&end)}}),
            ),
            (
                "user/add",
                serde_json::json!({"name": user, "password": password}),
            ),
            (
                "user/grant",
                serde_json::json!({"user": user, "role": "fleet"}),
            ),
            ("enable", serde_json::json!({})),
        ];
        for (path, body) in steps {
            let url = format!("{}/v3/auth/{path}", self.url);
            let r = self.http.post(&url).json(&body).send().await?;
            let status = r.status();
            let text = r.text().await.unwrap_or_default();
            if !status.is_success() {
                bail!("etcd {path}: {status} {text}");
            }
        }
        Ok(())
    }

    /// The TLS files of an etcd started with [`Self::start_tls`].
    pub fn tls(&self) -> Option<&EtcdTls> {
        self.tls.as_ref()
    }

    /// The client URL, e.g. `http://127.0.0.1:40123`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Freezes etcd (SIGSTOP): connections stay open, nothing is answered (a slow etcd).
    /// Returns once the kernel reports it stopped (at most 5 s).
    pub fn pause(&self) -> anyhow::Result<()> {
        self.signal("-STOP")?;
        let pid = self.child.id().context("etcd has exited")?;
        let status = format!("/proc/{pid}/status");
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(5) {
            let text = std::fs::read_to_string(&status).unwrap_or_default();
            if text
                .lines()
                .any(|l| l.starts_with("State:") && l.contains("T (stopped)"))
            {
                return Ok(());
            }
            std::thread::yield_now();
        }
        bail!("etcd did not stop within 5 s")
    }

    /// Thaws etcd after [`Self::pause`] (SIGCONT).
    pub fn resume(&self) -> anyhow::Result<()> {
        self.signal("-CONT")
    }

    fn signal(&self, sig: &str) -> anyhow::Result<()> {
        let pid = self.child.id().context("etcd has exited")?;
        let status = std::process::Command::new("kill")
            .arg(sig)
            .arg(pid.to_string())
            .status()?;
        anyhow::ensure!(status.success(), "kill {sig} {pid}: {status}");
        Ok(())
    }

    /// Kills etcd with SIGKILL and waits for it to exit.
    pub async fn kill(&mut self) {
        let _ = self.child.kill().await;
    }
}

/// A real three-member etcd cluster on loopback (plain HTTP), each member its own process and
/// data folder, for the quorum tests: a member can be killed and started again on its folder.
#[derive(Debug)]
pub struct EtcdCluster {
    members: Vec<Option<Child>>,
    clients: Vec<String>,
    peers: Vec<String>,
    dir: tempfile::TempDir,
    http: reqwest::Client,
}

impl EtcdCluster {
    /// Starts three members and waits (at most 30 s) until each says it is healthy.
    pub async fn start() -> anyhow::Result<Self> {
        let mut clients = Vec::new();
        let mut peers = Vec::new();
        for _ in 0..3 {
            clients.push(format!("http://127.0.0.1:{}", free_port()?));
            peers.push(format!("http://127.0.0.1:{}", free_port()?));
        }
        let mut c = Self {
            members: vec![None, None, None],
            clients,
            peers,
            dir: tempfile::tempdir()?,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(2))
                .build()?,
        };
        for i in 0..3 {
            c.spawn(i)?;
        }
        for i in 0..3 {
            c.wait_healthy(i).await?;
        }
        Ok(c)
    }

    fn spawn(&mut self, i: usize) -> anyhow::Result<()> {
        let cluster: Vec<String> = self
            .peers
            .iter()
            .enumerate()
            .map(|(j, p)| format!("m{j}={p}"))
            .collect();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join(format!("m{i}.log")))?;
        let child = Command::new("etcd")
            .arg(format!("--name=m{i}"))
            .arg(format!(
                "--data-dir={}",
                self.dir.path().join(format!("m{i}")).display()
            ))
            .arg(format!("--listen-client-urls={}", self.clients[i]))
            .arg(format!("--advertise-client-urls={}", self.clients[i]))
            .arg(format!("--listen-peer-urls={}", self.peers[i]))
            .arg(format!("--initial-advertise-peer-urls={}", self.peers[i]))
            .arg(format!("--initial-cluster={}", cluster.join(",")))
            .arg("--initial-cluster-state=new")
            .arg("--initial-cluster-token=geofaas-test")
            .args(["--heartbeat-interval=50", "--election-timeout=500"])
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .context("cannot run `etcd` (Debian package etcd-server)")?;
        self.members[i] = Some(child);
        Ok(())
    }

    /// Waits until member `i` says it is healthy (it is, and the cluster has a leader).
    pub async fn wait_healthy(&self, i: usize) -> anyhow::Result<()> {
        let health = format!("{}/health", self.clients[i]);
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(30) {
            if let Ok(r) = self.http.get(&health).send().await {
                if r.text().await.unwrap_or_default().contains("\"true\"") {
                    return Ok(());
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        bail!("etcd member m{i} not healthy within 30 s at {health}")
    }

    /// The members' client URLs.
    pub fn urls(&self) -> &[String] {
        &self.clients
    }

    /// Kills member `i` with SIGKILL.
    pub async fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.members[i].take() {
            let _ = c.kill().await;
        }
    }

    /// Starts member `i` again on its data folder.
    pub fn restart(&mut self, i: usize) -> anyhow::Result<()> {
        self.spawn(i)
    }
}
