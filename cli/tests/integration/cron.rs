//! Cron triggers across three real `geofaas node` processes sharing a `--state-dir` (a Kyoto
//! and an Osaka edge, a Tokyo cloud; no registry): a function deployed with `geofaas deploy
//! --cron "* * * * * *"` runs once a second, the Osaka node killed with SIGKILL and started
//! again meanwhile; every tick runs once, none twice, and `functions ls` shows the schedule.
//! A bad expression is refused at deploy, naming it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::processes::{text, Fleet, NodeSpec};

const NODES: [NodeSpec; 3] = [
    ("kyoto", "edge", 35.01, 135.77),
    ("osaka", "edge", 34.69, 135.50),
    ("tokyo", "cloud", 35.68, 139.69),
];

/// Appends the tick of each call, the tick header and the node that ran it to `$OUT`.
const TICKER: &str = r#"import json, os

def fn(body, headers):
    h = {k.lower(): v for k, v in headers.items()}
    tick = json.loads(body)["tick"]
    with open(os.environ["OUT"], "a") as f:
        f.write("%s %s %s %s\n" % (tick, h.get("x-geofaas-tick"), h.get("x-geofaas-trigger"), h.get("x-geo-node")))
    return "ok"
"#;

fn function_dir(root: &Path) -> PathBuf {
    let dir = root.join("ticker");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("fn.py"), TICKER).unwrap();
    dir
}

/// What a schedule ran: the ticks' times (Unix seconds) in the order they ran, per node.
struct Ran {
    times: Vec<i64>,
    by_node: HashMap<String, usize>,
    lines: String,
}

/// Deploys the ticker on `fleet` with `schedule`, kills Osaka `kill_at` after the deploy and
/// starts it again at `restart_at`, removes the function at `end`, and reads what ran.
async fn run_schedule(
    fleet: &mut Fleet,
    schedule: &str,
    (kill_at, restart_at, end): (u64, u64, u64),
) -> Ran {
    for (id, ..) in NODES {
        fleet.wait_ready(id).await;
    }
    let dir = function_dir(fleet.dir.path());
    let dir_arg = dir.to_str().unwrap();
    let out = fleet.path("ticks.txt");
    let env = format!("OUT={}", out.display());
    let deployed = fleet.geofaas(&["deploy", dir_arg, "--cron", schedule, "--env", &env]);
    assert!(deployed.status.success(), "{}", text(&deployed));
    let t0 = std::time::Instant::now();
    let until = |s: u64| {
        let at = t0 + Duration::from_secs(s);
        tokio::time::sleep_until(at.into())
    };

    let ls = fleet.geofaas(&["functions", "ls"]);
    let listed = text(&ls);
    assert!(ls.status.success(), "{listed}");
    let rows: Vec<&str> = listed.lines().filter(|l| l.starts_with("ticker")).collect();
    assert_eq!(rows.len(), 3, "{listed}");
    assert!(rows.iter().all(|r| r.ends_with(schedule)), "{listed}");

    until(kill_at).await;
    fleet.kill("osaka");
    until(restart_at).await;
    fleet.spawn("osaka");
    fleet.wait_ready("osaka").await;
    until(end).await;
    // Stop the schedule: remove the function everywhere, then let calls in flight land.
    let removed = fleet.geofaas(&["functions", "rm", "ticker"]);
    assert!(removed.status.success(), "{}", text(&removed));
    tokio::time::sleep(Duration::from_secs(2)).await;

    let lines = std::fs::read_to_string(&out).unwrap();
    let mut times = Vec::new();
    let mut by_node: HashMap<String, usize> = HashMap::new();
    for line in lines.lines() {
        let parts: Vec<&str> = line.split(' ').collect();
        assert_eq!(parts.len(), 4, "{line}");
        assert_eq!(
            parts[0], parts[1],
            "the tick header is the body's tick: {line}"
        );
        assert_eq!(parts[2], "cron", "{line}");
        *by_node.entry(parts[3].to_owned()).or_default() += 1;
        let at = parts[0].rsplit('/').next().unwrap();
        let at = chrono::DateTime::parse_from_rfc3339(at)
            .unwrap()
            .timestamp();
        times.push(at);
    }
    Ran {
        times,
        by_node,
        lines,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_tick_runs_once_across_three_nodes_while_one_is_killed_and_comes_back() {
    let mut fleet = Fleet::start(
        "kansai",
        &NODES,
        "",
        None,
        "warn,geofaas_gateway::cron=info",
    );
    fleet.wait_ready("kyoto").await;
    let dir = function_dir(fleet.dir.path());
    let bad = fleet.geofaas(&["deploy", dir.to_str().unwrap(), "--cron", "61 * * * *"]);
    let said = text(&bad);
    assert!(!bad.status.success(), "{said}");
    assert!(
        said.contains("bad_cron") || said.contains("61 * * * *"),
        "{said}"
    );

    let ran = run_schedule(&mut fleet, "* * * * * *", (4, 8, 12)).await;
    let mut sorted = ran.times.clone();
    sorted.sort_unstable();
    sorted.dedup();
    let lines = &ran.lines;
    assert_eq!(sorted.len(), ran.times.len(), "a tick ran twice:\n{lines}");
    let span = sorted.last().unwrap() - sorted.first().unwrap() + 1;
    let missing = span - sorted.len() as i64;
    eprintln!(
        "{} ticks over {span} s, {missing} missing, by node {:?}",
        sorted.len(),
        ran.by_node
    );
    assert!(span >= 10, "the schedule ran for {span} s only:\n{lines}");
    // A tick the killed node had claimed but not yet journaled is lost (at most once): allow
    // that one, never more.
    assert!(missing <= 1, "{missing} ticks never ran:\n{lines}");
}

/// The issue's case, claims in a real etcd: a tick every 2 s for 60 s on three nodes, Osaka
/// killed at 20 s and started again at 40 s: 30 runs (one more or less at the window's
/// edges), no tick twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_two_seconds_for_a_minute_with_claims_in_etcd() {
    let etcd = geofaas_test_support::etcd::EtcdServer::start()
        .await
        .unwrap();
    let extra = format!("[registry]\netcd = [\"{}\"]\nlease_ttl_s = 3\n", etcd.url());
    let mut fleet = Fleet::start(
        "kansai",
        &NODES,
        &extra,
        None,
        "warn,geofaas_gateway::cron=info",
    );
    let ran = run_schedule(&mut fleet, "*/2 * * * * *", (20, 40, 60)).await;
    let mut sorted = ran.times.clone();
    sorted.sort_unstable();
    sorted.dedup();
    let lines = &ran.lines;
    eprintln!(
        "{} ticks, first to last {} s, by node {:?}",
        sorted.len(),
        sorted.last().unwrap() - sorted.first().unwrap(),
        ran.by_node
    );
    assert_eq!(sorted.len(), ran.times.len(), "a tick ran twice:\n{lines}");
    assert!(
        (29..=31).contains(&sorted.len()),
        "{} ticks in 60 s:\n{lines}",
        sorted.len()
    );
    // A tick Osaka had claimed and not yet journaled when it was killed is lost: one at most.
    let missing: i64 = sorted.windows(2).map(|w| (w[1] - w[0]) / 2 - 1).sum();
    assert!(missing <= 1, "{missing} ticks missing:\n{lines}");
    drop(etcd);
}
