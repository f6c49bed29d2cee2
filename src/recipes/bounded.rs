//! Locks held for at most a set time: the lease lives in a small task that ends it at its
//! deadline.

use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::error::Result;
use crate::session::Lease;

/// The longest bound kept (about 30 years); longer ones are cut to it.
const LONGEST_BOUND: Duration = Duration::from_secs(30 * 365 * 24 * 3600);

/// A lease held for at most a set time, behind every bounded guard
/// ([`BoundedMutexGuard`](super::BoundedMutexGuard) from
/// [`Mutex::lock_for`](super::Mutex::lock_for),
/// [`BoundedSemaphorePermit`](super::BoundedSemaphorePermit) from
/// [`Semaphore::acquire_for`](super::Semaphore::acquire_for), and the
/// [`RwLock::read_for`](super::RwLock::read_for) / [`RwLock::write_for`](super::RwLock::write_for)
/// guards, which dereference to it): at its [`deadline`](BoundedLease::deadline) the token
/// fires and the lease is released, even if the holder is still at work and the session
/// healthy.
///
/// The deadline counts from the grant, not from when the guard was picked up: a guard
/// awaited long after its grant (say, after [`Acquiring::queued`](super::Acquiring::queued)
/// saw it) may come back already past its deadline, its token fired and the lease on its
/// way back to the server.
///
/// The lease itself lives in a small task started with the guard, which waits for the
/// deadline, a release or the guard's drop, so the guard does not dereference to the
/// [`Lease`]; this has the same accessors. Dropping the guard fires the token at once and
/// has the task release the lease (nothing is spawned by the drop).
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
/// let permit = session.semaphore("pool", 2).acquire_for(1, Duration::from_secs(60)).await?;
/// let bounded: &ydb_coordination::recipes::BoundedLease = &permit;
/// assert!(bounded.deadline() > tokio::time::Instant::now());
/// permit.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct BoundedLease {
    /// The lease's own token: it fires at the deadline, on release and on loss.
    lease_token: CancellationToken,
    /// Its child, handed to the holder, who may cancel it to stop its own work.
    token: CancellationToken,
    fencing_token: u64,
    session_id: u64,
    deadline: Instant,
    /// Asks the task to release now and answer; dropped with the guard (the task then
    /// drops the lease, which releases it).
    release: Option<oneshot::Sender<oneshot::Sender<Result<bool>>>>,
}

impl BoundedLease {
    /// Hands `lease` to a task that fires its token and releases it at its grant + `bound`:
    /// at once if that passed already (the token fires before this returns).
    pub(crate) fn start(lease: Lease, bound: Duration) -> Self {
        let deadline = lease.granted_at() + bound.min(LONGEST_BOUND);
        if deadline <= Instant::now() {
            // The holder must not see a live guard past its deadline, not even until the
            // task runs.
            lease.token().cancel();
        }
        let (release, asked) = oneshot::channel();
        let bounded = Self {
            // A child: a holder that cancels its own token to stop its work ends nothing
            // here; the task watches the lease's token.
            token: lease.token().child_token(),
            lease_token: lease.token(),
            fencing_token: lease.fencing_token(),
            session_id: lease.session_id(),
            deadline,
            release: Some(release),
        };
        tokio::spawn(Self::bound(lease, deadline, asked));
        bounded
    }

