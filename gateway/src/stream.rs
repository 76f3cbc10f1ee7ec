//! A function's body on its way to the client: whole, or streamed as the function produces it
//! (chunked over HTTP/1.1, DATA frames over h2), never buffered here.
//!
//! A streamed body is watched: its first byte's time after the call arrived is exported
//! (`geofaas_stream_first_byte_seconds`); a stream the function broke off or that went over
//! the output limit is cut (the client sees an incomplete body: no final chunk over h1, a reset
//! stream over h2) and logged; a client that goes away drops the body, which stops the
//! function's stream (`geofaas_streams_cut_total{why}`).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::body::Body;
use bytes::Bytes;
use futures::Stream;
use geofaas_functions::{ByteStream, InvokeError, Payload};

use crate::metrics::NodeMetrics;

/// The answer's body for `payload` of `function`, a call received at `received`.
pub fn body(
    payload: Payload,
    function: &str,
    received: Instant,
    metrics: &Arc<NodeMetrics>,
) -> Body {
    match payload {
        Payload::Full(bytes) => Body::from(bytes),
        Payload::Stream(inner) => Body::from_stream(Watched {
            inner,
            function: function.into(),
            received,
            metrics: metrics.clone(),
            first: true,
            ended: false,
        }),
    }
}

struct Watched {
    inner: ByteStream,
    function: Arc<str>,
    received: Instant,
    metrics: Arc<NodeMetrics>,
    first: bool,
    ended: bool,
}

impl Stream for Watched {
    type Item = Result<Bytes, InvokeError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.ended {
            return Poll::Ready(None);
        }
        let next = self.inner.as_mut().poll_next(cx);
        match &next {
            Poll::Ready(Some(Ok(chunk))) if self.first && !chunk.is_empty() => {
                self.first = false;
                let took = self.received.elapsed();
                self.metrics.stream_first_byte(&self.function, took);
            }
            Poll::Ready(Some(Err(e))) => {
                self.ended = true;
                let why = match e {
                    InvokeError::OutputTooLarge { .. } => "too_large",
                    _ => "failed",
                };
                tracing::warn!(function = %self.function, error = %e, "a streamed answer was cut");
                self.metrics.stream_cut(&self.function, why);
            }
            Poll::Ready(None) => self.ended = true,
            _ => {}
        }
        next
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        if !self.ended {
            tracing::debug!(function = %self.function, "the client went away during a streamed answer");
            self.metrics.stream_cut(&self.function, "client_gone");
        }
    }
}
