//! Plain option types with builders: sessions, acquires, describes, watches, backoff, nodes.

use std::time::Duration;

use crate::error::{Error, ErrorKind, Result};
use crate::proto::NodeConfigProto;

/// The longest session timeout YDB accepts (30 minutes).
pub const MAX_SESSION_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// The longest finite acquire timeout YDB accepts (1 day).
pub const MAX_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(24 * 60 * 60);
/// The largest semaphore or owner data YDB accepts (1 MiB).
pub const MAX_DATA_LEN: usize = 1024 * 1024;
/// The longest semaphore name YDB accepts on create and update (1024 bytes).
pub const MAX_NAME_LEN: usize = 1024;
/// The longest session description YDB accepts (1024 bytes).
pub const MAX_DESCRIPTION_LEN: usize = 1024;

/// The longest node name a lock space's [`Layout`](crate::space::Layout) accepts, in bytes.
pub const MAX_NODE_NAME_LEN: usize = 255;

/// The most nodes a lock space's [`Layout`](crate::space::Layout) may name.
pub const MAX_NODES: usize = 4096;

/// Options of a coordination session.
///
/// The defaults: timeout 10 s, a client ping every 2 s when nothing else arrives, the stream
/// declared dead after 4 s of silence, lease tokens fired 1 s before the server could expire
/// the session, reattach backoff from 50 ms to 1 s.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use ydb_coordination::SessionOptions;
///
/// let opts = SessionOptions::new()
///     .timeout(Duration::from_secs(30))
///     .description("nightly-cleanup worker 7");
/// assert_eq!(opts.get_timeout(), Duration::from_secs(30));
/// assert_eq!(opts.get_ping_interval(), Duration::from_secs(6));
/// ```
#[derive(Debug, Clone)]
pub struct SessionOptions {
    pub(crate) timeout: Duration,
    pub(crate) description: String,
    pub(crate) ping_interval: Option<Duration>,
    pub(crate) safety_margin: Option<Duration>,
    pub(crate) backoff: Backoff,
    pub(crate) stop_timeout: Duration,
    pub(crate) connect_timeout: Option<Duration>,
    pub(crate) protection_key: Option<Vec<u8>>,
    pub(crate) semaphore_labels: bool,
    pub(crate) announce: bool,
}

impl Default for SessionOptions {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(10),
            description: String::new(),
            ping_interval: None,
            safety_margin: None,
            backoff: Backoff::default(),
            stop_timeout: Duration::from_secs(2),
            connect_timeout: None,
            protection_key: None,
            semaphore_labels: false,
            announce: false,
        }
    }
}

impl SessionOptions {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// How long the server keeps the session (and its semaphores) after losing contact with
    /// this client; also the longest disconnection a lease survives. At most 30 minutes.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// A free-form description the server stores with the session (at most 1024 bytes).
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    /// How often the client pings when nothing else arrives (default: timeout / 5). The
    /// stream is declared dead after two intervals of silence and reattached.
    pub fn ping_interval(mut self, interval: Duration) -> Self {
        self.ping_interval = Some(interval);
        self
    }

    /// How long before the server could expire the session the client gives up and fires
    /// every lease token (default: timeout / 10). Covers clock-rate differences between the
    /// machines and the time the holder needs to stop.
    pub fn safety_margin(mut self, margin: Duration) -> Self {
        self.safety_margin = Some(margin);
        self
    }

    /// The backoff between reattach attempts.
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// How long `close()` waits for the server to confirm the stop (default 2 s).
    pub fn stop_timeout(mut self, timeout: Duration) -> Self {
        self.stop_timeout = timeout;
        self
    }

    /// How long creating the session may take, retries included (default: the session
    /// timeout).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }

    /// Adds the semaphore name as a `semaphore` label to the per-lease metrics (off by
    /// default: names can be unbounded, and every distinct label value is a new time series).
    pub fn semaphore_labels(mut self, on: bool) -> Self {
        self.semaphore_labels = on;
        self
    }

