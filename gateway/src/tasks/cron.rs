//! The cron ticker ([`crate::cron`]): watches the schedules of the node's deployed functions
//! and accepts, as an asynchronous call, each tick this node claims.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::{header, HeaderMap, HeaderValue, Method};
use bytes::Bytes;
use chrono::{DateTime, SecondsFormat, Utc};
use croner::Cron;
use geofaas_config::headers::{TICK, TRIGGER};
use geofaas_functions::HttpRequest;

use crate::call::Call;
use crate::cron::{parse, schedule_id, ticks_after, Claims};
use crate::node::{Live, NodeState};

/// Missed ticks are counted up to this many.
const MAX_MISSED: usize = 100_000;
/// The longest the watcher sleeps: how soon a new deploy's schedule is seen.
const RECHECK: Duration = Duration::from_secs(1);
/// Most ticks of one schedule run at once after a stall (a suspended process, a clock jump);
/// the rest are counted as missed.
const MAX_DUE: usize = 16;
/// One schedule being watched.
struct Watched {
    cron: Cron,
    id: String,
    /// Ticks after this instant are still to come.
    after: DateTime<Utc>,
}

/// Watches the schedules of the node's deployed functions and runs the ticks it claims, until
/// the task is dropped. Returns at once on a node without deploys.
pub async fn run(live: Arc<Live>) {
    let mut watched: HashMap<(String, String), Watched> = HashMap::new();
    loop {
        let state = live.current();
        let Some(deploys) = state.deploys.clone() else {
            return;
        };
        let Some(claims) = claims_of(&state) else {
            return;
        };
        let schedules = tokio::task::spawn_blocking(move || deploys.schedules())
            .await
            .unwrap_or_default();
        let now = Utc::now();
        let mut seen = HashSet::new();
        for (function, exprs) in schedules {
            for expr in exprs {
                let key = (function.clone(), expr.clone());
                seen.insert(key.clone());
                if !watched.contains_key(&key) {
                    let cron = match parse(&expr) {
                        Ok(c) => c,
                        Err(e) => {
                            tracing::warn!(function = %function, error = %e, "cron schedule left out");
                            continue;
                        }
                    };
                    let id = schedule_id(&expr);
                    let schedule = format!("{function}/{id}");
                    tokio::spawn(count_missed(
                        state.clone(),
                        claims.clone(),
                        function.clone(),
                        expr.clone(),
                        (schedule, cron.clone()),
                        now,
                    ));
                    tracing::info!(function = %function, schedule = %expr, "watching a cron schedule");
                    watched.insert(
                        key.clone(),
                        Watched {
                            cron,
                            id,
                            after: now,
                        },
                    );
                }
                let Some(w) = watched.get_mut(&key) else {
                    continue;
                };
                let due: Vec<DateTime<Utc>> = ticks_after(&w.cron, w.after)
                    .take_while(|t| *t <= now)
                    .take(MAX_DUE + 1)
                    .collect();
                w.after = now;
                if due.len() > MAX_DUE {
                    tracing::warn!(function = %function, schedule = %expr, "more than {MAX_DUE} ticks fell due at once (the node stalled); the earlier ones are skipped");
                }
                for tick in due.into_iter().rev().take(MAX_DUE) {
                    tokio::spawn(fire(
                        state.clone(),
                        claims.clone(),
                        function.clone(),
                        (expr.clone(), w.id.clone()),
                        tick,
                    ));
                }
            }
        }
        watched.retain(|key, _| seen.contains(key));
        let next = watched
            .values()
            .filter_map(|w| ticks_after(&w.cron, now).next())
            .min();
        let wait = next
            .and_then(|n| (n - Utc::now()).to_std().ok())
            .unwrap_or(RECHECK)
            .min(RECHECK);
        drop(state);
        tokio::time::sleep(wait + Duration::from_millis(1)).await;
    }
}

