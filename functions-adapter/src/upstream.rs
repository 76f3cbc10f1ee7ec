//! An HTTP/1.1 client for the hot path to a plain-HTTP backend (the tinyFaaS proxy): a pool of
//! keep-alive connections, each exchange written and read by the calling task itself.
//!
//! A general client (reqwest over hyper-util) runs every connection as its own task, so a call
//! hops from the caller's task to the connection's task and back through channels, and it parses
//! the URL again on every request; even hyper's bare client connection, polled by the caller,
//! passes each request through a channel to its dispatcher and builds a full header map of the
//! reply. Here the caller takes an idle connection from the pool, writes the request head and
//! body in one write, reads the reply into the connection's buffer, parses the head in place
//! (`httparse`) and hands the body on without copying it, keeping only the one reply header the
//! adapter uses. This is how nginx's upstream keep-alive works too (both sides of a call in one
//! event loop, the reply parsed where it was read).
//!
//! Framing follows RFC 9112: `1xx` replies are skipped, `204` and `304` have no body, a chunked
//! body is reassembled (trailers read and dropped), a `Content-Length` body is taken as it is,
//! and a reply with neither is read to the end of the connection. A connection goes back to the
//! pool only after a complete, framed reply with no `Connection: close` (HTTP/1.0: only with
//! `Connection: keep-alive`) and nothing read past it.
//!
//! A pooled connection the server has closed is noticed before the request is sent (its socket
//! has reported the end of the stream), so the request goes on a fresh connection instead. Once
//! a request is written it is never sent again: a connection that fails mid-exchange is an
//! error, and the gateway's failover decides what happens next. A reply that arrives while a
//! large body is still being written (a server refusing the call without reading it) stops the
//! writing and is the call's answer, also when the server then closes the connection.

use parking_lot::Mutex;
use std::time::{Duration, Instant};

use bytes::{Buf as _, Bytes, BytesMut};
use http::{HeaderName, HeaderValue, Method, StatusCode};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use crate::InvokeError;

/// At most this many idle connections are kept (nginx's `keepalive 64` in the benchmark).
const MAX_IDLE: usize = 64;
/// A connection idle for longer is closed rather than reused (servers close idle ones too).
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Budget of the TCP connect.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Largest reply head (status line and headers) accepted.
const MAX_HEAD: usize = 64 * 1024;
/// Most reply headers accepted (hyper's default too).
const MAX_HEADERS: usize = 100;
/// A request body up to this size is copied behind its head so both go out in one write.
const COPY_BODY_UP_TO: usize = 16 * 1024;
/// Space kept free in a connection's buffer before each read.
const READ_AHEAD: usize = 4 * 1024;
/// What a connection's buffer grows by when it is short of [`READ_AHEAD`].
const BUFFER: usize = 16 * 1024;

/// Keep-alive connections to one `host:port`.
#[derive(Debug)]
pub(crate) struct Upstream {
    /// `host:port` to connect to, and the `Host` header of every request.
    authority: String,
    idle: Mutex<Vec<Conn>>,
}

/// A reply read in full, with the one header the adapter uses.
#[derive(Debug)]
pub(crate) struct Answer {
    pub status: StatusCode,
    /// `Content-Type`, if the reply had one that is valid text (shares the reply's buffer).
    pub content_type: Option<HeaderValue>,
    pub body: Bytes,
}

/// One keep-alive connection and the buffer its replies are read into.
#[derive(Debug)]
struct Conn {
    stream: TcpStream,
    buf: BytesMut,
    idle_since: Instant,
}

impl Upstream {
    /// Connections to `host:port` (`host` may be a name, an IPv4 or a bracketed IPv6 literal).
    pub(crate) fn new(host: &str, port: u16) -> Result<Self, String> {
        let authority = format!("{host}:{port}");
        HeaderValue::from_str(&authority).map_err(|e| format!("bad host {host:?}: {e}"))?;
        Ok(Self {
            authority,
            idle: Mutex::new(Vec::new()),
        })
    }