    /// Announces who the session is and what it uses, so that `ydb-coord top` can find the
    /// names and tell who holds them (off by default).
    ///
    /// The session holds one unit of the ephemeral semaphore
    /// [`ANNOUNCE_SEMAPHORE`](crate::session::ANNOUNCE_SEMAPHORE), whose owner data is an
    /// [`Announcement`](crate::session::Announcement): the session's description, host,
    /// process id, program, start, timeout and last contact, and every name it holds or
    /// waits for with since when. The record is at most
    /// [`ANNOUNCE_LIMIT`](crate::session::ANNOUNCE_LIMIT) bytes; names that do not fit go to
    /// pages of at most [`PAGE_LIMIT`](crate::session::PAGE_LIMIT) bytes, one more unit of an
    /// ephemeral semaphore each, so that however many names a session uses, each is
    /// announced and every request stays bounded. The cost is one acquire when the session
    /// starts, then one round of writes each time the set of names changed (its record,
    /// and its pages if it has any), at most one round a second however busy the session: a
    /// lock taken and given back within the second costs nothing more. While the session
    /// holds or waits for a name, its record is sent again once per session timeout, so
    /// that a viewer can tell when the server last heard from it; an idle session sends
    /// nothing. No write reads the other sessions' records, so the cost does not grow with
    /// their number. The server drops the units with the session, so a crashed process
    /// leaves nothing behind.
    ///
    /// # Examples
    ///
    /// ```
    /// use ydb_coordination::SessionOptions;
    ///
    /// let options = SessionOptions::new().description("billing worker 7").announce(true);
    /// # let _ = options;
    /// ```
    pub fn announce(mut self, on: bool) -> Self {
        self.announce = on;
        self
    }

    /// The session timeout.
    pub fn get_timeout(&self) -> Duration {
        self.timeout
    }

    /// The client ping interval in effect.
    pub fn get_ping_interval(&self) -> Duration {
        self.ping_interval
            .unwrap_or(self.timeout / 5)
            .max(Duration::from_millis(1))
    }

    /// The safety margin in effect.
    pub fn get_safety_margin(&self) -> Duration {
        self.safety_margin.unwrap_or(self.timeout / 10)
    }

    pub(crate) fn get_connect_timeout(&self) -> Duration {
        self.connect_timeout
            .unwrap_or(self.timeout)
            .max(Duration::from_millis(1))
    }

    /// Checks the options against YDB's limits.
    pub(crate) fn validate(&self) -> Result<()> {
        if self.timeout > MAX_SESSION_TIMEOUT {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "session timeout {:?} exceeds the 30 minute limit",
                    self.timeout
                ),
            ));
        }
        if self.timeout < Duration::from_millis(100) {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("session timeout {:?} is below 100 ms", self.timeout),
            ));
        }
        if self.description.len() > MAX_DESCRIPTION_LEN {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "session description exceeds 1024 bytes",
            ));
        }
        if self.get_safety_margin() >= self.timeout {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "safety margin must be shorter than the session timeout",
            ));
        }
        if self.get_ping_interval() > self.timeout {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "ping interval {:?} exceeds the session timeout {:?}",
                    self.get_ping_interval(),
                    self.timeout
                ),
            ));
        }
        if self.stop_timeout > MAX_SESSION_TIMEOUT {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "stop timeout {:?} exceeds the 30 minute limit",
                    self.stop_timeout
                ),
            ));
        }
        if self
            .connect_timeout
            .is_some_and(|t| t > MAX_ACQUIRE_TIMEOUT)
        {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "connect timeout exceeds one day",
            ));
        }
        if self.backoff.max > MAX_SESSION_TIMEOUT {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "reattach backoff ceiling exceeds the 30 minute limit",
            ));
        }
        Ok(())
    }
}

