//! The tinyFaaS adapter's keep-alive connections, against raw TCP servers that behave as real
//! HTTP/1.1 servers do at the edges: reuse, a server closing an idle connection, `Connection:
//! close`, chunked replies (with extensions and trailers, after a `100 Continue`), a body
//! delimited by the connection's end, a reply cut short (never sent twice), and a peer that does
//! not speak HTTP.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use geofaas_config::TinyfaasBackend;
use geofaas_functions::tinyfaas::TinyfaasAdapter;
use geofaas_functions::{FunctionBackend, Invocation, InvokeError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::call;

/// What the server does after reading each request.
#[derive(Clone, Copy)]
enum Behaviour {
    /// `200` with the request body, connection kept open.
    KeepAlive,
    /// `200`, then the server closes the connection (as an idle timeout would).
    CloseAfterReply,
    /// `200` with `Connection: close`, socket left open.
    ConnectionCloseHeader,
    /// `200` with the body in three chunks.
    Chunked,
    /// Headers promising 100 bytes, 10 bytes, then the connection closes.
    CutShort,
    /// `100 Continue`, then `200` with the body in chunks, followed by trailers.
    InterimThenChunkedWithTrailers,
    /// `200` with neither a length nor chunks: the body ends with the connection.
    UntilClose,
    /// Something that is not HTTP.
    Garbage,
    /// `404` as soon as the request head is in, without reading the body, then the connection
    /// is closed (what Go's net/http does for an unread body too large to drain).
    EarlyNotFoundThenClose,
    /// `404` as soon as the request head is in; the body is never read and the connection
    /// stays open.
    EarlyNotFoundKeepOpen,
}

struct Server {
    port: u16,
    connections: Arc<AtomicUsize>,
    requests: Arc<AtomicUsize>,
}

async fn server(behaviour: Behaviour) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let connections = Arc::new(AtomicUsize::new(0));
    let requests = Arc::new(AtomicUsize::new(0));
    let (c, r) = (connections.clone(), requests.clone());
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            c.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(serve(stream, behaviour, r.clone()));
        }
    });
    Server {
        port,
        connections,
        requests,
    }
}

