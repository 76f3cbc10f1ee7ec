//! `GET /events[?scope=node|fleet]`: the call stream as server-sent events, this node's
//! ([`crate::events::EventBus`]) or, with `scope=fleet`, the other nodes' merged into it.
//!
//! For each other node of the topology (or registry) one task reads that node's `GET /events`
//! over the signed node-to-node link: the request carries the offload credential over
//! `GET /events` (`auth::OffloadKey`), which the peer takes instead of an admin key, and the
//! HTTPS client trusts the platform CA. Each event's JSON is passed on as it came; a full queue
//! loses it and counts it like a local one. A peer that cannot be reached, or whose stream
//! ends, is retried every `RETRY`; each change is told as an `event: peer`
//! (`{"node","connected","error"}`). The tasks end when the subscriber goes away.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::Query;
use axum::http::{Response, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::IntoResponse;
use futures::{Stream, StreamExt as _};
use geofaas_config::headers::OFFLOAD;
use serde::Deserialize;
use serde_json::json;
use tokio::sync::mpsc;
use url::Url;

use crate::auth::OffloadKey;
use crate::error::ApiError;
use crate::events::{Msg, PATH};
use crate::metrics::NodeMetrics;
use crate::node::NodeState;

/// Query of `GET /events`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    /// `node` (default): this node's calls; `fleet`: every node's.
    scope: Option<String>,
}

/// `GET /events[?scope=node|fleet]`: the call stream (admin key, or another node's signature).
pub async fn events(
    crate::guard::Operator(state): crate::guard::Operator,
    query: Result<Query<EventsQuery>, axum::extract::rejection::QueryRejection>,
) -> Response<Body> {
    let fleet = match query {
        Ok(Query(q)) => match q.scope.as_deref() {
            None | Some("node") => false,
            Some("fleet") => true,
            Some(other) => {
                return bad_query(format!(
                    "scope={other:?}: use scope=node (this node's calls) or scope=fleet"
                ))
                .into_response()
            }
        },
        Err(e) => {
            return bad_query(format!("{}: only scope=node|fleet", e.body_text())).into_response()
        }
    };
    let (tx, rx, lost) = state.telemetry.events.subscribe();
    if fleet {
        follow_peers(&state, tx, lost.clone());
    } else {
        drop(tx);
    }
    let mut reported = 0u64;
    // A first comment, so a client knows it is subscribed before any call happens.
    let hello = Event::default().comment(format!(
        "events of {} (scope={})",
        state.place.id,
        if fleet { "fleet" } else { "node" }
    ));
    let calls = tokio_stream_of(rx).map(move |msg| {
        let total = lost.load(Ordering::Relaxed);
        let event = match msg {
            _ if total > reported => {
                // The loss is told before the next event, in the order it happened.
                let n = total - reported;
                reported = total;
                let notice = Event::default()
                    .comment(format!("lost {n} events"))
                    .event("lost")
                    .data(format!(r#"{{"lost":{n},"lost_total":{total}}}"#));
                return futures::stream::iter(vec![Ok(notice), Ok(message(msg))]);
            }
            m => message(m),
        };
        futures::stream::iter(vec![Ok::<_, Infallible>(event)])
    });
    let stream = futures::stream::once(async { Ok(hello) }).chain(calls.flatten());
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

fn message(msg: Msg) -> Event {
    match msg {
        Msg::Call(json) => Event::default().data(&*json),
        Msg::Peer(json) => Event::default().event("peer").data(json),
    }
}

/// The receiver as a stream (it ends when every sender is gone).
fn tokio_stream_of(rx: mpsc::Receiver<Msg>) -> impl Stream<Item = Msg> {
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|m| (m, rx)) })
}

fn bad_query(message: String) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "bad_query", message)
}

/// How long to wait before reconnecting to a peer.
const RETRY: Duration = Duration::from_secs(1);
/// Longest line accepted from a peer's stream; a longer one is dropped.
const MAX_LINE: usize = 256 * 1024;

/// Starts one follower per other node, feeding `tx`; `lost` is the subscriber's loss counter.
pub(crate) fn follow_peers(state: &NodeState, tx: mpsc::Sender<Msg>, lost: Arc<AtomicU64>) {
    let peers: Vec<(String, Url)> = state
        .place
        .map
        .nodes()
        .iter()
        .filter(|n| n.id != state.place.id)
        .map(|n| (n.id.clone(), n.public_url.clone()))
        .collect();
    let (Some(client), Some(key)) = (state.peer_client().cloned(), state.links.key.clone()) else {
        for (id, _) in peers {
            let why = "this node has no offload secret, so it cannot sign requests to its peers";
            peer_status(&tx, &id, false, Some(why));
        }
        return;
    };
    for (id, base) in peers {
        let peer = Peer {
            client: client.clone(),
            key: key.clone(),
            me: state.place.id.clone(),
            id,
            base,
            tx: tx.clone(),
            lost: lost.clone(),
            metrics: state.telemetry.metrics.clone(),
        };
        tokio::spawn(peer.follow());
    }
}

