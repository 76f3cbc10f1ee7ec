//! The batched UDP engine: one thread per socket, each reading up to [`BATCH`] queries per
//! `recvmmsg(2)` and sending their responses with one `sendmmsg(2)`; several `SO_REUSEPORT` sockets on the
//! same address let the kernel spread queries over threads, and so over cores.
//!
//! hickory-server's UDP path costs one `recvfrom`, one `sendto`, a spawned task and a channel hop per
//! query; profiling under dnsperf put well over half the server's time in those syscalls and wake-ups.
//! Answers here need no I/O (every record is precomputed, the GeoIP lookup is in memory), so each is
//! computed in place by [`GeoHandler::answer_udp`]: the hot query through the fast path, the rest through
//! hickory's decoder, the handler and hickory's encoder. A blocking thread per socket (rather than a
//! task on the shared runtime) keeps its buffers for its whole life and waits in `recvmmsg` itself, so
//! the sockets scale with cores independently of the runtime's workers. TCP stays on hickory's
//! [`hickory_server::Server`]. Linux only; elsewhere the server uses hickory's UDP path.

use std::io::{self, IoSlice, IoSliceMut};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::socket::{
    bind, recvmmsg, sendmmsg, setsockopt, socket, sockopt, AddressFamily, ControlMessage, MsgFlags,
    MultiHeaders, SockFlag, SockType, SockaddrStorage,
};

use crate::handler::GeoHandler;

/// Datagrams read per `recvmmsg` call.
pub const BATCH: usize = 32;
/// Largest query accepted over UDP; longer datagrams are truncated by the kernel and then fail to decode.
const MAX_QUERY: usize = 4096;
/// How often an idle thread looks whether the server has stopped.
const STOP_POLL: Duration = Duration::from_millis(200);

/// Binds a UDP socket on `addr` with `SO_REUSEPORT`, so that more sockets can join it on the same port
/// (see [`join`]). Port 0 picks a free port.
pub fn bind_reuseport(addr: SocketAddr) -> io::Result<UdpSocket> {
    let family = match addr {
        SocketAddr::V4(_) => AddressFamily::Inet,
        SocketAddr::V6(_) => AddressFamily::Inet6,
    };
    let fd: OwnedFd = socket(family, SockType::Datagram, SockFlag::SOCK_CLOEXEC, None)?;
    setsockopt(&fd, sockopt::ReusePort, &true)?;
    if addr.is_ipv6() {
        // As std binds: an IPv6 socket takes IPv6 only unless the system says otherwise.
        let _ = setsockopt(&fd, sockopt::Ipv6V6Only, &true);
    }
    bind(fd.as_raw_fd(), &SockaddrStorage::from(addr))?;
    Ok(UdpSocket::from(fd))
}

/// `extra` more sockets on the address of `first`, which must have been bound with `SO_REUSEPORT`
/// ([`bind_reuseport`]); an empty list (with a log line) when it was not.
pub fn join(first: &UdpSocket, extra: usize) -> io::Result<Vec<UdpSocket>> {
    if extra == 0 {
        return Ok(Vec::new());
    }
    let addr = first.local_addr()?;
    if !nix::sys::socket::getsockopt(first, sockopt::ReusePort).unwrap_or(false) {
        tracing::info!(%addr, "UDP socket bound without SO_REUSEPORT: serving it with one thread");
        return Ok(Vec::new());
    }
    (0..extra).map(|_| bind_reuseport(addr)).collect()
}

