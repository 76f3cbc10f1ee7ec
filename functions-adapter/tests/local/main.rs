//! Integration tests of the embedded `local` runtime against real python3, node and sh
//! processes. Fixtures live in `tests/fixtures/local/`, the shipped examples in `functions/`.
//!
//! Needs `python3` (3.8+), `node` (18+) and `/bin/sh` on the PATH.

mod examples;
mod failures;
mod http;
mod latency;
mod lifecycle;
mod memory;
mod node_pool;
mod prewarm;
mod runtimes;
mod zygote;

use std::path::{Path, PathBuf};
use std::time::Duration;

use geofaas_config::LocalBackend;
use geofaas_functions::local::{load_function, FunctionSpec, LocalRuntime};
use geofaas_functions::{ContainerChoice, FunctionBackend, Invocation, InvokeError, InvokeOutput};

/// The crate folder (base of relative `functions_dir`s).
pub fn crate_dir() -> PathBuf {
    geofaas_test_support::paths::manifest_dir()
}

/// Settings serving the test fixtures, short timeouts so failures fail fast.
pub fn fixtures() -> LocalBackend {
    LocalBackend {
        functions_dir: PathBuf::from("tests/fixtures/local"),
        max_instances: 2,
        keep_alive_s: 300,
        timeout_ms: 10_000,
        ..LocalBackend::default()
    }
}

/// A runtime over `cfg` (relative to the crate folder); panics with the error if it fails.
pub fn runtime(cfg: &LocalBackend) -> LocalRuntime {
    match LocalRuntime::new(cfg, &crate_dir()) {
        Ok(rt) => rt,
        Err(e) => panic!("local runtime did not start: {e}"),
    }
}

/// Calls `function` with `body`, the default container choice and a 15 s deadline.
pub async fn call(
    rt: &LocalRuntime,
    function: &str,
    body: &str,
) -> Result<InvokeOutput, InvokeError> {
    call_with(
        rt,
        function,
        body,
        ContainerChoice::Any,
        Duration::from_secs(15),
    )
    .await
}

/// Calls `function` with the given container choice and deadline.
pub async fn call_with(
    rt: &LocalRuntime,
    function: &str,
    body: &str,
    container: ContainerChoice,
    timeout: Duration,
) -> Result<InvokeOutput, InvokeError> {
    let mut inv = Invocation::new(function, body.to_owned(), timeout);
    inv.container = container;
    rt.invoke(inv).await
}

/// The output of a call that must succeed, as text.
pub async fn ok_text(rt: &LocalRuntime, function: &str, body: &str) -> (String, InvokeOutput) {
    match call(rt, function, body).await {
        Ok(out) => (
            String::from_utf8_lossy(out.body.full().expect("a whole body")).into_owned(),
            out,
        ),
        Err(e) => panic!("{function}({body:?}) failed: {e}"),
    }
}

/// The PID a fixture printed as the first word of its output.
pub fn pid_of(text: &str) -> u32 {
    let first = text.split_whitespace().next().unwrap_or_default();
    first
        .parse()
        .unwrap_or_else(|_| panic!("output {text:?} does not start with a pid"))
}

/// Whether `pid` is a live process (zombies count as gone).
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // Format: `pid (comm) state ...`; comm may hold spaces, so look after the last ')'.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// The soft address-space limit (RLIMIT_AS) of process `pid` in bytes, as `/proc` prints it.
pub fn address_space_limit(pid: u32) -> String {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).expect("limits");
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max address space"))
        .unwrap_or_else(|| panic!("no address-space line in {limits}"));
    let fields: Vec<&str> = line.split_whitespace().collect();
    fields.get(3).copied().unwrap_or_default().to_owned()
}

/// Polls (bounded, 10 s) until `cond` holds; returns whether it did.
pub async fn eventually(cond: impl FnMut() -> bool) -> bool {
    geofaas_test_support::eventually::holds_within(Duration::from_secs(10), cond).await
}

/// Asserts that `pid` exits within the bounded wait.
pub async fn assert_gone(pid: u32) {
    assert!(
        eventually(|| !alive(pid)).await,
        "process {pid} is still running"
    );
}

/// The parent of `pid`, from `/proc` (panics if `pid` is gone).
pub fn parent_of(pid: u32) -> u32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .unwrap_or_else(|e| panic!("process {pid}: {e}"));
    // Format: `pid (comm) state ppid ...`; comm may hold spaces, so look after the last ')'.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let ppid = after.split_whitespace().nth(1).unwrap_or_default();
    ppid.parse()
        .unwrap_or_else(|_| panic!("no parent in {stat:?}"))
}

/// Writes function `name` (one `file` holding `text`) under `root` and loads its spec.
pub fn write_function(root: &Path, name: &str, file: &str, text: &str) -> FunctionSpec {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join(file), text).expect("write function");
    load_function(name, &dir).unwrap_or_else(|e| panic!("function {name}: {e}"))
}

/// Settings over an empty functions folder `dir` (functions come through `prepare`).
pub fn empty(dir: &Path) -> LocalBackend {
    LocalBackend {
        functions_dir: dir.to_path_buf(),
        ..fixtures()
    }
}
