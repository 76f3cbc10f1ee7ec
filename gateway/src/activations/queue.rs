//! The fleet's queue of asynchronous calls on NATS JetStream (`[queue]`, docs/events.md).
//!
//! Two streams: the calls (a work queue, `{stream}.calls.{node}`), and the activations' state
//! (`{answers}.{id}`, one message per activation: waiting, or ended with its answer or dead
//! letter). The accepting node publishes an accepted call to its own subject and answers `202`
//! only once JetStream acknowledged it; the node's durable pull consumer (`node-{node}`) takes
//! it, runs it as a synchronous call would run from there (its edge, or the cloud when the edge
//! cannot), renews its hold every third of the ack wait while it runs, writes the ending and
//! only then acknowledges the call. A call whose node died is delivered again after the ack
//! wait to whichever node pulls that consumer: every node watches the others' consumers and
//! takes over one that has calls and nobody waiting on it; the cloud also takes the calls
//! waiting behind an edge that holds `max_in_flight` of them.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull, stream, AckKind};
use axum::http::StatusCode;
use futures::StreamExt;
use geofaas_config::{ActivationSettings, QueueSettings};
use serde::{Deserialize, Serialize};

use super::saved::Record;
use super::Activations;
use crate::error::ApiError;

/// Longest one JetStream request waits: a `202` is never sent later than this.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
/// Calls asked for in one pull.
const BATCH: usize = 64;
/// How often a node looks for consumers whose node is gone.
const RESCUE_EVERY: Duration = Duration::from_secs(1);

/// An activation's state in the answers stream.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub(super) enum Entry {
    /// Accepted, not ended yet.
    Waiting {
        function: String,
        owner: Option<String>,
        accepted_ms: u64,
    },
    /// Ended: a [`Record::Finished`].
    Ended { record: Box<Record> },
}

/// A connection to the fleet's queue.
pub struct Queue {
    js: jetstream::Context,
    settings: QueueSettings,
    calls: stream::Stream,
    answers: stream::Stream,
    /// The server's largest message.
    max_payload: usize,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("stream", &self.settings.stream)
            .field("answers", &self.settings.answers)
            .finish_non_exhaustive()
    }
}

/// A node id as a subject token and consumer name: letters, digits, `-` and `_` kept, the
/// rest `_`.
fn token(node: &str) -> String {
    node.chars()
        .map(
            |c| match c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                true => c,
                false => '_',
            },
        )
        .collect()
}

/// `503`: the queue did not take the call.
fn unavailable(what: &str, e: impl std::fmt::Display) -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "queue_unavailable",
        format!("the call was not accepted: the fleet's queue (NATS JetStream) did not {what} ({e}); retry later"),
    )
    .retry_after(5)
}

impl Queue {
    /// Connects to the servers of `settings` (credentials from `NATS_CREDS`, `NATS_TOKEN`, or
    /// `NATS_USER` and `NATS_PASSWORD`) and makes both streams where they do not exist yet.
    pub async fn connect(
        settings: &QueueSettings,
        activations: &ActivationSettings,
        node: &str,
    ) -> anyhow::Result<Arc<Self>> {
        use anyhow::Context as _;
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let mut opts = async_nats::ConnectOptions::new()
            .name(format!("geofaas {node}"))
            .connection_timeout(REQUEST_TIMEOUT);
        if let Some(path) = env("NATS_CREDS") {
            opts = opts
                .credentials_file(&path)
                .await
                .with_context(|| format!("NATS_CREDS={path}: cannot read the credentials"))?;
        } else if let Some(token) = env("NATS_TOKEN") {
            opts = opts.token(token);
        } else if let (Some(user), Some(password)) = (env("NATS_USER"), env("NATS_PASSWORD")) {
            opts = opts.user_and_password(user, password);
        }
        let addrs = settings
            .nats
            .iter()
            .map(|u| async_nats::ServerAddr::from_url(u.clone()))
            .collect::<Result<Vec<_>, _>>()
            .context("queue.nats")?;
        let urls = || {
            settings
                .nats
                .iter()
                .map(|u| u.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let client = opts
            .connect(addrs)
            .await
            .with_context(|| format!("queue.nats: cannot reach {}", urls()))?;
        let max_payload = client.server_info().max_payload;
        let js = jetstream::ContextBuilder::new()
            .timeout(REQUEST_TIMEOUT)
            .build(client);
        let calls = js
            .get_or_create_stream(stream::Config {
                name: settings.stream.clone(),
                subjects: vec![format!("{}.calls.*", settings.stream)],
                retention: stream::RetentionPolicy::WorkQueue,
                storage: stream::StorageType::File,
                num_replicas: settings.replicas,
                duplicate_window: Duration::from_secs(120),
                ..Default::default()
            })
            .await
            .with_context(|| {
                format!(
                    "queue.stream: cannot make the JetStream stream {:?} at {} (is JetStream on: nats-server -js?)",
                    settings.stream,
                    urls()
                )
            })?;
        let keep = activations
            .retention_s
            .max(activations.dead_letter_retention_s)
            + activations.max_age_s;
        let answers = js
            .get_or_create_stream(stream::Config {
                name: settings.answers.clone(),
                subjects: vec![format!("{}.*", settings.answers)],
                max_messages_per_subject: 1,
                max_age: Duration::from_secs(keep),
                storage: stream::StorageType::File,
                num_replicas: settings.replicas,
                ..Default::default()
            })
            .await
            .with_context(|| {
                format!(
                    "queue.answers: cannot make the JetStream stream {:?}",
                    settings.answers
                )
            })?;
        tracing::info!(nats = %urls(), stream = settings.stream, "asynchronous calls go to the fleet's queue");
        Ok(Arc::new(Self {
            js,
            settings: settings.clone(),
            calls,
            answers,
            max_payload,
        }))
    }

    fn subject(&self, node: &str) -> String {
        format!("{}.calls.{}", self.settings.stream, token(node))
    }

    /// Publishes accepted call `record` (a [`Record::Accepted`]) for `node`; `Ok` only once
    /// JetStream acknowledged it. The activation's waiting entry is written beside it.
    pub(super) async fn accept(
        &self,
        node: &str,
        id: &str,
        record: &Record,
        waiting: Entry,
    ) -> Result<(), ApiError> {
        let payload = serde_json::to_vec(record).map_err(|e| unavailable("take the call", e))?;
        if payload.len() > self.max_payload {
            return Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large_for_queue",
                format!(
                    "the call, {} bytes as queued, is over the queue's largest message ({} bytes, nats-server max_payload); send a smaller body or call synchronously",
                    payload.len(),
                    self.max_payload
                ),
            ));
        }
        let publish = async {
            let msg = jetstream::message::PublishMessage::build()
                .payload(payload.into())
                .message_id(id);
            let ack = self.js.send_publish(self.subject(node), msg).await?;
            ack.await
        };
        let (published, put) = tokio::join!(publish, self.put(id, &waiting));
        published.map_err(|e| unavailable("acknowledge the call", e))?;
        if let Err(e) = put {
            // The call is queued and runs; only other nodes' reads see it late.
            tracing::warn!(activation = id, error = %e, "queue: the waiting entry was not written");
        }
        Ok(())
    }

