//! A test HTTP server that can die like a real one: [`TestServer::stop`] closes the listener
//! *and* every open connection, so a client's pooled keep-alive connection fails too.

use std::net::SocketAddr;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};

/// An axum router served on a local port until stopped or dropped.
#[derive(Debug)]
pub struct TestServer {
    addr: SocketAddr,
    task: Option<JoinHandle<()>>,
    close: Option<tokio::sync::oneshot::Sender<()>>,
}

impl TestServer {
    /// Serves `router` on `127.0.0.1` with a port the OS picks.
    pub async fn start(router: Router) -> anyhow::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        Ok(Self::serve(listener, router))
    }

    /// Serves `router` on an already bound listener (e.g. to restart on the same port).
    pub fn serve(listener: TcpListener, router: Router) -> Self {
        let addr = listener
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([127, 0, 0, 1], 0)));
        let (close, closed) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(accept_loop(listener, router, closed));
        Self {
            addr,
            task: Some(task),
            close: Some(close),
        }
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>` (no trailing slash).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Closes the listener and every connection at once (in-flight calls get a reset).
    pub fn stop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }

    /// Like [`TestServer::stop`], but returns only once the listener and every connection are
    /// gone, so the very next request a client sends fails.
    pub async fn shutdown(&mut self) {
        if let Some(close) = self.close.take() {
            let _ = close.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }

    /// Whether [`TestServer::stop`] has been called.
    pub fn is_stopped(&self) -> bool {
        self.task.is_none()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Accepts connections until aborted (dropping the `JoinSet` aborts every connection task with
/// it) or told to close (then it waits until every connection task has ended).
async fn accept_loop(
    listener: TcpListener,
    router: Router,
    mut closed: tokio::sync::oneshot::Receiver<()>,
) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut closed => {
                drop(listener);
                connections.shutdown().await;
                return;
            }
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let service = TowerToHyperService::new(router.clone());
                connections.spawn(async move {
                    let _ = Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}
