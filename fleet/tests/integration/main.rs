//! The fleet crate against a real etcd: nodes join and leave, an overlapping area is refused
//! (also when two overlapping nodes join at the same moment), load reports and call records
//! reach the other readers, a node joins over TLS with credentials (wrong ones are named), and
//! a dead etcd leaves the last view.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use geofaas_config::{RegistrySettings, Topology};
use geofaas_fleet::{Fleet, FleetError, LoadSource, NodeLoad, NodeRecord, Shared, Status};
use geofaas_test_support::etcd::EtcdServer;
use geofaas_test_support::peers::require;

struct Idle;
impl LoadSource for Idle {
    fn load(&self) -> NodeLoad {
        NodeLoad {
            queued: 3,
            ..Default::default()
        }
    }
}

fn berlin() -> Topology {
    let text = include_str!("../../../examples/berlin.toml");
    Topology::parse(text, "berlin.toml", Path::new("../examples")).unwrap()
}

fn settings(etcd: &EtcdServer) -> RegistrySettings {
    let mut s = RegistrySettings::new(vec![etcd.url().parse().unwrap()]);
    if let Some(files) = etcd.tls() {
        s.tls = Some(geofaas_config::RegistryTls {
            ca: files.ca.clone(),
            cert: Some(files.cert.clone()),
            key: Some(files.key.clone()),
            domain: None,
        });
    }
    s.lease_ttl_s = 2;
    s.load_interval_ms = 100;
    s
}

fn record(t: &Topology, id: &str) -> NodeRecord {
    let wkt = t.service_map().unwrap().node(id).unwrap().area.to_wkt();
    NodeRecord::of(t.node(id).unwrap(), wkt, vec!["echo".into()])
}

async fn eventually(bound: Duration, cond: impl FnMut() -> bool) -> bool {
    geofaas_test_support::eventually::holds_within(bound, cond).await
}

