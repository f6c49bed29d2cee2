//! What `top` shows: one snapshot of a coordination node or a lock space, built by the
//! collector and drawn by the view (or printed once as text or JSON).
//!
//! Durations the protocol does not carry (how long an owner has held, how long a waiter has
//! waited) are measured by the view from when it first saw the owner or waiter; `exact` is
//! false for those it found already there when it started, which it shows as "at least".

use std::time::Duration;

use serde_json::{Value, json};

/// Everything one refresh knows.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Snapshot {
    /// What is watched: a node's path, or `space <name> in <directory>`.
    pub(crate) target: String,
    /// Semaphores in use (held or waited for) and the ones named on the command line.
    pub(crate) semaphores: Vec<SemaphoreRow>,
    /// Sessions: those that announce themselves, and those seen owning or waiting.
    pub(crate) sessions: Vec<SessionRow>,
    /// Rate-limiter resources of the node(s).
    pub(crate) resources: Vec<ResourceRow>,
    /// One line each: what the view could not see (a name it could not describe, names a
    /// session could not fit in its announcement, a node it could not reach).
    pub(crate) notes: Vec<String>,
}

/// One semaphore.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct SemaphoreRow {
    /// The node's path (in a lock space the names are spread over several nodes).
    pub(crate) node: String,
    pub(crate) name: String,
    pub(crate) limit: u64,
    /// Units held.
    pub(crate) count: u64,
    pub(crate) ephemeral: bool,
    /// The semaphore's own data, as text (lossy) and cut to a line.
    pub(crate) data: String,
    /// In the server's order (by grant).
    pub(crate) owners: Vec<OwnerRow>,
    /// In the server's queue order.
    pub(crate) waiters: Vec<WaiterRow>,
    /// Grants the view saw in the last minute (new order ids among the owners).
    pub(crate) grants_per_minute: u64,
}

/// An owner of a semaphore.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct OwnerRow {
    pub(crate) session_id: u64,
    pub(crate) count: u64,
    /// The fencing token of the grant (the server's order id).
    pub(crate) fencing_token: u64,
    /// The owner's data, as text (lossy) and cut to a line.
    pub(crate) data: String,
    /// How long it has held, as far as the view knows.
    pub(crate) held_for: Duration,
    /// False when the view found it already holding: `held_for` is a lower bound.
    pub(crate) exact: bool,
}

/// A waiter of a semaphore.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct WaiterRow {
    pub(crate) session_id: u64,
    pub(crate) count: u64,
    /// How long it has waited, as far as the view knows.
    pub(crate) waiting_for: Duration,
    /// False when the view found it already waiting: `waiting_for` is a lower bound.
    pub(crate) exact: bool,
}

/// A session.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct SessionRow {
    pub(crate) node: String,
    pub(crate) session_id: u64,
    /// From its announcement; empty when it does not announce.
    pub(crate) description: String,
    /// Semaphores it owns, among those the view describes.
    pub(crate) holds: u64,
    /// Semaphores it waits for, among those the view describes.
    pub(crate) waits: u64,
    /// It announces what it uses.
    pub(crate) announced: bool,
}

/// A rate-limiter resource.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ResourceRow {
    pub(crate) node: String,
    pub(crate) path: String,
    /// Units per second; `None` when inherited from the parent.
    pub(crate) rate: Option<f64>,
}

impl Snapshot {
    /// The snapshot as one JSON object (`top --once --json`, and each refresh of `--json`).
    pub(crate) fn to_json(&self) -> Value {
        json!({
            "target": self.target,
            "semaphores": self.semaphores.iter().map(SemaphoreRow::to_json).collect::<Vec<_>>(),
            "sessions": self.sessions.iter().map(|s| json!({
                "node": s.node,
                "session_id": s.session_id,
                "description": s.description,
                "holds": s.holds,
                "waits": s.waits,
                "announced": s.announced,
            })).collect::<Vec<_>>(),
            "resources": self.resources.iter().map(|r| json!({
                "node": r.node,
                "path": r.path,
                "rate": r.rate,
            })).collect::<Vec<_>>(),
            "notes": self.notes,
        })
    }
}

impl SemaphoreRow {
    /// Units asked for by the queue (at most `u64::MAX`: exclusive waiters ask for all).
    pub(crate) fn queued_units(&self) -> u64 {
        self.waiters
            .iter()
            .fold(0u64, |sum, w| sum.saturating_add(w.count))
    }

    fn to_json(&self) -> Value {
        json!({
            "node": self.node,
            "name": self.name,
            "limit": self.limit,
            "count": self.count,
            "ephemeral": self.ephemeral,
            "data": self.data,
            "queue": self.waiters.len(),
            "grants_per_minute": self.grants_per_minute,
            "owners": self.owners.iter().map(|o| json!({
                "session_id": o.session_id,
                "count": o.count,
                "fencing_token": o.fencing_token,
                "data": o.data,
                "held_ms": millis(o.held_for),
                "exact": o.exact,
            })).collect::<Vec<_>>(),
            "waiters": self.waiters.iter().map(|w| json!({
                "session_id": w.session_id,
                "count": w.count,
                "waiting_ms": millis(w.waiting_for),
                "exact": w.exact,
            })).collect::<Vec<_>>(),
        })
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
