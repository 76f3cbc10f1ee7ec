//! A fleet of real `geofaas node` processes on loopback for the tests that kill and restart
//! nodes (cron, queue): one topology file with `[tls]`, the caller's extra sections and the
//! given nodes (each with a local backend over one functions folder), every node a child
//! process run from the temporary folder with its own log, all sharing one `--state-dir` and
//! an offload secret. A node's `public_url` may name another port than it listens on (a fault
//! proxy's, [`Layout::public_ports`]), a node may listen on its own loopback address (so the
//! geo DNS, [`Fleet::spawn_dns`], answers one address per node), serve its own functions folder
//! and have other backends before its local one. Nodes may be in the topology without running
//! ([`Layout::idle`]: the rest of a large fleet).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use geofaas_gateway::TlsMaterial;

use crate::deploy::BIN;

/// A node: id, role, latitude, longitude; an edge's area is a 15 km circle around it.
pub type NodeSpec = (&'static str, &'static str, f64, f64);

pub struct Fleet {
    pub dir: tempfile::TempDir,
    children: HashMap<&'static str, Child>,
    pub ports: HashMap<&'static str, u16>,
    /// The loopback address each node listens on.
    pub hosts: HashMap<&'static str, &'static str>,
    pub client: reqwest::Client,
    config: PathBuf,
    state_dir: PathBuf,
    node_env: HashMap<&'static str, Vec<(String, String)>>,
    rust_log: String,
}

/// What [`Fleet::with`] writes and starts.
pub struct Layout<'a> {
    pub name: &'a str,
    pub nodes: &'a [NodeSpec],
    /// Sections written before the nodes.
    pub extra: &'a str,
    /// The folder every backend serves; an empty one when `None`.
    pub functions: Option<&'a Path>,
    /// Nodes that serve their own folder instead.
    pub node_functions: HashMap<&'static str, PathBuf>,
    /// Nodes whose `public_url` names this port instead of the one they listen on.
    pub public_ports: HashMap<&'static str, u16>,
    /// Nodes that listen on (and are named by) this loopback address instead of 127.0.0.1.
    pub hosts: HashMap<&'static str, &'static str>,
    /// `[[node.backend]]` tables a node has before its local backend.
    pub node_backends: HashMap<&'static str, String>,
    /// The nodes' `--state-dir`; `state` in the fleet's folder when `None`.
    pub state_dir: Option<PathBuf>,
    /// Environment variables of single nodes (a faked clock).
    pub node_env: HashMap<&'static str, Vec<(String, String)>>,
    /// Nodes in the topology that are not started.
    pub idle: &'a [&'static str],
    pub rust_log: &'a str,
}

impl<'a> Layout<'a> {
    /// `nodes` under zone `NAME.test.`, nothing else: empty functions folders, no extra
    /// sections, every node's defaults, logs at `warn`.
    pub fn new(name: &'a str, nodes: &'a [NodeSpec]) -> Self {
        Self {
            name,
            nodes,
            extra: "",
            functions: None,
            node_functions: HashMap::new(),
            public_ports: HashMap::new(),
            hosts: HashMap::new(),
            node_backends: HashMap::new(),
            state_dir: None,
            node_env: HashMap::new(),
            idle: &[],
            rust_log: "warn",
        }
    }
}

impl Fleet {
    /// Writes `NAME.toml` (zone `NAME.test.`, `extra` before the nodes, every backend serving
    /// `functions`, an empty folder when `None`) and starts every node.
    pub fn start(
        name: &str,
        nodes: &[NodeSpec],
        extra: &str,
        functions: Option<&Path>,
        rust_log: &str,
    ) -> Self {
        Self::with(Layout {
            extra,
            functions,
            rust_log,
            ..Layout::new(name, nodes)
        })
    }

    /// Writes the layout's topology and starts every node.
    pub fn with(layout: Layout<'_>) -> Self {
        let Layout {
            name,
            nodes,
            extra,
            functions,
            node_functions,
            public_ports,
            hosts,
            node_backends,
            state_dir,
            node_env,
            idle,
            rust_log,
        } = layout;
        let dir = tempfile::tempdir().unwrap();
        let mut names = vec!["127.0.0.1".to_owned()];
        names.extend(hosts.values().map(|h| h.to_string()));
        let tls = TlsMaterial::generate(&names).unwrap();
        tls.write_to(dir.path()).unwrap();
        let functions = match functions {
            Some(f) => f.to_owned(),
            None => {
                let empty = dir.path().join("functions");
                std::fs::create_dir(&empty).unwrap();
                empty
            }
        };
        let d = dir.path().display();
        let mut text = format!(
            "zone = \"{name}.test.\"\n[tls]\ncert = \"{d}/node.pem\"\nkey = \"{d}/node-key.pem\"\nca = \"{d}/ca.pem\"\n{extra}\n"
        );
        let mut ports = HashMap::new();
        let hosts: HashMap<_, _> = nodes
            .iter()
            .map(|&(id, ..)| (id, hosts.get(id).copied().unwrap_or("127.0.0.1")))
            .collect();
        for &(id, role, lat, lon) in nodes {
            let host = hosts[id];
            let port = std::net::TcpListener::bind((host, 0))
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            ports.insert(id, port);
            let public = public_ports.get(id).copied().unwrap_or(port);
            let served = node_functions.get(id).unwrap_or(&functions);
            let area = if role == "cloud" {
                "area = \"world\"".to_owned()
            } else {
                format!(
                    "area.circle = {{ center = {{ lat = {lat}, lon = {lon} }}, radius_km = 15 }}"
                )
            };
            text.push_str(&format!(
                "[[node]]\nid = \"{id}\"\nrole = \"{role}\"\nlocation = {{ lat = {lat}, lon = {lon} }}\n{area}\n\
                 public_url = \"https://{host}:{public}\"\nlisten = \"{host}:{port}\"\n\
                 {}\n[[node.backend]]\nkind = \"local\"\nfunctions_dir = \"{}\"\n",
                node_backends.get(id).map(String::as_str).unwrap_or(""),
                served.display()
            ));
        }
        let config = dir.path().join(format!("{name}.toml"));
        std::fs::write(&config, text).unwrap();
        let client = reqwest::Client::builder()
            .add_root_certificate(reqwest::Certificate::from_pem(tls.ca_pem.as_bytes()).unwrap())
            .build()
            .unwrap();
        let state_dir = state_dir.unwrap_or_else(|| dir.path().join("state"));
        let mut fleet = Self {
            dir,
            children: HashMap::new(),
            ports,
            hosts,
            client,
            state_dir,
            node_env,
            config,
            rust_log: rust_log.to_owned(),
        };
        for &(id, ..) in nodes.iter().filter(|(id, ..)| !idle.contains(id)) {
            fleet.spawn(id);
        }
        fleet
    }

