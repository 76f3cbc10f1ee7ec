//! The shipped Grafana dashboard and Prometheus scrape configuration (`deploy/`) name only
//! metrics the nodes really export, and the scrape configuration is valid for Prometheus.

use std::collections::BTreeSet;
use std::path::PathBuf;

use geofaas_gateway::metrics;
use geofaas_test_support::peers::require;

fn repo(path: &str) -> PathBuf {
    geofaas_test_support::paths::workspace_root().join(path)
}

/// Every `geofaas_*` metric name in `expr`, without the histogram series suffixes.
fn names(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("geofaas_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        let name = &tail[..end];
        let base = ["_bucket", "_count", "_sum"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .unwrap_or(name);
        out.push(base.to_owned());
        rest = &tail[end..];
    }
    out
}

#[test]
fn the_dashboard_queries_only_exported_metrics() {
    let text = std::fs::read_to_string(repo("deploy/grafana/geofaas.json")).unwrap();
    let dash: serde_json::Value = serde_json::from_str(&text).unwrap();
    let exported: BTreeSet<&str> = [
        metrics::CALL_SECONDS,
        metrics::BACKEND_SECONDS,
        metrics::COLD_START_SECONDS,
        metrics::HANDOVERS,
        metrics::OFFLOADS,
        metrics::PLACEMENTS,
        metrics::DECISION_SECONDS,
        // The co-hosted geo DNS (dns/src/handler/metrics.rs).
        "geofaas_dns_gateway_answers_total",
        "geofaas_dns_queries_total",
    ]
    .into();
    let panels = dash["panels"].as_array().unwrap();
    assert!(!panels.is_empty());
    let mut used = BTreeSet::new();
    for p in panels {
        let targets = p["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{}", p["title"]);
        for t in targets {
            let expr = t["expr"].as_str().unwrap();
            for name in names(expr) {
                assert!(exported.contains(name.as_str()), "{name} in {expr:?}");
                used.insert(name);
            }
        }
    }
    // Every metric a node exports is on the dashboard.
    let missing: Vec<_> = exported.iter().filter(|m| !used.contains(**m)).collect();
    assert!(missing.is_empty(), "not on the dashboard: {missing:?}");
}

#[test]
fn promtool_accepts_the_scrape_configuration() {
    let promtool = std::process::Command::new("promtool")
        .args(["check", "config", "--syntax-only"])
        .arg(repo("deploy/prometheus/prometheus.yml"))
        .output()
        .map_err(|e| anyhow::anyhow!("promtool (Debian's prometheus): {e}"));
    let Some(out) = require(promtool) else {
        return;
    };
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
