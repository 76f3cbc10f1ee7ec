//! A three-node cluster of the Berlin topology on loopback port 0, with real TLS, real
//! worker processes and a shared offload secret.

use std::sync::Arc;

use geofaas_config::Topology;
use geofaas_gateway::{build_backends, NodeHandle, NodeOptions, NodeState, TlsMaterial};
use tokio::net::TcpListener;

/// The running nodes and clients that trust their CA.
pub struct Cluster {
    pub nodes: Vec<NodeHandle>,
    /// Does not follow redirects.
    pub client: reqwest::Client,
    /// Follows redirects like `curl -L`.
    pub following: reqwest::Client,
    /// The CA that signed the nodes' certificate, as a PEM file (for `curl --cacert`).
    pub ca_file: tempfile::NamedTempFile,
}

impl Cluster {
    /// Starts tu-berlin, potsdam and cloud with `max_body_bytes` as the body limit.
    pub async fn start(max_body_bytes: usize) -> Self {
        Self::start_with(|ports| topology_text(ports, max_body_bytes)).await
    }

    /// Starts the three nodes of the topology `text(ports)` writes for three bound ports.
    pub async fn start_with(text: impl FnOnce(&[u16]) -> String) -> Self {
        Self::start_opts(text, false).await
    }

    /// Like [`Cluster::start_with`]; `probe_peers` turns on the nodes' peer health probes.
    pub async fn start_opts(text: impl FnOnce(&[u16]) -> String, probe_peers: bool) -> Self {
        let listeners = [
            TcpListener::bind("127.0.0.1:0").await.unwrap(),
            TcpListener::bind("127.0.0.1:0").await.unwrap(),
            TcpListener::bind("127.0.0.1:0").await.unwrap(),
        ];
        let ports: Vec<u16> = listeners
            .iter()
            .map(|l| l.local_addr().unwrap().port())
            .collect();
        let text = text(&ports);
        let base = geofaas_test_support::paths::manifest_dir().join("testdata");
        let topology =
            Arc::new(Topology::parse(&text, "cluster.toml", &base).expect("test topology"));
        let tls = TlsMaterial::generate(&["127.0.0.1".to_owned(), "localhost".to_owned()]).unwrap();
        let opts = NodeOptions {
            offload_secret: Some(b"test secret".to_vec()),
            ca_pem: Some(tls.ca_pem.clone().into_bytes()),
            probe_peers,
            ..Default::default()
        };
        let mut nodes = Vec::new();
        for (node, listener) in topology.nodes.iter().zip(listeners) {
            let backends = build_backends(&topology, &node.id).unwrap();
            let state = Arc::new(
                NodeState::new(topology.clone(), &node.id, backends, opts.clone()).unwrap(),
            );
            nodes.push(NodeHandle::spawn(state, listener, &tls).unwrap());
        }
        let ca = reqwest::Certificate::from_pem(tls.ca_pem.as_bytes()).unwrap();
        let client = reqwest::Client::builder()
            .add_root_certificate(ca.clone())
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        let following = reqwest::Client::builder()
            .add_root_certificate(ca)
            .build()
            .unwrap();
        let ca_file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(ca_file.path(), tls.ca_pem.as_bytes()).unwrap();
        Self {
            nodes,
            client,
            following,
            ca_file,
        }
    }

    /// `https://127.0.0.1:<port>` of a node.
    pub fn url(&self, id: &str) -> String {
        let node = self
            .nodes
            .iter()
            .find(|n| n.state.place.id == id)
            .expect("node");
        format!("https://127.0.0.1:{}", node.addr.port())
    }

    /// `GET {node}{path}` from a client at `location` (if any), without following redirects.
    pub async fn get(&self, node: &str, path: &str, location: Option<&str>) -> reqwest::Response {
        let mut req = self.client.get(format!("{}{path}", self.url(node)));
        if let Some(loc) = location {
            req = req.header("X-Client-Location", loc);
        }
        req.send().await.expect("request")
    }

    /// `POST {node}/fn/{function}` from a client at `location`, without following redirects.
    pub async fn post(
        &self,
        node: &str,
        function: &str,
        location: &str,
        body: &'static str,
    ) -> reqwest::Response {
        self.client
            .post(format!("{}/fn/{function}", self.url(node)))
            .header("X-Client-Location", location)
            .body(body)
            .send()
            .await
            .expect("request")
    }

    pub async fn stop(self) {
        for n in self.nodes {
            n.shutdown().await.unwrap();
        }
    }
}

/// The Berlin example on the test ports, with the test functions added.
pub fn topology_text(ports: &[u16], max_body_bytes: usize) -> String {
    let berlin = include_str!("../../../examples/berlin.toml");
    // Keep the paper's areas and functions; point the nodes at the test ports and the test functions.
    let mut text = berlin.to_owned();
    for (i, port) in ports.iter().enumerate() {
        let addr = format!("127.0.0.1{}:8443", i + 1);
        text = text.replace(
            &format!("https://{addr}"),
            &format!("https://127.0.0.1:{port}"),
        );
        text = text.replace(
            &format!("listen = \"{addr}\""),
            &format!("listen = \"127.0.0.1:{port}\""),
        );
    }
    text = text.replace(
        "max_body_bytes = 6291456",
        &format!("max_body_bytes = {max_body_bytes}"),
    );
    text = text.replace(
        "functions_dir = \"../functions\"",
        "functions_dir = \"../../functions\"",
    );
    let edge_extra = "\n[[node.backend]]\nkind = \"local\"\nfunctions_dir = \"edge-functions\"\ntimeout_ms = 1500\n";
    let cloud_extra = "\n[[node.backend]]\nkind = \"local\"\nfunctions_dir = \"cloud-functions\"\n";
    // Each node's block ends before the next `[[node]]` or the first `[[function]]`.
    let mut out = String::new();
    for (i, block) in text.split("[[node]]").enumerate() {
        if i > 0 {
            out.push_str("[[node]]");
        }
        let (node_part, rest) = block
            .split_once("[[function]]")
            .map_or((block, None), |(a, b)| (a, Some(b)));
        out.push_str(node_part);
        if i > 0 {
            out.push_str(if node_part.contains("role = \"cloud\"") {
                cloud_extra
            } else {
                edge_extra
            });
        }
        if let Some(rest) = rest {
            out.push_str("\n[[function]]");
            out.push_str(rest);
        }
    }
    for f in ["flaky", "slow", "cloudonly"] {
        out.push_str(&format!("\n[[function]]\nname = \"{f}\"\n"));
    }
    // `flaky` crashes at the edge and is answered by the cloud: the paper's mode, opted into.
    out = out.replacen(
        "name = \"flaky\"\n",
        "name = \"flaky\"\nretry_on_error = true\n",
        1,
    );
    out
}
