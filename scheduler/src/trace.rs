//! Loader for the Huawei 2023 private trace format (sir-lab/data-release,
//! `private_dataset/<metric>/day_NNN.csv`): a wide CSV `day,time,0,1,...,199`, one row per minute
//! (or per second for the `*_second` metrics), `time` in seconds since the trace start, an empty
//! cell or `NaN` when the function is absent. Also accepts the pandas rendering of the same table
//! (a leading unnamed index column, `...` columns and rows where the display elided data).

use std::path::Path;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::error::{Result, SchedulerError};
use crate::model::{FunctionProfile, GeoPoint};
use crate::workload::{Request, Workload, WorkloadConfig, Zipf};

/// One row of a trace table.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceRow {
    /// Day number of the file (`day_NNN`).
    pub day: u32,
    /// Seconds since the trace start.
    pub time_s: u64,
    /// One value per entry of [`TraceTable::functions`]; `None` when the function is absent.
    pub values: Vec<Option<f64>>,
}

/// A parsed wide trace table of one metric.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceTable {
    /// Function ids of the value columns (`0..=199` in the private trace).
    pub functions: Vec<u32>,
    /// Rows in file order.
    pub rows: Vec<TraceRow>,
}

impl TraceTable {
    /// Parses trace CSV text; `what` names the input in errors.
    pub fn parse(text: &str, what: &str) -> Result<Self> {
        let mut lines = text.lines().map(|l| l.trim_end_matches('\r'));
        let header: Vec<&str> = lines
            .next()
            .ok_or_else(|| SchedulerError::parse(what, "empty file"))?
            .split(',')
            .collect();
        // pandas' to_csv / display puts an unnamed index column first.
        let skip = usize::from(header.first() == Some(&""));
        if header.get(skip) != Some(&"day") || header.get(skip + 1) != Some(&"time") {
            return Err(SchedulerError::parse(
                what,
                "header must start with day,time",
            ));
        }
        let mut cols = Vec::new();
        let mut functions = Vec::new();
        for (i, name) in header.iter().enumerate().skip(skip + 2) {
            if *name == "..." {
                continue;
            }
            let id = name.parse::<u32>().map_err(|_| {
                SchedulerError::parse(what, format!("column {name:?} is not a function id"))
            })?;
            cols.push(i);
            functions.push(id);
        }
        let mut rows = Vec::new();
        for (n, line) in lines.enumerate() {
            let cells: Vec<&str> = line.split(',').collect();
            if line.is_empty() || cells.get(skip) == Some(&"...") {
                continue;
            }
            let at = format!("{what} line {}", n + 2);
            if cells.len() != header.len() {
                return Err(SchedulerError::parse(
                    at,
                    format!("{} cells, header has {}", cells.len(), header.len()),
                ));
            }
            let day = cells[skip]
                .parse()
                .map_err(|_| SchedulerError::parse(&at, "bad day"))?;
            let time_s = cells[skip + 1]
                .parse()
                .map_err(|_| SchedulerError::parse(&at, "bad time"))?;
            let values = cols
                .iter()
                .map(|&i| parse_cell(cells[i]).map_err(|m| SchedulerError::parse(&at, m)))
                .collect::<Result<_>>()?;
            rows.push(TraceRow {
                day,
                time_s,
                values,
            });
        }
        Ok(Self { functions, rows })
    }

    /// Reads and parses a trace file.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| SchedulerError::io(path, e))?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Seconds between consecutive rows (60 for `*_minute`, 1 for `*_second`); 60 if unknown.
    pub fn period_s(&self) -> u64 {
        self.rows
            .windows(2)
            .filter_map(|w| w[1].time_s.checked_sub(w[0].time_s).filter(|d| *d > 0))
            .min()
            .unwrap_or(60)
    }

    /// Turns a `requests` table into a workload: each count (times `scale`, rounded) becomes
    /// that many arrivals spread uniformly over its row's period; trace function `id` maps to
    /// `functions[id % len]`; sources and SLOs are drawn as in the generator. Time starts at
    /// the first row. Consecutive rows further apart than one period keep their gap.
    pub fn to_workload(
        &self,
        functions: Vec<FunctionProfile>,
        sources: &[GeoPoint],
        scale: f64,
        cfg: &WorkloadConfig,
    ) -> Workload {
        let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
        let sz = Zipf::new(sources.len(), cfg.zipf_sites, 23);
        let period_ms = self.period_s() as f64 * 1000.0;
        let t0 = self.rows.first().map_or(0, |r| r.time_s);
        let mut requests = Vec::new();
        for row in &self.rows {
            let base = (row.time_s - t0) as f64 * 1000.0;
            for (fid, v) in self.functions.iter().zip(&row.values) {
                let n = (v.unwrap_or(0.0).max(0.0) * scale).round() as usize;
                let function = *fid as usize % functions.len();
                for _ in 0..n {
                    requests.push(Request {
                        id: 0,
                        arrival_ms: base + rng.gen::<f64>() * period_ms,
                        function,
                        source: sources[sz.sample(&mut rng)],
                        input_kb: functions[function].input_kb * rng.gen_range(0.5..1.5),
                        slo_ms: rng.gen_range(cfg.slo_ms.0..=cfg.slo_ms.1),
                    });
                }
            }
        }
        requests.sort_by(|a, b| a.arrival_ms.total_cmp(&b.arrival_ms));
        requests.iter_mut().enumerate().for_each(|(i, r)| r.id = i);
        requests.truncate(cfg.requests);
        Workload {
            functions,
            requests,
        }
    }
}

fn parse_cell(cell: &str) -> std::result::Result<Option<f64>, String> {
    match cell.trim() {
        "" | "NaN" | "nan" => Ok(None),
        s => s.parse().map(Some).map_err(|_| format!("bad value {s:?}")),
    }
}

#[cfg(test)]
mod tests;
