//! The one future every acquire returns, whatever it takes: a semaphore in one session, a
//! recipe's lock through its session source, or a lock in a lock space.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use tokio::sync::watch;

use super::{Acquire, Lease, Session};
use crate::bound::{Bound, RoundTrip, RoundTrips, unavailable};
use crate::error::{Error, ErrorKind, Result};

/// An acquire in progress: [`Session::acquire`](super::Session::acquire), every recipe's
/// lock ([`Mutex::lock`](crate::Mutex::lock), [`Semaphore::acquire`](crate::Semaphore::acquire),
/// [`Election::campaign`](crate::Election::campaign) ...) and every lock of a
/// [`LockSpace`](crate::LockSpace), with their `try_`, `_timeout` and `_for` forms.
///
/// A future of `Result<T>`: the lease or guard, or `Option` of it for the `try_` and
/// `_timeout` forms (`None`: the server answered that it was not granted in time, and only
/// that; a node that cannot be reached is an error, [`ErrorKind::Unavailable`], never
/// `None`). Await it, or first ask [`Acquiring::queued`] whether it waits behind another
/// holder.
///
/// # Bounds
///
/// A `try_` or `_timeout` form ends by its bound (the timeout from its first poll; a
/// `try_` form's is its first poll) plus one round trip and 200 ms, whatever the node does
/// (answers, stalls with its stream up, is cut off, refuses connections) and whatever step
/// the acquire is in: waiting for a session, making the semaphore, the grant, a lock
/// delay's markers, a lock space's gate and directory. The round trip is the longest latest
/// one measured on the sessions the acquire used: the server times a waiter out at the
/// same deadline, counted from the request's arrival, and its answer then travels back. At
/// the bound the form answers `None` when the server said the lock was not granted in
/// time, and only then; otherwise it ends with [`ErrorKind::Unavailable`] (never
/// [`ErrorKind::SessionExpired`] for a session that is still alive), having withdrawn what
/// it asked for. A link whose round trip is long (over 100 ms or so) may not leave a `try_`
/// form enough time for steps it makes after its bound (a persistent semaphore's create,
/// a lock space's read of the directory in a reshard): give such calls a bound of a few
/// round trips.
///
/// On a [`SessionManager`](crate::SessionManager) a session lost while waiting is replaced
/// and the request made again in the new session (a `_timeout` form keeps its deadline).
/// A recipe that makes its semaphore on first use ([`Semaphore`](crate::Semaphore),
/// [`Election`](crate::Election), [`Group`](crate::Group)) makes it again when the acquire
/// finds it gone (force-deleted meanwhile), three times at most; after that the acquire
/// ends with [`ErrorKind::NotFound`].
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
/// # let other = client.session("/local/app", SessionOptions::new()).await?;
/// # let held = other.mutex("nightly-cleanup").lock().await?;
/// let session = client.session("/local/app", SessionOptions::new()).await?;
/// let mut lock = session.mutex("nightly-cleanup").lock();
/// if lock.queued().await {
///     println!("someone else holds it; waiting");
/// #   drop(held);
/// }
/// let guard = lock.await?;
/// # drop(guard);
/// # Ok(())
/// # }
/// ```
///
/// # Cancel safety
///
/// Dropping it withdraws the request: the server forgets the waiter, a grant that was
/// already on its way is released, and the parts of a lock-space lock already taken are
/// released.
#[must_use = "an acquire does nothing unless awaited"]
pub struct Acquiring<T> {
    inner: Inner<T>,
    /// The bound of a `try_` or `_timeout` form: past it (and a round trip and a moment),
    /// the acquire is given up with [`ErrorKind::Unavailable`].
    bound: Option<Bound>,
}

#[allow(
    clippy::large_enum_variant,
    reason = "the session variant is the common one: boxing it would allocate on every acquire"
)]
enum Inner<T> {
    /// One semaphore in one session, its answer made into `T` by `finish`.
    Session {
        acquire: Acquire,
        finish: fn(Result<Lease>) -> Result<T>,
    },
    /// Composed of acquires: a recipe's, a lock space's.
    Composed(Box<dyn Compose<T>>),
    /// Given up at its bound: what it was doing was dropped (which withdrew it).
    Ended,
}

/// An acquire composed of session acquires (a recipe's, a lock space's).
pub(crate) trait Compose<T>: Future<Output = Result<T>> + Send + Unpin + fmt::Debug {
    /// As [`Acquiring::queued`].
    fn queued(&mut self) -> BoxFuture<'_, bool>;

    /// Where the acquire notes the round trips of the sessions it uses (what its bound
    /// waits past its deadline for).
    fn round_trips(&self) -> RoundTrips;
}

/// Where an acquire's bound reads the round trip: its session, or what a composed acquire
/// noted.
enum Trips {
    Session(Session),
    Noted(RoundTrips),
    None,
}

