//! Forked Python processes: how they connect back, how their exits are learnt, and the
//! processes that fork them.
//!
//! Every process the zygote (`zygote.rs`) or a fork server forks connects back to the runtime's
//! one Unix socket twice, each connection introducing itself with a random token the host chose
//! for that fork: once for its frames (calls, or a fork server's requests and reports) and once
//! as its own stderr. [`Rendezvous`] accepts them and hands each to the fork that expects it,
//! so forks of different functions proceed at once. A process that forks (the zygote, a fork
//! server: a [`Forker`]) reports the pid of every child and every child's exit status, so a
//! crash is described as precisely as a piped worker's ([`Exits`]).
//!
//! The fork server of each Python version, the other forker, is in `fork_server.rs`.

use parking_lot::{Mutex as SyncMutex, MutexGuard};
use std::collections::HashMap;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::proc::StderrTail;
use super::worker::{ProcWorker, StartError, KIND_READY};

/// Frame kind of a forker's answer to a fork request (payload: the pid, ASCII).
const KIND_FORKED: u8 = 5;
/// Frame kind of an exit report (payload: `<pid> <raw wait status>`, ASCII).
const KIND_EXITED: u8 = 6;
/// How long a forked process gets to connect back (and a forker to answer).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the connections of a child that already exited may still be taken.
const EXITED_GRACE: Duration = Duration::from_millis(200);

type Waiters = HashMap<Vec<u8>, oneshot::Sender<UnixStream>>;

/// The runtime's socket that forked processes connect back to.
#[derive(Debug)]
pub(crate) struct Rendezvous {
    path: PathBuf,
    waiting: Arc<SyncMutex<Waiters>>,
}

/// The two connections one fork expects; dropping it forgets them.
pub(crate) struct Expected<'a> {
    rendezvous: &'a Rendezvous,
    token: String,
    calls: oneshot::Receiver<UnixStream>,
    stderr: oneshot::Receiver<UnixStream>,
}

impl Rendezvous {
    /// Binds `path` and accepts connections until `stop` fires. Needs a tokio runtime.
    pub(crate) fn bind(path: PathBuf, stop: CancellationToken) -> std::io::Result<Arc<Self>> {
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path)?;
        let waiting = Arc::new(SyncMutex::new(Waiters::new()));
        tokio::spawn(accept_loop(listener, Arc::clone(&waiting), stop));
        Ok(Arc::new(Self { path, waiting }))
    }

    /// The socket's path, passed to the processes that connect back.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Registers a new random token; the child must be told it before it is forked.
    pub(crate) fn expect(&self) -> Expected<'_> {
        let token = format!("{:032x}", rand::random::<u128>());
        let (calls_tx, calls) = oneshot::channel();
        let (stderr_tx, stderr) = oneshot::channel();
        let mut waiting = self.lock();
        waiting.insert(token.clone().into_bytes(), calls_tx);
        waiting.insert(format!("{token}:stderr").into_bytes(), stderr_tx);
        drop(waiting);
        Expected {
            rendezvous: self,
            token,
            calls,
            stderr,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Waiters> {
        self.waiting.lock()
    }
}

impl Expected<'_> {
    /// The token the child introduces itself with.
    pub(crate) fn token(&self) -> &str {
        &self.token
    }

    /// Waits for the child `pid` to connect back and answer ready: the child as a worker.
    /// Fails early if it exits first, and kills it if it does not connect in time.
    pub(crate) async fn child(
        mut self,
        pid: u32,
        exits: Arc<Exits>,
        label: super::logs::Writer,
    ) -> Result<ProcWorker, StartError> {
        let both = async {
            let calls = (&mut self.calls).await.ok()?;
            let stderr = (&mut self.stderr).await.ok()?;
            Some((calls, stderr))
        };
        tokio::pin!(both);
        let connected = tokio::select! {
            both = tokio::time::timeout(CONNECT_TIMEOUT, &mut both) => both.ok().flatten(),
            status = exits.exited(pid) => {
                // A child that failed to import connects, reports and exits at once: its exit
                // may be seen before its connections are accepted. Take them if they came, so
                // the report (the traceback) is the error.
                match tokio::time::timeout(EXITED_GRACE, &mut both).await {
                    Ok(Some(pair)) => Some(pair),
                    _ => {
                        let how = super::proc::describe_exit(status);
                        return Err(fork_failed(&format!(
                            "process {pid} {how} before it connected back"
                        )));
                    }
                }
            }
        };
        let Some((calls, stderr)) = connected else {
            super::proc::kill_group(pid);
            return Err(fork_failed("the forked process did not connect back"));
        };
        let stderr = StderrTail::capture(stderr, label, pid, super::logs::Tagged::default());
        let mut worker = ProcWorker::from_socket(calls, stderr, pid, exits);
        worker.handshake().await?;
        Ok(worker)
    }
}

impl Drop for Expected<'_> {
    fn drop(&mut self) {
        let mut waiting = self.rendezvous.lock();
        waiting.remove(self.token.as_bytes());
        waiting.remove(format!("{}:stderr", self.token).as_bytes());
    }
}

