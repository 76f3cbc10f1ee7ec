//! A fault proxy for the fault tests: a TCP proxy on loopback between two nodes that passes
//! bytes through, or refuses connections, black-holes them (accepts and never answers), delays
//! each direction, or cuts a connection once the request went out, and heals, per link and
//! while connections are open. This kernel has no `tc netem`, so faults live in user space.
//!
//! A node reaches another through it when the other's `public_url` names the proxy's port and
//! its `listen` the real one (TLS passes through untouched: the proxy only moves bytes).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What the link does now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Bytes pass both ways.
    Pass,
    /// New connections are closed at once; open ones are cut.
    Refuse,
    /// New connections are accepted and never answered; on open ones nothing goes through
    /// either way until the fault ends, then the held bytes go on (as TCP would retransmit
    /// them): a peer that takes the request and never answers, or a route that swallows
    /// packets for a while.
    Blackhole,
    /// Each chunk waits this long before it goes on, in both directions.
    Delay(Duration),
    /// Requests pass, answers never come back: the connection dies after the request went out.
    DropAnswers,
}

/// Bytes and connections the proxy saw, for a test's counts.
#[derive(Debug, Default)]
pub struct Counts {
    /// Connections accepted.
    pub connections: AtomicU64,
    /// Bytes passed toward the upstream.
    pub up_bytes: AtomicU64,
    /// Bytes passed back to the client.
    pub down_bytes: AtomicU64,
}

/// A running fault proxy.
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    fault: watch::Sender<Fault>,
    counts: Arc<Counts>,
    task: JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on `listen` (port 0: any free one) and forwards to `upstream`, passing bytes.
    pub async fn start(listen: SocketAddr, upstream: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        let (fault, rx) = watch::channel(Fault::Pass);
        let counts = Arc::new(Counts::default());
        let c = counts.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                c.connections.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(relay(client, upstream, rx.clone(), c.clone()));
            }
        });
        Ok(Self {
            addr,
            fault,
            counts,
            task,
        })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Switches the link to `fault`, for new and open connections alike.
    pub fn set(&self, fault: Fault) {
        self.fault.send_replace(fault);
    }

    /// Back to passing bytes.
    pub fn heal(&self) {
        self.set(Fault::Pass);
    }

    /// What passed so far.
    pub fn counts(&self) -> &Counts {
        &self.counts
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Moves one connection's bytes both ways under the current fault.
async fn relay(
    mut client: TcpStream,
    upstream: SocketAddr,
    mut fault: watch::Receiver<Fault>,
    counts: Arc<Counts>,
) {
    let now = *fault.borrow_and_update();
    match now {
        Fault::Refuse => return,
        Fault::Blackhole => {
            swallow(&mut client, &mut fault).await;
            return;
        }
        _ => {}
    }
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    let up = pipe(cr, sw, fault.clone(), counts.clone(), true);
    let down = pipe(sr, cw, fault, counts, false);
    // Either side closing ends the connection.
    tokio::select! {
        () = up => {}
        () = down => {}
    }
}

/// Reads and discards until the client goes or the link heals (then closes: the client
/// sees a dead connection, as after a route came back).
async fn swallow(client: &mut TcpStream, fault: &mut watch::Receiver<Fault>) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        tokio::select! {
            n = client.read(&mut buf) => if !matches!(n, Ok(n) if n > 0) { return },
            changed = fault.changed() => if changed.is_err() || *fault.borrow() != Fault::Blackhole { return },
        }
    }
}

/// Copies one direction, applying the fault to each chunk.
async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut fault: watch::Receiver<Fault>,
    counts: Arc<Counts>,
    toward_upstream: bool,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = tokio::select! {
            n = from.read(&mut buf) => match n {
                Ok(n) if n > 0 => n,
                _ => return,
            },
            changed = fault.changed() => {
                if changed.is_err() || *fault.borrow() == Fault::Refuse {
                    return;
                }
                continue;
            }
        };
        // A black hole holds the bytes (TCP would retransmit them) until it ends.
        while *fault.borrow() == Fault::Blackhole {
            if fault.changed().await.is_err() {
                return;
            }
        }
        let now = *fault.borrow();
        match now {
            Fault::Refuse => return,
            Fault::DropAnswers if !toward_upstream => continue,
            Fault::Delay(d) => tokio::time::sleep(d).await,
            _ => {}
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
        let counter = match toward_upstream {
            true => &counts.up_bytes,
            false => &counts.down_bytes,
        };
        counter.fetch_add(n as u64, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// An echo server: answers each read with the same bytes.
    async fn echo() -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        addr
    }

    async fn round_trip(addr: SocketAddr, wait: Duration) -> Option<Vec<u8>> {
        let mut s = TcpStream::connect(addr).await.ok()?;
        s.write_all(b"ping").await.ok()?;
        let mut buf = [0u8; 4];
        match tokio::time::timeout(wait, s.read_exact(&mut buf)).await {
            Ok(Ok(_)) => Some(buf.to_vec()),
            _ => None,
        }
    }

    #[tokio::test]
    async fn each_fault_does_what_it_says_and_heals() {
        let p = FaultProxy::start("127.0.0.1:0".parse().unwrap(), echo().await)
            .await
            .unwrap();
        let wait = Duration::from_millis(300);
        assert_eq!(
            round_trip(p.addr(), wait).await.as_deref(),
            Some(&b"ping"[..])
        );

        p.set(Fault::Refuse);
        assert_eq!(round_trip(p.addr(), wait).await, None);

        p.set(Fault::Blackhole);
        let started = Instant::now();
        assert_eq!(round_trip(p.addr(), wait).await, None);
        assert!(
            started.elapsed() >= wait,
            "a black hole holds the connection open"
        );

        p.set(Fault::DropAnswers);
        let up_before = p.counts().up_bytes.load(Ordering::Relaxed);
        assert_eq!(round_trip(p.addr(), wait).await, None);
        assert_eq!(
            p.counts().up_bytes.load(Ordering::Relaxed),
            up_before + 4,
            "the request went out"
        );

        p.set(Fault::Delay(Duration::from_millis(150)));
        let started = Instant::now();
        assert_eq!(
            round_trip(p.addr(), Duration::from_secs(2))
                .await
                .as_deref(),
            Some(&b"ping"[..])
        );
        assert!(
            started.elapsed() >= Duration::from_millis(300),
            "150 ms each way"
        );

        p.heal();
        assert_eq!(
            round_trip(p.addr(), wait).await.as_deref(),
            Some(&b"ping"[..])
        );
    }

    #[tokio::test]
    async fn an_open_connection_follows_the_fault() {
        let p = FaultProxy::start("127.0.0.1:0".parse().unwrap(), echo().await)
            .await
            .unwrap();
        let mut s = TcpStream::connect(p.addr()).await.unwrap();
        let mut buf = [0u8; 4];
        s.write_all(b"one!").await.unwrap();
        s.read_exact(&mut buf).await.unwrap();
        p.set(Fault::Blackhole);
        s.write_all(b"two!").await.unwrap();
        let r = tokio::time::timeout(Duration::from_millis(300), s.read_exact(&mut buf)).await;
        assert!(r.is_err(), "nothing comes back through a black hole");
        p.set(Fault::Refuse);
        let mut rest = Vec::new();
        let r = tokio::time::timeout(Duration::from_secs(2), s.read_to_end(&mut rest)).await;
        assert!(r.is_ok(), "a refused link closes the open connection");
    }
}
