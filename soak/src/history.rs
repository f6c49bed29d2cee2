//! The history: what every process did and saw, one JSON object a line, in a file per
//! process. Timestamps are `CLOCK_MONOTONIC` nanoseconds, one clock for every process on the
//! machine, so the checker can order events across files.
//!
//! The clock is read through the vDSO directly (rustix), not through the C library: a
//! worker whose clock is made to run at another rate (libfaketime, preloaded into the C
//! library's `clock_gettime`) still stamps its history on the machine's one clock.

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use rustix::time::{ClockId, clock_gettime};
use serde::{Deserialize, Serialize};

/// Nanoseconds on `CLOCK_MONOTONIC`: comparable across the processes of one machine.
pub(crate) fn now() -> u64 {
    let ts = clock_gettime(ClockId::Monotonic);
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
    secs.saturating_mul(1_000_000_000).saturating_add(nanos)
}

/// What an event is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Kind {
    /// Taking a lock, a permit or leadership (`what` says which).
    Acquire,
    /// Giving it back.
    Release,
    /// A lease's cancellation token fired, as its holder saw it.
    Fired,
    /// A write to the register (fenced with `token`, or the unfenced counter without).
    Write,
    /// A read of the unfenced counter.
    Read,
    /// One step of a reshard (`detail` holds the layout).
    Reshard,
    /// A fault, from its start (invoke) to its heal (ok).
    Fault,
    /// SIGSTOP of `target`.
    Stop,
    /// SIGCONT of `target`.
    Cont,
    /// SIGKILL of `target`.
    Kill,
    /// A process started (`target`: which one).
    Start,
    /// A worker finished its run and is about to exit.
    Exit,
    /// The cluster's health check after a fault.
    Health,
    /// An owner or waiter left on the server after every worker exited.
    Leftover,
    /// A worker's session on a node (`name`: the node's last path segment, `value`: the
    /// session id), when the worker starts using it.
    Session,
    /// The server expires the session `value` on the node `name`: its leases on that node
    /// end at this instant, whatever their holder knows.
    Expire,
    /// A lease's token fired while its holder still held it, as a task of the worker that
    /// watches nothing else saw it: the library's signal, whatever the holder was doing.
    Token,
    /// The server: a session started (`session`, on `node`; `detail`: its description, the
    /// worker's process name).
    ServerSession,
    /// The server: a stream attached to `session` on `node`.
    Attach,
    /// The server: the stream of `session` on `node` ended; its expiry clock runs.
    Detach,
    /// The server: `session` on `node` ended (`detail`: `stopped`, `expired` by its timeout,
    /// `forced` by the fault control).
    SessionEnd,
    /// The server: `session` on `node` was granted the semaphore `name` (`value`: the order
    /// id, `token`: `[limit, order id, count]`).
    Grant,
    /// The server: `session` on `node` stopped owning `name` (`value`: the order id;
    /// `detail`: `released`, `session-ended`, `deleted`).
    Revoke,
    /// The server: the tablet of `node` restarted.
    Restart,
    /// A fenced write to the real resource (`--resource postgres`), made with the register
    /// write of the same op: as its worker saw it (`ok` applied, `fail` refused as stale,
    /// `unknown`), and as the resource kept it (process `postgres`, one `ok` per row of its
    /// history table in the order it accepted them: `target` and `target_op` the writer's
    /// process and op).
    Fenced,
}

/// Where in its life an operation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Phase {
    /// Asked.
    Invoke,
    /// Done as asked.
    Ok,
    /// Definitely not done.
    Fail,
    /// Maybe done (a timeout, a broken connection).
    Unknown,
    /// An observation, not an operation.
    Info,
}

/// Which workload a lease belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum What {
    /// The fenced mutex: exclusive, the holder writes with its token.
    Mutex,
    /// The lock around the unfenced counter: exclusive, its writes carry no token.
    Counter,
    /// The counted semaphore (limit [`crate::worker::PERMITS`]).
    Semaphore,
    /// The election: one leader at a time, writing with its token.
    Election,
    /// A name in the lock space: exclusive, written with its space token.
    Space,
}

impl What {
    /// Whether at most one lease of a name may be held at once.
    pub(crate) fn exclusive(self) -> bool {
        self != What::Semaphore
    }
}

/// A fencing token as the register orders it: (layout epoch, order id, write number). A
/// plain node's lock has epoch 0; a holder numbers its writes so that each one is greater
/// than its previous one, and every write of a later holder greater than all of them.
pub(crate) type Token = [u64; 3];

/// One line of a history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Event {
    /// `CLOCK_MONOTONIC` nanoseconds.
    pub(crate) ts: u64,
    /// The process that wrote the line: `w3.1` (worker slot 3, second incarnation),
    /// `controller`, `register`.
    pub(crate) process: String,
    /// The operation's id, unique within `process`; the phases of one operation share it.
    pub(crate) op: u64,
    pub(crate) kind: Kind,
    pub(crate) phase: Phase,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) what: Option<What>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) name: Option<String>,
    /// The op id of the acquire whose lease this event is about (writes, fired, release).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) lease: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) token: Option<Token>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) value: Option<u64>,
    /// The process a controller or register event is about (a fault's victim, a write's
    /// writer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) target: Option<String>,
    /// For register events: the writer's op id of the write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) target_op: Option<u64>,
    /// The coordination node (its last path segment) of a server event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) node: Option<String>,
    /// The session of a server event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) session: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) detail: Option<String>,
    /// The line's number in its file, from 1: a gap is a line lost (a failed write).
    #[serde(default)]
    pub(crate) seq: u64,
}

