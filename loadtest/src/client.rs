//! [`GeoClient`]: the paper's GeoFaaS client over HTTPS.
//!
//! Each call carries its location (`X-Client-Location`, or `Sec-CH-Geohash` when
//! [`ClientConfig::location_header`] says so), goes to the cached node, follows a `307` handover
//! (and caches the new node), and after a timeout or a connection failure is retried once at the
//! cloud with `X-GeoFaaS-Retry: 1` (see [`crate::route`] for the rules). Every call returns a
//! [`CallReport`]: who served it, whether it was offloaded, how many attempts and redirects it
//! took, its status and latency, and how many connections the client opened meanwhile. An
//! answer's `Link: <origin>; rel=preconnect` hint (a node that foresees the client's handover
//! names the next node) makes the client open a connection there in the background, as a
//! mobile app would ([`crate::preconnect`]).

use parking_lot::Mutex;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use geofaas_config::{Geohash, LatLon, Role, Topology};
use reqwest::header::{HeaderMap, HeaderValue, LOCATION};
use reqwest::{Method, StatusCode, Version};
use url::Url;

use crate::headers;
use crate::preconnect::{self, Connections, Preconnects};
use crate::route::{origin, Failure, RouteCache, Target};

/// Most `307`s one call follows before it gives up (edge to cloud and back is two).
const MAX_REDIRECTS: u32 = 4;

/// Which HTTP version the client speaks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HttpVersion {
    /// HTTP/2, negotiated with ALPN (falls back to HTTP/1.1 if a server offers only that).
    #[default]
    Http2,
    /// HTTP/1.1 only.
    Http1,
}

/// How a [`GeoClient`] tells the platform where it is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LocationHeader {
    /// `X-Client-Location: <lat>,<lon>` (the default).
    #[default]
    ClientLocation,
    /// `Sec-CH-Geohash: "<geohash>"` with this many characters (1-12; a shorter geohash tells
    /// less, and one whose cell spans several areas is served where it lands).
    Geohash(usize),
}

/// How a [`GeoClient`] reaches the platform.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// First node to call (any node: a wrong one answers with a handover).
    pub entry: Url,
    /// The cloud node, where failed calls are retried.
    pub cloud: Url,
    /// PEM CA to trust besides the system roots (the platform's own CA).
    pub ca_pem: Option<Vec<u8>>,
    /// HTTP/2 (default) or HTTP/1.1.
    pub http: HttpVersion,
    /// Deadline of one attempt, connection set-up to the end of the body. Default 1 s.
    pub timeout: Duration,
    /// Retry once at the cloud after a timeout or a connection failure. Default true.
    pub retry: bool,
    /// After a node failed, go straight to the cloud for this long. Default 5 s.
    pub fallback_ttl: Duration,
    /// The header that carries a call's location. Default `X-Client-Location`.
    pub location_header: LocationHeader,
    /// Sent as `X-Client-Id` with every call, so nodes can track the client and warm a
    /// function where it is heading. Default none (not tracked).
    pub client_id: Option<String>,
    /// Open a connection ahead to an origin an answer names in `Link: <...>; rel=preconnect`.
    /// Default true.
    pub preconnect: bool,
}

impl ClientConfig {
    /// A client that enters at `entry` and retries at `cloud`, with the defaults.
    pub fn new(entry: Url, cloud: Url) -> Self {
        Self {
            entry,
            cloud,
            ca_pem: None,
            http: HttpVersion::Http2,
            timeout: Duration::from_secs(1),
            retry: true,
            fallback_ttl: Duration::from_secs(5),
            location_header: LocationHeader::ClientLocation,
            client_id: None,
            preconnect: true,
        }
    }

    /// A client of `topology` entering at the node responsible for `location`.
    pub fn for_topology(topology: &Topology, location: LatLon) -> anyhow::Result<Self> {
        let map = topology.service_map()?;
        let cloud = topology
            .nodes
            .iter()
            .find(|n| n.role == Role::Cloud)
            .context("the topology has no cloud node")?;
        Ok(Self::new(
            map.responsible(location).public_url.clone(),
            cloud.public_url.clone(),
        ))
    }
}

