//! Warming one instance ahead of a call (`LocalRuntime::warm_one`): the next call is warm and
//! the instance counts as used; one that no call takes before it is stopped counts as
//! started in vain.

use std::time::Duration;

use geofaas_functions::local::{PrewarmStats, WarmUp};

use crate::{fixtures, ok_text, pid_of, runtime};

#[tokio::test]
async fn a_warmed_instance_takes_the_next_call_warm() {
    let rt = runtime(&fixtures());
    assert_eq!(rt.warm_one("pid").await.unwrap(), WarmUp::Started);
    assert_eq!(rt.stats("pid").map(|s| (s.idle, s.busy)), Some((1, 0)));
    assert_eq!(rt.warm_one("pid").await.unwrap(), WarmUp::AlreadyWarm);
    assert_eq!(rt.stats("pid").map(|s| s.idle), Some(1), "still one");
    let (text, out) = ok_text(&rt, "pid", "").await;
    assert!(!out.cold_start, "the warmed instance served it");
    let (again, _) = ok_text(&rt, "pid", "").await;
    assert_eq!(pid_of(&text), pid_of(&again), "one instance all along");
    let want = PrewarmStats {
        started: 1,
        used: 1,
        wasted: 0,
    };
    assert_eq!(rt.prewarm_stats(), want);
    assert_eq!(
        rt.warm_one("no-such-function").await.unwrap(),
        WarmUp::NotServed
    );
}

#[tokio::test]
async fn a_warmed_instance_stopped_unused_was_started_in_vain() {
    let rt = runtime(&fixtures());
    assert_eq!(rt.warm_one("pid").await.unwrap(), WarmUp::Started);
    assert_eq!(rt.evict_idle(Duration::ZERO), 1);
    let want = PrewarmStats {
        started: 1,
        used: 0,
        wasted: 1,
    };
    assert_eq!(rt.prewarm_stats(), want);
    assert!(
        ok_text(&rt, "pid", "").await.1.cold_start,
        "nothing warm is left"
    );
    // An instance a call started is no pre-warmed one: stopping it counts nothing.
    assert_eq!(rt.evict_idle(Duration::ZERO), 1);
    assert_eq!(rt.prewarm_stats(), want);
}