fn ids(f: &Fleet) -> Vec<String> {
    f.view().borrow().nodes.keys().cloned().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_join_report_load_leave_and_an_overlap_is_refused() {
    let Some(etcd) = require(EtcdServer::start().await) else {
        return;
    };
    let t = Arc::new(berlin());
    let s = settings(&etcd);
    let reader = Fleet::start(&s).unwrap();
    let writer = Fleet::start(&s).unwrap();
    let a = writer.join(record(&t, "tu-berlin"), t.clone(), Arc::new(Idle));
    let b = writer.join(record(&t, "potsdam"), t.clone(), Arc::new(Idle));
    assert!(
        eventually(Duration::from_secs(5), || ids(&reader)
            == ["potsdam", "tu-berlin"])
        .await,
        "{:?}",
        ids(&reader)
    );
    // A reader reads the reports of the nodes it asks for, and only those.
    geofaas_test_support::eventually::assert_within(
        Duration::from_secs(5),
        "potsdam's report",
        || async {
            let loads = reader.loads_of(&["potsdam", "nosuch"]).await;
            loads.len() == 1
                && loads
                    .get("potsdam")
                    .is_some_and(|l| l.load.queued == 3 && l.memory_bytes > 0)
        },
    )
    .await;
    assert_eq!(
        reader
            .loads_of(&["tu-berlin"])
            .await
            .keys()
            .collect::<Vec<_>>(),
        ["tu-berlin"]
    );

    // A node claiming tu-berlin's hexagon is refused and never appears.
    let mut copycat = record(&t, "tu-berlin");
    copycat.id = "copycat".into();
    let mut file = (*t).clone();
    let mut cfg = t.node("tu-berlin").unwrap().clone();
    cfg.id = "copycat".into();
    file.nodes.push(cfg);
    file.nodes.retain(|n| n.id != "tu-berlin");
    let c = writer.join(copycat, Arc::new(file), Arc::new(Idle));
    let mut status = c.status();
    let refused = tokio::time::timeout(
        Duration::from_secs(5),
        status.wait_for(|s| matches!(s, Status::Refused(_))),
    )
    .await;
    let Status::Refused(reason) = refused.expect("refused within 5 s").unwrap().clone() else {
        unreachable!()
    };
    assert!(reason.contains("overlaps tu-berlin's"), "{reason}");
    assert_eq!(ids(&reader), ["potsdam", "tu-berlin"]);
    c.leave().await;

    // Leaving deletes the key at once.
    a.leave().await;
    assert!(eventually(Duration::from_secs(2), || ids(&reader) == ["potsdam"]).await);
    b.leave().await;
    assert!(eventually(Duration::from_secs(2), || ids(&reader).is_empty()).await);
    assert!(reader.loads_of(&["potsdam", "tu-berlin"]).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_records_are_shared_and_a_dead_etcd_leaves_the_last_view() {
    let Some(mut etcd) = require(EtcdServer::start().await) else {
        return;
    };
    let t = Arc::new(berlin());
    let s = settings(&etcd);
    let reader = Fleet::start(&s).unwrap();
    let writer = Fleet::start(&s).unwrap();
    let _a = writer.join(record(&t, "tu-berlin"), t.clone(), Arc::new(Idle));
    assert!(eventually(Duration::from_secs(5), || writer.is_following()).await);
    // `put` returns once the record is in etcd: a read straight after finds it.
    assert_eq!(
        writer
            .calls()
            .put("echo\nkey-1", b"first answer".to_vec())
            .await,
        Shared::Written
    );
    let etcd_client = geofaas_fleet::Etcd::connect(&s).unwrap();
    let (kvs, _) = etcd_client.range_prefix(b"/geofaas/calls/").await.unwrap();
    assert_eq!(kvs.len(), 1, "the record is in etcd when put returns");
    assert_eq!(
        writer
            .calls()
            .put("echo\nbig", vec![0; s.call_record_max_bytes + 1])
            .await,
        Shared::TooLarge
    );
    assert!(
        eventually(Duration::from_secs(5), || reader
            .calls()
            .get("echo\nkey-1")
            .is_some())
        .await
    );
    assert_eq!(
        reader.calls().get("echo\nkey-1").unwrap().as_slice(),
        b"first answer"
    );
    assert!(reader.calls().get("echo\nbig").is_none());

    // A frozen (slow) etcd: the record waits `call_record_wait_ms` at most, then stays local.
    etcd.pause().unwrap();
    let put = writer.calls().put("echo\nslow", b"kept".to_vec());
    let put = tokio::time::timeout(Duration::from_secs(5), put).await;
    etcd.resume().unwrap();
    assert_eq!(put, Ok(Shared::Local), "bounded wait, then local only");
    assert!(writer.calls().get("echo\nslow").is_some(), "kept here");
    assert!(eventually(Duration::from_secs(5), || ids(&reader) == ["tu-berlin"]).await);

    etcd.kill().await;
    // Longer than the lease: with etcd gone nothing expires and the readers keep their view.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(ids(&reader), ["tu-berlin"]);
    assert!(reader.calls().get("echo\nkey-1").is_some());
    // With etcd gone a record is kept locally, without waiting for etcd once the watch knows.
    assert!(eventually(Duration::from_secs(10), || !writer.is_following()).await);
    assert_eq!(
        writer.calls().put("echo\nkey-2", b"later".to_vec()).await,
        Shared::Local
    );
    assert!(writer.calls().get("echo\nkey-2").is_some(), "kept here");
}

/// The records of one window share a lease granted for the TTL plus the window (one etcd request
/// per keyed call instead of two); a record put after that lease was revoked gets a new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_records_of_a_window_share_one_lease_and_a_lost_lease_is_replaced() {
    let Some(etcd) = require(EtcdServer::start().await) else {
        return;
    };
    let t = Arc::new(berlin());
    let mut s = settings(&etcd);
    s.call_record_ttl_s = 600; // a window of 60 s: the puts below all fall in the first one
    let writer = Fleet::start(&s).unwrap();
    let _a = writer.join(record(&t, "tu-berlin"), t.clone(), Arc::new(Idle));
    assert!(eventually(Duration::from_secs(5), || writer.is_following()).await);
    for n in 0..4 {
        let key = format!("echo\nkey-{n}");
        assert_eq!(
            writer.calls().put(&key, b"x".to_vec()).await,
            Shared::Written
        );
    }
    let client = geofaas_fleet::Etcd::connect(&s).unwrap();
    let leases = || async {
        let (kvs, _) = client.range_prefix(b"/geofaas/calls/").await.unwrap();
        kvs.iter().map(|kv| kv.lease).collect::<Vec<_>>()
    };
    let before = leases().await;
    assert_eq!(before.len(), 4);
    assert!(
        before.iter().all(|&l| l != 0 && l == before[0]),
        "{before:?}"
    );
    let (_, granted) = client.time_to_live(before[0]).await.unwrap().unwrap();
    assert_eq!(granted, 660, "the TTL plus the window");

    // The lease is revoked (its records go with it): the next record is written on a new one.
    client.revoke(before[0]).await.unwrap();
    assert!(leases().await.is_empty());
    let put = writer.calls().put("echo\nafter", b"y".to_vec());
    assert_eq!(put.await, Shared::Written);
    let after = leases().await;
    assert_eq!(after.len(), 1);
    assert_ne!(after[0], before[0]);
    assert!(client.time_to_live(after[0]).await.unwrap().is_some());
}

/// Two nodes claiming the same hexagon join at the same moment, each through its own client:
/// the check and the put are one transaction, so exactly one gets in and the other is refused
/// with the reason and keeps checking (it stays out). Five rounds, each under its own prefix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_overlapping_nodes_joining_at_once_exactly_one_gets_in() {
    let Some(etcd) = require(EtcdServer::start().await) else {
        return;
    };
    let t = Arc::new(berlin());
    for round in 0..5 {
        let mut s = settings(&etcd);
        s.prefix = format!("/race-{round}/");
        let reader = Fleet::start(&s).unwrap();
        let (fa, fb) = (Fleet::start(&s).unwrap(), Fleet::start(&s).unwrap());
        let (ra, rb) = (record(&t, "tu-berlin"), {
            let mut r = record(&t, "tu-berlin");
            r.id = "copycat".into();
            r
        });
        let mut file_b = (*t).clone();
        file_b.nodes.retain(|n| n.id != "tu-berlin");
        let a = fa.join(ra, t.clone(), Arc::new(Idle));
        let b = fb.join(rb, Arc::new(file_b), Arc::new(Idle));
        let settled = |s: &Status| matches!(s, Status::Registered(_) | Status::Refused(_));
        let (mut sa, mut sb) = (a.status(), b.status());
        let bound = Duration::from_secs(5);
        let sa = tokio::time::timeout(bound, sa.wait_for(settled)).await;
        let sb = tokio::time::timeout(bound, sb.wait_for(settled)).await;
        let (sa, sb) = (sa.unwrap().unwrap().clone(), sb.unwrap().unwrap().clone());
        let (winner, reason) = match (&sa, &sb) {
            (Status::Registered(_), Status::Refused(r)) => ("tu-berlin", r.clone()),
            (Status::Refused(r), Status::Registered(_)) => ("copycat", r.clone()),
            other => panic!("round {round}: exactly one must get in, got {other:?}"),
        };
        let loser = if winner == "tu-berlin" {
            "copycat"
        } else {
            "tu-berlin"
        };
        assert!(
            reason.contains(&format!("overlaps {winner}'s")),
            "round {round}: {reason}"
        );
        assert!(
            eventually(Duration::from_secs(5), || ids(&reader) == [winner]).await,
            "round {round}: {:?}",
            ids(&reader)
        );
        // The loser keeps running alone: its next check (a third of the lease TTL later) is a
        // refusal again, and it is still not in the registry.
        let mut again = if winner == "tu-berlin" {
            b.status()
        } else {
            a.status()
        };
        again.borrow_and_update();
        tokio::time::timeout(bound, again.changed())
            .await
            .unwrap()
            .unwrap();
        assert!(
            matches!(*again.borrow(), Status::Refused(_)),
            "round {round}: {loser} stays refused"
        );
        assert_eq!(ids(&reader), [winner], "round {round}");
        a.leave().await;
        b.leave().await;
    }
}

/// The env variable names of one test (each test owns its names; nextest runs tests apart).
fn credentials_in_env(settings: &mut RegistrySettings, tag: &str, user: &str, password: &str) {
    let (u, p) = (
        format!("GEOFAAS_TEST_{tag}_USER"),
        format!("GEOFAAS_TEST_{tag}_PASSWORD"),
    );
    std::env::set_var(&u, user);
    std::env::set_var(&p, password);
    settings.user_env = Some(u);
    settings.password_env = Some(p);
}

/// etcd over TLS (client certificates required) with authentication on: a node joins with the
/// right user and password from the environment; a wrong password gets an error that names the
/// user and where the credentials came from, and no registration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_joins_over_tls_with_credentials_and_wrong_ones_are_refused_clearly() {
    let Some(etcd) = require(EtcdServer::start_tls().await) else {
        return;
    };
    etcd.enable_auth("root secret", "edge", "edge secret", "/geofaas/")
        .await
        .unwrap();
    let files = etcd.tls().unwrap().clone();
    let mut s = settings(&etcd);
    s.tls = Some(geofaas_config::RegistryTls {
        ca: files.ca.clone(),
        cert: Some(files.cert.clone()),
        key: Some(files.key.clone()),
        domain: None,
    });
    let mut good = s.clone();
    credentials_in_env(&mut good, "TLS_GOOD", "edge", "edge secret");
    let t = Arc::new(berlin());
    let reader = Fleet::start(&good).unwrap();
    let writer = Fleet::start(&good).unwrap();
    let member = writer.join(record(&t, "tu-berlin"), t.clone(), Arc::new(Idle));
    assert!(
        eventually(Duration::from_secs(5), || ids(&reader) == ["tu-berlin"]).await,
        "joined over TLS with credentials: {:?}",
        *member.status().borrow()
    );

    let mut bad = s.clone();
    credentials_in_env(&mut bad, "TLS_BAD", "edge", "not the password");
    let err = geofaas_fleet::Etcd::connect(&bad)
        .unwrap()
        .range_prefix(b"/geofaas/")
        .await
        .unwrap_err();
    assert!(matches!(err, FleetError::Credentials(_)), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("\"edge\"") && text.contains("GEOFAAS_TEST_TLS_BAD_PASSWORD"),
        "{text}"
    );
    assert!(
        !text.contains("not the password"),
        "no password in errors: {text}"
    );
    let intruder = Fleet::start(&bad).unwrap();
    let pd = intruder.join(record(&t, "potsdam"), t.clone(), Arc::new(Idle));
    let mut pd_status = pd.status();
    let failing = tokio::time::timeout(
        Duration::from_secs(5),
        pd_status.wait_for(|s| matches!(s, Status::Failing(_))),
    )
    .await;
    let Status::Failing(why) = failing.unwrap().unwrap().clone() else {
        unreachable!()
    };
    assert!(why.contains("credentials refused"), "{why}");
    assert_eq!(ids(&reader), ["tu-berlin"], "not registered");
    pd.leave().await;

    // Without credentials etcd refuses too; without the client certificate TLS does.
    let mut no_cert = good.clone();
    if let Some(tls) = &mut no_cert.tls {
        tls.cert = None;
        tls.key = None;
    }
    let err = geofaas_fleet::Etcd::connect(&no_cert)
        .unwrap()
        .range_prefix(b"/geofaas/")
        .await
        .unwrap_err();
    assert!(!matches!(err, FleetError::Credentials(_)), "{err}");
    member.leave().await;
}

