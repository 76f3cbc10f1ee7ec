//! The loadtest's own delay model: TCP relays that forward bytes after a fixed one-way delay.
//!
//! Where a kernel has no `sch_netem` (so `--netem` cannot run), `--spawn` puts a [`Relay`] in
//! front of the nodes and rewrites their `public_url`s to it (see [`crate::spawn`]). A relay
//! accepts a connection, connects to its target and pumps bytes both ways. Every chunk it reads
//! is stamped with the time it was read plus the delay and written to the other side no earlier
//! than that, in the order it was read (one FIFO per direction, so nothing is ever reordered).
//! Nothing is dropped: the model adds latency, never loss. An end of stream (a half-close) is
//! passed on after the same delay, and a connection reset on one side is passed on as a reset
//! on the other.
//!
//! What it does not model: the TCP handshake with the relay completes at once (the kernel does
//! it on loopback), so a new connection pays the delay for its TLS handshake and its data but
//! not for SYN/SYN-ACK; and bandwidth is not limited.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

/// Largest chunk read at once.
const CHUNK: usize = 16 * 1024;
/// Chunks in flight per direction before the relay stops reading (TCP back-pressure).
const IN_FLIGHT: usize = 256;

/// A TCP relay that delays each direction by `one_way`. Dropping it closes the listener and
/// every connection it carries.
#[derive(Debug)]
pub struct Relay {
    addr: SocketAddr,
    target: SocketAddr,
    one_way: Duration,
    task: JoinHandle<()>,
}

impl Relay {
    /// Listens on `listen` (port 0: any free port) and relays to `target` with `one_way` delay
    /// in each direction.
    pub async fn start(
        listen: SocketAddr,
        target: SocketAddr,
        one_way: Duration,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(accept_loop(listener, target, one_way));
        Ok(Self {
            addr,
            target,
            one_way,
            task,
        })
    }

    /// The address the relay listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address it relays to.
    pub fn target(&self) -> SocketAddr {
        self.target
    }

    /// The delay of each direction.
    pub fn one_way(&self) -> Duration {
        self.one_way
    }

