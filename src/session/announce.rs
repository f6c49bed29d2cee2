//! A session's announcement: who the session is and which semaphores it uses, in records
//! others can read.
//!
//! The protocol cannot list a node's semaphores or sessions. A session started with
//! [`SessionOptions::announce`](crate::SessionOptions::announce) holds one unit of the
//! ephemeral semaphore [`ANNOUNCE_SEMAPHORE`], with an [`Announcement`] as its owner data:
//! its description, host, process, start, timeout and last contact, and the names it holds
//! or waits for with since when; the names that do not fit in [`ANNOUNCE_LIMIT`] bytes go to
//! [pages](page_semaphore), one more ephemeral semaphore each. Describing the announcement
//! semaphore with its owners lists every announcing session, which is how `ydb-coord top`
//! finds names nobody typed. The format is versioned; [`Announcement`] describes it.
//!
//! An ephemeral semaphore has no limit and disappears with its last owner, so announcing
//! creates nothing that outlives the sessions. The server drops a session's units when the
//! session ends, so a crashed process leaves no stale record. The names are
//! [reserved](crate::config::is_reserved): no session can take, block or delete them.

mod format;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::{Notify, oneshot};
use tokio::time::Instant;

pub use self::format::{
    ANNOUNCE_LIMIT, Announced, Announcement, Gap, PAGE_LIMIT, Page, Pages, page_semaphore,
};
use self::format::{Identity, Layout};
use super::core::{AcquireCmd, Command, Control, Grant};
use super::inbox::WeakHandle;
use super::replies::{Notice, ReplyTx, Request};
pub use super::types::ANNOUNCE_SEMAPHORE;
use super::types::SessionSnapshot;
use crate::config::AcquireOptions;

/// How long an announcing session lets changes gather before it writes them: at most one
/// round of writes per this interval, however busy the session.
pub(crate) const ANNOUNCE_INTERVAL: Duration = Duration::from_secs(1);

/// The wall clock against the monotonic one, fixed when the announcer starts: an instant
/// always maps to the same wall time, so a record is written again only when what it says
/// changed.
#[derive(Debug, Clone, Copy)]
struct Clock {
    instant: Instant,
    wall_ms: u64,
}

