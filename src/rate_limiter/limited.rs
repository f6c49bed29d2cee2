//! [`RateLimited`]: a stream whose items each wait for units of a rate-limiter resource.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::Stream;
use futures::future::BoxFuture;

use super::RateLimiter;
use crate::config::Backoff;
use crate::error::{Result, RetryRule};

/// A stream paced by a rate-limiter resource: each item of the inner stream is yielded once
/// `units` of the resource were taken for it (as [`RateLimiter::acquire`] takes them), so
/// every process that paces its work through the same resource shares one rate. Made by
/// [`RateLimiter::limit_stream`].
///
/// An item is pulled from the inner stream first, then waits for its units: the inner
/// stream ending costs nothing. When an acquire fails, the error is yielded
/// (`Some(Err(_))`). After an error that another try would repeat (a resource that does not
/// exist, a bad path: [`RetryRule::Never`](crate::error::RetryRule::Never)) the stream ends;
/// after any other (a timeout, an outage) the item is kept and the next poll acquires for
/// it again after a backoff. Units an acquire may have taken before it failed
/// ([`ErrorKind::OutcomeUnknown`](crate::ErrorKind::OutcomeUnknown)) are taken again for
/// the item: the stream runs below the rate, never above it.
///
/// # Examples
///
/// ```
/// # use ydb_coordination::emulator::Emulator;
/// use futures::StreamExt;
/// use ydb_coordination::{Client, config::NodeConfig, rate_limiter::ResourceSettings};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let emulator = Emulator::builder().start().await?;
/// # let client = Client::connect(&emulator.connection_string()).await?;
/// # client.create_node("quotas", NodeConfig::new()).await?;
/// let limiter = client.rate_limiter("quotas");
/// limiter.create_resource("crawl", ResourceSettings::new().max_units_per_second(50.0)).await?;
/// let pages = futures::stream::iter(1..=5);
/// let mut paced = limiter.limit_stream("crawl", 1, pages);
/// while let Some(page) = paced.next().await {
///     let page = page?; // an error: the units could not be taken
///     # let _ = page;
/// }
/// # Ok(())
/// # }
/// ```
#[must_use = "a stream does nothing unless polled"]
pub struct RateLimited<S: Stream> {
    limiter: RateLimiter,
    path: Arc<str>,
    units: u64,
    inner: Pin<Box<S>>,
    /// The item pulled from `inner`, waiting for its units.
    item: Option<S::Item>,
    acquiring: Option<BoxFuture<'static, Result<()>>>,
    /// The wait before the next acquire after a failed one, and how many failed in a row.
    pause: Option<Pin<Box<tokio::time::Sleep>>>,
    failures: u32,
    /// An acquire failed for good: nothing more is yielded.
    ended: bool,
}

// Nothing is pinned in place: the inner stream and the acquire are boxed, the item is
// moved. A safe impl.
impl<S: Stream> Unpin for RateLimited<S> {}

impl<S: Stream> fmt::Debug for RateLimited<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimited")
            .field("node", &self.limiter.node())
            .field("resource", &self.path)
            .field("units", &self.units)
            .field("waiting", &self.item.is_some())
            .field("ended", &self.ended)
            .finish_non_exhaustive()
    }
}

impl<S: Stream> RateLimited<S> {
    pub(super) fn new(limiter: RateLimiter, path: &str, units: u64, inner: S) -> Self {
        Self {
            limiter,
            path: path.into(),
            units,
            inner: Box::pin(inner),
            item: None,
            acquiring: None,
            pause: None,
            failures: 0,
            ended: false,
        }
    }

    /// The inner stream back (an item waiting for its units is dropped with the wrapper).
    pub fn into_inner(self) -> Pin<Box<S>> {
        self.inner
    }
}

impl<S: Stream> Stream for RateLimited<S> {
    type Item = Result<S::Item>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.ended {
            return Poll::Ready(None);
        }
        if let Some(pause) = &mut this.pause {
            if pause.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            this.pause = None;
        }
        if this.item.is_none() {
            match this.inner.as_mut().poll_next(cx) {
                Poll::Ready(Some(item)) => this.item = Some(item),
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            }
        }
        let acquiring = this.acquiring.get_or_insert_with(|| {
            let (limiter, path, units) = (this.limiter.clone(), this.path.clone(), this.units);
            Box::pin(async move { limiter.acquire(&path, units).await })
        });
        match acquiring.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(result) => {
                this.acquiring = None;
                match result {
                    Ok(()) => {
                        this.failures = 0;
                        Poll::Ready(this.item.take().map(Ok))
                    }
                    Err(e) => {
                        if e.retry_rule() == RetryRule::Never {
                            this.ended = true;
                            this.item = None;
                        } else {
                            let wait = Backoff::default().delay(this.failures, rand::random());
                            this.failures = this.failures.saturating_add(1);
                            this.pause = Some(Box::pin(tokio::time::sleep(wait)));
                        }
                        Poll::Ready(Some(Err(e)))
                    }
                }
            }
        }
    }
}
