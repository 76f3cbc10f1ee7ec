//! A real etcd server (Debian's `etcd-server`) for the fleet tests: a single member on free
//! loopback ports with its data in a temporary folder, killed when dropped.

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tokio::process::{Child, Command};

use crate::peers::free_port;

/// A running etcd.
#[derive(Debug)]
pub struct EtcdServer {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl EtcdServer {
    /// Starts etcd and waits (at most 30 s) until `/health` says it is healthy.
    pub async fn start() -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let (client, peer) = (free_port()?, free_port()?);
        let url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let log = std::fs::File::create(dir.path().join("etcd.log"))?;
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
            _dir: dir,
        };
        server.wait_healthy().await?;
        Ok(server)
    }

    async fn wait_healthy(&mut self) -> anyhow::Result<()> {
        let client = reqwest::Client::new();
        let health = format!("{}/health", self.url);
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(30) {
            if let Some(status) = self.child.try_wait()? {
                bail!("etcd exited during start-up with {status}");
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

    /// The client URL, e.g. `http://127.0.0.1:40123`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Kills etcd with SIGKILL and waits for it to exit.
    pub async fn kill(&mut self) {
        let _ = self.child.kill().await;
    }
}
