//! The locks of a [`LockSpace`]: each name taken in every place the layout gives it, in
//! order, as a recipe lock on that node; one guard over all of them.

use std::future::Future;
use std::sync::{Arc, Mutex as StdMutex, PoisonError};
use std::time::Duration;

use futures::stream::BoxStream;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::take::{Step, Take};
use super::{LockSpace, Shared, Ticket};
use crate::bound::{RoundTrip, RoundTrips};
use crate::config::{self, AcquireOptions};
use crate::error::{Error, ErrorKind, Result};
use crate::recipes::{Guard, Prepare, Source, acquiring, lock_delay};
use crate::session::FencingToken;
use crate::session::Lease;
use crate::session::{Acquiring, optional};

/// How long a lock that could not be had in full waits for the release of its parts.
const RELEASE_WAIT: Duration = Duration::from_secs(2);

/// What a lock takes on each node.
#[derive(Debug, Clone)]
pub(super) struct Spec {
    pub(super) options: AcquireOptions,
    pub(super) prepare: Prepare,
    /// A persistent semaphore: the lease must end if it is force-deleted.
    pub(super) guard: bool,
    /// A mutex's lock delay (see [`SpaceMutex::lock_delay`]).
    pub(super) lock_delay: Option<Duration>,
    /// An election's: the leader writes its fencing token with its value in every place
    /// before the guard is handed over, so that observers report the token it holds
    /// (see `fleet::leader_value`).
    pub(super) leader: bool,
}

