//! An exclusive lock.

use std::sync::Arc;
use std::time::Duration;

use super::{
    Acquiring, Bounded, Held, Holding, Prepare, Scope, lease_guard, lock_delay, take_lock,
};
use crate::config::AcquireOptions;
use crate::error::{Error, ErrorKind};
use crate::session::Lease;

/// What a mutex takes of its semaphore, on a node and on each place of a lock space alike
/// (the two must match, or they refuse each other: the server's `PreconditionFailed`, which
/// a node's mutex reports as [`ErrorKind::ModeMismatch`]): without a
/// lock delay the whole of an ephemeral semaphore; with one, the one unit of a persistent
/// semaphore of limit 1, made if missing, whose data carries the marker.
pub(crate) fn semaphore(lock_delay: Option<Duration>, data: &[u8]) -> (AcquireOptions, Prepare) {
    let (options, prepare) = match lock_delay {
        Some(_) => (
            AcquireOptions::new().count(1),
            Prepare::Semaphore { limit: 1 },
        ),
        None => (
            AcquireOptions::exclusive().ephemeral(true),
            Prepare::Nothing,
        ),
    };
    (options.data(data.to_vec()), prepare)
}

/// The error of a mutex (with a lock delay: `delayed`) refused because its name is a
/// semaphore of the other kind ([`semaphore`]): the server's `PreconditionFailed`, which is
/// the only refusal a mutex's semaphore can meet (an ephemeral acquire of a persistent
/// semaphore; a persistent one of an ephemeral semaphore or of another limit), becomes
/// [`ErrorKind::ModeMismatch`] naming the other mode and what to do; the server's error stays
/// its source.
pub(crate) fn other_mode(err: Error, name: &str, delayed: bool) -> Error {
    if err.kind() != ErrorKind::PreconditionFailed {
        return err;
    }
    let message = if delayed {
        format!(
            "semaphore {name:?} is in use as a lock without a lock delay (an ephemeral \
             semaphore), or another recipe made it with another limit: lock it without a lock \
             delay as its other users do, or use another name"
        )
    } else {
        format!(
            "semaphore {name:?} is a persistent semaphore, as a lock with a lock delay uses \
             (or an election, or a counted semaphore): lock it with the same lock delay \
             (Mutex::lock_delay; ydb-coord lock --lock-delay), or use another name"
        )
    };
    Error::caused_by(ErrorKind::ModeMismatch, message, &err)
}

/// An exclusive lock: an ephemeral semaphore acquired with all its units, so it exists
/// only while someone holds or waits for it, and waiters are served in FIFO order. With a
/// [lock delay](Mutex::lock_delay), a persistent semaphore with one unit instead.
///
/// # Examples
///
/// ```
/// # use ydb_coordination::emulator::Emulator;
/// # use ydb_coordination::{Client, SessionOptions};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let emulator = Emulator::builder().node("/local/app").start().await?;
/// # let client = Client::connect(&emulator.connection_string()).await?;
/// let session = client.session("/local/app", SessionOptions::new()).await?;
/// let guard = session.mutex("nightly-cleanup").lock().await?;
/// let work = async { /* clean up */ };
/// if guard.token().run_until_cancelled(work).await.is_none() {
///     eprintln!("lock lost; stopped");
/// }
/// guard.unlock().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Mutex {
    scope: Scope,
    name: String,
    data: Vec<u8>,
    lock_delay: Option<Duration>,
}

