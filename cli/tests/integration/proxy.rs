//! The proxied call to a remote backend (tinyFaaS, over the adapter's own keep-alive
//! connections): bodies up to the gateway's limit reach the function byte for byte and come
//! back intact, the headers a function needs reach it and the gateway's own stay behind;
//! checked with the real `curl` over HTTP/1.1 and HTTP/2.

use std::process::Command;

use geofaas_test_support::tinyfaas::{FakeFunction, FakeTinyfaas};

use crate::cluster::Cluster;

const LIMIT: usize = 2 * 1024 * 1024;

fn topology(ports: &[u16], tiny: &FakeTinyfaas) -> String {
    format!(
        "[gateway]\nmax_body_bytes = {LIMIT}\n\
         [[node]]\nid = \"cbd\"\nrole = \"edge\"\nlocation = {{ lat = -37.81, lon = 144.96 }}\n\
         area.hexagon = {{ center = {{ lat = -37.81, lon = 144.96 }}, circumradius_deg = 0.1 }}\n\
         public_url = \"https://127.0.0.1:{p0}\"\nlisten = \"127.0.0.1:{p0}\"\n\
         [[node.backend]]\nkind = \"tinyfaas\"\nurl = \"{url}\"\nmanager_url = \"{manager}\"\n\
         [[node]]\nid = \"cloud\"\nrole = \"cloud\"\nlocation = {{ lat = -33.87, lon = 151.21 }}\n\
         public_url = \"https://127.0.0.1:{p2}\"\nlisten = \"127.0.0.1:{p2}\"\n\
         [[node.backend]]\nkind = \"local\"\nfunctions_dir = \"cloud-functions\"\n\
         [[function]]\nname = \"echo\"\n",
        p0 = ports[0],
        p2 = ports[2],
        url = tiny.proxy_url(),
        manager = tiny.manager_url(),
    )
}

/// `curl` POSTs `body` to `url` and returns (status, answer bytes).
fn curl_post(c: &Cluster, http: &str, url: &str, body: &std::path::Path) -> (u16, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("answer");
    let status = Command::new("curl")
        .args(["-s", http, "--cacert"])
        .arg(c.ca_file.path())
        .args(["-w", "%{http_code}", "-o"])
        .arg(&out)
        .args([
            "-H",
            "X-Client-Location: -37.81,144.96",
            "-H",
            "Content-Type: application/octet-stream",
            "-H",
            "X-App-Trace: trace-42",
            "-H",
            "Authorization: Bearer not-for-functions",
            "--data-binary",
        ])
        .arg(format!("@{}", body.display()))
        .arg(url)
        .output()
        .expect("curl runs");
    let code = String::from_utf8_lossy(&status.stdout)
        .trim()
        .parse()
        .unwrap_or(0);
    (code, std::fs::read(&out).unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_up_to_the_limit_and_the_functions_headers_pass_the_proxy() {
    let tiny = FakeTinyfaas::start([("echo", FakeFunction::Echo)])
        .await
        .unwrap();
    let c = Cluster::start_with(|ports| topology(ports, &tiny)).await;
    let url = format!("{}/fn/echo", c.url("cbd"));
    let dir = tempfile::tempdir().unwrap();
    for size in [0, 1, 64 * 1024, LIMIT] {
        let data: Vec<u8> = (0..size).map(|i| (i * 7 % 251) as u8).collect();
        let path = dir.path().join(format!("body-{size}"));
        std::fs::write(&path, &data).unwrap();
        for http in ["--http1.1", "--http2"] {
            let (status, answer) = curl_post(&c, http, &url, &path);
            assert_eq!(status, 200, "{size} B over {http}");
            assert!(answer == data, "{size} B over {http}: the echo differs");
        }
    }
    let calls = tiny.calls();
    let (name, headers, body) = calls.last().expect("the proxy saw the calls");
    assert_eq!(name, "echo");
    assert_eq!(body.len(), LIMIT);
    assert_eq!(headers["x-client-location"], "-37.81,144.96");
    assert_eq!(headers["content-type"], "application/octet-stream");
    assert_eq!(headers["x-app-trace"], "trace-42");
    assert_eq!(headers["content-length"], LIMIT.to_string());
    for gone in ["authorization", "x-geofaas-offload"] {
        assert!(headers.get(gone).is_none(), "{gone} reached the function");
    }

    // One byte over the limit never reaches the function.
    let over = dir.path().join("over");
    std::fs::write(&over, vec![b'x'; LIMIT + 1]).unwrap();
    let before = tiny.calls().len();
    for http in ["--http1.1", "--http2"] {
        let (status, _) = curl_post(&c, http, &url, &over);
        assert_eq!(status, 413, "{http}");
    }
    assert_eq!(tiny.calls().len(), before);
    c.stop().await;
}