impl Event {
    /// An event of `process` now, with no optional fields.
    pub(crate) fn new(process: &str, op: u64, kind: Kind, phase: Phase) -> Self {
        Self {
            ts: now(),
            process: process.to_string(),
            op,
            kind,
            phase,
            what: None,
            name: None,
            lease: None,
            token: None,
            value: None,
            target: None,
            target_op: None,
            node: None,
            session: None,
            detail: None,
            seq: 0,
        }
    }

    pub(crate) fn at(mut self, ts: u64) -> Self {
        self.ts = ts;
        self
    }

    pub(crate) fn what(mut self, what: What) -> Self {
        self.what = Some(what);
        self
    }

    pub(crate) fn name(mut self, name: &str) -> Self {
        self.name = Some(name.to_string());
        self
    }

    pub(crate) fn lease(mut self, lease: u64) -> Self {
        self.lease = Some(lease);
        self
    }

    pub(crate) fn token(mut self, token: Token) -> Self {
        self.token = Some(token);
        self
    }

    pub(crate) fn value(mut self, value: u64) -> Self {
        self.value = Some(value);
        self
    }

    pub(crate) fn target(mut self, target: &str) -> Self {
        self.target = Some(target.to_string());
        self
    }

    pub(crate) fn target_op(mut self, op: u64) -> Self {
        self.target_op = Some(op);
        self
    }

    pub(crate) fn node(mut self, node: &str) -> Self {
        self.node = Some(node.to_string());
        self
    }

    pub(crate) fn session(mut self, session: u64) -> Self {
        self.session = Some(session);
        self
    }

    pub(crate) fn detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }
}

/// Appends a process's events to its file, one `write` a line, so that a SIGKILL loses at
/// most the line being written.
#[derive(Debug)]
pub(crate) struct Recorder {
    process: String,
    /// The file and the number of lines written to it.
    file: Mutex<(File, u64)>,
    next_op: AtomicU64,
}

impl Recorder {
    /// Creates (or appends to) the history file of `process`.
    pub(crate) fn create(path: &Path, process: &str) -> io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Self {
            process: process.to_string(),
            file: Mutex::new((file, 0)),
            next_op: AtomicU64::new(1),
        })
    }

    /// The process name its events carry.
    pub(crate) fn process(&self) -> &str {
        &self.process
    }

    /// A fresh operation id.
    pub(crate) fn op(&self) -> u64 {
        self.next_op.fetch_add(1, Ordering::Relaxed)
    }

    /// An event of this process now.
    pub(crate) fn event(&self, op: u64, kind: Kind, phase: Phase) -> Event {
        Event::new(&self.process, op, kind, phase)
    }

    /// Appends one event. A history that cannot be written makes the run unverifiable, but
    /// the process goes on: the checker reports the gap as a missing or truncated file.
    #[allow(
        clippy::significant_drop_tightening,
        reason = "numbered and written under one lock, so lines are in their order"
    )]
    pub(crate) fn record(&self, event: &Event) {
        let mut file = self.file.lock().unwrap_or_else(PoisonError::into_inner);
        let (file, lines) = &mut *file;
        *lines += 1;
        let numbered = Event {
            seq: *lines,
            ..event.clone()
        };
        let Ok(mut line) = serde_json::to_vec(&numbered) else {
            return;
        };
        line.push(b'\n');
        let _ = file.write_all(&line);
    }
}

/// Reads every `*.jsonl` history in `dir`, sorted by timestamp (ties keep file order).
/// Returns the events and the number of lines damaged: lines that do not parse and lines
/// missing from a file's numbering (a write that failed, as on a full disk). A SIGKILL
/// damages none: it cannot cut a small write to a file, and a line it prevents is the last.
pub(crate) fn load(dir: &Path) -> io::Result<(Vec<Event>, usize)> {
    let mut events = Vec::new();
    let mut bad = 0;
    let mut paths: Vec<_> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    paths.sort();
    for path in paths {
        let (mut seen, mut last) = (0_u64, 0_u64);
        for line in BufReader::new(File::open(&path)?).lines() {
            let line = line?;
            if line.trim().is_empty() {
                continue;
            }
            match serde_json::from_str::<Event>(&line) {
                Ok(e) => {
                    seen += 1;
                    last = last.max(e.seq);
                    events.push(e);
                }
                Err(_) => bad += 1,
            }
        }
        bad += usize::try_from(last.saturating_sub(seen)).unwrap_or(usize::MAX);
    }
    events.sort_by_key(|e| e.ts);
    Ok((events, bad))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_or_cut_line_is_counted() -> io::Result<()> {
        let dir = std::env::temp_dir().join(format!("soak-history-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let rec = Recorder::create(&dir.join("w0.0.jsonl"), "w0.0")?;
        for _ in 0..3 {
            rec.record(&rec.event(rec.op(), Kind::Start, Phase::Info));
        }
        let (events, damaged) = load(&dir)?;
        assert_eq!((events.len(), damaged), (3, 0));
        assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2, 3]);

        // Line 2 lost, and a line cut short.
        let text = std::fs::read_to_string(dir.join("w0.0.jsonl"))?;
        let lines: Vec<&str> = text.lines().collect();
        let damaged_text = format!("{}\n{}\n{{\"ts\":1,\"pro\n", lines[0], lines[2]);
        std::fs::write(dir.join("w0.0.jsonl"), damaged_text)?;
        let (events, damaged) = load(&dir)?;
        assert_eq!((events.len(), damaged), (2, 2));
        std::fs::remove_dir_all(&dir)
    }
}
