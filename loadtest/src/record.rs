//! What a run writes: one [`Row`] per call (`requests.csv`), latency statistics from HDR
//! histograms, and the run's [`Summary`] (`summary.json`).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use geofaas_config::LatLon;
use hdrhistogram::Histogram;
use serde::Serialize;

use crate::client::CallReport;

/// Columns of `requests.csv`, in order.
pub const CSV_HEADER: &str =
    "client,seq,lat,lon,served_by,offloaded_from,attempts,status,latency_ms,redirects,round,sent_ms,http,error,function,cold_start,server_timing";

/// One call as `requests.csv` records it.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// Client name (a point of the clients or path file, or `client`).
    pub client: String,
    /// Call number, from 0, per run.
    pub seq: u64,
    /// Client latitude when it called.
    pub lat: f64,
    /// Client longitude when it called.
    pub lon: f64,
    /// Node that served the call (empty when it failed).
    pub served_by: String,
    /// Edge that offloaded it to the cloud (empty when not offloaded).
    pub offloaded_from: String,
    /// Requests sent, redirects not counted: 1, or 2 when retried at the cloud.
    pub attempts: u32,
    /// HTTP status of the answer, 0 when there was none.
    pub status: u16,
    /// Latency in milliseconds, from the (intended) send time to the end of the answer.
    pub latency_ms: f64,
    /// `307` handovers followed.
    pub redirects: u32,
    /// High load: the number of clients of the round; otherwise 0.
    pub round: u32,
    /// Intended send time, milliseconds after the start of the run (of the round in high load).
    pub sent_ms: f64,
    /// HTTP version of the answer (`HTTP/2.0`, `HTTP/1.1`; empty without one).
    pub http: String,
    /// Why the call failed (empty when it got an answer).
    pub error: String,
    /// The function called.
    pub function: String,
    /// `X-Cold-Start` of the answer: whether the node started an instance for it (`None`: the
    /// answer did not say, or there was none).
    pub cold_start: Option<bool>,
    /// `Server-Timing` of the answer (empty without one): the node's parts of the call and,
    /// on a call a policy placed, `predicted`. Written last, so its commas need no quoting.
    pub server_timing: String,
}

impl Row {
    /// The row of `report`, a call by `client` at `loc` sent `sent_ms` into the run.
    pub fn new(
        client: &str,
        round: u32,
        seq: u64,
        loc: Option<LatLon>,
        sent_ms: f64,
        report: &CallReport,
    ) -> Self {
        Self {
            client: client.to_owned(),
            seq,
            lat: loc.map_or(f64::NAN, |l| l.lat),
            lon: loc.map_or(f64::NAN, |l| l.lon),
            served_by: report.served_by.clone().unwrap_or_default(),
            offloaded_from: report.offloaded_from.clone().unwrap_or_default(),
            attempts: report.attempts,
            status: report.status.map_or(0, |s| s.as_u16()),
            latency_ms: report.latency.as_secs_f64() * 1000.0,
            redirects: report.redirects,
            round,
            sent_ms,
            http: report.version.map(|v| format!("{v:?}")).unwrap_or_default(),
            error: report.error.clone().unwrap_or_default(),
            function: String::new(),
            cold_start: report.cold_start,
            server_timing: report.server_timing.clone().unwrap_or_default(),
        }
    }

    /// Whether the call got a 2xx answer.
    pub fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The location the client called from.
    pub fn location(&self) -> Option<LatLon> {
        LatLon::new(self.lat, self.lon).ok()
    }
}

/// Writes `rows` as CSV with [`CSV_HEADER`].
pub fn write_csv(path: &Path, rows: &[Row]) -> anyhow::Result<()> {
    let mut s = String::with_capacity(rows.len() * 96 + CSV_HEADER.len());
    s.push_str(CSV_HEADER);
    s.push('\n');
    for r in rows {
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},{:.3},{},{},{:.3},{},{},{},{},{}",
            clean(&r.client),
            r.seq,
            r.lat,
            r.lon,
            clean(&r.served_by),
            clean(&r.offloaded_from),
            r.attempts,
            r.status,
            r.latency_ms,
            r.redirects,
            r.round,
            r.sent_ms,
            clean(&r.http),
            clean(&r.error),
            clean(&r.function),
            r.cold_start
                .map_or("", |c| if c { "true" } else { "false" }),
            r.server_timing.replace(['\n', '\r'], " "),
        );
    }
    std::fs::write(path, s).with_context(|| format!("cannot write {}", path.display()))
}

