//! A session's announcement: which semaphores it uses, in a record others can read.
//!
//! The protocol cannot list a node's semaphores or sessions. A session started with
//! [`SessionOptions::announce`](crate::SessionOptions::announce) holds one unit of the
//! ephemeral semaphore [`ANNOUNCE_SEMAPHORE`], with an [`Announcement`] as its owner data: its
//! description and the names it holds or waits for. Describing that semaphore with its
//! owners lists every announcing session and what it uses, which is how `ydb-coord top`
//! finds names nobody typed.
//!
//! An ephemeral semaphore has no limit and disappears with its last owner, so announcing
//! creates nothing that outlives the sessions. The server drops a session's unit when the
//! session ends, so a crashed process leaves no stale record.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, oneshot};

use super::core::{AcquireCmd, Command, Control, Grant};
use super::inbox::WeakHandle;
use super::replies::{Notice, ReplyTx, Request};
pub use super::types::ANNOUNCE_SEMAPHORE;
use super::types::SessionSnapshot;
use crate::config::AcquireOptions;

/// The most bytes an announcement takes; names that do not fit are counted, not listed.
pub const ANNOUNCE_LIMIT: usize = 1024;

/// The first line of every announcement, with the format's version.
const HEADER: &str = "ydb-coordination announce 1";

/// How long an announcing session lets changes gather before it writes them: at most one
/// request per this interval, however busy the session.
pub(crate) const ANNOUNCE_INTERVAL: Duration = Duration::from_secs(1);

/// What one session announces.
///
/// # Examples
///
/// ```
/// use ydb_coordination::session::Announcement;
///
/// let a = Announcement::new("billing worker 7", ["job", "pool"]);
/// let bytes = a.encode();
/// assert_eq!(Announcement::parse(&bytes), Some(a));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Announcement {
    /// The session's description.
    pub description: String,
    /// The semaphores it holds or waits for, sorted, as many as fit.
    pub names: Vec<String>,
    /// How many more names it uses that did not fit in [`ANNOUNCE_LIMIT`] bytes.
    pub omitted: usize,
}

impl Announcement {
    /// An announcement of `names` (sorted, duplicates removed), as many as fit.
    pub fn new<S: Into<String>>(description: &str, names: impl IntoIterator<Item = S>) -> Self {
        let mut all: Vec<String> = names.into_iter().map(Into::into).collect();
        all.sort();
        all.dedup();
        // The description gets at most a quarter of the record, so names always have room.
        let description = cut(description, ANNOUNCE_LIMIT / 4);
        let mut size = HEADER.len() + 1 + line("d", &description).len();
        // Room for the count of names left out.
        let reserve = line("+", &usize::MAX.to_string()).len();
        let mut kept = Vec::new();
        let mut omitted = 0;
        for name in all {
            let len = line("n", &name).len();
            if omitted == 0 && size + len + reserve <= ANNOUNCE_LIMIT {
                size += len;
                kept.push(name);
            } else {
                omitted += 1;
            }
        }
        Self {
            description,
            names: kept,
            omitted,
        }
    }

    /// The record's bytes (at most [`ANNOUNCE_LIMIT`] for one made by [`Announcement::new`]).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = String::with_capacity(ANNOUNCE_LIMIT / 4);
        out.push_str(HEADER);
        out.push('\n');
        out.push_str(&line("d", &self.description));
        for name in &self.names {
            out.push_str(&line("n", name));
        }
        if self.omitted > 0 {
            out.push_str(&line("+", &self.omitted.to_string()));
        }
        out.into_bytes()
    }

    /// Reads a record; `None` when it is not an announcement of this format.
    pub fn parse(data: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(data).ok()?;
        let mut lines = text.lines();
        if lines.next()? != HEADER {
            return None;
        }
        let mut out = Self::default();
        for l in lines {
            let (tag, value) = l.split_once(' ').unwrap_or((l, ""));
            match tag {
                "d" => out.description = unescape(value),
                "n" => out.names.push(unescape(value)),
                "+" => out.omitted = value.parse().ok()?,
                // Lines of a later version of the format are skipped.
                _ => {}
            }
        }
        Some(out)
    }
}