/// A held [`Mutex`]; dropping it unlocks. The same guard on one node and in a
/// [`LockSpace`](crate::LockSpace): what it holds is its [`lease`](MutexGuard::lease) on
/// one node or its [`space_lease`](MutexGuard::space_lease) in a space.
///
/// Of a mutex with a [lock delay](Mutex::lock_delay), [`MutexGuard::unlock`] (or
/// [`MutexGuard::release`]) first records on the server that the release is clean (one
/// more request per place), so the next holder does not wait; if that record cannot be
/// written, the lock is released all the same and the next holder waits. A dropped guard (a
/// drop cannot wait for the record's write), a future of `unlock()` dropped before the
/// record is written, a lease taken out with [`MutexGuard::into_lease`], a lock already
/// lost and a [bounded](Mutex::lock_for) hold end without one, and the next holder waits
/// the delay.
///
/// # Examples
///
/// ```
/// # use ydb_coordination::emulator::Emulator;
/// # use ydb_coordination::{Client, SessionOptions};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let emulator = Emulator::builder().node("/local/app").start().await?;
/// # let client = Client::connect(&emulator.connection_string()).await?;
/// let session = client.session("/local/app", SessionOptions::new()).await?;
/// let guard = session.mutex("job").lock().await?;
/// let token = guard.fencing_token();
/// assert_eq!(guard.lease().map(|l| l.fencing_token()), Some(token));
/// assert!(guard.unlock().await?);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
#[must_use = "dropping the guard unlocks the mutex"]
pub struct MutexGuard {
    held: Holding,
}

lease_guard!(MutexGuard, "lock", unlock);

impl Mutex {
    pub(crate) fn new(scope: impl Into<Scope>, name: &str) -> Self {
        Self {
            scope: scope.into(),
            name: name.to_string(),
            data: Vec::new(),
            lock_delay: None,
        }
    }

    /// Data stored with the holder (visible in describes), e.g. the host name.
    pub fn data(mut self, data: impl Into<Vec<u8>>) -> Self {
        self.data = data.into();
        self
    }

