//! A [`tower`](https://docs.rs/tower) layer that takes rate-limiter units for each request
//! (feature `tower`): [`RateLimitLayer`] makes a [`RateLimitService`], whose requests fail
//! with [`RateLimitError`] when their units are not available in time.
//!
//! Every process that serves through a layer of the same resource shares the resource's
//! rate: the limit is fleet-wide, not per process. A server maps
//! [`RateLimitError::Limited`] to `429 Too Many Requests`, [`RateLimitError::LimiterFailed`]
//! to `503 Service Unavailable` (or `500` for a resource that does not exist), and passes
//! [`RateLimitError::Inner`] on as it would without the layer. `examples/rate_limit_axum.rs`
//! in the repository is an `axum` server fleet behind one layer each.
//!
//! # Examples
//!
//! ```
//! # use ydb_coordination::emulator::Emulator;
//! use std::convert::Infallible;
//! use tower::{Layer, ServiceExt, service_fn};
//! use ydb_coordination::rate_limiter::layer::{RateLimitError, RateLimitLayer};
//! use ydb_coordination::{Client, config::NodeConfig, rate_limiter::ResourceSettings};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let emulator = Emulator::builder().start().await?;
//! # let client = Client::connect(&emulator.connection_string()).await?;
//! # client.create_node("quotas", NodeConfig::new()).await?;
//! let limiter = client.rate_limiter("quotas");
//! limiter.create_resource("api", ResourceSettings::new().max_units_per_second(1.0)).await?;
//!
//! let hello = service_fn(|name: String| async move { Ok::<_, Infallible>(format!("hello, {name}")) });
//! let service = RateLimitLayer::new(limiter, "api").layer(hello);
//! // The resource's first unit is there; the next one is a second away.
//! assert_eq!(service.clone().oneshot("ann".to_string()).await?, "hello, ann");
//! match service.oneshot("bob".to_string()).await {
//!     Err(RateLimitError::Limited(_)) => { /* 429 Too Many Requests */ }
//!     Err(RateLimitError::LimiterFailed(e)) => return Err(e.into()), // 503
//!     Err(RateLimitError::Inner(e)) => match e {},
//!     Ok(_) => { /* a second passed in between: the next unit had come */ }
//! }
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use tower_layer::Layer;
use tower_service::Service;

use super::RateLimiter;
use crate::error::{Error, ErrorKind};

/// How many units a request takes.
type UnitsOf<Req> = Arc<dyn Fn(&Req) -> u64 + Send + Sync>;

/// A [`Layer`] that makes each request of the service it wraps take units of one resource of
/// a coordination node's rate limiter before it reaches the service ([`RateLimitService`]).
///
/// A request takes one unit unless [`units`](RateLimitLayer::units) or
/// [`units_from`](RateLimitLayer::units_from) say otherwise, and is answered at once when
/// its units are not available now unless [`wait`](RateLimitLayer::wait) allows a wait.
/// `Req` is the request type of the wrapped service, usually inferred from it.
///
/// Cheap to clone: it shares the [`RateLimiter`]'s connections.
///
/// # Examples
///
/// Units from the request, waiting up to 200 ms for them:
///
/// ```
/// # use ydb_coordination::emulator::Emulator;
/// use std::time::Duration;
/// use tower::{Layer, ServiceExt, service_fn};
/// use ydb_coordination::rate_limiter::layer::RateLimitLayer;
/// use ydb_coordination::{Client, config::NodeConfig, rate_limiter::ResourceSettings};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let emulator = Emulator::builder().start().await?;
/// # let client = Client::connect(&emulator.connection_string()).await?;
/// # client.create_node("quotas", NodeConfig::new()).await?;
/// let limiter = client.rate_limiter("quotas");
/// let bytes_per_second = ResourceSettings::new().max_units_per_second(1_000_000.0);
/// limiter.create_resource("upload", bytes_per_second).await?;
///
/// let layer = RateLimitLayer::new(limiter, "upload")
///     .units_from(|body: &Vec<u8>| body.len() as u64)
///     .wait(Duration::from_millis(200));
/// let store = service_fn(|body: Vec<u8>| async move {
///     Ok::<_, std::io::Error>(body.len())
/// });
/// let stored = layer.layer(store).oneshot(vec![0; 1024]).await?;
/// assert_eq!(stored, 1024);
/// # Ok(())
/// # }
/// ```
pub struct RateLimitLayer<Req> {
    limiter: RateLimiter,
    resource: Arc<str>,
    units: UnitsOf<Req>,
    wait: Duration,
}

