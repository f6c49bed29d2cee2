//! The future of every recipe acquire: a session from the source, the semaphore made sure
//! of, then [`Session::acquire`], again in the next session when the source renews it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use futures::future::BoxFuture;
use tokio::time::Instant;

use super::{Next, Prepare, Source, ensure_semaphore};
use crate::bound::RoundTrips;
use crate::config::AcquireOptions;
use crate::error::{Error, ErrorKind, Result};
use crate::session::{Acquire, Acquiring, Compose, Lease, Session};

/// A recipe's acquire in progress, inside an [`Acquiring`]: a session from the source, the
/// semaphore made sure of, then the session's acquire, again in the next session when the
/// source renews it.
pub(crate) struct Recipe<T> {
    source: Source,
    name: String,
    options: AcquireOptions,
    prepare: Prepare,
    /// When a `_timeout` form gives up, set at the first poll.
    deadline: Option<Instant>,
    /// The round trips of the sessions it used, for the bound around it.
    trips: RoundTrips,
    /// How many times the semaphore was found gone and made again.
    remakes: u8,
    state: State,
    /// The step between a grant and the caller's guard, if the recipe has one.
    after: Option<AfterGrant>,
    finish: Finish<T>,
}

/// How many times one acquire makes its semaphore again after finding it gone: more means
/// someone keeps deleting it, which the caller should hear of.
pub(crate) const REMAKES: u8 = 3;

/// Makes the future's output from the session's answer (the guard around the lease).
type Finish<T> = Box<dyn Fn(Result<Lease>) -> Result<T> + Send + Sync>;

/// What a recipe does with a granted lease, in its session, before the caller gets it (a
/// lock-delay mutex's marker and delay), given the acquire's deadline (`None`: no bound).
/// The step owns the lease: dropped with the acquire, it drops the lease, which releases
/// it; an error it ends with goes through the same retry rules as the acquire's own
/// ([`ErrorKind::NotAcquired`]: the lock is not the caller's by the deadline).
pub(crate) type AfterGrant =
    Arc<dyn Fn(Lease, Option<Instant>) -> BoxFuture<'static, Result<Lease>> + Send + Sync>;

enum State {
    /// Not started.
    Start,
    /// Getting a session and making sure of the semaphore.
    Preparing(BoxFuture<'static, Result<Session>>),
    /// Asking the session.
    Acquiring(Box<Acquire>),
    /// Granted: the recipe's step after the grant.
    Granted(BoxFuture<'static, Result<Lease>>),
    /// The outcome, not yet returned.
    Ready(Result<Lease>),
    /// Returned.
    Done,
}

impl<T> std::fmt::Debug for Recipe<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match self.state {
            State::Start => "start",
            State::Preparing(_) => "preparing",
            State::Acquiring(_) => "acquiring",
            State::Granted(_) => "granted",
            State::Ready(_) => "ready",
            State::Done => "done",
        };
        f.debug_struct("Acquiring")
            .field("name", &self.name)
            .field("state", &state)
            .finish_non_exhaustive()
    }
}

impl<T: 'static> Acquiring<T> {
    /// A recipe's acquire.
    pub(crate) fn new(
        source: &Source,
        name: &str,
        options: AcquireOptions,
        prepare: Prepare,
        after: Option<AfterGrant>,
        finish: impl Fn(Result<Lease>) -> Result<T> + Send + Sync + 'static,
    ) -> Self {
        let timeout = options.timeout;
        let mut recipe = Recipe::new(source, name, options, prepare, finish);
        recipe.after = after;
        let acquiring = Acquiring::composed(recipe);
        match timeout {
            // Every step (a session, the semaphore, the grant, the step after it) is
            // within the bound.
            Some(timeout) => acquiring.within(timeout),
            None => acquiring,
        }
    }
}

impl<T> Recipe<T> {
    fn new(
        source: &Source,
        name: &str,
        options: AcquireOptions,
        prepare: Prepare,
        finish: impl Fn(Result<Lease>) -> Result<T> + Send + Sync + 'static,
    ) -> Self {
        Self {
            source: source.clone(),
            name: name.to_string(),
            options,
            prepare,
            deadline: None,
            trips: RoundTrips::default(),
            remakes: 0,
            state: State::Start,
            after: None,
            finish: Box::new(finish),
        }
    }

    /// As [`Acquiring::queued`]; a session lost before the server answered is replaced
    /// first and the question asked again in the new session.
    async fn wait_queued(&mut self) -> bool {
        loop {
            if let Err(err) = std::future::poll_fn(|cx| self.poll_started(cx)).await {
                self.state = State::Ready(Err(err));
            }
            let State::Acquiring(acquire) = &mut self.state else {
                return false;
            };
            if acquire.queued().await {
                return true;
            }
            // Answered without queuing: the outcome is there (or the session is gone).
            let result = (&mut **acquire).await;
            if self.answered(result) {
                return false;
            }
        }
    }

