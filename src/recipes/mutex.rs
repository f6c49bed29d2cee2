//! An exclusive lock.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::acquiring::optional;
use super::{Acquiring, Held, Prepare, Source, guard};
use crate::config::AcquireOptions;
use crate::error::Result;
use crate::session::Lease;

/// An exclusive lock: an ephemeral semaphore acquired with all its tokens, so it exists
/// only while someone holds or waits for it, and waiters are served in FIFO order.
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
}

/// A held [`Mutex`]; dropping it unlocks. Dereferences to the [`Lease`].
#[derive(Debug)]
#[must_use = "dropping the guard unlocks the mutex"]
pub struct MutexGuard {
    lease: Lease,
}

guard!(MutexGuard, unlock, "lock");

/// The longest bound [`Mutex::lock_for`] keeps (about 30 years); longer ones are cut to it.
const LONGEST_BOUND: Duration = Duration::from_secs(30 * 365 * 24 * 3600);

/// A [`Mutex`] held for at most a set time, from [`Mutex::lock_for`]: at its
/// [`deadline`](BoundedMutexGuard::deadline) the token fires and the lock is released, even
/// if the holder is still at work and the session healthy.
///
/// The lease itself lives in a small task started when the lock was granted, which waits
/// for the deadline, an [`unlock`](BoundedMutexGuard::unlock) or the guard's drop, so the
/// guard does not dereference to the [`Lease`]; it has the same accessors. Dropping the
/// guard fires the token at once and has the task release the lock (nothing is spawned by
/// the drop).
#[derive(Debug)]
#[must_use = "dropping the guard unlocks the mutex"]
pub struct BoundedMutexGuard {
    token: CancellationToken,
    fencing_token: u64,
    session_id: u64,
    deadline: Instant,
    /// Asks the task to release now and answer; dropped with the guard (the task then
    /// drops the lease, which releases it).
    unlock: Option<oneshot::Sender<oneshot::Sender<Result<bool>>>>,
}

impl BoundedMutexGuard {
    /// Hands `lease` to a task that fires its token and releases it at `now + bound`.
    fn start(lease: Lease, bound: Duration) -> Self {
        let deadline = Instant::now() + bound.min(LONGEST_BOUND);
        let (unlock, asked) = oneshot::channel();
        let guard = Self {
            token: lease.token(),
            fencing_token: lease.fencing_token(),
            session_id: lease.session_id(),
            deadline,
            unlock: Some(unlock),
        };
        tokio::spawn(Self::bound(lease, deadline, asked));
        guard
    }

    /// The task behind the guard: the first of the deadline, an unlock, the guard's drop and
    /// the lease's loss ends the lease. (An unlock asks before it fires the token, and the
    /// biased order looks at the request first, so the unlock is answered.)
    async fn bound(
        lease: Lease,
        deadline: Instant,
        asked: oneshot::Receiver<oneshot::Sender<Result<bool>>>,
    ) {
        let lost = lease.token();
        tokio::select! {
            biased;
            asked = asked => match asked {
                Ok(reply) => {
                    let _ = reply.send(lease.release().await);
                }
                // The guard was dropped: dropping the lease releases it.
                Err(_) => drop(lease),
            },
            () = tokio::time::sleep_until(deadline) => {
                // The holder learns first, then the server hears.
                lease.token().cancel();
                let name = lease.name().to_string();
                match lease.release().await {
                    Ok(_) => tracing::info!(lock = name, "bounded lock released at its deadline"),
                    Err(e) => tracing::debug!(lock = name, error = %e, "bounded lock ended with its session"),
                }
            }
            // The lease was lost (its session ended): nothing is left to wait for, and the
            // task must not keep the lease (and its session's channels) until the deadline.
            () = lost.cancelled() => drop(lease),
        }
    }

    /// A clone of the lock's cancellation token: it fires at the deadline, on unlock or
    /// drop, and when the lock may have been lost (as [`Lease::token`]).
    pub fn token(&self) -> CancellationToken {
        self.token.clone()
    }

