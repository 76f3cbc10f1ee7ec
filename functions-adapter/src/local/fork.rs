//! A fork server per Python function: one process that has started the interpreter, the
//! worker and imported the function once, and forks a fresh process for every new instance,
//! so a cold start costs a `fork` instead of an interpreter start and an import.
//!
//! Isolation stays that of separate processes: the server never runs a call, so every
//! instance begins from the freshly imported module (a global one call changes is not seen by
//! an instance forked after it); each instance leads its own process group (killed as a whole
//! on timeout or eviction) and inherits the server's address-space limit. An instance connects
//! back to a Unix socket of its function twice, matched by a random token: once for the call
//! frames (the same frames as a worker on pipes) and once as its own stderr. The server reports
//! every instance's exit status, so a crash is described as precisely as a piped worker's. If
//! the server dies it is started again on the next new instance. Node.js has no `fork()` of a
//! running process, so its new instances come from pre-started spares instead (`spare.rs`).

use std::collections::HashMap;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::{Arc, Mutex as SyncMutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, Mutex, Notify};

use super::proc::StderrTail;
use super::spec::FunctionSpec;
use super::worker::{Launch, ProcWorker, StartError, KIND_READY};

/// Frame kind of the server's answer to a fork request (payload: the pid, ASCII).
const KIND_FORKED: u8 = 5;
/// Frame kind of an exit report (payload: `<pid> <raw wait status>`, ASCII).
const KIND_EXITED: u8 = 6;
/// How long a forked instance gets to connect back.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Exit statuses of forked instances, as their fork server reported them.
#[derive(Debug, Default)]
pub(crate) struct Exits {
    statuses: SyncMutex<HashMap<u32, ExitStatus>>,
    reported: Notify,
}

impl Exits {
    fn record(&self, pid: u32, status: ExitStatus) {
        if let Ok(mut s) = self.statuses.lock() {
            s.insert(pid, status);
        }
        self.reported.notify_waiters();
    }

    /// Whether `pid` is known to have exited.
    pub(crate) fn has_exited(&self, pid: u32) -> bool {
        self.statuses.lock().is_ok_and(|s| s.contains_key(&pid))
    }

    /// `pid`'s exit status, waiting up to `wait` for the report.
    pub(crate) async fn take(&self, pid: u32, wait: Duration) -> Option<ExitStatus> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let notified = self.reported.notified();
            if let Some(status) = self.statuses.lock().ok().and_then(|mut s| s.remove(&pid)) {
                return Some(status);
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return None;
            }
        }
    }
}

/// The fork server of one function, started on its first new instance.
#[derive(Debug)]
pub(crate) struct ForkServer {
    spec: Arc<FunctionSpec>,
    launch: Arc<Launch>,
    socket: PathBuf,
    exits: Arc<Exits>,
    running: Mutex<Option<Running>>,
}

#[derive(Debug)]
struct Running {
    server: ProcWorker,
    forked: mpsc::Receiver<u32>,
    listener: UnixListener,
}

impl ForkServer {
    /// A fork server for `spec` whose instances connect to a socket under `dir`.
    pub(crate) fn new(spec: Arc<FunctionSpec>, launch: Arc<Launch>, dir: &std::path::Path) -> Self {
        let socket = dir.join(format!("{}.fork.sock", spec.instance_name()));
        Self {
            spec,
            launch,
            socket,
            exits: Arc::default(),
            running: Mutex::new(None),
        }
    }

    /// A new instance, forked from the server (which is started first if it is not running).
    pub(crate) async fn instance(&self) -> Result<ProcWorker, StartError> {
        let mut running = self.running.lock().await;
        if !running.as_mut().is_some_and(|r| r.server.is_alive()) {
            *running = None;
            *running = Some(self.start().await?);
        }
        let Some(r) = running.as_mut() else {
            return Err(fork_failed("the server did not start"));
        };
        let token = format!("{:032x}", rand::random::<u128>());
        let pid = match fork(r, token.as_bytes()).await {
            Ok(pid) => pid,
            Err(e) => {
                *running = None;
                return Err(e);
            }
        };
        let connected = async {
            let calls = accept(&r.listener, token.as_bytes()).await?;
            let stderr = accept(&r.listener, format!("{token}:stderr").as_bytes()).await?;
            Some((calls, stderr))
        };
        let Ok(Some((calls, stderr))) = tokio::time::timeout(CONNECT_TIMEOUT, connected).await
        else {
            super::proc::kill_group(pid);
            return Err(fork_failed("the forked instance did not connect back"));
        };
        let stderr = StderrTail::capture(stderr, Arc::from(self.spec.name.as_str()), pid);
        Ok(ProcWorker::from_socket(
            calls,
            stderr,
            pid,
            self.exits.clone(),
        ))
    }