/// Exponential backoff with full jitter: attempt `n` waits a random time in
/// `[0, min(max, initial * 2^n)]`.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use ydb_coordination::config::Backoff;
///
/// let b = Backoff::new(Duration::from_millis(50), Duration::from_secs(1));
/// assert_eq!(b.ceiling(0), Duration::from_millis(50));
/// assert_eq!(b.ceiling(3), Duration::from_millis(400));
/// assert_eq!(b.ceiling(10), Duration::from_secs(1));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new(Duration::from_millis(50), Duration::from_secs(1))
    }
}

impl Backoff {
    /// Backoff from `initial`, doubling up to `max`.
    pub fn new(initial: Duration, max: Duration) -> Self {
        Self {
            initial,
            max: max.max(initial),
        }
    }

    /// The upper bound of the wait before attempt `attempt` (0-based).
    pub fn ceiling(&self, attempt: u32) -> Duration {
        let factor = 1u32.checked_shl(attempt.min(31)).unwrap_or(u32::MAX);
        self.initial.saturating_mul(factor).min(self.max)
    }

    /// The wait before attempt `attempt`, given a uniform random number in `[0, 1)`.
    pub fn delay(&self, attempt: u32, unit: f64) -> Duration {
        self.ceiling(attempt).mul_f64(unit.clamp(0.0, 1.0))
    }
}

/// Options of an acquire.
///
/// The defaults: count 1, not ephemeral, no data, wait forever.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use ydb_coordination::AcquireOptions;
///
/// let exclusive = AcquireOptions::exclusive().ephemeral(true);
/// assert_eq!(exclusive.get_count(), u64::MAX);
/// let try_shared = AcquireOptions::shared().timeout(Duration::ZERO);
/// assert_eq!(try_shared.get_count(), 1);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcquireOptions {
    pub(crate) count: u64,
    pub(crate) ephemeral: bool,
    pub(crate) data: Vec<u8>,
    pub(crate) timeout: Option<Duration>,
    /// Read the grant's order id (the fencing token) with a describe behind the acquire;
    /// off only for the session's announcement, whose semaphore has every session as owner.
    pub(crate) fenced: bool,
}

impl Default for AcquireOptions {
    fn default() -> Self {
        Self {
            count: 1,
            ephemeral: false,
            data: Vec::new(),
            timeout: None,
            fenced: true,
        }
    }
}

impl AcquireOptions {
    /// Without reading the grant's order id: the lease's fencing token is 0, and its owner
    /// data is replaced without checking the ownership (the session's announcement).
    pub(crate) fn unfenced(mut self) -> Self {
        self.fenced = false;
        self
    }

    /// Count 1, wait forever.
    pub fn new() -> Self {
        Self::default()
    }

    /// Acquire `count` units (at least 1, at most the semaphore's limit).
    pub fn count(mut self, count: u64) -> Self {
        self.count = count;
        self
    }

    /// All units (`count = u64::MAX`): what YDB's lock idiom uses for an exclusive lock on an
    /// ephemeral semaphore. On a persistent semaphore use `count(limit)` instead.
    pub fn exclusive() -> Self {
        Self::default().count(u64::MAX)
    }

    /// One token: a shared lock.
    pub fn shared() -> Self {
        Self::default().count(1)
    }

    /// Use (and create on first acquire) an ephemeral semaphore, deleted when its last
    /// owner leaves.
    pub fn ephemeral(mut self, ephemeral: bool) -> Self {
        self.ephemeral = ephemeral;
        self
    }

    /// Data stored with this owner (visible in describes; at most 1 MiB).
    pub fn data(mut self, data: impl Into<Vec<u8>>) -> Self {
        self.data = data.into();
        self
    }

    /// How long to wait in the queue: zero tries once, `None` (the default) waits forever.
    /// At most one day.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Wait forever (the default).
    pub fn wait_forever(mut self) -> Self {
        self.timeout = None;
        self
    }

    /// The count.
    pub fn get_count(&self) -> u64 {
        self.count
    }

