//! Locks held "forever": a stream of guards that re-acquires after each loss.

use std::pin::Pin;
use std::task::{Context, Poll};

use futures::Stream;

use super::Guard;
use crate::error::Result;
use crate::manager::{Make, Renewal};

/// A lock held for as long as the stream is polled, from [`Mutex::hold`](super::Mutex::hold),
/// [`Semaphore::hold`](super::Semaphore::hold), [`RwLock::hold_read`](super::RwLock::hold_read),
/// [`RwLock::hold_write`](super::RwLock::hold_write) or [`Election::hold`](super::Election::hold).
///
/// The stream yields a guard; once that guard is lost (its token fired) or dropped, the next
/// poll acquires again, in a new session when the old one is gone (on a
/// [`SessionManager`](crate::SessionManager) scope), and yields a new guard with a strictly
/// greater fencing token. The old guard's token has always fired before a new guard is
/// yielded. On a [`Session`](crate::Session) scope the stream ends with the session's error;
/// on a manager scope, once the manager stops, with the manager's
/// ([`ErrorKind::SessionClosed`](crate::ErrorKind::SessionClosed) after a shutdown); in a
/// [`LockSpace`](crate::LockSpace), with the error an acquire there ends with (a node's
/// manager stopped, [`LockSpace::shutdown`](crate::LockSpace::shutdown), the directory's
/// errors in a transition): that error is the last item, then the stream ends.
///
/// # Examples
///
/// ```
/// # use ydb_coordination::emulator::Emulator;
/// use futures::StreamExt;
/// use ydb_coordination::{Client, SessionOptions};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let emulator = Emulator::builder().node("/local/app").start().await?;
/// # let client = Client::connect(&emulator.connection_string()).await?;
/// let manager = client.session_manager("/local/app", SessionOptions::new());
/// let mut held = manager.mutex("singleton-worker").hold();
/// while let Some(guard) = held.next().await {
///     let guard = guard?;
///     let work = async { /* runs only while the lock is ours */ };
///     guard.token().run_until_cancelled(work).await;
///     break; // a real worker would loop
/// }
/// # Ok(())
/// # }
/// ```
#[must_use = "a stream does nothing unless polled"]
pub struct Held<G> {
    renewal: Renewal<G>,
    what: String,
    /// The session of the last guard (`None` in a lock space), once there was one.
    last: Option<Option<u64>>,
    /// The session a guard is held in (on one node), for the log.
    session_of: fn(&G) -> Option<u64>,
}

impl<G> std::fmt::Debug for Held<G> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Held")
            .field("lock", &self.what)
            .field("ended", &self.renewal.is_ended())
            .finish_non_exhaustive()
    }
}

impl<G> Held<G>
where
    G: Guard,
{
    /// The stream of `what` (for the log), each guard made by `acquire`; `session_of` a
    /// guard tells the log its session, where it has one.
    pub(crate) fn new(what: String, acquire: Make<G>, session_of: fn(&G) -> Option<u64>) -> Self {
        Self {
            renewal: Renewal::new(acquire),
            what,
            last: None,
            session_of,
        }
    }
}

impl<G> Stream for Held<G>
where
    G: Guard,
{
    type Item = Result<G>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        let item = std::task::ready!(this.renewal.poll_next(cx, |guard| guard.token()));
        if let Some(Ok(guard)) = &item {
            let what = this.what.as_str();
            let fencing_token = guard.fencing_token();
            let session_id = (this.session_of)(guard);
            match this.last.replace(session_id) {
                // The lock came back after a loss: on one node, on a new session.
                Some(old) if old != session_id || session_id.is_none() => tracing::info!(
                    lock = what,
                    session_id,
                    %fencing_token,
                    "held lock re-acquired"
                ),
                _ => tracing::debug!(lock = what, %fencing_token, "held lock acquired"),
            }
        }
        Poll::Ready(item)
    }
}