impl Clock {
    fn now() -> Self {
        let wall_ms = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, millis);
        Self {
            instant: Instant::now(),
            wall_ms,
        }
    }

    /// `at` in Unix milliseconds.
    fn millis(&self, at: Instant) -> u64 {
        match at.checked_duration_since(self.instant) {
            Some(after) => self.wall_ms.saturating_add(millis(after)),
            None => self
                .wall_ms
                .saturating_sub(millis(self.instant.saturating_duration_since(at))),
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The host's name, as the kernel has it (or `$HOSTNAME`); empty when neither says.
fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// The program's name: the executable's file name.
fn tool() -> String {
    std::env::args_os()
        .next()
        .as_deref()
        .map(std::path::Path::new)
        .and_then(std::path::Path::file_name)
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The names of a snapshot (which leaves out the announcement's own), with since when.
fn names(snapshot: &SessionSnapshot, clock: &Clock) -> Vec<Announced> {
    let held = snapshot
        .held
        .iter()
        .map(|h| Announced::held(h.name.as_str(), clock.millis(h.since)));
    let waiting = snapshot
        .waiting
        .iter()
        .map(|w| Announced::waiting(w.name.as_str(), clock.millis(w.since)));
    held.chain(waiting).collect()
}

/// What the announcer has on the server.
#[derive(Debug, Default)]
struct Written {
    /// The unit of the announcement semaphore.
    record: Option<Grant>,
    /// What the record last written says, but for its contact time.
    said: Option<Vec<u8>>,
    /// When it was sent.
    sent: Option<Instant>,
    /// The units of the pages, page 1 first.
    pages: Vec<Grant>,
    /// What they say, and their generation.
    paged: Option<Vec<Vec<Announced>>>,
    generation: u64,
}

impl Written {
    /// Forgets the units the session lost (their semaphore was deleted under them): they
    /// are taken again.
    fn forget_lost(&mut self, session: &WeakHandle) {
        let lost = |g: &Grant| g.held.is_lost(session.token());
        if self.record.as_ref().is_some_and(lost) {
            self.record = None;
            self.said = None;
        }
        if self.pages.iter().any(lost) {
            self.paged = None;
            self.pages.retain(|g| !lost(g));
        }
    }
}

/// Who the announcing session is: its description and session timeout.
#[derive(Debug, Clone)]
pub(crate) struct Announcer {
    pub(crate) description: String,
    pub(crate) timeout: Duration,
    /// How long changes gather before they are written ([`ANNOUNCE_INTERVAL`]).
    pub(crate) interval: Duration,
}

/// Keeps a session's announcement current until the session ends.
///
/// Wakes when the session task changed its table of names (`changed`), waits the interval
/// so that a burst of changes costs one round of writes, reads the session's own tables and
/// writes what changed: the pages first (all of them, in a new generation, when any
/// changed), then the record that names them, then gives back the pages no longer used.
/// While the session holds or waits for a name it sends its record again once per session
/// timeout, so that its contact time stays within a timeout of the truth; an idle session
/// writes nothing. A write that failed is tried again after the interval. It holds the
/// session through a weak handle: it never keeps a session open that its user has let go.
pub(crate) async fn run(session: WeakHandle, changed: Arc<Notify>, announcer: Announcer) {
    let clock = Clock::now();
    let identity = Identity::new(
        &announcer.description,
        &host(),
        std::process::id(),
        &tool(),
        clock.millis(clock.instant),
        millis(announcer.timeout),
    );
    let interval = announcer.interval;
    let refresh = announcer.timeout.max(interval);
    let mut written = Written::default();
    loop {
        let Some(snapshot) = snapshot(&session).await else {
            return;
        };
        let names = names(&snapshot, &clock);
        let busy = !names.is_empty();
        let now = Instant::now();
        let contact = clock.millis(now);
        written.forget_lost(&session);
        let layout = Layout::new(&identity, contact, names, written.generation + 1);
        let due = busy && written.sent.is_some_and(|t| now >= t + refresh);
        match write(
            &session,
            snapshot.session_id,
            &identity,
            contact,
            &layout,
            due,
            &mut written,
        )
        .await
        {
            Ok(()) => {}
            Err(Stop::Ended) => return,
            Err(Stop::Refused(err)) if for_good(&err) && written.record.is_none() => {
                // The record itself cannot be taken: the session goes on unannounced.
                tracing::warn!(error = %err, "the session cannot announce itself; it goes on unannounced");
                return;
            }
            Err(Stop::Refused(err)) => {
                // Anything else (a unit lost with its semaphore, a server that could not
                // answer): written again after the interval.
                tracing::debug!(error = %err, "the session's announcement could not be written; trying again");
                if !pause(&session, interval).await {
                    return;
                }
                continue;
            }
        }
        let next_refresh = written.sent.filter(|_| busy).map(|t| t + refresh);
        tokio::select! {
            () = changed.notified() => {
                // Let a burst of changes gather.
                if !pause(&session, interval).await {
                    return;
                }
            }
            () = until(next_refresh) => {}
            () = session.token().cancelled() => return,
        }
    }
}

/// Waits until `at`, or forever.
async fn until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Writes what changed of `layout`: its pages (all again, in the next generation, if any
/// changed or is missing), its record (if it says something new, or `due` for its contact
/// time), then gives back the pages no longer used.
async fn write(
    session: &WeakHandle,
    session_id: u64,
    identity: &Identity,
    contact: u64,
    layout: &Layout,
    due: bool,
    written: &mut Written,
) -> Result<(), Stop> {
    let pages_changed =
        written.paged.as_ref() != Some(&layout.pages) || written.pages.len() < layout.pages.len();
    if pages_changed && !layout.pages.is_empty() {
        written.paged = None;
        written.generation += 1;
        for (index, _) in layout.pages.iter().enumerate() {
            let data = layout.page(index, written.generation);
            match written.pages.get(index) {
                Some(grant) => set_data(session, grant, &data).await?,
                None => {
                    let page = u64::try_from(index + 1).unwrap_or(u64::MAX);
                    let name = page_semaphore(session_id, page);
                    let grant = acquire(session, &name, &data).await?;
                    written.pages.push(grant);
                }
            }
        }
    }
    written.paged = Some(layout.pages.clone());
    let said = layout.record(identity, 0, written.generation);
    if written.said.as_ref() != Some(&said) || due || written.record.is_none() {
        let record = layout.record(identity, contact, written.generation);
        match &written.record {
            Some(grant) => set_data(session, grant, &record).await?,
            None => written.record = Some(acquire(session, ANNOUNCE_SEMAPHORE, &record).await?),
        }
        written.said = Some(said);
        written.sent = Some(Instant::now());
    }
    // The record no longer names them: give them back.
    for grant in written.pages.drain(layout.pages.len()..) {
        release(session, &grant);
    }
    Ok(())
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

/// Takes one unit of the ephemeral semaphore `name` (the record's or a page's) with `record`
/// as its owner data, without waiting.
async fn acquire(session: &WeakHandle, name: &str, record: &[u8]) -> Result<Grant, Stop> {
    let (tx, rx) = oneshot::channel();
    let caller = session.next_id();
    let name: Arc<str> = Arc::from(name);
    // Unfenced: the record's semaphore has every announcing session of the node as owner,
    // so the describe that reads a grant's order id would carry all their records.
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
            "the announcement semaphore is held or waited for by a session that is not announcing",
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

/// Gives a unit back (a page no longer used).
fn release(session: &WeakHandle, grant: &Grant) {
    if !grant.held.release() {
        return;
    }
    grant.held.end();
    let notice = Notice {
        control: Control::Release {
            name: grant.held.name.clone(),
            lease: grant.held.lease(),
            caller: None,
        },
        reply: ReplyTx::None,
    };
    let _ = session.notice(notice);
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
    fn an_instant_maps_to_the_same_wall_time_every_time() {
        let clock = Clock {
            instant: Instant::now(),
            wall_ms: 1_700_000_000_000,
        };
        let later = clock.instant + Duration::from_millis(1500);
        assert_eq!(clock.millis(later), 1_700_000_001_500);
        assert_eq!(clock.millis(later), clock.millis(later));
        assert_eq!(clock.millis(clock.instant), 1_700_000_000_000);
    }
}
