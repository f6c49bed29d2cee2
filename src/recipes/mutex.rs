//! An exclusive lock.

use std::sync::Arc;
use std::time::Duration;

use super::{Held, Prepare, Scope, guard};
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

    /// Holds the lock for as long as the stream is polled: a guard now, and a new one
    /// (with a greater fencing token) each time the last one is lost or dropped. Built for
    /// singleton workers. See [`Held`].
    pub fn hold(&self) -> Held<MutexGuard> {
        let mutex = self.clone();
        Held::new(
            format!("mutex {:?}", self.name),
            Arc::new(move || {
                let mutex = mutex.clone();
                Box::pin(async move { mutex.lock().await })
            }),
        )
    }
}
