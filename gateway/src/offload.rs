//! Offload to the cloud: an authenticated node-to-node HTTPS call whose answer the edge
//! passes through to its client, marked `X-Offloaded-From`.

use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, Response, StatusCode};
use bytes::Bytes;
use geofaas_config::NodeEntry;
use std::time::Duration;
use url::Url;

use crate::auth::{OffloadKey, OFFLOAD_HEADER};
use crate::error::ApiError;

/// Header naming the edge that offloaded a call.
pub const OFFLOADED_FROM: &str = "x-offloaded-from";

/// Response headers of the cloud that reach the client.
const PASSED_BACK: [&str; 4] = [
    "content-type",
    "x-served-by",
    "x-cold-start",
    "server-timing",
];

/// A connection-reusing HTTPS client to the cloud gateway.
#[derive(Debug, Clone)]
pub struct CloudLink {
    base: Url,
    me: String,
    key: OffloadKey,
    client: reqwest::Client,
}

impl CloudLink {
    /// A link from node `me` to `cloud`, trusting `ca_pem` besides the system roots.
    pub fn new(
        cloud: &NodeEntry,
        me: &str,
        key: OffloadKey,
        ca_pem: Option<&[u8]>,
    ) -> anyhow::Result<Self> {
        let mut builder = reqwest::Client::builder()
            .pool_idle_timeout(Duration::from_secs(90))
            .redirect(reqwest::redirect::Policy::none());
        if let Some(pem) = ca_pem {
            builder = builder.add_root_certificate(reqwest::Certificate::from_pem(pem)?);
        }
        Ok(Self {
            base: cloud.public_url.clone(),
            me: me.to_owned(),
            key,
            client: builder.build()?,
        })
    }

    /// Sends the call to the cloud and returns its answer with `X-Offloaded-From: <me>`.
    pub async fn forward(
        &self,
        method: &Method,
        path_and_query: &str,
        headers: &HeaderMap,
        body: Bytes,
        timeout: Duration,
    ) -> Result<Response<Body>, ApiError> {
        let url = self.base.join(path_and_query).map_err(|_| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_path",
                "request path is not a valid URL path",
            )
        })?;
        let path = url.path().to_owned();
        let mut req = self
            .client
            .request(method.clone(), url)
            .timeout(timeout)
            .header(
                OFFLOAD_HEADER,
                self.key.sign(&self.me, method.as_str(), &path),
            )
            .body(body);
        for (name, value) in headers {
            req = req.header(name, value);
        }
        let resp = req.send().await.map_err(|e| {
            tracing::warn!(error = %e, "offload to the cloud failed");
            let (status, code) = if e.is_timeout() {
                (StatusCode::GATEWAY_TIMEOUT, "timeout")
            } else {
                (StatusCode::BAD_GATEWAY, "offload_failed")
            };
            ApiError::new(
                status,
                code,
                "the edge failed and the cloud could not be reached",
            )
        })?;
        let status = resp.status();
        let mut out = Response::builder().status(status);
        for name in PASSED_BACK {
            if let Some(v) = resp.headers().get(name) {
                out = out.header(name, v);
            }
        }
        let body = resp.bytes().await.map_err(|_| {
            ApiError::new(
                StatusCode::BAD_GATEWAY,
                "offload_failed",
                "the cloud's answer was cut off",
            )
        })?;
        out = out.header(
            HeaderName::from_static(OFFLOADED_FROM),
            HeaderValue::from_str(&self.me).unwrap_or(HeaderValue::from_static("edge")),
        );
        out.body(Body::from(body)).map_err(|_| {
            ApiError::new(
                StatusCode::BAD_GATEWAY,
                "offload_failed",
                "the cloud's answer was malformed",
            )
        })
    }
}
