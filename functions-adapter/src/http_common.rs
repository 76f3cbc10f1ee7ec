//! Plumbing shared by the HTTP backends (tinyFaaS, OpenWhisk, Lambda): one pooled client per
//! backend, the per-call time budget, reading a bounded body, and classifying transport errors.

use std::time::{Duration, SystemTime};

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderName, StatusCode};

use crate::{Invocation, InvokeError};

/// Largest reply body the remote adapters accept (Lambda's own synchronous limit is 6 MiB).
pub(crate) const MAX_REPLY_BYTES: usize = 32 * 1024 * 1024;

/// Budget of a health probe or list request.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// A reply read in full.
#[derive(Debug)]
pub(crate) struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// One pooled HTTP client per backend, so calls reuse connections.
pub(crate) fn client() -> Result<reqwest::Client, reqwest::Error> {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(3))
        .pool_idle_timeout(Duration::from_secs(60))
        .tcp_nodelay(true)
        .build()
}

/// `url` with a trailing slash, so joining a relative path appends to it.
pub(crate) fn base(url: &reqwest::Url) -> reqwest::Url {
    let mut url = url.clone();
    if !url.path().ends_with('/') {
        let path = format!("{}/", url.path());
        url.set_path(&path);
    }
    url
}

/// Time this call may take: the caller's deadline, capped by the backend's own timeout.
pub(crate) fn budget(call: &Invocation, backend_timeout: Duration) -> Duration {
    call.remaining().min(backend_timeout)
}

/// Sends `request` and reads the whole reply, all within `budget`.
pub(crate) async fn send(
    request: reqwest::RequestBuilder,
    budget: Duration,
) -> Result<Reply, InvokeError> {
    if budget.is_zero() {
        return Err(InvokeError::Timeout(budget));
    }
    let exchange = async {
        let mut response = request.send().await.map_err(transport_error)?;
        let status = response.status();
        let headers = std::mem::take(response.headers_mut());
        let mut body = BytesMut::new();
        while let Some(chunk) = response.chunk().await.map_err(transport_error)? {
            if body.len() + chunk.len() > MAX_REPLY_BYTES {
                return Err(InvokeError::OutputTooLarge {
                    limit: MAX_REPLY_BYTES,
                });
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Reply {
            status,
            headers,
            body: body.freeze(),
        })
    };
    tokio::time::timeout(budget, exchange)
        .await
        .map_err(|_| InvokeError::Timeout(budget))?
}

/// Classifies a reqwest failure: timeouts and connection failures are the network's fault.
pub(crate) fn transport_error(err: reqwest::Error) -> InvokeError {
    if err.is_connect() {
        InvokeError::Unavailable(format!("cannot connect: {}", root_cause(&err)))
    } else if err.is_builder() {
        InvokeError::Protocol(format!("bad request: {err}"))
    } else {
        InvokeError::Network(root_cause(&err))
    }
}

pub(crate) fn root_cause(err: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = err;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

/// `Retry-After` as seconds or an HTTP date, if present and sensible.
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers
        .get(http::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(
        at.duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

/// The call's headers that may travel to a function.
pub(crate) fn forwardable(
    headers: &HeaderMap,
) -> impl Iterator<Item = (&HeaderName, &http::HeaderValue)> {
    headers
        .iter()
        .filter(|(name, _)| geofaas_config::headers::is_forwarded(name.as_str()))
}

/// The reply's content type, if it sent one that is valid text (shared with the reply's
/// buffer, not copied).
pub(crate) fn content_type(headers: &HeaderMap) -> Option<http::HeaderValue> {
    headers
        .get(http::header::CONTENT_TYPE)
        .filter(|v| v.to_str().is_ok())
        .cloned()
}

/// A short, printable excerpt of a reply body for error messages.
pub(crate) fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(200)]);
    text.trim().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_seconds_and_ignores_garbage() {
        let mut headers = HeaderMap::new();
        headers.insert(http::header::RETRY_AFTER, "7".parse().unwrap());
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(7)));
        headers.insert(http::header::RETRY_AFTER, "soon".parse().unwrap());
        assert_eq!(retry_after(&headers), None);
        headers.insert(
            http::header::RETRY_AFTER,
            "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap(),
        );
        assert_eq!(retry_after(&headers), Some(Duration::ZERO));
    }

    #[test]
    fn hop_by_hop_and_auth_headers_stay_behind() {
        let mut headers = HeaderMap::new();
        headers.insert("connection", "close".parse().unwrap());
        headers.insert("authorization", "secret".parse().unwrap());
        headers.insert("x-client-location", "52.5,13.4".parse().unwrap());
        let kept: Vec<_> = forwardable(&headers).map(|(n, _)| n.as_str()).collect();
        assert_eq!(kept, ["x-client-location"]);
    }
}
