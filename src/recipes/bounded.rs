//! Holds for at most a set time: the guard lives in a wait that ends it at its deadline,
//! in the keeper of the source it was taken from (or a small task of its own).

use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Guard;
use crate::error::Result;
use crate::keeper::{Keeper, Kept};
use crate::session::FencingToken;

/// The longest bound kept (about 30 years); longer ones are cut to it.
const LONGEST_BOUND: Duration = Duration::from_secs(30 * 365 * 24 * 3600);

/// A [`Guard`] held for at most a set time, from the `_for` forms of the recipes
/// ([`Mutex::lock_for`](super::Mutex::lock_for),
/// [`Semaphore::acquire_for`](super::Semaphore::acquire_for),
/// [`RwLock::read_for`](super::RwLock::read_for), [`RwLock::write_for`](super::RwLock::write_for)):
/// at its [`deadline`](Bounded::deadline) the token fires and the hold is released, even if
/// the holder is still at work and the session healthy.
///
/// The deadline of a recipe's `_for` form counts from the grant, not from when the guard was
/// picked up: a guard awaited long after its grant (say, after
/// [`Acquiring::queued`](super::Acquiring::queued) saw it) may come back already past its
/// deadline, its token fired and the hold on its way back to the server.
///
/// The guard itself lives in a wait started with the bound, for the deadline, a release or
/// the drop of this handle; the handle keeps what the guard says of itself (its fencing
/// token, its token, its deadline). The `_for` forms run that wait in one task of the
/// session, manager or lock space they took the hold from, beside every other bounded hold
/// taken there; [`Bounded::new`] starts a small task of its own. Dropping the handle fires
/// the token at once and has the wait release the hold (nothing is spawned by the drop).
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
/// assert!(permit.deadline() > tokio::time::Instant::now());
/// permit.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
#[must_use = "dropping the guard releases what it holds"]
pub struct Bounded<G> {
    /// The guard's own token: fired when the hold ends.
    held_token: CancellationToken,
    /// What the holder is given: a child, so a holder that cancels it to stop its own work
    /// ends nothing here.
    token: CancellationToken,
    fencing_token: FencingToken,
    deadline: Instant,
    release: Option<oneshot::Sender<oneshot::Sender<Result<bool>>>>,
    _guard: std::marker::PhantomData<fn() -> G>,
}

impl<G: Guard> Bounded<G> {
    /// Holds `guard` until `deadline` at most (cut to about 30 years from now).
    ///
    /// # Examples
    ///
    /// ```
    /// # use ydb_coordination::emulator::Emulator;
    /// # use ydb_coordination::{Client, SessionOptions};
    /// use ydb_coordination::recipes::Bounded;
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let emulator = Emulator::builder().node("/local/app").start().await?;
    /// # let client = Client::connect(&emulator.connection_string()).await?;
    /// let session = client.session("/local/app", SessionOptions::new()).await?;
    /// let guard = session.mutex("report").lock().await?;
    /// let deadline = tokio::time::Instant::now() + Duration::from_millis(50);
    /// let bounded = Bounded::new(guard, deadline);
    /// bounded.token().cancelled().await; // fired at the deadline
    /// assert!(bounded.is_lost());
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime (its task is spawned on it).
    pub fn new(guard: G, deadline: Instant) -> Self {
        let (bounded, wait) = Self::start(guard, deadline);
        tokio::spawn(wait);
        bounded
    }

    /// A recipe's `_for` form: bounded by `bound` from `granted_at`, its wait run by
    /// `waits` (its source's keeper).
    pub(crate) fn from_grant(
        guard: G,
        granted_at: Instant,
        bound: Duration,
        waits: &Keeper<Kept>,
    ) -> Self {
        let deadline = granted_at + bound.min(LONGEST_BOUND);
        let (bounded, wait) = Self::start(guard, deadline);
        waits.keep(Box::pin(wait));
        bounded
    }

