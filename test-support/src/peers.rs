//! Real third-party peers, started as child processes on free local ports and killed when
//! their handle drops:
//!
//! - [`ServerlessOffline`]: `osls` + `serverless-offline` (npm) running real Node and Python
//!   handlers behind the Lambda Invoke API;
//! - [`Moto`]: the `moto` server (PyPI `moto[server]`) with its Lambda that needs no Docker,
//!   and SigV4 checking switched on after setup.
//!
//! A peer that is not installed is an error naming the install command; tests pass it to
//! [`require`], which fails the test unless `GEOFAAS_SKIP_PEERS=1` is set.

use std::net::TcpListener as StdListener;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use base64::Engine as _;
use serde_json::json;
use tokio::process::{Child, Command};

/// How long a peer may take to answer its first request.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// The environment variable that turns a missing peer into a skipped test.
pub const SKIP_ENV: &str = "GEOFAAS_SKIP_PEERS";

/// Unwraps a started peer; when it could not start, fails the test with the reason, or skips
/// it (returns `None`, with a note on stderr) if `GEOFAAS_SKIP_PEERS=1`.
pub fn require<T>(peer: anyhow::Result<T>) -> Option<T> {
    match peer {
        Ok(peer) => Some(peer),
        Err(err) if std::env::var(SKIP_ENV).as_deref() == Ok("1") => {
            eprintln!("skipping: peer unavailable and {SKIP_ENV}=1: {err:#}");
            None
        }
        Err(err) => panic!("peer unavailable (set {SKIP_ENV}=1 to skip): {err:#}"),
    }
}

/// A free TCP port on 127.0.0.1 (bound then released; the peer binds it right after).
pub fn free_port() -> anyhow::Result<u16> {
    Ok(StdListener::bind(("127.0.0.1", 0))?.local_addr()?.port())
}

