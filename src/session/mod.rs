//! A coordination session: the handle, its leases and watches.

mod acquiring;
pub(crate) mod announce;
pub(crate) mod core;
pub(crate) mod driver;
mod fencing;
pub(crate) mod inbox;
mod lease;
mod mailbox;
pub(crate) mod metrics;
mod outbox;
mod replies;
mod sentinel;
mod state;
mod stream;
mod types;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use futures::Stream;
use tokio::sync::{oneshot, watch};
use tokio_util::sync::CancellationToken;

pub use self::acquiring::Acquiring;
pub(crate) use self::acquiring::{Compose, optional};
pub use self::announce::{
    ANNOUNCE_LIMIT, ANNOUNCE_SEMAPHORE, Announced, Announcement, Gap, PAGE_LIMIT, Page, Pages,
    page_semaphore,
};
use self::core::{AcquireCmd, CallerId, Command, Control, Grant};
pub use self::fencing::FencingToken;
pub use self::lease::Lease;
use self::replies::{Notice, ReplyTx, Request};
pub use self::state::SessionState;
pub use self::types::{
    HeldLease, SemaphoreDescription, SemaphoreSession, SessionSnapshot, WaitingAcquire, WatchUpdate,
};
use crate::config::{self, AcquireOptions, DescribeOptions, WatchOptions};
use crate::error::{Error, ErrorKind, Result};
use crate::keeper::{Keeper, Kept};

/// A coordination session on one coordination node.
///
/// A cheap, clonable handle to one background task that owns the gRPC stream. The task
/// reattaches after a broken stream without losing leases and ends the session when the
/// server says it is gone or when contact cannot be confirmed within the session timeout.
/// The session closes when [`Session::close`] is called, or when every handle, lease and
/// watch of it has been dropped.
///
/// # Examples
///
/// ```
/// # use ydb_coordination::emulator::Emulator;
/// use ydb_coordination::{AcquireOptions, Client, SessionOptions};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let emulator = Emulator::builder().node("/local/app").start().await?;
/// # let client = Client::connect(&emulator.connection_string()).await?;
/// let session = client.session("/local/app", SessionOptions::new()).await?;
/// session.create_semaphore("pool", 3, b"").await?;
/// let lease = session.acquire("pool", AcquireOptions::new().count(2)).await?;
/// let d = session.describe_semaphore("pool", Default::default()).await?;
/// assert_eq!(d.count, 2);
/// lease.release().await?;
/// session.close().await;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Session {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    path: String,
    /// The session timeout it was started with.
    timeout: std::time::Duration,
    /// The inbox, and the session's id, terminal cause and caller ids.
    handle: inbox::Handle,
    state: watch::Receiver<SessionState>,
    token: CancellationToken,
    /// The task that keeps its recipes' waits: bounded holds to their deadlines, group
    /// memberships through their sessions.
    waits: Keeper<Kept>,
}

impl Inner {
    fn next_id(&self) -> CallerId {
        self.handle.next_id()
    }
}

