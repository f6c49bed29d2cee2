//! A counted semaphore.

use std::sync::Arc;

use super::{Held, Prepare, Scope, guard};
use crate::config::AcquireOptions;
use crate::error::{Error, ErrorKind, Result};
use crate::session::Lease;

/// A counted semaphore with a fixed number of tokens: at most `limit` tokens are held at
/// once across every session. The persistent semaphore is created on first use; an existing
/// one with another limit is an error rather than silently shared.
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
}

/// Tokens of a [`Semaphore`]; dropping them releases. Dereferences to the [`Lease`].
#[derive(Debug)]
#[must_use = "dropping the permit releases it"]
pub struct SemaphorePermit {
    lease: Lease,
}

guard!(SemaphorePermit, release, "permit");

impl Semaphore {
    pub(crate) fn new(scope: Scope, name: &str, limit: u64) -> Self {
        Self {
            scope,
            name: name.to_string(),
            limit,
        }
    }

    /// The number of tokens.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    fn options(&self, n: u64) -> Result<AcquireOptions> {
        if n == 0 || n > self.limit {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("cannot acquire {n} of {} tokens", self.limit),
            ));
        }
        Ok(AcquireOptions::new().count(n))
    }

    /// Waits for `n` tokens (FIFO: a large request is not overtaken by smaller ones).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`] for `n` of 0 or above the limit;
    /// [`ErrorKind::PreconditionFailed`] when the semaphore exists with another limit;
    /// session errors.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future withdraws the request.
    pub async fn acquire(&self, n: u64) -> Result<SemaphorePermit> {
        let options = self.options(n)?;
        let prepare = Prepare::Semaphore { limit: self.limit };
        let lease = self.scope.acquire(&self.name, &options, prepare).await?;
        Ok(SemaphorePermit { lease })
    }

    /// Takes `n` tokens only if they are free now and nobody is queued.
    ///
    /// # Errors
    ///
    /// As [`Semaphore::acquire`].
    ///
    /// # Cancel safety
    ///
    /// As [`Semaphore::acquire`].
    pub async fn try_acquire(&self, n: u64) -> Result<Option<SemaphorePermit>> {
        let options = self.options(n)?;
        let prepare = Prepare::Semaphore { limit: self.limit };
        let lease = self
            .scope
            .try_acquire(&self.name, &options, prepare)
            .await?;
        Ok(lease.map(|lease| SemaphorePermit { lease }))
    }

    /// Holds `n` tokens for as long as the stream is polled: a permit now, and a new one
    /// each time the last one is lost or dropped. See [`Held`].
    pub fn hold(&self, n: u64) -> Held<SemaphorePermit> {
        let semaphore = self.clone();
        Held::new(
            format!("semaphore {:?}", self.name),
            Arc::new(move || {
                let semaphore = semaphore.clone();
                Box::pin(async move { semaphore.acquire(n).await })
            }),
        )
    }
}