async fn accept_loop(
    listener: UnixListener,
    waiting: Arc<SyncMutex<Waiters>>,
    stop: CancellationToken,
) {
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = stop.cancelled() => return,
        };
        let Ok((stream, _)) = accepted else {
            continue;
        };
        let waiting = Arc::clone(&waiting);
        tokio::spawn(async move {
            let Ok(Some((token, stream))) =
                tokio::time::timeout(CONNECT_TIMEOUT, hello(stream)).await
            else {
                return;
            };
            let waiter = waiting.lock().remove(&token);
            // A connection nobody expects (a late one, a stranger) is closed.
            if let Some(waiter) = waiter {
                let _ = waiter.send(stream);
            }
        });
    }
}

/// Reads the hello frame (kind ready, payload the token) a connecting process sends first.
async fn hello(mut stream: UnixStream) -> Option<(Vec<u8>, UnixStream)> {
    let mut head = [0u8; 5];
    stream.read_exact(&mut head).await.ok()?;
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    if head[0] != KIND_READY || len > 64 {
        return None;
    }
    let mut token = vec![0u8; len];
    stream.read_exact(&mut token).await.ok()?;
    Some((token, stream))
}

/// Exit statuses of forked processes, as the processes that forked them reported them. Only
/// processes still owned by a worker are tracked ([`Self::forget`] when it is dropped).
#[derive(Debug, Default)]
pub(crate) struct Exits {
    statuses: SyncMutex<HashMap<u32, Option<ExitStatus>>>,
    reported: tokio::sync::Notify,
}

impl Exits {
    fn lock(&self) -> MutexGuard<'_, HashMap<u32, Option<ExitStatus>>> {
        self.statuses.lock()
    }

    fn watch(&self, pid: u32) {
        self.lock().insert(pid, None);
    }

    fn record(&self, pid: u32, status: ExitStatus) {
        if let Some(slot) = self.lock().get_mut(&pid) {
            *slot = Some(status);
        }
        self.reported.notify_waiters();
    }

    /// Stops tracking `pid` (its worker is gone).
    pub(crate) fn forget(&self, pid: u32) {
        self.lock().remove(&pid);
    }

    /// Whether `pid` is known to have exited.
    pub(crate) fn has_exited(&self, pid: u32) -> bool {
        matches!(self.lock().get(&pid), Some(Some(_)))
    }

    /// Resolves with `pid`'s exit status once it is reported (never, if it is not).
    pub(crate) async fn exited(&self, pid: u32) -> ExitStatus {
        loop {
            let notified = self.reported.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(Some(status)) = self.lock().get(&pid) {
                return *status;
            }
            notified.await;
        }
    }

    /// `pid`'s exit status, waiting up to `wait` for the report.
    pub(crate) async fn take(&self, pid: u32, wait: Duration) -> Option<ExitStatus> {
        tokio::time::timeout(wait, self.exited(pid)).await.ok()
    }
}

/// A process that forks children on request: the zygote, or a function's fork server.
#[derive(Debug)]
pub(crate) struct Forker {
    process: ProcWorker,
    forked: mpsc::Receiver<u32>,
    /// Set when its reports ended (it exited or closed its output).
    gone: Arc<AtomicBool>,
}

impl Forker {
    /// Takes over `process` (which answered ready), reading its reports into `exits`.
    pub(crate) fn new(mut process: ProcWorker, exits: Arc<Exits>) -> Self {
        let (tx, forked) = mpsc::channel(1);
        let gone = Arc::new(AtomicBool::new(false));
        let reports = process.take_output();
        tokio::spawn(read_reports(reports, tx, exits, Arc::clone(&gone)));
        Self {
            process,
            forked,
            gone,
        }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.process.pid
    }

    pub(crate) fn is_alive(&mut self) -> bool {
        !self.gone.load(Ordering::Relaxed) && self.process.is_alive()
    }

    /// Asks for a child, sending `request`; the child's pid.
    pub(crate) async fn fork(&mut self, request: &[u8]) -> Result<u32, StartError> {
        let len = u32::try_from(request.len()).unwrap_or(u32::MAX);
        let stdin = &mut self.process.stdin;
        let sent = async {
            stdin.write_all(&len.to_be_bytes()).await?;
            stdin.write_all(request).await?;
            stdin.flush().await
        };
        if sent.await.is_err() {
            return Err(fork_failed("the forking process closed its input"));
        }
        match tokio::time::timeout(CONNECT_TIMEOUT, self.forked.recv()).await {
            Ok(Some(pid)) => Ok(pid),
            _ => Err(fork_failed(
                "the forking process did not answer the fork request",
            )),
        }
    }
}

/// Reads a forker's frames: fork answers to `forked`, exit reports into `exits`.
async fn read_reports(
    mut out: BufReader<Box<dyn tokio::io::AsyncRead + Send + Unpin>>,
    forked: mpsc::Sender<u32>,
    exits: Arc<Exits>,
    gone: Arc<AtomicBool>,
) {
    loop {
        let mut head = [0u8; 5];
        if out.read_exact(&mut head).await.is_err() {
            break;
        }
        let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
        let mut payload = vec![0u8; len.min(256)];
        if len > 256 || out.read_exact(&mut payload).await.is_err() {
            break;
        }
        let text = String::from_utf8_lossy(&payload);
        match head[0] {
            KIND_FORKED => {
                if let Ok(pid) = text.parse() {
                    // Tracked before any report of its exit can be read.
                    exits.watch(pid);
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
            kind => tracing::warn!(kind, "forking process sent an unknown frame"),
        }
    }
    gone.store(true, Ordering::Relaxed);
}

pub(crate) fn fork_failed(message: &str) -> StartError {
    StartError::Init {
        message: format!("fork: {message}"),
        report: String::new(),
    }
}