/// Logs and counts the ticks of `schedule` that fell due between its last claimed tick and
/// `now` while no node ran it.
async fn count_missed(
    state: Arc<NodeState>,
    claims: Claims,
    function: String,
    expr: String,
    (schedule, cron): (String, Cron),
    now: DateTime<Utc>,
) {
    let last = match claims.last(&schedule).await {
        Ok(Some(ms)) => ms,
        Ok(None) => return,
        Err(e) => {
            tracing::warn!(function = %function, error = %e, "cannot read the schedule's last tick");
            return;
        }
    };
    let Some(from) = DateTime::<Utc>::from_timestamp_millis(last as i64) else {
        return;
    };
    // A tick of the last second may be another node's claim still on its way.
    let until = now - chrono::Duration::seconds(1);
    let missed = ticks_after(&cron, from)
        .take_while(|t| *t < until)
        .take(MAX_MISSED)
        .count();
    if missed > 0 {
        state
            .telemetry
            .metrics
            .cron_tick(&function, "missed", missed as u64);
        tracing::warn!(
            function = %function,
            schedule = %expr,
            missed,
            since = %from.to_rfc3339_opts(SecondsFormat::Secs, true),
            "cron ticks fell due while no node ran them; they are not run"
        );
    }
}

/// Claims one tick and, when this node won it, accepts its call.
async fn fire(
    state: Arc<NodeState>,
    claims: Claims,
    function: String,
    (expr, id): (String, String),
    tick: DateTime<Utc>,
) {
    let metrics = state.telemetry.metrics.clone();
    let schedule = format!("{function}/{id}");
    let at_ms = u64::try_from(tick.timestamp_millis()).unwrap_or(0);
    match claims.claim(&schedule, at_ms).await {
        Ok(true) => {}
        Ok(false) => return metrics.cron_tick(&function, "taken", 1),
        Err(e) => {
            metrics.cron_tick(&function, "failed", 1);
            return tracing::warn!(function = %function, schedule = %expr, error = %e, "cannot claim a cron tick; not run");
        }
    }
    let tick_id = format!(
        "{schedule}/{}",
        tick.to_rfc3339_opts(SecondsFormat::Secs, true)
    );
    let call = tick_call(&state, &function, &expr, &tick_id, tick);
    let activations = state.kept.activations.clone();
    let key = Some((format!("cron {tick_id}"), 0));
    match activations.start(state, call, None, key).await {
        Ok(_) => {
            metrics.cron_tick(&function, "run", 1);
            tracing::info!(function = %function, tick = %tick_id, "cron tick accepted");
        }
        Err(e) => {
            metrics.cron_tick(&function, "failed", 1);
            tracing::warn!(function = %function, tick = %tick_id, error = %e.message, "cron tick not accepted; not run");
        }
    }
}

/// The call a tick makes: `POST /fn/{function}` with the tick as JSON.
fn tick_call(
    state: &NodeState,
    function: &str,
    expr: &str,
    tick_id: &str,
    tick: DateTime<Utc>,
) -> Call {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(TRIGGER, HeaderValue::from_static("cron"));
    if let Ok(v) = HeaderValue::from_str(tick_id) {
        headers.insert(TICK, v);
    }
    let body = serde_json::json!({
        "trigger": "cron",
        "schedule": expr,
        "tick": tick_id,
        "scheduled_at": tick.to_rfc3339_opts(SecondsFormat::Secs, true),
    });
    platform_call(state, function, headers, Bytes::from(body.to_string()))
}

/// A call the platform makes of `function` (a trigger's): `POST /fn/{function}` from this
/// node, without a client.
pub(crate) fn platform_call(
    state: &NodeState,
    function: &str,
    headers: HeaderMap,
    body: Bytes,
) -> Call {
    let request_id = crate::headers::request_id(None);
    let path_and_query = format!("/fn/{function}");
    let origin = state
        .place
        .topology
        .node(&state.place.id)
        .map(|n| n.public_url.to_string())
        .unwrap_or_default();
    Call {
        function: function.to_owned(),
        http: Arc::new(HttpRequest {
            method: Method::POST,
            path: "/".into(),
            query: String::new(),
            url: format!("{}{path_and_query}", origin.trim_end_matches('/')),
            source_ip: None,
        }),
        method: Method::POST,
        path_and_query,
        headers,
        context: crate::geo::context(crate::pipeline::here(&state.place), None, &request_id),
        body,
        location: None,
        received: Instant::now(),
        route_time: Duration::ZERO,
        request_id,
        pinned: false,
        caller: 0,
    }
}

/// The claims of `state`'s node: etcd when it has a registry, else the shared folder.
fn claims_of(state: &NodeState) -> Option<Claims> {
    match state.fleet() {
        Some(f) => Some(Claims::Registry(f.clone())),
        None => state.claims_dir().map(Claims::Files),
    }
}