    /// After a holder lost the lock without releasing it (its session expired, its lease
    /// was lost), the next holder's guard is handed over only once `delay` has passed since
    /// its grant, counted on its own monotonic clock; after a clean release
    /// ([`MutexGuard::unlock`]) at once. A zero delay turns it off.
    ///
    /// A holder stopped past its lease (a long pause, a stalled network) has that long to
    /// wake up, see its token fired and stop before the next holder starts. This is the
    /// timing mitigation of Chubby's and Consul's lock delay, for protected resources that
    /// cannot check [fencing tokens](crate::FencingToken); it assumes the stop ends within
    /// the delay and is never a substitute for fencing: a resource that can check the token
    /// should.
    ///
    /// # How it works
    ///
    /// The server keeps nothing of a session once it has ended, so whether the last tenure
    /// ended cleanly is written where every holder can read and write it: the semaphore's
    /// own data. On its grant the holder reads it, then writes `held <order id>`; an unlock
    /// writes `released <order id>` before it releases. A new holder that finds `held` of
    /// another tenure (or data it cannot read) waits the delay. Anything that fails on the
    /// way counts as unclean, so the next holder waits: a drop (which cannot wait for the
    /// write), a lease lost before the unlock, a write that failed. A grant whose own marker
    /// cannot be read or written is given back, and the acquire ends with that error (on a
    /// [`SessionManager`](crate::SessionManager), a lost session is replaced and the lock
    /// asked for again, as for any acquire); a lease lost during the delay ends it with the
    /// loss (the session's error), never with a guard.
    ///
    /// The mutex therefore uses a persistent semaphore with one unit, made on first use
    /// and left on the node (an ordinary mutex's is ephemeral: deleted when its last owner
    /// or waiter goes, so a marker in it would vanish with the crashed holder's session and
    /// the next holder would not wait). Every process using the name must set a lock delay:
    /// a mutex without one on the same name, and one with a delay on a name a mutex without
    /// one holds or waits for, are refused with
    /// [`ErrorKind::ModeMismatch`](crate::ErrorKind::ModeMismatch) while the other kind of
    /// semaphore exists (`ydb-coord lock --lock-delay` takes the same lock as this mutex). Do not write the semaphore's data yourself. A
    /// semaphore deleted and made again starts empty: its next holder does not wait.
    ///
    /// A counted semaphore cannot be covered this way: with several holders, the clean
    /// release of one says nothing about another that was lost, and one marker cannot tell
    /// which permit was lost.
    ///
    /// # In a lock space
    ///
    /// Each place of the name is this mutex on its node, with its own marker. Once every
    /// place is granted, the holder reads each place's marker and writes its own `held` one
    /// there; the guard is handed over after the delay if any place says its last tenure
    /// there ended without a clean release, counted from that place's grant. An unlock
    /// writes `released` on every place before it releases. A part or the membership lost
    /// counts as unclean too; a part lost during the delay is given back and the lock asked
    /// for again (a bounded form past its bound ends with
    /// [`ErrorKind::Unavailable`](crate::ErrorKind::Unavailable)).
    ///
    /// A reshard moves a name to a node where nobody has held it, so the place starts
    /// without a marker: the history of the name is on its old node. In the transition a
    /// holder takes both places, so it reads the old place's marker (and waits after an
    /// unclean end there) and writes its own on the new one. That is not enough on its
    /// own: nobody may hold the name in the transition, and a holder of the old layout may
    /// be lost on the old place after a holder of the transition released cleanly on both;
    /// either way the first holder in the next layout finds no marker, or a clean one, on
    /// its only place. So every marker in a space names the epoch of the layout it was
    /// written in, and a place whose marker is not of the layout the lock is taken in (none,
    /// or an older one: also a name that a reshard moved away and back) holds its holder
    /// until `delay` after the process began to run that layout (opened the space with it,
    /// or followed it). That is safe: a tenure such a marker does not show belongs to an
    /// older layout, and had ended before the layout run was published (with a directory, a
    /// step is published only once no member runs an older layout or holds a lock taken in
    /// it; a member cut off from it has lost its locks by then) or before the process was
    /// started with it (with fixed layouts, as the
    /// [reshard rule](crate::space#resharding) asks of the operator). The cost: a name
    /// first taken within `delay` of the process's start (or of its move to a new layout)
    /// waits out the rest of that `delay`; later locks find the markers of their layout and
    /// do not.
    ///
    /// # Cost
    ///
    /// Per place, six requests more per lock, two per unlock. Each lock makes sure of the semaphore (a
    /// create, and a describe once it exists), then after the grant describes it and writes
    /// the marker, and has the session watch the semaphore so that a forced delete ends the
    /// hold (a describe at the grant and one after each marker write); an unlock writes the
    /// marker (and the watch describes once more). Without a lock delay, none of this.
    ///
    /// # Bounded forms
    ///
    /// The delay is part of a `try_` or `_timeout` form's bound, as every step is (see
    /// [`Acquiring`]'s bounds): when the markers ask for a wait that would end past the
    /// bound, the grant is given back without writing anything and the form answers
    /// `None` (the lock is not the caller's in time; the next holder still waits). A
    /// [`Mutex::lock_for`] bound counts from the grant, so the delay takes its share; a
    /// bounded hold never ends with a clean release. [`Acquiring::queued`] answers `false`
    /// at the grant; awaiting the acquire then waits out the delay.
    ///
    /// # Examples
    ///
    /// ```
    /// # use ydb_coordination::emulator::Emulator;
    /// # use ydb_coordination::{Client, SessionOptions};
    /// use std::time::Duration;
    /// use tokio::time::Instant;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let emulator = Emulator::builder().node("/local/app").start().await?;
    /// # let client = Client::connect(&emulator.connection_string()).await?;
    /// let a = client.session("/local/app", SessionOptions::new()).await?;
    /// let b = client.session("/local/app", SessionOptions::new()).await?;
    /// let delay = Duration::from_millis(300);
    ///
    /// // A clean unlock: the next holder starts at once.
    /// let guard = a.mutex("nightly-cleanup").lock_delay(delay).lock().await?;
    /// guard.unlock().await?;
    /// let start = Instant::now();
    /// let guard = b.mutex("nightly-cleanup").lock_delay(delay).lock().await?;
    /// assert!(start.elapsed() < delay);
    ///
    /// // A holder gone without unlocking (here: its session closed): the next one waits.
    /// b.close().await;
    /// assert!(guard.is_lost());
    /// let start = Instant::now();
    /// let next = a.mutex("nightly-cleanup").lock_delay(delay).lock().await?;
    /// assert!(start.elapsed() >= delay);
    /// next.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn lock_delay(mut self, delay: Duration) -> Self {
        self.lock_delay = (!delay.is_zero()).then_some(delay);
        self
    }

    /// Whether the owner with order id `owner` (its [fencing token](crate::FencingToken))
    /// of a [lock-delay](Mutex::lock_delay) mutex's semaphore, whose data is `data` (what a
    /// describe shows), is waiting out the delay: the wall-clock time its guard is handed
    /// over, as the owner wrote it when it began to wait. `None` for an owner that does not
    /// wait (or data of anything else). It tells people what a holder does (`ydb-coord top`
    /// shows it); the time may have passed, and it is the owner's clock.
    ///
    /// # Examples
    ///
    /// ```
    /// # use ydb_coordination::emulator::Emulator;
    /// # use ydb_coordination::{Client, Mutex, SessionOptions};
    /// # use ydb_coordination::config::DescribeOptions;
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let emulator = Emulator::builder().node("/local/app").start().await?;
    /// # let client = Client::connect(&emulator.connection_string()).await?;
    /// let session = client.session("/local/app", SessionOptions::new()).await?;
    /// let guard = session.mutex("job").lock_delay(Duration::from_secs(5)).lock().await?;
    /// let d = session.describe_semaphore("job", DescribeOptions::new().owners(true)).await?;
    /// // The first holder of a new semaphore does not wait.
    /// assert_eq!(Mutex::delay_until(&d.data, d.owners[0].order_id), None);
    /// guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn delay_until(data: &[u8], owner: u64) -> Option<std::time::SystemTime> {
        let millis = lock_delay::delay_until(data, owner)?;
        std::time::UNIX_EPOCH.checked_add(Duration::from_millis(millis))
    }

    /// An acquire of the lock (waiting at most `timeout`) whose hold `finish` turns into
    /// the caller's guard. `bounded`: the hold ends at a bound, which is no clean release.
    fn start<T: Send + 'static>(
        &self,
        timeout: Option<Duration>,
        bounded: bool,
        finish: impl Fn(Holding) -> T + Send + Sync + 'static,
    ) -> Acquiring<Option<T>> {
        let spec = crate::space::Spec::mutex(&self.data, self.lock_delay);
        take_lock(&self.scope, &self.name, spec, timeout, bounded, finish)
    }

    /// Waits for the lock.
    ///
    /// Returns an [`Acquiring`] you can simply `.await`, or first ask whether the lock is
    /// taken ([`Acquiring::queued`]).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for a name over
    /// [`MAX_NAME_LEN`](crate::config::MAX_NAME_LEN) bytes or a
    /// [reserved](crate::config::is_reserved) one (nothing is sent);
    /// [`ErrorKind::ModeMismatch`](crate::ErrorKind::ModeMismatch) when the name is a lock
    /// of the other mode (with or without a [lock delay](Mutex::lock_delay)); session errors
    /// (on a [`Session`](crate::Session) scope: the session was lost while
    /// waiting; a [`SessionManager`](crate::SessionManager) scope retries in the next
    /// session instead, until the manager stops: then its error,
    /// [`ErrorKind::SessionClosed`](crate::ErrorKind::SessionClosed) after a shutdown). In a
    /// [`LockSpace`](crate::LockSpace), also
    /// [`ErrorKind::PreconditionFailed`](crate::ErrorKind::PreconditionFailed) for a layout
    /// naming a node the space was not given, or a published layout that contradicts the
    /// one run (see [`LockSpace::layout_error`](crate::LockSpace::layout_error)); a node's
    /// manager's error once it stopped; in a transition, the directory's errors reading the
    /// layout (the places taken are given back). Without a bound, a lock in a space waits
    /// while the process is not a confirmed member of its directory, and is asked for again
    /// after a read of the layout that went unanswered.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future withdraws the request; the lock is not taken (in a space, the
    /// places already taken are released). With a [lock delay](Mutex::lock_delay), dropping
    /// it after the grant (during the delay) releases the lock, not cleanly: the next holder
    /// waits the delay too.
    pub fn lock(&self) -> Acquiring<MutexGuard> {
        self.start(None, false, |held| MutexGuard { held })
            .expect_some()
    }

    /// Takes the lock only if it is free and nobody is queued.
    ///
    /// # Errors
    ///
    /// As [`Mutex::lock`].
    ///
    /// # Cancel safety
    ///
    /// As [`Mutex::lock`].
    pub fn try_lock(&self) -> Acquiring<Option<MutexGuard>> {
        self.lock_timeout(Duration::ZERO)
    }

    /// Waits for the lock at most `timeout` in all (for a session too, on a manager
    /// without one; in a lock space, for every place); `None` if a node answered that it
    /// was not granted in time, and only then.
    ///
    /// # Errors
    ///
    /// As [`Mutex::lock`]; a timeout over a day is `InvalidArgument`. By the bound (see
    /// [`Acquiring`]'s bounds), [`ErrorKind::Unavailable`](crate::ErrorKind::Unavailable)
    /// when a node did not answer, or in a space, when the process is not a confirmed member
    /// of its directory or (in a transition) the directory did not answer the read of the
    /// layout; every place taken is given back.
    ///
    /// # Cancel safety
    ///
    /// As [`Mutex::lock`].
    pub fn lock_timeout(&self, timeout: Duration) -> Acquiring<Option<MutexGuard>> {
        self.start(Some(timeout), false, |held| MutexGuard { held })
    }

    /// Waits for the lock and holds it for at most `bound` from the grant: a wedged holder
    /// cannot keep it from the fleet forever.
    ///
    /// At the [deadline](Bounded::deadline), first the guard's token fires (stop
    /// the protected work under it), then the release is sent to the server, so another
    /// session may take the lock right after; the fencing token still guards against a
    /// holder that ignores its token. This happens even if the holder is alive and the
    /// session healthy. A [`release`](Bounded::release) or a drop before the
    /// deadline releases as usual. Each granted guard has a wait (started at the grant)
    /// that holds the lease until the deadline, in one task of the session, manager or lock
    /// space beside the other bounded holds taken there; it ends with the lock.
    ///
    /// # Examples
    ///
    /// ```
    /// # use ydb_coordination::emulator::Emulator;
    /// # use ydb_coordination::{Client, SessionOptions};
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let emulator = Emulator::builder().node("/local/app").start().await?;
    /// # let client = Client::connect(&emulator.connection_string()).await?;
    /// let session = client.session("/local/app", SessionOptions::new()).await?;
    /// let mutex = session.mutex("nightly-cleanup");
    /// let guard = mutex.lock_for(Duration::from_millis(100)).await?;
    /// let wedged = std::future::pending::<()>();
    /// assert!(guard.token().run_until_cancelled(wedged).await.is_none());
    /// // The lock was released at the deadline: it is free for the next holder.
    /// let next = mutex.lock().await?;
    /// # drop((guard, next));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Mutex::lock`].
    ///
    /// # Cancel safety
    ///
    /// As [`Mutex::lock`]: the deadline's wait is started only when the lock is granted and
    /// returned.
    pub fn lock_for(&self, bound: Duration) -> Acquiring<Bounded<MutexGuard>> {
        // A hold ended at its deadline is no clean release: its holder may not have stopped.
        let scope = self.scope.clone();
        self.start(None, true, move |held| {
            let granted_at = held.granted_at();
            Bounded::from_grant(MutexGuard { held }, granted_at, bound, scope.waits())
        })
        .expect_some()
    }

    /// Holds the lock for as long as the stream is polled: a guard now, and a new one
    /// (with a greater fencing token) each time the last one is lost or dropped. Built for
    /// singleton workers. See [`Held`].
    pub fn hold(&self) -> Held<MutexGuard> {
        let mutex = self.clone();
        Held::new(
            format!("mutex {:?}", self.name),
            Arc::new(move || {
                let mutex = mutex.clone();
                Box::pin(mutex.lock())
            }),
            |g| g.lease().map(Lease::session_id),
        )
    }
}