    /// The queue timeout, `None` for forever.
    pub fn get_timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// The timeout in YDB's encoding: milliseconds, `u64::MAX` for forever.
    pub(crate) fn timeout_millis(&self) -> u64 {
        match self.timeout {
            None => u64::MAX,
            Some(t) => u64::try_from(t.as_millis()).unwrap_or(u64::MAX - 1),
        }
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if self.count == 0 {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "acquire count must be at least 1",
            ));
        }
        if let Some(timeout) = self.timeout {
            check_acquire_timeout(timeout)?;
        }
        check_data(&self.data)
    }
}

/// The one rule for every acquire timeout, of a plain acquire and of every recipe's
/// `_timeout` verb alike: at most [`MAX_ACQUIRE_TIMEOUT`]; a longer wait is a wait without
/// a timeout.
pub(crate) fn check_acquire_timeout(timeout: Duration) -> Result<()> {
    if timeout > MAX_ACQUIRE_TIMEOUT {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            "acquire timeout exceeds one day (wait without a timeout instead)",
        ));
    }
    Ok(())
}

pub(crate) fn check_data(data: &[u8]) -> Result<()> {
    if data.len() > MAX_DATA_LEN {
        return Err(Error::new(ErrorKind::InvalidArgument, "data exceeds 1 MiB"));
    }
    Ok(())
}

/// The prefix of the semaphore names the library keeps for itself: the sessions'
/// announcements ([`ANNOUNCE_SEMAPHORE`](crate::session::ANNOUNCE_SEMAPHORE) and the pages of
/// the long ones) and whatever later versions add.
pub const RESERVED_PREFIX: &str = "ydb-coordination:";

/// Whether `name` is reserved for the library's own use (it starts with
/// [`RESERVED_PREFIX`]): the session refuses to acquire, create, update or delete it, so that
/// no process can hold, block or remove what `ydb-coord top` reads the sessions from.
/// Describing and watching it are allowed.
///
/// # Examples
///
/// ```
/// use ydb_coordination::config::is_reserved;
/// use ydb_coordination::session::ANNOUNCE_SEMAPHORE;
///
/// assert!(is_reserved(ANNOUNCE_SEMAPHORE));
/// assert!(!is_reserved("nightly-report"));
/// ```
pub fn is_reserved(name: &str) -> bool {
    name.starts_with(RESERVED_PREFIX)
}

/// The one check of every call that changes a semaphore (the session's acquire, create,
/// update and delete, which every recipe goes through): a reserved name is refused with
/// [`ErrorKind::InvalidArgument`] and nothing is sent.
pub(crate) fn check_reserved(name: &str) -> Result<()> {
    if is_reserved(name) {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!(
                "semaphore name {name:?} is reserved for the sessions' announcements \
                 (names starting with {RESERVED_PREFIX:?}): choose another name"
            ),
        ));
    }
    Ok(())
}

/// Parses a duration in the one grammar of the crate and its tool (that of Go's
/// `time.ParseDuration`, as YDB's SDKs read their config files, plus `d` for days): one or
/// more decimal numbers (`1.5`, `.5`), each with a unit, `ns`, `us` (or `µs`), `ms`, `s`,
/// `m`, `h` or `d` (`1h30m`, `1.5s`, `300ms`), an optional leading `+`, or a bare `0`.
///
/// # Errors
///
/// [`ErrorKind::InvalidArgument`] for anything else: no unit, an unknown one, a sign, an
/// exponent, spaces, or a duration too long to hold.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use ydb_coordination::config::parse_duration;
///
/// assert_eq!(parse_duration("1m30s")?, Duration::from_secs(90));
/// assert_eq!(parse_duration("1.5h")?, Duration::from_secs(5400));
/// assert_eq!(parse_duration("250ms")?, Duration::from_millis(250));
/// assert!(parse_duration("10").is_err()); // a unit is needed
/// # Ok::<(), ydb_coordination::Error>(())
/// ```
pub fn parse_duration(text: &str) -> Result<Duration> {
    let bad = || {
        Error::new(
            ErrorKind::InvalidArgument,
            format!(
                "{text:?} is not a duration: write a number and a unit, e.g. 500ms, 30s, 2m, 1h or 1d"
            ),
        )
    };
    let mut rest = text.strip_prefix('+').unwrap_or(text);
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(bad());
    }
    let mut seconds = 0.0_f64;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(rest.len());
        let (number, tail) = rest.split_at(number_len);
        if number.is_empty() || number == "." {
            return Err(bad());
        }
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let scale = match unit {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "d" => 86400.0,
            _ => return Err(bad()),
        };
        seconds += number.parse::<f64>().map_err(|_| bad())? * scale;
        rest = tail;
    }
    Duration::try_from_secs_f64(seconds).map_err(|_| bad())
}

