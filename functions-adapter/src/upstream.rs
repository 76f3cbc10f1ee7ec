//! An HTTP/1.1 client for the hot path to a plain-HTTP backend (the tinyFaaS proxy): a pool of
//! keep-alive connections, each exchange driven in the calling task.
//!
//! A general client (reqwest over hyper-util) runs every connection as its own task, so a call
//! hops from the caller's task to the connection's task and back through channels, and it parses
//! the URL again on every request. Here the caller takes an idle connection from the pool, polls
//! hyper's connection state machine itself while it sends the request and reads the reply, and
//! puts the connection back: one task, no channel hop, no URL parsing. This is how nginx's
//! upstream keep-alive works too (both sides of a call in one event loop).
//!
//! A pooled connection the server has closed is noticed before the request is sent (the
//! connection is polled until it is ready for a request), so the request goes on a fresh
//! connection instead. Once a request is written it is never sent again: a connection that
//! fails mid-exchange is an error, and the gateway's failover decides what happens next.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, StatusCode};
use http_body_util::{BodyExt as _, Full, Limited};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::http_common::{root_cause, Reply};
use crate::InvokeError;

/// At most this many idle connections are kept (nginx's `keepalive 64` in the benchmark).
const MAX_IDLE: usize = 64;
/// A connection idle for longer is closed rather than reused (servers close idle ones too).
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Budget of the TCP connect.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

type Body = Full<Bytes>;

/// Keep-alive connections to one `host:port`.
#[derive(Debug)]
pub(crate) struct Upstream {
    /// `host:port` to connect to.
    authority: String,
    /// The `Host` header of every request.
    host: HeaderValue,
    idle: Mutex<Vec<Conn>>,
}

/// One HTTP/1.1 connection: the request side and hyper's connection state machine, which the
/// task that uses the connection polls.
struct Conn {
    sender: http1::SendRequest<Body>,
    driver: http1::Connection<TokioIo<TcpStream>, Body>,
    idle_since: Instant,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("idle_since", &self.idle_since)
            .finish_non_exhaustive()
    }
}

impl Upstream {
    /// Connections to `host:port` (`host` may be a name, an IPv4 or a bracketed IPv6 literal).
    pub(crate) fn new(host: &str, port: u16) -> Result<Self, String> {
        let authority = format!("{host}:{port}");
        let header =
            HeaderValue::from_str(&authority).map_err(|e| format!("bad host {host:?}: {e}"))?;
        Ok(Self {
            authority,
            host: header,
            idle: Mutex::new(Vec::new()),
        })
    }

    /// Sends `method path` with `headers` and `body`, and reads the reply up to `max_reply`
    /// bytes, all within `budget`.
    pub(crate) async fn send(
        &self,
        method: Method,
        path: &str,
        headers: impl Iterator<Item = (&http::HeaderName, &HeaderValue)>,
        body: Bytes,
        budget: Duration,
        max_reply: usize,
    ) -> Result<Reply, InvokeError> {
        if budget.is_zero() {
            return Err(InvokeError::Timeout(budget));
        }
        let mut request = Request::new(Full::new(body));
        *request.method_mut() = method;
        *request.uri_mut() = path
            .parse()
            .map_err(|e| InvokeError::Protocol(format!("bad request path {path:?}: {e}")))?;
        let h = request.headers_mut();
        h.insert(http::header::HOST, self.host.clone());
        for (name, value) in headers {
            h.append(name, value.clone());
        }
        tokio::time::timeout(budget, self.exchange(request, max_reply))
            .await
            .map_err(|_| InvokeError::Timeout(budget))?
    }

    async fn exchange(
        &self,
        request: Request<Body>,
        max_reply: usize,
    ) -> Result<Reply, InvokeError> {
        let mut conn = self.ready_connection().await?;
        let reply = conn.round_trip(request, max_reply).await?;
        self.release(conn, &reply.headers);
        Ok(reply)
    }

    /// An idle connection that is ready for a request, or a new one.
    async fn ready_connection(&self) -> Result<Conn, InvokeError> {
        while let Some(mut conn) = self.checkout() {
            if conn.idle_since.elapsed() < IDLE_TIMEOUT && conn.ready().await {
                return Ok(conn);
            }
        }
        self.connect().await
    }

    fn checkout(&self) -> Option<Conn> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop()
    }

    /// Back to the pool, unless the server asked to close or the pool is full.
    fn release(&self, mut conn: Conn, reply_headers: &HeaderMap) {
        let closing = reply_headers
            .get(http::header::CONNECTION)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"close"));
        if closing {
            return;
        }
        conn.idle_since = Instant::now();
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < MAX_IDLE {
            idle.push(conn);
        }
    }

    async fn connect(&self) -> Result<Conn, InvokeError> {
        let unavailable =
            |e: &dyn std::fmt::Display| InvokeError::Unavailable(format!("cannot connect: {e}"));
        let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(&self.authority))
            .await
            .map_err(|_| unavailable(&"connect timed out"))?
            .map_err(|e| unavailable(&e))?;
        stream.set_nodelay(true).map_err(|e| unavailable(&e))?;
        let (sender, driver) = http1::Builder::new()
            .handshake(TokioIo::new(stream))
            .await
            .map_err(|e| unavailable(&e))?;
        Ok(Conn {
            sender,
            driver,
            idle_since: Instant::now(),
        })
    }
}

impl Conn {
    /// Polls the connection until it can take a request; `false` if it has closed meanwhile.
    async fn ready(&mut self) -> bool {
        tokio::select! {
            biased;
            ready = self.sender.ready() => ready.is_ok(),
            _ = &mut self.driver => false,
        }
    }

    /// One request and its whole reply, polling the connection alongside.
    async fn round_trip(
        &mut self,
        request: Request<Body>,
        max_reply: usize,
    ) -> Result<Reply, InvokeError> {
        let response = self.sender.send_request(request);
        let exchange = async {
            let response = response.await.map_err(hyper_error)?;
            let (parts, body) = response.into_parts();
            let body = Limited::new(body, max_reply)
                .collect()
                .await
                .map_err(|e| {
                    if e.is::<http_body_util::LengthLimitError>() {
                        InvokeError::OutputTooLarge { limit: max_reply }
                    } else {
                        InvokeError::Network(root_cause(&*e))
                    }
                })?
                .to_bytes();
            Ok::<_, InvokeError>((parts.status, parts.headers, body))
        };
        tokio::pin!(exchange);
        let result = tokio::select! {
            biased;
            result = &mut exchange => result,
            // The connection ended first: the exchange fails with hyper's reason.
            _ = &mut self.driver => exchange.await,
        };
        let (status, headers, body): (StatusCode, HeaderMap, Bytes) = result?;
        Ok(Reply {
            status,
            headers,
            body,
        })
    }
}

fn hyper_error(err: hyper::Error) -> InvokeError {
    InvokeError::Network(root_cause(&err))
}
