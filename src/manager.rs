//! Sessions that come back: the `sessions()` stream and the [`SessionManager`].

use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use futures::Stream;
use futures::future::BoxFuture;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::client::Client;
use crate::config::SessionOptions;
use crate::error::{Error, ErrorKind, Result};
use crate::keeper::{Keeper, Kept};
use crate::session::Session;

/// Starts a session, retrying transient failures with the options' backoff until it works
/// or fails for good.
async fn start_session(
    client: &Client,
    path: &str,
    options: &SessionOptions,
    stop: &CancellationToken,
) -> Result<Session> {
    let mut attempt = 0u32;
    loop {
        let err = tokio::select! {
            _ = stop.cancelled() => {
                return Err(Error::new(ErrorKind::SessionClosed, "the session manager is shut down"));
            }
            r = client.session(path, options.clone()) => match r {
                Ok(session) => return Ok(session),
                Err(err) => err,
            },
        };
        if err.stops_manager() {
            return Err(err);
        }
        let delay = options.backoff.delay(attempt, rand::random::<f64>());
        attempt = attempt.saturating_add(1);
        tracing::debug!(%err, ?delay, "session start failed; retrying");
        tokio::select! {
            _ = stop.cancelled() => {
                return Err(Error::new(ErrorKind::SessionClosed, "the session manager is shut down"));
            }
            _ = tokio::time::sleep(delay) => {}
        }
    }
}

/// Makes the next item of a [`Renewal`].
pub(crate) type Make<T> = Arc<dyn Fn() -> BoxFuture<'static, Result<T>> + Send + Sync>;

/// The one renewal mechanism, shared by [`SessionStream`] (the next live session) and
/// [`Held`](crate::recipes::Held) (the next guard): yields an item, and once that item's
/// token has fired, makes the next one. Never two at once: the next is started only after the
/// previous token fired. An error ends it.
pub(crate) struct Renewal<T> {
    make: Make<T>,
    /// The token of the last item yielded.
    previous: Option<CancellationToken>,
    next: Option<BoxFuture<'static, Result<T>>>,
    ended: bool,
}

impl<T> Renewal<T> {
    pub(crate) fn is_ended(&self) -> bool {
        self.ended
    }
}

impl<T: Send + 'static> Renewal<T> {
    pub(crate) fn new(make: Make<T>) -> Self {
        Self {
            make,
            previous: None,
            next: None,
            ended: false,
        }
    }

    /// The next item once the last one's token (`token_of` it) has fired; `None` after an
    /// error was yielded.
    pub(crate) fn poll_next(
        &mut self,
        cx: &mut Context<'_>,
        token_of: impl FnOnce(&T) -> CancellationToken,
    ) -> Poll<Option<Result<T>>> {
        if self.ended {
            return Poll::Ready(None);
        }
        let next = self.next.get_or_insert_with(|| {
            let previous = self.previous.take();
            let make = self.make.clone();
            Box::pin(async move {
                if let Some(previous) = previous {
                    // The old item ends before anything new is made.
                    previous.cancelled().await;
                }
                make().await
            })
        });
        let result = std::task::ready!(next.as_mut().poll(cx));
        self.next = None;
        match result {
            Ok(item) => {
                self.previous = Some(token_of(&item));
                Poll::Ready(Some(Ok(item)))
            }
            Err(err) => {
                self.ended = true;
                Poll::Ready(Some(Err(err)))
            }
        }
    }
}

/// A stream of sessions: a live one, and after it is lost, a new one. From
/// [`Client::sessions`].
///
/// Never two live at once: the next session is started only after the previous one ended
/// (expired, closed, or dropped by you). Transient failures are retried inside with
/// backoff; a fatal one (no such node, unauthorized, invalid options) is yielded as an
/// error and ends the stream.
///
/// # Examples
///
/// ```
/// # use ydb_coordination::emulator::Emulator;
/// use futures::StreamExt;
/// use ydb_coordination::{AcquireOptions, Client, SessionOptions};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let emulator = Emulator::builder().node("/local/app").start().await?;
/// # let client = Client::connect(&emulator.connection_string()).await?;
/// let mut sessions = client.sessions("/local/app", SessionOptions::new());
/// while let Some(session) = sessions.next().await {
///     let session = session?;
///     let lease = session.acquire("job", AcquireOptions::exclusive().ephemeral(true)).await;
///     let Ok(lease) = lease else { continue };
///     // Do the work while `lease.token()` is not cancelled.
///     lease.release().await?;
///     break;
/// }
/// # Ok(())
/// # }
/// ```
#[must_use = "a stream does nothing unless polled"]
pub struct SessionStream {
    path: String,
    renewal: Renewal<Session>,
}

