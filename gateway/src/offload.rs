//! Offload to the cloud or to a neighbouring edge: an authenticated node-to-node HTTPS call
//! whose answer the edge passes through to its client, marked `X-Offloaded-From`. The node it
//! lands on serves it there (a signed call is never forwarded again).

use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, Method, Response};
use bytes::Bytes;
use geofaas_config::NodeEntry;
use std::time::Duration;
use url::Url;

use geofaas_config::headers::{self, OFFLOADED_FROM};
use geofaas_functions::InvokeError;

use crate::auth::OffloadKey;

/// Response headers of the other node that stay behind: the framing of that connection and its
/// request id (the edge puts the call's own on the answer). Every other header, the function's
/// and the platform's, reaches the client.
const KEPT_BACK: [&str; 8] = [
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "content-length",
    headers::REQUEST_ID,
];

/// Answers up to this size (by their `Content-Length`) are read whole before they are passed
/// on, so an answer cut off on the way is a clear error; longer ones, and streamed ones, are
/// passed on as they arrive.
const READ_WHOLE: u64 = 64 * 1024;

/// Longest a new connection to another node (TCP and TLS) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The link from an edge to the other nodes: a connection-reusing HTTPS client that signs what
/// it sends, to the cloud gateway and, for the scheduler, to the neighbouring edges.
#[derive(Debug, Clone)]
pub struct NodeLink {
    cloud_id: String,
    base: Url,
    me: String,
    key: OffloadKey,
    client: reqwest::Client,
}

impl NodeLink {
    /// A link from node `me` to `cloud`, trusting `ca_pem` besides the system roots.
    pub fn new(
        cloud: &NodeEntry,
        me: &str,
        key: OffloadKey,
        ca_pem: Option<&[u8]>,
    ) -> anyhow::Result<Self> {
        let mut builder = reqwest::Client::builder()
            .pool_idle_timeout(Duration::from_secs(90))
            // A link that swallows packets fails the call in this long (nothing was sent, so
            // it is a clear 503), not at the call's deadline.
            .connect_timeout(CONNECT_TIMEOUT)
            // An open HTTP/2 connection whose pings go unanswered is given up in seconds (the
            // calls on it fail as "may have run"), so calls after it meet the connect timeout
            // instead of each waiting for its deadline on a dead connection.
            .http2_keep_alive_interval(Duration::from_secs(1))
            .http2_keep_alive_timeout(Duration::from_secs(2))
            .http2_keep_alive_while_idle(true)
            .redirect(reqwest::redirect::Policy::none());
        if let Some(pem) = ca_pem {
            builder = builder.add_root_certificate(reqwest::Certificate::from_pem(pem)?);
        }
        Ok(Self {
            cloud_id: cloud.id.clone(),
            base: cloud.public_url.clone(),
            me: me.to_owned(),
            key,
            client: builder.build()?,
        })
    }

    /// The cloud node's id.
    pub fn cloud_id(&self) -> &str {
        &self.cloud_id
    }

    /// The functions the cloud serves itself (`served_here` of its `GET /functions`).
    pub async fn functions(&self) -> Result<Vec<String>, InvokeError> {
        #[derive(serde::Deserialize)]
        struct Functions {
            served_here: Vec<String>,
        }
        let url = self
            .base
            .join("/functions")
            .map_err(|e| InvokeError::Protocol(e.to_string()))?;
        let resp = self
            .client
            .get(url)
            .timeout(Duration::from_secs(3))
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(|e| InvokeError::Unavailable(e.to_string()))?;
        let list: Functions = resp
            .json()
            .await
            .map_err(|e| InvokeError::Protocol(format!("the cloud's /functions: {e}")))?;
        Ok(list.served_here)
    }

    /// The HTTPS client (it trusts the platform CA), for other node-to-node requests.
    pub fn client(&self) -> &reqwest::Client {
        &self.client
    }

    /// The cloud gateway's URL.
    pub fn base(&self) -> &Url {
        &self.base
    }

    /// Sends the call, signed, to the gateway at `base` (the cloud or a neighbouring edge) and
    /// returns its answer with `X-Offloaded-From: <me>`. A failure is classed like a backend's
    /// ([`InvokeError::may_have_run`]): `Unavailable` when the call never left this node (no
    /// connection), `Timeout`, or `Network` when it may have reached the other node.
    pub async fn forward_to(
        &self,
        base: &Url,
        method: &Method,
        path_and_query: &str,
        headers: impl Iterator<Item = (&HeaderName, &HeaderValue)>,
        body: Bytes,
        timeout: Duration,
    ) -> Result<Response<Body>, InvokeError> {
        let url = base
            .join(path_and_query)
            .map_err(|e| InvokeError::Refused(format!("request path {path_and_query:?}: {e}")))?;
        let path = url.path().to_owned();
        let mut req = self
            .client
            .request(method.clone(), url)
            .timeout(timeout)
            .header(
                headers::OFFLOAD,
                self.key.sign(&self.me, method.as_str(), &path),
            )
            .body(body);
        for (name, value) in headers {
            req = req.header(name, value);
        }
        let sent = std::time::Instant::now();
        let resp = req.send().await.map_err(|e| {
            tracing::warn!(path = %path, to = %base, error = %e, "forwarding a call failed");
            // A connection that never came up (refused, or past the connect timeout) sent
            // nothing: that is not the call timing out.
            if e.is_connect() {
                InvokeError::Unavailable(format!("{base}: {e}"))
            } else if e.is_timeout() && sent.elapsed() + Duration::from_millis(100) >= timeout {
                InvokeError::Timeout(timeout)
            } else {
                // Broken, or given up early (its HTTP/2 pings went unanswered): the call was
                // sent and may have run.
                InvokeError::Network(format!("{base}: {e}"))
            }
        })?;
        let mut out = Response::new(Body::empty());
        *out.status_mut() = resp.status();
        let h = out.headers_mut();
        for (name, value) in resp.headers() {
            if !KEPT_BACK.contains(&name.as_str()) {
                h.append(name.clone(), value.clone());
            }
        }
        h.insert(
            HeaderName::from_static(OFFLOADED_FROM),
            HeaderValue::from_str(&self.me).unwrap_or(HeaderValue::from_static("edge")),
        );
        *out.body_mut() = if resp.content_length().is_some_and(|n| n <= READ_WHOLE) {
            let body = resp.bytes().await.map_err(|e| {
                InvokeError::Network(format!("{base}: the answer was cut off: {e}"))
            })?;
            Body::from(body)
        } else {
            Body::from_stream(resp.bytes_stream())
        };
        Ok(out)
    }
}
