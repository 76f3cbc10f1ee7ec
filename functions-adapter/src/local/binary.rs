//! The `binary` runtime: `fn.sh` executed once per call, body on stdin, stdout is the output.
//!
//! There is no long-lived process to keep warm, so a binary "instance" is a pooled slot that
//! bounds concurrency; the first call through a new slot is reported as the cold start (its
//! process start counted as `cold`), later calls through the same slot as warm (the
//! interpreter and script are then in the page cache, but a process still starts per call).

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::proc::{self, StderrTail};
use super::spec::FunctionSpec;
use super::worker::{CallResult, Launch};
use crate::InvokeError;

/// How long to wait for stderr to close after the script exited.
const STDERR_GRACE: Duration = Duration::from_millis(200);

/// Runs `fn.sh` once with `body` on stdin; its stderr lines are the call `request_id`'s.
pub(crate) async fn run(
    spec: &FunctionSpec,
    launch: &Launch,
    body: &[u8],
    request_id: Option<&str>,
) -> CallResult {
    let started = Instant::now();
    let script = spec.dir.join("fn.sh");
    let executable = std::fs::metadata(&script)
        .map(|m| m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false);
    let sh = std::ffi::OsStr::new("/bin/sh");
    let mut cmd = if executable {
        proc::command(
            script.as_os_str(),
            &[],
            &spec.dir,
            &spec.env,
            launch.memory_limit_mb,
        )
    } else {
        proc::command(
            sh,
            &[script.as_os_str()],
            &spec.dir,
            &spec.env,
            launch.memory_limit_mb,
        )
    };
    let fail = |result| CallResult {
        result: Err(result),
        keep: true,
        startup: started.elapsed(),
    };
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => {
            return fail(InvokeError::Unavailable(format!(
                "cannot run {}: {e}",
                script.display()
            )))
        }
    };
    let startup = started.elapsed();
    // Kills leftovers (background jobs of the script) and everything on timeout or drop.
    let group = GroupGuard(child.id());
    let (Some(mut stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return fail(InvokeError::Unavailable("stdio pipe missing".into()));
    };
    let pid = child.id().unwrap_or_default();
    let writer = super::logs::Writer::function(spec, &launch.logs);
    let tagged = super::logs::Tagged::in_call(request_id);
    let mut tail = StderrTail::capture(stderr, writer, pid, tagged);
    let input = Bytes::copy_from_slice(body);
    let feed = tokio::spawn(async move {
        // A script that does not read its input closes the pipe early; that is not an error.
        let _ = stdin.write_all(&input).await;
    });
    let limit = launch.max_output_bytes;
    let mut out = Vec::new();
    let read = stdout.take(limit as u64 + 1).read_to_end(&mut out).await;
    feed.abort();
    let result = if out.len() > limit {
        Err(InvokeError::OutputTooLarge { limit })
    } else if let Err(e) = read {
        Err(InvokeError::Protocol(format!("reading fn.sh output: {e}")))
    } else {
        match child.wait().await {
            Ok(status) if status.success() => Ok(Bytes::from(out)),
            Ok(status) => {
                let stderr = tail.finish(STDERR_GRACE).await;
                let what = format!("fn.sh {}", proc::describe_exit(status));
                Err(InvokeError::FunctionFailed {
                    message: proc::summary(&what, &stderr),
                    body: Some(Bytes::from(stderr)),
                })
            }
            Err(e) => Err(InvokeError::Protocol(format!("waiting for fn.sh: {e}"))),
        }
    };
    drop(group);
    if result.is_ok() {
        // The rest of its stderr, for the function's logs (closed now that the group is gone).
        tail.finish(STDERR_GRACE).await;
    }
    CallResult {
        result: result.map(super::worker::Reply::Raw),
        keep: true,
        startup,
    }
}

/// Kills the process group of a per-call process when the call ends, however it ends.
struct GroupGuard(Option<u32>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pid) = self.0 {
            proc::kill_group(pid);
        }
    }
}