impl Session {
    pub(crate) fn new(
        path: String,
        timeout: std::time::Duration,
        handle: inbox::Handle,
        state: watch::Receiver<SessionState>,
        token: CancellationToken,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                path,
                timeout,
                handle,
                state,
                token,
                waits: Keeper::default(),
            }),
        }
    }

    /// The task that keeps its recipes' waits: bounded holds to their deadlines, group
    /// memberships through their sessions.
    pub(crate) fn waits(&self) -> &Keeper<Kept> {
        &self.inner.waits
    }

    /// The server's id of the session.
    pub fn id(&self) -> u64 {
        self.inner.handle.session_id()
    }

    /// The latest round trip to the node the session measured (of a request the server
    /// answered): what a bounded call waits past its deadline for the server's answer.
    pub(crate) fn round_trip(&self) -> std::time::Duration {
        self.inner.handle.round_trip()
    }

    /// The session timeout it was started with: how long a read without a bound of its
    /// own may wait for the node.
    pub(crate) fn timeout(&self) -> std::time::Duration {
        self.inner.timeout
    }

    /// The coordination node's path.
    pub fn path(&self) -> &str {
        &self.inner.path
    }

    /// A token cancelled when the session is lost or closed. Every lease's token is a child
    /// of it.
    pub fn token(&self) -> CancellationToken {
        self.inner.token.clone()
    }

    /// The current state.
    pub fn state(&self) -> SessionState {
        *self.inner.state.borrow()
    }

    /// A receiver of state changes (`Attached`, `Reattaching`, `Expired`, `Closed`).
    pub fn state_changes(&self) -> watch::Receiver<SessionState> {
        self.inner.state.clone()
    }

    /// What the session holds and waits for (names, counts, fencing tokens, since when),
    /// answered by the session task without asking the server.
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
    /// let _lease = session.acquire("job", AcquireOptions::exclusive().ephemeral(true)).await?;
    /// let snapshot = session.snapshot().await;
    /// assert_eq!(snapshot.held[0].name, "job");
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn snapshot(&self) -> SessionSnapshot {
        let (tx, rx) = oneshot::channel();
        let ended = || SessionSnapshot {
            session_id: self.inner.handle.session_id(),
            state: self.state(),
            held: Vec::new(),
            waiting: Vec::new(),
            requests_in_flight: 0,
        };
        let caller = self.inner.next_id();
        let notice = Notice {
            control: Control::Snapshot { caller },
            reply: ReplyTx::Snapshot(tx),
        };
        if self.inner.handle.notice(notice).is_err() {
            return ended();
        }
        rx.await.unwrap_or_else(|_| ended())
    }

    /// Why the session ended, once it has.
    pub fn error(&self) -> Option<Error> {
        self.inner.handle.terminal().get()
    }

    /// The error for a session that can no longer take requests.
    fn gone(&self) -> Error {
        self.inner.handle.gone()
    }

    /// Sends a command and waits for its answer, inside a debug span named after the
    /// operation.
    async fn call<T>(
        &self,
        op: &'static str,
        name: &str,
        wrap: fn(oneshot::Sender<Result<T>>) -> ReplyTx,
        make: impl FnOnce(CallerId) -> Command,
    ) -> Result<T> {
        let span = tracing::debug_span!(
            "coordination_op",
            op,
            semaphore = name,
            outcome = tracing::field::Empty
        );
        let work = async {
            let (tx, rx) = oneshot::channel();
            let request = Request {
                command: make(self.inner.next_id()),
                reply: wrap(tx),
            };
            self.inner
                .handle
                .command(request)
                .map_err(|_| self.gone())?;
            rx.await.unwrap_or_else(|_| Err(self.gone()))
        };
        let result = tracing::Instrument::instrument(work, span.clone()).await;
        span.record("outcome", outcome(&result));
        result
    }

    /// Creates a persistent semaphore with `limit` units and optional data.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::AlreadyExists`] if it exists, [`ErrorKind::PreconditionFailed`] if an
    /// ephemeral semaphore of that name is in use, [`ErrorKind::InvalidArgument`] for a zero
    /// limit, an oversized name or data, or a [reserved](config::is_reserved) name,
    /// [`ErrorKind::OutcomeUnknown`] if the stream broke while the request was in flight.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future after it was first polled does not withdraw the request.
    pub async fn create_semaphore(&self, name: &str, limit: u64, data: &[u8]) -> Result<()> {
        config::check_reserved(name)?;
        config::check_name(name)?;
        config::check_data(data)?;
        if limit == 0 {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "semaphore limit must be at least 1",
            ));
        }
        self.call("create", name, ReplyTx::Done, |caller| Command::Create {
            caller,
            name: name.to_string(),
            limit,
            data: data.to_vec(),
        })
        .await
    }

    /// Replaces a semaphore's data.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::NotFound`] if it does not exist; [`ErrorKind::InvalidArgument`] for an
    /// oversized name or data, or a [reserved](config::is_reserved) name.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future after it was first polled does not withdraw the request.
    pub async fn update_semaphore(&self, name: &str, data: &[u8]) -> Result<()> {
        config::check_reserved(name)?;
        config::check_name(name)?;
        config::check_data(data)?;
        self.call("update", name, ReplyTx::Done, |caller| Command::Update {
            caller,
            name: name.to_string(),
            data: data.to_vec(),
        })
        .await
    }

    /// Deletes a persistent semaphore; with `force`, even if it has owners or waiters
    /// (waiters are aborted; owners are not told).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::NotFound`], [`ErrorKind::PreconditionFailed`] (not empty, or ephemeral),
    /// [`ErrorKind::InvalidArgument`] for a [reserved](config::is_reserved) name,
    /// [`ErrorKind::OutcomeUnknown`] if the stream broke while the request was in flight.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future after it was first polled does not withdraw the request.
    pub async fn delete_semaphore(&self, name: &str, force: bool) -> Result<()> {
        config::check_reserved(name)?;
        self.call("delete", name, ReplyTx::Done, |caller| Command::Delete {
            caller,
            name: name.to_string(),
            force,
        })
        .await
    }

    /// Describes a semaphore.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::NotFound`] if it does not exist.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a describe changes nothing.
    pub async fn describe_semaphore(
        &self,
        name: &str,
        options: DescribeOptions,
    ) -> Result<SemaphoreDescription> {
        self.call("describe", name, ReplyTx::Describe, |caller| {
            Command::Describe {
                caller,
                name: name.to_string(),
                opts: options,
            }
        })
        .await
    }

    /// Watches a semaphore: the stream yields its current description, then a new one after
    /// every change of the kinds asked for. Across a reattach the watch is re-armed and the
    /// next item has [`WatchUpdate::resynced`] set. The stream ends after an error item
    /// (the semaphore was deleted: [`ErrorKind::NotFound`]; the session ended).
    ///
    /// Items hold the latest value, as `tokio::sync::watch` does: a reader that falls behind
    /// never slows the session down and never misses the newest state. Descriptions it did
    /// not read in time are replaced by newer ones, so the next item it reads after a burst
    /// of changes is the newest description the session has seen (and `resynced` is set if
    /// any replaced item had it). A live watch keeps its session open, as a handle does.
    ///
    /// # Errors
    ///
    /// The session has ended.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes installs no watch.
    pub async fn watch_semaphore(&self, name: &str, options: WatchOptions) -> Result<WatchStream> {
        let (tx, rx) = mailbox::channel();
        let subscriber = self.inner.next_id();
        let request = Request {
            command: Command::Watch {
                subscriber,
                name: name.to_string(),
                opts: options,
            },
            reply: ReplyTx::Watch(tx),
        };
        self.inner
            .handle
            .command(request)
            .map_err(|_| self.gone())?;
        // Nothing here waits for the session task: spend budget as a channel send would, so
        // a loop of watches cannot keep its worker from the session task.
        tokio::task::coop::consume_budget().await;
        Ok(WatchStream {
            rx,
            session: self.clone(),
            name: name.to_string(),
            subscriber,
            ended: false,
        })
    }

    /// Acquires `options.count` units of a semaphore, waiting in the server's FIFO queue up
    /// to `options.timeout` (forever by default).
    ///
    /// Returns an [`Acquiring`] you can simply `.await`, or first ask whether the server
    /// queued the request ([`Acquiring::queued`]). A session holds at most one lease per semaphore:
    /// a second acquire of the same name in one session waits until the first lease ends.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::NotAcquired`] when the server answered that the timeout passed in the
    /// queue (use [`Session::try_acquire`] for an `Option`), [`ErrorKind::NotFound`] (a persistent
    /// semaphore that does not exist), [`ErrorKind::PreconditionFailed`] (the ephemeral flag
    /// does not match), [`ErrorKind::InvalidArgument`] (count 0 or above the limit, or a
    /// [reserved](config::is_reserved) name: nothing is sent),
    /// [`ErrorKind::Aborted`] (the semaphore was deleted while waiting), session errors.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes withdraws the request: the server forgets
    /// the waiter, and the semaphore is not acquired.
    pub fn acquire(&self, name: &str, options: AcquireOptions) -> Acquiring<Lease> {
        Acquiring::session(self.acquire_one(name, options), |lease| lease)
    }

    /// The acquire of `name` in this session, under [`Session::acquire`] and the recipes.
    pub(crate) fn acquire_one(&self, name: &str, options: AcquireOptions) -> Acquire {
        let (queued_tx, queued_rx) = oneshot::channel();
        let (reply_tx, reply_rx) = oneshot::channel();
        let id = self.inner.next_id();
        let count = options.count;
        let span = tracing::debug_span!(
            "coordination_op",
            op = "acquire",
            semaphore = name,
            count,
            ephemeral = options.ephemeral,
            outcome = tracing::field::Empty,
            wait = tracing::field::Empty,
        );
        let invalid = config::check_reserved(name)
            .and_then(|()| options.validate())
            .err();
        let timeout = options.get_timeout();
        let name: Arc<str> = Arc::from(name);
        Acquire {
            timeout,
            session: self.clone(),
            name: name.clone(),
            id,
            cmd: Some(Request {
                command: Command::Acquire(AcquireCmd {
                    caller: id,
                    name: name.clone(),
                    opts: options,
                    requested_at: tokio::time::Instant::now(),
                }),
                reply: ReplyTx::Acquire {
                    reply: reply_tx,
                    queued: Some(queued_tx),
                    name,
                },
            }),
            invalid,
            queued: Some(queued_rx),
            reply: reply_rx,
            submitted: false,
            done: false,
            span,
            started: tokio::time::Instant::now(),
        }
    }

    /// Acquires only if it can be done at once (no one is queued and the units are free).
    ///
    /// # Errors
    ///
    /// As [`Session::acquire`], without the timeout.
    ///
    /// # Cancel safety
    ///
    /// As [`Session::acquire`].
    pub fn try_acquire(&self, name: &str, options: AcquireOptions) -> Acquiring<Option<Lease>> {
        let acquire = self.acquire_one(name, options.timeout(std::time::Duration::ZERO));
        Acquiring::session(acquire, optional)
    }

    /// Closes the session: every lease token fires at once, the server is asked to stop the
    /// session (releasing all its semaphores) and the call waits for its answer (bounded by
    /// [`SessionOptions::stop_timeout`](crate::SessionOptions::stop_timeout)). Pending calls
    /// fail with [`ErrorKind::SessionClosed`]; an acquire the server grants while the stop
    /// is on its way is given back, never returned. If the stream is down, the session keeps
    /// reattaching within the stop timeout to send the queued releases and the stop, so the
    /// server does not keep the semaphores for a whole session timeout.
    ///
    /// # Cancel safety
    ///
    /// The stop is requested on the first poll; dropping the future only skips the wait.
    pub async fn close(&self) {
        let (tx, rx) = oneshot::channel();
        let request = Request {
            command: Command::Close {
                caller: self.inner.next_id(),
            },
            reply: ReplyTx::Closed(tx),
        };
        if self.inner.handle.command(request).is_ok() {
            let _ = rx.await;
        }
    }

    fn lease(&self, grant: Grant) -> Lease {
        Lease::new(grant.held, self.inner.handle.clone())
    }
}