impl Spec {
    /// A mutex's: what the node's mutex takes (see `recipes::mutex_semaphore`). With a
    /// lock delay, the delay's step guards each part against a forced delete.
    fn mutex(data: &[u8], lock_delay: Option<Duration>) -> Self {
        let (options, prepare) = crate::recipes::mutex_semaphore(lock_delay, data);
        Self {
            options,
            prepare,
            guard: false,
            lock_delay,
            leader: false,
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
    pub(super) fn timeout(timeout: Duration) -> Result<Self> {
        config::check_acquire_timeout(timeout)?;
        Ok(Self::Within(timeout))
    }

    /// The deadline of a wait that starts now.
    fn start(self) -> Self {
        match self {
            Self::Within(timeout) => Self::Until(crate::clock::later(Instant::now(), timeout)),
            other => other,
        }
    }
}

/// A lock held in a [`LockSpace`]: the recipe locks of its name (names, for a
/// [`SpaceMultiLock`]) on each node the layout placed it on, with its [`FencingToken`].
///
/// Its [`token`](SpaceGuard::token) fires when any part is lost, when the process's
/// membership in the space's directory may be lost (see the
/// [module docs](super#locks-live-inside-the-membership)), when the lock's layout falls two
/// epochs behind the published one or is contradicted by it, at the bound of a `_for` form,
/// and when the guard is released or dropped. Dropping it releases every part (in a small task that
/// also lets the process report a newer epoch once the releases are answered).
#[derive(Debug)]
#[must_use = "dropping the guard releases the lock at once"]
pub struct SpaceGuard {
    state: Arc<GuardState>,
    _drop: DropGuard,
}

#[derive(Debug)]
struct GuardState {
    leases: StdMutex<Vec<Lease>>,
    nodes: Vec<String>,
    tokens: Vec<(String, FencingToken)>,
    epoch: u64,
    lost: CancellationToken,
    deadline: Option<Instant>,
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

impl SpaceGuard {
    fn start(taken: Taken, deadline: Option<Instant>, clean: bool) -> Self {
        let part_tokens: Vec<CancellationToken> = taken.leases.iter().map(Lease::token).collect();
        // The space's own account (the membership in the directory may be lost, the
        // layout fell behind or was contradicted): the lock is lost when its claim is.
        let epoch_lost = taken.ticket.lost().clone();
        let state = Arc::new(GuardState {
            leases: StdMutex::new(taken.leases),
            nodes: taken.nodes,
            tokens: taken.tokens,
            epoch: taken.ticket.epoch,
            lost: CancellationToken::new(),
            deadline,
            ticket: StdMutex::new(Some(taken.ticket)),
            clean,
            leader: taken.leader,
        });
        let dropped = CancellationToken::new();
        tokio::spawn(watch_guard(
            state.clone(),
            part_tokens,
            epoch_lost,
            dropped.clone(),
        ));
        Self {
            state,
            _drop: dropped.drop_guard(),
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

    /// The bound of a `_for` form: when the lock ends by itself.
    pub fn deadline(&self) -> Option<Instant> {
        self.state.deadline
    }

    /// A token that fires when the lock is lost or ends (see [`SpaceGuard`]); cancelling it
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
    /// Of a mutex with a [lock delay](SpaceMutex::lock_delay), first records on every part
    /// that the release is clean (one more request per part), so the next holder does not
    /// wait; a part whose record cannot be written is released all the same, and the next
    /// holder waits. A lock already lost, a [bounded](SpaceMutex::lock_for) one and a
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

impl Guard for SpaceGuard {
    fn fencing_token(&self) -> FencingToken {
        SpaceGuard::fencing_token(self)
    }

    fn token(&self) -> CancellationToken {
        SpaceGuard::token(self)
    }

    fn is_lost(&self) -> bool {
        SpaceGuard::is_lost(self)
    }

    fn deadline(&self) -> Option<Instant> {
        SpaceGuard::deadline(self)
    }

    fn release(self) -> impl std::future::Future<Output = Result<bool>> + Send {
        SpaceGuard::release(self)
    }
}

/// The task of a guard: fires its token when a part is lost, its epoch falls behind, its
/// bound passes or it is dropped; then releases what is still held.
async fn watch_guard(
    state: Arc<GuardState>,
    parts: Vec<CancellationToken>,
    epoch_lost: CancellationToken,
    dropped: CancellationToken,
) {
    let any_part = futures::future::select_all(
        parts
            .into_iter()
            .map(|t| Box::pin(t.cancelled_owned()))
            .collect::<Vec<_>>(),
    );
    let bound = async {
        match state.deadline {
            Some(d) => tokio::time::sleep_until(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = any_part => {}
        () = epoch_lost.cancelled() => {}
        () = bound => {}
        () = dropped.cancelled() => {}
        () = state.lost.cancelled() => {}
    }
    let _ = state.release(false).await;
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
    taken
}

/// The acquire of `names` in `space` with `spec`: a guard, or `None` if `wait` ran out.
pub(super) fn start(
    space: &LockSpace,
    names: Vec<String>,
    spec: Spec,
    wait: Result<Wait>,
    bound: Option<Duration>,
) -> Acquiring<Option<SpaceGuard>> {
    let shared = space.shared().clone();
    let wait = match wait {
        Ok(wait) => wait,
        Err(e) => return Acquiring::failed(e),
    };
    let acquiring = Acquiring::steps(move |queued, trips| {
        Box::pin(taking(shared, names, spec, wait, bound, queued, trips))
    });
    match wait {
        // Every step (the gate, each place, the directory's read) is within the bound.
        Wait::Within(timeout) => acquiring.within(timeout),
        Wait::Forever | Wait::Until(_) => acquiring,
    }
}

/// The same acquire, waiting without a timeout: always a guard.
pub(super) fn start_plain(
    space: &LockSpace,
    names: Vec<String>,
    spec: Spec,
    bound: Option<Duration>,
) -> Acquiring<SpaceGuard> {
    let shared = space.shared().clone();
    Acquiring::steps(move |queued, trips| {
        Box::pin(async move {
            let taken = taking(shared, names, spec, Wait::Forever, bound, queued, trips).await?;
            taken.ok_or_else(|| {
                Error::new(
                    ErrorKind::Internal,
                    "an acquire without a timeout ended without the lock",
                )
            })
        })
    })
}

/// Takes `names` and makes the guard, bounded by `bound` from the first grant.
async fn taking(
    shared: Arc<Shared>,
    names: Vec<String>,
    spec: Spec,
    wait: Wait,
    bound: Option<Duration>,
    queued: watch::Sender<bool>,
    trips: RoundTrips,
) -> Result<Option<SpaceGuard>> {
    // A hold ended at its bound is no clean release: its holder may not have stopped.
    let clean = spec.lock_delay.is_some() && bound.is_none();
    let taken = take(shared, names, spec, wait, queued, trips).await?;
    Ok(taken.map(|t| {
        let deadline = bound.and_then(|b| {
            let first = t.leases.iter().map(Lease::granted_at).min();
            first.and_then(|f| f.checked_add(b))
        });
        SpaceGuard::start(t, deadline, clean)
    }))
}

/// Holds a lock for as long as the stream is polled: a guard, and a new one each time the
/// last one is lost or dropped; ends with the error that no retry would change.
pub(super) fn hold(make: impl Fn() -> Acquiring<SpaceGuard> + Send + Sync + 'static) -> SpaceHeld {
    let stream = futures::stream::unfold(
        (make, None::<CancellationToken>, false),
        |(make, last, ended)| async move {
            if ended {
                return None;
            }
            if let Some(last) = &last {
                last.cancelled().await;
            }
            match make().await {
                Ok(guard) => {
                    let token = guard.token();
                    Some((Ok(guard), (make, Some(token), false)))
                }
                Err(e) => Some((Err(e), (make, None, true))),
            }
        },
    );
    Box::pin(stream)
}

/// A lock of a space held for as long as the stream is polled (see
/// [`SpaceMutex::hold`]): a guard now, and a new one (with a greater token) each time the
/// last one is lost or dropped. It ends with the error that stopped it (a manager that
/// stopped).
pub type SpaceHeld = BoxStream<'static, Result<SpaceGuard>>;

/// A mutex in a [`LockSpace`], from [`LockSpace::mutex`]: on each node it is the same lock
/// as [`SessionManager::mutex`](crate::SessionManager::mutex) of that name.
///
/// # Examples
///
/// ```
/// # use ydb_coordination::emulator::Emulator;
/// # use ydb_coordination::space::{Layout, LockSpace};
/// # use ydb_coordination::Client;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let emulator = Emulator::builder().node("/local/n1").node("/local/n2").start().await?;
/// # let client = Client::connect(&emulator.connection_string()).await?;
/// let space = LockSpace::builder()
///     .node("n1", &client, "/local/n1")
///     .node("n2", &client, "/local/n2")
///     .layout(Layout::new(1, ["n1", "n2"])?)
///     .open()
///     .await?;
/// let mutex = space.mutex("tenant-7/migrate");
/// let guard = mutex.lock().await?;
/// assert!(mutex.try_lock().await?.is_none());
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct SpaceMutex {
    space: LockSpace,
    name: String,
    data: Vec<u8>,
    lock_delay: Option<Duration>,
}

impl SpaceMutex {
    /// Data stored with the holder on each node (visible in describes).
    ///
    /// ```
    /// # use ydb_coordination::space::LockSpace;
    /// # #[allow(dead_code)] fn f(space: &LockSpace) { let _ =
    /// space.mutex("job").data("host-a");
    /// # }
    /// ```
    pub fn data(mut self, data: impl Into<Vec<u8>>) -> Self {
        self.data = data.into();
        self
    }

    /// After a holder lost the lock without releasing it (its session expired, its lease
    /// was lost, it dropped the guard, a bound ended it), the next holder's guard is handed
    /// over only once `delay` has passed since its grant, counted on its own monotonic
    /// clock; after a clean release ([`SpaceGuard::release`]) at once. A zero delay turns
    /// it off. The same mitigation as [`Mutex::lock_delay`](crate::Mutex::lock_delay), for
    /// protected resources that cannot check [fencing tokens](crate::FencingToken), and
    /// never a substitute for them.
    ///
    /// # How it works
    ///
    /// Each place of the name is the node's own lock-delay mutex: a persistent semaphore
    /// with one unit, whose data records how its last tenure ended. Once every place is
    /// granted, the holder reads each place's marker and writes its own `held` one there;
    /// the guard is handed over after the delay if any place says its last tenure there
    /// ended without a clean release, counted from that place's grant. A release writes
    /// `released` on every place before it releases; anything unsure counts as unclean (a
    /// drop, a part or a membership lost, a bounded hold's end, a write that failed), and
    /// the next holder waits. A grant whose markers cannot be read or written is given
    /// back and the lock asked for again (after a lost session) or ended with that error;
    /// a part lost during the delay is given back and the lock asked for again (a bounded
    /// form past its bound ends with [`ErrorKind::Unavailable`]).
    ///
    /// # A name on a node where it has no semaphore yet
    ///
    /// A reshard moves a name to a node where nobody has held it, so the place starts
    /// without a marker: the history of the name is on its old node. In the transition a
    /// holder takes both places, so it reads the old place's marker (and waits after an
    /// unclean end there) and writes its own on the new one. That is not enough on its
    /// own: nobody may hold the name in the transition, and a holder of the old layout may
    /// be lost on the old place after a holder of the transition released cleanly on both;
    /// either way the first holder in the next layout finds no marker, or a clean one, on
    /// its only place. So every marker names the epoch of the layout it was written in, and
    /// a place whose marker is not of the layout the lock is taken in (none, or an older
    /// one: also a name that a reshard moved away and back) holds its holder until `delay`
    /// after the process began to run that layout (opened the space with it, or followed
    /// it). That is safe: a tenure such a marker does not show belongs to an older layout,
    /// and had ended before the layout run was published (with a directory, a step is
    /// published only once no member runs an older layout or holds a lock taken in it; a
    /// member cut off from it has lost its locks by then) or before the process was
    /// started with it (with fixed layouts, as the [reshard rule](super#resharding) asks of
    /// the operator). The cost: a name first taken within `delay` of the process's start
    /// (or of its move to a new layout) waits out the rest of that `delay`; later locks
    /// find the markers of their layout and do not.
    ///
    /// Every process using the name must set a lock delay: a space mutex or multi-lock
    /// without one on the same name is refused with
    /// [`ErrorKind::PreconditionFailed`] while the other kind of semaphore exists on the
    /// node. Do not write the semaphores' data yourself.
    ///
    /// # Cost
    ///
    /// Per place, as on one node: six requests more per lock, two per release. Without a
    /// lock delay, none of this: a space mutex costs what a node's mutex costs.
    ///
    /// # Bounded forms
    ///
    /// The delay is part of a `try_` or `_timeout` form's bound, as on one node
    /// ([`Mutex::lock_delay`](crate::Mutex::lock_delay)): a wait that would end past the
    /// bound gives every place back, writing nothing, and the form answers `None`. A
    /// [`SpaceMutex::lock_for`] bound counts from the first grant, so the delay takes its
    /// share, and never ends with a clean release.
    ///
    /// # Examples
    ///
    /// ```
    /// # use ydb_coordination::emulator::Emulator;
    /// # use ydb_coordination::space::{Layout, LockSpace};
    /// # use ydb_coordination::Client;
    /// use std::time::Duration;
    /// use tokio::time::Instant;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let emulator = Emulator::builder().node("/local/n1").node("/local/n2").start().await?;
    /// # let client = Client::connect(&emulator.connection_string()).await?;
    /// # let open = || LockSpace::builder().node("n1", &client, "/local/n1")
    /// #     .node("n2", &client, "/local/n2").layout(Layout::new(1, ["n1", "n2"]).unwrap()).open();
    /// let delay = Duration::from_millis(300);
    /// let (p1, p2) = (open().await?, open().await?);
    ///
    /// // A clean release: the next holder starts at once.
    /// let guard = p1.mutex("nightly-cleanup").lock_delay(delay).lock().await?;
    /// guard.release().await?;
    /// let start = Instant::now();
    /// let guard = p2.mutex("nightly-cleanup").lock_delay(delay).lock().await?;
    /// assert!(start.elapsed() < delay);
    ///
    /// // A holder gone without releasing (here: its guard dropped): the next one waits.
    /// drop(guard);
    /// let start = Instant::now();
    /// let next = p1.mutex("nightly-cleanup").lock_delay(delay).lock().await?;
    /// assert!(start.elapsed() >= delay);
    /// next.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn lock_delay(mut self, delay: Duration) -> Self {
        self.lock_delay = (!delay.is_zero()).then_some(delay);
        self
    }

    fn spec(&self) -> Spec {
        Spec::mutex(&self.data, self.lock_delay)
    }

    /// Waits for the lock.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`] for a name over [`MAX_NAME_LEN`](crate::config::MAX_NAME_LEN)
    /// bytes; [`ErrorKind::PreconditionFailed`] for a layout naming a node the space was
    /// not given, or a published layout that contradicts the one run (see
    /// [`LockSpace::layout_error`](super::LockSpace::layout_error)); a node's manager errors
    /// once it stopped; in a transition, the directory's errors reading the layout (the
    /// lock is released). Without a bound, it waits while the process is not a confirmed
    /// member of its directory, and takes the lock again after a read of the layout that
    /// went unanswered. With a [lock delay](SpaceMutex::lock_delay),
    /// [`ErrorKind::PreconditionFailed`] when a node has the name as a mutex without one.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future withdraws the request; parts already taken are released. With a
    /// [lock delay](SpaceMutex::lock_delay), dropping it during the delay releases the
    /// parts, not cleanly: the next holder waits the delay too.
    pub fn lock(&self) -> Acquiring<SpaceGuard> {
        start_plain(&self.space, vec![self.name.clone()], self.spec(), None)
    }

    /// Takes the lock only if it is free in every place now.
    ///
    /// # Errors
    ///
    /// As [`SpaceMutex::lock`].
    ///
    /// # Cancel safety
    ///
    /// As [`SpaceMutex::lock`].
    pub fn try_lock(&self) -> Acquiring<Option<SpaceGuard>> {
        self.lock_timeout(Duration::ZERO)
    }

    /// Waits for the lock at most `timeout` in all; `None` if a node answered that it was
    /// not granted in time, and only then.
    ///
    /// # Errors
    ///
    /// As [`SpaceMutex::lock`]; a timeout over a day is `InvalidArgument`. By the bound
    /// (see [`Acquiring`]'s bounds), [`ErrorKind::Unavailable`] when a node did not answer,
    /// the process is not a confirmed member of its directory, or (in a transition) the
    /// directory did not answer the read of the layout. Every place taken is given back.
    ///
    /// # Cancel safety
    ///
    /// As [`SpaceMutex::lock`].
    pub fn lock_timeout(&self, timeout: Duration) -> Acquiring<Option<SpaceGuard>> {
        start(
            &self.space,
            vec![self.name.clone()],
            self.spec(),
            Wait::timeout(timeout),
            None,
        )
    }

    /// Waits for the lock and holds it for at most `bound` from the first grant: at the
    /// bound the guard's token fires and every part is released.
    ///
    /// # Errors
    ///
    /// As [`SpaceMutex::lock`].
    ///
    /// # Cancel safety
    ///
    /// As [`SpaceMutex::lock`].
    pub fn lock_for(&self, bound: Duration) -> Acquiring<SpaceGuard> {
        start_plain(
            &self.space,
            vec![self.name.clone()],
            self.spec(),
            Some(bound),
        )
    }

    /// Holds the lock for as long as the stream is polled (see [`SpaceHeld`]).
    #[must_use = "a stream does nothing unless polled"]
    pub fn hold(&self) -> SpaceHeld {
        let mutex = self.clone();
        hold(move || mutex.lock())
    }
}

/// A counted semaphore in a [`LockSpace`], from [`LockSpace::semaphore`]: on each node the
/// same semaphore as [`SessionManager::semaphore`](crate::SessionManager::semaphore); in a
/// transition a permit is taken in both places, so the limit holds on both sides.
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
/// let api = space.semaphore("fragile-api", 5);
/// let permit = api.acquire(2).await?;
/// assert!(api.try_acquire(4).await?.is_none());
/// permit.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct SpaceSemaphore {
    space: LockSpace,
    name: String,
    limit: u64,
    data: Vec<u8>,
}

impl SpaceSemaphore {
    /// Data stored with the holder on each node (visible in describes).
    ///
    /// ```
    /// # use ydb_coordination::space::LockSpace;
    /// # #[allow(dead_code)] fn f(space: &LockSpace) { let _ =
    /// space.semaphore("pool", 3).data("host-a");
    /// # }
    /// ```
    pub fn data(mut self, data: impl Into<Vec<u8>>) -> Self {
        self.data = data.into();
        self
    }

    /// The limit.
    ///
    /// ```
    /// # use ydb_coordination::space::LockSpace;
    /// # #[allow(dead_code)] fn f(space: &LockSpace) {
    /// assert_eq!(space.semaphore("pool", 3).limit(), 3);
    /// # }
    /// ```
    pub fn limit(&self) -> u64 {
        self.limit
    }

    fn spec(&self, n: u64) -> Result<Spec> {
        if n == 0 || n > self.limit {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("cannot acquire {n} of {} units", self.limit),
            ));
        }
        Ok(Spec {
            options: AcquireOptions::new().count(n).data(self.data.clone()),
            prepare: Prepare::Semaphore { limit: self.limit },
            guard: true,
            lock_delay: None,
            leader: false,
        })
    }

    fn start(
        &self,
        n: u64,
        wait: Result<Wait>,
        bound: Option<Duration>,
    ) -> Acquiring<Option<SpaceGuard>> {
        let names = vec![self.name.clone()];
        match self.spec(n) {
            Ok(spec) => start(&self.space, names, spec, wait, bound),
            Err(e) => Acquiring::failed(e),
        }
    }

    fn start_plain(&self, n: u64, bound: Option<Duration>) -> Acquiring<SpaceGuard> {
        match self.spec(n) {
            Ok(spec) => start_plain(&self.space, vec![self.name.clone()], spec, bound),
            Err(e) => Acquiring::failed(e),
        }
    }

    /// Waits for `n` units.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`] for `n` of 0 or above the limit;
    /// [`ErrorKind::PreconditionFailed`] when a node has the semaphore with another limit;
    /// otherwise as [`SpaceMutex::lock`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future withdraws the request; permits already taken are released.
    pub fn acquire(&self, n: u64) -> Acquiring<SpaceGuard> {
        self.start_plain(n, None)
    }

    /// Takes `n` units only if they are free in every place now.
    ///
    /// # Errors
    ///
    /// As [`SpaceSemaphore::acquire`].
    ///
    /// # Cancel safety
    ///
    /// As [`SpaceSemaphore::acquire`].
    pub fn try_acquire(&self, n: u64) -> Acquiring<Option<SpaceGuard>> {
        self.acquire_timeout(n, Duration::ZERO)
    }

    /// Waits for `n` units at most `timeout` in all; `None` if it passed.
    ///
    /// # Errors
    ///
    /// As [`SpaceSemaphore::acquire`].
    ///
    /// # Cancel safety
    ///
    /// As [`SpaceSemaphore::acquire`].
    pub fn acquire_timeout(&self, n: u64, timeout: Duration) -> Acquiring<Option<SpaceGuard>> {
        self.start(n, Wait::timeout(timeout), None)
    }

    /// Waits for `n` units and holds them for at most `bound` from the first grant.
    ///
    /// # Errors
    ///
    /// As [`SpaceSemaphore::acquire`].
    ///
    /// # Cancel safety
    ///
    /// As [`SpaceSemaphore::acquire`].
    pub fn acquire_for(&self, n: u64, bound: Duration) -> Acquiring<SpaceGuard> {
        self.start_plain(n, Some(bound))
    }

    /// Holds `n` units for as long as the stream is polled (see [`SpaceHeld`]).
    #[must_use = "a stream does nothing unless polled"]
    pub fn hold(&self, n: u64) -> SpaceHeld {
        let semaphore = self.clone();
        hold(move || semaphore.acquire(n))
    }
}

/// A reader-writer lock in a [`LockSpace`], from [`LockSpace::rwlock`]: on each node the
/// same lock as [`SessionManager::rwlock`](crate::SessionManager::rwlock).
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
/// # let open = || LockSpace::builder().node("n1", &client, "/local/n1")
/// #     .layout(Layout::new(1, ["n1"]).unwrap()).open();
/// // Two processes' spaces share the reads; a third cannot write meanwhile.
/// let (p1, p2, p3) = (open().await?, open().await?, open().await?);
/// let a = p1.rwlock("config").read().await?;
/// let b = p2.rwlock("config").read().await?;
/// assert!(p3.rwlock("config").try_write().await?.is_none());
/// # drop((a, b));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct SpaceRwLock {
    space: LockSpace,
    name: String,
    data: Vec<u8>,
}

impl SpaceRwLock {
    /// Data stored with the holder on each node (visible in describes).
    ///
    /// ```
    /// # use ydb_coordination::space::LockSpace;
    /// # #[allow(dead_code)] fn f(space: &LockSpace) { let _ =
    /// space.rwlock("config").data("host-a");
    /// # }
    /// ```
    pub fn data(mut self, data: impl Into<Vec<u8>>) -> Self {
        self.data = data.into();
        self
    }

    fn spec(&self, write: bool) -> Spec {
        let options = if write {
            AcquireOptions::exclusive()
        } else {
            AcquireOptions::shared()
        };
        Spec {
            options: options.ephemeral(true).data(self.data.clone()),
            prepare: Prepare::Nothing,
            guard: false,
            lock_delay: None,
            leader: false,
        }
    }

    fn names(&self) -> Vec<String> {
        vec![self.name.clone()]
    }

    /// Waits for shared access.
    ///
    /// # Errors
    ///
    /// As [`SpaceMutex::lock`].
    ///
    /// # Cancel safety
    ///
    /// As [`SpaceMutex::lock`].
    pub fn read(&self) -> Acquiring<SpaceGuard> {
        start_plain(&self.space, self.names(), self.spec(false), None)
    }

    /// Waits for exclusive access.
    ///
    /// # Errors
    ///
    /// As [`SpaceMutex::lock`].
    ///
    /// # Cancel safety
    ///
    /// As [`SpaceMutex::lock`].
    pub fn write(&self) -> Acquiring<SpaceGuard> {
        start_plain(&self.space, self.names(), self.spec(true), None)
    }

    /// Shared access only if it can be had now.
    ///
    /// # Errors
    ///
    /// As [`SpaceMutex::lock`].
    ///
    /// # Cancel safety
    ///
    /// As [`SpaceMutex::lock`].
    pub fn try_read(&self) -> Acquiring<Option<SpaceGuard>> {
        self.read_timeout(Duration::ZERO)
    }

    /// Exclusive access only if it can be had now.
    ///
    /// # Errors
    ///
    /// As [`SpaceMutex::lock`].
    ///
    /// # Cancel safety
    ///
    /// As [`SpaceMutex::lock`].
    pub fn try_write(&self) -> Acquiring<Option<SpaceGuard>> {
        self.write_timeout(Duration::ZERO)
    }

    /// Waits for shared access at most `timeout`; `None` if it passed.
    ///
    /// # Errors
    ///
    /// As [`SpaceMutex::lock_timeout`].
    ///
    /// # Cancel safety
    ///
    /// As [`SpaceMutex::lock`].
    pub fn read_timeout(&self, timeout: Duration) -> Acquiring<Option<SpaceGuard>> {
        start(
            &self.space,
            self.names(),
            self.spec(false),
            Wait::timeout(timeout),
            None,
        )
    }

    /// Waits for exclusive access at most `timeout`; `None` if it passed.
    ///
    /// # Errors
    ///
    /// As [`SpaceMutex::lock_timeout`].
    ///
    /// # Cancel safety
    ///
    /// As [`SpaceMutex::lock`].
    pub fn write_timeout(&self, timeout: Duration) -> Acquiring<Option<SpaceGuard>> {
        start(
            &self.space,
            self.names(),
            self.spec(true),
            Wait::timeout(timeout),
            None,
        )
    }

    /// Holds shared access for as long as the stream is polled (see [`SpaceHeld`]).
    #[must_use = "a stream does nothing unless polled"]
    pub fn hold_read(&self) -> SpaceHeld {
        let lock = self.clone();
        hold(move || lock.read())
    }

    /// Holds exclusive access for as long as the stream is polled (see [`SpaceHeld`]).
    #[must_use = "a stream does nothing unless polled"]
    pub fn hold_write(&self) -> SpaceHeld {
        let lock = self.clone();
        hold(move || lock.write())
    }
}

/// Several mutexes of a [`LockSpace`] taken together, all or none, from
/// [`LockSpace::multi_lock`]; the names may live on different nodes.
///
/// The names are taken one after the other, sorted (each once), each in its places in
/// order (in a transition, old then new): the same global order for every process,
/// whichever layout of a reshard it runs, so overlapping sets cannot deadlock. Each part
/// is the same lock as [`LockSpace::mutex`] of that name.
///
/// # Examples
///
/// ```
/// # use ydb_coordination::emulator::Emulator;
/// # use ydb_coordination::space::{Layout, LockSpace};
/// # use ydb_coordination::Client;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let emulator = Emulator::builder().node("/local/n1").node("/local/n2").start().await?;
/// # let client = Client::connect(&emulator.connection_string()).await?;
/// # let space = LockSpace::builder().node("n1", &client, "/local/n1").node("n2", &client, "/local/n2")
/// #     .layout(Layout::new(1, ["n1", "n2"])?).open().await?;
/// let both = space.multi_lock(["account-42", "account-7"]).lock().await?;
/// assert_eq!(both.fencing_tokens().len(), 2);
/// both.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct SpaceMultiLock {
    space: LockSpace,
    names: Vec<String>,
    data: Vec<u8>,
}

impl SpaceMultiLock {
    /// Data stored with the holder of each lock (visible in describes).
    ///
    /// ```
    /// # use ydb_coordination::space::LockSpace;
    /// # #[allow(dead_code)] fn f(space: &LockSpace) { let _ =
    /// space.multi_lock(["a", "b"]).data("host-a");
    /// # }
    /// ```
    pub fn data(mut self, data: impl Into<Vec<u8>>) -> Self {
        self.data = data.into();
        self
    }

    /// The names, in the order they are taken.
    ///
    /// ```
    /// # use ydb_coordination::space::LockSpace;
    /// # #[allow(dead_code)] fn f(space: &LockSpace) {
    /// assert_eq!(space.multi_lock(["b", "a", "b"]).names(), ["a", "b"]);
    /// # }
    /// ```
    pub fn names(&self) -> &[String] {
        &self.names
    }

    fn spec(&self) -> Spec {
        Spec::mutex(&self.data, None)
    }

    /// Waits for all the locks.
    ///
    /// # Errors
    ///
    /// As [`SpaceMutex::lock`]; no names is `InvalidArgument`.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future withdraws the request; locks already taken are released.
    pub fn lock(&self) -> Acquiring<SpaceGuard> {
        if let Err(e) = self.check() {
            return Acquiring::failed(e);
        }
        start_plain(&self.space, self.names.clone(), self.spec(), None)
    }

    /// Takes all the locks only if each is free now.
    ///
    /// # Errors
    ///
    /// As [`SpaceMultiLock::lock`].
    ///
    /// # Cancel safety
    ///
    /// As [`SpaceMultiLock::lock`].
    pub fn try_lock(&self) -> Acquiring<Option<SpaceGuard>> {
        self.lock_timeout(Duration::ZERO)
    }

    /// Waits for all the locks at most `timeout` in all; `None` (and none held) if it
    /// passed.
    ///
    /// # Errors
    ///
    /// As [`SpaceMultiLock::lock`].
    ///
    /// # Cancel safety
    ///
    /// As [`SpaceMultiLock::lock`].
    pub fn lock_timeout(&self, timeout: Duration) -> Acquiring<Option<SpaceGuard>> {
        let wait = self.check().and_then(|()| Wait::timeout(timeout));
        start(&self.space, self.names.clone(), self.spec(), wait, None)
    }

    fn check(&self) -> Result<()> {
        if self.names.is_empty() {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "a multi-lock needs at least one name",
            ));
        }
        Ok(())
    }
}

