//! The same answers through real DNS clients: dig (BIND) and kdig (Knot), over UDP and TCP.

use tokio::process::Command;

use crate::support::*;

async fn run(tool: &str, args: &[String]) -> String {
    let out = Command::new(tool)
        .args(args)
        .output()
        .await
        .unwrap_or_else(|e| {
            panic!("{tool} not runnable ({e}); install dnsutils and knot-dnsutils")
        });
    assert!(
        out.status.success(),
        "{tool} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn args(s: &TestServer, extra: &[&str]) -> Vec<String> {
    let mut a = vec![
        format!("@{}", s.addr.ip()),
        "-p".into(),
        s.addr.port().to_string(),
        "+time=5".into(),
        "+retry=0".into(),
    ];
    a.extend(extra.iter().map(|e| e.to_string()));
    a
}

#[tokio::test]
async fn dig_gets_the_nearest_gateway_by_ecs_and_by_source_address() {
    let s = start_manual().await;
    for (subnet, want) in [
        ("192.0.2.1/24", TU_BERLIN),
        ("198.51.100.1/24", POTSDAM),
        ("203.0.113.1/24", CLOUD),
        ("100.64.0.1/24", CLOUD),
    ] {
        let sub = format!("+subnet={subnet}");
        let short = run("dig", &args(&s, &["gw.geofaas.test", "A", &sub, "+short"])).await;
        assert_eq!(short.trim(), want.to_string(), "dig {subnet}");
        let tcp = run(
            "dig",
            &args(&s, &["gw.geofaas.test", "A", &sub, "+tcp", "+short"]),
        )
        .await;
        assert_eq!(tcp.trim(), want.to_string(), "dig +tcp {subnet}");
    }
    let full = run(
        "dig",
        &args(&s, &["gw.geofaas.test", "A", "+subnet=192.0.2.1/24"]),
    )
    .await;
    assert!(
        full.contains("CLIENT-SUBNET: 192.0.2.0/24/24"),
        "scope echoed: {full}"
    );
    assert!(
        full.contains("flags: qr aa rd;"),
        "authoritative, no recursion available: {full}"
    );

    let b = run(
        "dig",
        &args(&s, &["-b", "127.0.0.2", "gw.geofaas.test", "A", "+short"]),
    )
    .await;
    assert_eq!(b.trim(), TU_BERLIN.to_string());
    let p = run(
        "dig",
        &args(
            &s,
            &["-b", "127.0.0.3", "gw.geofaas.test", "A", "+short", "+tcp"],
        ),
    )
    .await;
    assert_eq!(p.trim(), POTSDAM.to_string());

    let nx = run("dig", &args(&s, &["nope.geofaas.test", "A"])).await;
    assert!(nx.contains("status: NXDOMAIN"), "{nx}");
    let refused = run("dig", &args(&s, &["example.org", "A"])).await;
    assert!(refused.contains("status: REFUSED"), "{refused}");
}

#[tokio::test]
async fn kdig_agrees() {
    let s = start_manual().await;
    for (subnet, want) in [
        ("192.0.2.1/24", TU_BERLIN),
        ("198.51.100.1/24", POTSDAM),
        ("203.0.113.1/24", CLOUD),
    ] {
        let sub = format!("+subnet={subnet}");
        let out = run("kdig", &args(&s, &["gw.geofaas.test", "A", &sub, "+short"])).await;
        assert_eq!(out.trim(), want.to_string(), "kdig {subnet}");
        let tcp = run(
            "kdig",
            &args(&s, &["gw.geofaas.test", "A", &sub, "+tcp", "+short"]),
        )
        .await;
        assert_eq!(tcp.trim(), want.to_string(), "kdig +tcp {subnet}");
    }
    let full = run(
        "kdig",
        &args(&s, &["gw.geofaas.test", "A", "+subnet=198.51.100.1/24"]),
    )
    .await;
    assert!(full.contains("198.51.100.0/24/24"), "scope echoed: {full}");
}