impl<Req> RateLimitLayer<Req> {
    /// A layer that takes one unit of the resource `resource` (a path such as `api` or
    /// `api/tenant-a`) of `limiter`'s coordination node for each request, answering at once
    /// when the unit is not available now.
    ///
    /// The path is checked when the first request asks for units: a bad one fails every
    /// request with [`RateLimitError::LimiterFailed`] of [`ErrorKind::InvalidArgument`].
    ///
    /// # Examples
    ///
    /// ```
    /// # use ydb_coordination::emulator::Emulator;
    /// use ydb_coordination::rate_limiter::layer::RateLimitLayer;
    /// use ydb_coordination::{Client, config::NodeConfig};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let emulator = Emulator::builder().start().await?;
    /// # let client = Client::connect(&emulator.connection_string()).await?;
    /// # client.create_node("quotas", NodeConfig::new()).await?;
    /// let layer: RateLimitLayer<String> = RateLimitLayer::new(client.rate_limiter("quotas"), "api");
    /// # let _ = layer;
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(limiter: RateLimiter, resource: &str) -> Self {
        Self {
            limiter,
            resource: resource.into(),
            units: Arc::new(|_: &Req| 1),
            wait: Duration::ZERO,
        }
    }

    /// Each request takes `units` units (instead of one). A request of zero units passes
    /// without asking the rate limiter.
    ///
    /// # Examples
    ///
    /// ```
    /// # use ydb_coordination::emulator::Emulator;
    /// use ydb_coordination::rate_limiter::layer::RateLimitLayer;
    /// use ydb_coordination::{Client, config::NodeConfig};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let emulator = Emulator::builder().start().await?;
    /// # let client = Client::connect(&emulator.connection_string()).await?;
    /// # client.create_node("quotas", NodeConfig::new()).await?;
    /// // A search costs five units of the shared budget.
    /// let layer: RateLimitLayer<String> =
    ///     RateLimitLayer::new(client.rate_limiter("quotas"), "api").units(5);
    /// # let _ = layer;
    /// # Ok(())
    /// # }
    /// ```
    pub fn units(mut self, units: u64) -> Self {
        self.units = Arc::new(move |_: &Req| units);
        self
    }

    /// Each request takes the units `units` computes from it (instead of one), before the
    /// request reaches the service. A request of zero units passes without asking the rate
    /// limiter.
    ///
    /// # Examples
    ///
    /// ```
    /// # use ydb_coordination::emulator::Emulator;
    /// use ydb_coordination::rate_limiter::layer::RateLimitLayer;
    /// use ydb_coordination::{Client, config::NodeConfig};
    ///
    /// struct Batch {
    ///     rows: Vec<String>,
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let emulator = Emulator::builder().start().await?;
    /// # let client = Client::connect(&emulator.connection_string()).await?;
    /// # client.create_node("quotas", NodeConfig::new()).await?;
    /// // A unit a row; an empty batch costs nothing.
    /// let layer = RateLimitLayer::new(client.rate_limiter("quotas"), "writes")
    ///     .units_from(|batch: &Batch| batch.rows.len() as u64);
    /// # let _ = layer;
    /// # Ok(())
    /// # }
    /// ```
    pub fn units_from<F>(mut self, units: F) -> Self
    where
        F: Fn(&Req) -> u64 + Send + Sync + 'static,
    {
        self.units = Arc::new(units);
        self
    }

    /// A request waits up to `wait` for its units (as
    /// [`RateLimiter::acquire_timeout`] does; at most
    /// [`MAX_ACQUIRE_WAIT`](crate::rate_limiter::MAX_ACQUIRE_WAIT)) before it fails with
    /// [`RateLimitError::Limited`]. Zero, the default, answers at once (as
    /// [`RateLimiter::try_acquire`] does).
    ///
    /// A wait holds the request, and the readiness its service gave it, for up to `wait`,
    /// plus a short margin when the server is slow to answer.
    ///
    /// # Examples
    ///
    /// ```
    /// # use ydb_coordination::emulator::Emulator;
    /// use std::time::Duration;
    /// use ydb_coordination::rate_limiter::layer::RateLimitLayer;
    /// use ydb_coordination::{Client, config::NodeConfig};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let emulator = Emulator::builder().start().await?;
    /// # let client = Client::connect(&emulator.connection_string()).await?;
    /// # client.create_node("quotas", NodeConfig::new()).await?;
    /// // Smooth out short bursts: a request waits up to half a second for its unit.
    /// let layer: RateLimitLayer<String> = RateLimitLayer::new(client.rate_limiter("quotas"), "api")
    ///     .wait(Duration::from_millis(500));
    /// # let _ = layer;
    /// # Ok(())
    /// # }
    /// ```
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }
}

impl<Req> Clone for RateLimitLayer<Req> {
    fn clone(&self) -> Self {
        Self {
            limiter: self.limiter.clone(),
            resource: self.resource.clone(),
            units: self.units.clone(),
            wait: self.wait,
        }
    }
}