pub(crate) fn check_name(name: &str) -> Result<()> {
    if name.len() > MAX_NAME_LEN {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            "semaphore name exceeds 1024 bytes",
        ));
    }
    Ok(())
}

/// What a describe returns besides the semaphore's own fields.
///
/// # Examples
///
/// ```
/// use ydb_coordination::config::DescribeOptions;
///
/// let opts = DescribeOptions::new().owners(true).waiters(true);
/// # let _ = opts;
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DescribeOptions {
    pub(crate) owners: bool,
    pub(crate) waiters: bool,
}

impl DescribeOptions {
    /// Neither owners nor waiters.
    pub fn new() -> Self {
        Self::default()
    }

    /// Include the owners.
    pub fn owners(mut self, yes: bool) -> Self {
        self.owners = yes;
        self
    }

    /// Include the waiters, in queue order.
    pub fn waiters(mut self, yes: bool) -> Self {
        self.waiters = yes;
        self
    }
}

/// What a watch reports changes of, and what each description includes.
///
/// # Examples
///
/// ```
/// use ydb_coordination::config::WatchOptions;
///
/// let opts = WatchOptions::owners_changes();
/// # let _ = opts;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchOptions {
    pub(crate) data: bool,
    pub(crate) owners: bool,
    pub(crate) describe: DescribeOptions,
}

impl Default for WatchOptions {
    fn default() -> Self {
        Self {
            data: true,
            owners: true,
            describe: DescribeOptions::new().owners(true),
        }
    }
}

impl WatchOptions {
    /// Data and owner changes, owners included in each description.
    pub fn new() -> Self {
        Self::default()
    }

    /// Only owner changes, owners included.
    pub fn owners_changes() -> Self {
        Self {
            data: false,
            ..Self::default()
        }
    }

    /// Only data changes.
    pub fn data_changes() -> Self {
        Self {
            owners: false,
            describe: DescribeOptions::new(),
            ..Self::default()
        }
    }

    /// Report data changes.
    pub fn data(mut self, yes: bool) -> Self {
        self.data = yes;
        self
    }

    /// Report owner changes.
    pub fn owners(mut self, yes: bool) -> Self {
        self.owners = yes;
        self
    }

    /// What each description includes.
    pub fn describe(mut self, describe: DescribeOptions) -> Self {
        self.describe = describe;
        self
    }
}

/// Consistency mode of a coordination node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConsistencyMode {
    /// Not set: the server's default.
    #[default]
    Unset,
    /// Through the durable log.
    Strict,
    /// May be answered from memory.
    Relaxed,
}

impl ConsistencyMode {
    fn to_proto(self) -> i32 {
        match self {
            Self::Unset => 0,
            Self::Strict => 1,
            Self::Relaxed => 2,
        }
    }

    fn from_proto(v: i32) -> Self {
        match v {
            1 => Self::Strict,
            2 => Self::Relaxed,
            _ => Self::Unset,
        }
    }
}

/// Rate-limiter counters mode of a coordination node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum RateLimiterCountersMode {
    /// Not set: the server's default.
    #[default]
    Unset,
    /// Aggregated counters.
    Aggregated,
    /// Detailed counters.
    Detailed,
}

