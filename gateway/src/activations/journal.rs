//! The activation journal: every accepted asynchronous call, every failed try and every
//! finished call as one JSON line in append-only segment files under the node's state folder
//! (`activations/0000000001.log`, ...).
//!
//! Writes go through one thread that **group-commits**: the lines that arrived while the last
//! batch was being synced are written together and synced with one `fdatasync`, and each
//! writer is told when its line is on disk. An accepted call's `202` waits for that.
//!
//! A node that starts reads every segment in order ([`Journal::open`]): a call accepted and not
//! finished is run again, a finished one is kept until its retention ends. It then writes to a
//! new segment; a torn last line (a write the crash cut short, never acknowledged) is skipped.
//! A segment is deleted once none of its calls is waiting or running and the answers it holds
//! are past their retention.

use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, SystemTime};

use super::saved::Record;

/// A segment is closed and a new one started past this size.
const SEGMENT_BYTES: u64 = 8 << 20;
/// Most lines written and synced together.
const MAX_BATCH: usize = 4096;
/// How often the writer looks for segments it may delete when idle.
const COLLECT_EVERY: Duration = Duration::from_secs(30);

/// What a line means for the segments' lifetimes.
#[derive(Debug)]
enum Effect {
    /// The call `id` is waiting or running: the segment stays.
    Pending(String),
    /// The call `id` ended: the segments of its pending lines may go, this one stays until
    /// `keep_until`.
    Finished { id: String, keep_until: SystemTime },
    /// Nothing for the lifetimes.
    None,
}

struct Write_ {
    line: Vec<u8>,
    effect: Effect,
    synced: Option<tokio::sync::oneshot::Sender<io::Result<()>>>,
}

