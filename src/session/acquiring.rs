//! The one future every acquire returns, whatever it takes: a semaphore in one session, a
//! recipe's lock through its session source, or a lock in a lock space.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::future::BoxFuture;

use super::{Acquire, Lease};
use crate::error::{ErrorKind, Result};

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
/// A `_timeout` form ends by its bound: when the server answers at the deadline, or, when
/// it does not, with [`ErrorKind::Unavailable`] at the bound (the stream is down) or at most
/// one round trip (the latest measured) and 200 ms past it (the stream is up: the server
/// counts the timeout from the request's arrival). A recipe whose source has no session
/// yet waits for one until the bound; a `try_` form (whose bound is now) waits 5 s for it.
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
}

/// An acquire composed of session acquires (a recipe's, a lock space's).
pub(crate) trait Compose<T>: Future<Output = Result<T>> + Send + Unpin + fmt::Debug {
    /// As [`Acquiring::queued`].
    fn queued(&mut self) -> BoxFuture<'_, bool>;
}

impl<T> Acquiring<T> {
    /// The acquire of one semaphore in one session.
    pub(crate) fn session(acquire: Acquire, finish: fn(Result<Lease>) -> Result<T>) -> Self {
        Self {
            inner: Inner::Session { acquire, finish },
        }
    }

    /// An acquire composed of others.
    pub(crate) fn composed(compose: impl Compose<T> + 'static) -> Self {
        Self {
            inner: Inner::Composed(Box::new(compose)),
        }
    }

    /// Waits until the server queues the request (`true`: someone else holds the units,
    /// or is ahead in the queue) or it completes without queuing (`false`: acquired, timed
    /// out, or failed; awaiting the future then returns at once).
    ///
    /// On a [`SessionManager`](crate::SessionManager), a session lost before the server
    /// answered is replaced first and the question asked again in the new session.
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
        match &mut self.inner {
            Inner::Session { acquire, .. } => acquire.queued().await,
            Inner::Composed(compose) => compose.queued().await,
        }
    }
}

impl<T> Future for Acquiring<T> {
    type Output = Result<T>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T>> {
        match &mut self.inner {
            Inner::Session { acquire, finish } => Pin::new(acquire).poll(cx).map(*finish),
            Inner::Composed(compose) => Pin::new(&mut **compose).poll(cx),
        }
    }
}

impl<T> fmt::Debug for Acquiring<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.inner {
            Inner::Session { acquire, .. } => fmt::Debug::fmt(acquire, f),
            Inner::Composed(compose) => fmt::Debug::fmt(compose, f),
        }
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
