//! An exclusive lock.

use std::sync::Arc;
use std::time::Duration;

use crate::session::optional;

use super::{Acquiring, Bounded, Held, Prepare, Source, acquiring, lease_guard};
use crate::config::AcquireOptions;
use crate::error::Result;
use crate::session::Lease;

/// An exclusive lock: an ephemeral semaphore acquired with all its units, so it exists
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

lease_guard!(MutexGuard, unlock, "lock");

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
        acquiring(&self.source, &self.name, options, Prepare::Nothing, finish)
    }

    /// Waits for the lock.
    ///
    /// Returns an [`Acquiring`] you can simply `.await`, or first ask whether the lock is
    /// taken ([`Acquiring::queued`]).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for a name over
    /// [`MAX_NAME_LEN`](crate::config::MAX_NAME_LEN) bytes (nothing is sent); session errors (on a [`Session`](crate::Session) scope: the session was lost while
    /// waiting; a [`SessionManager`](crate::SessionManager) scope retries in the next
    /// session instead, until the manager stops: then its error,
    /// [`ErrorKind::SessionClosed`](crate::ErrorKind::SessionClosed) after a shutdown).
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
        self.start(Some(timeout), |r| {
            optional(r).map(|lease| lease.map(|lease| MutexGuard { lease }))
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
        self.start(None, move |r| {
            r.map(|lease| {
                let granted_at = lease.granted_at();
                Bounded::from_grant(MutexGuard { lease }, granted_at, bound)
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