/// One semaphore's acquire in one session: a future of the [`Lease`], inside an
/// [`Acquiring`].
#[derive(Debug)]
#[must_use = "an acquire does nothing unless awaited"]
pub(crate) struct Acquire {
    // Field order matters: `reply` is closed before the cancel message is sent in `Drop`, so
    // a driver that has not processed the request yet sees nobody is waiting.
    reply: oneshot::Receiver<Result<Option<Grant>>>,
    queued: Option<oneshot::Receiver<()>>,
    session: Session,
    name: Arc<str>,
    id: u64,
    /// The options' timeout: the acquire's bound.
    timeout: Option<std::time::Duration>,
    cmd: Option<Request>,
    /// Why the options were rejected: every poll answers with it, nothing is sent.
    invalid: Option<Error>,
    submitted: bool,
    done: bool,
    span: tracing::Span,
    started: tokio::time::Instant,
}

impl Acquire {
    /// The session it acquires in.
    pub(crate) fn session(&self) -> &Session {
        &self.session
    }

    /// Its bound: the options' timeout.
    pub(crate) fn timeout(&self) -> Option<std::time::Duration> {
        self.timeout
    }

    /// Hands the command to the session task (once; later calls only repeat the outcome).
    fn submit(&mut self) -> Result<()> {
        if let Some(err) = &self.invalid {
            return Err(err.clone());
        }
        let Some(cmd) = self.cmd.take() else {
            return Ok(());
        };
        if self.session.inner.handle.command(cmd).is_err() {
            return Err(self.session.gone());
        }
        self.submitted = true;
        Ok(())
    }