/// One function call.
#[derive(Clone, Debug, Default)]
pub struct CallRequest {
    /// Function name (`/fn/{function}`).
    pub function: String,
    /// Where the client is; sent as [`ClientConfig::location_header`] says.
    pub location: Option<LatLon>,
    /// Raw request body (the function's input). Empty by default.
    pub body: bytes::Bytes,
    /// Sent as `Idempotency-Key`, on the first attempt and the retry alike.
    pub idempotency_key: Option<String>,
}

/// What happened to one call.
#[derive(Clone, Debug)]
pub struct CallReport {
    /// `X-Served-By` of the final answer.
    pub served_by: Option<String>,
    /// `X-Offloaded-From` of the final answer: the edge that passed the call to the cloud.
    pub offloaded_from: Option<String>,
    /// Requests sent, not counting redirects followed: 1, or 2 when retried at the cloud.
    pub attempts: u32,
    /// `307` handovers followed.
    pub redirects: u32,
    /// HTTP status of the final answer; `None` when no attempt got one.
    pub status: Option<StatusCode>,
    /// From the call's start (its intended start in open-loop runs) to the end of the answer.
    pub latency: Duration,
    /// HTTP version of the final answer.
    pub version: Option<Version>,
    /// `Server-Timing` of the final answer.
    pub server_timing: Option<String>,
    /// `X-Cold-Start` of the final answer: whether the node started an instance for it.
    pub cold_start: Option<bool>,
    /// The answer's body (the function's output).
    pub body: bytes::Bytes,
    /// Why the call failed, when it got no answer.
    pub error: Option<String>,
    /// From the call's start to the last `307` it followed (zero without one): the handover's
    /// detour through the old node.
    pub redirect_time: Duration,
    /// Connections the client opened while the call was in flight (the call's own, unless a
    /// preconnect of this client ran at the same time).
    pub new_connections: u64,
    /// The origins the answer named with `Link: <...>; rel=preconnect`.
    pub preconnect_hints: Vec<Url>,
}

impl CallReport {
    /// Whether the call got a 2xx answer.
    pub fn is_success(&self) -> bool {
        self.status.is_some_and(|s| s.is_success())
    }

    /// Whether the call was retried at the cloud.
    pub fn retried(&self) -> bool {
        self.attempts > 1
    }
}

/// A GeoFaaS client: one connection pool, one handover cache.
///
/// Share it between tasks (`Arc<GeoClient>`) for one moving client with calls in flight at once;
/// make one per simulated device otherwise.
#[derive(Debug)]
pub struct GeoClient {
    http: reqwest::Client,
    route: Mutex<RouteCache>,
    timeout: Duration,
    location_header: LocationHeader,
    client_id: Option<HeaderValue>,
    preconnect: bool,
    connections: Connections,
    preconnects: Arc<Preconnects>,
}

enum Step {
    Answer(Box<CallReport>),
    Redirect(Url),
    Failed(Failure, String),
}

impl GeoClient {
    /// Builds the client (TLS roots, HTTP version) from `cfg`.
    pub fn new(cfg: &ClientConfig) -> anyhow::Result<Self> {
        let connections = Connections::default();
        let mut b = reqwest::Client::builder()
            .use_rustls_tls()
            .connector_layer(connections.clone())
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(cfg.timeout)
            .pool_idle_timeout(Duration::from_secs(90));
        if let Some(pem) = &cfg.ca_pem {
            b = b.add_root_certificate(
                reqwest::Certificate::from_pem(pem).context("the CA is not a PEM certificate")?,
            );
        }
        if cfg.http == HttpVersion::Http1 {
            b = b.http1_only();
        }
        Ok(Self {
            http: b.build().context("building the HTTPS client")?,
            route: Mutex::new(RouteCache::new(
                &cfg.entry,
                &cfg.cloud,
                cfg.retry,
                cfg.fallback_ttl,
            )),
            timeout: cfg.timeout,
            location_header: cfg.location_header,
            client_id: cfg
                .client_id
                .as_deref()
                .map(HeaderValue::from_str)
                .transpose()
                .context("the client id is not a valid header value")?,
            preconnect: cfg.preconnect,
            connections,
            preconnects: Arc::default(),
        })
    }

