//! `geofaas dns` reloads its topology on SIGHUP, as a process queried with `dig`: a valid new
//! file changes the answers, an invalid one is refused and the running answers stay.

use std::process::{Command, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_geofaas");

fn dig(port: u16) -> String {
    let out = Command::new("dig")
        .args([
            "@127.0.0.1",
            "-p",
            &port.to_string(),
            "gw.geofaas.test",
            "A",
        ])
        .args(["+subnet=192.0.2.1/24", "+short", "+time=1", "+tries=1"])
        .output()
        .expect("dig runs");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Polls `dig` until it answers `want` (the server restarts its sockets on a reload).
async fn answers(port: u16, want: &str) -> String {
    let mut got = String::new();
    for _ in 0..100 {
        got = tokio::task::block_in_place(|| dig(port));
        if got == want {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_applies_a_valid_topology_and_keeps_serving_through_an_invalid_one() {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let berlin = include_str!("../../../examples/berlin.toml").replace(
        "listen = \"127.0.0.1:5353\"",
        &format!("listen = \"127.0.0.1:{port}\""),
    );
    let path = dir.path().join("topology.toml");
    std::fs::write(&path, &berlin).unwrap();
    let mut child = Command::new(BIN)
        .args([
            "dns",
            "--no-health-checks",
            "--udp-sockets",
            "1",
            "--config",
        ])
        .arg(&path)
        .arg("--demo-mmdb")
        .arg(dir.path().join("demo.mmdb"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("dns.log")).unwrap())
        .spawn()
        .unwrap();
    let pid = child.id().to_string();
    let hup = || {
        assert!(Command::new("kill")
            .args(["-HUP", &pid])
            .status()
            .unwrap()
            .success());
    };
    assert_eq!(answers(port, "127.0.0.11").await, "127.0.0.11");

    // tu-berlin moves to another address.
    std::fs::write(
        &path,
        berlin.replace("https://127.0.0.11:8443", "https://127.0.0.21:8443"),
    )
    .unwrap();
    hup();
    assert_eq!(answers(port, "127.0.0.21").await, "127.0.0.21");

    // A broken file is refused: the answers stay.
    std::fs::write(&path, "zone = \"no trailing dot\"\n[[node]]\n").unwrap();
    hup();
    let log = dir.path().join("dns.log");
    let mut refused = false;
    for _ in 0..100 {
        refused = std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("topology refused");
        if refused {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(refused, "the reload was refused with its reason logged");
    assert_eq!(tokio::task::block_in_place(|| dig(port)), "127.0.0.21");
    assert!(
        child.try_wait().unwrap().is_none(),
        "the server is still running"
    );
    let _ = child.kill();
    let _ = child.wait();
}
