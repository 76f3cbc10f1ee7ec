//! A small etcd v3 client over the generated gRPC stubs: ranges, puts, deletes and
//! transactions under a prefix, leases, and a watch stream, over plain HTTP/2 or TLS (rustls),
//! with etcd's user/password authentication when the settings name credentials. Every unary
//! request has the configured timeout; streams end when the connection does and callers start
//! them again.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use geofaas_config::{RegistrySettings, RegistryTls};
use tokio::sync::{mpsc, Mutex};
use tokio_stream::wrappers::ReceiverStream;
use tonic::metadata::AsciiMetadataValue;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use crate::error::FleetError;
use crate::pb;
use crate::pb::auth_client::AuthClient;
use crate::pb::kv_client::KvClient;
use crate::pb::lease_client::LeaseClient;
use crate::pb::watch_client::WatchClient;

/// A connection to an etcd cluster (lazy: building it never waits for etcd).
#[derive(Clone, Debug)]
pub struct Etcd {
    channel: Channel,
    timeout: Duration,
    auth: Option<Arc<Auth>>,
    /// How many endpoints the channel balances over.
    endpoints: usize,
}

/// etcd credentials and the token etcd gave for them.
struct Auth {
    user: String,
    password: String,
    /// Where they came from, for error messages.
    source: String,
    token: Mutex<Option<AsciiMetadataValue>>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth")
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

/// Why a request failed before it became a [`FleetError`].
enum Failure {
    Status(tonic::Status),
    Elapsed,
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

/// The TLS settings as tonic's, reading the files (errors name the field).
fn tls_config(tls: &RegistryTls) -> Result<ClientTlsConfig, FleetError> {
    let read = |field: &str, path: &std::path::Path, marker: &str| {
        let bad = |reason: String| FleetError::Setting {
            field: format!("registry.tls.{field}"),
            reason,
        };
        let text =
            std::fs::read(path).map_err(|e| bad(format!("cannot read {}: {e}", path.display())))?;
        if !String::from_utf8_lossy(&text).contains(marker) {
            return Err(bad(format!("{} holds no PEM {marker}", path.display())));
        }
        Ok(text)
    };
    let ca = read("ca", &tls.ca, "CERTIFICATE-----")?;
    let mut config = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca))
        // etcd negotiates h2 over ALPN; some proxies in front of it do not.
        .assume_http2(true);
    if let (Some(cert), Some(key)) = (&tls.cert, &tls.key) {
        let cert = read("cert", cert, "CERTIFICATE-----")?;
        let key = read("key", key, "PRIVATE KEY-----")?;
        config = config.identity(Identity::from_pem(cert, key));
    }
    if let Some(domain) = &tls.domain {
        config = config.domain_name(domain.clone());
    }
    Ok(config)
}

impl Etcd {
    /// A client of the endpoints in `settings`, balanced over them. Reads the TLS files and the
    /// credentials' environment variables now (errors name the field); never waits for etcd.
    pub fn connect(settings: &RegistrySettings) -> Result<Self, FleetError> {
        let timeout = Duration::from_millis(settings.request_timeout_ms.max(1));
        let tls = settings.tls.as_ref().map(tls_config).transpose()?;
        let auth = settings
            .credentials()
            .map_err(|(field, reason)| FleetError::Setting { field, reason })?
            .map(|(user, password)| {
                Arc::new(Auth {
                    user,
                    password,
                    source: format!(
                        "registry.user_env = {}, registry.password_env = {}",
                        settings.user_env.as_deref().unwrap_or_default(),
                        settings.password_env.as_deref().unwrap_or_default()
                    ),
                    token: Mutex::new(None),
                })
            });
        let mut endpoints = Vec::new();
        for url in &settings.etcd {
            let bad = |reason: &str| FleetError::Endpoint {
                url: url.to_string(),
                reason: reason.to_owned(),
            };
            let wants_tls = url.scheme() == "https";
            if !matches!(url.scheme(), "http" | "https") || wants_tls != tls.is_some() {
                return Err(bad(
                    "http:// without [registry.tls], https:// with it (registry.tls)",
                ));
            }
            let text = url.as_str().trim_end_matches('/').to_owned();
            let mut ep = Endpoint::from_shared(text)
                .map_err(|e| bad(&e.to_string()))?
                .connect_timeout(timeout)
                .tcp_nodelay(true)
                .http2_keep_alive_interval(Duration::from_secs(5))
                .keep_alive_timeout(timeout)
                .keep_alive_while_idle(true);
            if let Some(tls) = &tls {
                ep = ep
                    .tls_config(tls.clone())
                    .map_err(|e| FleetError::Setting {
                        field: "registry.tls".into(),
                        reason: e.to_string(),
                    })?;
            }
            endpoints.push(ep);
        }
        let count = endpoints.len();
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
        Ok(Self {
            channel,
            timeout,
            auth,
            endpoints: count,
        })
    }

