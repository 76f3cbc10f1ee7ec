//! Function backends: the one trait the gateway calls, and one module per kind of backend.
//!
//! - [`local`]: the embedded runtime (tinyFaaS-format folders run as warm worker processes);
//! - [`tinyfaas`], [`openwhisk`], [`lambda`]: adapters speaking each platform's wire protocol;
//! - `package`: the zip archives and entry wrappers a [`RemoteDeploy`] sends to each platform;
//! - [`breaker`] and [`catalog`]: [`Guarded`] puts a circuit breaker and a cached function list
//!   in front of any backend; [`build_backend`] builds a guarded backend from the topology.
//!
//! Every failure is an [`InvokeError`] classified by whose fault it is and whether
//! a retry elsewhere may help, so the gateway fails over without string matching.

#![forbid(unsafe_code)]

pub mod breaker;
pub mod catalog;
mod error;
mod factory;
mod http_common;
pub mod http_event;
pub mod http_fn;
pub mod lambda;
pub mod local;
pub mod openwhisk;
mod package;
pub mod tinyfaas;
mod upstream;

pub use breaker::{BreakerSettings, BreakerState, CircuitBreaker, Guarded};
pub use error::{Fault, InvokeError};
pub use factory::{build_backend, BuildError};
pub use http_fn::{ByteStream, HttpRequest, Payload};
pub use local::{LocalError, LocalRuntime, PoolStats};

use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use std::sync::Arc;

use http::{HeaderMap, HeaderName, HeaderValue};

/// Whether a call may reuse a warm instance or must start a new one.
///
/// Chosen by the scheduler; backends that cannot control placement treat every
/// value as [`ContainerChoice::Any`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ContainerChoice {
    /// Reuse an idle warm instance when there is one, else start one.
    #[default]
    Any,
    /// Reuse a warm instance: an idle one, else wait for a busy one to finish (the local
    /// runtime; others start one when none is idle); start one only when there is none.
    Reuse,
    /// Start a new instance even if a warm one is idle.
    New,
}

/// Headers the platform adds to a call after the client's, in order: the serving node's
/// `X-Geo-*` context and the call's `X-Request-Id`. A list, not a [`HeaderMap`]: it is only
/// written out, and each insert into a map hashes the name (four inserts cost a proxied call
/// 900 instructions). Shared, not copied, by every backend a call tries.
pub type Context = Arc<[(HeaderName, HeaderValue)]>;

/// One function call as a backend sees it.
#[derive(Clone, Debug)]
pub struct Invocation {
    /// Function name as the topology lists it.
    pub function: String,
    /// The HTTP request the client made: method, the path after `/fn/{name}`, the query, the
    /// URL and the client's address. Shared by every backend a call tries.
    pub http: Arc<HttpRequest>,
    /// Raw request body passed to the function.
    pub body: Bytes,
    /// Request headers the function may read (hop-by-hop and auth headers already removed).
    pub headers: HeaderMap,
    /// What the platform adds, sent after `headers` ([`Invocation::sent_headers`]).
    pub context: Context,
    /// The call fails with [`InvokeError::Timeout`] if it has not completed by then.
    pub deadline: Instant,
    /// Warm-or-new decision from the scheduler.
    pub container: ContainerChoice,
    /// A stable hash of who calls (API key, client id or address): during a percentage
    /// rollout the same caller always gets the same version.
    pub caller: u64,
}

impl Invocation {
    /// A call with no headers, the default container choice and `timeout` from now.
    pub fn new(function: impl Into<String>, body: impl Into<Bytes>, timeout: Duration) -> Self {
        Self {
            function: function.into(),
            http: Arc::default(),
            body: body.into(),
            headers: HeaderMap::new(),
            context: Context::default(),
            deadline: Instant::now() + timeout,
            container: ContainerChoice::Any,
            caller: 0,
        }
    }

    /// The headers the function receives, in order: the call's that may travel
    /// ([`geofaas_config::headers::is_forwarded`]), then the platform's [`Context`].
    pub fn sent_headers(&self) -> impl Iterator<Item = (&HeaderName, &HeaderValue)> {
        let context = self.context.iter().map(|(name, value)| (name, value));
        http_common::forwardable(&self.headers).chain(context)
    }

    /// The call's `X-Request-Id`, from its context.
    pub fn request_id(&self) -> Option<&str> {
        let (_, id) = self
            .context
            .iter()
            .find(|(name, _)| name == geofaas_config::headers::REQUEST_ID)?;
        id.to_str().ok()
    }

    /// Time left until the deadline (zero once it has passed).
    pub fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }
}

