//! The locks of a [`LockSpace`]: each name taken in every place the layout gives it, in
//! order, as a recipe lock on that node; one guard over all of them.

use std::future::Future;
use std::sync::{Arc, Mutex as StdMutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::take::{Step, Take};
use super::{LockSpace, Shared, Ticket};
use crate::bound::{RoundTrip, RoundTrips};
use crate::config::{self, AcquireOptions};
use crate::error::{Error, ErrorKind, Result};
use crate::keeper;
use crate::recipes::{Guard, Prepare, Source, acquiring, lock_delay};
use crate::session::FencingToken;
use crate::session::Lease;
use crate::session::{Acquiring, optional};

/// How long a lock that could not be had in full waits for the release of its parts.
const RELEASE_WAIT: Duration = Duration::from_secs(2);

/// What a lock takes on each node.
#[derive(Debug, Clone)]
pub(crate) struct Spec {
    pub(crate) options: AcquireOptions,
    pub(crate) prepare: Prepare,
    /// A persistent semaphore: the lease must end if it is force-deleted.
    pub(crate) guard: bool,
    /// A mutex's lock delay (see [`Mutex::lock_delay`](crate::Mutex::lock_delay)).
    pub(crate) lock_delay: Option<Duration>,
    /// An election's: the leader writes its fencing token with its value in every place
    /// before the guard is handed over, so that observers report the token it holds
    /// (see `fleet::leader_value`).
    pub(crate) leader: bool,
    /// A mutex's: a node's refusal of the semaphore's mode is reported as a node's mutex
    /// reports it ([`ErrorKind::ModeMismatch`]).
    pub(crate) mutex: bool,
}

impl Spec {
    /// A mutex's: what the node's mutex takes (see `recipes::mutex_semaphore`). With a
    /// lock delay, the delay's step guards each part against a forced delete.
    pub(crate) fn mutex(data: &[u8], lock_delay: Option<Duration>) -> Self {
        let (options, prepare) = crate::recipes::mutex_semaphore(lock_delay, data);
        Self {
            options,
            prepare,
            guard: false,
            lock_delay,
            leader: false,
            mutex: true,
        }
    }

    /// A counted semaphore's: `options` (its count and data) of a persistent semaphore
    /// with `limit` units, guarded against a forced delete as a node's permit is.
    pub(crate) fn semaphore(options: AcquireOptions, limit: u64) -> Self {
        Self {
            options,
            prepare: Prepare::Semaphore { limit },
            guard: true,
            lock_delay: None,
            leader: false,
            mutex: false,
        }
    }

    /// A reader-writer lock's: `options` (shared or exclusive, its data) of an ephemeral
    /// semaphore.
    pub(crate) fn rwlock(options: AcquireOptions) -> Self {
        Self {
            options,
            prepare: Prepare::Nothing,
            guard: false,
            lock_delay: None,
            leader: false,
            mutex: false,
        }
    }
}

/// How long an acquire waits.
#[derive(Debug, Clone, Copy)]
pub(super) enum Wait {
    Forever,
    /// At most this long from the first poll.
    Within(Duration),
    /// Until this deadline (`Within`, once polled).
    Until(Instant),
}

impl Wait {
    /// The deadline of a wait that starts now.
    fn start(self) -> Self {
        match self {
            Self::Within(timeout) => Self::Until(crate::clock::later(Instant::now(), timeout)),
            other => other,
        }
    }
}

/// What a lock holds in a [`LockSpace`], as a [`Lease`] is what it holds on one node: the
/// recipe locks of its name (names, for a [`MultiLock`](crate::recipes::MultiLock)) on each
/// node the layout placed it on, with its [`FencingToken`]. A recipe's guard in a space
/// carries one ([`MutexGuard::space_lease`](crate::MutexGuard::space_lease)); a space
/// election's leadership is one.
///
/// Its [`token`](SpaceLease::token) fires when any part is lost, when the process's
/// membership in the space's directory may be lost (see the
/// [module docs](super#locks-live-inside-the-membership)), when the lock's layout falls two
/// epochs behind the published one or is contradicted by it, and when it is released or
/// dropped. Dropping it releases every part (in the space's one task that watches its
/// locks, which also lets the process report a newer epoch once the releases are answered).
///
/// # Examples
///
/// ```
/// # use ydb_coordination::emulator::Emulator;
/// # use ydb_coordination::space::{Layout, LockSpace};
/// # use ydb_coordination::Client;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let emulator = Emulator::builder().node("/local/n1").start().await?;
/// # let client = Client::connect(&emulator.connection_string()).await?;
/// # let space = LockSpace::builder().node("n1", &client, "/local/n1")
/// #     .layout(Layout::new(1, ["n1"])?).open().await?;
/// let guard = space.mutex("job").lock().await?;
/// let parts = guard.space_lease().expect("a lock of a space");
/// assert_eq!(parts.nodes(), ["n1"]);
/// assert_eq!(parts.epoch(), 1);
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
#[must_use = "dropping the guard releases the lock at once"]
pub struct SpaceLease {
    state: Arc<GuardState>,
    _drop: DropGuard,
}

#[derive(Debug)]
pub(super) struct GuardState {
    leases: StdMutex<Vec<Lease>>,
    nodes: Vec<String>,
    tokens: Vec<(String, FencingToken)>,
    epoch: u64,
    lost: CancellationToken,
    /// The grant of the first part.
    granted_at: Instant,
    ticket: StdMutex<Option<Ticket>>,
    /// Whether the holder's release records a clean one (a lock-delay mutex, unbounded).
    clean: bool,
    /// An election's leadership: its data carries its fencing token.
    leader: bool,
}

impl GuardState {
    fn take_leases(&self) -> Vec<Lease> {
        std::mem::take(&mut *self.leases.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Releases every part, waits for the answers, then gives up the epoch's claim.
    /// (`false` at once when they were taken already: the lock had ended.) The claim is
    /// given up only by whoever released the parts, once the servers answered. The
    /// holder's own release (`by_holder`) of a lock-delay mutex not lost yet first writes
    /// the marker of a clean release on every part, waiting at most [`RELEASE_WAIT`] (a
    /// marker not written leaves `held`: the next holder waits, the safe side).
    async fn release(&self, by_holder: bool) -> Result<bool> {
        let leases = self.take_leases();
        let clean = by_holder && self.clean && !self.lost.is_cancelled();
        self.lost.cancel();
        if leases.is_empty() {
            return Ok(false);
        }
        if clean {
            let marks = leases
                .iter()
                .map(|l| lock_delay::mark_released(l, Some(self.epoch)));
            let _ = tokio::time::timeout(RELEASE_WAIT, futures::future::join_all(marks)).await;
        }
        let released = release_all(leases).await;
        self.ticket
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        released
    }
}

impl SpaceLease {
    fn start(shared: &Shared, taken: Taken, clean: bool) -> Self {
        let part_tokens: Vec<CancellationToken> = taken.leases.iter().map(Lease::token).collect();
        let granted_at = taken
            .leases
            .iter()
            .map(Lease::granted_at)
            .min()
            .unwrap_or_else(Instant::now);
        let state = Arc::new(GuardState {
            leases: StdMutex::new(taken.leases),
            nodes: taken.nodes,
            tokens: taken.tokens,
            epoch: taken.ticket.epoch,
            // The claim's own token (one per lock): the space fires it when the claim is
            // lost, and the lock's end fires it before the claim is given up.
            lost: taken.ticket.lost().clone(),
            granted_at,
            ticket: StdMutex::new(Some(taken.ticket)),
            clean,
            leader: taken.leader,
        });
        shared
            .keeper
            .hand(Watch::new(state.clone(), part_tokens), |locks| {
                keeper::run(locks, watch_guard)
            });
        Self {
            // Dropping the guard ends the lock: its task then releases the parts.
            _drop: state.lost.clone().drop_guard(),
            state,
        }
    }

    /// The fencing token (of the first name, for a multi-lock): comparable with every
    /// other holder's of the same name in the space, across moves.
    pub fn fencing_token(&self) -> FencingToken {
        self.state
            .tokens
            .first()
            .map(|(_, t)| *t)
            .unwrap_or_default()
    }

    /// Each name's fencing token, in the order the names were taken.
    pub fn fencing_tokens(&self) -> &[(String, FencingToken)] {
        &self.state.tokens
    }

    /// The nodes the lock is held on, in the order they were taken.
    pub fn nodes(&self) -> &[String] {
        &self.state.nodes
    }

    /// The epoch of the layout the lock was taken in.
    pub fn epoch(&self) -> u64 {
        self.state.epoch
    }

    /// When the first part was granted.
    pub(crate) fn granted_at(&self) -> Instant {
        self.state.granted_at
    }

    /// A token that fires when the lock is lost or ends (see [`SpaceLease`]); cancelling it
    /// stops only the holder's own work, never the lock.
    pub fn token(&self) -> CancellationToken {
        self.state.lost.child_token()
    }

    /// Waits until the lock is lost or ends.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn cancelled(&self) {
        self.state.lost.cancelled().await;
    }

    /// Whether the lock is lost (or ended).
    pub fn is_lost(&self) -> bool {
        self.state.lost.is_cancelled()
    }

    /// Replaces the holder's data in every place (for an election's leader: proclaims a new
    /// value), keeping the lock.
    ///
    /// # Errors
    ///
    /// The lock was lost or ended; data over [`MAX_DATA_LEN`](crate::config::MAX_DATA_LEN).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not withdraw the updates already requested.
    pub async fn set_data(&self, data: &[u8]) -> Result<()> {
        let value;
        let data = if self.state.leader {
            super::fleet::check_leader_value(data)?;
            value = super::fleet::leader_value(self.fencing_token(), data);
            &value[..]
        } else {
            data
        };
        let updates: Vec<_> = {
            let leases = self
                .state
                .leases
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            leases.iter().map(|l| l.data_update(data)).collect()
        };
        if updates.is_empty() {
            return Err(Error::new(
                ErrorKind::Cancelled,
                "the lock has ended; take it again before setting its data",
            ));
        }
        for update in futures::future::join_all(updates).await {
            update?;
        }
        Ok(())
    }

    /// Releases every part and waits for the servers' answers (`false`: a part was already
    /// lost).
    ///
    /// Of a mutex with a [lock delay](crate::Mutex::lock_delay), first records on every part
    /// that the release is clean (one more request per part), so the next holder does not
    /// wait; a part whose record cannot be written is released all the same, and the next
    /// holder waits. A lock already lost, a [bounded](crate::Mutex::lock_for) one and a
    /// dropped guard release without the record.
    ///
    /// # Errors
    ///
    /// A session ended first (its server then releases what it held).
    ///
    /// # Cancel safety
    ///
    /// Without a lock delay, the releases are requested at once; dropping the future only
    /// skips the wait. With one, dropping the future before the records are written
    /// releases the parts at once, as a dropped guard does (a part without its record is
    /// not released cleanly: the next holder waits).
    pub async fn release(self) -> Result<bool> {
        self.state.release(true).await
    }
}

impl Guard for SpaceLease {
    fn fencing_token(&self) -> FencingToken {
        SpaceLease::fencing_token(self)
    }

    fn token(&self) -> CancellationToken {
        SpaceLease::token(self)
    }

    fn is_lost(&self) -> bool {
        SpaceLease::is_lost(self)
    }

    fn release(self) -> impl std::future::Future<Output = Result<bool>> + Send {
        SpaceLease::release(self)
    }
}

/// A lock for the space's keeper to watch: its shared state and its parts' tokens. Dropped
/// before its watch ended (the keeper's runtime shut down, even before the keeper took it),
/// it fires the lock's token: a lock nothing watches any more counts as lost, never as held.
pub(super) struct Watch {
    state: Arc<GuardState>,
    parts: Vec<CancellationToken>,
    unwatched: DropGuard,
}

impl Watch {
    fn new(state: Arc<GuardState>, parts: Vec<CancellationToken>) -> Self {
        let unwatched = state.lost.clone().drop_guard();
        Self {
            state,
            parts,
            unwatched,
        }
    }
}

/// What the space's keeper does for one lock: waits until a part is lost or the lock ends
/// otherwise (its token, `state.lost`, is its claim's, so it fires when the membership may
/// be lost or the layout fell behind, and the guard's drop fires it), then releases what is
/// still held. The release is boxed: the future waits most of its life, at its smallest.
async fn watch_guard(watch: Watch) {
    let Watch {
        state,
        parts,
        unwatched: _unwatched,
    } = watch;
    let any_part = futures::future::select_all(
        parts
            .into_iter()
            .map(|t| Box::pin(t.cancelled_owned()))
            .collect::<Vec<_>>(),
    );
    tokio::select! {
        _ = any_part => {}
        () = state.lost.cancelled() => {}
    }
    let _ = Box::pin(state.release(false)).await;
}

/// Releases `leases` (the last taken first), waiting at most [`RELEASE_WAIT`] in all.
async fn release_all(leases: Vec<Lease>) -> Result<bool> {
    let releases = leases.into_iter().rev().map(Lease::release);
    match tokio::time::timeout(RELEASE_WAIT, futures::future::join_all(releases)).await {
        Ok(results) => results
            .into_iter()
            .try_fold(true, |all, r| r.map(|held| all && held)),
        Err(_) => Ok(false),
    }
}

/// The parts of a lock, taken.
struct Taken {
    leases: Vec<Lease>,
    nodes: Vec<String>,
    tokens: Vec<(String, FencingToken)>,
    ticket: Ticket,
    /// An election's leadership (see [`Spec::leader`]).
    leader: bool,
}

/// `work`'s outcome, or `None` if the claim whose token is `lost` is lost first (its
/// membership may be lost, its layout fell behind or was contradicted).
async fn while_claimed<T>(lost: &CancellationToken, work: impl Future<Output = T>) -> Option<T> {
    tokio::select! {
        biased;
        () = lost.cancelled() => None,
        done = work => Some(done),
    }
}

/// Takes `names` (sorted, each once) in every place of the layout run now, name by name
/// and place by place; all of them or none. What to do at each step is [`Take`]'s call;
/// this carries the steps out.
async fn take(
    shared: Arc<Shared>,
    names: Vec<String>,
    spec: Spec,
    wait: Wait,
    queued: watch::Sender<bool>,
    trips: RoundTrips,
) -> Result<Option<Taken>> {
    for name in &names {
        config::check_name(name)?;
    }
    let wait = wait.start();
    let deadline = match wait {
        Wait::Forever | Wait::Within(_) => None,
        Wait::Until(d) => Some(d),
    };
    let mut take = Take::new(names, deadline, spec.lock_delay.is_some(), spec.leader);
    let mut ticket: Option<Ticket> = None;
    let mut leases: Vec<Lease> = Vec::new();
    let mut nodes: Vec<String> = Vec::new();
    loop {
        if ticket.as_ref().is_some_and(|t| t.lost().is_cancelled()) {
            take.claim_lost();
        }
        if leases.iter().any(Lease::is_lost) {
            take.part_lost();
        }
        let lost = ticket
            .as_ref()
            .map_or_else(CancellationToken::new, |t| t.lost().clone());
        match take.next(Instant::now()) {
            Step::Enter { deadline } => match shared.enter(deadline).await {
                Ok((entry, claimed)) => {
                    ticket = Some(claimed);
                    take.entered(entry);
                }
                Err(e) => take.refused(e),
            },
            Step::Acquire { node, name } => {
                let taking = take_part(&shared, &node, &name, &spec, wait, &queued, &trips);
                match while_claimed(&lost, taking).await {
                    None => take.claim_lost(),
                    Some(Ok(Some(lease))) => {
                        let order = lease.fencing_token().order;
                        leases.push(lease);
                        nodes.push(node);
                        take.acquired(Ok(Some(order)));
                    }
                    Some(taken) => take.acquired(taken.map(|_| None)),
                }
            }
            Step::Settle { deadline } => {
                let (Some(delay), Some(entry)) = (spec.lock_delay, take.entry()) else {
                    take.settled(Ok(()));
                    continue;
                };
                let runs = lock_delay::Running {
                    epoch: entry.layout.epoch(),
                    since: entry.running_since,
                };
                let settling = lock_delay::settle(&leases, delay, Some(runs), deadline);
                match while_claimed(&lost, settling).await {
                    None => take.claim_lost(),
                    Some(settled) => {
                        if leases.iter().any(Lease::is_lost) {
                            take.part_lost();
                        }
                        take.settled(settled);
                    }
                }
            }
            Step::ReadPublished => {
                // Bounded by the caller's bound (see `crate::bound`), and by the claim: the
                // places are given back rather than held while the directory does not
                // answer.
                let bound = match deadline {
                    None => crate::clock::later(Instant::now(), shared.directory_wait()),
                    Some(d) => crate::bound::expiry(d, trips.round_trip()),
                };
                match while_claimed(&lost, shared.published_layout(bound)).await {
                    None => take.claim_lost(),
                    Some(read) => take.read(read),
                }
            }
            Step::WriteLeader { token } => {
                let value = super::fleet::leader_value(token, &spec.options.data);
                let writes =
                    futures::future::try_join_all(leases.iter().map(|l| l.data_update(&value)));
                match while_claimed(&lost, writes).await {
                    None => take.claim_lost(),
                    Some(written) => {
                        if leases.iter().any(Lease::is_lost) {
                            take.part_lost();
                        }
                        take.written(written.map(drop));
                    }
                }
            }
            Step::GiveBack => {
                let _ = release_all(std::mem::take(&mut leases)).await;
                nodes.clear();
                // The claim goes once the releases are answered.
                ticket = None;
                take.gave_back();
            }
            Step::Pause(pause) => {
                tokio::time::sleep(pause).await;
                take.paused();
            }
            Step::Done(outcome) => {
                let Some(tokens) = outcome? else {
                    return Ok(None);
                };
                let ticket = ticket.ok_or_else(|| {
                    Error::new(
                        ErrorKind::Internal,
                        "a lock space's take ended with a lock but no claim",
                    )
                })?;
                return Ok(Some(Taken {
                    leases,
                    nodes,
                    tokens,
                    ticket,
                    leader: spec.leader,
                }));
            }
        }
    }
}

/// One place of a name: the recipe lock on `node`.
async fn take_part(
    shared: &Shared,
    node: &str,
    name: &str,
    spec: &Spec,
    wait: Wait,
    queued: &watch::Sender<bool>,
    trips: &RoundTrips,
) -> Result<Option<Lease>> {
    let manager = shared.manager(node)?;
    if let Some(session) = manager.try_current() {
        trips.note(session.round_trip());
    }
    let mut options = spec.options.clone();
    if let Wait::Until(deadline) = wait {
        options = options.timeout(deadline.saturating_duration_since(Instant::now()));
    }
    let guard = spec.guard;
    let mut acquire = acquiring(
        &Source::new(manager.clone()),
        name,
        options,
        spec.prepare,
        move |r| optional(if guard { r.inspect(Lease::guard) } else { r }),
    );
    if acquire.queued().await {
        queued.send_replace(true);
    }
    let taken = acquire.await;
    if let Ok(Some(lease)) = &taken {
        trips.note(lease.round_trip());
    }
    if spec.mutex {
        let delayed = spec.lock_delay.is_some();
        return taken.map_err(|e| crate::recipes::other_mode(e, name, delayed));
    }
    taken
}

/// The acquire of `names` in `space` with `spec`, waiting at most `timeout`: a guard
/// (`wrap` makes it of the lock's parts), or `None` if the timeout ran out. `bounded`: the
/// guard is held for a bound (its end is no clean release).
pub(crate) fn start<T: Send + 'static>(
    space: &LockSpace,
    names: Vec<String>,
    spec: Spec,
    timeout: Duration,
    bounded: bool,
    wrap: impl FnOnce(SpaceLease) -> T + Send + 'static,
) -> Acquiring<Option<T>> {
    let shared = space.shared().clone();
    if let Err(e) = config::check_acquire_timeout(timeout) {
        return Acquiring::failed(e);
    }
    // Every step (the gate, each place, the directory's read) is within the bound.
    Acquiring::steps(move |queued, trips| {
        Box::pin(async move {
            let wait = Wait::Within(timeout);
            let taken = taking(shared, names, spec, wait, bounded, queued, trips).await?;
            Ok(taken.map(wrap))
        })
    })
    .within(timeout)
}

/// The same acquire, waiting without a timeout: always a guard.
pub(crate) fn start_plain<T: Send + 'static>(
    space: &LockSpace,
    names: Vec<String>,
    spec: Spec,
    bounded: bool,
    wrap: impl FnOnce(SpaceLease) -> T + Send + 'static,
) -> Acquiring<T> {
    let shared = space.shared().clone();
    Acquiring::steps(move |queued, trips| {
        Box::pin(async move {
            let taken = taking(shared, names, spec, Wait::Forever, bounded, queued, trips).await?;
            taken.map(wrap).ok_or_else(|| {
                Error::new(
                    ErrorKind::Internal,
                    "an acquire without a timeout ended without the lock",
                )
            })
        })
    })
}