    /// The task behind the guard: the first of the deadline, a release, the guard's drop
    /// and the lease's loss ends the lease. (The biased order looks at the deadline first,
    /// so a release asked past it answers `false`; then at the request: a release asks
    /// before it fires the token, so it is answered.)
    async fn bound(
        lease: Lease,
        deadline: Instant,
        asked: oneshot::Receiver<oneshot::Sender<Result<bool>>>,
    ) {
        let lost = lease.token();
        tokio::select! {
            biased;
            () = tokio::time::sleep_until(deadline) => {
                // The holder learns first, then the server hears.
                lease.token().cancel();
                let name = lease.name().to_string();
                match lease.release().await {
                    Ok(_) => tracing::info!(lock = name, "bounded lock released at its deadline"),
                    Err(e) => tracing::debug!(lock = name, error = %e, "bounded lock ended with its session"),
                }
            }
            asked = asked => match asked {
                Ok(reply) => {
                    let _ = reply.send(lease.release().await);
                }
                // The guard was dropped: dropping the lease releases it.
                Err(_) => drop(lease),
            },
            // The lease was lost (its session ended): nothing is left to wait for, and the
            // task must not keep the lease (and its session's channels) until the deadline.
            () = lost.cancelled() => drop(lease),
        }
    }

    /// A clone of the cancellation token: it fires at the deadline, on release or drop, and
    /// when the lease may have been lost (as [`Lease::token`]). Cancelling it yourself only
    /// stops what runs under it: the lock stays held until the deadline or a release.
    pub fn token(&self) -> CancellationToken {
        self.token.clone()
    }

    /// Waits until the lease ends: the deadline passed, it was released, or it may have
    /// been lost. Cancelling the token from [`token`](Self::token) does not end the wait.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn cancelled(&self) {
        self.lease_token.cancelled().await;
    }

    /// Whether the lease ended: the deadline passed, or the lease may have been lost (not:
    /// the holder cancelled the token from [`token`](Self::token)).
    pub fn is_lost(&self) -> bool {
        self.lease_token.is_cancelled()
    }

    /// The fencing token (see [`Lease::fencing_token`]).
    pub fn fencing_token(&self) -> u64 {
        self.fencing_token
    }

    /// The session holding the lease.
    pub fn session_id(&self) -> u64 {
        self.session_id
    }

    /// When the token fires and the lease is released, unless released before.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Releases and waits for the server's answer (`false`: it was already lost, or
    /// released at the deadline).
    pub(crate) async fn release(mut self) -> Result<bool> {
        let (reply, answer) = oneshot::channel();
        // Ask first, then fire the token: a task that runs in between sees the request, not
        // a token that looks lost.
        let asked = self.release.take().map(|release| release.send(reply));
        self.token.cancel();
        if !matches!(asked, Some(Ok(()))) {
            // The task is gone: the deadline passed (or the lease was lost) first.
            return Ok(false);
        }
        // No answer: the deadline came first and the task released the lease itself.
        answer.await.unwrap_or(Ok(false))
    }
}

impl Drop for BoundedLease {
    fn drop(&mut self) {
        // The task sees the sender dropped and drops the lease, which releases it.
        self.token.cancel();
    }
}

/// Defines a bounded guard type `$guard` (dereferencing to [`BoundedLease`]) with the
/// release verb `$verb`.
macro_rules! bounded_guard {
    ($(#[$doc:meta])* $guard:ident, $verb:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Debug)]
        #[must_use = concat!("dropping the guard releases the ", $what)]
        pub struct $guard {
            bounded: crate::recipes::BoundedLease,
        }

        impl $guard {
            pub(crate) fn start(lease: crate::session::Lease, bound: std::time::Duration) -> Self {
                Self {
                    bounded: crate::recipes::BoundedLease::start(lease, bound),
                }
            }

            #[doc = concat!("Releases the ", $what, " and waits for the server's answer (`false`: it was already lost, or released at the deadline).")]
            ///
            /// # Errors
            ///
            /// The session ended first (the server then releases everything itself).
            ///
            /// # Cancel safety
            ///
            /// The token fires and the release is requested at once; dropping the future
            /// only skips the wait.
            pub async fn $verb(self) -> crate::error::Result<bool> {
                self.bounded.release().await
            }
        }

        impl std::ops::Deref for $guard {
            type Target = crate::recipes::BoundedLease;

            fn deref(&self) -> &crate::recipes::BoundedLease {
                &self.bounded
            }
        }
    };
}
pub(crate) use bounded_guard;