impl LockSpace {
    /// The [`SpaceMutex`] `name`.
    ///
    /// ```
    /// # use ydb_coordination::space::LockSpace;
    /// # #[allow(dead_code)] fn f(space: &LockSpace) { let _ =
    /// space.mutex("nightly-cleanup");
    /// # }
    /// ```
    pub fn mutex(&self, name: &str) -> SpaceMutex {
        SpaceMutex {
            space: self.clone(),
            name: name.to_string(),
            data: Vec::new(),
            lock_delay: None,
        }
    }

    /// The [`SpaceSemaphore`] `name` with `limit` units (created on each node if missing).
    ///
    /// ```
    /// # use ydb_coordination::space::LockSpace;
    /// # #[allow(dead_code)] fn f(space: &LockSpace) { let _ =
    /// space.semaphore("fragile-api", 5);
    /// # }
    /// ```
    pub fn semaphore(&self, name: &str, limit: u64) -> SpaceSemaphore {
        SpaceSemaphore {
            space: self.clone(),
            name: name.to_string(),
            limit,
            data: Vec::new(),
        }
    }

    /// The [`SpaceRwLock`] `name`.
    ///
    /// ```
    /// # use ydb_coordination::space::LockSpace;
    /// # #[allow(dead_code)] fn f(space: &LockSpace) { let _ =
    /// space.rwlock("config");
    /// # }
    /// ```
    pub fn rwlock(&self, name: &str) -> SpaceRwLock {
        SpaceRwLock {
            space: self.clone(),
            name: name.to_string(),
            data: Vec::new(),
        }
    }

    /// The [`SpaceMultiLock`] of `names` (sorted, each once).
    ///
    /// ```
    /// # use ydb_coordination::space::LockSpace;
    /// # #[allow(dead_code)] fn f(space: &LockSpace) { let _ =
    /// space.multi_lock(["account-42", "account-7"]);
    /// # }
    /// ```
    pub fn multi_lock<S: AsRef<str>>(&self, names: impl IntoIterator<Item = S>) -> SpaceMultiLock {
        let mut names: Vec<String> = names.into_iter().map(|n| n.as_ref().to_string()).collect();
        names.sort_unstable();
        names.dedup();
        SpaceMultiLock {
            space: self.clone(),
            names,
            data: Vec::new(),
        }
    }
}