    /// Sends `method path` with `headers` and `body`, and reads the reply up to `max_reply`
    /// bytes, all within `budget`. `headers` must not contain framing or hop-by-hop headers
    /// (`Host`, `Content-Length`, `Transfer-Encoding`, `Connection`): the request sets them.
    pub(crate) async fn send<'h>(
        &self,
        method: Method,
        path: &str,
        headers: impl Iterator<Item = (&'h HeaderName, &'h HeaderValue)>,
        body: Bytes,
        budget: Duration,
        max_reply: usize,
    ) -> Result<Answer, InvokeError> {
        if budget.is_zero() {
            return Err(InvokeError::Timeout(budget));
        }
        if !path.starts_with('/') || !path.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(InvokeError::Protocol(format!("bad request path {path:?}")));
        }
        let request = self.request(&method, path, headers, &body);
        let body = (body.len() > COPY_BODY_UP_TO).then_some(body);
        tokio::time::timeout(budget, self.exchange(request, body, &method, max_reply))
            .await
            .map_err(|_| InvokeError::Timeout(budget))?
    }

    /// The request head, with the body behind it when that is small.
    fn request<'h>(
        &self,
        method: &Method,
        path: &str,
        headers: impl Iterator<Item = (&'h HeaderName, &'h HeaderValue)>,
        body: &Bytes,
    ) -> Vec<u8> {
        let inline = body.len() <= COPY_BODY_UP_TO;
        let mut head = Vec::with_capacity(256 + if inline { body.len() } else { 0 });
        for part in [method.as_str(), " ", path, " HTTP/1.1\r\nhost: "] {
            head.extend_from_slice(part.as_bytes());
        }
        head.extend_from_slice(self.authority.as_bytes());
        head.extend_from_slice(b"\r\ncontent-length: ");
        head.extend_from_slice(itoa::Buffer::new().format(body.len()).as_bytes());
        head.extend_from_slice(b"\r\n");
        for (name, value) in headers {
            // `HeaderName` and `HeaderValue` cannot hold CR or LF: no header can be injected.
            head.extend_from_slice(name.as_str().as_bytes());
            head.extend_from_slice(b": ");
            head.extend_from_slice(value.as_bytes());
            head.extend_from_slice(b"\r\n");
        }
        head.extend_from_slice(b"\r\n");
        if inline {
            head.extend_from_slice(body);
        }
        head
    }

    async fn exchange(
        &self,
        request: Vec<u8>,
        body: Option<Bytes>,
        method: &Method,
        max_reply: usize,
    ) -> Result<Answer, InvokeError> {
        let mut conn = match self.checkout() {
            Some(conn) => conn,
            None => self.connect().await?,
        };
        let sent = conn.send_request(&request, body.as_deref()).await;
        let reply = conn.read_reply(method, max_reply).await;
        match (sent, reply) {
            (Ok(whole), Ok((answer, reusable))) => {
                if whole && reusable {
                    self.release(conn);
                }
                Ok(answer)
            }
            (Ok(_), Err(e)) => Err(e),
            // A server may answer before it has read the whole request (an unknown function,
            // a body too large for it) and then close: that answer is the call's answer.
            (Err(_), Ok((answer, _))) => Ok(answer),
            (Err(e), Err(_)) => Err(InvokeError::Network(e.to_string())),
        }
    }

    /// An idle connection that is still open, if there is one.
    fn checkout(&self) -> Option<Conn> {
        let mut idle = self.idle.lock();
        while let Some(conn) = idle.pop() {
            if conn.idle_since.elapsed() < IDLE_TIMEOUT && conn.is_open() {
                return Some(conn);
            }
        }
        None
    }

    /// Back to the pool, unless the pool is full.
    fn release(&self, mut conn: Conn) {
        conn.idle_since = Instant::now();
        let mut idle = self.idle.lock();
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
        Ok(Conn {
            stream,
            buf: BytesMut::new(),
            idle_since: Instant::now(),
        })
    }
}

/// How a reply's body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    Empty,
    Length(usize),
    Chunked,
    /// To the end of the connection (no length, not chunked).
    Close,
}

/// What the reply head says, with the content type as a range of the head's bytes.
struct Head {
    len: usize,
    status: StatusCode,
    framing: Framing,
    keep_alive: bool,
    content_type: Option<std::ops::Range<usize>>,
}