impl RoundTrip for Trips {
    fn round_trip(&self) -> Duration {
        match self {
            Trips::Session(session) => session.round_trip(),
            Trips::Noted(noted) => noted.round_trip(),
            Trips::None => Duration::ZERO,
        }
    }
}

impl<T> Inner<T> {
    fn round_trip(&self) -> Duration {
        match self {
            Inner::Session { acquire, .. } => acquire.session().round_trip(),
            Inner::Composed(compose) => compose.round_trips().round_trip(),
            Inner::Ended => Duration::ZERO,
        }
    }

    fn trips(&self) -> Trips {
        match self {
            Inner::Session { acquire, .. } => Trips::Session(acquire.session().clone()),
            Inner::Composed(compose) => Trips::Noted(compose.round_trips()),
            Inner::Ended => Trips::None,
        }
    }
}

impl<T> Acquiring<T> {
    /// The acquire of one semaphore in one session (bounded by its options' timeout).
    pub(crate) fn session(acquire: Acquire, finish: fn(Result<Lease>) -> Result<T>) -> Self {
        let bound = acquire.timeout().map(Bound::new);
        Self {
            inner: Inner::Session { acquire, finish },
            bound,
        }
    }

    /// An acquire composed of others.
    pub(crate) fn composed(compose: impl Compose<T> + 'static) -> Self {
        Self {
            inner: Inner::Composed(Box::new(compose)),
            bound: None,
        }
    }

    /// The same acquire, given up `timeout` after its first poll (and a round trip and a
    /// moment, see [`crate::bound`]) with [`ErrorKind::Unavailable`].
    pub(crate) fn within(mut self, timeout: Duration) -> Self {
        self.bound = Some(Bound::new(timeout));
        self
    }

    /// Waits until the server queues the request (`true`: someone else holds the units,
    /// or is ahead in the queue) or it completes without queuing (`false`: acquired, timed
    /// out, or failed; awaiting the future then returns at once).
    ///
    /// On a [`SessionManager`](crate::SessionManager), a session lost before the server
    /// answered is replaced first and the question asked again in the new session. A
    /// bounded form's wait ends at its bound too (`false`).
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
    /// let a = client.session("/local/app", SessionOptions::new()).await?;
    /// let b = client.session("/local/app", SessionOptions::new()).await?;
    /// let permit = a.semaphore("pool", 1).acquire(1).await?;
    /// let mut waiting = b.semaphore("pool", 1).acquire(1);
    /// assert!(waiting.queued().await);
    /// permit.release().await?;
    /// let permit = waiting.await?;
    /// # drop(permit);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the acquire stays in progress; await it afterwards.
    pub async fn queued(&mut self) -> bool {
        let trips = self.inner.trips();
        let Self { inner, bound } = self;
        let queued = match inner {
            Inner::Session { acquire, .. } => acquire.queued().boxed(),
            Inner::Composed(compose) => compose.queued(),
            Inner::Ended => return false,
        };
        let Some(bound) = bound else {
            return queued.await;
        };
        let mut queued = queued;
        let answer = std::future::poll_fn(|cx| {
            if let Poll::Ready(q) = queued.as_mut().poll(cx) {
                return Poll::Ready(Some(q));
            }
            if bound.poll_expired(cx, trips.round_trip()) {
                return Poll::Ready(None);
            }
            Poll::Pending
        })
        .await;
        drop(queued);
        answer.unwrap_or_else(|| {
            // Given up: awaiting the future now ends with the bound's error.
            *inner = Inner::Ended;
            false
        })
    }
}

impl<T> Future for Acquiring<T> {
    type Output = Result<T>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T>> {
        let this = &mut *self;
        let done = match &mut this.inner {
            Inner::Session { acquire, finish } => Pin::new(acquire).poll(cx).map(*finish),
            Inner::Composed(compose) => Pin::new(&mut **compose).poll(cx),
            Inner::Ended => Poll::Pending,
        };
        if done.is_ready() {
            return done;
        }
        if let Some(bound) = &mut this.bound
            && bound.poll_expired(cx, this.inner.round_trip())
        {
            // Dropping what the acquire was doing withdraws it.
            this.inner = Inner::Ended;
            return Poll::Ready(Err(unavailable("the acquire")));
        }
        if matches!(this.inner, Inner::Ended) {
            return Poll::Ready(Err(unavailable("the acquire")));
        }
        Poll::Pending
    }
}

impl<T> fmt::Debug for Acquiring<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.inner {
            Inner::Session { acquire, .. } => fmt::Debug::fmt(acquire, f),
            Inner::Composed(compose) => fmt::Debug::fmt(compose, f),
            Inner::Ended => f.write_str("Acquiring(given up at its bound)"),
        }
    }
}

/// An acquire made of steps, written as one future (a lock space's, a multi-lock's), inside
/// an [`Acquiring`]: the future, whether a part of it is queued behind another holder, and
/// the round trips of the sessions it used. Dropping it withdraws the request; parts already
/// taken are released by the future's own drop.
struct Steps<T> {
    future: BoxFuture<'static, Result<T>>,
    queued: watch::Receiver<bool>,
    done: Option<Result<T>>,
    trips: RoundTrips,
}

