//! What the instances of one function version really use: the proportional set size (PSS,
//! `Pss:` of `/proc/<pid>/smaps_rollup`) of a worker process, sampled after a call left it
//! idle, at most once per [`SAMPLE_EVERY`] per version, on a blocking thread so that the call
//! never waits for the read. PSS counts the pages a worker shares with its zygote or fork
//! server in proportion, so the figure is what one more instance costs the node, not the
//! interpreter counted again for every worker.
//!
//! A read costs 0.2 ms for an idle Python worker and 0.6-1.3 ms for one holding 50 MiB
//! (measured at load average 5 on the shared 2-core machine): hence one per function version
//! every [`SAMPLE_EVERY`] at most, about 0.07 % of a core per busy function.
//!
//! [`MemoryBook::figure`] is the median of the last [`WINDOW`] samples, with their count; the
//! node's live profile uses it in place of the configured size once it has enough of them.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Shortest time between two samples of one function version.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(2);
/// Samples the median is taken over.
pub const WINDOW: usize = 16;

/// The measured memory of one instance of a function.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MemoryFigure {
    /// Median PSS of its recent samples, in MB (10^6 bytes, as `memory_mb` elsewhere).
    pub median_mb: f64,
    /// Samples taken so far.
    pub samples: u64,
}

/// The samples of one function version.
#[derive(Debug, Default)]
pub(crate) struct MemoryBook {
    state: Mutex<Samples>,
    /// A read is running on a blocking thread.
    reading: AtomicBool,
}

#[derive(Debug, Default)]
struct Samples {
    n: u64,
    recent: [f64; WINDOW],
    last: Option<Instant>,
}

impl MemoryBook {
    /// After a call left worker `pid` idle: samples its PSS in the background when the last
    /// sample is older than [`SAMPLE_EVERY`] and no read is running. Needs a tokio runtime.
    pub(crate) fn after_call(self: &std::sync::Arc<Self>, pid: Option<u32>) {
        let Some(pid) = pid else { return };
        {
            let s = self.state.lock();
            if s.last.is_some_and(|t| t.elapsed() < SAMPLE_EVERY) {
                return;
            }
        }
        if self.reading.swap(true, Ordering::AcqRel) {
            return;
        }
        let book = std::sync::Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            if let Some(bytes) = pss_bytes(pid) {
                book.add(bytes as f64 / 1e6);
            }
            book.reading.store(false, Ordering::Release);
        });
    }

    /// Records one sample in MB.
    pub(crate) fn add(&self, mb: f64) {
        let mut s = self.state.lock();
        let i = (s.n % WINDOW as u64) as usize;
        s.recent[i] = mb;
        s.n += 1;
        s.last = Some(Instant::now());
    }

    /// The median of the recent samples; `None` before the first.
    pub(crate) fn figure(&self) -> Option<MemoryFigure> {
        let s = self.state.lock();
        if s.n == 0 {
            return None;
        }
        let len = (s.n as usize).min(WINDOW);
        let mut sorted = s.recent;
        let sorted = &mut sorted[..len];
        sorted.sort_unstable_by(f64::total_cmp);
        let median = if len % 2 == 1 {
            sorted[len / 2]
        } else {
            (sorted[len / 2 - 1] + sorted[len / 2]) / 2.0
        };
        Some(MemoryFigure {
            median_mb: median,
            samples: s.n,
        })
    }
}

/// The PSS of process `pid` in bytes (`None`: no such process, or no `smaps_rollup`).
pub(crate) fn pss_bytes(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    let line = text.lines().find(|l| l.starts_with("Pss:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_figure_is_the_median_of_the_recent_samples() {
        let book = MemoryBook::default();
        assert_eq!(book.figure(), None);
        for mb in [10.0, 12.0, 500.0] {
            book.add(mb);
        }
        assert_eq!(
            book.figure(),
            Some(MemoryFigure {
                median_mb: 12.0,
                samples: 3
            })
        );
        for _ in 0..WINDOW {
            book.add(60.0);
        }
        assert_eq!(book.figure().unwrap().median_mb, 60.0);
        assert_eq!(book.figure().unwrap().samples, 3 + WINDOW as u64);
    }

    #[test]
    fn this_process_has_a_pss_and_a_missing_one_none() {
        let me = pss_bytes(std::process::id()).expect("smaps_rollup of this process");
        assert!(me > 100_000, "{me}");
        assert_eq!(pss_bytes(u32::MAX - 1), None);
    }
}
