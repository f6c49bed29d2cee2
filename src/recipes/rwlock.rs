//! A reader-writer lock.

use std::sync::Arc;
use std::time::Duration;

use super::{Acquiring, Bounded, Held, Holding, Scope, lease_guard, take_lock};
use crate::config::AcquireOptions;
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
    data: Vec<u8>,
}

/// Shared access to a [`RwLock`]; what it holds is its [`lease`](RwLockReadGuard::lease) on
/// one node or its [`space_lease`](RwLockReadGuard::space_lease) in a lock space.
#[derive(Debug)]
#[must_use = "dropping the guard unlocks"]
pub struct RwLockReadGuard {
    held: Holding,
}

/// Exclusive access to a [`RwLock`]; what it holds is its [`lease`](RwLockWriteGuard::lease)
/// on one node or its [`space_lease`](RwLockWriteGuard::space_lease) in a lock space.
#[derive(Debug)]
#[must_use = "dropping the guard unlocks"]
pub struct RwLockWriteGuard {
    held: Holding,
}

lease_guard!(RwLockReadGuard, "read lock", unlock);
lease_guard!(RwLockWriteGuard, "write lock", unlock);

impl RwLock {
    pub(crate) fn new(scope: impl Into<Scope>, name: &str) -> Self {
        Self {
            scope: scope.into(),
            name: name.to_string(),
            data: Vec::new(),
        }
    }

    /// Data stored with the holder (visible in describes), e.g. the host name.
    ///
    /// # Examples
    ///
    /// ```
    /// # use ydb_coordination::emulator::Emulator;
    /// # use ydb_coordination::{Client, SessionOptions};
    /// # use ydb_coordination::config::DescribeOptions;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let emulator = Emulator::builder().node("/local/app").start().await?;
    /// # let client = Client::connect(&emulator.connection_string()).await?;
    /// let session = client.session("/local/app", SessionOptions::new()).await?;
    /// let read = session.rwlock("config").data("host-a").read().await?;
    /// let d = session.describe_semaphore("config", DescribeOptions::new().owners(true)).await?;
    /// assert_eq!(d.owners[0].data, b"host-a");
    /// # drop(read);
    /// # Ok(())
    /// # }
    /// ```
    pub fn data(mut self, data: impl Into<Vec<u8>>) -> Self {
        self.data = data.into();
        self
    }