    /// Takes the session's answer: a grant goes on to the step after it, if the recipe has
    /// one; anything else through [`Recipe::retry`]. `false` when the request is made again.
    fn answered(&mut self, result: Result<Lease>) -> bool {
        match (result, &self.after) {
            (Ok(lease), Some(after)) => {
                self.state = State::Granted(after(lease, self.deadline));
                true
            }
            (result, _) => match self.retry(result) {
                Some(result) => {
                    self.state = State::Ready(result);
                    true
                }
                None => false,
            },
        }
    }

    /// After `result`: `None` when the request is made again (in the next session, or
    /// after making anew a semaphore found gone), else the outcome to end with
    /// ([`Source::after_error`]). A new attempt awaits the preparation (a round trip at
    /// least) before it acquires.
    fn retry(&mut self, result: Result<Lease>) -> Option<Result<Lease>> {
        if let Err(e) = &result
            && e.kind() == ErrorKind::NotFound
            && matches!(self.prepare, Prepare::Semaphore { .. })
            && self.remakes < REMAKES
        {
            self.remakes += 1;
            tracing::debug!(semaphore = self.name, "semaphore gone; making it again");
            self.state = State::Start;
            return None;
        }
        match result.map_err(|e| self.source.after_error(e)) {
            Ok(lease) => Some(Ok(lease)),
            Err(Next::Retry) => {
                self.state = State::Start;
                None
            }
            Err(Next::End(e)) => Some(Err(e)),
        }
    }

    /// Drives the attempt until the request is sent to a session (or has an outcome).
    fn poll_started(&mut self, cx: &mut Context<'_>) -> Poll<Result<()>> {
        loop {
            match &mut self.state {
                State::Start => {
                    // Checked before anything is asked (a semaphore's preparation included),
                    // on the caller's own timeout, not on what a retry has left of it.
                    if let Err(err) = self.options.validate() {
                        self.state = State::Ready(Err(err));
                        continue;
                    }
                    if self.deadline.is_none()
                        && let Some(timeout) = self.options.timeout
                    {
                        self.deadline = Instant::now().checked_add(timeout);
                    }
                    let (source, name, prepare, trips) = (
                        self.source.clone(),
                        self.name.clone(),
                        self.prepare,
                        self.trips.clone(),
                    );
                    self.state = State::Preparing(Box::pin(async move {
                        let session = source.session().await?;
                        trips.note(session.round_trip());
                        if let Prepare::Semaphore { limit } = prepare {
                            ensure_semaphore(&session, &name, limit).await?;
                        }
                        Ok(session)
                    }));
                }
                State::Preparing(prepare) => match ready!(prepare.as_mut().poll(cx)) {
                    Ok(session) => {
                        self.trips.note(session.round_trip());
                        let mut options = self.options.clone();
                        if let Some(deadline) = self.deadline {
                            // A retry in a new session keeps the first attempt's deadline.
                            options =
                                options.timeout(deadline.saturating_duration_since(Instant::now()));
                        }
                        self.state =
                            State::Acquiring(Box::new(session.acquire_one(&self.name, options)));
                    }
                    Err(err) => {
                        if let Some(result) = self.retry(Err(err)) {
                            self.state = State::Ready(result);
                        }
                    }
                },
                State::Acquiring(_) | State::Granted(_) | State::Ready(_) | State::Done => {
                    return Poll::Ready(Ok(()));
                }
            }
        }
    }
}

impl<T> Compose<T> for Recipe<T> {
    fn queued(&mut self) -> BoxFuture<'_, bool> {
        Box::pin(self.wait_queued())
    }

    fn round_trips(&self) -> RoundTrips {
        self.trips.clone()
    }
}

impl<T> Future for Recipe<T> {
    type Output = Result<T>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        loop {
            if let Err(err) = ready!(this.poll_started(cx)) {
                this.state = State::Ready(Err(err));
            }
            match std::mem::replace(&mut this.state, State::Done) {
                State::Acquiring(mut acquire) => match Pin::new(&mut *acquire).poll(cx) {
                    Poll::Pending => {
                        this.state = State::Acquiring(acquire);
                        return Poll::Pending;
                    }
                    Poll::Ready(result) => {
                        this.answered(result);
                    }
                },
                State::Granted(mut step) => match step.as_mut().poll(cx) {
                    Poll::Pending => {
                        this.state = State::Granted(step);
                        return Poll::Pending;
                    }
                    Poll::Ready(result) => {
                        if let Some(result) = this.retry(result) {
                            return Poll::Ready((this.finish)(result));
                        }
                    }
                },
                State::Ready(result) => return Poll::Ready((this.finish)(result)),
                State::Done => {
                    return Poll::Ready(Err(Error::new(
                        ErrorKind::Cancelled,
                        "acquire polled after completion",
                    )));
                }
                other => this.state = other,
            }
        }
    }
}
