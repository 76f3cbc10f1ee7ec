//! Pre-warming where a moving client is heading.
//!
//! A node tracks each client that identifies itself (`X-Client-Id`, else the id of its API
//! key) and that it serves with a known location: the last `prewarm.track_points` locations
//! with their arrival times, in a bounded cache (`max_clients`, least recently seen dropped
//! first) that forgets a client `forget_s` after its last call. Clients are keyed by a hash
//! of their id under a per-node random key; nothing is tracked without an id, and nothing of
//! it leaves the node. From those fixes it extrapolates the path at constant velocity
//! ([`path`]); when the path enters another node's area within `prewarm_s`, it asks that node,
//! once per client, function and node every `again_s`, to make one instance of the function
//! warm: `POST /node/warm/{function}`, signed with the offload secret like every
//! node-to-node request (`routes::node` answers it). A client standing still (slower than
//! `min_speed_mps`) is never predicted. The request leaves in the background; the call that
//! caused it does not wait.
//!
//! The same prediction puts a connection hint on the answer (`pipeline::prewarm`, [`preconnect`]): `Link:
//! <https://next-node>; rel=preconnect`, the origin the `307` will name, on every answer while
//! the crossing is predicted, so the client can open its connection there ahead. It needs no
//! warm-up path at the target, nor the offload secret.
//!
//! Metrics: requests sent by outcome (`geofaas_prewarm_requests_total`), and, at the node that
//! warms, the instances started, later used by a call, and stopped unused.

pub mod path;
pub mod preconnect;
pub mod warm;

use parking_lot::Mutex;
use std::collections::hash_map::RandomState;
use std::collections::VecDeque;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::HeaderValue;
use geofaas_config::{LatLon, PrewarmSettings};
use moka::sync::Cache;

use crate::directory::Directory;
use crate::metrics::NodeMetrics;
use path::Fix;

/// One node's tracked clients and the pre-warm requests it sent lately.
pub struct Prewarm {
    settings: PrewarmSettings,
    /// Keys client ids; a random key per node, so ids cannot be made to collide.
    ids: RandomState,
    clients: Cache<u64, Arc<Mutex<VecDeque<Fix>>>>,
    /// (client, function, target node) asked within `again_s`.
    asked: Cache<(u64, String, String), ()>,
}

impl std::fmt::Debug for Prewarm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prewarm")
            .field("prewarm_s", &self.settings.prewarm_s)
            .field("clients", &self.clients.entry_count())
            .finish_non_exhaustive()
    }
}

/// A predicted crossing, as [`Prewarm::foresee`] found it.
#[derive(Debug, Clone, PartialEq)]
pub struct Foreseen {
    /// Where the client is expected when it has crossed.
    pub point: LatLon,
    /// The warm-up to ask for; `None` when it was asked within `again_s`.
    pub ask: Option<Ask>,
}

/// Where a client's path goes next, as [`Prewarm::observe`] found it.
#[derive(Debug, Clone, PartialEq)]
pub struct Ask {
    /// The node whose area the path enters.
    pub target: String,
    /// The function to warm there.
    pub function: String,
}

impl Prewarm {
    /// Empty tracking with `settings`.
    pub fn new(settings: &PrewarmSettings) -> Self {
        Self {
            settings: settings.clone(),
            ids: RandomState::new(),
            clients: Cache::builder()
                .max_capacity(settings.max_clients)
                .time_to_idle(Duration::from_secs(settings.forget_s))
                .build(),
            asked: Cache::builder()
                .max_capacity(settings.max_clients.saturating_mul(4))
                .time_to_live(Duration::from_secs(settings.again_s.max(1)))
                .build(),
        }
    }

    /// The tracking a reloaded node keeps: `before`'s when the settings did not change.
    pub fn carried(before: Option<&Arc<Prewarm>>, settings: &PrewarmSettings) -> Arc<Self> {
        match before {
            Some(b) if b.settings == *settings => b.clone(),
            _ => Arc::new(Self::new(settings)),
        }
    }

