//! The HTTP function contract every backend maps its own convention onto (docs/functions.md):
//! a request ([`HttpRequest`] with the [`crate::Invocation`]'s headers and body) goes in; a
//! status, headers and a body, whole or streamed ([`Payload`]), come out.
//!
//! What a function answers is checked here, once for every backend: a status outside
//! 200-599, or a header name or value that is not valid HTTP (a CR or LF in it), is the
//! function's failure ([`InvokeError::BadAnswer`]: the gateway answers `502` and nothing of it
//! reaches the client); hop-by-hop headers and the platform's own are dropped, since the
//! gateway owns the framing ([`answer_headers`]). A streamed body is cut at the output limit
//! ([`limited`]).

use std::net::IpAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::Stream;
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};

use crate::InvokeError;

/// The HTTP side of a call, as the client made it.
#[derive(Clone, Debug)]
pub struct HttpRequest {
    /// The client's method.
    pub method: Method,
    /// The path after `/fn/{name}`, as sent (percent-encoded); `/` when there is none.
    pub path: String,
    /// The query string without its `?`, as sent; empty when there is none.
    pub query: String,
    /// The full URL the client called (`https://host/fn/name/path?query`): a fetch-style
    /// function's `request.url`.
    pub url: String,
    /// The client's address, where the node knows it (a call another node forwarded carries
    /// the address that node saw).
    pub source_ip: Option<IpAddr>,
}

impl Default for HttpRequest {
    fn default() -> Self {
        Self {
            method: Method::POST,
            path: "/".to_owned(),
            query: String::new(),
            url: String::new(),
            source_ip: None,
        }
    }
}

impl HttpRequest {
    /// The sub-path and query as one relative reference (`/users/7?a=1`), what a raw backend
    /// appends to the function's own URL.
    pub fn path_and_query(&self) -> String {
        if self.query.is_empty() {
            self.path.clone()
        } else {
            format!("{}?{}", self.path, self.query)
        }
    }
}

/// A body as the function produces it, chunk by chunk; an error ends it (the client sees the
/// stream cut, the gateway logs why).
pub type ByteStream = Pin<Box<dyn Stream<Item = Result<Bytes, InvokeError>> + Send>>;

/// A function's body.
pub enum Payload {
    /// All of it, at once.
    Full(Bytes),
    /// As it is produced: sent on at once, never buffered (chunked over HTTP/1.1, DATA frames
    /// over h2). Dropping it stops the function's stream.
    Stream(ByteStream),
}

impl Default for Payload {
    fn default() -> Self {
        Self::Full(Bytes::new())
    }
}

impl std::fmt::Debug for Payload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Full(b) => f.debug_tuple("Full").field(&b.len()).finish(),
            Self::Stream(_) => f.write_str("Stream"),
        }
    }
}

impl From<Bytes> for Payload {
    fn from(b: Bytes) -> Self {
        Self::Full(b)
    }
}

impl From<&'static str> for Payload {
    fn from(s: &'static str) -> Self {
        Self::Full(Bytes::from_static(s.as_bytes()))
    }
}

impl Payload {
    /// The whole body, if it is not a stream.
    pub fn full(&self) -> Option<&Bytes> {
        match self {
            Self::Full(b) => Some(b),
            Self::Stream(_) => None,
        }
    }

    /// The whole body, reading a stream to its end, at most `limit` bytes (what idempotent
    /// replays and async answers keep).
    pub async fn collect(self, limit: usize) -> Result<Bytes, InvokeError> {
        use futures::StreamExt as _;
        match self {
            Self::Full(b) if b.len() > limit => Err(InvokeError::OutputTooLarge { limit }),
            Self::Full(b) => Ok(b),
            Self::Stream(mut s) => {
                let mut out = bytes::BytesMut::new();
                while let Some(chunk) = s.next().await {
                    let chunk = chunk?;
                    if out.len() + chunk.len() > limit {
                        return Err(InvokeError::OutputTooLarge { limit });
                    }
                    out.extend_from_slice(&chunk);
                }
                Ok(out.freeze())
            }
        }
    }
}

