//! The paper's figures as PNGs (plotters' bitmap backend with the embedded DejaVu Sans, so no
//! system font or fontconfig is needed): mobility (Fig. 4), high load (Fig. 5), outage (Fig. 6).

use std::path::Path;

use anyhow::anyhow;
use plotters::prelude::*;

/// Figure size in pixels.
const SIZE: (u32, u32) = (1000, 560);
const EDGE: RGBColor = RGBColor(31, 119, 180);
const CLOUD: RGBColor = RGBColor(214, 39, 40);

/// One step of the mobility walk.
#[derive(Clone, Debug)]
pub struct Step {
    /// Latency of the step's call, ms.
    pub latency_ms: f64,
    /// Distance from the client to the node that served it, km.
    pub distance_km: f64,
}

/// One round of the high-load experiment.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Round {
    /// Number of clients.
    pub clients: u32,
    /// Calls answered by the edge itself.
    pub edge: u64,
    /// Calls the edge offloaded to the cloud.
    pub offloaded: u64,
    /// Calls without a 2xx answer.
    pub failed: u64,
    /// From the round's start to its last answer, seconds.
    pub duration_s: f64,
}

fn register_font() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = plotters::style::register_font(
            "sans-serif",
            FontStyle::Normal,
            dejavu::sans::regular(),
        );
    });
}

fn e(err: impl std::fmt::Display) -> anyhow::Error {
    anyhow!("plotting: {err}")
}

/// Fig. 4: latency (blue, left axis) and client-to-server distance (red, right axis) per step,
/// with a vertical line at each handover `(step, new node)`.
pub fn mobility(path: &Path, steps: &[Step], handovers: &[(usize, String)]) -> anyhow::Result<()> {
    register_font();
    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(e)?;
    let n = steps.len().max(2) as f64;
    let max_lat = steps.iter().map(|s| s.latency_ms).fold(1.0, f64::max) * 1.1;
    let max_km = steps.iter().map(|s| s.distance_km).fold(1.0, f64::max) * 1.1;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Mobility: latency and distance per step",
            ("sans-serif", 24),
        )
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .right_y_label_area_size(70)
        .build_cartesian_2d(0.0..n - 1.0, 0.0..max_lat)
        .map_err(e)?
        .set_secondary_coord(0.0..n - 1.0, 0.0..max_km);
    chart
        .configure_mesh()
        .x_desc("step (one call per location)")
        .y_desc("latency (ms)")
        .label_style(("sans-serif", 15))
        .draw()
        .map_err(e)?;
    chart
        .configure_secondary_axes()
        .y_desc("client-to-server distance (km)")
        .label_style(("sans-serif", 15))
        .draw()
        .map_err(e)?;
    for (step, node) in handovers {
        let x = *step as f64;
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(x, 0.0), (x, max_lat)],
                BLACK.mix(0.5).stroke_width(1),
            )))
            .map_err(e)?;
        chart
            .draw_series(std::iter::once(Text::new(
                format!("→ {node}"),
                (x + 0.5, max_lat * 0.96),
                ("sans-serif", 15),
            )))
            .map_err(e)?;
    }
    let lat = steps
        .iter()
        .enumerate()
        .map(|(i, s)| (i as f64, s.latency_ms));
    chart
        .draw_series(LineSeries::new(lat, EDGE.stroke_width(2)))
        .map_err(e)?
        .label("latency (ms)")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], EDGE.stroke_width(2)));
    let km = steps
        .iter()
        .enumerate()
        .map(|(i, s)| (i as f64, s.distance_km));
    chart
        .draw_secondary_series(LineSeries::new(km, CLOUD.stroke_width(2)))
        .map_err(e)?
        .label("distance (km)")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], CLOUD.stroke_width(2)));
    legend(&mut chart)?;
    root.present().map_err(e)
}