/// Settings that cannot work are errors naming the field, before any connection.
#[test]
fn unusable_tls_files_and_unset_variables_name_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = RegistrySettings::new(vec!["https://127.0.0.1:1".parse().unwrap()]);
    s.tls = Some(geofaas_config::RegistryTls {
        ca: dir.path().join("missing.pem"),
        cert: None,
        key: None,
        domain: None,
    });
    let err = geofaas_fleet::Etcd::connect(&s).unwrap_err().to_string();
    assert!(err.starts_with("registry.tls.ca: cannot read"), "{err}");
    std::fs::write(dir.path().join("junk.pem"), "not a certificate").unwrap();
    s.tls.as_mut().unwrap().ca = dir.path().join("junk.pem");
    let err = geofaas_fleet::Etcd::connect(&s).unwrap_err().to_string();
    assert!(
        err.starts_with("registry.tls.ca:") && err.contains("no PEM"),
        "{err}"
    );
    let mut s = RegistrySettings::new(vec!["http://127.0.0.1:1".parse().unwrap()]);
    s.user_env = Some("GEOFAAS_TEST_UNSET_USER_VARIABLE".into());
    s.password_env = Some("GEOFAAS_TEST_UNSET_PASSWORD_VARIABLE".into());
    let err = geofaas_fleet::Etcd::connect(&s).unwrap_err().to_string();
    assert!(
        err.starts_with("registry.user_env:") && err.contains("GEOFAAS_TEST_UNSET_USER_VARIABLE"),
        "{err}"
    );
}
