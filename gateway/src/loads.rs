//! The other nodes' load as this node knows it, for the scheduler's candidates.
//!
//! With a `[registry]` the reports come from etcd: once per interval an edge reads those of its
//! scheduler's neighbours and the cloud ([`geofaas_fleet::Fleet::loads_of`]). Without one, every node sends its own report about every
//! `scheduler.load_interval_ms` to the edges that can place calls on it (an edge to those that
//! count it as a neighbour, the cloud to every edge: [`crate::node::Links::report_to`]), as `POST /node/load` signed with the offload secret (the
//! offload credential over that path), and an edge keeps the latest per node. Either way a
//! report older than [`STALE_INTERVALS`] intervals (by the time it was measured) is ignored,
//! so a node that stopped reporting stops being a candidate. Nothing here runs on a call's path
//! but [`LoadBoard::read`]: one read lock and a map lookup per node.

use parking_lot::RwLock;
use std::collections::HashMap;

use axum::body::Bytes;
use axum::http::StatusCode;
use geofaas_config::Topology;
use geofaas_fleet::{now_ms, LoadReport};

use crate::error::ApiError;

/// A report is stale after this many report intervals.
pub const STALE_INTERVALS: u64 = 3;
/// The path node-to-node load reports are posted to.
pub const LOAD_PATH: &str = "/node/load";
/// Largest accepted report body.
const MAX_REPORT_BYTES: usize = 64 * 1024;

/// The latest load report of each other node.
#[derive(Debug, Default)]
pub struct LoadBoard {
    reports: RwLock<HashMap<String, LoadReport>>,
}

impl LoadBoard {
    /// Keeps `report` unless a newer one of the same node is already here.
    pub fn put(&self, report: LoadReport) {
        let mut map = self.reports.write();
        match map.get(&report.node) {
            Some(old) if old.at_ms > report.at_ms => {}
            _ => {
                map.insert(report.node.clone(), report);
            }
        }
    }

    /// Calls `f` with a view of every report under one read lock (a decision reads several).
    pub fn read<R>(&self, f: impl FnOnce(&Reports<'_>) -> R) -> R {
        let map = self.reports.read();
        f(&Reports(&map))
    }

    /// Whether node `id` has a fresh report (for tests and `/registry`).
    pub fn is_fresh(&self, id: &str, stale_ms: u64) -> bool {
        self.with_fresh(id, now_ms(), stale_ms, |_| ()).is_some()
    }

    /// Calls `f` with node `id`'s report if it was measured at most `stale_ms` ago.
    pub fn with_fresh<R>(
        &self,
        id: &str,
        now_ms: u64,
        stale_ms: u64,
        f: impl FnOnce(&LoadReport) -> R,
    ) -> Option<R> {
        self.read(|r| r.fresh(id, now_ms, stale_ms).map(f))
    }
}

/// The reports as [`LoadBoard::read`] shows them.
#[derive(Debug)]
pub struct Reports<'a>(&'a HashMap<String, LoadReport>);

impl Reports<'_> {
    /// Node `id`'s report if it was measured at most `stale_ms` before `now_ms`.
    pub fn fresh(&self, id: &str, now_ms: u64, stale_ms: u64) -> Option<&LoadReport> {
        self.0
            .get(id)
            .filter(|r| now_ms.saturating_sub(r.at_ms) <= stale_ms)
    }
}

/// Milliseconds between reports for `topology`: the registry's interval with one, else the
/// scheduler's.
pub fn interval_ms(topology: &Topology) -> u64 {
    topology
        .registry
        .as_ref()
        .map_or(topology.scheduler.load_interval_ms, |r| r.load_interval_ms)
        .max(1)
}

/// Age after which a report of `topology`'s fleet is ignored, in milliseconds.
pub fn stale_ms(topology: &Topology) -> u64 {
    interval_ms(topology).saturating_mul(STALE_INTERVALS)
}

/// `POST /node/load` at node `me` of `topology`: a report from node `from`, which signed it
/// ([`crate::guard::Signed`]), kept on `board`.
pub fn receive(
    board: &LoadBoard,
    topology: &Topology,
    me: &str,
    from: &str,
    body: &Bytes,
) -> Result<(), ApiError> {
    if body.len() > MAX_REPORT_BYTES {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            "load report too large",
        ));
    }
    let report: LoadReport = serde_json::from_slice(body).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_report",
            format!("load report: {e}"),
        )
    })?;
    if report.node != from || topology.node(from).is_none() || from == me {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_report",
            "a node reports only its own load",
        ));
    }
    board.put(report);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(node: &str, at_ms: u64) -> LoadReport {
        LoadReport {
            node: node.into(),
            at_ms,
            load: Default::default(),
            cpu_percent: 0.0,
            memory_bytes: 0,
        }
    }

    #[test]
    fn stale_and_older_reports_are_ignored() {
        let board = LoadBoard::default();
        board.put(report("potsdam", 10_000));
        assert_eq!(
            board.with_fresh("potsdam", 12_000, 3000, |r| r.at_ms),
            Some(10_000)
        );
        assert_eq!(board.with_fresh("potsdam", 13_001, 3000, |r| r.at_ms), None);
        board.put(report("potsdam", 9_000));
        assert_eq!(
            board.with_fresh("potsdam", 12_000, 3000, |r| r.at_ms),
            Some(10_000)
        );
        assert_eq!(board.with_fresh("cloud", 12_000, 3000, |r| r.at_ms), None);
    }
}
