//! The pure rate limiter of one coordination node (what YDB's Kesus tablet keeps as its quoter
//! resources, together with the node-side proxy and quoter service that answer
//! `AcquireResource`).
//!
//! No async, no locks, no clocks: every method takes `now`; acquires that wait come back
//! from [`Quoter::advance`] as [`Answer`]s. Behaviour follows the rate limiter's
//! specification, `emulator/SPEC-rate-limiter.md`; a `§` in this file is a section of
//! `SPEC-rate-limiter.md`, and `C1`…`C5` are the corrections of its §13.
//!
//! The model is the specification's faithful one (§10.1) for a single server node, three machines in one
//! struct per resource:
//!
//! * the **tablet** (§7.1): on 100 ms ticks of one grid, each root's quantum (`rate / 10`) is
//!   shared by water-filling among its active children (child resources, capped at their own
//!   quantum, and the node's consuming session), down the tree; nothing accumulates at the
//!   tablet while idle;
//! * the node's **proxy** (§7.2): `available` (may go negative: debt) starts full at
//!   `rate × prefetch`, gains the tablet's allocations, loses what the quoter reports spent, and
//!   switches consumption on below `size × watermark + queued` and off at `size + queued`;
//! * the node's **quoter service** (§7.3): balance, free balance and tick rate reset from the
//!   proxy's local quota at each feed, YDB's `Charge` rule (pacing, overdraft), a FIFO queue with
//!   head-of-line blocking, `used` bypassing it, per-request deadlines.
//!
//! Deviations from YDB, all of timing below one tick: the quoter's feeds for a queued resource
//! run on the tablet's grid right after its tick (YDB runs them on the quoter's own 100 ms chain,
//! started when the queue formed, and a channel update waits for its next feed); messages
//! between the three take no time; the local quota channel does not expire after two feeds.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use prost::Message;
use tokio::time::{Duration, Instant};

use crate::proto::StatusCode;
use ydb_coordination_proto::rate_limiter::{
    HierarchicalDrrSettings, MeteringConfig, Resource, hierarchical_drr_settings, metering_config,
    resource,
};

// Tests use `unwrap()` freely (house style, as in redis-rs); the library code never does.
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
#[path = "quoter_tests.rs"]
mod tests;

/// §7.1: tablet ticks per second (a tick is 100 ms); also the quoter's tick size.
const TICKS_PER_SECOND: f64 = 10.0;
/// §7.1: the tick.
const TICK: Duration = Duration::from_millis(100);
/// §3: the node-local bucket is `rate × prefetch`, 0.2 s of rate when the effective value is 0.
const DEFAULT_PREFETCH: f64 = 0.2;
/// §3: refill starts below this fraction of the bucket when the effective value is 0.
const DEFAULT_WATERMARK: f64 = 0.75;
/// §7.3, C3: `LastAllocated` after a paced grant is at least `now - 2 × ScheduleTickSize`.
const PACE_SLACK: Duration = Duration::from_millis(2);
/// §7.3: the quoter caps a request's deadline at one day.
const MAX_WAIT: Duration = Duration::from_secs(86_400);
/// Longest pace `Charge` computes (about 31 years): beyond any deadline, and finite.
const MAX_PACE_MICROS: f64 = 1e15;
/// §7.3: the quoter's scheduler granularity (`ScheduleTickSize`).
const SCHEDULE_TICK: Duration = Duration::from_millis(1);
/// YDB's `TICK_RATE_EPSILON`: a tick rate below this is zero (nothing can be granted).
const TICK_RATE_EPSILON: f64 = 1e-10;
/// §2.3, §4.2 step 4: the `metric_fields` keys YDB accepts, stores and describes (C5).
const METRIC_KEYS: [&str; 7] = [
    "version",
    "schema",
    "cloud_id",
    "folder_id",
    "resource_id",
    "source_id",
    "database",
];
/// §4.2: longest `collect_period_sec`.
const MAX_COLLECT_PERIOD_SEC: u64 = 3600;

/// Identifies one waiting `AcquireResource` call; chosen by the shell.
pub(crate) type CallId = u64;

/// A refusal: the operation's status and its single issue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rejection {
    pub(crate) status: StatusCode,
    pub(crate) message: String,
}

fn reject<T>(status: StatusCode, message: impl Into<String>) -> Result<T, Rejection> {
    Err(Rejection {
        status,
        message: message.into(),
    })
}