    /// Waits until the server queues the request (`true`: someone else holds the units) or
    /// completes it without queuing (`false`).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the acquire stays in progress; await it afterwards.
    pub(crate) async fn queued(&mut self) -> bool {
        if self.submit().is_err() {
            return false;
        }
        match self.queued.as_mut() {
            Some(rx) => {
                let queued = rx.await.is_ok();
                self.queued = None;
                queued
            }
            None => false,
        }
    }
}

impl Future for Acquire {
    type Output = Result<Lease>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        if this.done {
            return Poll::Ready(Err(Error::new(
                ErrorKind::Cancelled,
                "acquire polled after completion",
            )));
        }
        let span = this.span.clone();
        let _entered = span.enter();
        let result = std::task::ready!(this.poll_acquire(cx));
        span.record("outcome", outcome(&result));
        span.record("wait", tracing::field::debug(this.started.elapsed()));
        Poll::Ready(result)
    }
}

impl Acquire {
    fn poll_acquire(&mut self, cx: &mut Context<'_>) -> Poll<Result<Lease>> {
        let this = self;
        if let Err(e) = this.submit() {
            this.done = true;
            return Poll::Ready(Err(e));
        }
        let result = ready!(Pin::new(&mut this.reply).poll(cx));
        this.done = true;
        this.submitted = false; // answered: nothing to withdraw
        let grant = result.unwrap_or_else(|_| Err(this.session.gone()))?;
        Poll::Ready(match grant {
            Some(grant) => Ok(this.session.lease(grant)),
            None => Err(Error::new(
                ErrorKind::NotAcquired,
                format!(
                    "semaphore {:?} was not acquired within the timeout",
                    this.name
                ),
            )),
        })
    }
}