/// One peer's stream, followed for one subscriber.
struct Peer {
    client: reqwest::Client,
    key: OffloadKey,
    me: String,
    id: String,
    base: Url,
    tx: mpsc::Sender<Msg>,
    lost: Arc<AtomicU64>,
    metrics: Arc<NodeMetrics>,
}

impl Peer {
    async fn follow(self) {
        let Ok(url) = self.base.join(PATH) else {
            peer_status(
                &self.tx,
                &self.id,
                false,
                Some("its public_url has no /events"),
            );
            return;
        };
        loop {
            let request = self
                .client
                .get(url.clone())
                .header(OFFLOAD, self.key.sign(&self.me, "GET", PATH))
                .send();
            let resp = tokio::select! {
                r = request => r.and_then(reqwest::Response::error_for_status),
                () = self.tx.closed() => return,
            };
            let error = match resp {
                Ok(resp) => {
                    if !peer_status(&self.tx, &self.id, true, None) {
                        return;
                    }
                    match self.read(resp).await {
                        Some(why) => why,
                        None => return,
                    }
                }
                Err(e) => e.to_string(),
            };
            if !peer_status(&self.tx, &self.id, false, Some(&error)) {
                return;
            }
            tokio::select! {
                () = tokio::time::sleep(RETRY) => {}
                () = self.tx.closed() => return,
            }
        }
    }

    /// Passes the peer's events on until its stream ends (`Some(why)`) or the subscriber goes
    /// away (`None`).
    async fn read(&self, resp: reqwest::Response) -> Option<String> {
        let mut body = resp.bytes_stream();
        let mut parser = SseParser::default();
        loop {
            let chunk = tokio::select! {
                c = body.next() => c,
                () = self.tx.closed() => return None,
            };
            match chunk {
                Some(Ok(bytes)) => {
                    for data in parser.feed(&bytes) {
                        if !self.offer(data) {
                            return None;
                        }
                    }
                }
                Some(Err(e)) => return Some(format!("its stream broke: {e}")),
                None => return Some("its stream ended".to_owned()),
            }
        }
    }

    /// Queues one event; false when the subscriber is gone.
    fn offer(&self, json: String) -> bool {
        match self.tx.try_send(Msg::Call(json.into())) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.lost.fetch_add(1, Ordering::Relaxed);
                self.metrics.events_dropped();
                true
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        }
    }
}

/// Tells the subscriber whether peer `id`'s stream is connected; false when it is gone.
fn peer_status(tx: &mpsc::Sender<Msg>, id: &str, connected: bool, error: Option<&str>) -> bool {
    let json = json!({"node": id, "connected": connected, "error": error}).to_string();
    !matches!(
        tx.try_send(Msg::Peer(json)),
        Err(mpsc::error::TrySendError::Closed(_))
    )
}

/// The data of unnamed events in a `text/event-stream`, fed in arbitrary chunks. Named events
/// (the peer's own `lost` and `peer` notices) and comments are left out.
#[derive(Debug, Default)]
struct SseParser {
    line: Vec<u8>,
    data: Option<String>,
    named: bool,
}

impl SseParser {
    fn feed(&mut self, bytes: &[u8]) -> Vec<String> {
        let mut out = Vec::new();
        for &b in bytes {
            if b != b'\n' {
                if self.line.len() < MAX_LINE {
                    self.line.push(b);
                }
                continue;
            }
            let mut line = std::mem::take(&mut self.line);
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            if line.len() >= MAX_LINE {
                continue;
            }
            let line = String::from_utf8_lossy(&line);
            if line.is_empty() {
                if let Some(data) = self.data.take().filter(|_| !self.named) {
                    out.push(data);
                }
                self.named = false;
            } else if let Some(d) = line.strip_prefix("data:") {
                let d = d.strip_prefix(' ').unwrap_or(d);
                match &mut self.data {
                    Some(s) => {
                        s.push('\n');
                        s.push_str(d);
                    }
                    None => self.data = Some(d.to_owned()),
                }
            } else if line.starts_with("event:") {
                self.named = true;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parser_keeps_unnamed_events_split_anywhere() {
        let text = ": keep-alive\n\ndata: {\"a\":1}\n\nevent: lost\ndata: {\"lost\":2}\n\r\ndata: x\r\ndata: y\n\n";
        for cut in 0..text.len() {
            let mut p = SseParser::default();
            let mut got = p.feed(&text.as_bytes()[..cut]);
            got.extend(p.feed(&text.as_bytes()[cut..]));
            assert_eq!(
                got,
                vec!["{\"a\":1}".to_owned(), "x\ny".to_owned()],
                "cut at {cut}"
            );
        }
    }
}