fn bad_request<T>(message: impl Into<String>) -> Result<T, Rejection> {
    reject(StatusCode::BadRequest, message)
}

/// An `AcquireResource` outcome delivered later: the call and its status (`Success`,
/// `Timeout`, `Cancelled` or, for a resource dropped under it, `BadRequest`).
pub(crate) type Answer = (CallId, StatusCode);

/// What an acquire does at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Acquired {
    /// Answered now with this status (no issues, as YDB's quoter answers).
    Now(StatusCode),
    /// Queued: the answer comes from [`Quoter::advance`] (or a drop) under this call id.
    Waiting,
}

/// The units of an acquire (the request's `units` oneof).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Units {
    /// To be granted before use; waits.
    Required(u64),
    /// Already used; never waits.
    Used(u64),
}

/// An acquire's timing parameters (§8.1), from the request's `operation_params`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct AcquireTimeouts {
    /// `operation_timeout` (zero: not set).
    pub(crate) operation_timeout: Duration,
    /// `cancel_after` (zero: not set).
    pub(crate) cancel_after: Duration,
}

impl AcquireTimeouts {
    /// §8.1: how long the quoter waits, and the status when it gives up.
    fn deadline(self) -> (Duration, StatusCode) {
        let t = self.operation_timeout;
        let c = self.cancel_after;
        if !c.is_zero() && c < t {
            (c.min(MAX_WAIT), StatusCode::Cancelled)
        } else {
            (t.min(MAX_WAIT), StatusCode::Timeout)
        }
    }
}

#[derive(Debug, Clone)]
struct Node {
    /// The settings as created or last altered (Describe echoes these, §6.5).
    hdrr: HierarchicalDrrSettings,
    metering: Option<MeteringConfig>,
    children: BTreeSet<String>,
    /// The node's proxy and quoter state, from the first acquire on (§7.2, §7.3).
    bucket: Option<Bucket>,
}

/// Effective settings (§3): inherited, capped by the parent's rate.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Effective {
    rate: f64,
    prefetch: f64,
    watermark: f64,
}

impl Effective {
    /// §7.2: the node-local bucket's size.
    fn size(self) -> f64 {
        let prefetch = if self.prefetch == 0.0 {
            DEFAULT_PREFETCH
        } else {
            self.prefetch
        };
        (self.rate * prefetch).max(0.0)
    }

    /// §7.2: below `size × watermark` (plus what is queued) the proxy starts consuming.
    fn low(self) -> f64 {
        let watermark = if self.watermark == 0.0 {
            DEFAULT_WATERMARK
        } else {
            self.watermark
        };
        self.size() * watermark
    }

    /// §7.1: what the tablet hands out per tick.
    fn quantum(self) -> f64 {
        self.rate / TICKS_PER_SECOND
    }
}

/// One resource on this (the only) server node: YDB's Kesus quoter proxy (`available`,
/// `consuming`) and quoter service (`balance`, `free_balance`, `tick_rate`,
/// `last_allocated`, the queue) for it.
#[derive(Debug, Clone)]
struct Bucket {
    /// Proxy: the local quota; negative is debt.
    available: f64,
    /// Proxy: subscribed to the tablet's allocations.
    consuming: bool,
    /// Quoter: reset from the local quota at each feed, charged by grants.
    balance: f64,
    free_balance: f64,
    tick_rate: f64,
    /// Quoter: the pace clock; `None` is YDB's zero instant, "long ago".
    last_allocated: Option<Instant>,
    /// Quoter: waiting `required` calls, FIFO.
    queue: VecDeque<CallId>,
    /// Quoter: when the head is retried (the pacing delay `Charge` returned).
    retry_at: Option<Instant>,
}

impl Bucket {
    /// §7.2: a freshly used resource starts with a full local bucket.
    fn new(size: f64) -> Self {
        let mut bucket = Bucket {
            available: size,
            consuming: false,
            balance: 0.0,
            free_balance: 0.0,
            tick_rate: 0.0,
            last_allocated: None,
            queue: VecDeque::new(),
            retry_at: None,
        };
        bucket.feed();
        bucket
    }

    /// §7.3 `FeedResource`: balance, free balance and tick rate are reset to the local quota
    /// (the proxy's channel carries `available` when positive, nothing otherwise: in debt all
    /// three are 0, and the debt is the proxy's, C2).
    fn feed(&mut self) {
        let rate = self.available.max(0.0);
        self.balance = rate;
        self.free_balance = rate;
        self.tick_rate = rate;
    }

