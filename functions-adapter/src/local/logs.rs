//! What functions write to stdout and stderr on the embedded runtime, kept per function in a
//! bounded ring (`geofaas logs`, the node's `GET /admin/logs`).
//!
//! A worker's prints never travel on its protocol channel: the bootstraps send the function's
//! stdout and stderr down the process's stderr, tagged in band so one channel carries both:
//!
//! - a line starting with `\x1e` opens a call (the rest of the line is its request id; empty
//!   after the call), so each line is attributed to the call that wrote it even when it is read
//!   after the call's answer;
//! - a line starting with `\x1f` is a line the function wrote to stdout; any other line was
//!   written to stderr (tracebacks, `os.write(2, ...)`, the output of programs it ran).
//!
//! [`Tagged`] parses that stream; [`FunctionLogs`] keeps the lines: at most
//! [`FunctionLogs::lines_per_function`] per function (the oldest go first), each cut to
//! [`MAX_LINE_BYTES`], and passes every new line to followers through a bounded broadcast (a
//! slow follower loses lines, counted, and never slows a call).

use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::broadcast;

/// Longest line kept, in bytes; the rest of a longer line is cut (and marked with `…`).
pub const MAX_LINE_BYTES: usize = 4096;
/// Lines kept per function unless the runtime says otherwise.
pub const DEFAULT_LINES_PER_FUNCTION: usize = 1000;
/// Lines a follower may fall behind before it loses some.
const FOLLOW_BUFFER: usize = 1024;
/// In-band tag: the line opens (or, empty, closes) a call; the rest is its request id.
const CALL_TAG: u8 = 0x1e;
/// In-band tag: the line was written to stdout.
const STDOUT_TAG: u8 = 0x1f;

/// Which stream a function wrote a line to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogStream {
    /// Standard output (`print`, `console.log`).
    Stdout,
    /// Standard error, and whatever else the process wrote to its stderr.
    Stderr,
}

impl LogStream {
    /// `stdout` or `stderr`.
    pub fn as_str(self) -> &'static str {
        match self {
            LogStream::Stdout => "stdout",
            LogStream::Stderr => "stderr",
        }
    }
}

/// One line a function wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogLine {
    /// Order of arrival on this runtime (increasing, from 1).
    pub seq: u64,
    /// When the runtime read it, in microseconds since the Unix epoch.
    pub at_us: u64,
    /// The function.
    pub function: Arc<str>,
    /// Its deployed version (`None` for a folder of `functions_dir`).
    pub version: Option<Arc<str>>,
    /// The `X-Request-Id` of the call that wrote it (`None` outside a call: while importing,
    /// or from work a call left running).
    pub request_id: Option<Arc<str>>,
    /// Where it was written.
    pub stream: LogStream,
    /// The line, without its end of line, as lossy UTF-8.
    pub text: String,
}

/// The lines of every function of one runtime. Cheap to share (`Arc`).
#[derive(Debug)]
pub struct FunctionLogs {
    rings: Mutex<HashMap<Arc<str>, VecDeque<Arc<LogLine>>>>,
    per_function: usize,
    seq: AtomicU64,
    follow: broadcast::Sender<Arc<LogLine>>,
}

impl Default for FunctionLogs {
    fn default() -> Self {
        Self::new(DEFAULT_LINES_PER_FUNCTION)
    }
}

impl FunctionLogs {
    /// Keeps at most `per_function` lines of each function (at least one).
    pub fn new(per_function: usize) -> Self {
        let (follow, _) = broadcast::channel(FOLLOW_BUFFER);
        Self {
            rings: Mutex::new(HashMap::new()),
            per_function: per_function.max(1),
            seq: AtomicU64::new(0),
            follow,
        }
    }

    /// How many lines are kept per function.
    pub fn lines_per_function(&self) -> usize {
        self.per_function
    }

    /// Records one line (cut to [`MAX_LINE_BYTES`]), dropping the function's oldest beyond
    /// the bound, and passes it to the followers.
    pub fn push(
        &self,
        function: &Arc<str>,
        version: Option<Arc<str>>,
        request_id: Option<Arc<str>>,
        stream: LogStream,
        text: &[u8],
    ) {
        let text = cut(text);
        let line = {
            let mut rings = self.rings.lock();
            // Numbered and stamped under the lock: a reader of the rings has seen every line
            // up to the highest `seq` it got.
            let line = Arc::new(LogLine {
                seq: self.seq.fetch_add(1, Ordering::Relaxed) + 1,
                at_us: now_us(),
                function: Arc::clone(function),
                version,
                request_id,
                stream,
                text,
            });
            let ring = rings.entry(Arc::clone(function)).or_default();
            if ring.len() >= self.per_function {
                ring.pop_front();
            }
            ring.push_back(Arc::clone(&line));
            line
        };
        // No follower is not an error.
        let _ = self.follow.send(line);
    }

