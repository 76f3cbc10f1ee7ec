//! One instance of a function: a warm worker process (python3, nodejs) or a prepared slot
//! (binary), and the framed protocol spoken with the worker bootstraps.
//!
//! Frames (see `bootstrap/worker.py`): a request is `u32be len + head JSON` ([`RequestHead`]:
//! method, sub-path, query, URL, client address, request id, headers), then `u32be len + body`;
//! a reply is `u8 kind + u32be len + payload`. A function that answers only a body answers one
//! frame of kind 0 (a `200`); an HTTP answer is a head of kind 7 (`{"status", "headers"}`),
//! then either the whole body (kind 0) or its chunks as they are produced (kind 8 each, then
//! kind 9), where a kind 1 or 4 ends the stream as a failure.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::process::Child;

use super::proc::{self, StderrTail};
use super::spec::{FunctionSpec, Runtime};
use crate::InvokeError;

const KIND_OUTPUT: u8 = 0;
const KIND_RAISED: u8 = 1;
pub(super) const KIND_READY: u8 = 2;
const KIND_INIT_FAILED: u8 = 3;
const KIND_RETIRE: u8 = 4;
const KIND_HEAD: u8 = 7;
const KIND_CHUNK: u8 = 8;
const KIND_END: u8 = 9;
/// Largest response head read from a worker.
const MAX_HEAD: usize = 256 * 1024;
/// Largest import-error report read from a starting worker.
const MAX_INIT_REPORT: usize = 64 * 1024;
/// How long a dying worker gets to exit and flush stderr before we stop waiting for it.
const DEATH_GRACE: Duration = Duration::from_millis(500);

/// How to start workers: interpreters, bootstrap scripts and limits.
#[derive(Debug)]
pub(crate) struct Launch {
    pub python: PathBuf,
    pub node: PathBuf,
    /// Flags node is started with before its bootstrap (see [`super::node_flags`]).
    pub node_flags: Vec<std::ffi::OsString>,
    pub python_bootstrap: PathBuf,
    pub node_bootstrap: PathBuf,
    pub memory_limit_mb: u64,
    pub max_output_bytes: usize,
    /// Where the functions' stdout and stderr lines go.
    pub logs: Arc<super::logs::FunctionLogs>,
}

/// Why a new instance could not start.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StartError {
    /// The interpreter could not be executed at all.
    #[error("cannot start {program}: {source}")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },
    /// The function failed to load (syntax error, missing export, died during import).
    #[error("{message}")]
    Init { message: String, report: String },
}

impl StartError {
    /// The call-level error for a failed start of `function`.
    pub(crate) fn into_invoke(self, function: &str) -> InvokeError {
        match self {
            StartError::Spawn { .. } => {
                InvokeError::Unavailable(format!("local runtime, function {function}: {self}"))
            }
            StartError::Init { message, report } => InvokeError::FunctionFailed {
                message: format!("function {function} failed to start: {message}"),
                body: Some(Bytes::from(report)),
            },
        }
    }
}

/// The head of a request as a worker reads it.
#[derive(serde::Serialize)]
pub(crate) struct RequestHead<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub query: &'a str,
    pub url: &'a str,
    pub source_ip: Option<std::net::IpAddr>,
    pub request_id: &'a str,
    /// In order, lower-case names, a name repeated for each of its values.
    pub headers: Vec<(&'a str, std::borrow::Cow<'a, str>)>,
}

/// The head of an HTTP answer as a worker writes it (checked by [`crate::http_fn`]).
#[derive(serde::Deserialize)]
pub(crate) struct AnswerHead {
    pub status: u64,
    #[serde(default)]
    pub headers: Vec<(String, String)>,
}

/// What a function answered.
pub(crate) enum Reply {
    /// Only a body: a `200`.
    Raw(Bytes),
    /// A status and headers, and the whole body.
    Whole(AnswerHead, Bytes),
    /// A status and headers, and the first chunk of a body that is still being produced: the
    /// instance is in the call until [`ProcWorker::next_chunk`] reads its end.
    Streaming(AnswerHead, Bytes),
}

/// The result of one call and whether the instance may serve another.
pub(crate) struct CallResult {
    pub result: Result<Reply, InvokeError>,
    pub keep: bool,
    /// Time the call spent starting a process (binary runtime; zero for warm workers).
    pub startup: Duration,
}