/// The running UDP threads; dropping this stops them and waits for them to end (each within
/// [`STOP_POLL`]), so their sockets are closed when it returns: a server started next on the
/// same port (a reload) never shares it with the old one through `SO_REUSEPORT`.
#[derive(Debug)]
pub struct UdpThreads {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Drop for UdpThreads {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Serves each socket on its own thread with `handler` until the returned guard is dropped.
pub fn spawn(sockets: Vec<UdpSocket>, handler: Arc<GeoHandler>) -> io::Result<UdpThreads> {
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::with_capacity(sockets.len());
    for (i, socket) in sockets.into_iter().enumerate() {
        socket.set_nonblocking(false)?;
        socket.set_read_timeout(Some(STOP_POLL))?;
        let (handler, flag) = (handler.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name(format!("geodns-udp-{i}"))
            .spawn(move || serve_socket(&socket, &handler, &flag));
        match thread {
            Ok(t) => threads.push(t),
            Err(e) => {
                // Stop (and join) the threads already running before giving up.
                drop(UdpThreads { stop, threads });
                return Err(e);
            }
        }
    }
    Ok(UdpThreads { stop, threads })
}

/// One socket's loop: a batch in, a batch of answers out, until `stop`.
fn serve_socket(socket: &UdpSocket, handler: &GeoHandler, stop: &AtomicBool) {
    let mut bufs: Vec<Vec<u8>> = (0..BATCH).map(|_| vec![0u8; MAX_QUERY]).collect();
    let mut outs: Vec<Vec<u8>> = (0..BATCH).map(|_| Vec::with_capacity(512)).collect();
    let mut received: Vec<(usize, Option<SocketAddr>)> = Vec::with_capacity(BATCH);
    let mut replies: Vec<(usize, SocketAddr)> = Vec::with_capacity(BATCH);
    while !stop.load(Ordering::Relaxed) {
        match receive(socket, &mut bufs, &mut received) {
            Ok(()) => {}
            Err(Errno::EAGAIN | Errno::EINTR) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "recvmmsg failed");
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        }
        replies.clear();
        for (slot, (buf, &(len, src))) in bufs.iter().zip(&received).enumerate() {
            let Some(src) = src.filter(|s| s.port() != 0) else {
                continue;
            };
            let raw = buf.get(..len).unwrap_or_default();
            if handler.answer_udp(raw, src, &mut outs[slot]) {
                replies.push((slot, src));
            }
        }
        send_all(socket, &outs, &replies);
    }
}

/// Waits for at least one datagram and reads up to a batch into `bufs`, noting each one's length and
/// source in `received`.
fn receive(
    socket: &UdpSocket,
    bufs: &mut [Vec<u8>],
    received: &mut Vec<(usize, Option<SocketAddr>)>,
) -> Result<(), Errno> {
    received.clear();
    let mut slices: Vec<[IoSliceMut<'_>; 1]> =
        bufs.iter_mut().map(|b| [IoSliceMut::new(b)]).collect();
    // Made per call: recvmmsg does not reset the address lengths the kernel wrote last time.
    let mut headers = MultiHeaders::<SockaddrStorage>::preallocate(slices.len(), None);
    let results = recvmmsg(
        socket.as_raw_fd(),
        &mut headers,
        slices.iter_mut(),
        MsgFlags::MSG_WAITFORONE,
        None,
    )?;
    received.extend(results.map(|m| (m.bytes, m.address.and_then(to_socket_addr))));
    Ok(())
}

/// Sends `outs[slot]` to each reply's address with `sendmmsg`, skipping a datagram the kernel refuses.
fn send_all(socket: &UdpSocket, outs: &[Vec<u8>], replies: &[(usize, SocketAddr)]) {
    let mut start = 0;
    while start < replies.len() {
        let batch = &replies[start..];
        let slices: Vec<[IoSlice<'_>; 1]> = batch
            .iter()
            .map(|&(slot, _)| [IoSlice::new(&outs[slot])])
            .collect();
        let addrs: Vec<Option<SockaddrStorage>> = batch
            .iter()
            .map(|&(_, a)| Some(SockaddrStorage::from(a)))
            .collect();
        let cmsgs: [ControlMessage<'_>; 0] = [];
        let mut headers = MultiHeaders::<SockaddrStorage>::preallocate(batch.len(), None);
        match sendmmsg(
            socket.as_raw_fd(),
            &mut headers,
            slices.iter(),
            addrs,
            cmsgs,
            MsgFlags::empty(),
        ) {
            // A blocking sendmmsg sends at least one; count 0 would only loop, so skip one then.
            Ok(results) => start += results.count().max(1),
            Err(Errno::EINTR) => {}
            Err(e) => {
                tracing::debug!(addr = %batch[0].1, error = %e, "could not send response");
                start += 1;
            }
        }
    }
}

fn to_socket_addr(s: SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = s.as_sockaddr_in() {
        return Some(SocketAddr::V4((*v4).into()));
    }
    s.as_sockaddr_in6().map(|v6| SocketAddr::V6((*v6).into()))
}