    async fn put(&self, id: &str, entry: &Entry) -> anyhow::Result<()> {
        let payload = serde_json::to_vec(entry)?;
        let subject = format!("{}.{id}", self.settings.answers);
        self.js.publish(subject, payload.into()).await?.await?;
        Ok(())
    }

    /// Activation `id`'s state, if the queue has one (ids are 32 hex digits).
    pub(super) async fn entry(&self, id: &str) -> Option<Entry> {
        if id.len() != 32 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let subject = format!("{}.{id}", self.settings.answers);
        let msg = self
            .answers
            .get_last_raw_message_by_subject(&subject)
            .await
            .ok()?;
        serde_json::from_slice(&msg.payload).ok()
    }

    /// Writes call `id`'s ending; a record over the server's largest message first loses a
    /// dead letter's call, then its answer (a `502` saying so; the node that ran the call
    /// keeps the whole answer).
    pub(super) async fn finish(&self, id: &str, mut record: Record) -> anyhow::Result<()> {
        let fits = |r: &Record| {
            let entry = Entry::Ended {
                record: Box::new(r.clone()),
            };
            serde_json::to_vec(&entry).is_ok_and(|v| v.len() + 256 <= self.max_payload)
        };
        if !fits(&record) {
            if let Record::Finished { call, .. } = &mut record {
                *call = None;
            }
        }
        if !fits(&record) {
            if let Record::Finished { answer, .. } = &mut record {
                *answer = super::saved::SavedAnswer::too_large(self.max_payload);
            }
        }
        let record = Box::new(record);
        self.put(id, &Entry::Ended { record }).await
    }

    /// Node `node`'s consumer, made where it does not exist yet.
    async fn consumer(&self, node: &str) -> anyhow::Result<jetstream::consumer::PullConsumer> {
        let name = format!("node-{}", token(node));
        let consumer = self
            .calls
            .get_or_create_consumer(
                &name,
                pull::Config {
                    durable_name: Some(name.clone()),
                    filter_subject: self.subject(node),
                    ack_policy: jetstream::consumer::AckPolicy::Explicit,
                    ack_wait: Duration::from_secs(self.settings.ack_wait_s),
                    max_ack_pending: self.settings.max_in_flight as i64,
                    max_deliver: -1,
                    ..Default::default()
                },
            )
            .await?;
        Ok(consumer)
    }

    /// The other nodes' consumers to take calls from now: those with calls and nobody waiting
    /// on them twice in a row (their node is gone), and for the cloud also those holding
    /// `max_in_flight` calls with more waiting (their edge is full).
    async fn orphans(
        &self,
        mine: &str,
        cloud: bool,
        seen: &mut std::collections::HashSet<String>,
    ) -> Vec<String> {
        let mut out = Vec::new();
        let mut now = std::collections::HashSet::new();
        let mut list = self.calls.consumers();
        while let Some(Ok(info)) = list.next().await {
            if info.name == mine || !info.name.starts_with("node-") {
                continue;
            }
            let has_work = info.num_pending > 0 || info.num_ack_pending > 0;
            let full = info.num_ack_pending >= self.settings.max_in_flight && info.num_pending > 0;
            if has_work && info.num_waiting == 0 {
                if seen.contains(&info.name) {
                    out.push(info.name.clone());
                }
                now.insert(info.name.clone());
            } else if cloud && full {
                out.push(info.name.clone());
            }
        }
        *seen = now;
        out
    }
}

