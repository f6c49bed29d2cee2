//! Metrics through the `metrics` facade: the names and labels of the table in
//! `docs/observability.md`.
//!
//! Nothing is recorded unless the application installs a recorder (an exporter); label
//! values are bounded: the semaphore name is a label only when
//! [`SessionOptions::semaphore_labels`](crate::SessionOptions::semaphore_labels) is on.

use std::time::Duration;

use metrics::{Key, Label, Level, Metadata, with_recorder};

use super::types::is_announcement;

/// Acquisitions by result (`acquired`, `timed_out`, `cancelled`, `error`).
pub(crate) const ACQUISITIONS: &str = "ydb_coordination_acquisitions_total";
/// Seconds from the acquire call to the grant.
pub(crate) const ACQUIRE_WAIT: &str = "ydb_coordination_acquire_wait_seconds";
/// Seconds a lease was held, until released or lost.
pub(crate) const LEASE_HOLD: &str = "ydb_coordination_lease_hold_seconds";
/// Leases held now.
pub(crate) const ACTIVE_LEASES: &str = "ydb_coordination_active_leases";
/// Acquires queued by the server now.
pub(crate) const QUEUED_ACQUIRES: &str = "ydb_coordination_queued_acquires";
/// Sessions by state (`attached`, `reattaching`).
pub(crate) const SESSIONS: &str = "ydb_coordination_sessions";
/// Successful reattaches.
pub(crate) const REATTACHES: &str = "ydb_coordination_reattaches_total";
/// Leases lost by cause (`session_expired`, `deadline`, `closed`).
pub(crate) const LEASES_LOST: &str = "ydb_coordination_leases_lost_total";
/// Seconds from sending a request to its answer, by operation.
pub(crate) const REQUEST_DURATION: &str = "ydb_coordination_request_duration_seconds";

/// Where the metrics come from, as the `metrics` macros would say.
static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

const fn label(key: &'static str, value: &'static str) -> [Label; 1] {
    [Label::from_static_parts(key, value)]
}

/// Every fixed label the metrics use, as static slices: a key built on them allocates
/// nothing, so an event costs no allocation when no recorder is installed.
static FIXED: [[Label; 1]; 15] = [
    label("result", "acquired"),
    label("result", "timed_out"),
    label("result", "cancelled"),
    label("result", "error"),
    label("cause", "session_expired"),
    label("cause", "deadline"),
    label("cause", "closed"),
    label("op", "acquire"),
    label("op", "describe"),
    label("op", "release"),
    label("op", "create"),
    label("op", "update"),
    label("op", "delete"),
    label("state", "attached"),
    label("state", "reattaching"),
];

/// The static slice of one fixed label, if it is one of [`FIXED`].
fn fixed(key: &str, value: &str) -> Option<&'static [Label]> {
    FIXED
        .iter()
        .find(|l| l[0].key() == key && l[0].value() == value)
        .map(|l| &l[..])
}

/// The key of metric `name` with the label `extra` and, if given, the semaphore's name.
fn key(
    name: &'static str,
    extra: Option<(&'static str, &'static str)>,
    semaphore: Option<&str>,
) -> Key {
    let fixed = match extra {
        None => Some(&[][..]),
        Some((k, v)) => fixed(k, v),
    };
    debug_assert!(
        fixed.is_some(),
        "a label value missing from FIXED: {extra:?}"
    );
    match (fixed, semaphore) {
        (Some(labels), None) => Key::from_static_parts(name, labels),
        _ => {
            let mut labels = Vec::with_capacity(2);
            labels.extend(extra.map(|(k, v)| Label::new(k, v)));
            labels.extend(semaphore.map(|s| Label::new("semaphore", s.to_string())));
            Key::from_parts(name, labels)
        }
    }
}

fn count(key: Key) {
    with_recorder(|r| r.register_counter(&key, &METADATA).increment(1));
}

fn gauge(key: Key, delta: f64) {
    with_recorder(|r| {
        let gauge = r.register_gauge(&key, &METADATA);
        if delta < 0.0 {
            gauge.decrement(-delta);
        } else {
            gauge.increment(delta);
        }
    });
}

fn observe(key: Key, value: Duration) {
    with_recorder(|r| {
        r.register_histogram(&key, &METADATA)
            .record(value.as_secs_f64())
    });
}

/// Per-session metric settings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Metrics {
    semaphore_labels: bool,
}

impl Metrics {
    pub(crate) fn new(semaphore_labels: bool) -> Self {
        Self { semaphore_labels }
    }

    /// The semaphore label's value, when semaphore labels are on.
    fn semaphore<'a>(&self, name: &'a str) -> Option<&'a str> {
        self.semaphore_labels.then_some(name)
    }

    /// An acquire ended: `result` is `acquired`, `timed_out`, `cancelled` or `error`.
    pub(crate) fn acquire_ended(&self, name: &str, result: &'static str, waited: Duration) {
        if is_announcement(name) {
            return;
        }
        let sem = self.semaphore(name);
        count(key(ACQUISITIONS, Some(("result", result)), sem));
        if result == "acquired" {
            observe(key(ACQUIRE_WAIT, None, sem), waited);
            gauge(key(ACTIVE_LEASES, None, sem), 1.0);
        }
    }

    /// A lease ended after `held`; `lost` names the cause when it was not released.
    pub(crate) fn lease_ended(&self, name: &str, held: Duration, lost: Option<&'static str>) {
        if is_announcement(name) {
            return;
        }
        let sem = self.semaphore(name);
        observe(key(LEASE_HOLD, None, sem), held);
        gauge(key(ACTIVE_LEASES, None, sem), -1.0);
        if let Some(cause) = lost {
            count(key(LEASES_LOST, Some(("cause", cause)), sem));
        }
    }

    /// The server queued an acquire (+1) or a queued acquire ended (-1).
    pub(crate) fn queued(&self, name: &str, delta: f64) {
        if is_announcement(name) {
            return;
        }
        gauge(key(QUEUED_ACQUIRES, None, self.semaphore(name)), delta);
    }

    /// The session moved between states (`None`: not counted, e.g. before start or after
    /// the end).
    pub(crate) fn session_state(&self, from: Option<&'static str>, to: Option<&'static str>) {
        if let Some(from) = from {
            gauge(key(SESSIONS, Some(("state", from)), None), -1.0);
        }
        if let Some(to) = to {
            gauge(key(SESSIONS, Some(("state", to)), None), 1.0);
        }
    }

    pub(crate) fn reattached(&self) {
        count(Key::from_static_name(REATTACHES));
    }

    pub(crate) fn request(&self, op: &'static str, took: Duration) {
        observe(key(REQUEST_DURATION, Some(("op", op)), None), took);
    }
}
