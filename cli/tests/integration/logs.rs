//! `geofaas logs` against a real `geofaas up` (the deploy tests' Melbourne topology, a child
//! process), run the way users run it: from the `up` folder, with the calls made by `curl`
//! over HTTP/1.1 and HTTP/2.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::deploy::{printed_version, Up, BIN};

/// A python3 function that prints its input to stdout and to stderr.
fn talk_fn(root: &Path) {
    let dir = root.join("talk");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("fn.py"),
        "import sys\n\ndef fn(input, headers):\n    print('said ' + (input or ''))\n    \
         print('warned ' + (input or ''), file=sys.stderr)\n    return 'ok'\n",
    )
    .unwrap();
}

/// `geofaas logs ARGS` from the `up` folder: stdout, after checking it succeeded.
fn logs(up: &Up, args: &[&str]) -> String {
    let mut all = vec!["logs"];
    all.extend_from_slice(args);
    let out = up.geofaas(&all, &[]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "logs {args:?}: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Polls `geofaas logs talk` until it shows `needle`.
fn until_logged(up: &Up, needle: &str) {
    for _ in 0..200 {
        if logs(up, &["talk"]).contains(needle) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{needle} never logged: {}", logs(up, &["talk"]));
}

#[test]
fn logs_of_two_nodes_merge_in_time_order_with_node_version_and_request_id() {
    let up = Up::start(false);
    talk_fn(up.dir.path());
    let version = printed_version(&up.deploy(&["./talk"]));
    let calls = [
        (0, "cbd", "first-call"),
        (1, "carlton", "second-call"),
        (0, "cbd", "third-call"),
    ];
    for (i, (node, _, id)) in calls.iter().enumerate() {
        let header = format!("X-Request-Id: {id}");
        let a = up.call(*node, "talk", i % 2 == 1, &["-H", header.as_str()]);
        assert_eq!((a.status, a.body.as_str()), (200, "ok"), "{id}");
        assert_eq!(a.header("x-request-id"), *id);
        // Each call starts after the one before was logged: their times are in this order.
        until_logged(&up, id);
    }
    let text = logs(&up, &["talk"]);
    let said: Vec<&str> = text.lines().filter(|l| l.contains(" stdout: ")).collect();
    assert_eq!(said.len(), 3, "{text}");
    for (line, (_, node, id)) in said.iter().zip(&calls) {
        let want = format!(" {node} talk@{version} {id} stdout: said hi");
        assert!(
            line.ends_with(&want),
            "{line:?} should end with {want:?}\n{text}"
        );
    }
    let warned = format!(" carlton talk@{version} second-call stderr: warned hi");
    assert!(text.lines().any(|l| l.ends_with(&warned)), "{text}");
    let times: Vec<&str> = text.lines().map(|l| l.split(' ').next().unwrap()).collect();
    let mut sorted = times.clone();
    sorted.sort();
    assert_eq!(times, sorted, "in time order: {text}");
    // Every node was asked: --node narrows it to one.
    let carlton = logs(&up, &["talk", "--node", "carlton"]);
    assert!(carlton.lines().all(|l| l.contains(" carlton ")) && carlton.contains("second-call"));
    assert!(!logs(&up, &["talk", "--since", "1970-01-01T00:00:00Z"]).is_empty());
    let bad = up.geofaas(&["logs", "talk", "--since", "a while"], &[]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("since \"a while\""));
}

#[test]
fn follow_shows_a_line_printed_after_it_started_with_the_calls_request_id() {
    let up = Up::start(false);
    talk_fn(up.dir.path());
    let version = printed_version(&up.deploy(&["./talk"]));
    let before = up.call(0, "talk", false, &[]);
    let before_id = before.header("x-request-id").to_owned();
    let mut follow = Command::new(BIN)
        .args(["logs", "talk", "--follow"])
        .current_dir(up.dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let stdout = follow.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if tx.send((Instant::now(), line)).is_err() {
                return;
            }
        }
    });
    let wait_for = |needle: &str| loop {
        let (at, line) = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("no line with {needle}"));
        if line.contains(needle) && line.contains(" stdout: ") {
            return (at, line);
        }
    };
    // The kept line comes first: the stream is open.
    wait_for(&before_id);
    let after = up.call(1, "talk", true, &[]);
    let answered = Instant::now();
    assert_eq!(after.status, 200);
    let id = after.header("x-request-id").to_owned();
    let (at, line) = wait_for(&id);
    assert!(
        line.ends_with(&format!(" carlton talk@{version} {id} stdout: said hi")),
        "{line}"
    );
    eprintln!(
        "followed line shown {:?} after curl returned the answer",
        at.saturating_duration_since(answered)
    );
    let _ = follow.kill();
    let _ = follow.wait();
}