    /// §7.3 `TResource::Charge` for `amount` at `now`: `Ok(())` when granted, else the
    /// instant to retry at (`None`: at the next feed). The pace in whole microseconds, the free
    /// balance lowered on the paced branch and the retry instant are C1; the 2 ms slack is C3.
    fn charge(&mut self, amount: f64, now: Instant) -> Result<(), Option<Instant>> {
        if self.tick_rate < TICK_RATE_EPSILON {
            return Err(None);
        }
        // In whole microseconds, as YDB's `lround`; capped far beyond any deadline (a day).
        let pace_us = (amount / self.tick_rate * TICK.as_micros() as f64)
            .round()
            .min(MAX_PACE_MICROS);
        let pace = Duration::from_micros(pace_us as u64);
        let fulfil = self.last_allocated.and_then(|last| last.checked_add(pace));
        let due = fulfil.is_none_or(|at| at <= now);
        if self.balance >= 0.0 {
            if due {
                let floor = now.checked_sub(PACE_SLACK).unwrap_or(now);
                self.last_allocated = Some(fulfil.map_or(floor, |at| at.max(floor)));
                self.balance -= amount;
                self.free_balance = self.free_balance.min(self.balance);
                self.spent(amount);
                return Ok(());
            }
            if amount <= self.free_balance {
                self.last_allocated = Some(now);
                self.free_balance -= amount;
                self.balance -= amount;
                self.spent(amount);
                return Ok(());
            }
        }
        Err(fulfil.filter(|at| *at > now))
    }

    /// §7.3 `ChargeUsedAmount`.
    fn charge_used(&mut self, amount: f64, now: Instant) {
        self.last_allocated = Some(now);
        self.free_balance -= amount;
        self.balance -= amount;
        self.spent(amount);
    }

    /// §7.2: the quoter's statistics report (sent after every request) takes what was spent
    /// off the proxy's local quota.
    fn spent(&mut self, amount: f64) {
        self.available -= amount;
    }
}

#[derive(Debug, Clone)]
struct Waiter {
    path: String,
    amount: u64,
    deadline: Instant,
    /// What the call gets at its deadline (§8.1).
    expired: StatusCode,
}

/// The rate-limiter resources of one coordination node and their runtime state.
#[derive(Debug, Default)]
pub(crate) struct Quoter {
    /// By canonical path; a `BTreeMap`, so List answers in sorted order (YDB's is
    /// unspecified).
    nodes: BTreeMap<String, Node>,
    waiters: BTreeMap<CallId, Waiter>,
    /// Origin of the tick grid: the first acquire.
    epoch: Option<Instant>,
    /// The next tablet tick, while any resource consumes.
    next_tick: Option<Instant>,
}

/// §4.1: the characters a resource path may hold.
fn valid_chars(path: &str) -> bool {
    path.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"._-/:#".contains(&b))
}

/// §4.1: components split on `/`, empty ones dropped, re-joined without a leading slash.
fn canonize(path: &str) -> String {
    path.split('/')
        .filter(|c| !c.is_empty())
        .collect::<Vec<_>>()
        .join("/")
}

/// §4.1: the gRPC layer accepts only canonical resource paths.
fn check_canonical(path: &str) -> Result<(), Rejection> {
    if canonize(path) == path {
        Ok(())
    } else {
        bad_request("Bad resource path.")
    }
}

fn parent_of(path: &str) -> Option<&str> {
    path.rsplit_once('/').map(|(parent, _)| parent)
}

/// The `hierarchical_drr` of a create or alter, with the request-level checks of §4.2 (steps
/// 2-4, and the annotation rules of fields 5 and 6).
fn settings(
    resource: &Resource,
) -> Result<(HierarchicalDrrSettings, Option<MeteringConfig>), Rejection> {
    check_canonical(&resource.resource_path)?;
    let Some(resource::Type::HierarchicalDrr(hdrr)) = resource.r#type else {
        return bad_request("No resource properties.");
    };
    if let Some(metering) = &resource.metering_config {
        for metric in [
            &metering.provisioned,
            &metering.on_demand,
            &metering.overshoot,
        ]
        .into_iter()
        .flatten()
        {
            check_metric(metric)?;
        }
    }
    // §3: `(Ydb.value) = "< 0"` and `"> 0"`, checked by the request proxy.
    if hdrr
        .immediately_fill_up_to
        .is_some_and(|v| v >= 0.0 || v.is_nan())
    {
        return bad_request("immediately_fill_up_to must be less than 0");
    }
    if let Some(hierarchical_drr_settings::LeafBehavior::ReplicatedBucket(r)) = hdrr.leaf_behavior
        && r.report_interval_ms == Some(0)
    {
        return bad_request("report_interval_ms must be greater than 0");
    }
    Ok((hdrr, resource.metering_config.clone()))
}