/// `stream` cut with [`InvokeError::OutputTooLarge`] once it has produced more than `limit`
/// bytes: the limit of a buffered body holds for a streamed one.
pub fn limited(stream: ByteStream, limit: usize) -> ByteStream {
    Box::pin(Limited {
        inner: Some(stream),
        left: limit,
        limit,
    })
}

struct Limited {
    inner: Option<ByteStream>,
    left: usize,
    limit: usize,
}

impl Stream for Limited {
    type Item = Result<Bytes, InvokeError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let Some(inner) = self.inner.as_mut() else {
            return Poll::Ready(None);
        };
        match inner.as_mut().poll_next(cx) {
            Poll::Ready(Some(Ok(chunk))) if chunk.len() > self.left => {
                // Dropping the inner stream stops the function.
                self.inner = None;
                Poll::Ready(Some(Err(InvokeError::OutputTooLarge { limit: self.limit })))
            }
            Poll::Ready(Some(Ok(chunk))) => {
                self.left -= chunk.len();
                Poll::Ready(Some(Ok(chunk)))
            }
            Poll::Ready(None) => {
                self.inner = None;
                Poll::Ready(None)
            }
            other => other,
        }
    }
}

/// Response headers a function may not set: the framing is the gateway's (hop-by-hop and
/// length headers) and so are the platform's own headers. Lower-case.
const NOT_THE_FUNCTIONS: [&str; 17] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "content-length",
    geofaas_config::headers::SERVED_BY,
    geofaas_config::headers::OFFLOADED_FROM,
    geofaas_config::headers::COLD_START,
    geofaas_config::headers::PLACEMENT,
    geofaas_config::headers::PLACEMENT_REASON,
    geofaas_config::headers::SERVER_TIMING,
    geofaas_config::headers::FUNCTION_VERSION,
    geofaas_config::headers::REQUEST_ID,
    geofaas_config::headers::IDEMPOTENT_REPLAYED,
];

/// Whether a function's response header (lower-case name) reaches the client.
pub fn is_functions_header(name: &str) -> bool {
    !NOT_THE_FUNCTIONS.contains(&name)
        && !name.starts_with("proxy-")
        && !geofaas_config::headers::is_geo(name)
}

/// A function's status code: 200-599, else [`InvokeError::BadAnswer`] naming it.
pub fn answer_status(function: &str, status: u64) -> Result<StatusCode, InvokeError> {
    u16::try_from(status)
        .ok()
        .filter(|s| (200..=599).contains(s))
        .and_then(|s| StatusCode::from_u16(s).ok())
        .ok_or_else(|| {
            InvokeError::BadAnswer(format!(
                "function {function} answered status {status}, which is not an HTTP status of 200-599"
            ))
        })
}

/// A function's response headers as one map: each `(name, value)` checked (a name that is not
/// a token, a value with CR, LF or NUL in it is [`InvokeError::BadAnswer`] naming the
/// function and the header), repeated names kept apart, hop-by-hop and platform headers
/// dropped ([`is_functions_header`]).
pub fn answer_headers<'a>(
    function: &str,
    headers: impl IntoIterator<Item = (&'a str, &'a [u8])>,
) -> Result<HeaderMap, InvokeError> {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        let Ok(name) = HeaderName::from_bytes(name.as_bytes()) else {
            return Err(InvokeError::BadAnswer(format!(
                "function {function} answered a header named {:?}, which is not a valid HTTP header name",
                name.escape_debug().to_string()
            )));
        };
        let Ok(value) = HeaderValue::from_bytes(value) else {
            return Err(InvokeError::BadAnswer(format!(
                "function {function} answered header {name} with a value that is not valid HTTP (CR, LF or another control character in it)"
            )));
        };
        if is_functions_header(name.as_str()) {
            map.append(name, value);
        }
    }
    Ok(map)
}