impl<Req> fmt::Debug for RateLimitLayer<Req> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("node", &self.limiter.node())
            .field("resource", &self.resource)
            .field("wait", &self.wait)
            .finish_non_exhaustive()
    }
}

impl<S, Req> Layer<S> for RateLimitLayer<Req> {
    type Service = RateLimitService<S, Req>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimitService {
            inner,
            layer: self.clone(),
        }
    }
}

/// A [`Service`] whose requests take units of a rate-limiter resource before they reach the
/// inner service `S`. Made by [`RateLimitLayer`].
///
/// [`poll_ready`](Service::poll_ready) is the inner service's: the rate limiter is asked in
/// the future [`call`](Service::call) returns, not before, so readiness never reserves units.
/// That future takes the units first and calls the inner service only once they are taken;
/// when they are not, it fails with [`RateLimitError`] and the request never reaches the
/// inner service.
///
/// # Examples
///
/// ```
/// # use ydb_coordination::emulator::Emulator;
/// use std::convert::Infallible;
/// use tower::{Layer, Service, ServiceExt, service_fn};
/// use ydb_coordination::rate_limiter::layer::RateLimitLayer;
/// use ydb_coordination::{Client, config::NodeConfig, rate_limiter::ResourceSettings};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let emulator = Emulator::builder().start().await?;
/// # let client = Client::connect(&emulator.connection_string()).await?;
/// # client.create_node("quotas", NodeConfig::new()).await?;
/// let limiter = client.rate_limiter("quotas");
/// limiter.create_resource("api", ResourceSettings::new().max_units_per_second(100.0)).await?;
/// let double = service_fn(|n: u32| async move { Ok::<_, Infallible>(n * 2) });
/// let mut service = RateLimitLayer::new(limiter, "api").layer(double);
/// let answer = service.ready().await?.call(21).await?;
/// assert_eq!(answer, 42);
/// # Ok(())
/// # }
/// ```
///
/// # Errors
///
/// [`RateLimitError::Limited`] when the units were not available in time (nothing was
/// taken), [`RateLimitError::LimiterFailed`] when the rate limiter could not say (see its
/// docs), [`RateLimitError::Inner`] for the inner service's own errors, from
/// [`poll_ready`](Service::poll_ready) or from the call.
///
/// # Cancel safety
///
/// Nothing is asked in [`call`](Service::call): a future dropped before its first poll
/// takes no units. A future dropped while its units are asked for does not withdraw the
/// request on the server (as with [`RateLimiter::acquire`]): the units may still be taken,
/// and count as used without the request being served, so a service errs below the rate,
/// never above it. The inner service made ready by `poll_ready` moves into the future (a
/// clone of it stays for the next `poll_ready`, as tower's services that call their inner
/// service in a future do), so dropping the future gives back whatever its readiness held,
/// such as a concurrency-limit permit or a buffer slot.
pub struct RateLimitService<S, Req> {
    inner: S,
    layer: RateLimitLayer<Req>,
}

impl<S: Clone, Req> Clone for RateLimitService<S, Req> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            layer: self.layer.clone(),
        }
    }
}

impl<S: fmt::Debug, Req> fmt::Debug for RateLimitService<S, Req> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitService")
            .field("inner", &self.inner)
            .field("layer", &self.layer)
            .finish()
    }
}

impl<S, Req> Service<Req> for RateLimitService<S, Req>
where
    S: Service<Req> + Clone + Send + 'static,
    S::Future: Send,
    Req: Send + 'static,
{
    type Response = S::Response;
    type Error = RateLimitError<S::Error>;
    type Future = BoxFuture<'static, Result<S::Response, RateLimitError<S::Error>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(RateLimitError::Inner)
    }

    fn call(&mut self, request: Req) -> Self::Future {
        let units = (self.layer.units)(&request);
        // The service `poll_ready` made ready goes with the request; its clone takes its
        // place and is made ready by the next `poll_ready`.
        let clone = self.inner.clone();
        let mut ready = std::mem::replace(&mut self.inner, clone);
        let limiter = self.layer.limiter.clone();
        let resource = self.layer.resource.clone();
        let wait = self.layer.wait;
        Box::pin(async move {
            take(&limiter, &resource, units, wait).await?;
            ready.call(request).await.map_err(RateLimitError::Inner)
        })
    }
}

