//! Summaries of simulation outcomes (mean, percentiles, SLO violations, decision time), their
//! CSV form, and the latency CDF plot (PNG, plotters' bitmap backend with an embedded font so
//! no system font or fontconfig is needed).

use std::fmt::Write as _;
use std::path::Path;

#[cfg(feature = "cli")]
use plotters::prelude::*;

use crate::error::{Result, SchedulerError};
use crate::sim::Outcome;

/// One policy's results on a set of workloads.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// Policy name.
    pub policy: String,
    /// Requests simulated.
    pub requests: usize,
    /// Mean end-to-end latency of served requests, ms.
    pub mean_ms: f64,
    /// Median latency, ms.
    pub p50_ms: f64,
    /// 95th percentile latency, ms.
    pub p95_ms: f64,
    /// 99th percentile latency, ms.
    pub p99_ms: f64,
    /// Share of requests over their SLO or dropped.
    pub slo_violation: f64,
    /// Share of requests that started a new container.
    pub cold_rate: f64,
    /// Share of requests no node could take.
    pub drop_rate: f64,
    /// Actions that were infeasible at execution time (replaced by greedy).
    pub fallbacks: usize,
    /// Mean decision time per request, µs.
    pub decision_mean_us: f64,
    /// 99th percentile decision time per request, µs.
    pub decision_p99_us: f64,
}

/// Nearest-rank percentile of sorted values (`q` in 0..=1).
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

impl Summary {
    /// Summarises `outcomes` of `policy`.
    pub fn new(policy: &str, outcomes: &[Outcome]) -> Self {
        let mut lat: Vec<f64> = outcomes
            .iter()
            .filter(|o| !o.dropped)
            .map(|o| o.latency.total())
            .collect();
        lat.sort_by(f64::total_cmp);
        let mut dec: Vec<f64> = outcomes
            .iter()
            .map(|o| o.decision_ns as f64 / 1000.0)
            .collect();
        dec.sort_by(f64::total_cmp);
        let n = outcomes.len().max(1) as f64;
        let share =
            |f: &dyn Fn(&Outcome) -> bool| outcomes.iter().filter(|o| f(o)).count() as f64 / n;
        Self {
            policy: policy.to_owned(),
            requests: outcomes.len(),
            mean_ms: lat.iter().sum::<f64>() / lat.len().max(1) as f64,
            p50_ms: percentile(&lat, 0.50),
            p95_ms: percentile(&lat, 0.95),
            p99_ms: percentile(&lat, 0.99),
            slo_violation: share(&|o| o.violates_slo()),
            cold_rate: share(&|o| o.cold),
            drop_rate: share(&|o| o.dropped),
            fallbacks: outcomes.iter().filter(|o| o.fallback).count(),
            decision_mean_us: dec.iter().sum::<f64>() / dec.len().max(1) as f64,
            decision_p99_us: percentile(&dec, 0.99),
        }
    }

    /// CSV header matching [`Summary::csv_row`].
    pub const CSV_HEADER: &'static str = "policy,requests,mean_ms,p50_ms,p95_ms,p99_ms,slo_violation,cold_rate,drop_rate,fallbacks,decision_mean_us,decision_p99_us";

    /// One CSV row.
    pub fn csv_row(&self) -> String {
        format!(
            "{},{},{:.3},{:.3},{:.3},{:.3},{:.5},{:.5},{:.5},{},{:.3},{:.3}",
            self.policy,
            self.requests,
            self.mean_ms,
            self.p50_ms,
            self.p95_ms,
            self.p99_ms,
            self.slo_violation,
            self.cold_rate,
            self.drop_rate,
            self.fallbacks,
            self.decision_mean_us,
            self.decision_p99_us
        )
    }
}

