//! YDB's distributed rate limiter: resources of a coordination node, each a token bucket in
//! a tree (hierarchical DRR), and the units a fleet takes from them.
//!
//! `mod.rs` has [`RateLimiter`] (the calls), `settings.rs` a resource's settings and
//! description, `limited.rs` [`RateLimited`] (a stream paced by a resource), `layer.rs` the
//! `tower` layer (feature `tower`).

#[cfg(feature = "tower")]
pub mod layer;
mod limited;
mod metering;
mod settings;

pub use limited::RateLimited;
pub use metering::{Metering, MeteringMetric};
pub use settings::{ResourceDescription, ResourceSettings};

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tonic::transport::Channel;
use tracing::Instrument;
use ydb_coordination_proto::rate_limiter::v1::rate_limiter_service_client::RateLimiterServiceClient;
use ydb_coordination_proto::rate_limiter::{
    AcquireResourceRequest, AlterResourceRequest, CreateResourceRequest, DescribeResourceRequest,
    DescribeResourceResult, DropResourceRequest, ListResourcesRequest, ListResourcesResult,
    Operation, OperationParams, acquire_resource_request::Units,
};
use ydb_grpc::google_proto_workaround::protobuf::Duration as ProtoDuration;

use crate::bound::{RoundTrip, RoundTrips};
use crate::client::Client;
use crate::error::{Error, ErrorKind, Result, RetryRule, StatusCode};
use crate::retry::{self, Attempts};
use crate::transport;

/// Units granted, by how they were taken (`mode`: `required` waits for them, `used` reports
/// them after the fact).
const UNITS: &str = "ydb_coordination_rate_limiter_units_total";
/// Acquires by result (`granted`, `timed_out`, `error`).
const ACQUIRES: &str = "ydb_coordination_rate_limiter_acquires_total";
/// Seconds from an acquire call to its grant.
const WAIT: &str = "ydb_coordination_rate_limiter_wait_seconds";

/// The longest wait the server keeps an acquire for (YDB's quoter caps a deadline at a day).
pub const MAX_ACQUIRE_WAIT: Duration = Duration::from_secs(24 * 3600);

/// The rate-limiter resources of one coordination node
/// (`Ydb.RateLimiter.V1.RateLimiterService`): create, alter, drop, list and describe them,
/// and take units from them.
///
/// A resource is a path in a tree (`api`, `api/tenant-a`): a root sets the rate
/// ([`ResourceSettings::max_units_per_second`]), children share their parent's rate round
/// robin and may cap their own. An acquire of `required` units waits until the units are
/// available ([`acquire`](RateLimiter::acquire)); [`report_used`](RateLimiter::report_used)
/// reports units consumed already, which never waits and may put the resource into debt
/// that later acquires wait off.
///
/// Cheap to clone: it shares the client's connections.
///
/// # Examples
///
/// ```
/// # use ydb_coordination::emulator::Emulator;
/// use ydb_coordination::{Client, config::NodeConfig, rate_limiter::ResourceSettings};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let emulator = Emulator::builder().start().await?;
/// # let client = Client::connect(&emulator.connection_string()).await?;
/// client.create_node("quotas", NodeConfig::new()).await?;
/// let limiter = client.rate_limiter("quotas");
/// limiter
///     .create_resource("payments", ResourceSettings::new().max_units_per_second(20.0))
///     .await?;
/// limiter.acquire("payments", 1).await?; // one call to the payment provider
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct RateLimiter {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    client: Client,
    /// The node's absolute path.
    node: String,
    /// The round trips of calls the server answered at once: what an acquire waits past
    /// its wait for the server's answer.
    trips: RoundTrips,
}

impl RateLimiter {
    pub(crate) fn new(client: Client, node: &str) -> Self {
        // `/a/b`, as an acquire needs it (the other calls take any spelling; an acquire of
        // `/local/quotas/` is INTERNAL_ERROR on YDB).
        let full = client.full_path(node);
        let parts: Vec<&str> = full.split('/').filter(|p| !p.is_empty()).collect();
        let node = format!("/{}", parts.join("/"));
        Self {
            inner: Arc::new(Inner {
                client,
                node,
                trips: RoundTrips::default(),
            }),
        }
    }

    /// The coordination node's absolute path.
    pub fn node(&self) -> &str {
        &self.inner.node
    }

