//! An exclusive lock.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;
use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use super::{Prepare, Scope, guard};
use crate::config::AcquireOptions;
use crate::error::{ErrorKind, Result};
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
    scope: Scope,
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

impl Mutex {
    pub(crate) fn new(scope: Scope, name: &str) -> Self {
        Self {
            scope,
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

    /// Waits for the lock.
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
    pub async fn lock(&self) -> Result<MutexGuard> {
        let lease = self
            .scope
            .acquire(&self.name, &self.options(), Prepare::Nothing)
            .await?;
        Ok(MutexGuard { lease })
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
    pub async fn try_lock(&self) -> Result<Option<MutexGuard>> {
        let lease = self
            .scope
            .try_acquire(&self.name, &self.options(), Prepare::Nothing)
            .await?;
        Ok(lease.map(|lease| MutexGuard { lease }))
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
    pub async fn lock_timeout(&self, timeout: Duration) -> Result<Option<MutexGuard>> {
        let options = self.options().timeout(timeout);
        match self
            .scope
            .acquire(&self.name, &options, Prepare::Nothing)
            .await
        {
            Ok(lease) => Ok(Some(MutexGuard { lease })),
            Err(e) if e.kind() == ErrorKind::Timeout => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Holds the lock for as long as the stream is polled: yields a guard; once that guard is
    /// lost (its token fired) or dropped, the next poll re-acquires, in a new session if
    /// needed, and yields a new guard with a strictly greater fencing token. Built for
    /// singleton workers: `while let Some(guard) = held.next().await { work(guard).await }`.
    ///
    /// On a [`Session`](crate::Session) scope the stream ends with the session.
    pub fn hold(&self) -> HeldMutex {
        HeldMutex {
            mutex: self.clone(),
            previous: None,
            next: None,
            ended: false,
        }
    }
}

/// The stream of [`Mutex::hold`].
pub struct HeldMutex {
    mutex: Mutex,
    /// The last guard's token and session.
    previous: Option<(CancellationToken, u64)>,
    next: Option<BoxFuture<'static, Result<MutexGuard>>>,
    ended: bool,
}

impl std::fmt::Debug for HeldMutex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeldMutex")
            .field("mutex", &self.mutex.name)
            .finish_non_exhaustive()
    }
}

impl Stream for HeldMutex {
    type Item = Result<MutexGuard>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if this.ended {
            return Poll::Ready(None);
        }
        if this.next.is_none() {
            let previous = this.previous.take();
            let mutex = this.mutex.clone();
            this.next = Some(Box::pin(async move {
                let before = previous.as_ref().map(|(_, session)| *session);
                if let Some((token, _)) = previous {
                    // The old guard's token fires before anything new is issued.
                    token.cancelled().await;
                }
                let guard = mutex.lock().await?;
                match before {
                    // The previous guard's session is gone: the lock came back on a new one.
                    Some(old) if old != guard.session_id() => tracing::info!(
                        mutex = mutex.name.as_str(),
                        session_id = guard.session_id(),
                        fencing_token = guard.fencing_token(),
                        "held lock re-acquired"
                    ),
                    _ => tracing::debug!(
                        mutex = mutex.name.as_str(),
                        fencing_token = guard.fencing_token(),
                        "held lock acquired"
                    ),
                }
                Ok(guard)
            }));
        }
        let Some(next) = this.next.as_mut() else {
            return Poll::Pending;
        };
        let result = std::task::ready!(next.as_mut().poll(cx));
        this.next = None;
        match result {
            Ok(guard) => {
                this.previous = Some((guard.token(), guard.session_id()));
                Poll::Ready(Some(Ok(guard)))
            }
            Err(e) => {
                this.ended = true;
                Poll::Ready(Some(Err(e)))
            }
        }
    }
}