    async fn start(&self) -> Result<Running, StartError> {
        let _ = std::fs::remove_file(&self.socket);
        let listener = UnixListener::bind(&self.socket).map_err(|source| StartError::Spawn {
            program: format!("fork socket {}", self.socket.display()),
            source,
        })?;
        let extra = [
            std::ffi::OsStr::new("--fork-server"),
            self.socket.as_os_str(),
        ];
        let mut server = ProcWorker::start_with(&self.spec, &self.launch, &extra).await?;
        let (tx, forked) = mpsc::channel(1);
        let Some(reports) = server.take_output() else {
            return Err(fork_failed("the server has no output"));
        };
        tokio::spawn(read_reports(reports, tx, self.exits.clone()));
        tracing::debug!(function = %self.spec.name, pid = server.pid, "fork server started");
        Ok(Running {
            server,
            forked,
            listener,
        })
    }
}

impl Drop for ForkServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// Asks the server for a new instance; its pid.
async fn fork(r: &mut Running, token: &[u8]) -> Result<u32, StartError> {
    let len = u32::try_from(token.len()).unwrap_or(u32::MAX);
    let sent = async {
        r.server.stdin.write_all(&len.to_be_bytes()).await?;
        r.server.stdin.write_all(token).await?;
        r.server.stdin.flush().await
    };
    if sent.await.is_err() {
        return Err(fork_failed("the server closed its input"));
    }
    match tokio::time::timeout(CONNECT_TIMEOUT, r.forked.recv()).await {
        Ok(Some(pid)) => Ok(pid),
        _ => Err(fork_failed("the server did not answer the fork request")),
    }
}

/// The next connection that introduces itself with `token` (others are dropped).
async fn accept(listener: &UnixListener, token: &[u8]) -> Option<UnixStream> {
    loop {
        let (mut stream, _) = listener.accept().await.ok()?;
        let mut head = [0u8; 5];
        if stream.read_exact(&mut head).await.is_err() || head[0] != KIND_READY {
            continue;
        }
        let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
        if len != token.len() {
            continue;
        }
        let mut got = vec![0u8; len];
        if stream.read_exact(&mut got).await.is_ok() && got == token {
            return Some(stream);
        }
    }
}

/// Reads the server's frames: fork answers to `forked`, exit reports into `exits`.
async fn read_reports(
    mut out: tokio::io::BufReader<Box<dyn tokio::io::AsyncRead + Send + Unpin>>,
    forked: mpsc::Sender<u32>,
    exits: Arc<Exits>,
) {
    loop {
        let mut head = [0u8; 5];
        if out.read_exact(&mut head).await.is_err() {
            return;
        }
        let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
        let mut payload = vec![0u8; len.min(256)];
        if len > 256 || out.read_exact(&mut payload).await.is_err() {
            return;
        }
        let text = String::from_utf8_lossy(&payload);
        match head[0] {
            KIND_FORKED => {
                if let Ok(pid) = text.parse() {
                    let _ = forked.send(pid).await;
                }
            }
            KIND_EXITED => {
                let mut parts = text.split(' ');
                if let (Some(Ok(pid)), Some(Ok(raw))) = (
                    parts.next().map(str::parse::<u32>),
                    parts.next().map(str::parse::<i32>),
                ) {
                    exits.record(pid, ExitStatus::from_raw(raw));
                }
            }
            kind => tracing::warn!(kind, "fork server sent an unknown frame"),
        }
    }
}

fn fork_failed(message: &str) -> StartError {
    StartError::Init {
        message: format!("fork server: {message}"),
        report: String::new(),
    }
}