/// What a successful call returns.
#[derive(Debug, Default)]
pub struct InvokeOutput {
    /// The function's status code (`200` for a function that answers only a body).
    pub status: http::StatusCode,
    /// The function's own response headers, checked ([`http_fn::answer_headers`]): valid HTTP,
    /// repeated ones kept apart, no hop-by-hop or platform header. `Content-Type` among them
    /// when the function or its backend named one.
    pub headers: HeaderMap,
    /// The function's body, whole or streamed as it is produced.
    pub body: Payload,
    /// Whether the call paid a cold start (a new instance was started for it).
    pub cold_start: bool,
    /// Time spent starting a new instance (zero when warm or unknown).
    pub cold: Duration,
    /// Time spent executing the function (including the backend's transport when it cannot be split).
    pub exec: Duration,
    /// The deployed version that ran (`X-Function-Version`), where the backend knows it.
    pub version: Option<std::sync::Arc<str>>,
    /// What the backend measured of the memory of the function's instances (the embedded
    /// runtime: the PSS of its workers), where it measures it.
    pub memory: Option<local::MemoryFigure>,
}

impl InvokeOutput {
    /// A `200` with `body`, and `content_type` when the backend named one.
    pub fn ok(body: Bytes, content_type: Option<HeaderValue>) -> Self {
        let mut headers = HeaderMap::new();
        if let Some(ct) = content_type {
            headers.insert(http::header::CONTENT_TYPE, ct);
        }
        Self {
            headers,
            body: Payload::Full(body),
            ..Self::default()
        }
    }
}

/// A function version to install on a remote platform (`geofaas deploy` at a node whose
/// backend has `deploy = true`).
#[derive(Clone, Debug)]
pub struct RemoteDeploy {
    /// Function name.
    pub name: String,
    /// geofaas version id (12 hex), for logs, descriptions and tags.
    pub version: String,
    /// The folder's runtime.
    pub runtime: local::Runtime,
    /// The unpacked, checked function folder (regular files only).
    pub dir: std::path::PathBuf,
    /// `--env` and `--secret` entries (values are never logged).
    pub env: Vec<(String, String)>,
}

/// Health of a backend as its probe sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Health {
    /// The backend answers and can take calls.
    Healthy,
    /// The backend does not answer or refuses calls; the string says why.
    Unhealthy(String),
}

/// A place functions run: the embedded runtime or a remote FaaS platform.
///
/// Implementations must be cheap to share (`Arc<dyn FunctionBackend>`), must honour
/// [`Invocation::deadline`], and must never panic on what a backend sends back.
#[async_trait]
pub trait FunctionBackend: Send + Sync + std::fmt::Debug {
    /// Short label for logs and metrics, e.g. `local` or `lambda`.
    fn kind(&self) -> &'static str;

    /// Runs one call.
    async fn invoke(&self, call: Invocation) -> Result<InvokeOutput, InvokeError>;

    /// Names of the functions this backend serves.
    async fn list(&self) -> Result<Vec<String>, InvokeError>;

    /// Whether this backend serves `function` (by its function list; [`Guarded`] answers from
    /// its cached list without copying it).
    async fn serves(&self, function: &str) -> bool {
        self.list()
            .await
            .is_ok_and(|l| l.iter().any(|f| f == function))
    }

    /// A cheap probe of whether the backend can take calls now.
    async fn health(&self) -> Health;

    /// Instances of `function` this backend holds now, for the scheduler; `None` (the default)
    /// where the backend cannot tell (remote platforms).
    fn stats(&self, function: &str) -> Option<PoolStats> {
        let _ = function;
        None
    }

    /// Whether its function list is in memory and exact at every moment (the embedded
    /// runtime's, which changes with each deploy): [`Guarded`] then asks it each time instead
    /// of caching the list.
    fn lists_live(&self) -> bool {
        false
    }

    /// Starts one idle instance of `function` ahead of a call (pre-warming), where the backend
    /// can without running the function; `None` (the default) where it cannot.
    async fn warm_one(&self, function: &str) -> Option<Result<local::WarmUp, LocalError>> {
        let _ = function;
        None
    }

    /// Its pre-warming figures, where it pre-warms.
    fn prewarm_stats(&self) -> Option<local::PrewarmStats> {
        None
    }

    /// What its functions printed, where it keeps that (the embedded runtime's rings).
    fn logs(&self) -> Option<&Arc<local::FunctionLogs>> {
        None
    }

    /// The embedded runtime behind this backend, where it is one: what a deploy installs a
    /// version into and a restart restores (nothing on the call path asks for it).
    fn local(&self) -> Option<&LocalRuntime> {
        None
    }

    /// Whether `geofaas deploy` installs functions on this backend too (`deploy = true`).
    fn deploys(&self) -> bool {
        false
    }

    /// Installs `fun` through the platform's own API, replacing a function of that name.
    async fn deploy(&self, fun: &RemoteDeploy) -> Result<(), InvokeError> {
        let _ = fun;
        Err(InvokeError::Unavailable(format!(
            "the {} backend does not take deploys",
            self.kind()
        )))
    }
}
