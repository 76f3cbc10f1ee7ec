//! A small etcd v3 client over the generated gRPC stubs: ranges, puts and deletes under a
//! prefix, leases, and a watch stream. Every unary request has the configured timeout; streams
//! end when the connection does and callers start them again.

use std::time::Duration;

use futures::Stream;
use geofaas_config::RegistrySettings;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, Endpoint};

use crate::error::FleetError;
use crate::pb;
use crate::pb::kv_client::KvClient;
use crate::pb::lease_client::LeaseClient;
use crate::pb::watch_client::WatchClient;

/// A connection to an etcd cluster (lazy: building it never waits for etcd).
#[derive(Clone, Debug)]
pub struct Etcd {
    channel: Channel,
    timeout: Duration,
}

/// The first key after every key that starts with `prefix` (etcd's `range_end` for a prefix).
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

impl Etcd {
    /// A client of the endpoints in `settings`, balanced over them.
    pub fn connect(settings: &RegistrySettings) -> Result<Self, FleetError> {
        let timeout = Duration::from_millis(settings.request_timeout_ms.max(1));
        let mut endpoints = Vec::new();
        for url in &settings.etcd {
            let bad = |reason: &str| FleetError::Endpoint {
                url: url.to_string(),
                reason: reason.to_owned(),
            };
            if url.scheme() != "http" {
                return Err(bad(
                    "only http:// is supported (TLS to etcd is not built yet)",
                ));
            }
            let text = url.as_str().trim_end_matches('/').to_owned();
            let ep = Endpoint::from_shared(text)
                .map_err(|e| bad(&e.to_string()))?
                .connect_timeout(timeout)
                .tcp_nodelay(true)
                .http2_keep_alive_interval(Duration::from_secs(5))
                .keep_alive_timeout(timeout)
                .keep_alive_while_idle(true);
            endpoints.push(ep);
        }
        let channel = match endpoints.len() {
            0 => {
                return Err(FleetError::Endpoint {
                    url: "[]".into(),
                    reason: "no endpoint".into(),
                })
            }
            1 => endpoints.remove(0).connect_lazy(),
            _ => Channel::balance_list(endpoints.into_iter()),
        };
        Ok(Self { channel, timeout })
    }