/// Reads one request (head and `Content-Length` body); `None` at end of stream.
async fn read_request(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Vec<u8>> {
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            let total = end + 4 + len;
            while buf.len() < total {
                let mut chunk = [0u8; 4096];
                let n = stream.read(&mut chunk).await.ok()?;
                if n == 0 {
                    return None;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            let body = buf[end + 4..total].to_vec();
            buf.drain(..total);
            return Some(body);
        }
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

async fn serve(mut stream: TcpStream, behaviour: Behaviour, requests: Arc<AtomicUsize>) {
    let mut buf = Vec::new();
    if let Behaviour::EarlyNotFoundThenClose | Behaviour::EarlyNotFoundKeepOpen = behaviour {
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
            let mut chunk = [0u8; 4096];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        requests.fetch_add(1, Ordering::SeqCst);
        let reply = b"HTTP/1.1 404 Not Found\r\nContent-Length: 10\r\n\r\nno such fn";
        let _ = stream.write_all(reply).await;
        if let Behaviour::EarlyNotFoundKeepOpen = behaviour {
            tokio::time::sleep(Duration::from_secs(30)).await;
        }
        return;
    }
    while let Some(body) = read_request(&mut stream, &mut buf).await {
        requests.fetch_add(1, Ordering::SeqCst);
        let mut reply = match behaviour {
            Behaviour::KeepAlive | Behaviour::CloseAfterReply => {
                format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes()
            }
            Behaviour::ConnectionCloseHeader => format!(
                "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
                body.len()
            )
            .into_bytes(),
            Behaviour::Chunked => {
                let mut r = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
                for part in body.chunks(body.len().div_ceil(3).max(1)) {
                    r.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
                    r.extend_from_slice(part);
                    r.extend_from_slice(b"\r\n");
                }
                r.extend_from_slice(b"0\r\n\r\n");
                stream.write_all(&r).await.unwrap();
                continue;
            }
            Behaviour::InterimThenChunkedWithTrailers => {
                let mut r = b"HTTP/1.1 100 Continue\r\n\r\n".to_vec();
                r.extend_from_slice(b"HTTP/1.1 200 OK\r\nContent-Type: text/csv\r\n");
                r.extend_from_slice(b"Transfer-Encoding: chunked\r\nTrailer: x-sum\r\n\r\n");
                for part in body.chunks(2) {
                    r.extend_from_slice(format!("{:X};ext=1\r\n", part.len()).as_bytes());
                    r.extend_from_slice(part);
                    r.extend_from_slice(b"\r\n");
                }
                r.extend_from_slice(b"0\r\nx-sum: 42\r\n\r\n");
                stream.write_all(&r).await.unwrap();
                continue;
            }
            Behaviour::UntilClose => {
                let mut r = b"HTTP/1.1 200 OK\r\n\r\n".to_vec();
                r.extend_from_slice(&body);
                let _ = stream.write_all(&r).await;
                return;
            }
            Behaviour::Garbage => {
                let _ = stream.write_all(b"SSH-2.0-OpenSSH_9.2\r\n\r\n").await;
                return;
            }
            Behaviour::EarlyNotFoundThenClose | Behaviour::EarlyNotFoundKeepOpen => unreachable!(),
            Behaviour::CutShort => {
                let _ = stream
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789")
                    .await;
                return;
            }
        };
        if !matches!(behaviour, Behaviour::Chunked) {
            reply.extend_from_slice(&body);
        }
        if stream.write_all(&reply).await.is_err() {
            return;
        }
        if matches!(behaviour, Behaviour::CloseAfterReply) {
            return;
        }
    }
}

fn adapter(port: u16) -> TinyfaasAdapter {
    let cfg: TinyfaasBackend = toml::from_str(&format!(
        "url = \"http://127.0.0.1:{port}\"\nmanager_url = \"http://127.0.0.1:{port}\"\n"
    ))
    .unwrap();
    TinyfaasAdapter::new(&cfg, &[]).unwrap()
}

async fn echo(adapter: &TinyfaasAdapter, body: &'static str) -> Result<bytes::Bytes, InvokeError> {
    adapter
        .invoke(call("echo", body, Duration::from_secs(5)))
        .await
        .map(|out| out.body.full().cloned().unwrap_or_default())
}

#[tokio::test]
async fn sequential_calls_reuse_one_connection() {
    let s = server(Behaviour::KeepAlive).await;
    let a = adapter(s.port);
    for body in ["one", "two", "three", "four", "five"] {
        assert_eq!(&echo(&a, body).await.unwrap()[..], body.as_bytes());
    }
    assert_eq!(s.connections.load(Ordering::SeqCst), 1);
    assert_eq!(s.requests.load(Ordering::SeqCst), 5);
}

#[tokio::test]
async fn concurrent_calls_open_connections_as_needed_and_all_succeed() {
    let s = server(Behaviour::KeepAlive).await;
    let a = Arc::new(adapter(s.port));
    let calls: Vec<_> = (0..16)
        .map(|_| {
            let a = a.clone();
            tokio::spawn(async move { echo(&a, "x").await })
        })
        .collect();
    for c in calls {
        assert_eq!(&c.await.unwrap().unwrap()[..], b"x");
    }
    assert_eq!(s.requests.load(Ordering::SeqCst), 16);
    assert!(s.connections.load(Ordering::SeqCst) <= 16);
}

#[tokio::test]
async fn a_connection_the_server_closed_while_idle_is_not_used() {
    let s = server(Behaviour::CloseAfterReply).await;
    let a = adapter(s.port);
    for body in ["one", "two", "three"] {
        assert_eq!(&echo(&a, body).await.unwrap()[..], body.as_bytes());
        // Let the server's FIN arrive, as it would on a connection idle past its timeout.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(s.connections.load(Ordering::SeqCst), 3);
    assert_eq!(s.requests.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn connection_close_is_honoured() {
    let s = server(Behaviour::ConnectionCloseHeader).await;
    let a = adapter(s.port);
    for body in ["one", "two", "three"] {
        assert_eq!(&echo(&a, body).await.unwrap()[..], body.as_bytes());
    }
    assert_eq!(s.connections.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn chunked_replies_are_reassembled() {
    let s = server(Behaviour::Chunked).await;
    let a = adapter(s.port);
    let body = "a body in three chunked parts";
    assert_eq!(&echo(&a, body).await.unwrap()[..], body.as_bytes());
    assert_eq!(&echo(&a, body).await.unwrap()[..], body.as_bytes());
    assert_eq!(s.connections.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn interim_replies_chunk_extensions_and_trailers_are_read_past() {
    let s = server(Behaviour::InterimThenChunkedWithTrailers).await;
    let a = adapter(s.port);
    for body in ["an odd-length body", "ab"] {
        let out = a
            .invoke(call("echo", body, Duration::from_secs(5)))
            .await
            .unwrap();
        assert_eq!(&out.body.full().unwrap()[..], body.as_bytes());
        assert_eq!(out.headers["content-type"], "text/csv");
    }
    // The trailers were consumed: the second call reused the connection.
    assert_eq!(s.connections.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_body_without_length_ends_with_the_connection_which_is_not_reused() {
    let s = server(Behaviour::UntilClose).await;
    let a = adapter(s.port);
    for body in ["one", "two"] {
        assert_eq!(&echo(&a, body).await.unwrap()[..], body.as_bytes());
    }
    assert_eq!(s.connections.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_server_that_does_not_speak_http_is_a_protocol_error() {
    let s = server(Behaviour::Garbage).await;
    let err = echo(&adapter(s.port), "x").await.unwrap_err();
    assert!(matches!(err, InvokeError::Protocol(_)), "{err:?}");
}

#[tokio::test]
async fn a_reply_cut_short_is_a_network_error_and_the_call_is_not_sent_again() {
    let s = server(Behaviour::CutShort).await;
    let a = adapter(s.port);
    let err = echo(&a, "once").await.unwrap_err();
    assert!(matches!(err, InvokeError::Network(_)), "{err:?}");
    assert!(err.is_retryable());
    assert_eq!(s.requests.load(Ordering::SeqCst), 1);
}

/// A body large enough that the kernel's socket buffers cannot take it all before the server's
/// answer arrives.
const LARGE: usize = 8 << 20;

#[tokio::test]
async fn an_answer_before_the_body_is_read_is_the_answer_when_the_server_then_closes() {
    let s = server(Behaviour::EarlyNotFoundThenClose).await;
    let a = adapter(s.port);
    let big = Invocation::new("echo", vec![b'x'; LARGE], Duration::from_secs(5));
    let err = a.invoke(big).await.unwrap_err();
    assert!(matches!(err, InvokeError::UnknownFunction(_)), "{err:?}");
    // The next call is not sent on that connection.
    let err = echo(&a, "small").await.unwrap_err();
    assert!(matches!(err, InvokeError::UnknownFunction(_)), "{err:?}");
    assert_eq!(s.connections.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn an_answer_before_the_body_is_read_stops_the_writing() {
    let s = server(Behaviour::EarlyNotFoundKeepOpen).await;
    let a = adapter(s.port);
    let big = Invocation::new("echo", vec![b'x'; LARGE], Duration::from_secs(10));
    let started = std::time::Instant::now();
    let err = a.invoke(big).await.unwrap_err();
    // Not a timeout: the answer came while the body could not be written any further.
    assert!(
        matches!(err, InvokeError::UnknownFunction(_)),
        "{err:?} after {:?}",
        started.elapsed()
    );
    assert_eq!(s.requests.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn nothing_listening_is_unavailable() {
    let port = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let err = echo(&adapter(port), "x").await.unwrap_err();
    assert!(matches!(err, InvokeError::Unavailable(_)), "{err:?}");
}