/// §4.2 step 4: supported `metric_fields` keys, string values.
fn check_metric(metric: &metering_config::Metric) -> Result<(), Rejection> {
    use ydb_grpc::google_proto_workaround::protobuf::value::Kind;
    let Some(fields) = &metric.metric_fields else {
        return Ok(());
    };
    // Sorted, so that the first bad key reported does not depend on hash order.
    let mut keys: Vec<_> = fields.fields.iter().collect();
    keys.sort_by(|a, b| a.0.cmp(b.0));
    for (key, value) in keys {
        if !METRIC_KEYS.contains(&key.as_str()) {
            return bad_request(format!("Unsupported key for metric. Key: {key}."));
        }
        if !matches!(value.kind, Some(Kind::StringValue(_))) {
            return bad_request(format!("Unsupported type for metric. Key: {key}."));
        }
    }
    Ok(())
}

/// A stored metering config as `DescribeResource` shows it (§2.3, §13 C5): each metric that
/// was set carries every known `metric_fields` key, with the value stored or an empty string.
fn described_metering(stored: &MeteringConfig) -> MeteringConfig {
    use ydb_grpc::google_proto_workaround::protobuf::{Struct, Value, value::Kind};
    let mut described = stored.clone();
    for metric in [
        &mut described.provisioned,
        &mut described.on_demand,
        &mut described.overshoot,
    ]
    .into_iter()
    .flatten()
    {
        let mut sent = metric.metric_fields.take().unwrap_or_default().fields;
        let fields = METRIC_KEYS
            .iter()
            .map(|key| {
                let value = match sent.remove(*key).and_then(|v| v.kind) {
                    Some(Kind::StringValue(value)) => value,
                    _ => String::new(),
                };
                let kind = Some(Kind::StringValue(value));
                (key.to_string(), Value { kind })
            })
            .collect();
        metric.metric_fields = Some(Struct { fields });
    }
    described
}

/// §3 `ValidateProps` for a resource (`root`: it has no parent).
fn validate_props(hdrr: &HierarchicalDrrSettings, root: bool) -> Result<(), Rejection> {
    let rate = hdrr.max_units_per_second;
    if !rate.is_finite() {
        return bad_request("MaxUnitsPerSecond must be finite.");
    }
    if rate < 0.0 {
        return bad_request("MaxUnitsPerSecond can't be less than 0.");
    }
    if root && rate == 0.0 {
        return bad_request("No MaxUnitsPerSecond parameter in root resource.");
    }
    if !hdrr.prefetch_coefficient.is_finite() {
        return bad_request("PrefetchCoefficient must be finite.");
    }
    let watermark = hdrr.prefetch_watermark;
    if !watermark.is_finite() {
        return bad_request("PrefetchWatermark must be finite.");
    }
    if watermark < 0.0 {
        return bad_request("PrefetchWatermark can't be less than 0.");
    }
    if watermark > 1.0 {
        return bad_request("PrefetchWatermark can't be greater than 1.");
    }
    Ok(())
}

/// §4.2 step 7: the tablet's metering checks.
fn validate_metering(metering: Option<&MeteringConfig>) -> Result<(), Rejection> {
    let Some(m) = metering else {
        return Ok(());
    };
    if m.collect_period_sec > MAX_COLLECT_PERIOD_SEC {
        return bad_request("CollectPeriodSec must be less than an hour.");
    }
    let doubles = [
        (m.provisioned_units_per_second, "ProvisionedUnitsPerSecond"),
        (m.provisioned_coefficient, "ProvisionedCoefficient"),
        (m.overshoot_coefficient, "OvershootCoefficient"),
    ];
    for (value, name) in doubles {
        if !value.is_finite() {
            return bad_request(format!("{name} must be finite."));
        }
    }
    for (value, name) in &doubles[..2] {
        if *value < 0.0 {
            return bad_request(format!("{name} must be greater or equal to 0."));
        }
    }
    if m.overshoot_coefficient != 0.0 && m.overshoot_coefficient < 1.0 {
        return bad_request(
            "OvershootCoefficient must be greater or equal to 1 or not set (zero).",
        );
    }
    Ok(())
}

