//! A node's health as `geofaas fleet ls` shows it: what the node itself says (its `/readyz`,
//! asked at once) and how old its last load report is, not only that etcd still holds its
//! record (a killed node's record outlives it by up to its lease time).
//!
//! | HEALTH | `/readyz` | last load report |
//! |---|---|---|
//! | `up` | 200 | at most two report intervals old |
//! | `stale` | 200 | older, or none (the node serves, but its reports do not reach etcd) |
//! | `not-ready` | 503 (draining, or not started) | any |
//! | `down` | no answer (refused, timed out, TLS failed) | any |
//!
//! The same answer's `Date` header gives the node's wall clock against this machine's
//! ([`Answer::clock_offset_s`]); `fleet ls` names a node whose clock is more than
//! [`CLOCK_NOTE_S`] off, and says when it is outside the window node-to-node signatures allow
//! (its signed calls and requests are refused by the other nodes, `403 clock_skew`).

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;

/// How long one node may take to answer `/readyz`.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// A node's clock this many seconds or more away from this machine's is named: the `Date`
/// header has whole seconds and the probe's round trip is at most [`PROBE_TIMEOUT`], so a
/// smaller offset may be the measure's own error.
pub const CLOCK_NOTE_S: i64 = 5;

/// A node's answer to `/readyz`: what it said and how far its clock is from this machine's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    /// What it said.
    pub probe: Probe,
    /// Its `Date` header minus this machine's time in the middle of the request, whole
    /// seconds (positive: the node is ahead); `None` without an answer or a `Date`.
    pub clock_offset_s: Option<i64>,
}

/// The note `fleet ls` prints for a node whose clock is [`CLOCK_NOTE_S`] or more off.
pub fn clock_note(node: &str, offset_s: Option<i64>) -> Option<String> {
    let off = offset_s.filter(|o| o.abs() >= CLOCK_NOTE_S)?;
    let way = if off > 0 { "ahead of" } else { "behind" };
    let window = geofaas_gateway::auth::MAX_SKEW_S;
    let effect = if off.unsigned_abs() > window {
        format!(
            "outside the ±{window} s node-to-node signatures allow: the other nodes refuse its signed calls (403 clock_skew)"
        )
    } else {
        format!("within the ±{window} s node-to-node signatures allow")
    };
    Some(format!(
        "{node}: clock {} s {way} this machine's ({effect}); check its NTP",
        off.abs()
    ))
}

/// `date` minus the middle of `sent..received`, in whole seconds (`date` has whole seconds:
/// half a second is added, the middle of what it may stand for).
fn offset_s(date: SystemTime, sent: SystemTime, received: SystemTime) -> i64 {
    let secs = |t: SystemTime| match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    };
    let middle = (secs(sent) + secs(received)) / 2.0;
    (secs(date) + 0.5 - middle).round() as i64
}

/// What a node's `/readyz` said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Probe {
    /// 200.
    Ready,
    /// Another status (503 while draining).
    NotReady(u16),
    /// No answer, with the reason.
    Unreachable(String),
}

/// Whether a load report `age_ms` old is recent: at most two report intervals.
pub fn is_fresh(age_ms: Option<u64>, interval_ms: u64) -> bool {
    age_ms.is_some_and(|a| a <= interval_ms.saturating_mul(2))
}

/// The HEALTH column (see the module's table).
pub fn health(probe: &Probe, report_age_ms: Option<u64>, interval_ms: u64) -> &'static str {
    match probe {
        Probe::Unreachable(_) => "down",
        Probe::NotReady(_) => "not-ready",
        Probe::Ready if is_fresh(report_age_ms, interval_ms) => "up",
        Probe::Ready => "stale",
    }
}

/// Asks nodes for their `/readyz` over HTTPS.
#[derive(Debug)]
pub struct Prober {
    client: reqwest::Client,
}

impl Prober {
    /// A prober that trusts `ca` (a PEM file) besides the system's roots.
    pub fn new(ca: Option<&Path>) -> anyhow::Result<Self> {
        let mut client = reqwest::Client::builder().timeout(PROBE_TIMEOUT);
        if let Some(ca) = ca {
            let pem = std::fs::read(ca).with_context(|| format!("reading {}", ca.display()))?;
            let cert = reqwest::Certificate::from_pem(&pem)
                .with_context(|| format!("{}: not a PEM certificate", ca.display()))?;
            client = client.add_root_certificate(cert);
        }
        Ok(Self {
            client: client.build()?,
        })
    }

    /// Every node's answer, at once, in the order of `urls`.
    pub async fn all(&self, urls: &[&url::Url]) -> Vec<Answer> {
        futures::future::join_all(urls.iter().map(|u| self.one(u))).await
    }

    async fn one(&self, base: &url::Url) -> Answer {
        let url = format!("{}/readyz", base.as_str().trim_end_matches('/'));
        let sent = SystemTime::now();
        match self.client.get(url).send().await {
            Ok(r) => {
                let clock_offset_s = r
                    .headers()
                    .get(reqwest::header::DATE)
                    .and_then(|d| httpdate::parse_http_date(d.to_str().ok()?).ok())
                    .map(|date| offset_s(date, sent, SystemTime::now()));
                let probe = if r.status().is_success() {
                    Probe::Ready
                } else {
                    Probe::NotReady(r.status().as_u16())
                };
                Answer {
                    probe,
                    clock_offset_s,
                }
            }
            Err(e) => Answer {
                probe: Probe::Unreachable(crate::deploy_cli::describe(&e)),
                clock_offset_s: None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_is_what_the_node_says_then_how_old_its_report_is() {
        let gone = Probe::Unreachable("connection refused".into());
        let cases = [
            (Probe::Ready, Some(900), "up"),
            (Probe::Ready, Some(2000), "up"),
            (Probe::Ready, Some(2001), "stale"),
            (Probe::Ready, None, "stale"),
            (Probe::NotReady(503), Some(100), "not-ready"),
            (gone.clone(), Some(100), "down"),
            (gone, None, "down"),
        ];
        for (probe, age, want) in cases {
            assert_eq!(health(&probe, age, 1000), want, "{probe:?} {age:?}");
        }
    }

    #[test]
    fn a_clock_is_named_when_it_is_seconds_off_and_its_effect_said() {
        let t = |s: u64| UNIX_EPOCH + Duration::from_millis(s);
        // Sent at 1000.0 s, answered at 1000.2 s, the node's Date 1300 s: 300 s ahead.
        assert_eq!(offset_s(t(1_300_000), t(1_000_000), t(1_000_200)), 300);
        assert_eq!(offset_s(t(1_000_000), t(1_000_000), t(1_000_200)), 0);
        assert_eq!(offset_s(t(990_000), t(1_000_000), t(1_000_200)), -10);
        assert_eq!(clock_note("lima", Some(4)), None);
        assert_eq!(clock_note("lima", None), None);
        let ahead = clock_note("lima", Some(300)).unwrap();
        assert!(
            ahead.starts_with("lima: clock 300 s ahead of") && ahead.contains("403 clock_skew"),
            "{ahead}"
        );
        let behind = clock_note("lima", Some(-20)).unwrap();
        assert!(
            behind.contains("20 s behind") && behind.contains("within"),
            "{behind}"
        );
    }
}