    /// Connections this client opened so far (calls and preconnects).
    pub fn connections_opened(&self) -> u64 {
        self.connections.opened()
    }

    /// Preconnects this client started so far.
    pub fn preconnects_started(&self) -> u64 {
        self.preconnects.started()
    }

    /// Preconnects of this client that finished so far (answered or failed).
    pub fn preconnects_finished(&self) -> u64 {
        self.preconnects.finished()
    }

    /// The node the next call goes to (the handover cache).
    pub fn cached_node(&self) -> Url {
        self.route().current().clone()
    }

    /// Calls a function now.
    pub async fn call(&self, req: &CallRequest) -> CallReport {
        self.call_from(req, Instant::now()).await
    }

    /// Calls a function, counting latency from `start` (an open-loop schedule's intended send
    /// time, so a late send is not hidden: no coordinated omission).
    pub async fn call_from(&self, req: &CallRequest, start: Instant) -> CallReport {
        let mut target = self.route().first_target(Instant::now());
        let (mut attempts, mut redirects) = (1u32, 0u32);
        let (opened, mut redirect_time) = (self.connections.opened(), Duration::ZERO);
        loop {
            let step = self.attempt(req, &target).await;
            match step {
                Step::Answer(mut report) => {
                    self.route().on_answer(&target);
                    report.attempts = attempts;
                    report.redirects = redirects;
                    report.latency = start.elapsed();
                    report.redirect_time = redirect_time;
                    report.new_connections = self.connections.opened() - opened;
                    self.preconnect(&report.preconnect_hints);
                    return *report;
                }
                Step::Redirect(location) if redirects < MAX_REDIRECTS => {
                    redirects += 1;
                    redirect_time = start.elapsed();
                    let node = self.route().on_redirect(&location);
                    // The node a handover names is responsible: no retry header there.
                    target = Target {
                        node,
                        retry_header: false,
                    };
                }
                Step::Redirect(location) => {
                    return failed(
                        attempts,
                        redirects,
                        start,
                        format!("more than {MAX_REDIRECTS} redirects (last to {location})"),
                    );
                }
                Step::Failed(kind, why) => {
                    let retry = self
                        .route()
                        .on_failure(&target, attempts, kind, Instant::now());
                    match retry {
                        Some(next) => {
                            tracing::debug!(node = %target.node, error = %why, "retrying at the cloud");
                            attempts += 1;
                            target = next;
                        }
                        None => return failed(attempts, redirects, start, why),
                    }
                }
            }
        }
    }

    /// Opens a connection in the background to each hinted origin other than the cached
    /// node's, at most once per origin every [`preconnect::AGAIN`].
    fn preconnect(&self, hints: &[Url]) {
        if !self.preconnect || hints.is_empty() {
            return;
        }
        let (current, now) = (self.cached_node(), Instant::now());
        for origin in hints {
            if *origin != current && self.preconnects.claim(origin, now) {
                let (http, origin) = (self.http.clone(), origin.clone());
                let done = self.preconnects.clone();
                tokio::spawn(preconnect::open(http, origin, self.timeout, done));
            }
        }
    }