impl Quoter {
    /// §4.1: the gRPC layer's check of a resource path (`Bad resource path.`).
    pub(crate) fn check_resource_path(path: &str) -> Result<(), Rejection> {
        check_canonical(path)
    }

    /// `CreateResource` (§4.2, §6.1).
    pub(crate) fn create(&mut self, resource: &Resource) -> Result<(), Rejection> {
        let (hdrr, metering) = settings(resource)?;
        let path = resource.resource_path.as_str();
        if !valid_chars(path) {
            return bad_request("Invalid resource path.");
        }
        if let Some(existing) = self.nodes.get(path) {
            // Byte-for-byte, as YDB's `IsEqual` compares (NaN equals NaN); metering is not
            // compared.
            return if existing.hdrr.encode_to_vec() == hdrr.encode_to_vec() {
                reject(
                    StatusCode::AlreadyExists,
                    "Resource already exists and has same settings.",
                )
            } else {
                bad_request("Resource already exists and has different settings.")
            };
        }
        if path.is_empty() {
            return bad_request("Empty resource path is specified.");
        }
        let parent = parent_of(path);
        if let Some(parent) = parent
            && !self.nodes.contains_key(parent)
        {
            return bad_request(format!("Parent resource \"{parent}\" doesn't exist."));
        }
        validate_props(&hdrr, parent.is_none())?;
        validate_metering(metering.as_ref())?;
        if let Some(parent) = parent.and_then(|p| self.nodes.get_mut(p)) {
            parent.children.insert(path.to_string());
        }
        self.nodes.insert(
            path.to_string(),
            Node {
                hdrr,
                metering,
                children: BTreeSet::new(),
                bucket: None,
            },
        );
        Ok(())
    }

    /// `AlterResource`: full replacement of the settings (§4.2 step 8, §6.2).
    pub(crate) fn alter(&mut self, resource: &Resource) -> Result<(), Rejection> {
        let (hdrr, metering) = settings(resource)?;
        let path = resource.resource_path.as_str();
        if path.is_empty() {
            return bad_request("You should specify resource path or resource id.");
        }
        if !valid_chars(path) {
            return bad_request("Invalid resource path.");
        }
        if !self.nodes.contains_key(path) {
            return reject(StatusCode::NotFound, "No resource found.");
        }
        validate_props(&hdrr, parent_of(path).is_none())?;
        validate_metering(metering.as_ref())?;
        if let Some(node) = self.nodes.get_mut(path) {
            node.hdrr = hdrr;
            node.metering = metering;
        }
        // §6.2: a smaller local bucket drops the quota above its new size plus what waits.
        let subtree = self.subtree(path);
        for p in subtree {
            let eff = self.effective(&p);
            let queued = self.queued(&p);
            if let Some(bucket) = self.nodes.get_mut(&p).and_then(|n| n.bucket.as_mut()) {
                let cap = eff.size() + queued;
                if eff.size() > 0.0 && bucket.available > cap {
                    bucket.available = cap;
                }
            }
        }
        Ok(())
    }

    /// `DropResource` (§4.3, §6.3). The waiters on the resource are answered `BadRequest`.
    pub(crate) fn drop_resource(&mut self, path: &str) -> Result<Vec<Answer>, Rejection> {
        check_canonical(path)?;
        if path.is_empty() {
            return bad_request("You should specify resource path or resource id.");
        }
        if !valid_chars(path) {
            return bad_request("Invalid resource path.");
        }
        let Some(node) = self.nodes.get(path) else {
            return reject(StatusCode::NotFound, "Resource doesn't exist.");
        };
        if !node.children.is_empty() {
            return bad_request(format!("Resource \"{path}\" has children."));
        }
        let node = self.nodes.remove(path);
        if let Some(parent) = parent_of(path).and_then(|p| self.nodes.get_mut(p)) {
            parent.children.remove(path);
        }
        let queue = node
            .and_then(|n| n.bucket)
            .map(|b| b.queue)
            .unwrap_or_default();
        Ok(queue
            .into_iter()
            .filter(|call| self.waiters.remove(call).is_some())
            .map(|call| (call, StatusCode::BadRequest))
            .collect())
    }

