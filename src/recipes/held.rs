//! Locks held "forever": a stream of guards that re-acquires after each loss.

use std::ops::Deref;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::Stream;
use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use crate::error::Result;
use crate::session::Lease;

type Acquirer<G> = Arc<dyn Fn() -> BoxFuture<'static, Result<G>> + Send + Sync>;

/// A lock held for as long as the stream is polled, from [`Mutex::hold`](super::Mutex::hold),
/// [`Semaphore::hold`](super::Semaphore::hold) or [`Election::hold`](super::Election::hold).
///
/// The stream yields a guard; once that guard is lost (its token fired) or dropped, the next
/// poll acquires again, in a new session when the old one is gone (on a
/// [`SessionManager`](crate::SessionManager) scope), and yields a new guard with a strictly
/// greater fencing token. The old guard's token has always fired before a new guard is
/// yielded. On a [`Session`](crate::Session) scope the stream ends with the session's error.
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
pub struct Held<G> {
    acquire: Acquirer<G>,
    what: String,
    /// The last guard's token and session.
    previous: Option<(CancellationToken, u64)>,
    next: Option<BoxFuture<'static, Result<G>>>,
    ended: bool,
}

impl<G> std::fmt::Debug for Held<G> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Held")
            .field("lock", &self.what)
            .field("ended", &self.ended)
            .finish_non_exhaustive()
    }
}

impl<G> Held<G>
where
    G: Deref<Target = Lease> + Send + 'static,
{
    pub(crate) fn new(what: String, acquire: Acquirer<G>) -> Self {
        Self {
            acquire,
            what,
            previous: None,
            next: None,
            ended: false,
        }
    }
}

impl<G> Stream for Held<G>
where
    G: Deref<Target = Lease> + Send + 'static,
{
    type Item = Result<G>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if this.ended {
            return Poll::Ready(None);
        }
        if this.next.is_none() {
            let previous = this.previous.take();
            let acquire = this.acquire.clone();
            let what = this.what.clone();
            this.next = Some(Box::pin(async move {
                let before = previous.as_ref().map(|(_, session)| *session);
                if let Some((token, _)) = previous {
                    // The old guard's token fires before anything new is issued.
                    token.cancelled().await;
                }
                let guard = acquire().await?;
                match before {
                    // The previous guard's session is gone: the lock came back on a new one.
                    Some(old) if old != guard.session_id() => tracing::info!(
                        lock = what.as_str(),
                        session_id = guard.session_id(),
                        fencing_token = guard.fencing_token(),
                        "held lock re-acquired"
                    ),
                    _ => tracing::debug!(
                        lock = what.as_str(),
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
