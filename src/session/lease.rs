//! A held semaphore.

use std::fmt;

use std::sync::Arc;

use tokio::sync::oneshot;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::core::{CallerId, Command, Control, Held};
use super::driver::{Notice, ReplyTx, Request};
use super::fencing::FencingToken;
use super::inbox::Handle;
use crate::error::{Error, Result};

/// Units of a semaphore held by a session.
///
/// A lease is valid while its [`token`](Lease::token) is not cancelled. The token fires when
/// the lease is released or dropped, and when the session may have lost it: the server
/// expired or refused the session, or the client could not confirm contact within the session
/// timeout (minus the safety margin), which happens *before* the server could give the
/// semaphore to anyone else. Unlike a `tokio::sync::MutexGuard`, a distributed lease can be
/// lost while you hold it: do the protected work under the token.
///
/// Dropping the lease releases it (the request is queued on the session without blocking)
/// and cancels its token at once.
///
/// # Examples
///
/// ```
/// # use ydb_coordination::emulator::Emulator;
/// # use ydb_coordination::{AcquireOptions, Client, SessionOptions};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let emulator = Emulator::builder().node("/local/app").start().await?;
/// # let client = Client::connect(&emulator.connection_string()).await?;
/// let session = client.session("/local/app", SessionOptions::new()).await?;
/// let lease = session
///     .acquire("job", AcquireOptions::exclusive().ephemeral(true))
///     .await?;
/// let token = lease.token();
/// let work = async { /* charge the card */ };
/// match token.run_until_cancelled(work).await {
///     Some(()) => println!("done under fencing token {}", lease.fencing_token()),
///     None => println!("lease lost: stopped"),
/// }
/// lease.release().await?;
/// # Ok(())
/// # }
/// ```
#[must_use = "dropping the lease releases it at once"]
pub struct Lease {
    /// The record the session core shares: name, count, order id, since when, the token.
    held: Arc<Held>,
    /// The session: its inbox, id, token, terminal cause and caller ids.
    handle: Handle,
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("name", &self.held.name)
            .field("count", &self.held.count)
            .field("fencing_token", &self.held.order_id)
            .field("session_id", &self.session_id())
            .field("lost", &self.is_lost())
            .finish()
    }
}

impl Lease {
    pub(crate) fn new(held: Arc<Held>, handle: Handle) -> Self {
        Self { held, handle }
    }

    fn next_id(&self) -> u64 {
        self.handle.next_id()
    }

    /// Why the session can no longer answer.
    fn gone(&self) -> Error {
        self.handle.gone()
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.held.name
    }

    /// How many units are held.
    pub fn count(&self) -> u64 {
        self.held.count
    }

    /// The session holding the lease.
    pub fn session_id(&self) -> u64 {
        self.handle.session_id()
    }

    /// The fencing token: the server's `order_id` of this ownership. Successive owners of a
    /// semaphore get strictly increasing values; the value is stable for the whole tenure,
    /// across reattaches and server restarts. Send it with every write to the protected
    /// resource and have the resource reject anything older than the newest it has seen.
    pub fn fencing_token(&self) -> FencingToken {
        FencingToken::new(0, self.held.order_id)
    }

    /// When the session learnt of the grant, not when the holder picked the lease up.
    /// The latest round trip its session measured.
    pub(crate) fn round_trip(&self) -> std::time::Duration {
        self.handle.round_trip()
    }

    pub(crate) fn granted_at(&self) -> Instant {
        self.held.since
    }

    /// A cancellation token that fires when the lease ends or may have been lost, for
    /// `select!` or `run_until_cancelled`. It is the holder's own (a child of the lease's,
    /// which is made on the first call, so a lease whose token nobody asks for costs none):
    /// cancelling it stops only the holder's work and never changes the lease; let go with
    /// [`Lease::release`] or by dropping the lease.
    pub fn token(&self) -> CancellationToken {
        self.lease_token().child_token()
    }

    /// The lease's own token (fired by the session, never by a holder).
    pub(crate) fn lease_token(&self) -> CancellationToken {
        self.held.token(self.handle.token())
    }

    /// Waits until the lease ends or may have been lost.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future has no effect on the lease.
    pub async fn cancelled(&self) {
        self.lease_token().cancelled_owned().await;
    }

    /// One token for all of `leases`, leases of one session whose tokens nobody asked for
    /// yet: it is each lease's own token, so the session fires it when any of them ends or
    /// may have been lost, or when the session ends, with nothing else watching them. `None`
    /// if a lease's token was made already (the leases that took the shared one keep it).
    pub(crate) fn one_token(leases: &[Lease]) -> Option<CancellationToken> {
        let token = leases.first()?.handle.token().child_token();
        leases
            .iter()
            .all(|lease| lease.held.adopt(&token))
            .then_some(token)
    }

    /// Whether the lease may have been lost (its token fired while it is still held here).
    pub fn is_lost(&self) -> bool {
        self.held.is_lost(self.handle.token())
    }

