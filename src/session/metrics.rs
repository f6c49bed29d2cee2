//! Metrics through the `metrics` facade: the names and labels of the README's table.
//!
//! Nothing is recorded unless the application installs a recorder (an exporter); label
//! values are bounded: the semaphore name is a label only when
//! [`SessionOptions::semaphore_labels`](crate::SessionOptions::semaphore_labels) is on.

use std::time::Duration;

use metrics::{Label, counter, gauge, histogram};

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

/// Per-session metric settings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Metrics {
    semaphore_labels: bool,
}

impl Metrics {
    pub(crate) fn new(semaphore_labels: bool) -> Self {
        Self { semaphore_labels }
    }

    fn labels(&self, name: &str, extra: Option<(&'static str, &'static str)>) -> Vec<Label> {
        let mut labels = Vec::with_capacity(2);
        if let Some((k, v)) = extra {
            labels.push(Label::new(k, v));
        }
        if self.semaphore_labels {
            labels.push(Label::new("semaphore", name.to_string()));
        }
        labels
    }

    /// An acquire ended: `result` is `acquired`, `timed_out`, `cancelled` or `error`.
    pub(crate) fn acquire_ended(&self, name: &str, result: &'static str, waited: Duration) {
        counter!(ACQUISITIONS, self.labels(name, Some(("result", result)))).increment(1);
        if result == "acquired" {
            histogram!(ACQUIRE_WAIT, self.labels(name, None)).record(waited.as_secs_f64());
            gauge!(ACTIVE_LEASES, self.labels(name, None)).increment(1.0);
        }
    }

    /// A lease ended after `held`; `lost` names the cause when it was not released.
    pub(crate) fn lease_ended(&self, name: &str, held: Duration, lost: Option<&'static str>) {
        histogram!(LEASE_HOLD, self.labels(name, None)).record(held.as_secs_f64());
        gauge!(ACTIVE_LEASES, self.labels(name, None)).decrement(1.0);
        if let Some(cause) = lost {
            counter!(LEASES_LOST, self.labels(name, Some(("cause", cause)))).increment(1);
        }
    }

    /// The server queued an acquire (+1) or a queued acquire ended (-1).
    pub(crate) fn queued(&self, name: &str, delta: f64) {
        gauge!(QUEUED_ACQUIRES, self.labels(name, None)).increment(delta);
    }

    /// The session moved between states (`None`: not counted, e.g. before start or after
    /// the end).
    pub(crate) fn session_state(&self, from: Option<&'static str>, to: Option<&'static str>) {
        if let Some(from) = from {
            gauge!(SESSIONS, "state" => from).decrement(1.0);
        }
        if let Some(to) = to {
            gauge!(SESSIONS, "state" => to).increment(1.0);
        }
    }

    pub(crate) fn reattached(&self) {
        counter!(REATTACHES).increment(1);
    }

    pub(crate) fn request(&self, op: &'static str, took: Duration) {
        histogram!(REQUEST_DURATION, "op" => op).record(took.as_secs_f64());
    }
}