    /// Creates the resource `path` (`root` or `root/child/...`) with `settings`. A root
    /// needs [`max_units_per_second`](ResourceSettings::max_units_per_second); a child
    /// without it takes its parent's.
    ///
    /// Retried as an idempotent call; a retry after an attempt that went through reports
    /// [`ErrorKind::AlreadyExists`].
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`] for a path that is not canonical (empty, a leading,
    /// trailing or double `/`) or a setting that is not finite (nothing is sent), or settings
    /// the server refuses (`BAD_REQUEST`: a root without a rate, a negative rate, a parent
    /// that does not exist); [`ErrorKind::AlreadyExists`]; [`ErrorKind::NotFound`] (no
    /// such node).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not withdraw a request already sent.
    pub async fn create_resource(&self, path: &str, settings: ResourceSettings) -> Result<()> {
        let what = format!("create rate-limiter resource {path:?}");
        let resource = settings.to_proto(checked_path(path, &what)?, &what)?;
        let message = CreateResourceRequest {
            operation_params: None,
            coordination_node_path: self.inner.node.clone(),
            resource: Some(resource),
        };
        self.admin(&what, message, |mut c, r| async move {
            Ok(c.create_resource(r).await?.into_inner().operation)
        })
        .await
        .map(drop)
    }

    /// Replaces the settings of the resource `path` with `settings` as a whole: a setting
    /// left unset is unset after the call (taken from the parent), not kept. To change one
    /// setting, [`describe_resource`](RateLimiter::describe_resource) first and alter its
    /// [`settings`](ResourceDescription::settings).
    ///
    /// # Errors
    ///
    /// As [`create_resource`](RateLimiter::create_resource), with [`ErrorKind::NotFound`]
    /// for a resource that does not exist.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not withdraw a request already sent.
    pub async fn alter_resource(&self, path: &str, settings: ResourceSettings) -> Result<()> {
        let what = format!("alter rate-limiter resource {path:?}");
        let resource = settings.to_proto(checked_path(path, &what)?, &what)?;
        let message = AlterResourceRequest {
            operation_params: None,
            coordination_node_path: self.inner.node.clone(),
            resource: Some(resource),
        };
        self.admin(&what, message, |mut c, r| async move {
            Ok(c.alter_resource(r).await?.into_inner().operation)
        })
        .await
        .map(drop)
    }

    /// Drops the resource `path`. A resource with children cannot be dropped.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::NotFound`] for a resource that does not exist (also when an earlier
    /// attempt of this call dropped it but its answer was lost); [`ErrorKind::InvalidArgument`]
    /// for a path that is not canonical, or a resource with children.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not withdraw a request already sent.
    pub async fn drop_resource(&self, path: &str) -> Result<()> {
        let what = format!("drop rate-limiter resource {path:?}");
        let message = DropResourceRequest {
            operation_params: None,
            coordination_node_path: self.inner.node.clone(),
            resource_path: checked_path(path, &what)?.to_string(),
        };
        self.admin(&what, message, |mut c, r| async move {
            Ok(c.drop_resource(r).await?.into_inner().operation)
        })
        .await
        .map(drop)
    }

    /// With `recursive`, the paths of `path` and all its descendants; without it, `path`
    /// alone (if it exists). With an empty `path`: the roots, or with `recursive` every
    /// resource. The order is the server's (unspecified).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::NotFound`] for a resource or node that does not exist;
    /// [`ErrorKind::InvalidArgument`] for a path that is not canonical.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn list_resources(&self, path: &str, recursive: bool) -> Result<Vec<String>> {
        let what = format!("list rate-limiter resources under {path:?}");
        if !path.is_empty() {
            checked_path(path, &what)?;
        }
        let message = ListResourcesRequest {
            operation_params: None,
            coordination_node_path: self.inner.node.clone(),
            resource_path: path.to_string(),
            recursive,
        };
        let operation = self
            .admin(&what, message, |mut c, r| async move {
                Ok(c.list_resources(r).await?.into_inner().operation)
            })
            .await?;
        let result: ListResourcesResult = transport::unpack(Some(operation), &what)?;
        Ok(result.resource_paths)
    }

    /// The settings the resource `path` was created or last altered with (unset ones are
    /// taken from its parent, which this does not show).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::NotFound`] for a resource that does not exist;
    /// [`ErrorKind::InvalidArgument`] for a path that is not canonical.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn describe_resource(&self, path: &str) -> Result<ResourceDescription> {
        let what = format!("describe rate-limiter resource {path:?}");
        let message = DescribeResourceRequest {
            operation_params: None,
            coordination_node_path: self.inner.node.clone(),
            resource_path: checked_path(path, &what)?.to_string(),
        };
        let operation = self
            .admin(&what, message, |mut c, r| async move {
                Ok(c.describe_resource(r).await?.into_inner().operation)
            })
            .await?;
        let result: DescribeResourceResult = transport::unpack(Some(operation), &what)?;
        let resource = result.resource.ok_or_else(|| {
            Error::new(
                ErrorKind::Protocol,
                format!("{what}: the server described no resource"),
            )
        })?;
        Ok(ResourceDescription::from_proto(resource))
    }

    /// Takes `units` from the resource `path`, waiting until they are available for up to
    /// the client's [request timeout](crate::ClientBuilder::request_timeout).
    ///
    /// # Errors
    ///
    /// As [`acquire_timeout`](RateLimiter::acquire_timeout).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not withdraw the acquire on the server: it may still take
    /// the units (YDB's quoter keeps a request until it is granted or its wait ends).
    pub async fn acquire(&self, path: &str, units: u64) -> Result<()> {
        let wait = self
            .inner
            .client
            .transport()
            .request_timeout()
            .min(MAX_ACQUIRE_WAIT);
        if self.acquire_timeout(path, units, wait).await? {
            return Ok(());
        }
        Err(Error::new(
            ErrorKind::NotAcquired,
            format!(
                "{units} units of rate-limiter resource {path:?} were not available within the \
                 request timeout ({wait:?}); nothing was taken: try again later, or ask for fewer \
                 units"
            ),
        ))
    }

    /// Takes `units` from the resource `path`, waiting at most `wait` (at most
    /// [`MAX_ACQUIRE_WAIT`], the server's cap) until they are available: `true` when they
    /// were taken, `false` when they were not available within `wait` (nothing was taken),
    /// as [`try_acquire`](RateLimiter::try_acquire) and a recipe's `_timeout` form's
    /// `None`. Units over the
    /// resource's bucket are granted into debt once the bucket is full: the acquires after
    /// it wait the debt off. Acquires of one resource are granted in the order they reached
    /// the server's node.
    ///
    /// The server is asked to give up the wait before the call's own deadline, so that
    /// `false` means nothing was taken. An acquire is not idempotent: it is
    /// repeated only after failures that say it was not carried out (the endpoint was
    /// unreachable, `UNAVAILABLE`, `OVERLOADED`).
    ///
    /// # Examples
    ///
    /// ```
    /// # use ydb_coordination::emulator::Emulator;
    /// use std::time::Duration;
    /// use ydb_coordination::{Client, config::NodeConfig, rate_limiter::ResourceSettings};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let emulator = Emulator::builder().start().await?;
    /// # let client = Client::connect(&emulator.connection_string()).await?;
    /// # client.create_node("quotas", NodeConfig::new()).await?;
    /// let limiter = client.rate_limiter("quotas");
    /// let one_per_second = ResourceSettings::new().max_units_per_second(1.0);
    /// limiter.create_resource("reports", one_per_second).await?;
    /// if limiter.acquire_timeout("reports", 1, Duration::from_secs(5)).await? {
    ///     /* send the report */
    /// } else {
    ///     /* busy: try later */
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`] for a `wait` over [`MAX_ACQUIRE_WAIT`] (the server
    /// would cut it short), as a recipe refuses an out-of-range timeout.
    /// [`ErrorKind::OutcomeUnknown`] when the units may have been taken: the answer
    /// did not come (the connection broke after the request went out, or no answer within
    /// `wait`, a round trip and 200 ms: the rule of every bounded call, see
    /// [`Acquiring`](crate::Acquiring)), or the server's operation timer answered, which can
    /// race a grant; count the units as used rather than acquire them again (not
    /// [`ErrorKind::Unavailable`]: the server may have taken them).
    /// [`ErrorKind::InvalidArgument`] for a path that is not canonical or a resource
    /// that does not exist (YDB answers `BAD_REQUEST` for both); [`ErrorKind::Unavailable`]
    /// and transport errors when no endpoint answered.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not withdraw the acquire on the server: it may still take
    /// the units (YDB's quoter keeps a request until it is granted or its wait ends).
    pub async fn acquire_timeout(&self, path: &str, units: u64, wait: Duration) -> Result<bool> {
        if wait > MAX_ACQUIRE_WAIT {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "a rate-limiter acquire waits at most {MAX_ACQUIRE_WAIT:?}, not {wait:?}; \
                     wait less, or ask again after it"
                ),
            ));
        }
        let what = format!("acquire {units} units of rate-limiter resource {path:?}");
        match self.take(path, Units::Required(units), wait, &what).await {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == ErrorKind::NotAcquired => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Takes `units` from the resource `path` if they are available now, without waiting:
    /// `false` if they are not (nothing was taken). The request carries no operation
    /// timeout, which YDB reads as "within about a millisecond": on a YDB node that has not
    /// served the resource yet, setting it up can take longer, so the first try there can
    /// be `false` with units available.
    ///
    /// # Errors
    ///
    /// As [`acquire_timeout`](RateLimiter::acquire_timeout).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not withdraw the acquire on the server: it may still take
    /// the units.
    pub async fn try_acquire(&self, path: &str, units: u64) -> Result<bool> {
        let what = format!("try to acquire {units} units of rate-limiter resource {path:?}");
        match self
            .take(path, Units::Required(units), Duration::ZERO, &what)
            .await
        {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == ErrorKind::NotAcquired => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Reports `units` of the resource `path` as consumed already (work measured after the
    /// fact: bytes sent, rows read). It never waits; units over the bucket put the resource
    /// into debt, which the acquires after it wait off.
    ///
    /// # Errors
    ///
    /// As [`acquire_timeout`](RateLimiter::acquire_timeout), but never
    /// [`ErrorKind::NotAcquired`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not withdraw a report already sent.
    pub async fn report_used(&self, path: &str, units: u64) -> Result<()> {
        let what = format!("report {units} used units of rate-limiter resource {path:?}");
        // `used` is granted at once; the wait only bounds the call.
        let wait = self.inner.client.transport().attempt_timeout();
        self.take(path, Units::Used(units), wait, &what).await
    }

    /// Paces `stream`: each item waits for `units` of the resource `path` before it is
    /// yielded (see [`RateLimited`]).
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
    /// let settings = ResourceSettings::new().max_units_per_second(100.0);
    /// limiter.create_resource("emails", settings).await?;
    /// let sent: Vec<_> = limiter
    ///     .limit_stream("emails", 1, futures::stream::iter(["a@x", "b@x", "c@x"]))
    ///     .collect()
    ///     .await;
    /// assert_eq!(sent.len(), 3);
    /// # Ok(())
    /// # }
    /// ```
    pub fn limit_stream<S: futures::Stream>(
        &self,
        path: &str,
        units: u64,
        stream: S,
    ) -> RateLimited<S> {
        RateLimited::new(self.clone(), path, units, stream)
    }

    /// Runs `work` once `units` of the resource `path` are taken (waiting as
    /// [`acquire`](RateLimiter::acquire) does).
    ///
    /// # Errors
    ///
    /// The acquire's errors; `work` does not run then.
    ///
    /// # Cancel safety
    ///
    /// As [`acquire`](RateLimiter::acquire) while it waits for the units; then as `work`.
    pub async fn run<F: std::future::Future>(
        &self,
        path: &str,
        units: u64,
        work: F,
    ) -> Result<F::Output> {
        self.acquire(path, units).await?;
        Ok(work.await)
    }

    /// One `AcquireResource`: `units` of `path`, the server waiting at most `wait` (zero:
    /// not at all), with the metrics and the span. The error's kind says what was taken
    /// ([`outcome`]): [`ErrorKind::NotAcquired`] nothing, [`ErrorKind::OutcomeUnknown`] perhaps.
    async fn take(&self, path: &str, units: Units, wait: Duration, what: &str) -> Result<()> {
        let span = tracing::debug_span!("rate_limiter.acquire", resource = path, ?units);
        self.take_in_span(path, units, wait, what)
            .instrument(span)
            .await
    }

    async fn take_in_span(
        &self,
        path: &str,
        units: Units,
        wait: Duration,
        what: &str,
    ) -> Result<()> {
        let path = checked_path(path, what)?.to_string();
        let wait = wait.min(MAX_ACQUIRE_WAIT);
        let (amount, mode) = match units {
            Units::Required(n) => (n, "required"),
            Units::Used(n) => (n, "used"),
        };
        let message = AcquireResourceRequest {
            operation_params: None,
            coordination_node_path: self.inner.node.clone(),
            resource_path: path,
            units: Some(units),
        };
        // The server gives up its wait by `wait` from now; the call waits for that answer a
        // round trip and a moment longer (the rule of every bounded call, `crate::bound`),
        // and repeats only what was not carried out. A repeat asks the server for what is
        // left of the wait, so its answer still comes in time.
        let started = Instant::now();
        let limit = crate::bound::grace(self.inner.trips.round_trip()).saturating_add(wait);
        let attempts = Attempts {
            idempotent: false,
            budget: limit,
            per_attempt: limit,
        };
        let deadline = crate::clock::later(started, wait);
        let result = self
            .call(what, attempts, message, move |mut c, mut r| {
                let left = if wait.is_zero() {
                    Duration::ZERO
                } else {
                    deadline
                        .saturating_duration_since(Instant::now())
                        .max(Duration::from_millis(1))
                };
                r.get_mut().operation_params = Some(acquire_params(left));
                async move { Ok(c.acquire_resource(r).await?.into_inner().operation) }
            })
            .await;
        if wait.is_zero() && answered(&result) {
            self.inner.trips.note(started.elapsed());
        }
        let result = result.map_err(|e| outcome(e, wait));
        let outcome = match &result {
            Ok(_) => "granted",
            Err(e) if e.kind() == ErrorKind::NotAcquired => "timed_out",
            Err(_) => "error",
        };
        tracing::debug!(outcome, elapsed = ?started.elapsed(), "acquire answered");
        metrics::counter!(ACQUIRES, "result" => outcome, "mode" => mode).increment(1);
        if result.is_ok() {
            metrics::counter!(UNITS, "mode" => mode).increment(amount);
            metrics::histogram!(WAIT, "mode" => mode).record(started.elapsed().as_secs_f64());
        }
        result.map(drop)
    }

    /// A control-plane call: idempotent, within the client's timeouts.
    async fn admin<M, F, Fut>(&self, what: &str, message: M, send: F) -> Result<Operation>
    where
        M: Clone,
        F: Fn(RateLimiterServiceClient<Channel>, tonic::Request<M>) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<Option<Operation>, tonic::Status>>,
    {
        let attempts = Attempts::idempotent(self.inner.client.transport());
        let started = Instant::now();
        let result = self.call(what, attempts, message, send).await;
        if answered(&result) {
            self.inner.trips.note(started.elapsed());
        }
        result
    }

    /// One call of the service, repeated as `attempts` says.
    async fn call<M, F, Fut>(
        &self,
        what: &str,
        attempts: Attempts,
        message: M,
        send: F,
    ) -> Result<Operation>
    where
        M: Clone,
        F: Fn(RateLimiterServiceClient<Channel>, tonic::Request<M>) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<Option<Operation>, tonic::Status>>,
    {
        let transport = self.inner.client.transport();
        retry::operation(transport, what, message, attempts, |channel, request| {
            send(RateLimiterServiceClient::new(channel), request)
        })
        .await
    }
}

