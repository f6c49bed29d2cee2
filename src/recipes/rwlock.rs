//! A reader-writer lock.

use super::{Prepare, Scope, guard};
use crate::config::AcquireOptions;
use crate::error::Result;
use crate::session::Lease;

/// A reader-writer lock on one ephemeral semaphore: readers take one token, a writer takes
/// all of them. Requests are served in FIFO order, so a waiting writer is not starved by
/// readers arriving after it.
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
/// let session = client.session("/local/app", SessionOptions::new()).await?;
/// let config = session.rwlock("config");
/// let read = config.read().await?;
/// let read2 = other.rwlock("config").read().await?; // readers share
/// drop((read, read2));
/// let write = config.write().await?;
/// # drop(write);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct RwLock {
    scope: Scope,
    name: String,
}

/// Shared access to a [`RwLock`]. Dereferences to the [`Lease`].
#[derive(Debug)]
#[must_use = "dropping the guard unlocks"]
pub struct RwLockReadGuard {
    lease: Lease,
}

/// Exclusive access to a [`RwLock`]. Dereferences to the [`Lease`].
#[derive(Debug)]
#[must_use = "dropping the guard unlocks"]
pub struct RwLockWriteGuard {
    lease: Lease,
}

guard!(RwLockReadGuard, unlock, "read lock");
guard!(RwLockWriteGuard, unlock, "write lock");

impl RwLock {
    pub(crate) fn new(scope: Scope, name: &str) -> Self {
        Self {
            scope,
            name: name.to_string(),
        }
    }

    /// Waits for shared access.
    ///
    /// # Errors
    ///
    /// Session errors.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future withdraws the request.
    pub async fn read(&self) -> Result<RwLockReadGuard> {
        let options = AcquireOptions::shared().ephemeral(true);
        let lease = self
            .scope
            .acquire(&self.name, &options, Prepare::Nothing)
            .await?;
        Ok(RwLockReadGuard { lease })
    }

    /// Waits for exclusive access.
    ///
    /// # Errors
    ///
    /// Session errors.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future withdraws the request.
    pub async fn write(&self) -> Result<RwLockWriteGuard> {
        let options = AcquireOptions::exclusive().ephemeral(true);
        let lease = self
            .scope
            .acquire(&self.name, &options, Prepare::Nothing)
            .await?;
        Ok(RwLockWriteGuard { lease })
    }

    /// Shared access only if available now.
    ///
    /// # Errors
    ///
    /// Session errors.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future withdraws the request.
    pub async fn try_read(&self) -> Result<Option<RwLockReadGuard>> {
        let options = AcquireOptions::shared().ephemeral(true);
        let lease = self
            .scope
            .try_acquire(&self.name, &options, Prepare::Nothing)
            .await?;
        Ok(lease.map(|lease| RwLockReadGuard { lease }))
    }

    /// Exclusive access only if available now.
    ///
    /// # Errors
    ///
    /// Session errors.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future withdraws the request.
    pub async fn try_write(&self) -> Result<Option<RwLockWriteGuard>> {
        let options = AcquireOptions::exclusive().ephemeral(true);
        let lease = self
            .scope
            .try_acquire(&self.name, &options, Prepare::Nothing)
            .await?;
        Ok(lease.map(|lease| RwLockWriteGuard { lease }))
    }
}