    /// Waits until the token fires.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn cancelled(&self) {
        self.token.cancelled().await;
    }

    /// Whether the token fired: the deadline passed, or the lock may have been lost.
    pub fn is_lost(&self) -> bool {
        self.token.is_cancelled()
    }

    /// The fencing token (see [`Lease::fencing_token`]).
    pub fn fencing_token(&self) -> u64 {
        self.fencing_token
    }

    /// The session holding the lock.
    pub fn session_id(&self) -> u64 {
        self.session_id
    }

    /// When the token fires and the lock is released, unless unlocked before.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Releases the lock and waits for the server's answer (`false`: it was already lost,
    /// or released at the deadline).
    ///
    /// # Errors
    ///
    /// The session ended first (the server then releases everything itself).
    ///
    /// # Cancel safety
    ///
    /// The token fires and the release is requested at once; dropping the future only skips
    /// the wait.
    pub async fn unlock(mut self) -> Result<bool> {
        let (reply, answer) = oneshot::channel();
        // Ask first, then fire the token: a task that runs in between sees the request, not
        // a token that looks lost.
        let asked = self.unlock.take().map(|unlock| unlock.send(reply));
        self.token.cancel();
        if !matches!(asked, Some(Ok(()))) {
            // The task is gone: the deadline passed (or the lease was lost) first.
            return Ok(false);
        }
        // No answer: the deadline came first and the task released the lock itself.
        answer.await.unwrap_or(Ok(false))
    }
}

impl Drop for BoundedMutexGuard {
    fn drop(&mut self) {
        // The task sees the sender dropped and drops the lease, which releases it.
        self.token.cancel();
    }
}

impl Mutex {
    pub(crate) fn new(source: Source, name: &str) -> Self {
        Self {
            source,
            name: name.to_string(),
            data: Vec::new(),
        }
    }

    /// Data stored with the holder (visible in describes), e.g. the host name.
    pub fn data(mut self, data: impl Into<Vec<u8>>) -> Self {
        self.data = data.into();
        self
    }

    fn options(&self) -> AcquireOptions {
        AcquireOptions::exclusive()
            .ephemeral(true)
            .data(self.data.clone())
    }

    /// An acquire of the lock (waiting at most `timeout`) whose lease `finish` turns into
    /// the caller's guard.
    fn start<T: 'static>(
        &self,
        timeout: Option<Duration>,
        finish: impl Fn(Result<Lease>) -> Result<T> + Send + Sync + 'static,
    ) -> Acquiring<T> {
        let mut options = self.options();
        if let Some(t) = timeout {
            options = options.timeout(t);
        }
        Acquiring::new(&self.source, &self.name, options, Prepare::Nothing, finish)
    }

    /// Waits for the lock.
    ///
    /// Returns an [`Acquiring`] you can simply `.await`, or first ask whether the lock is
    /// taken ([`Acquiring::queued`]).
    ///
    /// # Errors
    ///
    /// Session errors (on a [`Session`](crate::Session) scope: the session was lost while
    /// waiting; a [`SessionManager`](crate::SessionManager) scope retries in the next
    /// session instead).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future withdraws the request; the lock is not taken.
    pub fn lock(&self) -> Acquiring<MutexGuard> {
        self.start(None, |r| r.map(|lease| MutexGuard { lease }))
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

    /// Waits for the lock at most `timeout` (in the server's queue); `None` if it passed.
    ///
    /// # Errors
    ///
    /// As [`Mutex::lock`].
    ///
    /// # Cancel safety
    ///
    /// As [`Mutex::lock`].
    pub fn lock_timeout(&self, timeout: Duration) -> Acquiring<Option<MutexGuard>> {
        self.start(Some(timeout), |r| {
            optional(r).map(|lease| lease.map(|lease| MutexGuard { lease }))
        })
    }

    /// Waits for the lock and holds it for at most `bound` from the grant: a wedged holder
    /// cannot keep it from the fleet forever.
    ///
    /// At the [deadline](BoundedMutexGuard::deadline), first the guard's token fires (stop
    /// the protected work under it), then the release is sent to the server, so another
    /// session may take the lock right after; the fencing token still guards against a
    /// holder that ignores its token. This happens even if the holder is alive and the
    /// session healthy. An [`unlock`](BoundedMutexGuard::unlock) or a drop before the
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
    pub fn lock_for(&self, bound: Duration) -> Acquiring<BoundedMutexGuard> {
        self.start(None, move |r| {
            r.map(|lease| BoundedMutexGuard::start(lease, bound))
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