/// The operation params of an acquire that may wait `wait`: the server gives up at
/// `cancel_after` (answering `CANCELLED`: nothing was taken) before its operation timer
/// (`operation_timeout`, whose `TIMEOUT` can race a grant). No wait: no timeout at all,
/// which YDB reads as "only if available now".
fn acquire_params(wait: Duration) -> OperationParams {
    let (timeout, cancel_after) = if wait.is_zero() {
        (None, None)
    } else {
        (
            Some(proto_duration(wait.saturating_add(crate::bound::GRACE / 2))),
            Some(proto_duration(wait)),
        )
    };
    OperationParams {
        // SYNC: the answer carries the result.
        operation_mode: 1,
        operation_timeout: timeout,
        cancel_after,
        ..OperationParams::default()
    }
}

/// The longest `google.protobuf.Duration` (10,000 years).
const MAX_PROTO_SECONDS: u64 = 315_576_000_000;

fn proto_duration(d: Duration) -> ProtoDuration {
    let d = d.min(Duration::from_secs(MAX_PROTO_SECONDS));
    ProtoDuration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        // Below 10^9: fits.
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

/// Whether the server answered the call (its round trip is worth noting).
fn answered<T>(result: &Result<T>) -> bool {
    result
        .as_ref()
        .map_or_else(|e| e.status().is_some(), |_| true)
}

/// What a failed acquire took, in its kind:
/// - [`ErrorKind::NotAcquired`]: nothing. The server gave up the wait at `cancel_after`
///   (`CANCELLED`), or an acquire that may not wait (`wait` zero, no operation timer) was
///   not granted at once (`TIMEOUT`).
/// - [`ErrorKind::OutcomeUnknown`]: perhaps the units. The server's operation timer answered
///   (`TIMEOUT` while it could wait: YDB's timer can race a grant), no answer came in time,
///   or the connection broke after the request went out.
/// - Anything else as it is (the server refused it: nothing was taken).
fn outcome(err: Error, wait: Duration) -> Error {
    let server = err.status();
    let taken_maybe = match server {
        Some(StatusCode::Cancelled) => false,
        Some(StatusCode::Timeout) => !wait.is_zero(),
        Some(_) => return err,
        None => matches!(
            (err.kind(), err.retry_rule()),
            (ErrorKind::Timeout, _) | (ErrorKind::Transport, RetryRule::Idempotent)
        ),
    };
    if taken_maybe {
        Error::caused_by(
            ErrorKind::OutcomeUnknown,
            format!(
                "{err}; the units may have been taken: count them as used rather than \
                 acquire them again"
            ),
            &err,
        )
    } else if server.is_some() {
        Error::caused_by(ErrorKind::NotAcquired, format!("{err}"), &err)
    } else {
        err
    }
}

/// `path` if it is a canonical resource path (what the server accepts): not empty, no
/// leading, trailing or double `/`, only `a-z A-Z 0-9 . _ - / : #`.
fn checked_path<'p>(path: &'p str, what: &str) -> Result<&'p str> {
    let canonical = !path.is_empty() && path.split('/').all(|part| !part.is_empty());
    let allowed = path
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"._-/:#".contains(&b));
    if canonical && allowed {
        return Ok(path);
    }
    Err(Error::new(
        ErrorKind::InvalidArgument,
        format!(
            "{what}: {path:?} is not a resource path: use names of a-z, A-Z, 0-9, '.', '_', \
             '-', ':' or '#' joined by single '/' (no leading or trailing '/')"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_paths_are_canonical_or_refused() {
        for good in ["api", "api/tenant-a", "a.b_c-d:e#f/G9", "..", "x/./y"] {
            assert_eq!(checked_path(good, "t").ok(), Some(good), "{good}");
        }
        for bad in [
            "", "/api", "api/", "a//b", "/", "a b", "ключ", "a\nb", "a?b",
        ] {
            let kind = checked_path(bad, "t").err().map(|e| e.kind());
            assert_eq!(kind, Some(ErrorKind::InvalidArgument), "{bad:?}");
        }
    }

    #[test]
    fn an_acquire_asks_the_server_to_give_up_before_its_operation_timer() {
        let p = acquire_params(Duration::from_millis(1500));
        assert_eq!(p.operation_mode, 1);
        assert_eq!(
            p.cancel_after,
            Some(proto_duration(Duration::from_millis(1500)))
        );
        // Half the rule's grace on: the server's own timer answers within the call's bound.
        assert_eq!(
            p.operation_timeout,
            Some(proto_duration(Duration::from_millis(1600)))
        );
        // No wait: no timeout, which the server reads as "now or never".
        let now = acquire_params(Duration::ZERO);
        assert_eq!((now.operation_timeout, now.cancel_after), (None, None));
        // Even an unbounded wait is a valid protobuf duration.
        let long = proto_duration(Duration::MAX);
        assert_eq!(long.seconds, 315_576_000_000);
    }

    #[test]
    fn a_failed_acquire_says_whether_units_may_have_been_taken() {
        let kind = |err: Error, wait: u64| outcome(err, Duration::from_secs(wait)).kind();
        let status = |s| Error::from_status(s, "acquire");
        // The server gave up the wait, or a try was not granted at once: nothing taken.
        assert_eq!(
            kind(status(StatusCode::Cancelled), 5),
            ErrorKind::NotAcquired
        );
        assert_eq!(kind(status(StatusCode::Timeout), 0), ErrorKind::NotAcquired);
        // The operation timer can race a grant; so can a lost answer.
        assert_eq!(
            kind(status(StatusCode::Timeout), 5),
            ErrorKind::OutcomeUnknown
        );
        let silent = Error::new(ErrorKind::Timeout, "no answer");
        assert_eq!(kind(silent, 5), ErrorKind::OutcomeUnknown);
        // Refusals took nothing and keep their kinds.
        assert_eq!(
            kind(status(StatusCode::BadRequest), 5),
            ErrorKind::InvalidArgument
        );
        assert_eq!(
            kind(status(StatusCode::Unavailable), 5),
            ErrorKind::Unavailable
        );
    }
}