    /// The topology file.
    pub fn config(&self) -> &Path {
        &self.config
    }

    pub fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    /// `https://HOST:PORT{path}` of node `id` (where it listens).
    pub fn url(&self, id: &str, path: &str) -> String {
        format!("https://{}:{}{path}", self.hosts[id], self.ports[id])
    }

    /// Starts the topology's geo DNS (`geofaas dns`, one UDP socket) with the GeoIP database
    /// `mmdb`, as child `dns` logging to `dns.log`; the topology's `[dns] listen` says where.
    pub fn spawn_dns(&mut self, mmdb: &Path) {
        let log = std::fs::File::create(self.path("dns.log")).unwrap();
        let child = Command::new(BIN)
            .args(["dns", "--udp-sockets", "1", "--config"])
            .arg(&self.config)
            .arg("--mmdb")
            .arg(mmdb)
            .env("RUST_LOG", &self.rust_log)
            .current_dir(std::env::temp_dir())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.children.insert("dns", child);
    }

    pub fn spawn(&mut self, id: &'static str) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path(&format!("{id}.log")))
            .unwrap();
        let env = self.node_env.get(id).cloned().unwrap_or_default();
        let child = Command::new(BIN)
            .envs(env)
            .args(["node", "--node", id, "--config"])
            .arg(&self.config)
            .arg("--state-dir")
            .arg(&self.state_dir)
            .env("RUST_LOG", &self.rust_log)
            .env("GEOFAAS_OFFLOAD_SECRET", "fleet test secret")
            .current_dir(std::env::temp_dir())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.children.insert(id, child);
    }

    /// SIGKILL, and checks that this is what ended it.
    pub fn kill(&mut self, id: &str) {
        use std::os::unix::process::ExitStatusExt;
        let mut child = self.children.remove(id).unwrap();
        child.kill().unwrap();
        let exit = child.wait().unwrap();
        assert_eq!(exit.signal(), Some(9), "{id} ended by SIGKILL");
    }

    pub fn log(&self, id: &str) -> String {
        std::fs::read_to_string(self.path(&format!("{id}.log"))).unwrap_or_default()
    }

    /// Waits until every started node is ready (not the DNS, not an idle node).
    pub async fn wait_all_ready(&self) {
        for id in self
            .ports
            .keys()
            .filter(|id| self.children.contains_key(*id))
        {
            self.wait_ready(id).await;
        }
    }

    pub async fn wait_ready(&self, id: &str) {
        let url = self.url(id, "/readyz");
        for _ in 0..600 {
            if self
                .client
                .get(&url)
                .send()
                .await
                .is_ok_and(|r| r.status() == 200)
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("{id} never became ready:\n{}", self.log(id));
    }

    /// `geofaas ARGS --config NAME.toml`, from the temp folder.
    pub fn geofaas(&self, args: &[&str]) -> std::process::Output {
        Command::new(BIN)
            .args(args)
            .arg("--config")
            .arg(&self.config)
            .current_dir(std::env::temp_dir())
            .output()
            .unwrap()
    }

    /// `curl ARGS` trusting the fleet's CA, from the temp folder: (status, body).
    pub fn curl(&self, args: &[&str]) -> (u16, String) {
        let out = Command::new("curl")
            .args(["-sS", "--max-time", "20", "--cacert"])
            .arg(self.path("ca.pem"))
            .args(["-o", "-", "-w", "\n%{http_code}"])
            .args(args)
            .current_dir(std::env::temp_dir())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
        (code.trim().parse().unwrap_or(0), body.to_owned())
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for child in self.children.values_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Writes function `greeter` under `root` (a Python function answering `greeter VERSION`),
/// with `data` bytes of data beside it that do not compress; its folder.
pub fn greeter(root: &Path, version: &str, data: usize) -> String {
    let dir = root.join("greeter");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("fn.py"),
        format!("def fn(body, headers):\n    return \"greeter {version}\"\n"),
    )
    .unwrap();
    if data > 0 {
        let bytes: Vec<u8> = (0..data)
            .map(|i| (i * 7919 % 251) as u8 ^ (i >> 8) as u8)
            .collect();
        std::fs::write(dir.join("data.bin"), bytes).unwrap();
    }
    dir.to_str().unwrap().to_owned()
}

/// A command's stdout and stderr.
pub fn text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}