    /// Holds `guard` until `deadline` at most: the handle, and the wait to run.
    fn start(
        guard: G,
        deadline: Instant,
    ) -> (Self, impl std::future::Future<Output = ()> + Send + 'static) {
        let deadline = deadline.min(Instant::now() + LONGEST_BOUND);
        let held_token = guard.token();
        if deadline <= Instant::now() {
            // The holder must not see a live guard past its deadline, not even until the
            // wait runs.
            held_token.cancel();
        }
        let (release, asked) = oneshot::channel();
        let bounded = Self {
            token: held_token.child_token(),
            held_token: held_token.clone(),
            fencing_token: guard.fencing_token(),
            deadline,
            release: Some(release),
            _guard: std::marker::PhantomData,
        };
        (bounded, Self::bound(guard, deadline, asked, held_token))
    }

    /// The wait of the hold: at `deadline` it fires `lost` (the holder's view of the hold,
    /// a child of the guard's token) and releases the guard. The releases are boxed: the
    /// future waits most of its life, at its smallest.
    async fn bound(
        guard: G,
        deadline: Instant,
        asked: oneshot::Receiver<oneshot::Sender<Result<bool>>>,
        lost: CancellationToken,
    ) {
        tokio::select! {
            biased;
            () = tokio::time::sleep_until(deadline) => {
                // The holder learns first, then the server hears.
                lost.cancel();
                match Box::pin(guard.release()).await {
                    Ok(_) => tracing::info!("bounded hold released at its deadline"),
                    Err(e) => tracing::debug!(error = %e, "bounded hold ended with its session"),
                }
            }
            asked = asked => match asked {
                Ok(reply) => {
                    let _ = reply.send(Box::pin(guard.release()).await);
                }
                // The handle was dropped: dropping the guard releases it.
                Err(_) => drop(guard),
            },
            // The hold was lost (its session ended): nothing is left to wait for, and the
            // wait must not keep the guard (and its session's channels) until the deadline.
            () = lost.cancelled() => drop(guard),
        }
    }

    /// A token that fires when the hold is lost, at the deadline, and on release or drop.
    /// Cancelling it stops only the holder's own work.
    pub fn token(&self) -> CancellationToken {
        self.token.clone()
    }

    /// Waits until the hold is lost or ends.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn cancelled(&self) {
        self.held_token.cancelled().await;
    }

    /// Whether the hold is lost or ended.
    pub fn is_lost(&self) -> bool {
        self.held_token.is_cancelled()
    }

    /// The guard's fencing token.
    pub fn fencing_token(&self) -> FencingToken {
        self.fencing_token
    }

    /// When the hold ends by itself.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Releases the hold and waits for the server's answer (`false`: it was already lost,
    /// or released at the deadline).
    ///
    /// # Errors
    ///
    /// The session ended first (the server then releases everything itself).
    ///
    /// # Cancel safety
    ///
    /// The token fires and the release is requested at once; dropping the future only
    /// skips the wait.
    pub async fn release(mut self) -> Result<bool> {
        let (reply, answer) = oneshot::channel();
        // Ask first, then fire the token: a wait that runs in between sees the request, not
        // a token that looks lost.
        let asked = self.release.take().map(|release| release.send(reply));
        self.token.cancel();
        if !matches!(asked, Some(Ok(()))) {
            // The wait is over: the deadline passed (or the hold was lost) first.
            return Ok(false);
        }
        // No answer: the deadline came first and the wait released the hold itself.
        answer.await.unwrap_or(Ok(false))
    }
}

impl<G> Drop for Bounded<G> {
    fn drop(&mut self) {
        // The wait sees the sender dropped and drops the guard, which releases it.
        self.token.cancel();
    }
}

impl<G: Guard> Guard for Bounded<G> {
    fn fencing_token(&self) -> FencingToken {
        self.fencing_token
    }

    fn token(&self) -> CancellationToken {
        Bounded::token(self)
    }

    fn is_lost(&self) -> bool {
        Bounded::is_lost(self)
    }

    fn deadline(&self) -> Option<Instant> {
        Some(self.deadline)
    }

    fn release(self) -> impl std::future::Future<Output = Result<bool>> + Send {
        Bounded::release(self)
    }
}