    async fn timed<T>(
        &self,
        call: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<T, Failure> {
        match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(r)) => Ok(r.into_inner()),
            Ok(Err(s)) => Err(Failure::Status(s)),
            Err(_) => Err(Failure::Elapsed),
        }
    }

    fn error(&self, failure: Failure) -> FleetError {
        match failure {
            Failure::Status(s) => s.into(),
            Failure::Elapsed => {
                FleetError::Unavailable(format!("no answer within {:?}", self.timeout))
            }
        }
    }

    /// `q` as a request carrying the auth token (authenticating first when there is none).
    async fn request<Q>(&self, q: Q) -> Result<tonic::Request<Q>, FleetError> {
        let mut request = tonic::Request::new(q);
        if let Some(auth) = &self.auth {
            let token = self.token(auth).await?;
            request.metadata_mut().insert("token", token);
        }
        Ok(request)
    }

    async fn token(&self, auth: &Auth) -> Result<AsciiMetadataValue, FleetError> {
        let mut slot = auth.token.lock().await;
        if let Some(token) = &*slot {
            return Ok(token.clone());
        }
        let req = pb::AuthenticateRequest {
            name: auth.user.clone(),
            password: auth.password.clone(),
        };
        let answer = self
            .timed(AuthClient::new(self.channel.clone()).authenticate(req))
            .await;
        let token = match answer {
            Ok(r) => r.token,
            Err(Failure::Status(s)) if refuses_credentials(&s) => {
                return Err(FleetError::Credentials(format!(
                    "etcd refused user {:?}: {} ({})",
                    auth.user,
                    s.message(),
                    auth.source
                )))
            }
            Err(f) => return Err(self.error(f)),
        };
        let token = AsciiMetadataValue::try_from(token.as_str())
            .map_err(|_| FleetError::Etcd("etcd sent an auth token that is not ASCII".into()))?;
        *slot = Some(token.clone());
        Ok(token)
    }

    /// Forgets the auth token after etcd said it is no longer valid (it expires unused).
    async fn expired(&self, status: &tonic::Status) -> bool {
        let Some(auth) = &self.auth else { return false };
        if status.code() != tonic::Code::Unauthenticated {
            return false;
        }
        *auth.token.lock().await = None;
        true
    }

    /// One unary request with its timeout; with credentials, an expired token is renewed and
    /// the request sent once more. A request that found its endpoint unavailable (a member
    /// down: the balancer may pick it before it knows) goes to the others, up to twice per
    /// endpoint.
    async fn unary<Q, T, F, Fut>(&self, q: Q, call: F) -> Result<T, FleetError>
    where
        Q: Clone,
        F: Fn(Channel, tonic::Request<Q>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let mut renewed = false;
        let mut elsewhere = 0;
        loop {
            let request = self.request(q.clone()).await?;
            match self.timed(call(self.channel.clone(), request)).await {
                Err(Failure::Status(s)) if !renewed && self.expired(&s).await => renewed = true,
                Err(Failure::Status(s))
                    if s.code() == tonic::Code::Unavailable
                        && self.endpoints > 1
                        && elsewhere < 2 * self.endpoints =>
                {
                    elsewhere += 1;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                r => return r.map_err(|f| self.error(f)),
            }
        }
    }

    /// Opens a stream: like [`Etcd::unary`] but without the second try (callers retry).
    async fn open<Q, T, Fut>(
        &self,
        q: Q,
        call: impl FnOnce(Channel, tonic::Request<Q>) -> Fut,
    ) -> Result<T, FleetError>
    where
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let request = self.request(q).await?;
        match self.timed(call(self.channel.clone(), request)).await {
            Ok(r) => Ok(r),
            Err(Failure::Status(s)) => {
                self.expired(&s).await;
                Err(s.into())
            }
            Err(f) => Err(self.error(f)),
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
            .unary(req, |ch, r| async move { KvClient::new(ch).range(r).await })
            .await?;
        Ok((r.kvs, r.header.map_or(0, |h| h.revision)))
    }

    /// The value at `key`, if any.
    pub async fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, FleetError> {
        let req = pb::RangeRequest {
            key: key.to_vec(),
            ..Default::default()
        };
        let r = self
            .unary(req, |ch, r| async move { KvClient::new(ch).range(r).await })
            .await?;
        Ok(r.kvs.into_iter().next().map(|kv| kv.value))
    }

    /// Puts `value` at `key`, attached to `lease` (0: none).
    pub async fn put(&self, key: Vec<u8>, value: Vec<u8>, lease: i64) -> Result<(), FleetError> {
        let req = pb::PutRequest { key, value, lease };
        self.unary(req, |ch, r| async move { KvClient::new(ch).put(r).await })
            .await
            .map(drop)
    }

    /// Puts `value` at `key` under `lease` only if no key under `range` was created or changed
    /// after `revision` (deletions do not count), in one transaction; `Ok(false)` when one was.
    pub async fn put_if_unchanged(
        &self,
        range: &[u8],
        revision: i64,
        key: Vec<u8>,
        value: Vec<u8>,
        lease: i64,
    ) -> Result<bool, FleetError> {
        let unchanged = pb::Compare {
            result: pb::compare::CompareResult::Less as i32,
            target: pb::compare::CompareTarget::Mod as i32,
            key: range.to_vec(),
            range_end: prefix_end(range),
            target_union: Some(pb::compare::TargetUnion::ModRevision(revision + 1)),
        };
        let put = pb::RequestOp {
            request: Some(pb::request_op::Request::RequestPut(pb::PutRequest {
                key,
                value,
                lease,
            })),
        };
        let req = pb::TxnRequest {
            compare: vec![unchanged],
            success: vec![put],
            failure: Vec::new(),
        };
        let r = self
            .unary(req, |ch, r| async move { KvClient::new(ch).txn(r).await })
            .await?;
        Ok(r.succeeded)
    }

    /// Deletes `key`.
    pub async fn delete(&self, key: Vec<u8>) -> Result<(), FleetError> {
        let req = pb::DeleteRangeRequest {
            key,
            range_end: Vec::new(),
        };
        self.unary(req, |ch, r| async move {
            KvClient::new(ch).delete_range(r).await
        })
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
            .unary(req, |ch, r| async move {
                LeaseClient::new(ch).lease_grant(r).await
            })
            .await?;
        if !r.error.is_empty() {
            return Err(FleetError::Etcd(r.error));
        }
        Ok((r.id, r.ttl))
    }

    /// Ends lease `id` now; its keys are deleted.
    pub async fn revoke(&self, id: i64) -> Result<(), FleetError> {
        let req = pb::LeaseRevokeRequest { id };
        self.unary(req, |ch, r| async move {
            LeaseClient::new(ch).lease_revoke(r).await
        })
        .await
        .map(drop)
    }

    /// Seconds lease `id` has left and the TTL it was granted with (`None`: it has expired).
    pub async fn time_to_live(&self, id: i64) -> Result<Option<(i64, i64)>, FleetError> {
        let req = pb::LeaseTimeToLiveRequest { id, keys: false };
        let r = self
            .unary(req, |ch, r| async move {
                LeaseClient::new(ch).lease_time_to_live(r).await
            })
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
        let answers = self
            .open(ReceiverStream::new(rx), |ch, r| async move {
                LeaseClient::new(ch).lease_keep_alive(r).await
            })
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
        self.watch_range(prefix, &prefix_end(prefix), from).await
    }

    /// The events of keys in `[key, range_end)` from revision `from` on, as
    /// [`Etcd::watch_prefix`].
    pub async fn watch_range(
        &self,
        key: &[u8],
        range_end: &[u8],
        from: i64,
    ) -> Result<impl Stream<Item = Result<pb::WatchResponse, tonic::Status>>, FleetError> {
        let (tx, rx) = mpsc::channel(1);
        let create = pb::WatchRequest {
            request_union: Some(pb::watch_request::RequestUnion::CreateRequest(
                pb::WatchCreateRequest {
                    key: key.to_vec(),
                    range_end: range_end.to_vec(),
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
            .open(ReceiverStream::new(rx), |ch, r| async move {
                WatchClient::new(ch).watch(r).await
            })
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

/// Whether `status`, the answer to an Authenticate, refuses the credentials (wrong user or
/// password, or authentication off) rather than failing to reach etcd.
fn refuses_credentials(status: &tonic::Status) -> bool {
    matches!(
        status.code(),
        tonic::Code::InvalidArgument
            | tonic::Code::FailedPrecondition
            | tonic::Code::Unauthenticated
            | tonic::Code::PermissionDenied
    )
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