impl<T> fmt::Debug for Steps<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Acquiring")
            .field("queued", &*self.queued.borrow())
            .field("done", &self.done.is_some())
            .finish()
    }
}

impl<T: Send + 'static> Acquiring<T> {
    /// An acquire made of steps: `start` gets where to say that a part is queued and where
    /// to note the round trips of the sessions it uses, and returns the future.
    pub(crate) fn steps(
        start: impl FnOnce(watch::Sender<bool>, RoundTrips) -> BoxFuture<'static, Result<T>>,
    ) -> Self {
        let (tx, queued) = watch::channel(false);
        let trips = RoundTrips::default();
        Acquiring::composed(Steps {
            future: start(tx, trips.clone()),
            queued,
            done: None,
            trips,
        })
    }

    /// An acquire that fails with `err` when awaited, having sent nothing.
    pub(crate) fn failed(err: Error) -> Self {
        Self::steps(|_, _| Box::pin(std::future::ready(Err(err))))
    }
}

impl<T> Steps<T> {
    /// Waits until a part of the acquire is queued behind another holder (`true`) or it
    /// completed without queuing (`false`: awaiting it then returns at once).
    async fn wait_queued(&mut self) -> bool {
        if self.done.is_some() {
            return false;
        }
        let mut queued = self.queued.clone();
        let done = tokio::select! {
            biased;
            done = &mut self.future => done,
            q = queued.wait_for(|q| *q) => return q.is_ok(),
        };
        self.done = Some(done);
        *self.queued.borrow()
    }
}

// Nothing of `T` is ever pinned: the outcome is only stored and moved out.
impl<T> Unpin for Steps<T> {}

impl<T: Send + 'static> Compose<T> for Steps<T> {
    fn queued(&mut self) -> BoxFuture<'_, bool> {
        Box::pin(self.wait_queued())
    }

    fn round_trips(&self) -> RoundTrips {
        self.trips.clone()
    }
}

impl<T> Future for Steps<T> {
    type Output = Result<T>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T>> {
        if let Some(done) = self.done.take() {
            return Poll::Ready(done);
        }
        self.future.as_mut().poll(cx)
    }
}

impl<T: Send + 'static> Acquiring<T> {
    /// The same acquire, its outcome made into `U` by `map` (which may refuse it).
    pub(crate) fn and_then<U: Send + 'static>(
        self,
        map: impl FnOnce(T) -> Result<U> + Send + 'static,
    ) -> Acquiring<U> {
        Acquiring::composed(Mapped {
            inner: self,
            map: Some(Box::new(map)),
        })
    }
}

impl<T: Send + 'static> Acquiring<Option<T>> {
    /// The acquire of a form without a timeout, which ends with a hold or an error: `None`
    /// cannot come, and would be an internal error.
    pub(crate) fn expect_some(self) -> Acquiring<T> {
        self.and_then(|held| {
            held.ok_or_else(|| {
                Error::new(
                    ErrorKind::Internal,
                    "an acquire without a timeout ended without the lock",
                )
            })
        })
    }
}

/// An acquire whose outcome is mapped (see [`Acquiring::and_then`]). It carries no bound of
/// its own: the acquire inside keeps its bound and ends itself by it.
struct Mapped<T, U> {
    inner: Acquiring<T>,
    map: Option<Box<dyn FnOnce(T) -> Result<U> + Send>>,
}

impl<T, U> fmt::Debug for Mapped<T, U> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.inner, f)
    }
}

impl<T, U> Unpin for Mapped<T, U> {}

impl<T: Send + 'static, U: Send + 'static> Compose<U> for Mapped<T, U> {
    fn queued(&mut self) -> BoxFuture<'_, bool> {
        Box::pin(self.inner.queued())
    }

    fn round_trips(&self) -> RoundTrips {
        // Read only by a bound, which a mapped acquire leaves to the one inside.
        RoundTrips::default()
    }
}

impl<T, U> Future for Mapped<T, U> {
    type Output = Result<U>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<U>> {
        let done = std::task::ready!(Pin::new(&mut self.inner).poll(cx));
        let map = self
            .map
            .take()
            .ok_or_else(|| Error::new(ErrorKind::Internal, "an acquire was polled after it ended"));
        Poll::Ready(done.and_then(|t| map.and_then(|map| map(t))))
    }
}

/// The answer of a `try_` or `_timeout` form: `None` only when the server answered that it
/// was not granted in time.
pub(crate) fn optional(result: Result<Lease>) -> Result<Option<Lease>> {
    match result {
        Ok(lease) => Ok(Some(lease)),
        Err(e) if e.kind() == ErrorKind::NotAcquired => Ok(None),
        Err(e) => Err(e),
    }
}