    /// Whether pre-warming is on (`[prewarm] prewarm_s` above zero).
    pub fn enabled(&self) -> bool {
        self.settings.enabled()
    }

    /// How many clients are tracked now.
    pub fn tracked(&self) -> u64 {
        self.clients.run_pending_tasks();
        self.clients.entry_count()
    }

    /// Records that the client `id` (`None`: not identified, not tracked) was at `point` at
    /// `at`, and what to warm where if its path is about to leave `me`'s area: at most once per
    /// client, function and target node every `again_s`.
    pub fn observe(
        &self,
        map: &geofaas_config::ServiceMap,
        me: &str,
        id: Option<&[u8]>,
        function: &str,
        point: LatLon,
        at: Instant,
    ) -> Option<Ask> {
        self.foresee(map, me, id, function, point, at)?.ask
    }

    /// Like [`Prewarm::observe`], with the prediction itself: where the client is expected
    /// when it leaves `me`'s area (whenever that is predicted, not only once per `again_s`),
    /// and the warm-up to ask for, if it is not asked yet.
    pub fn foresee(
        &self,
        map: &geofaas_config::ServiceMap,
        me: &str,
        id: Option<&[u8]>,
        function: &str,
        point: LatLon,
        at: Instant,
    ) -> Option<Foreseen> {
        if !self.settings.enabled() {
            return None;
        }
        let client = self.ids.hash_one(id?);
        let fixes = self.remember(client, Fix { at, point });
        let h = path::heading(&fixes, self.settings.min_speed_mps)?;
        let horizon = Duration::from_secs_f64(self.settings.prewarm_s);
        let crossing = path::crossing(map, me, &h, horizon)?;
        let key = (client, function.to_owned(), crossing.target.id.clone());
        let ask = (!self.asked.contains_key(&key)).then(|| {
            self.asked.insert(key, ());
            Ask {
                target: crossing.target.id.clone(),
                function: function.to_owned(),
            }
        });
        Some(Foreseen {
            point: crossing.point,
            ask,
        })
    }

    /// Adds `fix` to the client's track and returns the track: its newest `track_points`
    /// fixes within `forget_s` of this one.
    fn remember(&self, client: u64, fix: Fix) -> Vec<Fix> {
        let track = self.clients.get_with(client, Arc::default);
        let mut track = track.lock();
        let span = Duration::from_secs(self.settings.forget_s);
        track.push_back(fix);
        while track.len() > self.settings.track_points
            || track
                .front()
                .is_some_and(|f| fix.at.saturating_duration_since(f.at) > span)
        {
            track.pop_front();
        }
        track.iter().copied().collect()
    }
}

/// Who the caller is, for tracking: its `X-Client-Id`, else its API key's id; `None`
/// (never tracked) without either.
pub fn client_id(sent: Option<&HeaderValue>, key_id: Option<&str>) -> Option<Vec<u8>> {
    match (sent, key_id) {
        (Some(id), _) if !id.is_empty() => Some([b"id:", id.as_bytes()].concat()),
        (_, Some(key)) => Some([b"key:", key.as_bytes()].concat()),
        _ => None,
    }
}

/// Puts this node's pre-warm figures into its metrics (before `/metrics` renders them): the
/// instances its local runtimes started ahead of a call, used, and stopped unused, and the
/// clients it tracks.
pub fn publish(directory: &Directory, prewarm: &Prewarm, metrics: &NodeMetrics) {
    let mut stats = geofaas_functions::local::PrewarmStats::default();
    for s in directory
        .backends()
        .iter()
        .filter_map(|b| b.prewarm_stats())
    {
        stats.started += s.started;
        stats.used += s.used;
        stats.wasted += s.wasted;
    }
    metrics.prewarm_instances(stats.started, stats.used, stats.wasted);
    metrics.prewarm_tracked(prewarm.tracked());
}

#[cfg(test)]
mod tests;
