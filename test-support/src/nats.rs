//! A real NATS server with JetStream (Debian's `nats-server`) for the queue tests: one server on
//! free loopback ports (client and monitoring), its JetStream store in a temporary folder. It
//! can be stopped and started again on the same ports and store ([`NatsServer::stop`],
//! [`NatsServer::restart`]), as an operator's restart would; killed when dropped.

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tokio::process::{Child, Command};

use crate::peers::free_port;

/// A running (or stopped) nats-server.
#[derive(Debug)]
pub struct NatsServer {
    child: Option<Child>,
    port: u16,
    monitor: u16,
    dir: tempfile::TempDir,
}

/// Where Debian installs it.
fn binary() -> &'static str {
    if std::path::Path::new("/usr/sbin/nats-server").exists() {
        "/usr/sbin/nats-server"
    } else {
        "nats-server"
    }
}

impl NatsServer {
    /// Starts nats-server with JetStream and waits (at most 30 s) until `/healthz` says ok.
    pub async fn start() -> anyhow::Result<Self> {
        let mut s = Self {
            child: None,
            port: free_port()?,
            monitor: free_port()?,
            dir: tempfile::tempdir()?,
        };
        s.launch().await?;
        Ok(s)
    }

    async fn launch(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("nats.log"))?;
        let child = Command::new(binary())
            .args(["-js", "-a", "127.0.0.1", "-p"])
            .arg(self.port.to_string())
            .arg("-m")
            .arg(self.monitor.to_string())
            .arg("-sd")
            .arg(self.dir.path().join("js"))
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .context("cannot start nats-server (Debian package nats-server)")?;
        self.child = Some(child);
        let url = format!("http://127.0.0.1:{}/healthz", self.monitor);
        let http = reqwest::Client::new();
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(30) {
            if let Some(c) = self.child.as_mut() {
                if let Some(status) = c.try_wait()? {
                    bail!("nats-server exited with {status}:\n{}", self.log());
                }
            }
            if http
                .get(&url)
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        bail!("nats-server not healthy within 30 s:\n{}", self.log())
    }

    /// Its client URL, `nats://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Its monitoring URL, `http://127.0.0.1:PORT` (`/jsz`, `/healthz`).
    pub fn monitor_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.monitor)
    }

    /// Kills the server (its store stays).
    pub async fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill().await;
        }
    }

    /// Starts it again on the same ports and store.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        self.stop().await;
        self.launch().await
    }

    /// What the server logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("nats.log")).unwrap_or_default()
    }
}