impl CallResult {
    fn from_worker(result: Result<Reply, InvokeError>, keep: bool) -> Self {
        Self {
            result,
            keep,
            startup: Duration::ZERO,
        }
    }
}

/// Where the new instances of one function come from.
#[derive(Debug)]
pub(crate) enum InstanceSource {
    /// A process started for each (the interpreter starts and imports the function).
    Spawn,
    /// Forked from the version's fork server, itself forked from the runtime's zygote
    /// (python3, [`super::fork_server`], [`super::zygote`]).
    Fork(Arc<super::fork_server::ForkServer>),
    /// A generic worker of the runtime's pool that loads the function, replaced in the
    /// background (nodejs, [`super::node_pool`]).
    NodePool(Arc<super::node_pool::NodePool>),
}

impl InstanceSource {
    /// Called once a new instance has served (or failed, or abandoned) its first call: the
    /// moment to replace the generic worker it was taken from, or to fork the version's fork
    /// server.
    pub(crate) fn first_call_done(&self) {
        match self {
            InstanceSource::NodePool(pool) => pool.refill(),
            InstanceSource::Fork(server) => server.first_call_done(),
            InstanceSource::Spawn => {}
        }
    }
}

/// Runs [`InstanceSource::first_call_done`] when dropped, so every way out of a first call
/// (answer, failure, timeout, a caller that gave up) counts.
pub(crate) struct FirstCall<'a>(pub &'a InstanceSource);

impl Drop for FirstCall<'_> {
    fn drop(&mut self) {
        self.0.first_call_done();
    }
}

/// One pooled instance of a function.
#[derive(Debug)]
pub(crate) struct Worker {
    process: Option<ProcWorker>,
    /// Start-up time of this instance, until its first call reports it as a cold start.
    pub cold: Option<Duration>,
    /// When this instance last finished a call (or started).
    pub idle_since: Instant,
    /// Started ahead of a call ([`super::LocalRuntime::warm_one`]) and no call took it yet.
    pub prewarmed: bool,
}

impl Worker {
    /// Starts an instance: for python3 and nodejs a worker process that has imported the
    /// function (from `source`); for binary an empty slot (its first exec will be reported as
    /// the cold start). The time this takes is the instance's cold start.
    pub(crate) async fn start(
        spec: &FunctionSpec,
        launch: &Launch,
        source: &InstanceSource,
    ) -> Result<Self, StartError> {
        let started = Instant::now();
        let process = match (spec.runtime, source) {
            (Runtime::Binary, _) => None,
            (_, InstanceSource::Fork(fork)) => Some(fork.instance().await?),
            (_, InstanceSource::NodePool(pool)) => Some(pool.instance(spec).await?),
            (Runtime::Python3 | Runtime::Nodejs, InstanceSource::Spawn) => {
                Some(ProcWorker::start_with(spec, launch, &[]).await?)
            }
        };
        Ok(Self {
            process,
            cold: Some(started.elapsed()),
            idle_since: Instant::now(),
            prewarmed: false,
        })
    }

    /// PID of the worker process (none for a binary slot).
    pub(crate) fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(|p| p.pid)
    }

    /// Whether the instance can take a call (its process has not exited).
    pub(crate) fn is_alive(&mut self) -> bool {
        match &mut self.process {
            Some(p) => p.is_alive(),
            None => true,
        }
    }

    /// Runs one call on this instance.
    pub(crate) async fn call(
        &mut self,
        spec: &FunctionSpec,
        launch: &Launch,
        headers: &[u8],
        body: &[u8],
        request_id: Option<&str>,
    ) -> CallResult {
        match &mut self.process {
            Some(p) => p.call(headers, body, launch.max_output_bytes).await,
            None => super::binary::run(spec, launch, body, request_id).await,
        }
    }

    /// The next chunk of a streamed body (`None` at its end, when the instance is free again),
    /// at most `limit` bytes; on a failure, whether the instance may serve another call.
    pub(crate) async fn next_chunk(
        &mut self,
        limit: usize,
    ) -> Result<Option<Bytes>, (InvokeError, bool)> {
        match &mut self.process {
            Some(p) => p.next_chunk(limit).await,
            None => Ok(None),
        }
    }
}