/// Fig. 5: calls served by the edge ("Normal") and offloaded to the cloud ("Offload") per
/// number of clients, stacked, with the round's duration (black, right axis).
pub fn highload(path: &Path, rounds: &[Round]) -> anyhow::Result<()> {
    register_font();
    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(e)?;
    let n = rounds.len().max(1);
    let max_calls = rounds
        .iter()
        .map(|r| (r.edge + r.offloaded + r.failed) as f64)
        .fold(1.0, f64::max)
        * 1.15;
    let max_s = rounds.iter().map(|r| r.duration_s).fold(1.0, f64::max) * 1.2;
    let x_range = -0.5..n as f64 - 0.5;
    let labels: Vec<String> = rounds.iter().map(|r| r.clients.to_string()).collect();
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "High load: edge vs offloaded calls per number of clients",
            ("sans-serif", 24),
        )
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .right_y_label_area_size(70)
        .build_cartesian_2d(x_range.clone(), 0.0..max_calls)
        .map_err(e)?
        .set_secondary_coord(x_range, 0.0..max_s);
    let fmt = |x: &f64| {
        let i = x.round();
        if (x - i).abs() < 1e-6 && i >= 0.0 {
            labels.get(i as usize).cloned().unwrap_or_default()
        } else {
            String::new()
        }
    };
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n)
        .x_label_formatter(&fmt)
        .x_desc("parallel clients")
        .y_desc("calls")
        .label_style(("sans-serif", 15))
        .draw()
        .map_err(e)?;
    chart
        .configure_secondary_axes()
        .y_desc("experiment duration (s)")
        .label_style(("sans-serif", 15))
        .draw()
        .map_err(e)?;
    let bar = |i: usize, lo: f64, hi: f64, c: RGBColor| {
        let x = i as f64;
        Rectangle::new([(x - 0.3, lo), (x + 0.3, hi)], c.filled())
    };
    chart
        .draw_series(
            rounds
                .iter()
                .enumerate()
                .map(|(i, r)| bar(i, 0.0, r.edge as f64, EDGE)),
        )
        .map_err(e)?
        .label("Normal (edge)")
        .legend(|(x, y)| Rectangle::new([(x, y - 6), (x + 16, y + 6)], EDGE.filled()));
    chart
        .draw_series(
            rounds
                .iter()
                .enumerate()
                .map(|(i, r)| bar(i, r.edge as f64, (r.edge + r.offloaded) as f64, CLOUD)),
        )
        .map_err(e)?
        .label("Offload (cloud)")
        .legend(|(x, y)| Rectangle::new([(x, y - 6), (x + 16, y + 6)], CLOUD.filled()));
    let dur: Vec<(f64, f64)> = rounds
        .iter()
        .enumerate()
        .map(|(i, r)| (i as f64, r.duration_s))
        .collect();
    chart
        .draw_secondary_series(LineSeries::new(dur.clone(), BLACK.stroke_width(2)))
        .map_err(e)?
        .label("duration (s)")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.stroke_width(2)));
    chart
        .draw_secondary_series(dur.iter().map(|&p| Circle::new(p, 4, BLACK.filled())))
        .map_err(e)?;
    legend(&mut chart)?;
    root.present().map_err(e)
}

/// Fig. 6: one-second moving average of latency over time, calls served at the edge (blue) and
/// by the cloud (red), the kill of the edge marked. Points are `(seconds, latency ms)`.
pub fn outage(
    path: &Path,
    edge: &[(f64, f64)],
    cloud: &[(f64, f64)],
    retried: &[(f64, f64)],
    kill_at_s: Option<f64>,
) -> anyhow::Result<()> {
    register_font();
    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(e)?;
    let edge_ma = thin(&moving_average(edge, 1.0), 4000);
    let cloud_ma = thin(&moving_average(cloud, 1.0), 4000);
    let t_max = edge.iter().chain(cloud).map(|p| p.0).fold(1.0, f64::max);
    // Log scale: sub-millisecond loopback calls and a cold start on the retry in one figure.
    let all_y = || edge_ma.iter().chain(&cloud_ma).map(|p| p.1);
    let y_max = all_y()
        .chain(retried.iter().map(|p| p.1))
        .fold(1.0, f64::max)
        * 1.5;
    let y_min = all_y()
        .filter(|y| *y > 0.0)
        .fold(y_max, f64::min)
        .max(0.001)
        * 0.7;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Outage: 1-second moving average of latency",
            ("sans-serif", 24),
        )
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..t_max, (y_min..y_max).log_scale())
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .y_desc("latency (ms, log scale), 1 s moving average")
        .label_style(("sans-serif", 15))
        .draw()
        .map_err(e)?;
    if let Some(k) = kill_at_s {
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(k, y_min), (k, y_max)],
                BLACK.mix(0.6).stroke_width(1),
            )))
            .map_err(e)?;
        chart
            .draw_series(std::iter::once(Text::new(
                "edge killed (SIGKILL)",
                (k + t_max * 0.01, y_max * 0.8),
                ("sans-serif", 15),
            )))
            .map_err(e)?;
    }
    chart
        .draw_series(LineSeries::new(edge_ma, EDGE.stroke_width(2)))
        .map_err(e)?
        .label("served at the edge")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], EDGE.stroke_width(2)));
    chart
        .draw_series(LineSeries::new(cloud_ma, CLOUD.stroke_width(2)))
        .map_err(e)?
        .label("served by the cloud")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], CLOUD.stroke_width(2)));
    chart
        .draw_series(
            retried
                .iter()
                .map(|&(t, l)| Cross::new((t, l.clamp(y_min, y_max)), 5, BLACK.stroke_width(2))),
        )
        .map_err(e)?
        .label("retried at the cloud (raw latency)")
        .legend(|(x, y)| Cross::new((x + 10, y), 5, BLACK.stroke_width(2)));
    legend(&mut chart)?;
    root.present().map_err(e)
}