/// Configuration of a coordination node. Unset fields (`None`, `Unset`) keep the server's
/// default on create and the current value on alter.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use ydb_coordination::config::NodeConfig;
///
/// let config = NodeConfig::new().session_grace_period(Duration::from_secs(5));
/// assert_eq!(config.session_grace_period, Some(Duration::from_secs(5)));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeConfig {
    /// How often the node checks itself.
    pub self_check_period: Option<Duration>,
    /// Extra time sessions get after the node restarts.
    pub session_grace_period: Option<Duration>,
    /// Read consistency.
    pub read_consistency_mode: ConsistencyMode,
    /// Attach consistency.
    pub attach_consistency_mode: ConsistencyMode,
    /// Rate-limiter counters.
    pub rate_limiter_counters_mode: RateLimiterCountersMode,
}

impl NodeConfig {
    /// All unset.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the self-check period.
    pub fn self_check_period(mut self, period: Duration) -> Self {
        self.self_check_period = Some(period);
        self
    }

    /// Sets the session grace period.
    pub fn session_grace_period(mut self, period: Duration) -> Self {
        self.session_grace_period = Some(period);
        self
    }

    /// Sets the read consistency mode.
    pub fn read_consistency_mode(mut self, mode: ConsistencyMode) -> Self {
        self.read_consistency_mode = mode;
        self
    }

    /// Sets the attach consistency mode.
    pub fn attach_consistency_mode(mut self, mode: ConsistencyMode) -> Self {
        self.attach_consistency_mode = mode;
        self
    }

    /// Sets the rate-limiter counters mode.
    pub fn rate_limiter_counters_mode(mut self, mode: RateLimiterCountersMode) -> Self {
        self.rate_limiter_counters_mode = mode;
        self
    }

    pub(crate) fn to_proto(&self) -> Result<NodeConfigProto> {
        let millis = |d: Option<Duration>, what: &str| -> Result<u32> {
            d.map_or(Ok(0), |d| {
                u32::try_from(d.as_millis()).map_err(|_| {
                    Error::new(ErrorKind::InvalidArgument, format!("{what} is too long"))
                })
            })
        };
        Ok(NodeConfigProto {
            path: String::new(),
            self_check_period_millis: millis(self.self_check_period, "self check period")?,
            session_grace_period_millis: millis(self.session_grace_period, "grace period")?,
            read_consistency_mode: self.read_consistency_mode.to_proto(),
            attach_consistency_mode: self.attach_consistency_mode.to_proto(),
            rate_limiter_counters_mode: match self.rate_limiter_counters_mode {
                RateLimiterCountersMode::Unset => 0,
                RateLimiterCountersMode::Aggregated => 1,
                RateLimiterCountersMode::Detailed => 2,
            },
        })
    }

    pub(crate) fn from_proto(p: &NodeConfigProto) -> Self {
        let millis = |v: u32| (v != 0).then(|| Duration::from_millis(u64::from(v)));
        Self {
            self_check_period: millis(p.self_check_period_millis),
            session_grace_period: millis(p.session_grace_period_millis),
            read_consistency_mode: ConsistencyMode::from_proto(p.read_consistency_mode),
            attach_consistency_mode: ConsistencyMode::from_proto(p.attach_consistency_mode),
            rate_limiter_counters_mode: match p.rate_limiter_counters_mode {
                1 => RateLimiterCountersMode::Aggregated,
                2 => RateLimiterCountersMode::Detailed,
                _ => RateLimiterCountersMode::Unset,
            },
        }
    }
}

/// When the scheme created a coordination node: its `(plan step, transaction id)`, from
/// [`Client::node_incarnation`](crate::Client::node_incarnation).
///
/// A node dropped and created again at the same path is a new incarnation: its order ids, and
/// so its [fencing tokens](crate::FencingToken), start again at 1, while its incarnation is
/// greater than the old one's (plan steps only grow in a database). A resource that orders
/// tokens by `(incarnation, token)` keeps refusing the old node's holders after the node is
/// recreated, and accepts the new node's.
///
/// # Examples
///
/// ```
/// use ydb_coordination::config::NodeIncarnation;
///
/// let first = NodeIncarnation { plan_step: 1_700_000_000_000, tx_id: 7 };
/// let again = NodeIncarnation { plan_step: 1_700_000_000_500, tx_id: 3 };
/// assert!(again > first && again.to_u128() > first.to_u128());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct NodeIncarnation {
    /// The plan step of the node's creation.
    pub plan_step: u64,
    /// The transaction id of the node's creation.
    pub tx_id: u64,
}