/// `tag value\n`, with backslashes and line breaks in `value` escaped.
fn line(tag: &str, value: &str) -> String {
    let mut out = String::with_capacity(tag.len() + value.len() + 2);
    out.push_str(tag);
    out.push(' ');
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
    out.push('\n');
    out
}

fn unescape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}

/// `s` cut to at most `max` bytes, on a character boundary.
fn cut(s: &str, max: usize) -> String {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// The names of a snapshot (which leaves out the announcement's own).
fn names(snapshot: &SessionSnapshot) -> impl Iterator<Item = &str> {
    let held = snapshot.held.iter().map(|h| h.name.as_str());
    let waiting = snapshot.waiting.iter().map(|w| w.name.as_str());
    held.chain(waiting)
}

/// Keeps a session's announcement current until the session ends.
///
/// Wakes when the session task changed its table of names (`changed`), waits
/// [`ANNOUNCE_INTERVAL`] so that a burst of changes costs one write, reads the session's own
/// tables and writes the record only if it changed; a write that failed is tried again
/// after the interval. It holds the session through a weak
/// handle: it never keeps a session open that its user has let go.
pub(crate) async fn run(
    session: WeakHandle,
    changed: Arc<Notify>,
    description: String,
    interval: Duration,
) {
    let mut held: Option<Grant> = None;
    let mut written: Option<Vec<u8>> = None;
    loop {
        let Some(snapshot) = snapshot(&session).await else {
            return;
        };
        let record = Announcement::new(&description, names(&snapshot)).encode();
        if held
            .as_ref()
            .is_some_and(|g| g.held.is_lost(session.token()))
        {
            // Lost (the semaphore was deleted under it): take a unit again.
            held = None;
            written = None;
        }
        if written.as_ref() != Some(&record) {
            let outcome = match &held {
                None => acquire(&session, &record).await.map(|g| held = Some(g)),
                Some(grant) => set_data(&session, grant, &record).await,
            };
            match outcome {
                Ok(()) => written = Some(record),
                Err(Stop::Ended) => return,
                Err(Stop::Refused(err)) if for_good(&err) => {
                    // A semaphore of that name that is not ephemeral: the session goes on
                    // without announcing.
                    tracing::warn!(error = %err, "the session cannot announce itself; it goes on unannounced");
                    return;
                }
                Err(Stop::Refused(err)) => {
                    // Anything else (the record lost with its semaphore, a server that
                    // could not answer): written again after the interval.
                    tracing::debug!(error = %err, "the session's announcement could not be written; trying again");
                    if !pause(&session, interval).await {
                        return;
                    }
                    continue;
                }
            }
        }
        tokio::select! {
            () = changed.notified() => {}
            () = session.token().cancelled() => return,
        }
        if !pause(&session, interval).await {
            return;
        }
    }
}

/// Waits `interval`; false if the session ended meanwhile.
async fn pause(session: &WeakHandle, interval: Duration) -> bool {
    tokio::select! {
        () = tokio::time::sleep(interval) => true,
        () = session.token().cancelled() => false,
    }
}

/// Whether an announcement refused with `err` can never be written in this session.
fn for_good(err: &crate::Error) -> bool {
    matches!(
        err.kind(),
        crate::ErrorKind::PreconditionFailed | crate::ErrorKind::InvalidArgument
    )
}

enum Stop {
    /// The session is gone or let go.
    Ended,
    /// The server refused the announcement.
    Refused(crate::Error),
}

async fn snapshot(session: &WeakHandle) -> Option<SessionSnapshot> {
    let (tx, rx) = oneshot::channel();
    let caller = session.next_id();
    let notice = Notice {
        control: Control::Snapshot { caller },
        reply: ReplyTx::Snapshot(tx),
    };
    session.notice(notice).ok()?;
    rx.await.ok()
}

async fn acquire(session: &WeakHandle, record: &[u8]) -> Result<Grant, Stop> {
    let (tx, rx) = oneshot::channel();
    let caller = session.next_id();
    let name: Arc<str> = Arc::from(ANNOUNCE_SEMAPHORE);
    // Unfenced: the semaphore's owners are every announcing session of the node, so the
    // describe that reads a grant's order id would carry all their records.
    let opts = AcquireOptions::new()
        .ephemeral(true)
        .timeout(Duration::ZERO)
        .data(record.to_vec())
        .unfenced();
    let request = Request {
        command: Command::Acquire(AcquireCmd {
            caller,
            name: name.clone(),
            opts,
            requested_at: tokio::time::Instant::now(),
        }),
        reply: ReplyTx::Acquire {
            reply: tx,
            queued: None,
            name,
        },
    };
    session.command(request).map_err(|_| Stop::Ended)?;
    match rx.await {
        Ok(Ok(Some(grant))) => Ok(grant),
        Ok(Ok(None)) => Err(Stop::Refused(crate::Error::new(
            crate::ErrorKind::NotAcquired,
            "the announcement semaphore is full",
        ))),
        Ok(Err(err)) => Err(ended_or_refused(session, err)),
        Err(_) => Err(Stop::Ended),
    }
}

async fn set_data(session: &WeakHandle, grant: &Grant, record: &[u8]) -> Result<(), Stop> {
    let (tx, rx) = oneshot::channel();
    let notice = Notice {
        control: Control::SetData {
            name: grant.held.name.clone(),
            lease: grant.held.lease(),
            data: record.to_vec(),
            caller: session.next_id(),
        },
        reply: ReplyTx::Done(tx),
    };
    session.notice(notice).map_err(|_| Stop::Ended)?;
    match rx.await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(err)) => Err(ended_or_refused(session, err)),
        Err(_) => Err(Stop::Ended),
    }
}