/// A running python3 or nodejs worker (or the zygote, or a fork server): a child process on
/// pipes, or a process forked by the zygote or a fork server, on a Unix socket.
pub(crate) struct ProcWorker {
    /// Our child (`None` for a forked process, which the process that forked it reaps).
    child: Option<Child>,
    pub(super) pid: u32,
    pub(super) stdin: Box<dyn AsyncWrite + Send + Unpin>,
    stdout: BufReader<Box<dyn AsyncRead + Send + Unpin>>,
    /// The process's stderr.
    stderr: Option<StderrTail>,
    /// Exit reports of the process that forked this one.
    exits: Option<Arc<super::fork::Exits>>,
}

impl std::fmt::Debug for ProcWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcWorker")
            .field("pid", &self.pid)
            .field("forked", &self.child.is_none())
            .finish_non_exhaustive()
    }
}

impl ProcWorker {
    /// A process the zygote or a fork server forked, speaking on `calls`, writing `stderr`.
    pub(super) fn from_socket(
        calls: tokio::net::UnixStream,
        stderr: StderrTail,
        pid: u32,
        exits: Arc<super::fork::Exits>,
    ) -> Self {
        let (read, write) = calls.into_split();
        Self {
            child: None,
            pid,
            stdin: Box::new(write),
            stdout: BufReader::new(Box::new(read)),
            stderr: Some(stderr),
            exits: Some(exits),
        }
    }

    /// The process's output stream, for a reader of its own (a forker's reports).
    pub(super) fn take_output(&mut self) -> BufReader<Box<dyn AsyncRead + Send + Unpin>> {
        let empty: Box<dyn AsyncRead + Send + Unpin> = Box::new(tokio::io::empty());
        std::mem::replace(&mut self.stdout, BufReader::new(empty))
    }