impl NodeIncarnation {
    /// The incarnation as one number, `plan_step << 64 | tx_id`, ordered as it is.
    ///
    /// ```
    /// # use ydb_coordination::config::NodeIncarnation;
    /// assert_eq!(NodeIncarnation { plan_step: 1, tx_id: 2 }.to_u128(), (1u128 << 64) | 2);
    /// ```
    pub const fn to_u128(self) -> u128 {
        ((self.plan_step as u128) << 64) | self.tx_id as u128
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_session_numbers() {
        let o = SessionOptions::new();
        assert_eq!(o.get_timeout(), Duration::from_secs(10));
        assert_eq!(o.get_ping_interval(), Duration::from_secs(2));
        assert_eq!(o.get_safety_margin(), Duration::from_secs(1));
        assert_eq!(o.get_connect_timeout(), Duration::from_secs(10));
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let b = Backoff::default();
        assert_eq!(b.ceiling(0), Duration::from_millis(50));
        assert_eq!(b.ceiling(1), Duration::from_millis(100));
        assert_eq!(b.ceiling(4), Duration::from_millis(800));
        assert_eq!(b.ceiling(5), Duration::from_secs(1));
        assert_eq!(b.ceiling(1000), Duration::from_secs(1));
        assert_eq!(b.delay(2, 0.5), Duration::from_millis(100));
        assert_eq!(b.delay(2, 7.0), Duration::from_millis(200));
    }

    #[test]
    fn acquire_timeout_encoding() {
        assert_eq!(AcquireOptions::new().timeout_millis(), u64::MAX);
        assert_eq!(
            AcquireOptions::new()
                .timeout(Duration::ZERO)
                .timeout_millis(),
            0
        );
        assert_eq!(
            AcquireOptions::new()
                .timeout(Duration::from_millis(1500))
                .timeout_millis(),
            1500
        );
    }

    #[test]
    fn invalid_options_are_rejected() {
        let kind = |r: Result<()>| r.err().map(|e| e.kind());
        assert_eq!(
            kind(
                SessionOptions::new()
                    .timeout(Duration::from_secs(3600))
                    .validate()
            ),
            Some(ErrorKind::InvalidArgument)
        );
        assert_eq!(
            kind(AcquireOptions::new().count(0).validate()),
            Some(ErrorKind::InvalidArgument)
        );
        assert_eq!(
            kind(
                AcquireOptions::new()
                    .timeout(Duration::from_secs(2 * 86_400))
                    .validate()
            ),
            Some(ErrorKind::InvalidArgument)
        );
        assert_eq!(kind(SessionOptions::new().validate()), None);
        for opts in [
            SessionOptions::new().ping_interval(Duration::MAX),
            SessionOptions::new().ping_interval(Duration::from_secs(11)),
            SessionOptions::new().stop_timeout(Duration::MAX),
            SessionOptions::new().connect_timeout(Duration::MAX),
            SessionOptions::new().backoff(Backoff::new(Duration::MAX, Duration::MAX)),
        ] {
            assert_eq!(kind(opts.validate()), Some(ErrorKind::InvalidArgument));
        }
    }

    #[test]
    fn node_config_round_trips() {
        let c = NodeConfig::new()
            .self_check_period(Duration::from_millis(1234))
            .read_consistency_mode(ConsistencyMode::Strict);
        let p = c.to_proto().ok();
        assert_eq!(p.as_ref().map(NodeConfig::from_proto), Some(c));
    }
}