/// The writer's handle, shared by the node's calls.
#[derive(Debug)]
pub(crate) struct Journal {
    tx: Option<mpsc::Sender<Write_>>,
    dir: PathBuf,
    /// The writer, joined on drop (so its lock is released when the journal is gone).
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Journal {
    fn drop(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl std::fmt::Debug for Write_ {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Write")
            .field("effect", &self.effect)
            .finish()
    }
}

impl Journal {
    /// Opens the journal in `dir` (created if missing): the records of every segment, in the
    /// order they were written, and a writer appending to a new segment.
    pub(crate) fn open(dir: &Path) -> io::Result<(Self, Vec<Record>)> {
        std::fs::create_dir_all(dir)?;
        // One writer per journal: a second node on the same state folder is refused.
        let lock = File::create(dir.join("lock"))?;
        if let Err(e) = lock.try_lock() {
            return Err(io::Error::other(format!(
                "another process holds it ({e}): is a node with this state folder running?"
            )));
        }
        let mut segments = list_segments(dir)?;
        segments.sort_unstable();
        let mut records = Vec::new();
        let mut lifetimes = Lifetimes::default();
        for &seq in &segments {
            let path = segment_path(dir, seq);
            let file = File::open(&path)?;
            lifetimes.segments.entry(seq).or_default();
            let mut torn = 0usize;
            for line in io::BufReader::new(file).split(b'\n') {
                let line = line?;
                if line.is_empty() {
                    continue;
                }
                match serde_json::from_slice::<Record>(&line) {
                    Ok(r) => {
                        lifetimes.apply(seq, &r.effect());
                        records.push(r);
                    }
                    Err(_) => torn += 1,
                }
            }
            if torn > 0 {
                tracing::warn!(segment = %path.display(), lines = torn, "activation journal: skipped lines that do not parse (a write cut short by a crash)");
            }
        }
        let next = segments.last().map_or(1, |s| s + 1);
        let writer = Writer::start(dir, next, lifetimes, lock)?;
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("activation-journal".into())
            .spawn(move || writer.run(rx))?;
        Ok((
            Self {
                tx: Some(tx),
                dir: dir.to_owned(),
                thread: Some(thread),
            },
            records,
        ))
    }

    /// Appends `record` and waits until it is on disk (or the write failed).
    pub(crate) async fn write_synced(&self, record: &Record) -> io::Result<()> {
        let (synced, done) = tokio::sync::oneshot::channel();
        self.send(record, Some(synced))?;
        done.await
            .unwrap_or_else(|_| Err(io::Error::other("the journal's writer stopped")))
    }

    /// Appends `record` without waiting; it is synced with the next batch.
    pub(crate) fn write(&self, record: &Record) {
        if let Err(e) = self.send(record, None) {
            tracing::error!(dir = %self.dir.display(), error = %e, "activation journal: write failed");
        }
    }

    fn send(
        &self,
        record: &Record,
        synced: Option<tokio::sync::oneshot::Sender<io::Result<()>>>,
    ) -> io::Result<()> {
        let line = serde_json::to_vec(record).map_err(io::Error::other)?;
        let tx = self
            .tx
            .as_ref()
            .ok_or_else(|| io::Error::other("the journal is closed"))?;
        tx.send(Write_ {
            line,
            effect: record.effect(),
            synced,
        })
        .map_err(|_| io::Error::other("the journal's writer stopped"))
    }
}

impl Record {
    fn effect(&self) -> Effect {
        match self {
            Record::Accepted { id, .. } | Record::Attempt { id, .. } => Effect::Pending(id.clone()),
            Record::Finished {
                id, keep_until_ms, ..
            } => Effect::Finished {
                id: id.clone(),
                keep_until: SystemTime::UNIX_EPOCH + Duration::from_millis(*keep_until_ms),
            },
            Record::Delivered { .. } => Effect::None,
        }
    }
}

/// Which segments still hold something needed.
#[derive(Debug, Default)]
struct Lifetimes {
    segments: BTreeMap<u64, Segment>,
    /// The segments holding the pending lines of each unfinished call.
    pending: HashMap<String, Vec<u64>>,
}

#[derive(Debug, Default)]
struct Segment {
    /// Lines of calls not finished yet.
    pending: usize,
    /// The last moment an answer it holds is still kept.
    keep_until: Option<SystemTime>,
}

impl Lifetimes {
    fn apply(&mut self, seq: u64, effect: &Effect) {
        match effect {
            Effect::Pending(id) => {
                self.segments.entry(seq).or_default().pending += 1;
                self.pending.entry(id.clone()).or_default().push(seq);
            }
            Effect::Finished { id, keep_until } => {
                for s in self.pending.remove(id).unwrap_or_default() {
                    if let Some(seg) = self.segments.get_mut(&s) {
                        seg.pending = seg.pending.saturating_sub(1);
                    }
                }
                let seg = self.segments.entry(seq).or_default();
                seg.keep_until = seg.keep_until.max(Some(*keep_until));
            }
            Effect::None => {}
        }
    }

    /// The segments before `current` that hold nothing needed at `now`.
    fn expired(&self, current: u64, now: SystemTime) -> Vec<u64> {
        self.segments
            .iter()
            .filter(|(&seq, s)| {
                seq < current && s.pending == 0 && s.keep_until.is_none_or(|k| k < now)
            })
            .map(|(&seq, _)| seq)
            .collect()
    }
}

/// The thread that owns the segment files.
struct Writer {
    dir: PathBuf,
    /// Held (locked) while the writer runs.
    _lock: File,
    file: File,
    seq: u64,
    len: u64,
    lifetimes: Lifetimes,
}

impl Writer {
    fn start(dir: &Path, seq: u64, mut lifetimes: Lifetimes, lock: File) -> io::Result<Self> {
        let file = create_segment(dir, seq)?;
        lifetimes.segments.entry(seq).or_default();
        let mut w = Self {
            dir: dir.to_owned(),
            _lock: lock,
            file,
            seq,
            len: 0,
            lifetimes,
        };
        w.collect();
        Ok(w)
    }

    fn run(mut self, rx: mpsc::Receiver<Write_>) {
        loop {
            let first = match rx.recv_timeout(COLLECT_EVERY) {
                Ok(w) => w,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    self.collect();
                    continue;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            };
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(w) => batch.push(w),
                    Err(_) => break,
                }
            }
            let result = self.append(&batch);
            if result.is_ok() {
                for w in &batch {
                    self.lifetimes.apply(self.seq, &w.effect);
                }
                if self.len >= SEGMENT_BYTES {
                    self.roll();
                }
            }
            for w in batch {
                if let Some(tx) = w.synced {
                    let r = match &result {
                        Ok(()) => Ok(()),
                        Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
                    };
                    let _ = tx.send(r);
                }
            }
        }
    }