/// Takes `units` of `resource`, waiting up to `wait` (zero: not at all); the failure in the
/// layer's words.
async fn take<E>(
    limiter: &RateLimiter,
    resource: &str,
    units: u64,
    wait: Duration,
) -> Result<(), RateLimitError<E>> {
    if units == 0 {
        return Ok(());
    }
    if wait.is_zero() {
        return match limiter.try_acquire(resource, units).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(RateLimitError::Limited(Error::new(
                ErrorKind::NotAcquired,
                format!(
                    "{units} units of rate-limiter resource {resource:?} are not available \
                     now; nothing was taken"
                ),
            ))),
            Err(e) => Err(RateLimitError::LimiterFailed(e)),
        };
    }
    match limiter.acquire_timeout(resource, units, wait).await {
        Ok(true) => Ok(()),
        Ok(false) => Err(RateLimitError::Limited(Error::new(
            ErrorKind::NotAcquired,
            format!(
                "{units} units of rate-limiter resource {resource:?} were not available within \
                 {wait:?}; nothing was taken"
            ),
        ))),
        Err(e) => Err(RateLimitError::LimiterFailed(e)),
    }
}

/// Why a [`RateLimitService`] did not answer a request: its units were not available in time
/// ([`Limited`](RateLimitError::Limited)), the rate limiter could not be asked
/// ([`LimiterFailed`](RateLimitError::LimiterFailed)), or the inner service failed
/// ([`Inner`](RateLimitError::Inner)).
///
/// Only [`Limited`](RateLimitError::Limited) means "over the rate" (HTTP 429): a rate limiter
/// that cannot be reached is never read as a limit.
///
/// # Examples
///
/// An HTTP status for each failure, as a server would answer:
///
/// ```
/// use ydb_coordination::rate_limiter::layer::RateLimitError;
/// use ydb_coordination::{Error, ErrorKind};
///
/// fn status(err: &RateLimitError<std::io::Error>) -> u16 {
///     match err {
///         RateLimitError::Limited(_) => 429,
///         RateLimitError::LimiterFailed(e) if e.kind() == ErrorKind::InvalidArgument => 500,
///         RateLimitError::LimiterFailed(_) => 503,
///         RateLimitError::Inner(_) => 500,
///     }
/// }
///
/// let busy = RateLimitError::Limited(Error::new(ErrorKind::NotAcquired, "busy"));
/// assert_eq!(status(&busy), 429);
/// assert!(busy.is_limited());
/// let down = RateLimitError::LimiterFailed(Error::new(ErrorKind::Unavailable, "down"));
/// assert_eq!(status(&down), 503);
/// assert!(!down.is_limited());
/// ```
#[derive(Debug)]
pub enum RateLimitError<E> {
    /// The request's units were not available within the layer's
    /// [`wait`](RateLimitLayer::wait): nothing was taken, and the request did not reach the
    /// inner service. The error's kind is [`ErrorKind::NotAcquired`]. HTTP's
    /// `429 Too Many Requests`.
    Limited(Error),
    /// The rate limiter did not say whether the units are available, and the request did not
    /// reach the inner service: no endpoint answered ([`ErrorKind::Unavailable`],
    /// [`ErrorKind::Transport`]), the answer did not come in time and the units may have been
    /// taken ([`ErrorKind::OutcomeUnknown`]), the resource does not exist or its path is bad
    /// ([`ErrorKind::InvalidArgument`]), credentials were refused, and so on: see
    /// [`RateLimiter::acquire_timeout`]. Never [`ErrorKind::NotAcquired`]. HTTP's
    /// `503 Service Unavailable`, or `500` for a resource that does not exist.
    LimiterFailed(Error),
    /// The inner service's error, from its `poll_ready` or its call, as it was.
    Inner(E),
}

impl<E> RateLimitError<E> {
    /// Whether this is [`Limited`](RateLimitError::Limited): over the rate.
    ///
    /// # Examples
    ///
    /// ```
    /// use ydb_coordination::rate_limiter::layer::RateLimitError;
    /// use ydb_coordination::{Error, ErrorKind};
    ///
    /// let inner: RateLimitError<std::io::Error> =
    ///     RateLimitError::Inner(std::io::Error::other("disk full"));
    /// assert!(!inner.is_limited());
    /// let busy: RateLimitError<std::io::Error> =
    ///     RateLimitError::Limited(Error::new(ErrorKind::NotAcquired, "busy"));
    /// assert!(busy.is_limited());
    /// ```
    pub fn is_limited(&self) -> bool {
        matches!(self, Self::Limited(_))
    }
}

impl<E: fmt::Display> fmt::Display for RateLimitError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // The rate limiter's error is the source: not repeated here.
            Self::Limited(_) => {
                f.write_str("rate limited: the request's units were not available in time")
            }
            Self::LimiterFailed(_) => {
                f.write_str("the rate limiter could not be asked for the request's units")
            }
            Self::Inner(e) => e.fmt(f),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for RateLimitError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Limited(e) | Self::LimiterFailed(e) => Some(e),
            // Displayed as it is: its own source comes next.
            Self::Inner(e) => e.source(),
        }
    }
}
