//! The queue triggers' consumers ([`crate::triggers`]): one per deployed function and
//! subject, each turning the subject's messages into asynchronous calls.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull, stream, AckKind};
use axum::http::HeaderValue;
use futures::StreamExt;
use geofaas_config::headers::{SUBJECT, TRIGGER};

use crate::activations::queue::Queue;
use crate::node::Live;
use crate::triggers::{message_call, parse, stream_name};

/// How often the watcher looks for new or removed subscriptions.
const RECHECK: Duration = Duration::from_secs(1);
/// Messages asked for in one pull.
const BATCH: usize = 32;

/// Watches the deployed functions' queue triggers and runs a consumer for each, until the
/// task is dropped. Returns at once on a node without deploys or without the fleet's queue.
pub async fn run(live: Arc<Live>) {
    let mut running: HashMap<(String, String), tokio::task::JoinHandle<()>> = HashMap::new();
    loop {
        let state = live.current();
        let (Some(deploys), Some(queue)) = (
            state.deploys.clone(),
            state.kept.activations.queue().cloned(),
        ) else {
            return;
        };
        drop(state);
        let wanted = tokio::task::spawn_blocking(move || deploys.subscriptions())
            .await
            .unwrap_or_default();
        let mut seen = Vec::new();
        for (function, specs) in wanted {
            for spec in specs {
                let Ok(subject) = parse(&spec) else {
                    continue;
                };
                let key = (function.clone(), subject.clone());
                if !running.contains_key(&key) {
                    tracing::info!(function = %function, subject = %subject, "consuming a queue trigger");
                    let task = tokio::spawn(consume(
                        live.clone(),
                        queue.clone(),
                        function.clone(),
                        subject,
                    ));
                    running.insert(key.clone(), task);
                }
                seen.push(key);
            }
        }
        running.retain(|key, task| {
            let keep = seen.contains(key);
            if !keep {
                tracing::info!(function = %key.0, subject = %key.1, "queue trigger removed");
                task.abort();
            }
            keep
        });
        tokio::time::sleep(RECHECK).await;
    }
}

/// Turns `subject`'s messages into calls of `function`, until aborted.
async fn consume(live: Arc<Live>, queue: Arc<Queue>, function: String, subject: String) {
    loop {
        match subscription(&queue, &function, &subject).await {
            Ok(consumer) => loop {
                let batch = consumer
                    .batch()
                    .max_messages(BATCH)
                    .expires(Duration::from_secs(2))
                    .messages()
                    .await;
                let Ok(mut batch) = batch else { break };
                while let Some(Ok(msg)) = batch.next().await {
                    deliver(&live, &function, &subject, msg).await;
                }
            },
            Err(e) => {
                tracing::warn!(function = %function, subject = %subject, error = %e, "queue trigger: cannot open its stream; trying again");
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The stream of `subject` and the consumer of `function` on it, made where missing.
async fn subscription(
    queue: &Queue,
    function: &str,
    subject: &str,
) -> anyhow::Result<jetstream::consumer::PullConsumer> {
    let js = queue.context();
    let name = stream_name(queue.stream(), subject);
    let stream = js
        .get_or_create_stream(stream::Config {
            name: name.clone(),
            subjects: vec![subject.to_owned()],
            retention: stream::RetentionPolicy::Interest,
            storage: stream::StorageType::File,
            num_replicas: queue.replicas(),
            ..Default::default()
        })
        .await?;
    let durable = format!("fn-{function}");
    let consumer = stream
        .get_or_create_consumer(
            &durable,
            pull::Config {
                durable_name: Some(durable.clone()),
                ack_policy: jetstream::consumer::AckPolicy::Explicit,
                ack_wait: Duration::from_secs(queue.ack_wait_s()),
                max_deliver: -1,
                ..Default::default()
            },
        )
        .await?;
    Ok(consumer)
}

/// Accepts one message as an asynchronous call, then acknowledges it: a refusal that may
/// pass (`5xx`: the queue or the node busy) leaves it to be delivered again in a second, any
/// other (`4xx`: the function is gone, the message too large) drops it, logged.
async fn deliver(live: &Arc<Live>, function: &str, subject: &str, msg: jetstream::Message) {
    let state = live.current();
    let seq = msg.info().map(|i| (i.stream.to_owned(), i.stream_sequence));
    let Ok((stream, seq)) = seq else {
        return;
    };
    let (headers, body) = message_call(&msg);
    let mut call = super::cron::platform_call(&state, function, headers, body);
    call.headers
        .insert(TRIGGER, HeaderValue::from_static("nats"));
    if let Ok(v) = HeaderValue::from_str(&msg.subject) {
        call.headers.insert(SUBJECT, v);
    }
    let key = Some((format!("nats {stream}/{seq} {function}"), 0));
    let activations = state.kept.activations.clone();
    let metrics = state.telemetry.metrics.clone();
    match activations.start(state, call, None, key).await {
        Ok(_) => {
            metrics.activation(function, "triggered");
            if let Err(e) = msg.double_ack().await {
                tracing::warn!(function, subject, error = %e, "queue trigger: accepted, not acknowledged; the message may run twice");
            }
        }
        Err(e) if e.status.is_server_error() => {
            tracing::warn!(function, subject, error = %e.message, "queue trigger: not accepted now; delivered again in a second");
            let _ = msg
                .ack_with(AckKind::Nak(Some(Duration::from_secs(1))))
                .await;
        }
        Err(e) => {
            tracing::error!(function, subject, error = %e.message, "queue trigger: message refused; dropped");
            let _ = msg.ack_with(AckKind::Term).await;
        }
    }
}