impl Conn {
    /// Whether the server has neither closed the idle connection nor sent anything on it.
    /// Costs no system call unless the socket has reported something since the last reply.
    fn is_open(&self) -> bool {
        let mut probe = [0u8; 1];
        matches!(self.stream.try_read(&mut probe), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
    }

    /// Writes the request head (with a small body behind it), then `body` if there is one.
    /// `Ok(false)` when the server started answering, or closed, before the whole body was
    /// written: the writing stops there and the connection cannot be reused.
    async fn send_request(&mut self, head: &[u8], body: Option<&[u8]>) -> std::io::Result<bool> {
        self.stream.write_all(head).await?;
        let Some(mut rest) = body else {
            return Ok(true);
        };
        let (stream, buf) = (&self.stream, &mut self.buf);
        while !rest.is_empty() {
            tokio::select! {
                biased;
                ready = stream.readable() => {
                    ready?;
                    if buf.capacity() - buf.len() < READ_AHEAD {
                        buf.reserve(BUFFER);
                    }
                    match stream.try_read_buf(buf) {
                        // Bytes of a reply, or the end of the stream.
                        Ok(_) => return Ok(false),
                        // A stale readiness (left from the last reply): keep writing.
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                        Err(e) => return Err(e),
                    }
                }
                ready = stream.writable() => {
                    ready?;
                    match stream.try_write(rest) {
                        Ok(n) => rest = &rest[n..],
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                        Err(e) => return Err(e),
                    }
                }
            }
        }
        Ok(true)
    }

    /// Reads more bytes into the buffer; `Err` at the end of the stream.
    async fn fill(&mut self, room: usize) -> Result<(), InvokeError> {
        if self.buf.capacity() - self.buf.len() < room {
            self.buf.reserve(room.max(BUFFER));
        }
        match self.stream.read_buf(&mut self.buf).await {
            Ok(0) => Err(InvokeError::Network(
                "connection closed before the reply was complete".into(),
            )),
            Ok(_) => Ok(()),
            Err(e) => Err(InvokeError::Network(e.to_string())),
        }
    }

    /// One whole reply, and whether the connection can carry another request.
    async fn read_reply(
        &mut self,
        method: &Method,
        max_reply: usize,
    ) -> Result<(Answer, bool), InvokeError> {
        let head = loop {
            if self.buf.is_empty() {
                self.fill(READ_AHEAD).await?;
            }
            match parse_head(&self.buf, method)? {
                Some(head) if head.status == StatusCode::SWITCHING_PROTOCOLS => {
                    return Err(InvokeError::Protocol(
                        "unrequested protocol switch (101)".into(),
                    ))
                }
                Some(head) if head.status.is_informational() => self.buf.advance(head.len),
                Some(head) => break head,
                None if self.buf.len() > MAX_HEAD => {
                    return Err(InvokeError::Protocol(format!(
                        "reply head longer than {MAX_HEAD} bytes"
                    )))
                }
                None => self.fill(READ_AHEAD).await?,
            }
        };
        let head_bytes = self.buf.split_to(head.len).freeze();
        let content_type = head
            .content_type
            .and_then(|r| HeaderValue::from_maybe_shared(head_bytes.slice(r)).ok());
        let body = match head.framing {
            Framing::Empty => Bytes::new(),
            Framing::Length(n) if n > max_reply => {
                return Err(InvokeError::OutputTooLarge { limit: max_reply })
            }
            Framing::Length(n) => {
                while self.buf.len() < n {
                    let missing = n - self.buf.len();
                    self.fill(missing.min(max_reply)).await?;
                }
                self.buf.split_to(n).freeze()
            }
            Framing::Chunked => self.read_chunked(max_reply).await?,
            Framing::Close => self.read_to_end(max_reply).await?,
        };
        let reusable = head.keep_alive && head.framing != Framing::Close && self.buf.is_empty();
        let answer = Answer {
            status: head.status,
            content_type,
            body,
        };
        Ok((answer, reusable))
    }

    /// A chunked body, reassembled; the trailers are read and dropped.
    async fn read_chunked(&mut self, max_reply: usize) -> Result<Bytes, InvokeError> {
        let bad = |what: &str| InvokeError::Protocol(format!("bad chunked reply: {what}"));
        let mut body = BytesMut::new();
        loop {
            let (size_len, size) = match httparse::parse_chunk_size(&self.buf) {
                Ok(httparse::Status::Complete((len, size))) => (len, size),
                Ok(httparse::Status::Partial) if self.buf.len() < MAX_HEAD => {
                    self.fill(READ_AHEAD).await?;
                    continue;
                }
                Ok(httparse::Status::Partial) => return Err(bad("chunk size line too long")),
                Err(_) => return Err(bad("invalid chunk size")),
            };
            if size == 0 {
                self.buf.advance(size_len);
                return self.skip_trailers().await.map(|()| body.freeze());
            }
            let size = usize::try_from(size).unwrap_or(usize::MAX);
            if size > max_reply.saturating_sub(body.len()) {
                return Err(InvokeError::OutputTooLarge { limit: max_reply });
            }
            let needed = size_len + size + 2;
            while self.buf.len() < needed {
                let missing = needed - self.buf.len();
                self.fill(missing).await?;
            }
            if &self.buf[needed - 2..needed] != b"\r\n" {
                return Err(bad("chunk not followed by CRLF"));
            }
            body.extend_from_slice(&self.buf[size_len..needed - 2]);
            self.buf.advance(needed);
        }
    }

    /// The trailer section after the last chunk, up to its empty line.
    async fn skip_trailers(&mut self) -> Result<(), InvokeError> {
        loop {
            let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
            match httparse::parse_headers(&self.buf, &mut headers) {
                Ok(httparse::Status::Complete((len, _))) => {
                    self.buf.advance(len);
                    return Ok(());
                }
                Ok(httparse::Status::Partial) if self.buf.len() < MAX_HEAD => {
                    self.fill(READ_AHEAD).await?;
                }
                Ok(httparse::Status::Partial) => {
                    return Err(InvokeError::Protocol("reply trailers too long".into()))
                }
                Err(e) => return Err(InvokeError::Protocol(format!("bad reply trailers: {e}"))),
            }
        }
    }

    /// A body delimited by the end of the connection.
    async fn read_to_end(&mut self, max_reply: usize) -> Result<Bytes, InvokeError> {
        loop {
            if self.buf.len() > max_reply {
                return Err(InvokeError::OutputTooLarge { limit: max_reply });
            }
            if self.buf.capacity() - self.buf.len() < READ_AHEAD {
                self.buf.reserve(BUFFER);
            }
            match self.stream.read_buf(&mut self.buf).await {
                Ok(0) => return Ok(self.buf.split().freeze()),
                Ok(_) => {}
                Err(e) => return Err(InvokeError::Network(e.to_string())),
            }
        }
    }
}

/// The reply head at the start of `buf`, `None` while it is incomplete.
fn parse_head(buf: &[u8], method: &Method) -> Result<Option<Head>, InvokeError> {
    // Left uninitialised: httparse writes the ones it fills (zeroing all would cost more than
    // parsing a short head).
    let mut headers = [const { std::mem::MaybeUninit::uninit() }; MAX_HEADERS];
    let mut reply = httparse::Response::new(&mut []);
    let parsed = httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut reply,
        buf,
        &mut headers,
    );
    let len = match parsed {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(InvokeError::Protocol(format!("unreadable reply head: {e}"))),
    };
    let status = reply
        .code
        .and_then(|c| StatusCode::from_u16(c).ok())
        .ok_or_else(|| InvokeError::Protocol("reply without a valid status".into()))?;
    let http11 = reply.version == Some(1);
    let mut keep_alive = http11;
    let mut length: Option<usize> = None;
    let mut chunked = false;
    let mut transfer_coded = false;
    let mut content_type = None;
    for h in reply.headers.iter() {
        let (name, value) = (h.name.as_bytes(), h.value);
        // The length first: most headers are none of these four.
        match name.len() {
            14 if name.eq_ignore_ascii_case(b"content-length") => {
                let n = content_length(value).ok_or_else(|| {
                    InvokeError::Protocol(format!(
                        "bad Content-Length {:?}",
                        String::from_utf8_lossy(value)
                    ))
                })?;
                if length.is_some_and(|l| l != n) {
                    return Err(InvokeError::Protocol(
                        "conflicting Content-Length headers".into(),
                    ));
                }
                length = Some(n);
            }
            17 if name.eq_ignore_ascii_case(b"transfer-encoding") => {
                transfer_coded = true;
                // Only the last coding frames the body.
                chunked = value
                    .rsplit(|&b| b == b',')
                    .next()
                    .is_some_and(|last| last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
            }
            10 if name.eq_ignore_ascii_case(b"connection") => {
                for token in value.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
                    if token.eq_ignore_ascii_case(b"close") {
                        keep_alive = false;
                    } else if token.eq_ignore_ascii_case(b"keep-alive") && !http11 {
                        keep_alive = true;
                    }
                }
            }
            12 if name.eq_ignore_ascii_case(b"content-type") && value.is_ascii() => {
                let start = value.as_ptr() as usize - buf.as_ptr() as usize;
                content_type = Some(start..start + value.len());
            }
            _ => {}
        }
    }
    let no_body = status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
        || method == Method::HEAD;
    let framing = if no_body {
        Framing::Empty
    } else if transfer_coded {
        // Transfer-Encoding overrides Content-Length (RFC 9112 6.3).
        if chunked {
            Framing::Chunked
        } else {
            Framing::Close
        }
    } else {
        match length {
            Some(0) => Framing::Empty,
            Some(n) => Framing::Length(n),
            None => Framing::Close,
        }
    };
    Ok(Some(Head {
        len,
        status,
        framing,
        keep_alive: keep_alive && !(transfer_coded && length.is_some()),
        content_type,
    }))
}

