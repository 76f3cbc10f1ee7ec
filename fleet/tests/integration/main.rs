//! The fleet crate against a real etcd: nodes join and leave, an overlapping area is refused,
//! load reports and call records reach the other readers, and a dead etcd leaves the last view.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use geofaas_config::{RegistrySettings, Topology};
use geofaas_fleet::{Fleet, LoadSource, NodeLoad, NodeRecord, Status};
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
    s.lease_ttl_s = 2;
    s.load_interval_ms = 100;
    s
}

fn record(t: &Topology, id: &str) -> NodeRecord {
    let wkt = t.service_map().unwrap().node(id).unwrap().area.to_wkt();
    NodeRecord::of(t.node(id).unwrap(), wkt, vec!["echo".into()])
}

/// Polls `cond` every 20 ms for at most `bound`.
async fn eventually(bound: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = std::time::Instant::now();
    while start.elapsed() < bound {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cond()
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
    assert!(
        eventually(Duration::from_secs(5), || reader
            .loads()
            .get("potsdam")
            .is_some_and(|l| l.load.queued == 3 && l.memory_bytes > 0))
        .await
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
    assert!(eventually(Duration::from_secs(2), || reader.loads().is_empty()).await);
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
    assert!(writer.calls().put("echo\nkey-1", b"first answer".to_vec()));
    assert!(
        !writer
            .calls()
            .put("echo\nbig", vec![0; s.call_record_max_bytes + 1]),
        "too large to share"
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
    assert!(eventually(Duration::from_secs(5), || ids(&reader) == ["tu-berlin"]).await);

    etcd.kill().await;
    // Longer than the lease: with etcd gone nothing expires and the readers keep their view.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(ids(&reader), ["tu-berlin"]);
    assert!(reader.calls().get("echo\nkey-1").is_some());
}