/// Reads a `requests.csv` written by [`write_csv`].
pub fn read_csv(path: &Path) -> anyhow::Result<Vec<Row>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut lines = text.lines();
    anyhow::ensure!(
        lines.next() == Some(CSV_HEADER),
        "{}: not a requests.csv",
        path.display()
    );
    lines
        .enumerate()
        .map(|(i, line)| parse_row(line).with_context(|| format!("{}:{}", path.display(), i + 2)))
        .collect()
}

fn parse_row(line: &str) -> anyhow::Result<Row> {
    let f: Vec<&str> = line.splitn(17, ',').collect();
    anyhow::ensure!(f.len() == 17, "expected 17 fields, found {}", f.len());
    Ok(Row {
        client: f[0].to_owned(),
        seq: f[1].parse()?,
        lat: f[2].parse()?,
        lon: f[3].parse()?,
        served_by: f[4].to_owned(),
        offloaded_from: f[5].to_owned(),
        attempts: f[6].parse()?,
        status: f[7].parse()?,
        latency_ms: f[8].parse()?,
        redirects: f[9].parse()?,
        round: f[10].parse()?,
        sent_ms: f[11].parse()?,
        http: f[12].to_owned(),
        error: f[13].to_owned(),
        function: f[14].to_owned(),
        cold_start: match f[15] {
            "true" => Some(true),
            "false" => Some(false),
            "" => None,
            other => anyhow::bail!("cold_start must be true, false or empty, not {other:?}"),
        },
        server_timing: f[16].to_owned(),
    })
}

/// A field without the characters that would break a CSV line.
fn clean(s: &str) -> String {
    s.replace([',', '\n', '\r'], " ")
}

/// Latency statistics of a set of calls, from an HDR histogram (microsecond resolution, 3
/// significant digits).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct LatencyStats {
    /// Calls counted.
    pub count: u64,
    /// Mean, ms.
    pub mean_ms: f64,
    /// Median, ms.
    pub p50_ms: f64,
    /// 90th percentile, ms.
    pub p90_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// 99.9th percentile, ms.
    pub p999_ms: f64,
    /// Largest, ms.
    pub max_ms: f64,
}

impl LatencyStats {
    /// Statistics of the latencies (ms) of `rows`.
    pub fn of<'a>(rows: impl IntoIterator<Item = &'a Row>) -> Self {
        // 1 µs to one hour; longer latencies count as one hour.
        let mut h =
            Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds");
        for r in rows {
            h.saturating_record((r.latency_ms * 1000.0).round().max(1.0) as u64);
        }
        if h.is_empty() {
            return Self::default();
        }
        let ms = |us: u64| us as f64 / 1000.0;
        Self {
            count: h.len(),
            mean_ms: h.mean() / 1000.0,
            p50_ms: ms(h.value_at_quantile(0.5)),
            p90_ms: ms(h.value_at_quantile(0.9)),
            p99_ms: ms(h.value_at_quantile(0.99)),
            p999_ms: ms(h.value_at_quantile(0.999)),
            max_ms: ms(h.max()),
        }
    }
}

/// `summary.json`: what every mode reports, plus the mode's own figures in `mode_results`.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    /// `mobility`, `highload`, `outage` or `mixed`.
    pub mode: String,
    /// Topology file the run used.
    pub topology: String,
    /// Function called.
    pub function: String,
    /// Whether the nodes were started by the run (`--spawn`) or a running deployment was called.
    pub spawned: bool,
    /// Network delays between client and nodes, in words: none, netem, or the loadtest's own
    /// delay model with its figures.
    pub delays: String,
    /// The same as figures: `{"kind": "none"}`, or `{"kind": "relay", ...}` with each relay.
    pub delay_model: serde_json::Value,
    /// Closed loop (wait for each answer) or open loop at a target rate.
    pub load: String,
    /// Calls made.
    pub calls: u64,
    /// Calls with a 2xx answer.
    pub ok: u64,
    /// Calls without a 2xx answer (no answer at all, or an error status).
    pub failed: u64,
    /// Calls retried at the cloud.
    pub retried: u64,
    /// Calls that followed at least one handover.
    pub redirected: u64,
    /// Calls offloaded by an edge to the cloud.
    pub offloaded: u64,
    /// Calls per serving node.
    pub served_by: BTreeMap<String, u64>,
    /// Answers per HTTP version.
    pub http_versions: BTreeMap<String, u64>,
    /// Latency of all answered calls.
    pub latency: LatencyStats,
    /// Latency per serving node.
    pub latency_by_node: BTreeMap<String, LatencyStats>,
    /// Wall time of the run, seconds.
    pub duration_s: f64,
    /// The mode's own results.
    pub mode_results: serde_json::Value,
}

