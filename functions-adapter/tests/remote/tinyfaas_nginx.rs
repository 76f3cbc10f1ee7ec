//! The tinyFaaS adapter's keep-alive connections against a real HTTP/1.1 server: nginx standing
//! in for the tinyFaaS proxy (as in `bench/gateway`), closing connections after a few requests
//! (`keepalive_requests`, which answers the last one with `Connection: close`) and after an idle
//! second (`keepalive_timeout`). nginx's access log says which connection served each request.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use geofaas_config::TinyfaasBackend;
use geofaas_functions::tinyfaas::TinyfaasAdapter;
use geofaas_functions::FunctionBackend;

use crate::call;

struct Nginx {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Nginx {
    fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let d = dir.path().display();
        let conf = format!(
            "daemon off;\nmaster_process off;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
             events {{ worker_connections 64; }}\n\
             http {{\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n\
             fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n\
             log_format conn '$connection $request_method $uri';\n\
             access_log {d}/access.log conn;\n  default_type text/plain;\n\
             keepalive_requests 3;\n  keepalive_timeout 1s;\n\
             server {{ listen 127.0.0.1:{port}; location / {{ return 200 \"Hello, World\\n\"; }} }}\n}}\n"
        );
        std::fs::write(dir.path().join("nginx.conf"), conf).unwrap();
        // Debian puts it in /usr/sbin, which a user's PATH may lack.
        let bin = ["/usr/sbin/nginx", "/usr/local/sbin/nginx"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .unwrap_or("nginx");
        let child = Command::new(bin)
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(dir.path().join("nginx.conf"))
            .stderr(Stdio::null())
            .spawn()
            .expect("nginx must be installed for this test (apt-get install nginx; scripts/test.sh does)");
        // Killed and reaped by `Drop`, also when it does not come up.
        let nginx = Self { child, port, dir };
        for _ in 0..200 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return nginx;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!(
            "nginx did not start: {}",
            log(&nginx.dir.path().join("error.log"))
        );
    }

    /// The connection number of each request nginx has logged, in order, once it has logged
    /// `n` (nginx writes a request's line after its answer has gone out).
    fn connections(&self, n: usize) -> Vec<u64> {
        let read = || -> Vec<u64> {
            log(&self.dir.path().join("access.log"))
                .lines()
                .map(|l| l.split(' ').next().unwrap().parse().unwrap())
                .collect()
        };
        for _ in 0..300 {
            let conns = read();
            if conns.len() >= n {
                return conns;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        read()
    }
}

fn log(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

fn adapter(port: u16) -> TinyfaasAdapter {
    let cfg: TinyfaasBackend = toml::from_str(&format!(
        "url = \"http://127.0.0.1:{port}\"\nmanager_url = \"http://127.0.0.1:{port}\"\n"
    ))
    .unwrap();
    TinyfaasAdapter::new(&cfg, &[]).unwrap()
}

async fn hello(a: &TinyfaasAdapter) {
    let out = a
        .invoke(call("echo", "hi", Duration::from_secs(5)))
        .await
        .unwrap();
    assert_eq!(&out.body.full().unwrap()[..], b"Hello, World\n");
    assert_eq!(out.headers["content-type"], "text/plain");
}

#[tokio::test]
async fn connections_nginx_closes_after_its_keepalive_requests_are_not_used_again() {
    let nginx = Nginx::start();
    let a = adapter(nginx.port);
    for _ in 0..7 {
        hello(&a).await;
    }
    // nginx answers the third request on a connection with `Connection: close`; the adapter
    // must open a new one for the fourth, never send on the closed one.
    let conns = nginx.connections(7);
    assert_eq!(conns.len(), 7, "{conns:?}");
    let per_connection: Vec<usize> = conns.chunk_by(|a, b| a == b).map(<[u64]>::len).collect();
    assert_eq!(per_connection, [3, 3, 1], "{conns:?}");
}

#[tokio::test]
async fn a_connection_nginx_closed_while_idle_is_replaced() {
    let nginx = Nginx::start();
    let a = adapter(nginx.port);
    hello(&a).await;
    // Well past nginx's one-second keep-alive timeout, also on a loaded machine.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    hello(&a).await;
    let conns = nginx.connections(2);
    assert_eq!(conns.len(), 2, "{conns:?}");
    assert_ne!(
        conns[0], conns[1],
        "the second call must use a new connection"
    );
}
