//! A node's Prometheus metrics: every name in one place, and a registry of the node's own, so
//! that nodes sharing one process (`geofaas up`) each serve only their own series at `/metrics`.
//!
//! Durations are histograms in seconds. Labels are bounded: node, function (names the node
//! knows; anything else is `_unknown`), outcome, where the call ran, backend kind, reason.

use parking_lot::RwLock;
use std::time::Duration;

use fnv::FnvHashMap;
use metrics::{Counter, Histogram, Key, Label, Level, Metadata, Recorder, Unit};
use metrics_exporter_prometheus::{
    Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder,
};

/// Calls of `/fn/{name}` answered by this node: `outcome`, `ran` (`local`, `offloaded`, `none`).
pub const CALL_SECONDS: &str = "geofaas_call_duration_seconds";
/// One backend call: `backend` kind and `outcome` (`ok`, `retryable`, `failed`).
pub const BACKEND_SECONDS: &str = "geofaas_backend_call_duration_seconds";
/// Time to start a new instance, per `function`.
pub const COLD_START_SECONDS: &str = "geofaas_cold_start_duration_seconds";
/// Time from receiving a call to the first byte of its streamed body, per `function`.
pub const STREAM_FIRST_BYTE_SECONDS: &str = "geofaas_stream_first_byte_seconds";
/// Streamed bodies that ended early, per `function` and `why` (`too_large`, `failed`,
/// `client_gone`).
pub const STREAMS_CUT: &str = "geofaas_streams_cut_total";
/// Calls answered with a `307` handover, by target node `to`.
pub const HANDOVERS: &str = "geofaas_handovers_total";
/// Calls this edge offloaded to the cloud, by `reason`.
pub const OFFLOADS: &str = "geofaas_offloads_total";
/// Calls answered, by where they ran (`placement`: `local-warm`, `local-new`, `neighbor`,
/// `cloud`) and why (`reason`, the `X-Placement-Reason` values).
pub const PLACEMENTS: &str = "geofaas_placements_total";
/// Time the `[scheduler]` policy took to decide one call.
pub const DECISION_SECONDS: &str = "geofaas_scheduler_decision_seconds";
/// Call events a `/events` subscriber lost because its queue was full (it read too slowly).
pub const EVENTS_DROPPED: &str = "geofaas_events_dropped_total";

/// Asynchronous calls, per `function` and `event` (`accepted`; `recovered`: read back from the
/// journal at start, to run again; `retried`; `dead_lettered`).
pub const ACTIVATIONS: &str = "geofaas_activations_total";
/// Asynchronous calls now waiting for their next try or running, per `function` and `state`.
pub const ACTIVATIONS_PENDING: &str = "geofaas_activations_pending";
/// Age of the oldest asynchronous call not finished, per `function`, in seconds.
pub const ACTIVATIONS_OLDEST: &str = "geofaas_activations_oldest_pending_seconds";

/// Cron ticks this node saw, per `function` and `outcome` (`run`: it claimed the tick and
/// accepted its call; `taken`: another node claimed it; `missed`: due while no node ran, not
/// run; `failed`: not claimed or not accepted, with a log line naming why).
pub const CRON_TICKS: &str = "geofaas_cron_ticks_total";

/// Node-to-node signatures this node refused, by `reason` (`signature`: not made with the
/// secret for this request; `clock`: made with it at a time outside the ±60 s window, so one
/// of the two clocks is off).
pub const SIGNATURES_REFUSED: &str = "geofaas_signatures_refused_total";

/// Actual over predicted latency of calls a policy placed (`Server-Timing: predicted`), by
/// where they ran (`placement`).
pub const PREDICTION_ERROR: &str = "geofaas_prediction_error_ratio";

/// Buckets of [`PREDICTION_ERROR`]: a quarter to ten times the prediction.
const PREDICTION_BUCKETS: [f64; 13] = [
    0.25, 0.5, 0.67, 0.8, 0.9, 0.95, 1.0, 1.05, 1.1, 1.25, 1.5, 2.0, 10.0,
];

/// Pre-warm requests this node sent, by target node `to` and `outcome` (`started`,
/// `already_warm`, `full`, `cannot_warm`, `unknown_function`, `failed`, `other`).
pub const PREWARM_REQUESTS: &str = "geofaas_prewarm_requests_total";
/// Instances this node's local runtimes started ahead of a call (asked by another node).
pub const PREWARM_STARTED: &str = "geofaas_prewarm_instances_started_total";
/// Of those, the ones a call took.
pub const PREWARM_USED: &str = "geofaas_prewarm_instances_used_total";
/// Of those, the ones stopped before any call took them: started in vain.
pub const PREWARM_WASTED: &str = "geofaas_prewarm_instances_wasted_total";
/// Clients this node tracks for pre-warming now.
pub const PREWARM_TRACKED: &str = "geofaas_prewarm_tracked_clients";

