//! An exclusive lock.

use std::sync::Arc;
use std::time::Duration;

use crate::session::optional;

use tokio_util::sync::CancellationToken;

use super::{Acquiring, Bounded, Guard, Held, Prepare, Source, acquiring_then, lock_delay};
use crate::config::AcquireOptions;
use crate::error::{Error, ErrorKind, Result};
use crate::session::{FencingToken, Lease};

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
fn other_mode(err: Error, name: &str, delayed: bool) -> Error {
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
    source: Source,
    name: String,
    data: Vec<u8>,
    lock_delay: Option<Duration>,
}

/// A held [`Mutex`]; dropping it unlocks. Dereferences to the [`Lease`].
///
/// Of a mutex with a [lock delay](Mutex::lock_delay), only [`MutexGuard::unlock`] and
/// [`Guard::release`] are a clean release; a dropped guard (a drop cannot wait for the
/// marker's write), a lease taken out with [`MutexGuard::into_lease`] and a
/// [bounded](Mutex::lock_for) hold end without one, and the next holder waits the delay.
#[derive(Debug)]
#[must_use = "dropping the guard unlocks the mutex"]
pub struct MutexGuard {
    lease: Lease,
    /// Whether an unlock records a clean release (a lock-delay mutex).
    clean: bool,
}

impl std::ops::Deref for MutexGuard {
    type Target = Lease;

    fn deref(&self) -> &Lease {
        &self.lease
    }
}

impl MutexGuard {
    fn new(lease: Lease, clean: bool) -> Self {
        Self { lease, clean }
    }

    /// Releases the lock and waits for the server's answer (`false`: it was already lost).
    ///
    /// On a mutex with a [lock delay](Mutex::lock_delay), first records on the server that
    /// the release is clean (one more request), so the next holder does not wait; if that
    /// record cannot be written, the lock is released all the same and the next holder
    /// waits.
    ///
    /// # Errors
    ///
    /// The session ended first (the server then releases everything itself).
    ///
    /// # Cancel safety
    ///
    /// Without a lock delay, the release is requested at once; dropping the future only
    /// skips the wait. With one, dropping the future before the record is written releases
    /// the lock at once, as a dropped guard does (not a clean release: the next holder
    /// waits).
    pub async fn unlock(self) -> Result<bool> {
        if self.clean {
            lock_delay::release_clean(self.lease).await
        } else {
            self.lease.release().await
        }
    }

    /// The same as [`MutexGuard::unlock`]: releases the lock (cleanly, on a mutex with a
    /// [lock delay](Mutex::lock_delay)).
    ///
    /// # Errors
    ///
    /// The session ended first (the server then releases everything itself).
    ///
    /// # Cancel safety
    ///
    /// As [`MutexGuard::unlock`].
    pub async fn release(self) -> Result<bool> {
        self.unlock().await
    }

    /// The lease underneath. Of a mutex with a [lock delay](Mutex::lock_delay), its release
    /// is not a clean one: the next holder waits the delay.
    pub fn into_lease(self) -> Lease {
        self.lease
    }
}

impl Guard for MutexGuard {
    fn fencing_token(&self) -> FencingToken {
        self.lease.fencing_token()
    }

    fn token(&self) -> CancellationToken {
        self.lease.token()
    }

    fn is_lost(&self) -> bool {
        self.lease.is_lost()
    }

    fn release(self) -> impl std::future::Future<Output = Result<bool>> + Send {
        self.unlock()
    }
}

impl Mutex {
    pub(crate) fn new(source: Source, name: &str) -> Self {
        Self {
            source,
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
    /// This covers one node's mutex. A [`LockSpace`](crate::LockSpace)'s mutex has the same
    /// option, [`SpaceMutex::lock_delay`](crate::space::SpaceMutex::lock_delay): each place
    /// of the name is this mutex on its node, with its own marker, and the guard waits if
    /// any place's last tenure ended uncleanly; it also covers a name that a reshard moves
    /// to a node where it has no semaphore yet.
    ///
    /// # Cost
    ///
    /// Six requests more per lock, two per unlock. Each lock makes sure of the semaphore (a
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

    fn options(&self) -> AcquireOptions {
        semaphore(self.lock_delay, &self.data).0
    }

    /// An acquire of the lock (waiting at most `timeout`) whose lease `finish` turns into
    /// the caller's guard (told whether an unlock records a clean release).
    fn start<T: Send + 'static>(
        &self,
        timeout: Option<Duration>,
        finish: impl Fn(Result<Lease>, bool) -> Result<T> + Send + Sync + 'static,
    ) -> Acquiring<T> {
        let mut options = self.options();
        if let Some(t) = timeout {
            options = options.timeout(t);
        }
        let (_, prepare) = semaphore(self.lock_delay, &self.data);
        let after = self.lock_delay.map(lock_delay::after_grant);
        let clean = after.is_some();
        let name = self.name.clone();
        acquiring_then(
            &self.source,
            &self.name,
            options,
            prepare,
            after,
            move |r| finish(r.map_err(|e| other_mode(e, &name, clean)), clean),
        )
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
    /// [`ErrorKind::SessionClosed`](crate::ErrorKind::SessionClosed) after a shutdown).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future withdraws the request; the lock is not taken. With a
    /// [lock delay](Mutex::lock_delay), dropping it after the grant (during the delay)
    /// releases the lock, not cleanly: the next holder waits the delay too.
    pub fn lock(&self) -> Acquiring<MutexGuard> {
        self.start(None, |r, clean| {
            r.map(|lease| MutexGuard::new(lease, clean))
        })
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

    /// Waits for the lock at most `timeout` (for a session too, on a manager without one); `None` if it passed.
    ///
    /// # Errors
    ///
    /// As [`Mutex::lock`].
    ///
    /// # Cancel safety
    ///
    /// As [`Mutex::lock`].
    pub fn lock_timeout(&self, timeout: Duration) -> Acquiring<Option<MutexGuard>> {
        self.start(Some(timeout), |r, clean| {
            optional(r).map(|lease| lease.map(|lease| MutexGuard::new(lease, clean)))
        })
    }

    /// Waits for the lock and holds it for at most `bound` from the grant: a wedged holder
    /// cannot keep it from the fleet forever.
    ///
    /// At the [deadline](Bounded::deadline), first the guard's token fires (stop
    /// the protected work under it), then the release is sent to the server, so another
    /// session may take the lock right after; the fencing token still guards against a
    /// holder that ignores its token. This happens even if the holder is alive and the
    /// session healthy. A [`release`](Bounded::release) or a drop before the
    /// deadline releases as usual. Each granted guard has a small task (started at the
    /// grant) that holds the lease and waits for the deadline; it ends with the lock.
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
    /// As [`Mutex::lock`]: the deadline's task is started only when the lock is granted and
    /// returned.
    pub fn lock_for(&self, bound: Duration) -> Acquiring<Bounded<MutexGuard>> {
        // A hold ended at its deadline is no clean release: its holder may not have stopped.
        self.start(None, move |r, _| {
            r.map(|lease| {
                let granted_at = lease.granted_at();
                Bounded::from_grant(MutexGuard::new(lease, false), granted_at, bound)
            })
        })
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
        )
    }
}