impl std::fmt::Debug for SessionStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionStream")
            .field("path", &self.path)
            .field("ended", &self.renewal.is_ended())
            .finish_non_exhaustive()
    }
}

impl SessionStream {
    /// Sessions on `path`; `stop` ends a start in progress.
    pub(crate) fn new(
        client: Client,
        path: String,
        options: SessionOptions,
        stop: CancellationToken,
    ) -> Self {
        let at = path.clone();
        let make: Make<Session> = Arc::new(move || {
            let (client, path, options, stop) =
                (client.clone(), at.clone(), options.clone(), stop.clone());
            Box::pin(async move { start_session(&client, &path, &options, &stop).await })
        });
        Self {
            path,
            renewal: Renewal::new(make),
        }
    }
}

impl Stream for SessionStream {
    type Item = Result<Session>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.renewal.poll_next(cx, Session::token)
    }
}

/// Keeps one session open in the background and replaces it after it is lost.
///
/// Cheap to clone. Recipes built on a manager ([`SessionManager::mutex`] and friends)
/// survive session loss: they wait for the replacement and carry on.
///
/// # Examples
///
/// ```
/// # use ydb_coordination::emulator::Emulator;
/// use ydb_coordination::{Client, SessionManager, SessionOptions};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let emulator = Emulator::builder().node("/local/app").start().await?;
/// # let client = Client::connect(&emulator.connection_string()).await?;
/// let manager = SessionManager::new(client, "/local/app", SessionOptions::new());
/// let session = manager.current().await?;
/// # let _ = session;
/// manager.shutdown().await;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct SessionManager {
    inner: Arc<ManagerInner>,
}

#[derive(Debug)]
struct ManagerInner {
    current: watch::Receiver<Current>,
    /// The session timeout of its sessions.
    timeout: std::time::Duration,
    stop: CancellationToken,
    fatal: Mutex<Option<Error>>,
    /// The task that keeps its recipes' waits: bounded holds to their deadlines, group
    /// memberships through their sessions.
    waits: Keeper<Kept>,
}

impl Drop for ManagerInner {
    fn drop(&mut self) {
        // The last handle is gone: the supervisor closes the session and stops.
        self.stop.cancel();
    }
}

/// What the supervisor publishes.
#[derive(Debug, Clone)]
enum Current {
    /// A replacement is being made.
    Starting,
    /// The live session.
    Live(Session),
    /// The manager stopped (shut down, or a fatal error).
    Stopped,
}

impl SessionManager {
    /// The task that keeps its recipes' waits: bounded holds to their deadlines, group
    /// memberships through their sessions.
    pub(crate) fn waits(&self) -> &Keeper<Kept> {
        &self.inner.waits
    }

    /// Starts the manager; the first session is opened in the background.
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime: the manager's supervisor is a task (as `tokio::spawn`
    /// panics). Within `#[tokio::main]` or a runtime's `block_on` it cannot.
    pub fn new(client: Client, path: &str, options: SessionOptions) -> Self {
        let (tx, rx) = watch::channel(Current::Starting);
        let stop = CancellationToken::new();
        let inner = Arc::new(ManagerInner {
            current: rx,
            timeout: options.get_timeout(),
            stop: stop.clone(),
            fatal: Mutex::new(None),
            waits: Keeper::default(),
        });
        let weak = Arc::downgrade(&inner);
        let mut sessions = SessionStream::new(client, path.to_string(), options, stop.clone());
        tokio::spawn(async move {
            use futures::StreamExt;
            loop {
                let next = tokio::select! {
                    _ = stop.cancelled() => break,
                    next = sessions.next() => next,
                };
                match next {
                    Some(Ok(session)) => {
                        let token = session.token();
                        let _ = tx.send_replace(Current::Live(session.clone()));
                        tokio::select! {
                            _ = stop.cancelled() => {
                                session.close().await;
                                break;
                            }
                            _ = token.cancelled() => {}
                        }
                        drop(session);
                        if !stop.is_cancelled() {
                            let _ = tx.send_replace(Current::Starting);
                        }
                    }
                    Some(Err(err)) => {
                        if let Some(inner) = weak.upgrade() {
                            *inner.fatal.lock().unwrap_or_else(PoisonError::into_inner) = Some(err);
                        }
                        break;
                    }
                    None => break,
                }
            }
            let _ = tx.send_replace(Current::Stopped);
        });
        Self { inner }
    }