    /// Whether the relay still accepts connections (false only if its task ended).
    pub fn is_running(&self) -> bool {
        !self.task.is_finished()
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn accept_loop(listener: TcpListener, target: SocketAddr, one_way: Duration) {
    // Owned here, so aborting this task drops (and aborts) every connection task too.
    let mut conns = JoinSet::new();
    loop {
        while conns.try_join_next().is_some() {}
        match listener.accept().await {
            Ok((inbound, _)) => {
                conns.spawn(relay_connection(inbound, target, one_way));
            }
            Err(e) => {
                // E.g. too many open files: keep serving the connections already open.
                tracing::warn!(error = %e, "relay accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

async fn relay_connection(inbound: TcpStream, target: SocketAddr, one_way: Duration) {
    let outbound = match TcpStream::connect(target).await {
        Ok(s) => s,
        Err(e) => {
            // The target is down: the caller sees its connection reset, as it would see the
            // refusal of a real link (after the delay a real SYN would take).
            tracing::debug!(%target, error = %e, "relay target refused");
            tokio::time::sleep(one_way).await;
            reset(&inbound);
            return;
        }
    };
    let _ = inbound.set_nodelay(true);
    let _ = outbound.set_nodelay(true);
    let (in_read, in_write) = inbound.into_split();
    let (out_read, out_write) = outbound.into_split();
    tokio::join!(
        pipe(in_read, out_write, one_way),
        pipe(out_read, in_write, one_way)
    );
}

/// What a reader passes to its writer.
enum Msg {
    Data(Bytes),
    /// The source half-closed: shut down the write side.
    Eof,
    /// The source reset (or failed): reset the other side.
    Reset,
}

/// One direction: read chunks from `from`, write each to `to` once its time has come.
async fn pipe(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, one_way: Duration) {
    let (tx, mut rx) = mpsc::channel::<(Instant, Msg)>(IN_FLIGHT);
    let reader = async move {
        let mut buf = BytesMut::new();
        loop {
            buf.reserve(CHUNK);
            let msg = match from.read_buf(&mut buf).await {
                Ok(0) => Msg::Eof,
                Ok(_) => Msg::Data(buf.split().freeze()),
                Err(_) => Msg::Reset,
            };
            let last = !matches!(msg, Msg::Data(_));
            // The writer is gone (its peer failed): stop reading.
            if tx.send((Instant::now() + one_way, msg)).await.is_err() || last {
                break;
            }
        }
    };
    let writer = async move {
        while let Some((due, msg)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            match msg {
                Msg::Data(b) => {
                    if to.write_all(&b).await.is_err() {
                        reset(to.as_ref());
                        break;
                    }
                }
                Msg::Eof => {
                    let _ = to.shutdown().await;
                    break;
                }
                Msg::Reset => {
                    reset(to.as_ref());
                    break;
                }
            }
        }
    };
    tokio::join!(reader, writer);
}

/// Makes the socket send a reset when it is closed (`SO_LINGER` 0). On a non-blocking socket a
/// zero linger never blocks, which is what tokio's deprecation warns about.
fn reset(s: &TcpStream) {
    #[allow(deprecated)]
    let _ = s.set_linger(Some(Duration::ZERO));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant as StdInstant;

    const D: Duration = Duration::from_millis(30);

    async fn server() -> (TcpListener, SocketAddr) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = l.local_addr().unwrap();
        (l, a)
    }

    async fn relay_to(target: SocketAddr, d: Duration) -> Relay {
        Relay::start("127.0.0.1:0".parse().unwrap(), target, d)
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn delays_each_direction_by_at_least_the_one_way_delay() {
        let (l, target) = server().await;
        let relay = relay_to(target, D).await;
        let srv = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut b = [0u8; 4];
            s.read_exact(&mut b).await.unwrap();
            let got = StdInstant::now();
            s.write_all(b"pong").await.unwrap();
            (got, StdInstant::now())
        });
        let mut c = TcpStream::connect(relay.local_addr()).await.unwrap();
        let sent = StdInstant::now();
        c.write_all(b"ping").await.unwrap();
        let mut b = [0u8; 4];
        c.read_exact(&mut b).await.unwrap();
        let back = StdInstant::now();
        assert_eq!(&b, b"pong");
        let (got, replied) = srv.await.unwrap();
        // Lower bounds of the model (the relay never forwards before a chunk is due).
        assert!(got - sent >= D, "client to server took {:?}", got - sent);
        assert!(
            back - replied >= D,
            "server to client took {:?}",
            back - replied
        );
        assert!(back - sent >= 2 * D);
    }

    #[tokio::test]
    async fn keeps_the_order_of_many_small_writes_and_passes_the_end_of_stream_on() {
        let (l, target) = server().await;
        let relay = relay_to(target, Duration::from_millis(2)).await;
        let srv = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut all = Vec::new();
            // Ends only if the client's shutdown reached the server as an end of stream.
            s.read_to_end(&mut all).await.unwrap();
            all
        });
        let mut c = TcpStream::connect(relay.local_addr()).await.unwrap();
        let mut expected = Vec::new();
        for i in 0u32..5000 {
            let chunk = i.to_be_bytes();
            expected.extend_from_slice(&chunk);
            c.write_all(&chunk).await.unwrap();
            if i % 500 == 0 {
                tokio::task::yield_now().await;
            }
        }
        // A large write too (many chunks of CHUNK bytes).
        let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        expected.extend_from_slice(&big);
        c.write_all(&big).await.unwrap();
        c.shutdown().await.unwrap();
        assert_eq!(srv.await.unwrap(), expected);
    }

    #[tokio::test]
    async fn a_half_close_leaves_the_other_direction_open() {
        let (l, target) = server().await;
        let relay = relay_to(target, Duration::from_millis(5)).await;
        let srv = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut req = Vec::new();
            s.read_to_end(&mut req).await.unwrap();
            // The client can no longer send, but still reads.
            s.write_all(b"answer to ").await.unwrap();
            s.write_all(&req).await.unwrap();
            s.shutdown().await.unwrap();
        });
        let mut c = TcpStream::connect(relay.local_addr()).await.unwrap();
        c.write_all(b"question").await.unwrap();
        c.shutdown().await.unwrap();
        let mut answer = Vec::new();
        c.read_to_end(&mut answer).await.unwrap();
        assert_eq!(answer, b"answer to question");
        srv.await.unwrap();
    }

    #[tokio::test]
    async fn survives_reset_peers_and_a_dead_target() {
        let (l, target) = server().await;
        let relay = relay_to(target, Duration::from_millis(2)).await;
        // The server resets the connection.
        let srv = tokio::spawn(async move {
            let (s, _) = l.accept().await.unwrap();
            reset(&s);
            drop(s);
            l
        });
        let mut c = TcpStream::connect(relay.local_addr()).await.unwrap();
        let _ = c.write_all(b"hello").await;
        let mut buf = Vec::new();
        // Either an error (reset) or an end of stream, never a hang or a panic.
        let _ = c.read_to_end(&mut buf).await;
        assert!(buf.is_empty());
        let l = srv.await.unwrap();

        // The client resets its connection mid-stream.
        let srv = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut b = Vec::new();
            let _ = s.read_to_end(&mut b).await;
            l
        });
        let mut c = TcpStream::connect(relay.local_addr()).await.unwrap();
        c.write_all(b"partial").await.unwrap();
        reset(&c);
        drop(c);
        let l = srv.await.unwrap();

        // The relay still works afterwards.
        let srv = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            s.write_all(b"ok").await.unwrap();
        });
        let mut c = TcpStream::connect(relay.local_addr()).await.unwrap();
        let mut b = [0u8; 2];
        c.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"ok");
        srv.await.unwrap();
        assert!(relay.is_running());

        // A target that refuses: the caller's connection ends, the relay keeps running.
        let (l, dead) = server().await;
        drop(l);
        let relay = relay_to(dead, Duration::from_millis(2)).await;
        let mut c = TcpStream::connect(relay.local_addr()).await.unwrap();
        let mut buf = Vec::new();
        let _ = c.read_to_end(&mut buf).await;
        assert!(buf.is_empty());
        assert!(relay.is_running());
    }
}
