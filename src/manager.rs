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
pub struct SessionStream {
    client: Client,
    path: String,
    options: SessionOptions,
    previous: Option<CancellationToken>,
    starting: Option<BoxFuture<'static, Result<Session>>>,
    stop: CancellationToken,
    ended: bool,
}

impl std::fmt::Debug for SessionStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionStream")
            .field("path", &self.path)
            .field("ended", &self.ended)
            .finish_non_exhaustive()
    }
}

impl SessionStream {
    pub(crate) fn new(client: Client, path: String, options: SessionOptions) -> Self {
        Self {
            client,
            path,
            options,
            previous: None,
            starting: None,
            stop: CancellationToken::new(),
            ended: false,
        }
    }
}

impl Stream for SessionStream {
    type Item = Result<Session>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if this.ended {
            return Poll::Ready(None);
        }
        if this.starting.is_none() {
            let previous = this.previous.take();
            let (client, path, options, stop) = (
                this.client.clone(),
                this.path.clone(),
                this.options.clone(),
                this.stop.clone(),
            );
            this.starting = Some(Box::pin(async move {
                if let Some(previous) = previous {
                    previous.cancelled().await;
                }
                start_session(&client, &path, &options, &stop).await
            }));
        }
        let Some(starting) = this.starting.as_mut() else {
            return Poll::Pending;
        };
        let result = std::task::ready!(starting.as_mut().poll(cx));
        this.starting = None;
        match result {
            Ok(session) => {
                this.previous = Some(session.token());
                Poll::Ready(Some(Ok(session)))
            }
            Err(err) => {
                this.ended = true;
                Poll::Ready(Some(Err(err)))
            }
        }
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
    stop: CancellationToken,
    fatal: Mutex<Option<Error>>,
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
    /// Starts the manager; the first session is opened in the background.
    ///
    /// Must be called within a Tokio runtime.
    pub fn new(client: Client, path: &str, options: SessionOptions) -> Self {
        let (tx, rx) = watch::channel(Current::Starting);
        let stop = CancellationToken::new();
        let inner = Arc::new(ManagerInner {
            current: rx,
            stop: stop.clone(),
            fatal: Mutex::new(None),
        });
        let weak = Arc::downgrade(&inner);
        let mut sessions = SessionStream::new(client, path.to_string(), options);
        sessions.stop = stop.clone();
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

    /// The live session right now, if there is one.
    pub fn try_current(&self) -> Option<Session> {
        match &*self.inner.current.borrow() {
            Current::Live(s) if !s.state().is_terminal() => Some(s.clone()),
            _ => None,
        }
    }

    fn stopped_error(&self) -> Error {
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
        SessionStream::new(self.clone(), path.to_string(), options)
    }

    /// A [`SessionManager`] on `path`.
    pub fn session_manager(&self, path: &str, options: SessionOptions) -> SessionManager {
        SessionManager::new(self.clone(), path, options)
    }
}