/// Buckets of [`DECISION_SECONDS`]: 1 µs to 10 ms.
const DECISION_BUCKETS: [f64; 10] = [
    0.000_001, 0.000_002, 0.000_005, 0.000_01, 0.000_02, 0.000_05, 0.000_1, 0.000_5, 0.001, 0.01,
];

/// Histogram buckets in seconds: 0.5 ms to 30 s.
const BUCKETS: [f64; 16] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0,
    30.0,
];

static METADATA: Metadata<'static> = Metadata::new(module_path!(), Level::INFO, None);

/// The metrics of one node.
pub struct NodeMetrics {
    node: String,
    recorder: PrometheusRecorder,
    handle: PrometheusHandle,
    /// Series of the whole process (e.g. the co-hosted geo DNS), appended to `/metrics`.
    process: Option<PrometheusHandle>,
    /// Handles of the per-call histograms, so a call does not build and look up a labelled key
    /// in the registry (measured: about 5% of a proxied call's instructions).
    // FNV: the keys are short names, looked up on every call (SipHash cost more than the
    // lookup itself).
    calls: RwLock<FnvHashMap<String, Vec<(&'static str, Histogram)>>>,
    backend_calls: RwLock<FnvHashMap<(&'static str, &'static str), Histogram>>,
    placements: RwLock<FnvHashMap<(&'static str, &'static str), Counter>>,
    decisions: Histogram,
}

impl std::fmt::Debug for NodeMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeMetrics")
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

impl NodeMetrics {
    /// A fresh registry for `node`; `process` (the binary's global recorder) is rendered after it.
    pub fn new(node: &str, process: Option<PrometheusHandle>) -> Self {
        let recorder = PrometheusBuilder::new()
            .set_buckets(&BUCKETS)
            .expect("the bucket list is not empty")
            .set_buckets_for_metric(Matcher::Full(DECISION_SECONDS.into()), &DECISION_BUCKETS)
            .expect("the bucket list is not empty")
            .set_buckets_for_metric(Matcher::Full(PREDICTION_ERROR.into()), &PREDICTION_BUCKETS)
            .expect("the bucket list is not empty")
            .build_recorder();
        for (name, help) in [
            (
                CALL_SECONDS,
                "Duration of function calls answered by this node",
            ),
            (
                BACKEND_SECONDS,
                "Duration of one call to a function backend",
            ),
            (COLD_START_SECONDS, "Time to start a new function instance"),
            (
                STREAM_FIRST_BYTE_SECONDS,
                "Time from a call's arrival to the first byte of its streamed body",
            ),
            (
                DECISION_SECONDS,
                "Time the scheduler policy took to place one call",
            ),
        ] {
            recorder.describe_histogram(name.into(), Some(Unit::Seconds), help.into());
        }
        recorder.describe_histogram(
            PREDICTION_ERROR.into(),
            None,
            "Actual over predicted latency of calls the scheduler placed".into(),
        );
        recorder.describe_counter(
            HANDOVERS.into(),
            None,
            "Calls handed over with a 307".into(),
        );
        recorder.describe_counter(
            STREAMS_CUT.into(),
            None,
            "Streamed bodies cut before their end, by why".into(),
        );
        recorder.describe_counter(OFFLOADS.into(), None, "Calls offloaded to the cloud".into());
        recorder.describe_counter(
            EVENTS_DROPPED.into(),
            None,
            "Call events /events subscribers lost to a full queue".into(),
        );
        recorder.describe_counter(
            PLACEMENTS.into(),
            None,
            "Calls answered, by where they ran and why".into(),
        );
        recorder.describe_counter(
            CRON_TICKS.into(),
            None,
            "Cron ticks run here, taken by another node, missed or failed".into(),
        );
        recorder.describe_counter(
            SIGNATURES_REFUSED.into(),
            None,
            "Node-to-node signatures refused: not the secret's, or outside the clock window".into(),
        );
        recorder.describe_counter(
            ACTIVATIONS.into(),
            None,
            "Asynchronous calls accepted, tried again and dead-lettered".into(),
        );
        recorder.describe_gauge(
            ACTIVATIONS_PENDING.into(),
            None,
            "Asynchronous calls waiting for a try or running".into(),
        );
        recorder.describe_gauge(
            ACTIVATIONS_OLDEST.into(),
            Some(Unit::Seconds),
            "Age of the oldest asynchronous call not finished".into(),
        );
        let handle = recorder.handle();
        let key = Key::from_parts(DECISION_SECONDS, vec![Label::new("node", node.to_owned())]);
        let decisions = recorder.register_histogram(&key, &METADATA);
        Self {
            node: node.to_owned(),
            recorder,
            handle,
            process,
            calls: RwLock::default(),
            backend_calls: RwLock::default(),
            placements: RwLock::default(),
            decisions,
        }
    }