    /// An acquire (`write`: exclusive) waiting at most `timeout`, whose hold `finish` turns
    /// into the caller's guard.
    fn start<T: Send + 'static>(
        &self,
        write: bool,
        timeout: Option<Duration>,
        finish: impl Fn(Holding) -> T + Send + Sync + 'static,
    ) -> Acquiring<Option<T>> {
        let options = if write {
            AcquireOptions::exclusive()
        } else {
            AcquireOptions::shared()
        };
        let spec = crate::space::Spec::rwlock(options.ephemeral(true).data(self.data.clone()));
        take_lock(&self.scope, &self.name, spec, timeout, false, finish)
    }

    /// Waits for shared access.
    ///
    /// Returns an [`Acquiring`] you can simply `.await`, or first ask whether a writer is in
    /// the way ([`Acquiring::queued`]).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for a name over
    /// [`MAX_NAME_LEN`](crate::config::MAX_NAME_LEN) bytes (nothing is sent); session errors.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future withdraws the request.
    pub fn read(&self) -> Acquiring<RwLockReadGuard> {
        self.start(false, None, |held| RwLockReadGuard { held })
            .expect_some()
    }

    /// Waits for exclusive access.
    ///
    /// # Errors
    ///
    /// As [`RwLock::read`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future withdraws the request.
    pub fn write(&self) -> Acquiring<RwLockWriteGuard> {
        self.start(true, None, |held| RwLockWriteGuard { held })
            .expect_some()
    }

    /// Shared access only if available now.
    ///
    /// # Errors
    ///
    /// As [`RwLock::read`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future withdraws the request.
    pub fn try_read(&self) -> Acquiring<Option<RwLockReadGuard>> {
        self.read_timeout(Duration::ZERO)
    }

    /// Exclusive access only if available now.
    ///
    /// # Errors
    ///
    /// As [`RwLock::read`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future withdraws the request.
    pub fn try_write(&self) -> Acquiring<Option<RwLockWriteGuard>> {
        self.write_timeout(Duration::ZERO)
    }

    /// Waits for shared access at most `timeout` (for a session too, on a manager without one); `None` if it
    /// passed.
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
    /// let config = session.rwlock("config");
    /// let read = config.read_timeout(Duration::from_secs(5)).await?;
    /// assert!(read.is_some());
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`RwLock::read`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future withdraws the request.
    pub fn read_timeout(&self, timeout: Duration) -> Acquiring<Option<RwLockReadGuard>> {
        self.start(false, Some(timeout), |held| RwLockReadGuard { held })
    }

    /// Waits for exclusive access at most `timeout` (for a session too, on a manager without one); `None` if it
    /// passed.
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
    /// let config = session.rwlock("config");
    /// let read = config.read().await?;
    /// // Our own reader is in the way: no write access within the timeout.
    /// # let other = client.session("/local/app", SessionOptions::new()).await?;
    /// let write = other.rwlock("config").write_timeout(Duration::from_millis(100)).await?;
    /// assert!(write.is_none());
    /// # drop(read);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`RwLock::read`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future withdraws the request.
    pub fn write_timeout(&self, timeout: Duration) -> Acquiring<Option<RwLockWriteGuard>> {
        self.start(true, Some(timeout), |held| RwLockWriteGuard { held })
    }

    /// Waits for shared access and holds it for at most `bound` from the grant (as
    /// [`Mutex::lock_for`](super::Mutex::lock_for) does for a lock).
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
    /// let config = session.rwlock("config");
    /// let read = config.read_for(Duration::from_millis(100)).await?;
    /// read.cancelled().await; // the deadline: released
    /// let write = config.write().await?;
    /// # drop((read, write));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`RwLock::read`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future withdraws the request; the deadline's wait is started only when
    /// access is granted and returned.
    pub fn read_for(&self, bound: Duration) -> Acquiring<Bounded<RwLockReadGuard>> {
        let scope = self.scope.clone();
        self.start(false, None, move |held| {
            let granted_at = held.granted_at();
            Bounded::from_grant(RwLockReadGuard { held }, granted_at, bound, scope.waits())
        })
        .expect_some()
    }

    /// Waits for exclusive access and holds it for at most `bound` from the grant (as
    /// [`Mutex::lock_for`](super::Mutex::lock_for) does for a lock).
    ///
    /// # Errors
    ///
    /// As [`RwLock::read`].
    ///
    /// # Cancel safety
    ///
    /// As [`RwLock::read_for`].
    pub fn write_for(&self, bound: Duration) -> Acquiring<Bounded<RwLockWriteGuard>> {
        let scope = self.scope.clone();
        self.start(true, None, move |held| {
            let granted_at = held.granted_at();
            Bounded::from_grant(RwLockWriteGuard { held }, granted_at, bound, scope.waits())
        })
        .expect_some()
    }

    /// Holds shared access for as long as the stream is polled: a guard now, and a new one
    /// each time the last one is lost or dropped. See [`Held`].
    ///
    /// # Examples
    ///
    /// ```
    /// # use ydb_coordination::emulator::Emulator;
    /// # use ydb_coordination::{Client, SessionOptions};
    /// use futures::StreamExt;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let emulator = Emulator::builder().node("/local/app").start().await?;
    /// # let client = Client::connect(&emulator.connection_string()).await?;
    /// let manager = client.session_manager("/local/app", SessionOptions::new());
    /// let mut reading = manager.rwlock("config").hold_read();
    /// let guard = reading.next().await.expect("the stream goes on")?;
    /// assert!(!guard.is_lost());
    /// # Ok(())
    /// # }
    /// ```
    pub fn hold_read(&self) -> Held<RwLockReadGuard> {
        let lock = self.clone();
        Held::new(
            format!("rwlock {:?} (read)", self.name),
            Arc::new(move || Box::pin(lock.read())),
            |g| g.lease().map(Lease::session_id),
        )
    }

    /// Holds exclusive access for as long as the stream is polled: a guard now, and a new
    /// one each time the last one is lost or dropped. See [`Held`].
    ///
    /// # Examples
    ///
    /// ```
    /// # use ydb_coordination::emulator::Emulator;
    /// # use ydb_coordination::{Client, SessionOptions};
    /// use futures::StreamExt;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let emulator = Emulator::builder().node("/local/app").start().await?;
    /// # let client = Client::connect(&emulator.connection_string()).await?;
    /// let manager = client.session_manager("/local/app", SessionOptions::new());
    /// let mut writing = manager.rwlock("config").hold_write();
    /// let guard = writing.next().await.expect("the stream goes on")?;
    /// assert!(!guard.is_lost());
    /// # Ok(())
    /// # }
    /// ```
    pub fn hold_write(&self) -> Held<RwLockWriteGuard> {
        let lock = self.clone();
        Held::new(
            format!("rwlock {:?} (write)", self.name),
            Arc::new(move || Box::pin(lock.write())),
            |g| g.lease().map(Lease::session_id),
        )
    }
}