    /// `DescribeResource`: the stored settings (§4.3, §6.5).
    pub(crate) fn describe(&self, path: &str) -> Result<Resource, Rejection> {
        check_canonical(path)?;
        let node = self.nodes.get(path).ok_or_else(|| missing(path))?;
        Ok(Resource {
            resource_path: path.to_string(),
            r#type: Some(resource::Type::HierarchicalDrr(node.hdrr)),
            metering_config: node.metering.as_ref().map(described_metering),
        })
    }

    /// `ListResources` (§6.4), in sorted order (parents before their children).
    pub(crate) fn list(&self, path: &str, recursive: bool) -> Result<Vec<String>, Rejection> {
        if path.is_empty() {
            return Ok(self
                .nodes
                .keys()
                .filter(|p| recursive || !p.contains('/'))
                .cloned()
                .collect());
        }
        check_canonical(path)?;
        if !self.nodes.contains_key(path) {
            return Err(missing(path));
        }
        Ok(if recursive {
            self.subtree(path)
        } else {
            vec![path.to_string()]
        })
    }

    /// `path` and its descendants, parents first.
    fn subtree(&self, path: &str) -> Vec<String> {
        let mut out = vec![path.to_string()];
        let mut at = 0;
        while let Some(p) = out.get(at) {
            let children = self
                .nodes
                .get(p)
                .map(|n| n.children.clone())
                .unwrap_or_default();
            out.extend(children);
            at += 1;
        }
        out.sort();
        out
    }

    /// §3: own value if set, else the parent's; the rate is also capped by the parent's.
    fn effective(&self, path: &str) -> Effective {
        let Some(node) = self.nodes.get(path) else {
            return Effective {
                rate: 0.0,
                prefetch: 0.0,
                watermark: 0.0,
            };
        };
        let own = node.hdrr;
        let Some(parent) = parent_of(path).map(|p| self.effective(p)) else {
            return Effective {
                rate: own.max_units_per_second,
                prefetch: own.prefetch_coefficient,
                watermark: own.prefetch_watermark,
            };
        };
        let inherit = |own: f64, parent: f64| if own == 0.0 { parent } else { own };
        Effective {
            rate: inherit(own.max_units_per_second, parent.rate).min(parent.rate),
            prefetch: inherit(own.prefetch_coefficient, parent.prefetch),
            watermark: inherit(own.prefetch_watermark, parent.watermark),
        }
    }

    /// What waits on a resource (the quoter's `QueueWeight`).
    fn queued(&self, path: &str) -> f64 {
        let Some(bucket) = self.nodes.get(path).and_then(|n| n.bucket.as_ref()) else {
            return 0.0;
        };
        bucket
            .queue
            .iter()
            .filter_map(|call| self.waiters.get(call))
            .map(|w| w.amount as f64)
            .sum()
    }

    /// `AcquireResource` for an existing coordination node (§4.4 steps 5-7, §7.3, §8).
    ///
    /// # Errors
    ///
    /// None; an unknown resource is answered `BadRequest` at once (§4.4 step 6).
    pub(crate) fn acquire(
        &mut self,
        now: Instant,
        call: CallId,
        path: &str,
        units: Units,
        timeouts: AcquireTimeouts,
    ) -> Acquired {
        if path.is_empty() || !self.nodes.contains_key(path) {
            return Acquired::Now(StatusCode::BadRequest);
        }
        let epoch = *self.epoch.get_or_insert(now);
        let eff = self.effective(path);
        let Some(node) = self.nodes.get_mut(path) else {
            return Acquired::Now(StatusCode::BadRequest);
        };
        let bucket = node.bucket.get_or_insert_with(|| Bucket::new(eff.size()));
        let answer = match units {
            Units::Used(amount) => {
                bucket.charge_used(amount as f64, now);
                Acquired::Now(StatusCode::Success)
            }
            Units::Required(amount) => {
                // FIFO: charged at once only when nothing waits (§7.3 `TryCharge`).
                let charged = if bucket.queue.is_empty() {
                    bucket.charge(amount as f64, now)
                } else {
                    Err(bucket.retry_at)
                };
                let (wait, expired) = timeouts.deadline();
                match charged {
                    Ok(()) => Acquired::Now(StatusCode::Success),
                    // §8.1: no operation timeout, no waiting.
                    Err(_) if wait.is_zero() => Acquired::Now(expired),
                    Err(retry) => {
                        bucket.retry_at = retry.map(|at| granular(epoch, at));
                        bucket.queue.push_back(call);
                        self.waiters.insert(
                            call,
                            Waiter {
                                path: path.to_string(),
                                amount,
                                deadline: granular(epoch, now + wait),
                                expired,
                            },
                        );
                        Acquired::Waiting
                    }
                }
            }
        };
        self.report(path, now, epoch);
        answer
    }