impl Summary {
    /// The common part of the summary of `rows`.
    pub fn of(mode: &str, rows: &[Row], duration_s: f64) -> Self {
        let mut served_by = BTreeMap::new();
        let mut http_versions = BTreeMap::new();
        let mut by_node: BTreeMap<String, Vec<&Row>> = BTreeMap::new();
        for r in rows.iter().filter(|r| r.ok()) {
            *served_by.entry(r.served_by.clone()).or_insert(0) += 1;
            *http_versions.entry(r.http.clone()).or_insert(0) += 1;
            by_node.entry(r.served_by.clone()).or_default().push(r);
        }
        let count = |f: &dyn Fn(&Row) -> bool| rows.iter().filter(|r| f(r)).count() as u64;
        Self {
            mode: mode.to_owned(),
            topology: String::new(),
            function: String::new(),
            spawned: false,
            delays: "none (loopback)".to_owned(),
            delay_model: serde_json::json!({ "kind": "none" }),
            load: "closed loop".to_owned(),
            calls: rows.len() as u64,
            ok: count(&|r| r.ok()),
            failed: count(&|r| !r.ok()),
            retried: count(&|r| r.attempts > 1),
            redirected: count(&|r| r.redirects > 0),
            offloaded: count(&|r| !r.offloaded_from.is_empty()),
            served_by,
            http_versions,
            latency: LatencyStats::of(rows.iter().filter(|r| r.ok())),
            latency_by_node: by_node
                .into_iter()
                .map(|(k, v)| (k, LatencyStats::of(v)))
                .collect(),
            duration_s,
            mode_results: serde_json::Value::Null,
        }
    }

    /// Writes the summary as pretty JSON.
    pub fn write(&self, path: &Path) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(self)?;
        std::fs::write(path, text + "\n")
            .with_context(|| format!("cannot write {}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(latency_ms: f64) -> Row {
        Row {
            client: "c,1".into(),
            seq: 3,
            lat: 52.5,
            lon: 13.4,
            served_by: "tu-berlin".into(),
            offloaded_from: String::new(),
            attempts: 1,
            status: 200,
            latency_ms,
            redirects: 0,
            round: 0,
            sent_ms: 12.5,
            http: "HTTP/2.0".into(),
            error: "a, b\nc".into(),
            function: "sieve".into(),
            cold_start: Some(true),
            server_timing: "exec;dur=4.5, predicted;dur=5.000".into(),
        }
    }

    #[test]
    fn csv_round_trips_and_keeps_one_line_per_call() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("requests.csv");
        write_csv(&p, &[row(1.5), row(2.25)]).unwrap();
        let back = read_csv(&p).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(back[0].client, "c 1");
        assert_eq!(back[0].error, "a  b c");
        assert_eq!(back[1].latency_ms, 2.25);
        assert_eq!(back[1].served_by, "tu-berlin");
        assert_eq!(back[1].function, "sieve");
        assert_eq!(back[1].cold_start, Some(true));
        assert_eq!(back[1].server_timing, "exec;dur=4.5, predicted;dur=5.000");
    }

    #[test]
    fn stats_come_from_the_histogram() {
        let rows: Vec<Row> = (1..=100).map(|i| row(f64::from(i))).collect();
        let s = LatencyStats::of(&rows);
        assert_eq!(s.count, 100);
        assert!((s.p50_ms - 50.0).abs() < 0.1, "{s:?}");
        assert!((s.max_ms - 100.0).abs() < 0.1, "{s:?}");
        assert!((s.mean_ms - 50.5).abs() < 0.1, "{s:?}");
    }
}
