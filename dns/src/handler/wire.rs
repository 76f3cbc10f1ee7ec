//! The hickory path for one UDP datagram, outside hickory's own server loop: decode with
//! [`Request::from_bytes`], run the [`RequestHandler`], and capture the encoded response instead of
//! sending it. The batched UDP loop falls back to this for every query the fast path does not take, the
//! fast path builds its templates with it, and the differential tests compare against it.

use parking_lot::Mutex;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;

use hickory_server::net::runtime::TokioTime;
use hickory_server::net::xfer::Protocol;
use hickory_server::net::NetError;
use hickory_server::proto::rr::Record;
use hickory_server::proto::serialize::binary::BinEncoder;
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::MessageResponse;

/// Collects the encoded response instead of sending it.
#[derive(Clone, Default)]
pub(crate) struct Capture(Arc<Mutex<Option<Vec<u8>>>>);

impl Capture {
    /// The response captured since the last call, if any.
    pub fn take(&self) -> Option<Vec<u8>> {
        self.0.lock().take()
    }
}

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
        *self.0.lock() = Some(bytes);
        Ok(info)
    }
}

/// The response hickory's path gives to one UDP datagram `raw` from `src`, or `None` to stay silent
/// (shorter than a header, or a response: answering those could start a reflection loop).
pub(crate) fn answer_with_hickory<H: RequestHandler>(
    handler: &H,
    raw: &[u8],
    src: SocketAddr,
) -> Option<Vec<u8>> {
    let header = raw.get(..12)?;
    if header[2] & 0x80 != 0 {
        return None;
    }
    let Ok(request) = Request::from_bytes(raw.to_vec(), src, Protocol::Udp) else {
        // Undecodable: FORMERR with the id, opcode and RD of the query and no sections (as hickory does).
        let mut reply = header.to_vec();
        reply[2] = 0x80 | (header[2] & 0x79);
        reply[3] = 0x01;
        reply[4..12].fill(0);
        return Some(reply);
    };
    let capture = Capture::default();
    block_on(handler.handle_request::<_, TokioTime>(&request, capture.clone()));
    capture.take()
}

/// Wakes the thread that polls.
struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// Runs `fut` to completion on this thread. The geo handler never waits for I/O (every record is
/// precomputed, the GeoIP lookup is in memory, [`Capture`] only encodes), so this returns after the first
/// poll; parking only covers a future that would ever wait.
pub(crate) fn block_on<F: Future>(fut: F) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}