    async fn timed<T>(
        &self,
        call: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<T, FleetError> {
        match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(r)) => Ok(r.into_inner()),
            Ok(Err(s)) => Err(s.into()),
            Err(_) => Err(FleetError::Unavailable(format!(
                "no answer within {:?}",
                self.timeout
            ))),
        }
    }

    /// Every key-value under `prefix`, and the store's revision at the read.
    pub async fn range_prefix(
        &self,
        prefix: &[u8],
    ) -> Result<(Vec<pb::KeyValue>, i64), FleetError> {
        let req = pb::RangeRequest {
            key: prefix.to_vec(),
            range_end: prefix_end(prefix),
            ..Default::default()
        };
        let r = self
            .timed(KvClient::new(self.channel.clone()).range(req))
            .await?;
        Ok((r.kvs, r.header.map_or(0, |h| h.revision)))
    }

    /// Puts `value` at `key`, attached to `lease` (0: none).
    pub async fn put(&self, key: Vec<u8>, value: Vec<u8>, lease: i64) -> Result<(), FleetError> {
        let req = pb::PutRequest { key, value, lease };
        self.timed(KvClient::new(self.channel.clone()).put(req))
            .await
            .map(drop)
    }

    /// Deletes `key`.
    pub async fn delete(&self, key: Vec<u8>) -> Result<(), FleetError> {
        let req = pb::DeleteRangeRequest {
            key,
            range_end: Vec::new(),
        };
        self.timed(KvClient::new(self.channel.clone()).delete_range(req))
            .await
            .map(drop)
    }

    /// A new lease of `ttl_s` seconds; returns its id and the TTL etcd granted.
    pub async fn grant(&self, ttl_s: u64) -> Result<(i64, i64), FleetError> {
        let req = pb::LeaseGrantRequest {
            ttl: i64::try_from(ttl_s).unwrap_or(i64::MAX),
            id: 0,
        };
        let r = self
            .timed(LeaseClient::new(self.channel.clone()).lease_grant(req))
            .await?;
        if !r.error.is_empty() {
            return Err(FleetError::Etcd(r.error));
        }
        Ok((r.id, r.ttl))
    }

    /// Ends lease `id` now; its keys are deleted.
    pub async fn revoke(&self, id: i64) -> Result<(), FleetError> {
        let req = pb::LeaseRevokeRequest { id };
        self.timed(LeaseClient::new(self.channel.clone()).lease_revoke(req))
            .await
            .map(drop)
    }

    /// Seconds lease `id` has left and the TTL it was granted with (`None`: it has expired).
    pub async fn time_to_live(&self, id: i64) -> Result<Option<(i64, i64)>, FleetError> {
        let req = pb::LeaseTimeToLiveRequest { id, keys: false };
        let r = self
            .timed(LeaseClient::new(self.channel.clone()).lease_time_to_live(req))
            .await?;
        Ok((r.ttl > 0).then_some((r.ttl, r.granted_ttl)))
    }

    /// A keep-alive session for lease `id`, opened with a first renewal (etcd answers the
    /// stream's headers only with its first message).
    pub async fn keep_alive(&self, id: i64) -> Result<KeepAlive, FleetError> {
        let (tx, rx) = mpsc::channel(4);
        let closed = |_| FleetError::Unavailable("keep-alive stream closed".into());
        tx.send(pb::LeaseKeepAliveRequest { id })
            .await
            .map_err(closed)?;
        let mut client = LeaseClient::new(self.channel.clone());
        let answers = self
            .timed(client.lease_keep_alive(ReceiverStream::new(rx)))
            .await?;
        let mut session = KeepAlive {
            id,
            tx,
            answers,
            timeout: self.timeout,
        };
        match session.answer().await? {
            true => Ok(session),
            false => Err(FleetError::Unavailable("the lease expired".into())),
        }
    }

    /// The events under `prefix` from revision `from` on. The stream ends (or errs) when the
    /// connection does; the caller reads everything again and watches anew.
    pub async fn watch_prefix(
        &self,
        prefix: &[u8],
        from: i64,
    ) -> Result<impl Stream<Item = Result<pb::WatchResponse, tonic::Status>>, FleetError> {
        let (tx, rx) = mpsc::channel(1);
        let create = pb::WatchRequest {
            request_union: Some(pb::watch_request::RequestUnion::CreateRequest(
                pb::WatchCreateRequest {
                    key: prefix.to_vec(),
                    range_end: prefix_end(prefix),
                    start_revision: from,
                    progress_notify: true,
                },
            )),
        };
        // The sender stays in the stream's state so etcd keeps the watch open.
        tx.send(create)
            .await
            .map_err(|_| FleetError::Unavailable("watch closed".into()))?;
        let stream = self
            .timed(WatchClient::new(self.channel.clone()).watch(ReceiverStream::new(rx)))
            .await?;
        Ok(futures::stream::unfold(
            (stream, tx),
            |(mut s, tx)| async move {
                let item = s.message().await.transpose()?;
                Some((item, (s, tx)))
            },
        ))
    }
}

/// An open keep-alive stream of one lease.
#[derive(Debug)]
pub struct KeepAlive {
    id: i64,
    tx: mpsc::Sender<pb::LeaseKeepAliveRequest>,
    answers: tonic::Streaming<pb::LeaseKeepAliveResponse>,
    timeout: Duration,
}

impl KeepAlive {
    /// Renews the lease once; `Ok(false)` when etcd says it has already expired.
    pub async fn renew(&mut self) -> Result<bool, FleetError> {
        self.tx
            .send(pb::LeaseKeepAliveRequest { id: self.id })
            .await
            .map_err(|_| FleetError::Unavailable("keep-alive stream closed".into()))?;
        self.answer().await
    }

    async fn answer(&mut self) -> Result<bool, FleetError> {
        match tokio::time::timeout(self.timeout, self.answers.message()).await {
            Ok(Ok(Some(r))) => Ok(r.ttl > 0),
            Ok(Ok(None)) => Err(FleetError::Unavailable("keep-alive stream ended".into())),
            Ok(Err(s)) => Err(s.into()),
            Err(_) => Err(FleetError::Unavailable("keep-alive unanswered".into())),
        }
    }
}