    /// Writes the batch's lines and syncs them; a failed write is cut off again so the next
    /// batch starts on a line of its own.
    fn append(&mut self, batch: &[Write_]) -> io::Result<()> {
        let mut buf = Vec::with_capacity(batch.iter().map(|w| w.line.len() + 1).sum());
        for w in batch {
            buf.extend_from_slice(&w.line);
            buf.push(b'\n');
        }
        let written = self
            .file
            .write_all(&buf)
            .and_then(|()| self.file.sync_data());
        match written {
            Ok(()) => {
                self.len += buf.len() as u64;
                Ok(())
            }
            Err(e) => {
                tracing::error!(dir = %self.dir.display(), error = %e, "activation journal: write failed");
                if self.file.set_len(self.len).is_err() {
                    self.roll();
                }
                Err(e)
            }
        }
    }

    /// Starts the next segment (keeping the current one if the new file cannot be made).
    fn roll(&mut self) {
        match create_segment(&self.dir, self.seq + 1) {
            Ok(file) => {
                self.file = file;
                self.seq += 1;
                self.len = 0;
                self.lifetimes.segments.entry(self.seq).or_default();
                self.collect();
            }
            Err(e) => {
                tracing::error!(dir = %self.dir.display(), error = %e, "activation journal: cannot start a new segment")
            }
        }
    }

    /// Deletes the segments nothing needs any more.
    fn collect(&mut self) {
        for seq in self.lifetimes.expired(self.seq, SystemTime::now()) {
            match std::fs::remove_file(segment_path(&self.dir, seq)) {
                Ok(()) => {
                    self.lifetimes.segments.remove(&seq);
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    self.lifetimes.segments.remove(&seq);
                }
                Err(e) => {
                    tracing::warn!(segment = seq, error = %e, "activation journal: cannot delete a segment")
                }
            }
        }
    }
}

fn segment_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("{seq:010}.log"))
}

/// A new empty segment, its directory entry synced.
fn create_segment(dir: &Path, seq: u64) -> io::Result<File> {
    let file = OpenOptions::new()
        .create_new(true)
        .append(true)
        .open(segment_path(dir, seq))?;
    File::open(dir)?.sync_all()?;
    Ok(file)
}

fn list_segments(dir: &Path) -> io::Result<Vec<u64>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name();
        let name = name.to_string_lossy();
        if let Some(seq) = name.strip_suffix(".log").and_then(|s| s.parse().ok()) {
            out.push(seq);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_segment_goes_when_its_calls_ended_and_its_answers_expired() {
        let mut l = Lifetimes::default();
        let now = SystemTime::now();
        let later = now + Duration::from_secs(60);
        l.apply(1, &Effect::Pending("a".into()));
        l.apply(1, &Effect::Pending("b".into()));
        l.apply(2, &Effect::Pending("a".into()));
        l.apply(
            2,
            &Effect::Finished {
                id: "a".into(),
                keep_until: now,
            },
        );
        // "b" still runs: segment 1 stays; segment 2 holds an answer kept until `now`.
        assert_eq!(l.expired(3, now + Duration::from_secs(1)), [2]);
        l.apply(
            3,
            &Effect::Finished {
                id: "b".into(),
                keep_until: later,
            },
        );
        assert_eq!(l.expired(4, now + Duration::from_secs(1)), [1, 2]);
        // The current segment is never deleted, nor one whose answer is still kept.
        assert_eq!(l.expired(3, later + Duration::from_secs(1)), [1, 2]);
        assert_eq!(l.expired(4, later + Duration::from_secs(1)), [1, 2, 3]);
    }
}
