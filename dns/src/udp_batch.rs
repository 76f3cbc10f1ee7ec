//! A batched UDP loop for the same [`RequestHandler`]: up to [`BATCH`] queries per `recvmmsg(2)` and their
//! responses in one `sendmmsg(2)`.
//!
//! hickory-server's UDP path costs one `recvfrom`, one `sendto`, a spawned task and a channel hop per
//! query; profiling under dnsperf put well over half the server's time in those syscalls and wake-ups.
//! Answers here need no I/O (every record is precomputed, the GeoIP lookup is in memory), so each
//! handler future completes on its first poll and a whole batch is answered in one pass. TCP stays on
//! hickory's [`hickory_server::Server`]. Linux only; elsewhere the server uses hickory's UDP path.

use std::io::{self, IoSlice, IoSliceMut};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex};

use hickory_server::net::runtime::TokioTime;
use hickory_server::net::xfer::Protocol;
use hickory_server::net::NetError;
use hickory_server::proto::rr::Record;
use hickory_server::proto::serialize::binary::BinEncoder;
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::MessageResponse;
use nix::sys::socket::{
    recvmmsg, sendmmsg, ControlMessage, MsgFlags, MultiHeaders, SockaddrStorage,
};
use tokio::io::Interest;
use tokio::net::UdpSocket;

/// Datagrams read per `recvmmsg` call.
pub const BATCH: usize = 32;
/// Largest query accepted over UDP; longer datagrams are truncated by the kernel and then fail to decode.
const MAX_QUERY: usize = 4096;

/// Collects the encoded response instead of sending it.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Option<Vec<u8>>>>);

#[async_trait::async_trait]
impl ResponseHandler for Capture {
    async fn send_response<'a>(
        &mut self,
        response: MessageResponse<
            '_,
            'a,
            impl Iterator<Item = &'a Record> + Send + 'a,
            impl Iterator<Item = &'a Record> + Send + 'a,
            impl Iterator<Item = &'a Record> + Send + 'a,
            impl Iterator<Item = &'a Record> + Send + 'a,
        >,
    ) -> Result<ResponseInfo, NetError> {
        // Without EDNS the requester can take 512 bytes (RFC 1035 4.2.1); with it, what we advertise.
        let max = response.edns().map_or(512, |e| e.max_payload().max(512));
        let mut bytes = Vec::with_capacity(256);
        let mut encoder = BinEncoder::new(&mut bytes);
        encoder.set_max_size(max);
        let info = response.destructive_emit(&mut encoder)?;
        if let Ok(mut slot) = self.0.lock() {
            *slot = Some(bytes);
        }
        Ok(info)
    }
}

/// Serves queries on `socket` with `handler` until the future is dropped.
pub async fn serve_udp<H: RequestHandler>(socket: UdpSocket, handler: Arc<H>) -> io::Result<()> {
    let mut bufs: Vec<Vec<u8>> = (0..BATCH).map(|_| vec![0u8; MAX_QUERY]).collect();
    let capture = Capture::default();
    let fd = socket.as_raw_fd();
    loop {
        socket.readable().await?;
        let received = socket.try_io(Interest::READABLE, || {
            let mut slices: Vec<[IoSliceMut<'_>; 1]> =
                bufs.iter_mut().map(|b| [IoSliceMut::new(b)]).collect();
            // Made per call: the headers hold raw pointers, so they cannot live across an await in a
            // spawned (Send) task.
            let mut headers = MultiHeaders::<SockaddrStorage>::preallocate(BATCH, None);
            let results = recvmmsg(
                fd,
                &mut headers,
                slices.iter_mut(),
                MsgFlags::MSG_DONTWAIT,
                None,
            )
            .map_err(io::Error::from)?;
            Ok(results
                .map(|m| (m.bytes, m.address.and_then(to_socket_addr)))
                .collect::<Vec<_>>())
        });
        let received = match received {
            Ok(r) => r,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => {
                tracing::warn!(error = %e, "recvmmsg failed");
                continue;
            }
        };
        let mut replies: Vec<(Vec<u8>, SocketAddr)> = Vec::with_capacity(received.len());
        for (buf, (len, src)) in bufs.iter().zip(received) {
            let Some(src) = src.filter(|s| s.port() != 0) else {
                continue;
            };
            let raw = buf.get(..len).unwrap_or_default();
            if let Some(reply) = answer(&*handler, raw, src, &capture).await {
                replies.push((reply, src));
            }
        }
        send_all(&socket, &replies).await;
    }
}

/// The response to one datagram, or `None` to stay silent (not a query, or shorter than a header).
async fn answer<H: RequestHandler>(
    handler: &H,
    raw: &[u8],
    src: SocketAddr,
    capture: &Capture,
) -> Option<Vec<u8>> {
    let header = raw.get(..12)?;
    if header[2] & 0x80 != 0 {
        return None; // a response: never answer, so we cannot be used for reflection loops
    }
    let Ok(request) = Request::from_bytes(raw.to_vec(), src, Protocol::Udp) else {
        // Undecodable: FORMERR with the id, opcode and RD of the query and no sections (as hickory does).
        let mut reply = header.to_vec();
        reply[2] = 0x80 | (header[2] & 0x79);
        reply[3] = 0x01;
        reply[4..12].fill(0);
        return Some(reply);
    };
    handler
        .handle_request::<_, TokioTime>(&request, capture.clone())
        .await;
    capture.0.lock().ok()?.take()
}

/// Sends the replies with `sendmmsg`, falling back to one `send_to` each for whatever it did not take.
async fn send_all(socket: &UdpSocket, replies: &[(Vec<u8>, SocketAddr)]) {
    if replies.is_empty() {
        return;
    }
    let sent = socket
        .try_io(Interest::WRITABLE, || {
            let slices: Vec<[IoSlice<'_>; 1]> =
                replies.iter().map(|(b, _)| [IoSlice::new(b)]).collect();
            let addrs: Vec<Option<SockaddrStorage>> = replies
                .iter()
                .map(|(_, a)| Some(SockaddrStorage::from(*a)))
                .collect();
            let cmsgs: [ControlMessage<'_>; 0] = [];
            let mut headers = MultiHeaders::<SockaddrStorage>::preallocate(replies.len(), None);
            let results = sendmmsg(
                socket.as_raw_fd(),
                &mut headers,
                slices.iter(),
                addrs,
                cmsgs,
                MsgFlags::MSG_DONTWAIT,
            )
            .map_err(io::Error::from)?;
            Ok(results.count())
        })
        .unwrap_or(0);
    for (bytes, addr) in replies.iter().skip(sent) {
        if let Err(e) = socket.send_to(bytes, addr).await {
            tracing::debug!(%addr, error = %e, "could not send response");
        }
    }
}

fn to_socket_addr(s: SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = s.as_sockaddr_in() {
        return Some(SocketAddr::V4((*v4).into()));
    }
    s.as_sockaddr_in6().map(|v6| SocketAddr::V6((*v6).into()))
}