impl Drop for Acquire {
    fn drop(&mut self) {
        if !self.submitted {
            return;
        }
        // After `close` the session task can no longer hand over a grant: either it already
        // did (it is in the channel, and nobody else will ever take it) or it will find the
        // channel closed and give the semaphore back itself.
        self.reply.close();
        let name = std::mem::take(&mut self.name);
        match self.reply.try_recv() {
            // Dropping the lease releases the grant and fires its token.
            Ok(Ok(Some(grant))) => drop(self.session.lease(grant)),
            Ok(_) => {}
            Err(_) => {
                let notice = Notice {
                    control: Control::CancelAcquire {
                        name,
                        caller: self.id,
                    },
                    reply: ReplyTx::None,
                };
                let _ = self.session.inner.handle.notice(notice);
            }
        }
    }
}

/// The `outcome` field of an operation span.
fn outcome<T>(result: &Result<T>) -> &'static str {
    match result {
        Ok(_) => "ok",
        Err(e) if e.kind() == ErrorKind::NotAcquired => "timed_out",
        Err(_) => "error",
    }
}

/// The stream of a semaphore watch, from [`Session::watch_semaphore`].
///
/// It keeps its session open: the session closes once every handle, lease and watch of it
/// is dropped.
#[derive(Debug)]
#[must_use = "a stream does nothing unless polled"]
pub struct WatchStream {
    rx: mailbox::Receiver,
    session: Session,
    name: String,
    subscriber: core::SubscriberId,
    ended: bool,
}

impl Drop for WatchStream {
    fn drop(&mut self) {
        let notice = Notice {
            control: Control::Unwatch {
                name: std::mem::take(&mut self.name),
                subscriber: self.subscriber,
            },
            reply: ReplyTx::None,
        };
        let _ = self.session.inner.handle.notice(notice);
    }
}

impl Stream for WatchStream {
    type Item = Result<WatchUpdate>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.ended {
            return Poll::Ready(None);
        }
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(Err(e))) => {
                self.ended = true;
                Poll::Ready(Some(Err(e)))
            }
            Poll::Ready(None) => {
                self.ended = true;
                Poll::Ready(Some(Err(self.session.gone())))
            }
            other => other,
        }
    }
}
