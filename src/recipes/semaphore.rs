//! A counted semaphore.

use std::sync::Arc;
use std::time::Duration;

use super::{Acquiring, Bounded, Held, Holding, Scope, lease_guard, take_lock};
use crate::config::AcquireOptions;
use crate::error::{Error, ErrorKind, Result};
use crate::session::Lease;

/// A counted semaphore with a fixed number of units: at most `limit` units are held at
/// once across every session. The persistent semaphore is created on first use; an existing
/// one with another limit is an error rather than silently shared.
///
/// # A semaphore deleted under its holders
///
/// Being persistent, the semaphore can be deleted with `delete_semaphore(name, force =
/// true)` while permits are held, and the server tells their holders nothing. So the
/// session of each permit keeps a data watch on it (one notification per permit per delete;
/// acquires and releases of other holders send none) and describes the owners once per
/// grant and after each reattach: the permit's token fires within one trip of the server's
/// notice to its session. Until then another session may already hold a permit of the
/// re-created semaphore; fencing tokens order the two.
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
/// let fragile_api = session.semaphore("fragile-api", 5);
/// let permit = fragile_api.acquire(1).await?;
/// // call the API
/// permit.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Semaphore {
    scope: Scope,
    name: String,
    limit: u64,
    data: Vec<u8>,
}

/// Units of a [`Semaphore`]; dropping them releases. What it holds is its
/// [`lease`](SemaphorePermit::lease) on one node or its
/// [`space_lease`](SemaphorePermit::space_lease) in a lock space.
#[derive(Debug)]
#[must_use = "dropping the permit releases it"]
pub struct SemaphorePermit {
    held: Holding,
}

lease_guard!(SemaphorePermit, "permit");

impl Semaphore {
    pub(crate) fn new(scope: impl Into<Scope>, name: &str, limit: u64) -> Self {
        Self {
            scope: scope.into(),
            name: name.to_string(),
            limit,
            data: Vec::new(),
        }
    }

    /// The number of units.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Data stored with each permit's holder (visible in describes), e.g. the host name.
    ///
    /// # Examples
    ///
    /// ```
    /// # use ydb_coordination::emulator::Emulator;
    /// # use ydb_coordination::{Client, config::DescribeOptions, SessionOptions};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let emulator = Emulator::builder().node("/local/app").start().await?;
    /// # let client = Client::connect(&emulator.connection_string()).await?;
    /// let session = client.session("/local/app", SessionOptions::new()).await?;
    /// let permit = session.semaphore("pool", 3).data("host-a").acquire(1).await?;
    /// let d = session.describe_semaphore("pool", DescribeOptions::new().owners(true)).await?;
    /// assert_eq!(d.owners[0].data, b"host-a");
    /// # drop(permit);
    /// # Ok(())
    /// # }
    /// ```
    pub fn data(mut self, data: impl Into<Vec<u8>>) -> Self {
        self.data = data.into();
        self
    }

    fn options(&self, n: u64) -> Result<AcquireOptions> {
        if n == 0 || n > self.limit {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("cannot acquire {n} of {} units", self.limit),
            ));
        }
        Ok(AcquireOptions::new().count(n).data(self.data.clone()))
    }

    /// An acquire of `n` units (waiting at most `timeout`) whose hold `finish` turns into
    /// the caller's guard.
    fn start<T: Send + 'static>(
        &self,
        n: u64,
        timeout: Option<Duration>,
        finish: impl Fn(Holding) -> T + Send + Sync + 'static,
    ) -> Acquiring<Option<T>> {
        match self.options(n) {
            Ok(options) => {
                let spec = crate::space::Spec::semaphore(options, self.limit);
                take_lock(&self.scope, &self.name, spec, timeout, false, finish)
            }
            Err(err) => Acquiring::failed(err),
        }
    }

    /// Waits for `n` units (FIFO: a large request is not overtaken by smaller ones).
    ///
    /// Returns an [`Acquiring`] you can simply `.await`, or first ask whether it has to wait
    /// ([`Acquiring::queued`]).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`] for `n` of 0 or above the limit, or a name over
    /// [`MAX_NAME_LEN`](crate::config::MAX_NAME_LEN) bytes (nothing is sent);
    /// [`ErrorKind::PreconditionFailed`] when the semaphore exists with another limit;
    /// session errors.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future withdraws the request.
    pub fn acquire(&self, n: u64) -> Acquiring<SemaphorePermit> {
        self.start(n, None, |held| SemaphorePermit { held })
            .expect_some()
    }

    /// Takes `n` units only if they are free now and nobody is queued.
    ///
    /// # Errors
    ///
    /// As [`Semaphore::acquire`].
    ///
    /// # Cancel safety
    ///
    /// As [`Semaphore::acquire`].
    pub fn try_acquire(&self, n: u64) -> Acquiring<Option<SemaphorePermit>> {
        self.acquire_timeout(n, Duration::ZERO)
    }

    /// Waits for `n` units at most `timeout` (for a session too, on a manager without one); `None` if it passed.
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
    /// let pool = session.semaphore("pool", 2);
    /// let permit = pool.acquire_timeout(2, Duration::from_secs(5)).await?;
    /// assert!(permit.is_some());
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Semaphore::acquire`].
    ///
    /// # Cancel safety
    ///
    /// As [`Semaphore::acquire`].
    pub fn acquire_timeout(&self, n: u64, timeout: Duration) -> Acquiring<Option<SemaphorePermit>> {
        self.start(n, Some(timeout), |held| SemaphorePermit { held })
    }

    /// Waits for `n` units and holds them for at most `bound` from the grant: at the
    /// [deadline](Bounded::deadline) the permit's token fires, then the units
    /// are released (as [`Mutex::lock_for`](super::Mutex::lock_for) does for a lock), so a
    /// wedged holder cannot keep them from the fleet forever.
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
    /// let pool = session.semaphore("pool", 1);
    /// let permit = pool.acquire_for(1, Duration::from_millis(100)).await?;
    /// permit.cancelled().await; // the deadline
    /// let next = pool.acquire(1).await?; // released: free for the next holder
    /// # drop((permit, next));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Semaphore::acquire`].
    ///
    /// # Cancel safety
    ///
    /// As [`Semaphore::acquire`]: the deadline's wait is started only when the units are
    /// granted and returned.
    pub fn acquire_for(&self, n: u64, bound: Duration) -> Acquiring<Bounded<SemaphorePermit>> {
        let scope = self.scope.clone();
        self.start(n, None, move |held| {
            let granted_at = held.granted_at();
            Bounded::from_grant(SemaphorePermit { held }, granted_at, bound, scope.waits())
        })
        .expect_some()
    }

    /// Holds `n` units for as long as the stream is polled: a permit now, and a new one
    /// each time the last one is lost or dropped. See [`Held`].
    pub fn hold(&self, n: u64) -> Held<SemaphorePermit> {
        let semaphore = self.clone();
        Held::new(
            format!("semaphore {:?}", self.name),
            Arc::new(move || Box::pin(semaphore.acquire(n))),
            |g| g.lease().map(Lease::session_id),
        )
    }
}