    /// The kept lines of `function` (every function's with `None`) written at or after
    /// `since_us`, in the order they arrived.
    pub fn lines(&self, function: Option<&str>, since_us: u64) -> Vec<Arc<LogLine>> {
        let rings = self.rings.lock();
        let mut out: Vec<Arc<LogLine>> = rings
            .iter()
            .filter(|(name, _)| function.is_none_or(|f| f == &***name))
            .flat_map(|(_, ring)| ring.iter())
            .filter(|l| l.at_us >= since_us)
            .cloned()
            .collect();
        out.sort_by_key(|l| l.seq);
        out
    }

    /// Every line recorded from now on (subscribe before reading [`Self::lines`] and skip the
    /// `seq`s already seen, so no line falls between the two).
    pub fn follow(&self) -> broadcast::Receiver<Arc<LogLine>> {
        self.follow.subscribe()
    }
}

/// Microseconds since the Unix epoch.
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// `text` as lossy UTF-8, cut to [`MAX_LINE_BYTES`] at a character boundary.
fn cut(text: &[u8]) -> String {
    let text = String::from_utf8_lossy(text);
    if text.len() <= MAX_LINE_BYTES {
        return text.into_owned();
    }
    let mut end = MAX_LINE_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// Who wrote a process's stderr, for [`Tagged`]: a function's version, or something else
/// (the zygote, a generic Node.js worker that has no function yet), whose lines are only
/// traced.
#[derive(Clone, Debug)]
pub(crate) struct Writer {
    /// What the trace lines name as the writer.
    pub label: Arc<str>,
    /// The function's version, when the writer is one.
    pub version: Option<Arc<str>>,
    /// Where its lines go (`None`: traced only).
    pub sink: Option<Arc<FunctionLogs>>,
}

impl Writer {
    /// A process that is not (yet) a function: its lines are traced, not kept.
    pub(crate) fn internal(label: &str) -> Self {
        Self {
            label: Arc::from(label),
            version: None,
            sink: None,
        }
    }

    /// A process of `spec`, whose lines go to `sink`.
    pub(crate) fn function(spec: &super::FunctionSpec, sink: &Arc<FunctionLogs>) -> Self {
        Self {
            label: Arc::from(spec.name.as_str()),
            version: spec.version.clone(),
            sink: Some(Arc::clone(sink)),
        }
    }
}

/// Splits one process's stderr into lines and files them: call tags switch the request id,
/// stdout tags mark the stream. Also returns each line's text as the process wrote it (for
/// the error tail), without the tags.
#[derive(Debug, Default)]
pub(crate) struct Tagged {
    partial: Vec<u8>,
    request_id: Option<Arc<str>>,
}

impl Tagged {
    /// A parser whose first lines belong to the call `request_id` (the binary runtime, which
    /// starts one process per call and writes no tags).
    pub(crate) fn in_call(request_id: Option<&str>) -> Self {
        Self {
            partial: Vec::new(),
            request_id: request_id.map(Arc::from),
        }
    }

    /// Files the complete lines of `chunk` with `writer`; the untagged text, for the tail.
    pub(crate) fn feed(&mut self, chunk: &[u8], writer: &Writer) -> Vec<u8> {
        let mut plain = Vec::with_capacity(chunk.len());
        let mut rest = chunk;
        while let Some(end) = rest.iter().position(|b| *b == b'\n') {
            let (line, after) = rest.split_at(end);
            rest = &after[1..];
            if self.partial.is_empty() {
                self.line(line, writer, &mut plain);
            } else {
                let mut whole = std::mem::take(&mut self.partial);
                whole.extend_from_slice(line);
                self.line(&whole, writer, &mut plain);
            }
        }
        self.partial.extend_from_slice(rest);
        if self.partial.len() > MAX_LINE_BYTES {
            let long = std::mem::take(&mut self.partial);
            self.line(&long, writer, &mut plain);
        }
        plain
    }

    /// Files what is left without an end of line (the process closed its stderr).
    pub(crate) fn finish(&mut self, writer: &Writer) -> Vec<u8> {
        let mut plain = Vec::new();
        if !self.partial.is_empty() {
            let rest = std::mem::take(&mut self.partial);
            self.line(&rest, writer, &mut plain);
        }
        plain
    }

    fn line(&mut self, line: &[u8], writer: &Writer, plain: &mut Vec<u8>) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let (stream, text) = match line.split_first() {
            Some((&CALL_TAG, id)) => {
                let id = String::from_utf8_lossy(id);
                let id = id.trim();
                self.request_id = (!id.is_empty()).then(|| Arc::from(id));
                return;
            }
            Some((&STDOUT_TAG, text)) => (LogStream::Stdout, text),
            _ => (LogStream::Stderr, line),
        };
        plain.extend_from_slice(text);
        plain.push(b'\n');
        tracing::debug!(function = %writer.label, stream = stream.as_str(), output = %String::from_utf8_lossy(text), "function output");
        if let Some(sink) = &writer.sink {
            sink.push(
                &writer.label,
                writer.version.clone(),
                self.request_id.clone(),
                stream,
                text,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writer(logs: &Arc<FunctionLogs>, name: &str) -> Writer {
        Writer {
            label: Arc::from(name),
            version: Some(Arc::from("abc123")),
            sink: Some(Arc::clone(logs)),
        }
    }

    #[test]
    fn a_ring_keeps_the_newest_lines_of_each_function_up_to_its_bound() {
        let logs = Arc::new(FunctionLogs::new(3));
        let (a, b): (Arc<str>, Arc<str>) = (Arc::from("a"), Arc::from("b"));
        for i in 0..5 {
            logs.push(
                &a,
                None,
                None,
                LogStream::Stdout,
                format!("a{i}").as_bytes(),
            );
        }
        logs.push(&b, None, None, LogStream::Stderr, b"b0");
        let texts =
            |f| -> Vec<String> { logs.lines(f, 0).iter().map(|l| l.text.clone()).collect() };
        assert_eq!(texts(Some("a")), ["a2", "a3", "a4"]);
        assert_eq!(texts(Some("b")), ["b0"]);
        assert_eq!(texts(None), ["a2", "a3", "a4", "b0"]);
        assert!(texts(Some("c")).is_empty());
        let long = vec![b'x'; MAX_LINE_BYTES * 2];
        logs.push(&b, None, None, LogStream::Stderr, &long);
        let kept = logs.lines(Some("b"), 0);
        assert_eq!(
            kept.last().unwrap().text.len(),
            MAX_LINE_BYTES + '…'.len_utf8()
        );
        let later = kept.last().unwrap().at_us + 1;
        assert!(logs.lines(None, later).is_empty());
    }

    #[test]
    fn tags_attribute_lines_to_calls_and_streams_even_split_across_chunks() {
        let logs = Arc::new(FunctionLogs::new(10));
        let w = writer(&logs, "talk");
        let mut t = Tagged::default();
        let plain = t.feed(b"importing\n\x1ereq-1\n\x1fhel", &w);
        assert_eq!(plain, b"importing\n");
        let plain = t.feed(b"lo\nwarn\n\x1e\nafter", &w);
        assert_eq!(plain, b"hello\nwarn\n");
        assert_eq!(t.finish(&w), b"after\n");
        let lines = logs.lines(Some("talk"), 0);
        let got: Vec<_> = lines
            .iter()
            .map(|l| (l.text.as_str(), l.stream, l.request_id.as_deref()))
            .collect();
        assert_eq!(
            got,
            [
                ("importing", LogStream::Stderr, None),
                ("hello", LogStream::Stdout, Some("req-1")),
                ("warn", LogStream::Stderr, Some("req-1")),
                ("after", LogStream::Stderr, None),
            ]
        );
        assert!(lines.iter().all(|l| l.version.as_deref() == Some("abc123")));
    }

    #[test]
    fn followers_get_new_lines_and_a_slow_one_loses_lines_without_blocking() {
        let logs = Arc::new(FunctionLogs::new(10));
        let mut rx = logs.follow();
        let f: Arc<str> = Arc::from("f");
        for i in 0..FOLLOW_BUFFER + 5 {
            logs.push(&f, None, None, LogStream::Stdout, i.to_string().as_bytes());
        }
        assert!(matches!(
            rx.try_recv(),
            Err(broadcast::error::TryRecvError::Lagged(5))
        ));
        assert_eq!(rx.try_recv().unwrap().text, "5");
        assert_eq!(logs.lines(Some("f"), 0).len(), 10);
    }

    #[test]
    fn an_internal_writer_keeps_nothing() {
        let mut t = Tagged::in_call(Some("r"));
        let plain = t.feed(b"zygote says\n", &Writer::internal("zygote"));
        assert_eq!(plain, b"zygote says\n");
    }
}