/// Polls `url` until it answers any HTTP status, the child exits, or the time is up.
async fn wait_ready(child: &mut Child, url: &str, what: &str) -> anyhow::Result<Duration> {
    let client = reqwest::Client::new();
    let started = Instant::now();
    while started.elapsed() < READY_TIMEOUT {
        if let Some(status) = child.try_wait()? {
            bail!("{what} exited during start-up with {status}");
        }
        let probe = client.get(url).timeout(Duration::from_secs(2)).send();
        if probe.await.is_ok() {
            return Ok(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("{what} did not answer {url} within {READY_TIMEOUT:?}")
}

/// A running `serverless offline` (osls + serverless-offline) for one serverless project.
#[derive(Debug)]
pub struct ServerlessOffline {
    child: Child,
    lambda_url: String,
    startup: Duration,
}

impl ServerlessOffline {
    /// Starts `serverless offline` in project folder `dir`, whose `node_modules` must hold
    /// `osls` and `serverless-offline` (`npm ci --prefix <dir>`).
    pub async fn start(dir: impl AsRef<Path>) -> anyhow::Result<Self> {
        let dir = dir.as_ref();
        let cli = dir.join("node_modules/osls/bin/serverless.js");
        if !cli.is_file() || !dir.join("node_modules/serverless-offline").is_dir() {
            bail!(
                "serverless-offline is not installed in {}: run `npm ci --prefix {}`",
                dir.display(),
                dir.display()
            );
        }
        let port = free_port()?;
        let mut child = Command::new("node")
            .arg(&cli)
            .args(["offline", "start", "--host", "127.0.0.1"])
            .args(["--lambdaPort", &port.to_string()])
            .args(["--httpPort", &free_port()?.to_string()])
            .args(["--albPort", &free_port()?.to_string()])
            .args(["--websocketPort", &free_port()?.to_string()])
            .current_dir(dir)
            .env("SLS_TELEMETRY_DISABLED", "1")
            .env("SLS_NOTIFICATIONS_MODE", "off")
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("starting `node` for serverless-offline (is Node.js >= 20 installed?)")?;
        let lambda_url = format!("http://127.0.0.1:{port}");
        let startup = wait_ready(&mut child, &lambda_url, "serverless-offline").await?;
        Ok(Self {
            child,
            lambda_url,
            startup,
        })
    }

    /// Endpoint of its Lambda Invoke API (`http://127.0.0.1:<port>`).
    pub fn lambda_url(&self) -> &str {
        &self.lambda_url
    }

    /// How long it took from spawn to the first answer.
    pub fn startup(&self) -> Duration {
        self.startup
    }

    /// Kills the peer now (dropping the handle does too).
    pub async fn stop(&mut self) {
        let _ = self.child.kill().await;
    }
}

/// The serverless project of the functions-adapter tests (`functions-adapter/tests/peers/serverless`).
pub fn serverless_project() -> PathBuf {
    crate::paths::workspace_root().join("functions-adapter/tests/peers/serverless")
}

/// Credentials of an IAM user created in moto.
#[derive(Clone, Debug)]
pub struct MotoCredentials {
    /// Access key id (`AKIA…`).
    pub access_key_id: String,
    /// Secret access key.
    pub secret_access_key: String,
}

/// A running moto server (all AWS services on one port).
#[derive(Debug)]
pub struct Moto {
    child: Child,
    url: String,
    client: reqwest::Client,
}

impl Moto {
    /// Starts `moto_server` (from `pip install 'moto[server]'`) on a free port.
    pub async fn start() -> anyhow::Result<Self> {
        let port = free_port()?;
        let mut child = Command::new("moto_server")
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("starting `moto_server`: run `pip install 'moto[server]'`")?;
        let url = format!("http://127.0.0.1:{port}");
        wait_ready(&mut child, &format!("{url}/moto-api/"), "moto_server").await?;
        Ok(Self {
            child,
            url,
            client: reqwest::Client::new(),
        })
    }

    /// Endpoint of every service (`http://127.0.0.1:<port>`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Prepares a Python Lambda `function` that echoes its event (moto's Docker-less Lambda),
    /// an IAM user allowed to call it, then switches SigV4 checking on for every later request.
    /// Returns the user's credentials.
    pub async fn lambda_with_auth(&self, function: &str) -> anyhow::Result<MotoCredentials> {
        self.post_json("/moto-api/config", json!({"lambda": {"use_docker": false}}))
            .await?;
        self.iam(&[("Action", "CreateUser"), ("UserName", "geofaas")])
            .await?;
        let key = self
            .iam(&[("Action", "CreateAccessKey"), ("UserName", "geofaas")])
            .await?;
        let creds = MotoCredentials {
            access_key_id: xml_field(&key, "AccessKeyId")?,
            secret_access_key: xml_field(&key, "SecretAccessKey")?,
        };
        let policy = json!({"Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]});
        self.iam(&[
            ("Action", "PutUserPolicy"),
            ("UserName", "geofaas"),
            ("PolicyName", "all"),
            ("PolicyDocument", &policy.to_string()),
        ])
        .await?;
        let role = self
            .iam(&[
                ("Action", "CreateRole"),
                ("RoleName", "geofaas-lambda"),
                ("AssumeRolePolicyDocument", "{}"),
            ])
            .await?;
        let zip = stored_zip(
            "handler.py",
            b"def handler(event, context):\n    return event\n",
        );
        let create = json!({
            "FunctionName": function,
            "Runtime": "python3.11",
            "Role": xml_field(&role, "Arn")?,
            "Handler": "handler.handler",
            "Code": {"ZipFile": base64::engine::general_purpose::STANDARD.encode(zip)},
        });
        let resp = self
            .client
            .post(format!("{}/2015-03-31/functions", self.url))
            .header("authorization", setup_auth("lambda"))
            .json(&create)
            .send()
            .await?;
        if !resp.status().is_success() {
            bail!(
                "moto CreateFunction: {} {}",
                resp.status(),
                resp.text().await?
            );
        }
        // From now on every request must carry a valid SigV4 signature of a known user.
        let resp = self
            .client
            .post(format!("{}/moto-api/reset-auth", self.url))
            .body("0")
            .send()
            .await?;
        if !resp.status().is_success() {
            bail!("moto reset-auth: {}", resp.status());
        }
        Ok(creds)
    }

    /// Switches moto's Lambda to run without Docker and creates an execution role, leaving
    /// SigV4 checking off; returns the role's ARN (what a deploying backend's `role` names).
    pub async fn lambda_role(&self) -> anyhow::Result<String> {
        self.post_json("/moto-api/config", json!({"lambda": {"use_docker": false}}))
            .await?;
        let role = self
            .iam(&[
                ("Action", "CreateRole"),
                ("RoleName", "geofaas-deploy"),
                ("AssumeRolePolicyDocument", "{}"),
            ])
            .await?;
        xml_field(&role, "Arn")
    }

    /// GetFunction of Lambda function `name` as moto answers it (`Configuration`, `Code`), or
    /// `None` when moto has no such function. Only while SigV4 checking is off.
    pub async fn lambda_function(&self, name: &str) -> anyhow::Result<Option<serde_json::Value>> {
        let resp = self
            .client
            .get(format!("{}/2015-03-31/functions/{name}", self.url))
            .header("authorization", setup_auth("lambda"))
            .send()
            .await?;
        match resp.status() {
            reqwest::StatusCode::NOT_FOUND => Ok(None),
            status if status.is_success() => Ok(Some(resp.json().await?)),
            status => bail!("moto GetFunction {name}: {status} {}", resp.text().await?),
        }
    }

    /// Kills the peer now (dropping the handle does too).
    pub async fn stop(&mut self) {
        let _ = self.child.kill().await;
    }

    async fn post_json(&self, path: &str, body: serde_json::Value) -> anyhow::Result<()> {
        let resp = self
            .client
            .post(format!("{}{path}", self.url))
            .json(&body)
            .send()
            .await?;
        if !resp.status().is_success() {
            bail!("moto {path}: {}", resp.status());
        }
        Ok(())
    }

    /// One IAM Query API call (before auth is switched on, so the signature is a placeholder
    /// that only tells moto which service is meant).
    async fn iam(&self, params: &[(&str, &str)]) -> anyhow::Result<String> {
        let mut form: Vec<(&str, &str)> = params.to_vec();
        form.push(("Version", "2010-05-08"));
        let resp = self
            .client
            .post(format!("{}/", self.url))
            .header("authorization", setup_auth("iam"))
            .form(&form)
            .send()
            .await?;
        let status = resp.status();
        let text = resp.text().await?;
        if !status.is_success() {
            bail!("moto IAM {:?}: {status} {text}", params.first());
        }
        Ok(text)
    }
}

fn setup_auth(service: &str) -> String {
    format!(
        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20240101/us-east-1/{service}/aws4_request, \
         SignedHeaders=host, Signature=0"
    )
}

fn xml_field(xml: &str, tag: &str) -> anyhow::Result<String> {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    let start = xml
        .find(&open)
        .map(|i| i + open.len())
        .with_context(|| format!("no <{tag}> in moto's answer: {xml}"))?;
    let len = xml[start..]
        .find(&close)
        .with_context(|| format!("unterminated <{tag}> in moto's answer"))?;
    Ok(xml[start..start + len].to_owned())
}

/// A zip archive holding one file, stored without compression.
pub fn stored_zip(name: &str, data: &[u8]) -> Vec<u8> {
    let crc = crc32(data).to_le_bytes();
    let size = (data.len() as u32).to_le_bytes();
    let name_len = (name.len() as u16).to_le_bytes();
    let mut out = Vec::new();
    // Local file header.
    out.extend_from_slice(b"PK\x03\x04\x14\x00\x00\x00\x00\x00\x00\x00\x21\x00");
    out.extend_from_slice(&crc);
    out.extend_from_slice(&size);
    out.extend_from_slice(&size);
    out.extend_from_slice(&name_len);
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(data);
    let central_at = (out.len() as u32).to_le_bytes();
    // Central directory header.
    let mut central = Vec::new();
    central.extend_from_slice(b"PK\x01\x02\x14\x03\x14\x00\x00\x00\x00\x00\x00\x00\x21\x00");
    central.extend_from_slice(&crc);
    central.extend_from_slice(&size);
    central.extend_from_slice(&size);
    central.extend_from_slice(&name_len);
    central.extend_from_slice(&[0; 8]);
    central.extend_from_slice(&0o100644u32.wrapping_shl(16).to_le_bytes());
    central.extend_from_slice(&[0; 4]);
    central.extend_from_slice(name.as_bytes());
    let central_len = (central.len() as u32).to_le_bytes();
    out.extend_from_slice(&central);
    // End of central directory.
    out.extend_from_slice(b"PK\x05\x06\x00\x00\x00\x00\x01\x00\x01\x00");
    out.extend_from_slice(&central_len);
    out.extend_from_slice(&central_at);
    out.extend_from_slice(&[0, 0]);
    out
}

fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in data {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}