/// A Markdown table of summaries (what `geofaas simulate` prints).
pub fn markdown_table(rows: &[Summary]) -> String {
    let mut s = String::from(
        "| policy | mean ms | P50 ms | P95 ms | P99 ms | SLO viol. | cold | decision mean µs | decision p99 µs |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let _ = writeln!(
            s,
            "| {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2}% | {:.2}% | {:.2} | {:.2} |",
            r.policy,
            r.mean_ms,
            r.p50_ms,
            r.p95_ms,
            r.p99_ms,
            100.0 * r.slo_violation,
            100.0 * r.cold_rate,
            r.decision_mean_us,
            r.decision_p99_us
        );
    }
    s
}

/// Writes summaries as CSV.
pub fn write_csv(path: &Path, rows: &[Summary]) -> Result<()> {
    let mut s = String::from(Summary::CSV_HEADER);
    s.push('\n');
    for r in rows {
        s.push_str(&r.csv_row());
        s.push('\n');
    }
    std::fs::write(path, s).map_err(|e| SchedulerError::io(path, e))
}

#[cfg(feature = "cli")]
fn register_font() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // The embedded DejaVu Sans replaces system fonts (none are needed, fontconfig neither).
        let _ = plotters::style::register_font(
            "sans-serif",
            FontStyle::Normal,
            dejavu::sans::regular(),
        );
    });
}

#[cfg(feature = "cli")]
/// Plots the latency CDF of each `(policy, outcomes)` up to `max_ms` into a PNG.
pub fn plot_cdf(path: &Path, series: &[(String, Vec<Outcome>)], max_ms: f64) -> Result<()> {
    register_font();
    let err = |e: String| SchedulerError::io(path, std::io::Error::other(e));
    let root = BitMapBackend::new(path, (900, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
    let mut chart = ChartBuilder::on(&root)
        .caption("End-to-end latency CDF", ("sans-serif", 26))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(55)
        .build_cartesian_2d(0.0..max_ms, 0.0..1.0)
        .map_err(|e| err(e.to_string()))?;
    chart
        .configure_mesh()
        .x_desc("latency (ms)")
        .y_desc("CDF")
        .label_style(("sans-serif", 16))
        .draw()
        .map_err(|e| err(e.to_string()))?;
    for (i, (name, outcomes)) in series.iter().enumerate() {
        let mut lat: Vec<f64> = outcomes
            .iter()
            .filter(|o| !o.dropped)
            .map(|o| o.latency.total())
            .collect();
        lat.sort_by(f64::total_cmp);
        let n = lat.len().max(1) as f64;
        let step = (lat.len() / 400).max(1);
        let mut pts: Vec<(f64, f64)> = lat
            .iter()
            .enumerate()
            .step_by(step)
            .filter(|(_, l)| **l <= max_ms)
            .map(|(k, &l)| (l, (k + 1) as f64 / n))
            .collect();
        pts.push((
            max_ms,
            lat.iter().filter(|&&l| l <= max_ms).count() as f64 / n,
        ));
        let color = Palette99::pick(i).stroke_width(2);
        chart
            .draw_series(LineSeries::new(pts, color))
            .map_err(|e| err(e.to_string()))?
            .label(name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(
                    vec![(x, y), (x + 20, y)],
                    Palette99::pick(i).stroke_width(2),
                )
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .label_font(("sans-serif", 16))
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(e.to_string()))?;
    root.present().map_err(|e| err(e.to_string()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), 50.0);
        assert_eq!(percentile(&v, 0.99), 99.0);
        assert_eq!(percentile(&v, 1.0), 100.0);
        assert_eq!(percentile(&[7.0], 0.0), 7.0);
    }

    #[cfg(feature = "cli")]
    #[test]
    fn plot_renders_text_without_system_fonts() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("cdf.png");
        let o = Outcome {
            request: 0,
            node: Some(0),
            latency: crate::model::LatencyBreakdown {
                cold_ms: 0.0,
                queue_ms: 0.0,
                comp_ms: 10.0,
                comm_ms: 1.0,
            },
            slo_ms: 300.0,
            cold: false,
            dropped: false,
            fallback: false,
            decision_ns: 100,
        };
        plot_cdf(&p, &[("a".into(), vec![o; 10])], 100.0).unwrap();
        assert!(std::fs::metadata(&p).unwrap().len() > 1000);
    }
}