/// Takes calls from the consumer of node `id` (the cloud when `cloud`), and from the consumers
/// of nodes that are gone, until the task is dropped.
pub async fn serve(activations: Arc<Activations>, queue: Arc<Queue>, id: String, cloud: bool) {
    let own = async {
        loop {
            match queue.consumer(&id).await {
                Ok(consumer) => pull_forever(&activations, &consumer).await,
                Err(e) => {
                    tracing::warn!(error = %e, "queue: cannot open this node's consumer; trying again")
                }
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    };
    let rescue = async {
        let mine = format!("node-{}", token(&id));
        let mut seen = std::collections::HashSet::new();
        loop {
            tokio::time::sleep(RESCUE_EVERY).await;
            for name in queue.orphans(&mine, cloud, &mut seen).await {
                let Ok(consumer) = queue.calls.get_consumer::<pull::Config>(&name).await else {
                    continue;
                };
                let batch = consumer
                    .fetch()
                    .max_messages(BATCH)
                    .expires(Duration::from_millis(500))
                    .messages()
                    .await;
                let Ok(mut batch) = batch else { continue };
                let mut taken = 0;
                while let Some(Ok(msg)) = batch.next().await {
                    taken += 1;
                    take(&activations, &queue, msg).await;
                }
                if taken > 0 {
                    tracing::info!(
                        consumer = name,
                        calls = taken,
                        "queue: took over calls of a node that is gone or full"
                    );
                }
            }
        }
    };
    tokio::join!(own, rescue);
}

/// Pulls batches from `consumer` until an error.
async fn pull_forever(
    activations: &Arc<Activations>,
    consumer: &jetstream::consumer::PullConsumer,
) {
    let Some(queue) = activations.queue.get() else {
        return;
    };
    loop {
        let batch = consumer
            .batch()
            .max_messages(BATCH)
            .expires(Duration::from_secs(2))
            .messages()
            .await;
        let mut batch = match batch {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(error = %e, "queue: pull failed");
                return;
            }
        };
        while let Some(next) = batch.next().await {
            match next {
                Ok(msg) => take(activations, queue, msg).await,
                Err(e) => {
                    tracing::debug!(error = %e, "queue: batch ended");
                    break;
                }
            }
        }
    }
}

/// Starts running one delivered call (or acknowledges one that already ended).
async fn take(activations: &Arc<Activations>, queue: &Arc<Queue>, msg: jetstream::Message) {
    let record: Record = match serde_json::from_slice(&msg.payload) {
        Ok(r @ Record::Accepted { .. }) => r,
        _ => {
            tracing::error!(subject = %msg.subject, "queue: a message that is not an accepted call; dropped");
            let _ = msg.ack_with(AckKind::Term).await;
            return;
        }
    };
    let Record::Accepted { id, .. } = &record else {
        return;
    };
    let redelivered = msg.info().is_ok_and(|i| i.delivered > 1);
    if redelivered {
        if let Some(Entry::Ended { .. }) = queue.entry(id).await {
            // It ended at a node that died before it acknowledged the call.
            let _ = msg.double_ack().await;
            return;
        }
    }
    // A node that stopped leaves the call unacknowledged: it is delivered again.
    let Some(host) = activations.host() else {
        return;
    };
    activations.adopt(record, msg, host, queue.clone());
}

/// Renews the hold on `msg` every third of the ack wait until dropped.
pub(super) async fn keep_alive(msg: Arc<jetstream::Message>, ack_wait_s: u64) {
    let every = Duration::from_millis(ack_wait_s * 1000 / 3).max(Duration::from_millis(300));
    loop {
        tokio::time::sleep(every).await;
        if msg.ack_with(AckKind::Progress).await.is_err() {
            tracing::debug!("queue: progress ack failed");
        }
    }
}

impl Queue {
    /// Seconds a node may hold a call.
    pub(crate) fn ack_wait_s(&self) -> u64 {
        self.settings.ack_wait_s
    }

    /// The JetStream context (queue triggers make their streams with it).
    pub(crate) fn context(&self) -> &jetstream::Context {
        &self.js
    }

    /// The calls stream's name, the prefix of the triggers' streams.
    pub(crate) fn stream(&self) -> &str {
        &self.settings.stream
    }

    /// Copies JetStream keeps of each stream.
    pub(crate) fn replicas(&self) -> usize {
        self.settings.replicas
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_ids_become_subject_tokens() {
        assert_eq!(token("tu-berlin"), "tu-berlin");
        assert_eq!(token("a.b c*>"), "a_b_c__");
    }
}