    /// Folds the samples recorded since the last render into the histograms. The exporter
    /// queues every sample until then: a node nobody scrapes grew by about 42 bytes per call
    /// (measured: 4.2 MB per 100 000 calls), so the node's upkeep task runs this every few seconds.
    pub fn run_upkeep(&self) {
        self.handle.run_upkeep();
        if let Some(p) = &self.process {
            p.run_upkeep();
        }
    }

    /// The Prometheus text of this node (and of the process-wide series).
    pub fn render(&self) -> String {
        let mut text = self.handle.render();
        if let Some(p) = &self.process {
            text.push_str(&p.render());
        }
        text
    }

    fn labels(&self, extra: &[(&'static str, &str)]) -> Vec<Label> {
        let mut labels = Vec::with_capacity(extra.len() + 1);
        labels.push(Label::new("node", self.node.clone()));
        labels.extend(extra.iter().map(|(k, v)| Label::new(*k, (*v).to_owned())));
        labels
    }

    fn observe(&self, name: &'static str, extra: &[(&'static str, &str)], d: Duration) {
        self.histogram(name, extra).record(d.as_secs_f64());
    }

    fn histogram(&self, name: &'static str, extra: &[(&'static str, &str)]) -> Histogram {
        let key = Key::from_parts(name, self.labels(extra));
        self.recorder.register_histogram(&key, &METADATA)
    }

    fn count(&self, name: &'static str, extra: &[(&'static str, &str)]) {
        let key = Key::from_parts(name, self.labels(extra));
        self.recorder.register_counter(&key, &METADATA).increment(1);
    }

    /// A call answered by this node; `outcome` decides `ran` (see [`crate::call::Outcome`]).
    pub fn call(&self, function: &str, outcome: &'static str, ran: &'static str, d: Duration) {
        let cached = self.calls.read().get(function).and_then(|series| {
            series
                .iter()
                .find(|(o, _)| *o == outcome)
                .map(|(_, h)| h.clone())
        });
        let histogram = cached.unwrap_or_else(|| {
            let h = self.histogram(
                CALL_SECONDS,
                &[("function", function), ("outcome", outcome), ("ran", ran)],
            );
            self.calls
                .write()
                .entry(function.to_owned())
                .or_default()
                .push((outcome, h.clone()));
            h
        });
        histogram.record(d.as_secs_f64());
    }

    /// One backend call.
    pub fn backend_call(&self, backend: &'static str, outcome: &'static str, d: Duration) {
        let cached = self.backend_calls.read().get(&(backend, outcome)).cloned();
        let histogram = cached.unwrap_or_else(|| {
            let h = self.histogram(
                BACKEND_SECONDS,
                &[("backend", backend), ("outcome", outcome)],
            );
            self.backend_calls
                .write()
                .insert((backend, outcome), h.clone());
            h
        });
        histogram.record(d.as_secs_f64());
    }

    /// A new instance was started for `function`.
    pub fn cold_start(&self, function: &str, d: Duration) {
        self.observe(COLD_START_SECONDS, &[("function", function)], d);
    }

    /// The first byte of `function`'s streamed body, `d` after the call arrived.
    pub fn stream_first_byte(&self, function: &str, d: Duration) {
        self.observe(STREAM_FIRST_BYTE_SECONDS, &[("function", function)], d);
    }

    /// A streamed body of `function` ended early (`why`: `too_large`, `failed`, `client_gone`).
    pub fn stream_cut(&self, function: &str, why: &'static str) {
        self.count(STREAMS_CUT, &[("function", function), ("why", why)]);
    }

    /// A `307` to node `to`.
    pub fn handover(&self, to: &str) {
        self.count(HANDOVERS, &[("to", to)]);
    }

    /// A node-to-node signature refused, and why (`signature` or `clock`).
    pub fn signature_refused(&self, reason: &'static str) {
        self.count(SIGNATURES_REFUSED, &[("reason", reason)]);
    }

    /// A call offloaded to the cloud.
    pub fn offload(&self, reason: &str) {
        self.count(OFFLOADS, &[("reason", reason)]);
    }

    /// Where an answered call ran and why.
    pub fn placement(&self, placement: &'static str, reason: &'static str) {
        let cached = self.placements.read().get(&(placement, reason)).cloned();
        let counter = cached.unwrap_or_else(|| {
            let key = Key::from_parts(
                PLACEMENTS,
                self.labels(&[("placement", placement), ("reason", reason)]),
            );
            let c = self.recorder.register_counter(&key, &METADATA);
            self.placements
                .write()
                .insert((placement, reason), c.clone());
            c
        });
        counter.increment(1);
    }

    /// A call event one `/events` subscriber lost ([`EVENTS_DROPPED`]).
    pub fn events_dropped(&self) {
        self.count(EVENTS_DROPPED, &[]);
    }

    /// One scheduler decision.
    pub fn decision(&self, d: Duration) {
        self.decisions.record(d.as_secs_f64());
    }

    /// A placed call took `ratio` times its predicted latency.
    pub fn prediction(&self, placement: &'static str, ratio: f64) {
        self.histogram(PREDICTION_ERROR, &[("placement", placement)])
            .record(ratio);
    }

    /// A pre-warm request sent to node `to`, and what it answered.
    pub fn prewarm_request(&self, to: &str, outcome: &'static str) {
        self.count(PREWARM_REQUESTS, &[("to", to), ("outcome", outcome)]);
    }

    /// The totals of instances started ahead of a call here, used, and stopped unused.
    pub fn prewarm_instances(&self, started: u64, used: u64, wasted: u64) {
        for (name, value) in [
            (PREWARM_STARTED, started),
            (PREWARM_USED, used),
            (PREWARM_WASTED, wasted),
        ] {
            let key = Key::from_parts(name, self.labels(&[]));
            self.recorder
                .register_counter(&key, &METADATA)
                .absolute(value);
        }
    }

    /// An asynchronous call of `function` was accepted, tried again or dead-lettered.
    pub fn activation(&self, function: &str, event: &'static str) {
        self.count(ACTIVATIONS, &[("function", function), ("event", event)]);
    }

    /// One cron tick of `function` and what became of it here.
    pub fn cron_tick(&self, function: &str, outcome: &'static str, n: u64) {
        let key = Key::from_parts(
            CRON_TICKS,
            self.labels(&[("function", function), ("outcome", outcome)]),
        );
        self.recorder.register_counter(&key, &METADATA).increment(n);
    }

    /// The asynchronous calls of `function` not finished now, and the oldest one's age.
    pub fn activations_now(&self, function: &str, waiting: u64, running: u64, oldest: Duration) {
        for (state, n) in [("waiting", waiting), ("running", running)] {
            let key = Key::from_parts(
                ACTIVATIONS_PENDING,
                self.labels(&[("function", function), ("state", state)]),
            );
            self.recorder.register_gauge(&key, &METADATA).set(n as f64);
        }
        let key = Key::from_parts(ACTIVATIONS_OLDEST, self.labels(&[("function", function)]));
        self.recorder
            .register_gauge(&key, &METADATA)
            .set(oldest.as_secs_f64());
    }

    /// The clients tracked for pre-warming now.
    pub fn prewarm_tracked(&self, clients: u64) {
        let key = Key::from_parts(PREWARM_TRACKED, self.labels(&[]));
        self.recorder
            .register_gauge(&key, &METADATA)
            .set(clients as f64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cached_handles_record_into_the_labelled_series() {
        let m = NodeMetrics::new("cbd", None);
        for _ in 0..3 {
            m.call("echo", "served", "local", Duration::from_millis(2));
            m.backend_call("tinyfaas", "ok", Duration::from_millis(1));
        }
        // Folding the queued samples in keeps every one of them.
        m.run_upkeep();
        m.call("echo", "error", "none", Duration::from_millis(2));
        m.placement("neighbor", "greedy");
        m.placement("neighbor", "greedy");
        m.decision(Duration::from_micros(3));
        let text = m.render();
        let count = |series: &str| {
            text.lines()
                .find(|l| l.starts_with(series))
                .unwrap_or_else(|| panic!("{series} missing in\n{text}"))
                .rsplit(' ')
                .next()
                .unwrap()
                .to_owned()
        };
        assert_eq!(
            count(
                r#"geofaas_call_duration_seconds_count{node="cbd",function="echo",outcome="served",ran="local"}"#
            ),
            "3"
        );
        assert_eq!(
            count(
                r#"geofaas_call_duration_seconds_count{node="cbd",function="echo",outcome="error",ran="none"}"#
            ),
            "1"
        );
        assert_eq!(
            count(
                r#"geofaas_backend_call_duration_seconds_count{node="cbd",backend="tinyfaas",outcome="ok"}"#
            ),
            "3"
        );
        assert_eq!(
            count(r#"geofaas_placements_total{node="cbd",placement="neighbor",reason="greedy"}"#),
            "2"
        );
        assert_eq!(
            count(r#"geofaas_scheduler_decision_seconds_bucket{node="cbd",le="0.000005"}"#),
            "1"
        );
    }
}