    /// The live session, waiting while a replacement is being made.
    ///
    /// # Errors
    ///
    /// The manager was shut down ([`ErrorKind::SessionClosed`]) or hit a fatal error
    /// (returned as is: no such node, unauthorized, invalid options).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn current(&self) -> Result<Session> {
        let mut rx = self.inner.current.clone();
        loop {
            let slot = rx.borrow_and_update().clone();
            match slot {
                Current::Live(session) if !session.state().is_terminal() => return Ok(session),
                Current::Stopped => return Err(self.stopped_error()),
                _ => {}
            }
            if rx.changed().await.is_err() {
                return Err(self.stopped_error());
            }
        }
    }

    /// Whether the manager has stopped for good: [`shutdown`](Self::shutdown) was called,
    /// or it hit a fatal error. From then on [`current`](Self::current) fails at once, and
    /// every recipe of the manager ends with that error instead of starting over.
    ///
    /// # Examples
    ///
    /// ```
    /// # use ydb_coordination::emulator::Emulator;
    /// use ydb_coordination::{Client, SessionManager, SessionOptions};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let emulator = Emulator::builder().node("/local/app").start().await?;
    /// # let client = Client::connect(&emulator.connection_string()).await?;
    /// let manager = SessionManager::new(client, "/local/app", SessionOptions::new());
    /// assert!(!manager.is_stopped());
    /// manager.shutdown().await;
    /// assert!(manager.is_stopped());
    /// # Ok(())
    /// # }
    /// ```
    pub fn is_stopped(&self) -> bool {
        self.inner.stop.is_cancelled() || matches!(*self.inner.current.borrow(), Current::Stopped)
    }

    /// The live session right now, if there is one.
    pub fn try_current(&self) -> Option<Session> {
        match &*self.inner.current.borrow() {
            Current::Live(s) if !s.state().is_terminal() => Some(s.clone()),
            _ => None,
        }
    }

    /// The session timeout of its sessions.
    pub(crate) fn timeout(&self) -> std::time::Duration {
        self.inner.timeout
    }

    pub(crate) fn stopped_error(&self) -> Error {
        self.inner
            .fatal
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .unwrap_or_else(|| {
                Error::new(ErrorKind::SessionClosed, "the session manager is shut down")
            })
    }

    /// Each new session as it is made (the first one included).
    pub fn sessions(&self) -> futures::stream::BoxStream<'static, Session> {
        let rx = self.inner.current.clone();
        Box::pin(futures::stream::unfold(
            (rx, None::<u64>),
            |(mut rx, last)| async move {
                loop {
                    let slot = rx.borrow_and_update().clone();
                    match slot {
                        Current::Live(s) if Some(s.id()) != last && !s.state().is_terminal() => {
                            let id = s.id();
                            return Some((s, (rx, Some(id))));
                        }
                        Current::Stopped => return None,
                        _ => {}
                    }
                    if rx.changed().await.is_err() {
                        return None;
                    }
                }
            },
        ))
    }

    /// Stops replacing sessions and closes the live one (its leases' tokens fire).
    ///
    /// Every recipe of the manager then ends with [`ErrorKind::SessionClosed`] instead of
    /// starting over: an acquire or a call in progress or made later fails with it, a
    /// stream ([`Held`](crate::recipes::Held), a watch, a subscription, an observer) yields
    /// it as its last item, and a [`Membership`](crate::recipes::Membership) ends with it.
    ///
    /// # Cancel safety
    ///
    /// The shutdown is requested at the first poll; dropping the future only skips waiting
    /// for the session to close.
    pub async fn shutdown(&self) {
        self.inner.stop.cancel();
        let mut rx = self.inner.current.clone();
        let _ = rx.wait_for(|s| matches!(s, Current::Stopped)).await;
    }
}

impl Client {
    /// A stream that yields a live session on `path`, and a new one each time the last one
    /// is lost: the retry loop of every coordination program, done once.
    ///
    /// See [`SessionStream`].
    pub fn sessions(&self, path: &str, options: SessionOptions) -> SessionStream {
        SessionStream::new(
            self.clone(),
            path.to_string(),
            options,
            CancellationToken::new(),
        )
    }

    /// A [`SessionManager`] on `path`.
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime, as [`SessionManager::new`].
    pub fn session_manager(&self, path: &str, options: SessionOptions) -> SessionManager {
        SessionManager::new(self.clone(), path, options)
    }
}