    /// §7.2: the quoter reported to the proxy (after a request, a feed or a tick): the local
    /// quota follows the balance's spending, consumption switches on or off, and an idle quoter
    /// is fed the new local quota at once.
    fn report(&mut self, path: &str, now: Instant, epoch: Instant) {
        let eff = self.effective(path);
        let queued = self.queued(path);
        let Some(bucket) = self.nodes.get_mut(path).and_then(|n| n.bucket.as_mut()) else {
            return;
        };
        if bucket.consuming && bucket.available >= eff.size() + queued {
            bucket.consuming = false;
        } else if !bucket.consuming && bucket.available < eff.low() + queued {
            bucket.consuming = true;
        }
        if bucket.queue.is_empty() {
            bucket.feed();
        }
        if bucket.consuming && self.next_tick.is_none() {
            self.next_tick = Some(next_grid_point(epoch, now));
        }
    }

    /// The earliest instant at which [`Quoter::advance`] has something to do.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        let retries = self
            .nodes
            .values()
            .filter_map(|n| n.bucket.as_ref().and_then(|b| b.retry_at));
        let deadlines = self.waiters.values().map(|w| w.deadline);
        retries.chain(deadlines).chain(self.next_tick).min()
    }

    /// Runs every tick, retry and deadline due by `now`, in time order (at one instant: the
    /// tablet's tick, then the feeds, then retries, then deadlines); returns the answers.
    pub(crate) fn advance(&mut self, now: Instant) -> Vec<Answer> {
        let mut answers = Vec::new();
        while let Some(at) = self.next_deadline().filter(|at| *at <= now) {
            if self.next_tick == Some(at) {
                self.tick(at, &mut answers);
            }
            let retrying: Vec<String> = self
                .nodes
                .iter()
                .filter(|(_, n)| n.bucket.as_ref().and_then(|b| b.retry_at) == Some(at))
                .map(|(p, _)| p.clone())
                .collect();
            for path in retrying {
                self.serve(&path, at, &mut answers);
            }
            let expired: Vec<CallId> = self
                .waiters
                .iter()
                .filter(|(_, w)| w.deadline == at)
                .map(|(call, _)| *call)
                .collect();
            for call in expired {
                self.expire(call, at, &mut answers);
            }
        }
        answers
    }

    /// §7.1: one tablet tick: allocations from every root down, into the consuming buckets;
    /// then the quoter's feed of each queued bucket, and its queue served.
    fn tick(&mut self, at: Instant, answers: &mut Vec<Answer>) {
        let roots: Vec<String> = self
            .nodes
            .keys()
            .filter(|p| !p.contains('/'))
            .cloned()
            .collect();
        let mut allocations = BTreeMap::new();
        for root in roots {
            let quantum = self.effective(&root).quantum();
            self.distribute(&root, quantum, &mut allocations);
        }
        let epoch = self.epoch.unwrap_or(at);
        self.next_tick = None;
        for (path, amount) in allocations {
            if let Some(bucket) = self.nodes.get_mut(&path).and_then(|n| n.bucket.as_mut()) {
                bucket.available += amount;
            }
            self.report(&path, at, epoch);
        }
        let queued: Vec<String> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.bucket.as_ref().is_some_and(|b| !b.queue.is_empty()))
            .map(|(p, _)| p.clone())
            .collect();
        for path in queued {
            if let Some(bucket) = self.nodes.get_mut(&path).and_then(|n| n.bucket.as_mut()) {
                bucket.feed();
            }
            self.serve(&path, at, answers);
        }
        if self.next_tick.is_none() && self.any_consuming() {
            self.next_tick = Some(at + TICK);
        }
    }

    fn any_consuming(&self) -> bool {
        self.nodes
            .values()
            .any(|n| n.bucket.as_ref().is_some_and(|b| b.consuming))
    }

    /// Whether a resource's subtree holds a consuming bucket (the tablet's "active").
    fn active(&self, path: &str) -> bool {
        let Some(node) = self.nodes.get(path) else {
            return false;
        };
        node.bucket.as_ref().is_some_and(|b| b.consuming)
            || node.children.iter().any(|c| self.active(c))
    }

    /// §7.1 `DoProcess`: `budget` is shared round-robin among the active children (the
    /// resource's own consuming session takes any amount; a child resource at most its
    /// quantum), which is water-filling: equal shares, a capped child's rest to the others.
    fn distribute(&self, path: &str, budget: f64, out: &mut BTreeMap<String, f64>) {
        let Some(node) = self.nodes.get(path) else {
            return;
        };
        // (child path or None for the own session, capacity)
        let mut takers: Vec<(Option<&String>, f64)> = Vec::new();
        if node.bucket.as_ref().is_some_and(|b| b.consuming) {
            takers.push((None, f64::INFINITY));
        }
        for child in &node.children {
            if self.active(child) {
                takers.push((Some(child), self.effective(child).quantum()));
            }
        }
        takers.sort_by(|a, b| a.1.total_cmp(&b.1));
        let mut left = budget;
        let count = takers.len();
        for (i, (taker, cap)) in takers.into_iter().enumerate() {
            let share = (left / (count - i) as f64).min(cap);
            left -= share;
            match taker {
                None => *out.entry(path.to_string()).or_default() += share,
                Some(child) => self.distribute(child, share, out),
            }
        }
    }

    /// §7.3 `AllocateResource`: grants from the head of the queue until one cannot be.
    fn serve(&mut self, path: &str, now: Instant, answers: &mut Vec<Answer>) {
        let epoch = self.epoch.unwrap_or(now);
        loop {
            let Some(bucket) = self.nodes.get_mut(path).and_then(|n| n.bucket.as_mut()) else {
                return;
            };
            bucket.retry_at = None;
            let Some(&call) = bucket.queue.front() else {
                break;
            };
            let Some(amount) = self.waiters.get(&call).map(|w| w.amount) else {
                bucket.queue.pop_front();
                continue;
            };
            match bucket.charge(amount as f64, now) {
                Ok(()) => {
                    bucket.queue.pop_front();
                    self.waiters.remove(&call);
                    answers.push((call, StatusCode::Success));
                }
                Err(retry) => {
                    bucket.retry_at = retry.map(|at| granular(epoch, at));
                    break;
                }
            }
        }
        self.report(path, now, epoch);
    }

    /// §7.3: a waiter's deadline passed: it leaves the queue, answered as its timeouts say.
    fn expire(&mut self, call: CallId, now: Instant, answers: &mut Vec<Answer>) {
        let Some(waiter) = self.waiters.remove(&call) else {
            return;
        };
        answers.push((call, waiter.expired));
        if let Some(bucket) = self
            .nodes
            .get_mut(&waiter.path)
            .and_then(|n| n.bucket.as_mut())
        {
            bucket.queue.retain(|c| *c != call);
            if bucket.queue.is_empty() {
                bucket.retry_at = None;
            }
        }
        // The head may have changed: the next one is charged now, as YDB re-runs allocation.
        self.serve(&waiter.path, now, answers);
    }

    /// Every waiter, answered `BadRequest`: the coordination node was dropped (§7.8).
    pub(crate) fn shutdown(&mut self) -> Vec<Answer> {
        std::mem::take(&mut self.waiters)
            .into_keys()
            .map(|call| (call, StatusCode::BadRequest))
            .collect()
    }
}

fn missing(path: &str) -> Rejection {
    Rejection {
        status: StatusCode::NotFound,
        message: format!("Resource with path \"{path}\" doesn't exist."),
    }
}

/// `at` rounded up to the quoter's 1 ms scheduler grid from `epoch` (YDB's
/// `TimeToGranularity`, on absolute time).
fn granular(epoch: Instant, at: Instant) -> Instant {
    let elapsed = at.saturating_duration_since(epoch).as_nanos();
    let step = SCHEDULE_TICK.as_nanos();
    epoch + Duration::from_nanos(u64::try_from(elapsed.div_ceil(step) * step).unwrap_or(u64::MAX))
}

/// The first point of the 100 ms grid from `epoch` strictly after `now`.
fn next_grid_point(epoch: Instant, now: Instant) -> Instant {
    let elapsed = now.saturating_duration_since(epoch).as_nanos();
    let tick = TICK.as_nanos();
    let ticks = u32::try_from(elapsed / tick + 1).unwrap_or(u32::MAX);
    epoch + TICK * ticks
}
