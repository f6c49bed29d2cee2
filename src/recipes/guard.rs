//! What every held lock is, on one node and in a lock space: the [`Guard`] trait.

use std::future::Future;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::error::Result;
use crate::session::{FencingToken, Lease};

/// A held lock, permit or leadership, wherever it is held: a [`Lease`], every recipe's guard
/// on one coordination node, a [`Bounded`](super::Bounded) guard, and a lock held in a
/// [`LockSpace`](crate::space::LockSpace). Write code generic over it to run the same on one
/// node and on a lock space.
///
/// A group's [`Membership`](super::Membership) is not a guard: on a
/// [`SessionManager`](crate::SessionManager) or a lock space it joins again by itself after
/// a loss, so it has no one fencing token and no one loss to report;
/// [`Membership::state`](super::Membership::state) and
/// [`Membership::ended`](super::Membership::ended) say where it is.
///
/// Dropping a guard releases what it holds without blocking; [`Guard::release`] releases
/// it and waits for the server's answer.
///
/// # Examples
///
/// ```
/// # use ydb_coordination::emulator::Emulator;
/// # use ydb_coordination::space::{Layout, LockSpace};
/// # use ydb_coordination::{Client, SessionOptions};
/// use ydb_coordination::{FencingToken, Guard};
///
/// /// Does the work under any lock, and stops when the lock is lost.
/// async fn charge<G: Guard>(guard: G) -> ydb_coordination::Result<Option<FencingToken>> {
///     let token = guard.fencing_token();
///     let work = async { /* write to the store, sending `token` along */ };
///     let done = guard.token().run_until_cancelled(work).await;
///     guard.release().await?;
///     Ok(done.map(|()| token))
/// }
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let emulator = Emulator::builder().node("/local/app").node("/local/n1").start().await?;
/// # let client = Client::connect(&emulator.connection_string()).await?;
/// let session = client.session("/local/app", SessionOptions::new()).await?;
/// charge(session.mutex("card-42").lock().await?).await?;
///
/// let space = LockSpace::builder()
///     .node("n1", &client, "/local/n1")
///     .layout(Layout::new(1, ["n1"])?)
///     .open()
///     .await?;
/// charge(space.mutex("card-42").lock().await?).await?;
/// # Ok(())
/// # }
/// ```
pub trait Guard: Send + 'static {
    /// The fencing token of the hold: send it with every write to the protected resource.
    fn fencing_token(&self) -> FencingToken;

    /// A cancellation token that fires when the hold is lost or ends (released, dropped,
    /// past its deadline). It is the holder's own, on every guard alike: cancelling it stops
    /// the holder's work (the common tokio idiom: cancel to stop the workers, then release)
    /// and never changes the lock, which only [`Guard::release`] or a drop lets go.
    fn token(&self) -> CancellationToken;

    /// Whether the hold is lost (or ended).
    fn is_lost(&self) -> bool;

    /// When the hold ends by itself (a bounded hold), if it does.
    fn deadline(&self) -> Option<Instant> {
        None
    }

    /// Releases the hold and waits for the server's answer (`false`: it was already lost).
    ///
    /// # Errors
    ///
    /// The session ended first (the server then releases what it held).
    ///
    /// # Cancel safety
    ///
    /// The release is requested at once; dropping the future only skips the wait. Of a
    /// mutex with a [lock delay](crate::Mutex::lock_delay), the record of a clean release is
    /// written first: dropping the future before that releases at once, not cleanly, as a
    /// drop does.
    fn release(self) -> impl Future<Output = Result<bool>> + Send
    where
        Self: Sized;
}

impl Guard for Lease {
    fn fencing_token(&self) -> FencingToken {
        Lease::fencing_token(self)
    }

    fn token(&self) -> CancellationToken {
        Lease::token(self)
    }

    fn is_lost(&self) -> bool {
        Lease::is_lost(self)
    }

    fn release(self) -> impl Future<Output = Result<bool>> + Send {
        Lease::release(self)
    }
}