fn ended_or_refused(session: &WeakHandle, err: crate::Error) -> Stop {
    if session.token().is_cancelled() {
        Stop::Ended
    } else {
        Stop::Refused(err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_names_with_line_breaks_and_backslashes() {
        let a = Announcement::new("host a\nline two", ["b\\n", "a\nb", "plain"]);
        let parsed = Announcement::parse(&a.encode());
        assert_eq!(parsed.as_ref(), Some(&a));
        assert_eq!(a.names, ["a\nb", "b\\n", "plain"]);
    }

    #[test]
    fn sorts_and_deduplicates() {
        let a = Announcement::new("", ["z", "a", "z"]);
        assert_eq!(a.names, ["a", "z"]);
        assert_eq!(a.omitted, 0);
    }

    #[test]
    fn stays_within_the_limit_and_counts_what_it_left_out() {
        let names: Vec<String> = (0..500).map(|i| format!("name-{i:04}")).collect();
        let a = Announcement::new(&"d".repeat(5000), names.clone());
        let bytes = a.encode();
        assert!(bytes.len() <= ANNOUNCE_LIMIT, "{} bytes", bytes.len());
        assert!(!a.names.is_empty());
        assert_eq!(a.names.len() + a.omitted, names.len());
        assert_eq!(a.description.len(), ANNOUNCE_LIMIT / 4);
        assert_eq!(Announcement::parse(&bytes), Some(a));
    }

    #[test]
    fn one_long_name_does_not_hide_the_short_ones_before_it() {
        let a = Announcement::new("", ["a", "b", &"z".repeat(2000)]);
        assert_eq!(a.names, ["a", "b"]);
        assert_eq!(a.omitted, 1);
    }

    #[test]
    fn cuts_descriptions_on_a_character_boundary() {
        let a = Announcement::new(&"é".repeat(1000), Vec::<String>::new());
        assert!(a.description.len() <= ANNOUNCE_LIMIT / 4);
        assert!(a.description.chars().all(|c| c == 'é'));
    }

    #[test]
    fn refuses_other_data() {
        assert_eq!(Announcement::parse(b"held 7"), None);
        assert_eq!(Announcement::parse(&[0xff, 0xfe]), None);
        assert_eq!(Announcement::parse(b""), None);
        let later = format!("{HEADER}\nd x\nq future\nn a\n");
        let parsed = Announcement::parse(later.as_bytes());
        assert_eq!(parsed.map(|a| a.names), Some(vec!["a".to_string()]));
    }
}