    /// Has the session watch the semaphore, so that the token fires as soon as the server
    /// reports the semaphore deleted (a forced delete removes its owners without a word to
    /// them), or a description shows this ownership gone, e.g. after a reattach. For the
    /// recipes whose loss must be seen: the token then fires within one trip of the
    /// server's notification to this session; the session also describes the semaphore's
    /// owners once now and after every reattach or data update. Nothing to do for an
    /// ephemeral semaphore, which cannot be deleted while it has an owner.
    pub(crate) fn guard(&self) {
        let _ = self.handle.notice(Notice {
            control: Control::GuardLease {
                name: self.held.name.clone(),
                lease: self.held.lease(),
            },
            reply: ReplyTx::None,
        });
    }

    /// Replaces this owner's data (what describes and watchers see for this owner), keeping
    /// the lease and its fencing token.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for data over 1 MiB; [`ErrorKind::Aborted`](crate::ErrorKind::Aborted) or a
    /// session error if the lease is no longer held.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not withdraw a request already made.
    pub async fn set_data(&self, data: &[u8]) -> Result<()> {
        self.data_update(data).await
    }

    /// [`Lease::set_data`], requested now: the future only waits for the answer.
    pub(crate) fn data_update(
        &self,
        data: &[u8],
    ) -> impl std::future::Future<Output = Result<()>> + Send + 'static {
        let requested = crate::config::check_data(data).and_then(|()| {
            let (tx, rx) = oneshot::channel();
            let notice = Notice {
                control: Control::SetData {
                    name: self.held.name.clone(),
                    lease: self.held.lease(),
                    data: data.to_vec(),
                    caller: self.next_id(),
                },
                reply: ReplyTx::Done(tx),
            };
            self.handle.notice(notice).map_err(|_| self.gone())?;
            Ok(rx)
        });
        let gone = self.gone();
        async move { requested?.await.unwrap_or(Err(gone)) }
    }

    /// The semaphore's own data (not an owner's), described in the lease's session.
    pub(crate) async fn semaphore_data(&self) -> Result<Vec<u8>> {
        let name = self.held.name.to_string();
        let opts = crate::config::DescribeOptions::new();
        let d = self
            .call(ReplyTx::Describe, |caller| Command::Describe {
                caller,
                name,
                opts,
            })
            .await?;
        Ok(d.data)
    }

    /// Replaces the semaphore's own data (not this owner's: see [`Lease::set_data`]), in the
    /// lease's session.
    pub(crate) async fn set_semaphore_data(&self, data: &[u8]) -> Result<()> {
        crate::config::check_data(data)?;
        let (name, data) = (self.held.name.to_string(), data.to_vec());
        self.call(ReplyTx::Done, |caller| Command::Update {
            caller,
            name,
            data,
        })
        .await
    }

    /// Sends a command to the lease's session and waits for its answer.
    async fn call<T>(
        &self,
        wrap: fn(oneshot::Sender<Result<T>>) -> ReplyTx,
        make: impl FnOnce(CallerId) -> Command,
    ) -> Result<T> {
        let (tx, rx) = oneshot::channel();
        let request = Request {
            command: make(self.next_id()),
            reply: wrap(tx),
        };
        self.handle.command(request).map_err(|_| self.gone())?;
        rx.await.unwrap_or_else(|_| Err(self.gone()))
    }

    /// The error for a lease whose token fired while it was still held here: the session's
    /// own once it is lost, else [`ErrorKind::Aborted`](crate::ErrorKind::Aborted) (the
    /// semaphore was deleted under it).
    pub(crate) fn lost_error(&self) -> Error {
        if self.handle.token().is_cancelled() {
            return self.gone();
        }
        Error::new(
            crate::error::ErrorKind::Aborted,
            format!("the lease of semaphore {:?} was lost", self.held.name),
        )
    }

    /// Releases the lease and waits for the server's answer: `true` if the server released
    /// it, `false` if the session no longer held it (it was lost).
    ///
    /// # Errors
    ///
    /// The session ended before the server answered ([`ErrorKind::SessionExpired`](crate::ErrorKind::SessionExpired),
    /// [`ErrorKind::SessionClosed`](crate::ErrorKind::SessionClosed)): the server releases everything of an ended session
    /// itself.
    ///
    /// # Cancel safety
    ///
    /// The release is requested (and the token cancelled) as soon as this is called;
    /// dropping the future only skips waiting for the answer.
    pub async fn release(self) -> Result<bool> {
        let (tx, rx) = oneshot::channel();
        if !self.give_back(Some(self.next_id()), ReplyTx::Release(tx)) {
            return Err(self.gone());
        }
        rx.await.unwrap_or_else(|_| Err(self.gone()))
    }

    /// Ends the lease here (its token fires) and asks the session to release it, once: the
    /// first call sends the release, a later one (the drop after `release`) nothing.
    /// Whether the session took the release (a later call answers `true` too).
    fn give_back(&self, caller: Option<CallerId>, reply: ReplyTx) -> bool {
        if !self.held.release() {
            return true;
        }
        self.held.end();
        let notice = Notice {
            control: Control::Release {
                name: self.held.name.clone(),
                lease: self.held.lease(),
                caller,
            },
            reply,
        };
        self.handle.notice(notice).is_ok()
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.give_back(None, ReplyTx::None);
    }
}
