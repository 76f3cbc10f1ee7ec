//! CPU time and memory of a node: its own process and every process it started (the embedded
//! runtime's Python zygote, fork servers and function instances, Node.js workers, `fn.sh`
//! runs), read from `/proc`. The gateway process alone idles near 0 % while its functions
//! work in those processes, so a load report counts the whole tree.
//!
//! Finding the descendants means reading every `/proc/<pid>/stat` of the machine (this kernel
//! has no `/proc/<pid>/task/<tid>/children`), so a [`Tree`] followed over time does that only
//! every [`RESCAN`] and in between reads the processes it found: several nodes on one machine
//! do not each read all of the others' processes every report interval.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How often a [`Tree`] reads the whole of `/proc` again for new descendants.
pub const RESCAN: Duration = Duration::from_secs(10);

/// What [`tree`] read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TreeUsage {
    /// CPU time (user + system, including reaped children) of the processes, in clock ticks.
    pub ticks: u64,
    /// Proportional set size (shared pages split among their users, so forked copies are not
    /// counted twice) of the processes in bytes; the resident set where PSS cannot be read.
    pub memory_bytes: u64,
    /// How many processes: this one and its live descendants.
    pub processes: usize,
}

/// One `/proc/<pid>/stat`: parent and CPU ticks (utime + stime + cutime + cstime).
fn stat(pid: u32) -> Option<(u32, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = text.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let num = |i: usize| f.get(i)?.parse::<u64>().ok();
    let ppid = f.get(1)?.parse::<u32>().ok()?;
    Some((ppid, num(11)? + num(12)? + num(13)? + num(14)?))
}

/// Memory of `pid` in bytes: `Pss` of `smaps_rollup`, else the resident set of `statm`.
fn memory(pid: u32) -> u64 {
    let pss = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("Pss:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        });
    match pss {
        Some(kb) => kb * 1024,
        None => std::fs::read_to_string(format!("/proc/{pid}/statm"))
            .ok()
            .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
            .map_or(0, |pages| pages * 4096),
    }
}

/// This process and its live descendants, summed (zeros where there is no `/proc`).
pub fn tree() -> TreeUsage {
    scan().0
}

/// This process's tree read over time: [`tree`] every [`RESCAN`], in between only the
/// descendants the last scan found (one that started since shows at the next scan).
#[derive(Debug, Default)]
pub struct Tree {
    descendants: Vec<u32>,
    scanned: Option<Instant>,
}

impl Tree {
    /// The tree's usage now.
    pub fn sample(&mut self) -> TreeUsage {
        if self.scanned.is_none_or(|at| at.elapsed() >= RESCAN) {
            let (usage, descendants) = scan();
            self.descendants = descendants;
            self.scanned = Some(Instant::now());
            return usage;
        }
        let me = std::process::id();
        let mut usage = TreeUsage {
            ticks: stat(me).map_or(0, |(_, ticks)| ticks),
            memory_bytes: memory(me),
            processes: 1,
        };
        self.descendants.retain(|&pid| match stat(pid) {
            Some((_, ticks)) => {
                usage.ticks += ticks;
                usage.memory_bytes += memory(pid);
                usage.processes += 1;
                true
            }
            None => false,
        });
        usage
    }
}

/// [`tree`], with the descendants' pids.
fn scan() -> (TreeUsage, Vec<u32>) {
    let me = std::process::id();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return (TreeUsage::default(), Vec::new());
    };
    let mut children: HashMap<u32, Vec<(u32, u64)>> = HashMap::new();
    let mut own = None;
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Some((ppid, ticks)) = stat(pid) else {
            continue;
        };
        if pid == me {
            own = Some(ticks);
        }
        children.entry(ppid).or_default().push((pid, ticks));
    }
    let mut usage = TreeUsage {
        ticks: own.unwrap_or(0),
        memory_bytes: memory(me),
        processes: 1,
    };
    let mut todo = vec![me];
    let mut descendants = Vec::new();
    while let Some(parent) = todo.pop() {
        for &(pid, ticks) in children.get(&parent).map_or(&[][..], Vec::as_slice) {
            usage.ticks += ticks;
            usage.memory_bytes += memory(pid);
            usage.processes += 1;
            todo.push(pid);
            descendants.push(pid);
        }
    }
    (usage, descendants)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_child_counts_in_the_tree_and_not_in_the_process_alone() {
        let before = tree();
        let own_before = crate::record::process_usage().0;
        let mut child = std::process::Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let grown = loop {
            let now = tree();
            if now.processes > before.processes && now.ticks >= before.ticks + 20 {
                break now;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the busy child never showed"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        let own = crate::record::process_usage().0 - own_before;
        child.kill().unwrap();
        child.wait().unwrap();
        // The child burned at least 20 ticks; the test thread mostly slept.
        assert!(grown.ticks - before.ticks > own, "{grown:?} vs own {own}");
        assert!(grown.memory_bytes > 0);
    }

    /// Between scans a followed tree reads the children it found: a child that exits drops out
    /// at once, one started since waits for the next scan.
    #[test]
    fn a_followed_tree_reads_the_children_its_last_scan_found() {
        let mut first = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let mut tree = Tree::default();
        let scanned = tree.sample();
        let mut second = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        assert_eq!(tree.sample().processes, scanned.processes, "no rescan yet");
        first.kill().unwrap();
        first.wait().unwrap();
        assert_eq!(tree.sample().processes, scanned.processes - 1);
        assert!(
            super::tree().processes >= scanned.processes,
            "a scan sees the second"
        );
        second.kill().unwrap();
        second.wait().unwrap();
    }
}