/// Takes `names` and makes the guard (`bounded`: held for a bound, so its end is no clean
/// release).
async fn taking(
    shared: Arc<Shared>,
    names: Vec<String>,
    spec: Spec,
    wait: Wait,
    bounded: bool,
    queued: watch::Sender<bool>,
    trips: RoundTrips,
) -> Result<Option<SpaceLease>> {
    // A hold ended at its bound is no clean release: its holder may not have stopped.
    let clean = spec.lock_delay.is_some() && !bounded;
    let taken = take(shared.clone(), names, spec, wait, queued, trips).await?;
    Ok(taken.map(|t| SpaceLease::start(&shared, t, clean)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lock of no part in a space of no node, watched by `parts`.
    fn state() -> Arc<GuardState> {
        Arc::new(GuardState {
            leases: StdMutex::new(Vec::new()),
            nodes: Vec::new(),
            tokens: Vec::new(),
            epoch: 1,
            lost: CancellationToken::new(),
            granted_at: Instant::now(),
            ticket: StdMutex::new(None),
            clean: false,
            leader: false,
        })
    }

    /// A watch of `state` by one part.
    fn watch(state: &Arc<GuardState>) -> Watch {
        Watch::new(state.clone(), vec![CancellationToken::new()])
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_dropped_before_the_lock_ends_marks_it_lost() {
        let state = state();
        let mut watching = Box::pin(watch_guard(watch(&state)));
        assert!(futures::poll!(watching.as_mut()).is_pending());
        assert!(!state.lost.is_cancelled(), "a lock watched is held");
        drop(watching);
        assert!(state.lost.is_cancelled());
    }

    #[test]
    fn a_watch_the_keeper_never_took_marks_the_lock_lost() {
        let state = state();
        let unwatched = watch(&state);
        assert!(!state.lost.is_cancelled());
        drop(unwatched);
        assert!(state.lost.is_cancelled());
    }

    #[tokio::test(start_paused = true)]
    async fn a_part_lost_ends_the_watch_and_the_lock() {
        let state = state();
        let part = CancellationToken::new();
        let watch = tokio::spawn(watch_guard(Watch::new(state.clone(), vec![part.clone()])));
        part.cancel();
        tokio::time::timeout(RELEASE_WAIT, watch)
            .await
            .map_err(|_| "the watch did not end")
            .and_then(|joined| joined.map_err(|_| "the watch panicked"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(state.lost.is_cancelled());
    }
}
