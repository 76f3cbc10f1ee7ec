//! Request bodies: reading a call's body within the limit, and finishing every body a handler
//! answered without reading, so that HTTP/2 clients get every early answer.
//!
//! Why the second part exists: when a handler answers before the request body has arrived
//! (a `307` handover, a `404`, a `400`, a `413`), hyper ends the response stream and then resets
//! the half-read request stream (`RST_STREAM`). RFC 9113 §8.1 allows that, but clients that are
//! still uploading (curl up to at least 7.88, some mobile stacks) report the reset as a failed
//! transfer and drop the answer they had already received: curl exits with code 92 and status
//! `000`. [`finish_unread`] keeps the unread body alive after the answer has been sent and reads
//! it to its end in the background (bounded in bytes and time), so the stream closes normally.
//! It is one layer over the whole router, so no handler has to remember it.

use parking_lot::Mutex;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderMap};
use axum::response::Response;
use bytes::{Bytes, BytesMut};
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::BodyExt;

use crate::error::ApiError;

/// How long an unread body is read on after its answer was sent, at most.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes of an unread body read on at least, whatever `max_body_bytes` is: a client whose body
/// is over a small limit still gets its `413`.
pub const DRAIN_FLOOR: usize = 16 * 1024 * 1024;

/// Reads the whole body within `timeout`, refusing (413) more than `limit` bytes whether
/// announced or streamed, and a body still arriving after `timeout` (408, slow clients).
///
/// On a 413 or 408 the rest of the body is left to [`finish_unread`].
pub async fn read(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
    timeout: Duration,
) -> Result<Bytes, ApiError> {
    tokio::time::timeout(timeout, read_all(headers, body, limit))
        .await
        .unwrap_or_else(|_| {
            Err(ApiError::new(
                axum::http::StatusCode::REQUEST_TIMEOUT,
                "body_timeout",
                format!(
                    "the request body did not arrive within {} ms",
                    timeout.as_millis()
                ),
            ))
        })
}

async fn read_all(headers: &HeaderMap, body: Body, limit: usize) -> Result<Bytes, ApiError> {
    let announced = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if announced.is_some_and(|n| n > limit as u64) {
        return Err(ApiError::body_too_large(limit));
    }
    let mut body = body;
    // A body that arrives in one chunk (most calls) is passed on as it is, without a copy.
    let mut first: Option<Bytes> = None;
    let mut buf = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|_| ApiError::bad_body())?;
        let Ok(chunk) = frame.into_data() else {
            continue;
        };
        let so_far = first.as_ref().map_or(0, Bytes::len) + buf.len();
        if so_far + chunk.len() > limit {
            return Err(ApiError::body_too_large(limit));
        }
        match first.take() {
            None if buf.is_empty() => first = Some(chunk),
            held => {
                if let Some(held) = held {
                    buf.reserve(
                        announced
                            .map_or(0, |n| n as usize)
                            .max(held.len() + chunk.len()),
                    );
                    buf.extend_from_slice(&held);
                }
                buf.extend_from_slice(&chunk);
            }
        }
    }
    Ok(first.unwrap_or_else(|| buf.freeze()))
}

/// Runs the handler, then reads whatever it left of the request body to its end in a
/// background task, at most the larger of `limit` and [`DRAIN_FLOOR`] bytes more, for at most
/// [`DRAIN_TIMEOUT`].
pub async fn finish_unread<F, Fut>(limit: usize, req: Request, handler: F) -> Response
where
    F: FnOnce(Request) -> Fut,
    Fut: Future<Output = Response>,
{
    let slot = Arc::new(Mutex::new(None));
    let req = req.map(|inner| {
        Body::new(Tracked {
            inner: Some(inner),
            slot: slot.clone(),
        })
    });
    let response = handler(req).await;
    let unread = slot.lock().take();
    // A client too slow to send its body (408) is not waited for a second time.
    let slow = response.status() == axum::http::StatusCode::REQUEST_TIMEOUT;
    if let Some(body) = unread.filter(|_| !slow) {
        finish(body, limit);
    }
    response
}

/// Reads a body nothing will read to its end in the background, within the same bounds as
/// [`finish_unread`].
pub fn finish(body: Body, limit: usize) {
    tokio::spawn(drain(body, limit.max(DRAIN_FLOOR)));
}

/// Reads and discards `body` until it ends, `limit` bytes were read, or the time is up; the
/// stream is reset only when a bound is hit.
async fn drain(mut body: Body, limit: usize) {
    let read_on = async {
        let mut drained = 0usize;
        while let Some(Ok(frame)) = body.frame().await {
            if let Some(chunk) = frame.data_ref() {
                drained += chunk.len();
                if drained > limit {
                    tracing::debug!(drained, "unread request body over the limit: resetting");
                    return;
                }
            }
        }
    };
    if tokio::time::timeout(DRAIN_TIMEOUT, read_on).await.is_err() {
        tracing::debug!("unread request body still arriving after the drain timeout: resetting");
    }
}

/// A request body that, when dropped before its end, hands itself back through `slot`.
struct Tracked {
    inner: Option<Body>,
    slot: Arc<Mutex<Option<Body>>>,
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let Some(inner) = self.inner.as_mut() else {
            return Poll::Ready(None);
        };
        let polled = Pin::new(inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None)) {
            self.inner = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(HttpBody::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), HttpBody::size_hint)
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.take() {
            if !inner.is_end_stream() {
                *self.slot.lock() = Some(inner);
            }
        }
    }
}
