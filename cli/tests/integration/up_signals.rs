//! `geofaas up` (a child process, from its own folder) under the signals an operator and a
//! terminal send: SIGHUP while a call runs reloads every node (the reloaded topology serves a
//! function only it names) and the call is answered; SIGTERM while a call runs turns `/readyz`
//! to 503 on every node, answers the call and exits 0. Calls made with `curl`.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::deploy::BIN;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Two Lisbon edges and a cloud, every node serving `dir`.
fn topology(ports: &[u16], dns: u16, dir: &str) -> String {
    let node = |id: &str, role: &str, area: &str, port: u16| {
        format!(
            "[[node]]\nid = \"{id}\"\nrole = \"{role}\"\nlocation = {{ lat = 38.72, lon = -9.14 }}\n{area}\n\
             public_url = \"https://127.0.0.1:{port}\"\nlisten = \"127.0.0.1:{port}\"\n\
             [[node.backend]]\nkind = \"local\"\nfunctions_dir = \"{dir}\"\n\n"
        )
    };
    let circle = |lat: f64, lon: f64| {
        format!("area.circle = {{ center = {{ lat = {lat}, lon = {lon} }}, radius_km = 3 }}")
    };
    [
        format!("zone = \"lisbon.test.\"\n\n[dns]\nlisten = \"127.0.0.1:{dns}\"\n\n[gateway]\ndrain_grace_ms = 1000\n\n"),
        node("baixa", "edge", &circle(38.7107, -9.1366), ports[0]),
        node("belem", "edge", &circle(38.6979, -9.2068), ports[1]),
        node("cloud", "cloud", "area = \"world\"", ports[2]),
    ]
    .concat()
}

fn write_fn(dir: &Path, name: &str, body: &str) {
    std::fs::create_dir_all(dir.join(name)).unwrap();
    std::fs::write(dir.join(name).join("fn.py"), body).unwrap();
}

const BAIXA: &str = "X-Client-Location: 38.7107,-9.1366";

fn curl(ca: &Path, port: u16, args: &[&str], path: &str) -> (String, String) {
    let out = Command::new("curl")
        .args(["-sS", "-w", "\n%{http_code}", "--cacert"])
        .arg(ca)
        .args(args)
        .arg(format!("https://127.0.0.1:{port}{path}"))
        .output()
        .expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.to_owned(), body.to_owned())
}

fn signal(child: &Child, sig: &str) {
    let status = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn up_reloads_on_sighup_and_drains_on_sigterm_answering_the_call_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let slow = "import time\n\ndef fn(input, headers):\n    time.sleep(1.5)\n    return 'slept ' + input\n";
    write_fn(&dir.path().join("functions"), "slow", slow);
    write_fn(&dir.path().join("functions-v2"), "slow", slow);
    write_fn(
        &dir.path().join("functions-v2"),
        "fresh",
        "def fn(input, headers):\n    return 'from the reloaded topology'\n",
    );
    let ports = [free_port(), free_port(), free_port()];
    let dns = free_port();
    let config = dir.path().join("lisbon.toml");
    std::fs::write(&config, topology(&ports, dns, "functions")).unwrap();
    let mut up = Command::new(BIN)
        .args(["up", "--config", "lisbon.toml"])
        .current_dir(dir.path())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("geofaas up starts");
    let ca = dir.path().join(".geofaas/ca.pem");
    let ready = |port: u16| curl(&ca, port, &[], "/readyz").0;
    let deadline = Instant::now() + Duration::from_secs(30);
    while !(ca.is_file() && ports.iter().all(|p| ready(*p) == "200")) {
        assert!(Instant::now() < deadline, "geofaas up did not come up");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (code, _) = curl(&ca, ports[0], &["-H", BAIXA, "-d", "x"], "/fn/fresh");
    assert_eq!(code, "404", "fresh is only in the reloaded topology");

    // SIGHUP while a call runs: the call is answered, `up` runs on with the new topology.
    std::thread::scope(|s| {
        let call = s.spawn(|| curl(&ca, ports[0], &["-H", BAIXA, "-d", "one"], "/fn/slow"));
        std::thread::sleep(Duration::from_millis(400));
        std::fs::write(&config, topology(&ports, dns, "functions-v2")).unwrap();
        signal(&up, "-HUP");
        assert_eq!(call.join().unwrap(), ("200".into(), "slept one".into()));
    });
    assert!(up.try_wait().unwrap().is_none(), "up died of SIGHUP");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (code, body) = curl(&ca, ports[0], &["-H", BAIXA, "-d", "x"], "/fn/fresh");
        if code == "200" {
            assert_eq!(body, "from the reloaded topology");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the reload never took: {code} {body}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // A topology that drops a node is refused whole; every node keeps serving.
    let two = topology(&ports, dns, "functions-v2");
    let (belem, cloud) = (
        two.find("[[node]]\nid = \"belem\"").unwrap(),
        two.find("[[node]]\nid = \"cloud\"").unwrap(),
    );
    std::fs::write(&config, format!("{}{}", &two[..belem], &two[cloud..])).unwrap();
    signal(&up, "-HUP");
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        up.try_wait().unwrap().is_none(),
        "up died of a refused reload"
    );
    for port in ports {
        assert_eq!(ready(port), "200");
    }

    // SIGTERM while a call runs: every node not ready, the call answered, exit 0.
    std::thread::scope(|s| {
        let call = s.spawn(|| curl(&ca, ports[0], &["-H", BAIXA, "-d", "two"], "/fn/slow"));
        std::thread::sleep(Duration::from_millis(400));
        let sent = Instant::now();
        signal(&up, "-TERM");
        let mut not_ready = Vec::new();
        for port in ports {
            let deadline = Instant::now() + Duration::from_secs(5);
            while ready(port) != "503" {
                assert!(
                    Instant::now() < deadline,
                    "node on {port} never said not ready"
                );
            }
            not_ready.push(sent.elapsed());
        }
        eprintln!("readyz 503 on every node after {not_ready:?} (SIGTERM at 0)");
        let answered = call.join().unwrap();
        assert_eq!(answered.0, "200", "{answered:?}");
        assert!(answered.1.starts_with("slept two"), "{answered:?}");
    });
    let deadline = Instant::now() + Duration::from_secs(40);
    let status = loop {
        if let Some(status) = up.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "up did not exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "up exited with {status}");
}
