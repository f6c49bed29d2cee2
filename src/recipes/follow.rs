//! Following one semaphore's state through watches, in whatever session the source gives:
//! the stream behind [`Group::watch`](super::Group::watch),
//! [`Published::subscribe`](super::Published::subscribe) and
//! [`Election::observe`](super::Election::observe).

use std::pin::Pin;
use std::task::{Context, Poll};

use futures::{Stream, StreamExt};

use super::{Next, Source, ensure_semaphore};
use crate::bound::{self, RoundTrips};
use crate::config::{self, DescribeOptions, WatchOptions};
use crate::error::{Error, ErrorKind, Result};
use crate::session::{SemaphoreDescription, WatchStream};

/// Turns a description, seen from the session `me`, into the value a stream yields.
pub(crate) type View<V> = fn(&SemaphoreDescription, u64) -> V;

/// The semaphore `name` as `view` sees it now, from one describe in the source's session
/// (made again in the next session after a loss, on a source that renews); `missing` when
/// it does not exist.
pub(crate) async fn read<V>(
    source: &Source,
    name: &str,
    options: DescribeOptions,
    view: View<V>,
    missing: V,
) -> Result<V> {
    config::check_name(name)?;
    // A read has no bound of its own: the session timeout is its bound.
    let trips = RoundTrips::default();
    let reading = async {
        loop {
            // Each attempt awaits a session from the source (a manager's next one after a
            // loss).
            let session = source.session().await?;
            trips.note(session.round_trip());
            match session.describe_semaphore(name, options).await {
                Ok(d) => return Ok(view(&d, session.id())),
                Err(e) if e.kind() == ErrorKind::NotFound => return Ok(missing),
                Err(e) => match source.after_error(e) {
                    Next::Retry => continue,
                    Next::End(e) => return Err(e),
                },
            }
        }
    };
    let what = format!("the read of semaphore {name:?}");
    bound::within(source.timeout(), &trips, &what, reading).await
}

/// Follows the persistent semaphore `name` (created with `limit` if missing) through
/// `watch`, yielding what `view` sees, carrying on across a session loss without an error
/// item.
pub(crate) fn follow<V: Clone + PartialEq + Send + Sync + 'static>(
    source: &Source,
    name: &str,
    limit: u64,
    watch: WatchOptions,
    view: View<V>,
) -> Following<V> {
    let spec = Spec {
        name: name.to_string(),
        limit,
        watch,
        view,
    };
    Follow::stream(source.clone(), spec)
}

/// What a [`Follow`] watches and how it reports.
#[derive(Debug, Clone)]
pub(crate) struct Spec<V> {
    pub(crate) name: String,
    /// The persistent semaphore's limit (created with it if missing).
    pub(crate) limit: u64,
    pub(crate) watch: WatchOptions,
    pub(crate) view: View<V>,
}

/// The state of a following stream: a watch in the current session, the last value yielded.
pub(crate) struct Follow<V> {
    source: Source,
    spec: Spec<V>,
    watch: Option<WatchStream>,
    /// The session of `watch`.
    me: u64,
    last: Option<V>,
    done: bool,
}

impl<V: Clone + PartialEq + Send + Sync + 'static> Follow<V> {
    /// A stream of values: the value now, then each new one, consecutive duplicates dropped,
    /// with the watch's latest-value semantics (a slow reader skips values, never the last).
    pub(crate) fn stream(source: Source, spec: Spec<V>) -> Following<V> {
        let state = Self {
            source,
            spec,
            watch: None,
            me: 0,
            last: None,
            done: false,
        };
        Following {
            inner: Box::pin(futures::stream::unfold(state, Self::step)),
        }
    }

    async fn open(&self) -> Result<(WatchStream, u64)> {
        // Refused for good (not a session loss): the stream yields it and ends.
        config::check_name(&self.spec.name)?;
        let session = self.source.session().await?;
        ensure_semaphore(&session, &self.spec.name, self.spec.limit).await?;
        let watch = session
            .watch_semaphore(&self.spec.name, self.spec.watch)
            .await?;
        Ok((watch, session.id()))
    }

    async fn step(mut self) -> Option<(Result<V>, Self)> {
        loop {
            if self.done {
                return None;
            }
            let item = match self.watch.as_mut() {
                Some(watch) => watch.next().await,
                None => match self.open().await {
                    Ok((watch, me)) => {
                        self.watch = Some(watch);
                        self.me = me;
                        continue;
                    }
                    // Not the watch's NotFound below: a missing node is no reason to retry.
                    Err(e) => match self.on_error(e) {
                        Some(item) => return Some((item, self)),
                        None => continue,
                    },
                },
            };
            match item {
                Some(Ok(update)) => {
                    let value = (self.spec.view)(&update.description, self.me);
                    if self.last.as_ref() != Some(&value) {
                        self.last = Some(value.clone());
                        return Some((Ok(value), self));
                    }
                }
                // Deleted: it is made again at the next open, and watched there.
                Some(Err(e)) if e.kind() == ErrorKind::NotFound => self.watch = None,
                Some(Err(e)) => {
                    if let Some(item) = self.on_error(e) {
                        return Some((item, self));
                    }
                }
                None => self.watch = None,
            }
        }
    }

    /// What to yield after `e`: nothing after a session lost on a source that renews (the
    /// stream carries on in the next session, whose first value is compared with the last
    /// one yielded); otherwise the error, the stream's last item (the one convention of
    /// every stream of the crate: an error item ends it).
    fn on_error(&mut self, e: Error) -> Option<Result<V>> {
        self.watch = None;
        match self.source.after_error(e) {
            Next::Retry => None,
            Next::End(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// A stream that follows one semaphore's state, with latest-value semantics: the value now,
/// then each new one; a slow reader skips values, never the last; two items in a row differ.
/// It is [`MemberStream`](super::MemberStream) ([`Group::watch`](super::Group::watch)),
/// [`ValueStream`](super::ValueStream) ([`Published::subscribe`](super::Published::subscribe))
/// and [`LeaderStream`](super::LeaderStream) ([`Election::observe`](super::Election::observe));
/// see those for what each yields across a session loss.
#[must_use = "a stream does nothing unless polled"]
pub struct Following<V> {
    inner: Pin<Box<dyn Stream<Item = Result<V>> + Send>>,
}

impl<V: Send + 'static> Following<V> {
    /// `stream`, as a [`Following`].
    pub(crate) fn new(stream: impl Stream<Item = Result<V>> + Send + 'static) -> Self {
        Self {
            inner: Box::pin(stream),
        }
    }

    /// A stream that yields `e` and ends.
    pub(crate) fn failed(e: Error) -> Self {
        Self {
            inner: Box::pin(futures::stream::once(async move { Err(e) })),
        }
    }
}

impl<V> std::fmt::Debug for Following<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Following")
    }
}

impl<V> Stream for Following<V> {
    type Item = Result<V>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}
