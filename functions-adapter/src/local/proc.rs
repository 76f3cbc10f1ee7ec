//! Starting and stopping function processes: memory limit, process group, stderr capture.
//!
//! Every function process leads its own process group so that a timeout or shutdown kills
//! whatever it spawned too (a `fn.sh` running `sleep` would otherwise keep the pipes open).
//! The address-space limit is set by a `/bin/sh` wrapper (`ulimit -v`, then `exec`) because
//! setting it between fork and exec needs `pre_exec`, which is `unsafe` and this crate forbids
//! unsafe code; the wrapper execs in place, so the worker keeps the wrapper's PID.

use parking_lot::Mutex;
use std::ffi::OsStr;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::AsyncReadExt;
use tokio::process::Command;
use tokio::task::JoinHandle;

use super::logs::{Tagged, Writer};

/// How much of a process's stderr is kept for error messages.
const TAIL_BYTES: usize = 8 * 1024;

/// A command for a function process: piped stdio, own process group, killed on drop, `env`
/// added to the environment, and an address-space limit of `memory_limit_mb` MiB (0 = none).
pub(crate) fn command(
    program: &OsStr,
    args: &[&OsStr],
    dir: &Path,
    env: &[(String, String)],
    memory_limit_mb: u64,
) -> Command {
    let mut cmd = if memory_limit_mb == 0 {
        Command::new(program)
    } else {
        let mut sh = Command::new("/bin/sh");
        sh.arg("-c")
            .arg(r#"ulimit -v "$1" || exit 125; shift; exec "$@""#)
            .arg("geofaas-worker")
            .arg(memory_limit_mb.saturating_mul(1024).to_string())
            .arg(program);
        sh
    };
    cmd.args(args)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("PYTHONUNBUFFERED", "1")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .process_group(0)
        .kill_on_drop(true);
    cmd
}

/// Sends SIGKILL to the process group led by `pid` (errors such as "no such group" ignored).
pub(crate) fn kill_group(pid: u32) {
    if let Ok(raw) = i32::try_from(pid) {
        if raw > 0 {
            let _ = killpg(Pid::from_raw(raw), Signal::SIGKILL);
        }
    }
}

/// Describes how a process ended, e.g. `exited with status 1` or `was killed by signal 9`.
pub(crate) fn describe_exit(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(9)) => "was killed by signal 9 (SIGKILL, e.g. out of memory)".to_owned(),
        (None, Some(11)) => "was killed by signal 11 (SIGSEGV)".to_owned(),
        (None, Some(sig)) => format!("was killed by signal {sig}"),
        (None, None) => "ended".to_owned(),
    }
}

/// The last bytes a process wrote to stderr, collected by a background task that also traces
/// them and files a function's lines in its runtime's logs ([`super::logs`]).
#[derive(Debug)]
pub(crate) struct StderrTail {
    buf: Arc<Mutex<Vec<u8>>>,
    /// Who writes (a generic worker becomes a function when it loads one).
    writer: Arc<Mutex<Writer>>,
    task: Option<JoinHandle<()>>,
}

impl StderrTail {
    /// Starts reading `stderr` of the process `pid` written by `writer`; `tagged` knows the
    /// call it starts in, if any.
    pub(crate) fn capture(
        mut stderr: impl tokio::io::AsyncRead + Send + Unpin + 'static,
        writer: Writer,
        pid: u32,
        mut tagged: Tagged,
    ) -> Self {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&buf);
        let writer = Arc::new(Mutex::new(writer));
        let named = Arc::clone(&writer);
        let task = tokio::spawn(async move {
            let mut chunk = [0u8; 4096];
            let keep = |plain: Vec<u8>| {
                let mut tail = sink.lock();
                tail.extend_from_slice(&plain);
                let excess = tail.len().saturating_sub(TAIL_BYTES);
                tail.drain(..excess);
            };
            let current = || Some(named.lock().clone());
            while let Ok(n) = stderr.read(&mut chunk).await {
                if n == 0 {
                    break;
                }
                let Some(writer) = current() else { break };
                tracing::trace!(function = %writer.label, pid, bytes = n, "function stderr");
                keep(tagged.feed(&chunk[..n], &writer));
            }
            if let Some(writer) = current() {
                keep(tagged.finish(&writer));
            }
        });
        Self {
            buf,
            writer,
            task: Some(task),
        }
    }

    /// Names the writer anew from now on (a generic worker that loaded a function).
    pub(crate) fn relabel(&self, writer: Writer) {
        *self.writer.lock() = writer;
    }

    /// Waits up to `wait` for the process to close stderr, then returns what was captured.
    pub(crate) async fn finish(&mut self, wait: Duration) -> String {
        if let Some(task) = self.task.take() {
            let abort = task.abort_handle();
            if tokio::time::timeout(wait, task).await.is_err() {
                abort.abort();
            }
        }
        self.text()
    }

    /// What was captured so far, as lossy UTF-8.
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.buf.lock()).into_owned()
    }
}

impl Drop for StderrTail {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// A one-line failure summary: `what`, plus the last non-empty line of `stderr` if any.
pub(crate) fn summary(what: &str, stderr: &str) -> String {
    match stderr.lines().rev().map(str::trim).find(|l| !l.is_empty()) {
        Some(last) => format!("{what}: {last}"),
        None => what.to_owned(),
    }
}