    /// Whether the process still runs.
    pub(super) fn is_alive(&mut self) -> bool {
        match (self.child.as_mut(), &self.exits) {
            (Some(c), _) => matches!(c.try_wait(), Ok(None)),
            (None, Some(exits)) if exits.has_exited(self.pid) => false,
            (None, _) => i32::try_from(self.pid).is_ok_and(|raw| {
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(raw), None).is_ok()
            }),
        }
    }

    /// Starts the bootstrap of `spec`'s runtime with `extra` arguments after the function dir,
    /// in the function's folder with its environment, and waits until it imported the function.
    pub(super) async fn start_with(
        spec: &FunctionSpec,
        launch: &Launch,
        extra: &[&std::ffi::OsStr],
    ) -> Result<Self, StartError> {
        let (program, flags, script) = match spec.runtime {
            Runtime::Nodejs => (&launch.node, &launch.node_flags[..], &launch.node_bootstrap),
            _ => (&launch.python, &[][..], &launch.python_bootstrap),
        };
        let mut args: Vec<&std::ffi::OsStr> = flags.iter().map(|f| f.as_os_str()).collect();
        args.extend([script.as_os_str(), spec.dir.as_os_str()]);
        args.extend_from_slice(extra);
        let label = super::logs::Writer::function(spec, &launch.logs);
        let mut worker = Self::spawn(
            program,
            &args,
            &spec.dir,
            &spec.env,
            launch.memory_limit_mb,
            label,
        )?;
        worker.handshake().await?;
        Ok(worker)
    }

    /// Spawns `program` with `args` in `dir` (see [`proc::command`]), its stderr logged under
    /// `label`; the caller waits for its ready frame ([`Self::handshake`]).
    pub(super) fn spawn(
        program: &std::path::Path,
        args: &[&std::ffi::OsStr],
        dir: &std::path::Path,
        env: &[(String, String)],
        memory_limit_mb: u64,
        label: super::logs::Writer,
    ) -> Result<Self, StartError> {
        let mut cmd = proc::command(program.as_os_str(), args, dir, env, memory_limit_mb);
        let spawn_err = |source| StartError::Spawn {
            program: program.display().to_string(),
            source,
        };
        let mut child = cmd.spawn().map_err(spawn_err)?;
        let missing = || spawn_err(std::io::Error::other("stdio pipe missing"));
        let pid = child.id().ok_or_else(missing)?;
        let stdin: Box<dyn AsyncWrite + Send + Unpin> =
            Box::new(child.stdin.take().ok_or_else(missing)?);
        let stdout: Box<dyn AsyncRead + Send + Unpin> =
            Box::new(child.stdout.take().ok_or_else(missing)?);
        let stderr = child.stderr.take().ok_or_else(missing)?;
        let stderr = StderrTail::capture(stderr, label, pid, super::logs::Tagged::default());
        Ok(Self {
            child: Some(child),
            pid,
            stdin,
            stdout: BufReader::new(stdout),
            stderr: Some(stderr),
            exits: None,
        })
    }

    /// Waits for the worker's ready frame; a report of a failed import (or the worker's death)
    /// is the error.
    pub(super) async fn handshake(&mut self) -> Result<(), StartError> {
        match self.read_reply(MAX_INIT_REPORT).await {
            Ok((KIND_READY, _)) => Ok(()),
            Ok((KIND_INIT_FAILED, report)) => {
                let report = String::from_utf8_lossy(&report).into_owned();
                Err(StartError::Init {
                    message: proc::summary("import failed", &report),
                    report,
                })
            }
            Ok((kind, _)) => Err(StartError::Init {
                message: format!("worker sent frame kind {kind} before ready"),
                report: String::new(),
            }),
            Err(_) => {
                let (message, report) = self.death().await;
                Err(StartError::Init { message, report })
            }
        }
    }

    /// Makes a generic Node.js worker (`worker.js --generic`) an instance of `spec`: it sets
    /// the version's environment, changes to its folder and requires the function.
    pub(super) async fn load_function(
        &mut self,
        spec: &FunctionSpec,
        logs: &Arc<super::logs::FunctionLogs>,
    ) -> Result<(), StartError> {
        let env: serde_json::Map<String, serde_json::Value> = spec
            .env
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
            .collect();
        let request = serde_json::json!({ "dir": spec.dir, "env": env });
        let request = serde_json::to_vec(&request).unwrap_or_default();
        if let Some(stderr) = &self.stderr {
            stderr.relabel(super::logs::Writer::function(spec, logs));
        }
        let len = u32::try_from(request.len()).unwrap_or(u32::MAX);
        let sent = async {
            self.stdin.write_all(&len.to_be_bytes()).await?;
            self.stdin.write_all(&request).await?;
            self.stdin.flush().await
        };
        if sent.await.is_err() {
            let (message, report) = self.death().await;
            return Err(StartError::Init { message, report });
        }
        self.handshake().await
    }

    async fn call(&mut self, headers: &[u8], body: &[u8], limit: usize) -> CallResult {
        if self.send(headers, body).await.is_err() {
            return self.died().await;
        }
        let head = match self.read_reply(limit.max(MAX_HEAD)).await {
            Ok((KIND_OUTPUT, out)) if out.len() <= limit => {
                return CallResult::from_worker(Ok(Reply::Raw(out)), true)
            }
            Ok((KIND_OUTPUT, _)) | Err(ReadError::TooLarge) => {
                return CallResult::from_worker(Err(InvokeError::OutputTooLarge { limit }), false)
            }
            Ok((KIND_HEAD, head)) => head,
            Ok((kind, report)) => {
                let (failed, keep) = failure(kind, report);
                return CallResult::from_worker(Err(failed), keep);
            }
            Err(ReadError::Eof) => return self.died().await,
        };
        let head: AnswerHead = match serde_json::from_slice(&head) {
            Ok(head) => head,
            Err(e) => {
                let bad = InvokeError::Protocol(format!("worker sent a bad answer head: {e}"));
                return CallResult::from_worker(Err(bad), false);
            }
        };
        match self.read_reply(limit).await {
            Ok((KIND_OUTPUT, body)) => CallResult::from_worker(Ok(Reply::Whole(head, body)), true),
            Ok((KIND_END, _)) => {
                CallResult::from_worker(Ok(Reply::Whole(head, Bytes::new())), true)
            }
            Ok((KIND_CHUNK, first)) => {
                CallResult::from_worker(Ok(Reply::Streaming(head, first)), true)
            }
            Ok((kind, report)) => {
                let (failed, keep) = failure(kind, report);
                CallResult::from_worker(Err(failed), keep)
            }
            Err(ReadError::TooLarge) => {
                CallResult::from_worker(Err(InvokeError::OutputTooLarge { limit }), false)
            }
            Err(ReadError::Eof) => self.died().await,
        }
    }

    /// See [`Worker::next_chunk`].
    async fn next_chunk(&mut self, limit: usize) -> Result<Option<Bytes>, (InvokeError, bool)> {
        match self.read_reply(limit).await {
            Ok((KIND_CHUNK, chunk)) => Ok(Some(chunk)),
            Ok((KIND_END, _)) => Ok(None),
            Ok((kind, report)) => Err(failure(kind, report)),
            Err(ReadError::TooLarge) => Err((InvokeError::OutputTooLarge { limit }, false)),
            Err(ReadError::Eof) => {
                let (message, report) = self.death().await;
                let body = Some(Bytes::from(report));
                Err((InvokeError::FunctionFailed { message, body }, false))
            }
        }
    }

    async fn send(&mut self, headers: &[u8], body: &[u8]) -> std::io::Result<()> {
        for part in [headers, body] {
            let len = u32::try_from(part.len())
                .map_err(|_| std::io::Error::other("request part larger than 4 GiB"))?;
            self.stdin.write_all(&len.to_be_bytes()).await?;
            self.stdin.write_all(part).await?;
        }
        self.stdin.flush().await
    }

    pub(super) async fn read_reply(&mut self, limit: usize) -> Result<(u8, Bytes), ReadError> {
        let mut head = [0u8; 5];
        self.stdout
            .read_exact(&mut head)
            .await
            .map_err(|_| ReadError::Eof)?;
        let [kind, a, b, c, d] = head;
        let len = usize::try_from(u32::from_be_bytes([a, b, c, d])).unwrap_or(usize::MAX);
        if len > limit {
            return Err(ReadError::TooLarge);
        }
        let mut payload = vec![0u8; len];
        self.stdout
            .read_exact(&mut payload)
            .await
            .map_err(|_| ReadError::Eof)?;
        Ok((kind, Bytes::from(payload)))
    }

    /// The worker closed its pipes mid-call: a crash, `exit()`, or a kill by the memory limit.
    async fn died(&mut self) -> CallResult {
        let (message, report) = self.death().await;
        let failed = InvokeError::FunctionFailed {
            message,
            body: Some(Bytes::from(report)),
        };
        CallResult::from_worker(Err(failed), false)
    }

    /// Waits briefly for a dying worker and describes its end: (summary, stderr tail).
    async fn death(&mut self) -> (String, String) {
        let how = match (&mut self.child, &self.exits) {
            (Some(child), _) => match tokio::time::timeout(DEATH_GRACE, child.wait()).await {
                Ok(Ok(status)) => proc::describe_exit(status),
                _ => "stopped answering".to_owned(),
            },
            (None, Some(exits)) => match exits.take(self.pid, DEATH_GRACE).await {
                Some(status) => proc::describe_exit(status),
                None => "stopped answering".to_owned(),
            },
            (None, None) => "is gone".to_owned(),
        };
        let stderr = match &mut self.stderr {
            Some(tail) => tail.finish(DEATH_GRACE).await,
            None => String::new(),
        };
        let message = proc::summary(&format!("worker process {} {how}", self.pid), &stderr);
        (message, stderr)
    }
}

impl Drop for ProcWorker {
    fn drop(&mut self) {
        proc::kill_group(self.pid);
        if let Some(exits) = &self.exits {
            exits.forget(self.pid);
        }
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = child.start_kill();
        // Reap the killed process so it does not linger as a zombie; without a runtime,
        // `kill_on_drop` hands it to tokio's orphan reaper instead.
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let pid = self.pid;
            handle.spawn(async move {
                let _ = child.wait().await;
                tracing::trace!(pid, "worker reaped");
            });
        }
    }
}

/// The failure a reply frame of `kind` reports, and whether the worker stays usable.
fn failure(kind: u8, report: Bytes) -> (InvokeError, bool) {
    match kind {
        KIND_RAISED | KIND_RETIRE => {
            let text = String::from_utf8_lossy(&report);
            let message = proc::summary("the function raised", &text);
            let failed = InvokeError::FunctionFailed {
                message,
                body: Some(report),
            };
            (failed, kind == KIND_RAISED)
        }
        kind => (
            InvokeError::Protocol(format!("worker sent frame kind {kind}")),
            false,
        ),
    }
}

pub(super) enum ReadError {
    Eof,
    TooLarge,
}