fn legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font(("sans-serif", 15))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(e)
}

/// Trailing moving average over `window` (same unit as x) of points sorted by x.
pub fn moving_average(points: &[(f64, f64)], window: f64) -> Vec<(f64, f64)> {
    let mut sorted = points.to_vec();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (mut start, mut sum) = (0usize, 0.0);
    let mut out = Vec::with_capacity(sorted.len());
    for i in 0..sorted.len() {
        sum += sorted[i].1;
        while sorted[i].0 - sorted[start].0 > window {
            sum -= sorted[start].1;
            start += 1;
        }
        out.push((sorted[i].0, sum / (i + 1 - start) as f64));
    }
    out
}

/// At most about `max` points, evenly picked (a line of 100 000 points draws no better).
fn thin(points: &[(f64, f64)], max: usize) -> Vec<(f64, f64)> {
    let step = points.len().div_ceil(max.max(1)).max(1);
    points.iter().copied().step_by(step).collect()
}

/// Colours of the walks of [`prewarm_compare`], in order: red, orange, blue.
const WALKS: [RGBColor; 3] = [CLOUD, RGBColor(255, 127, 14), EDGE];

/// The mobility walk on cold fleets, once per variant `(label, latency per step)`: latency
/// per step, log scale, in red, orange and blue, with a vertical line at each handover
/// `(step, new node)` of the last variant's walk.
pub fn prewarm_compare(
    path: &Path,
    walks: &[(&str, &[f64])],
    handovers: &[(usize, String)],
) -> anyhow::Result<()> {
    register_font();
    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(e)?;
    let n = walks.iter().map(|(_, w)| w.len()).max().unwrap_or(0).max(2) as f64;
    let all = walks
        .iter()
        .flat_map(|(_, w)| w.iter())
        .copied()
        .filter(|v| v.is_finite());
    let max = all.clone().fold(1.0, f64::max) * 1.5;
    let min = all.fold(f64::INFINITY, f64::min).clamp(0.01, 1.0) * 0.8;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Mobility on a cold fleet: with and without pre-warming and preconnect",
            ("sans-serif", 24),
        )
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..n - 1.0, (min..max).log_scale())
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc("step (one call per location)")
        .y_desc("latency (ms, log scale)")
        .label_style(("sans-serif", 15))
        .draw()
        .map_err(e)?;
    for (step, node) in handovers {
        let x = *step as f64;
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(x, min), (x, max)],
                BLACK.mix(0.5).stroke_width(1),
            )))
            .map_err(e)?;
        chart
            .draw_series(std::iter::once(Text::new(
                format!("→ {node}"),
                (x + 0.5, max * 0.7),
                ("sans-serif", 15),
            )))
            .map_err(e)?;
    }
    for (&(label, series), &color) in walks.iter().zip(WALKS.iter().cycle()) {
        let points = series
            .iter()
            .enumerate()
            .filter(|(_, v)| v.is_finite())
            .map(|(i, v)| (i as f64, v.max(min)));
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(e)?
            .label(label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    legend(&mut chart)?;
    root.present().map_err(e)
}

/// The soak: P50 and P99 per window (log scale) with the restarts marked, and each node
/// process's resident memory (a restarted node's line starts again at its new process).
pub fn soak(
    path: &Path,
    windows: &[crate::soak::Window],
    readings: &[crate::soak::Reading],
    events: &[crate::soak::Event],
) -> anyhow::Result<()> {
    register_font();
    let root = BitMapBackend::new(path, (SIZE.0, SIZE.1 * 2)).into_drawing_area();
    root.fill(&WHITE).map_err(e)?;
    let (top, bottom) = root.split_vertically(SIZE.1);
    let t_max = windows
        .iter()
        .map(|w| w.end_s)
        .chain(readings.iter().map(|r| r.t_s))
        .fold(1.0, f64::max);
    let y_max = windows.iter().map(|w| w.p99_ms).fold(1.0, f64::max) * 1.5;
    let y_min = windows
        .iter()
        .map(|w| w.p50_ms)
        .filter(|y| *y > 0.0)
        .fold(y_max, f64::min)
        .max(0.01)
        * 0.7;
    let mut chart = ChartBuilder::on(&top)
        .caption("Soak: latency per window of answers", ("sans-serif", 24))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..t_max, (y_min..y_max).log_scale())
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .y_desc("latency (ms, log scale)")
        .label_style(("sans-serif", 15))
        .draw()
        .map_err(e)?;
    for ev in events.iter().filter(|ev| ev.kind == "restart") {
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(ev.t_s, y_min), (ev.t_s, y_max)],
                BLACK.mix(0.4).stroke_width(1),
            )))
            .map_err(e)?;
    }
    chart
        .draw_series(std::iter::once(PathElement::new(
            vec![(0.0, y_min), (0.0, y_min)],
            BLACK.mix(0.4).stroke_width(1),
        )))
        .map_err(e)?
        .label("node restarted (SIGTERM, started again)")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.mix(0.4)));
    let series = |f: fn(&crate::soak::Window) -> f64| -> Vec<(f64, f64)> {
        windows.iter().map(|w| (w.end_s, f(w).max(y_min))).collect()
    };
    chart
        .draw_series(LineSeries::new(series(|w| w.p50_ms), EDGE.stroke_width(2)))
        .map_err(e)?
        .label("P50")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], EDGE.stroke_width(2)));
    chart
        .draw_series(LineSeries::new(series(|w| w.p99_ms), CLOUD.stroke_width(2)))
        .map_err(e)?
        .label("P99")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], CLOUD.stroke_width(2)));
    legend(&mut chart)?;

    let mib = |k: u64| k as f64 / 1024.0;
    let m_max = readings.iter().map(|r| mib(r.rss_kib)).fold(1.0, f64::max) * 1.2;
    let mut chart = ChartBuilder::on(&bottom)
        .caption(
            "Soak: resident memory of each node process",
            ("sans-serif", 24),
        )
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..t_max, 0.0..m_max)
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .y_desc("RSS (MiB)")
        .label_style(("sans-serif", 15))
        .draw()
        .map_err(e)?;
    let mut nodes: Vec<&str> = readings.iter().map(|r| r.node.as_str()).collect();
    nodes.sort_unstable();
    nodes.dedup();
    for (i, node) in nodes.iter().enumerate() {
        let colour = Palette99::pick(i).to_rgba();
        let mut pids: Vec<u32> = readings
            .iter()
            .filter(|r| r.node == *node)
            .map(|r| r.pid)
            .collect();
        pids.dedup();
        for (j, pid) in pids.iter().enumerate() {
            let points: Vec<(f64, f64)> = readings
                .iter()
                .filter(|r| r.pid == *pid)
                .map(|r| (r.t_s, mib(r.rss_kib)))
                .collect();
            let s = chart
                .draw_series(LineSeries::new(points, colour.stroke_width(2)))
                .map_err(e)?;
            if j == 0 {
                s.label(node.to_string()).legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2))
                });
            }
        }
    }
    legend(&mut chart)?;
    root.present().map_err(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moving_average_covers_the_trailing_window() {
        let pts = [(0.0, 10.0), (0.5, 20.0), (1.2, 30.0), (3.0, 40.0)];
        let ma = moving_average(&pts, 1.0);
        assert_eq!(ma[0], (0.0, 10.0));
        assert_eq!(ma[1], (0.5, 15.0));
        assert_eq!(ma[2], (1.2, 25.0)); // 0.0 has left the window, 0.5 has not
        assert_eq!(ma[3], (3.0, 40.0));
    }

    #[test]
    fn figures_render_without_system_fonts() {
        let dir = tempfile::tempdir().unwrap();
        let steps: Vec<Step> = (0..20)
            .map(|i| Step {
                latency_ms: 5.0 + f64::from(i % 3),
                distance_km: f64::from(i),
            })
            .collect();
        let p = dir.path().join("m.png");
        mobility(&p, &steps, &[(7, "potsdam".into())]).unwrap();
        assert!(std::fs::metadata(&p).unwrap().len() > 1000);
        let rounds = [1, 2, 4].map(|c| Round {
            clients: c,
            edge: u64::from(c) * 10,
            offloaded: u64::from(c),
            failed: 0,
            duration_s: 10.0,
        });
        let p = dir.path().join("h.png");
        highload(&p, &rounds).unwrap();
        let p = dir.path().join("w.png");
        let (a, b) = ([40.0, 2.0, 3.0], [20.0, 2.5, 2.0]);
        prewarm_compare(&p, &[("a", &a), ("b", &b)], &[(1, "cloud".into())]).unwrap();
        assert!(std::fs::metadata(&p).unwrap().len() > 1000);
        assert!(std::fs::metadata(&p).unwrap().len() > 1000);
        let p = dir.path().join("o.png");
        let edge: Vec<_> = (0..50).map(|i| (f64::from(i) * 0.1, 2.0)).collect();
        let cloud: Vec<_> = (50..100).map(|i| (f64::from(i) * 0.1, 5.0)).collect();
        outage(&p, &edge, &cloud, &[(5.0, 9.0)], Some(5.0)).unwrap();
        assert!(std::fs::metadata(&p).unwrap().len() > 1000);
    }
}