/// A `Content-Length` value: decimal digits only (surrounding blanks allowed), no overflow.
fn content_length(value: &[u8]) -> Option<usize> {
    let digits = value.trim_ascii();
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0usize, |n, &d| {
        d.is_ascii_digit()
            .then(|| n.checked_mul(10)?.checked_add(usize::from(d - b'0')))
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(raw: &str) -> Head {
        parse_head(raw.as_bytes(), &Method::POST).unwrap().unwrap()
    }

    #[test]
    fn framing_follows_rfc_9112() {
        let h = head("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello");
        assert_eq!(
            (h.framing, h.keep_alive, h.len),
            (Framing::Length(5), true, 38)
        );
        let h = head("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n");
        assert_eq!(h.framing, Framing::Chunked);
        let h = head("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n");
        assert_eq!(h.framing, Framing::Close);
        // Both: Transfer-Encoding wins, and the connection is not reused.
        let h = head("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n");
        assert_eq!((h.framing, h.keep_alive), (Framing::Chunked, false));
        assert_eq!(head("HTTP/1.1 200 OK\r\n\r\n").framing, Framing::Close);
        let h = head("HTTP/1.1 204 No Content\r\nContent-Length: 9\r\n\r\n");
        assert_eq!(h.framing, Framing::Empty);
        assert_eq!(
            head("HTTP/1.1 100 Continue\r\n\r\n").status,
            StatusCode::CONTINUE
        );
        let same = head("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n");
        assert_eq!(same.framing, Framing::Length(2));
    }

    #[test]
    fn content_length_takes_digits_only() {
        assert_eq!(content_length(b" 42 "), Some(42));
        assert_eq!(content_length(b"0"), Some(0));
        for bad in [
            &b""[..],
            b" ",
            b"+1",
            b"-1",
            b"1 2",
            b"0x10",
            b"99999999999999999999999",
        ] {
            assert_eq!(
                content_length(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn connection_tokens_and_versions_decide_reuse() {
        assert!(!head("HTTP/1.1 200 OK\r\nConnection: keep-alive, close\r\n\r\n").keep_alive);
        assert!(!head("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n").keep_alive);
        assert!(head("HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\n\r\n").keep_alive);
    }

    #[test]
    fn bad_heads_are_protocol_errors_naming_the_value() {
        for raw in [
            "HTTP/1.1 200 OK\r\nContent-Length: 12x\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n",
            "HTTP/1.1 2000 OK\r\n\r\n",
            "SMTP ready\r\n\r\n",
        ] {
            let err = parse_head(raw.as_bytes(), &Method::POST).err();
            assert!(
                matches!(err, Some(InvokeError::Protocol(_))),
                "{raw:?}: {err:?}"
            );
        }
        let err = parse_head(
            b"HTTP/1.1 200 OK\r\nContent-Length: 12x\r\n\r\n",
            &Method::POST,
        );
        assert!(format!("{:?}", err.err()).contains("12x"));
        assert!(parse_head(b"HTTP/1.1 200 OK\r\nContent-Le", &Method::POST)
            .unwrap()
            .is_none());
    }

    #[test]
    fn the_content_type_is_located_in_the_head() {
        let raw = "HTTP/1.1 200 OK\r\ncontent-type: text/csv\r\nContent-Length: 0\r\n\r\n";
        let h = head(raw);
        assert_eq!(&raw[h.content_type.unwrap()], "text/csv");
    }

    #[test]
    fn the_request_carries_host_length_and_the_headers_given() {
        let up = Upstream::new("127.0.0.1", 8000).unwrap();
        let name = HeaderName::from_static("x-client-location");
        let value = HeaderValue::from_static("52.5,13.4");
        let body = Bytes::from_static(b"hi");
        let raw = up.request(&Method::POST, "/echo", [(&name, &value)].into_iter(), &body);
        assert_eq!(
            String::from_utf8(raw).unwrap(),
            "POST /echo HTTP/1.1\r\nhost: 127.0.0.1:8000\r\ncontent-length: 2\r\n\
             x-client-location: 52.5,13.4\r\n\r\nhi"
        );
        let big = Bytes::from(vec![b'x'; COPY_BODY_UP_TO + 1]);
        let raw = up.request(&Method::POST, "/echo", std::iter::empty(), &big);
        assert!(raw.ends_with(b"\r\n\r\n") && raw.len() < big.len());
    }
}

#[cfg(test)]
#[path = "upstream_props.rs"]
mod props;