    fn route(&self) -> parking_lot::MutexGuard<'_, RouteCache> {
        // The cache holds plain data; a panic elsewhere cannot leave it half-updated.
        self.route.lock()
    }

    async fn attempt(&self, req: &CallRequest, target: &Target) -> Step {
        let url = match target.node.join(&format!("fn/{}", req.function)) {
            Ok(u) => u,
            Err(e) => return Step::Failed(Failure::Client, format!("bad function name: {e}")),
        };
        let mut headers = HeaderMap::new();
        if let Some(loc) = req.location {
            if let Some((name, value)) = location_header(self.location_header, loc) {
                headers.insert(name, value);
            }
        }
        if let Some(id) = &self.client_id {
            headers.insert(headers::CLIENT_ID, id.clone());
        }
        if target.retry_header {
            headers.insert(headers::RETRY, HeaderValue::from_static("1"));
        }
        if let Some(key) = &req.idempotency_key {
            match HeaderValue::from_str(key) {
                Ok(v) => {
                    headers.insert(headers::IDEMPOTENCY_KEY, v);
                }
                Err(_) => return Step::Failed(Failure::Client, "bad Idempotency-Key".into()),
            }
        }
        let mut builder = self
            .http
            .request(Method::POST, url.clone())
            .headers(headers)
            .timeout(self.timeout);
        if !req.body.is_empty() {
            builder = builder.body(req.body.clone());
        }
        let resp = match builder.send().await {
            Ok(r) => r,
            Err(e) => return Step::Failed(classify(&e), error_chain(&e)),
        };
        if resp.status() == StatusCode::TEMPORARY_REDIRECT {
            let location = resp
                .headers()
                .get(LOCATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| url.join(v).ok());
            return match location {
                Some(l) => Step::Redirect(l),
                None => Step::Failed(Failure::Client, "307 without a valid Location".into()),
            };
        }
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let served_by = header(headers::SERVED_BY);
        let offloaded_from = header(headers::OFFLOADED_FROM);
        let server_timing = header(headers::SERVER_TIMING);
        let cold_start = header(headers::COLD_START).map(|v| v == "true");
        let preconnect_hints = preconnect::hinted_origins(resp.headers(), &url);
        let (status, version) = (resp.status(), resp.version());
        match resp.bytes().await {
            Ok(body) => Step::Answer(Box::new(CallReport {
                served_by,
                offloaded_from,
                attempts: 0,
                redirects: 0,
                status: Some(status),
                latency: Duration::ZERO,
                version: Some(version),
                server_timing,
                cold_start,
                body,
                error: None,
                redirect_time: Duration::ZERO,
                new_connections: 0,
                preconnect_hints,
            })),
            Err(e) => Step::Failed(classify(&e), error_chain(&e)),
        }
    }
}

fn failed(attempts: u32, redirects: u32, start: Instant, error: String) -> CallReport {
    CallReport {
        served_by: None,
        offloaded_from: None,
        attempts,
        redirects,
        status: None,
        latency: start.elapsed(),
        version: None,
        server_timing: None,
        cold_start: None,
        body: bytes::Bytes::new(),
        error: Some(error),
        redirect_time: Duration::ZERO,
        new_connections: 0,
        preconnect_hints: Vec::new(),
    }
}

/// Sorts a reqwest error into the retry rules' classes.
fn classify(e: &reqwest::Error) -> Failure {
    if e.is_timeout() {
        Failure::Timeout
    } else if e.is_connect() {
        Failure::Connect
    } else if e.is_builder() || e.is_redirect() {
        Failure::Client
    } else {
        // Request or body errors: the connection broke mid-call (e.g. the node was killed).
        Failure::Transport
    }
}

fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
}

/// The header that tells the platform the client is at `loc`, as `how` says (`None` for a
/// point no geohash can name).
pub fn location_header(how: LocationHeader, loc: LatLon) -> Option<(&'static str, HeaderValue)> {
    let (name, text) = match how {
        LocationHeader::ClientLocation => (headers::CLIENT_LOCATION, loc.to_string()),
        LocationHeader::Geohash(len) => {
            (headers::GEOHASH, Geohash::encode(loc, len)?.header_value())
        }
    };
    Some((name, HeaderValue::from_str(&text).ok()?))
}

/// The origin of a node's public URL, for comparing with [`GeoClient::cached_node`].
pub fn node_origin(url: &Url) -> Url {
    origin(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_location_goes_as_the_configured_header() {
        let p = LatLon::new(52.52, 13.405).unwrap();
        let (name, value) = location_header(LocationHeader::ClientLocation, p).unwrap();
        assert_eq!(
            (name, value.to_str().unwrap()),
            ("x-client-location", "52.52,13.405")
        );
        let (name, value) = location_header(LocationHeader::Geohash(5), p).unwrap();
        assert_eq!(
            (name, value.to_str().unwrap()),
            ("sec-ch-geohash", "\"u33dc\"")
        );
        let cell = Geohash::from_header(value.as_bytes()).unwrap();
        assert!(cell.contains(p));
    }
}