/// The default content type of a body a function answered without one.
pub const DEFAULT_CONTENT_TYPE: &str = "text/plain; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt as _;

    #[test]
    fn statuses_outside_200_to_599_are_the_functions_failure() {
        assert_eq!(answer_status("f", 201).unwrap(), StatusCode::CREATED);
        assert_eq!(answer_status("f", 599).unwrap().as_u16(), 599);
        for bad in [0, 100, 101, 199, 600, 999, 70_000, u64::MAX] {
            let e = answer_status("f", bad).unwrap_err();
            assert!(matches!(e, InvokeError::BadAnswer(_)), "{bad}");
            assert!(e.to_string().contains(&bad.to_string()), "{e}");
            assert!(e.to_string().contains("function f"), "{e}");
        }
    }

    #[test]
    fn repeated_headers_stay_apart_and_the_gateways_are_dropped() {
        let got = answer_headers(
            "f",
            [
                ("Set-Cookie", &b"a=1"[..]),
                ("set-cookie", b"b=2"),
                ("Content-Type", b"application/json"),
                ("Transfer-Encoding", b"chunked"),
                ("Content-Length", b"3"),
                ("X-Served-By", b"forged"),
                ("Server-Timing", b"exec;dur=0"),
                ("X-Geo-Node", b"forged"),
                ("X-Custom", b"kept"),
            ],
        )
        .unwrap();
        let cookies: Vec<_> = got.get_all("set-cookie").iter().collect();
        assert_eq!(cookies, ["a=1", "b=2"]);
        assert_eq!(got["content-type"], "application/json");
        assert_eq!(got["x-custom"], "kept");
        for gone in [
            "transfer-encoding",
            "content-length",
            "x-served-by",
            "server-timing",
            "x-geo-node",
        ] {
            assert!(!got.contains_key(gone), "{gone}");
        }
    }

    #[test]
    fn a_header_that_is_not_http_is_refused_naming_it() {
        let e = answer_headers("f", [("X-Evil", &b"a\r\nSet-Cookie: x=1"[..])]).unwrap_err();
        assert!(matches!(e, InvokeError::BadAnswer(_)));
        assert!(e.to_string().contains("x-evil"), "{e}");
        let e = answer_headers("f", [("bad name", &b"v"[..])]).unwrap_err();
        assert!(e.to_string().contains("bad name"), "{e}");
        assert!(answer_headers("f", [("", &b"v"[..])]).is_err());
    }

    #[tokio::test]
    async fn a_stream_over_the_limit_is_cut() {
        let chunks = futures::stream::iter(
            ["abc", "def", "ghi"].map(|c| Ok::<_, InvokeError>(Bytes::from(c))),
        );
        let mut s = limited(Box::pin(chunks), 7);
        assert_eq!(s.next().await.unwrap().unwrap(), "abc");
        assert_eq!(s.next().await.unwrap().unwrap(), "def");
        let cut = s.next().await.unwrap().unwrap_err();
        assert!(matches!(cut, InvokeError::OutputTooLarge { limit: 7 }));
        assert!(s.next().await.is_none());
    }

    #[tokio::test]
    async fn a_payload_collects_whole_within_its_limit() {
        let chunks = futures::stream::iter(["ab", "cd"].map(|c| Ok(Bytes::from(c))));
        let p = Payload::Stream(Box::pin(chunks));
        assert_eq!(p.collect(4).await.unwrap(), "abcd");
        let chunks = futures::stream::iter(["ab", "cd"].map(|c| Ok(Bytes::from(c))));
        let p = Payload::Stream(Box::pin(chunks));
        assert!(p.collect(3).await.is_err());
        assert!(Payload::Full(Bytes::from("abcd")).collect(3).await.is_err());
    }

    #[test]
    fn the_path_and_query_join_with_a_question_mark_only_when_there_is_a_query() {
        let mut r = HttpRequest {
            path: "/users/7".into(),
            ..HttpRequest::default()
        };
        assert_eq!(r.path_and_query(), "/users/7");
        r.query = "a=1&b=2".into();
        assert_eq!(r.path_and_query(), "/users/7?a=1&b=2");
    }
}
