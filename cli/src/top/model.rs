//! What `top` shows: one snapshot of a coordination node or a lock space, built by the
//! collector and drawn by the view (or printed once as text, JSON or Prometheus).
//!
//! Durations come from the sessions' announcements where they say (since when a name is held
//! or waited for), so that one snapshot knows them; for sessions that do not announce, the
//! view measures from when it first saw the owner or waiter, and `exact` is false for those
//! it found already there, which it shows as "at least".
//!
//! In JSON, the 64-bit numbers the server gives (session ids, fencing tokens, limits, units)
//! are strings of decimal digits, as protobuf's JSON mapping writes them: a JSON number is a
//! double for most readers (`jq` among them), which cannot hold `u64::MAX` exactly. Times
//! and durations in milliseconds, and counts the view makes, stay numbers.

use std::time::Duration;

use serde_json::{Value, json};

/// Everything one refresh knows.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Snapshot {
    /// What is watched: a node's path, or `space <name> in <directory>`.
    pub(crate) target: String,
    /// When the snapshot was taken, in Unix milliseconds.
    pub(crate) time_ms: u64,
    /// Whether everything was read: no note says something could not be (`--once` exits 1
    /// otherwise).
    pub(crate) complete: bool,
    /// The nodes watched, with how reading them went.
    pub(crate) nodes: Vec<NodeRow>,
    /// Semaphores in use (held or waited for) and the ones named on the command line.
    pub(crate) semaphores: Vec<SemaphoreRow>,
    /// Sessions: those that announce themselves, and those seen owning or waiting.
    pub(crate) sessions: Vec<SessionRow>,
    /// Rate-limiter resources of the node(s).
    pub(crate) resources: Vec<ResourceRow>,
    /// One line each: what the view could not see (a name it could not describe, a session
    /// whose names it could not read whole, a node it could not reach, something holding the
    /// announcements that is not one).
    pub(crate) notes: Vec<String>,
}

/// A node and how reading it goes: the health line.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct NodeRow {
    pub(crate) path: String,
    /// The round trip of the last read of its announcements (`None`: none answered yet).
    pub(crate) rtt: Option<Duration>,
    /// Reads that failed since the view started.
    pub(crate) errors: u64,
    /// Why the last failed read failed.
    pub(crate) last_error: Option<String>,
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
    /// The semaphore's own data, in full.
    pub(crate) data: Vec<u8>,
    /// In the server's order (by grant).
    pub(crate) owners: Vec<OwnerRow>,
    /// In the server's queue order.
    pub(crate) waiters: Vec<WaiterRow>,
    /// Grants in the last minute: new owners the view saw arrive, and owners whose
    /// announcements say they were granted within it.
    pub(crate) grants_per_minute: u64,
}

/// An owner of a semaphore.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct OwnerRow {
    pub(crate) session_id: u64,
    pub(crate) count: u64,
    /// The fencing token of the grant (the server's order id).
    pub(crate) fencing_token: u64,
    /// The owner's data, in full.
    pub(crate) data: Vec<u8>,
    /// How long it has held, as far as the view knows.
    pub(crate) held_for: Duration,
    /// False when the view found it already holding and its session does not say since
    /// when: `held_for` is a lower bound.
    pub(crate) exact: bool,
    /// When it was granted (Unix milliseconds), from its session's announcement.
    pub(crate) granted_ms: Option<u64>,
    /// Until when it waits out a mutex's lock delay before its holder gets the guard (Unix
    /// milliseconds), while it does.
    pub(crate) delay_until_ms: Option<u64>,
}

/// A waiter of a semaphore.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct WaiterRow {
    pub(crate) session_id: u64,
    pub(crate) count: u64,
    /// How long it has waited, as far as the view knows.
    pub(crate) waiting_for: Duration,
    /// False when the view found it already waiting and its session does not say since
    /// when: `waiting_for` is a lower bound.
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
    /// Where it runs and what it is, from its announcement (empty or `None` when not said).
    pub(crate) host: String,
    pub(crate) pid: Option<u32>,
    pub(crate) tool: String,
    /// How long ago it started.
    pub(crate) age: Option<Duration>,
    /// Its session timeout.
    pub(crate) timeout: Option<Duration>,
    /// How long ago the server last confirmed contact with it (its record's time; a session
    /// that holds or waits sends it once per timeout).
    pub(crate) contact: Option<Duration>,
    /// What it holds and waits for (the drill-down): names the view describes.
    pub(crate) uses: Vec<UseRow>,
}

/// One name a session holds or waits for.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct UseRow {
    pub(crate) name: String,
    /// Held (else waited for).
    pub(crate) held: bool,
    pub(crate) count: u64,
    /// How long, as the owner or waiter row says.
    pub(crate) since: Duration,
    pub(crate) exact: bool,
    /// For a waiter, its place in the queue (from 1).
    pub(crate) position: Option<usize>,
}

/// A rate-limiter resource.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ResourceRow {
    pub(crate) node: String,
    pub(crate) path: String,
    /// Units per second; `None` when inherited from the parent.
    pub(crate) rate: Option<f64>,
}

/// A 64-bit number from the server, for JSON: a string of its decimal digits.
fn exact(n: u64) -> Value {
    Value::String(n.to_string())
}

impl Snapshot {
    /// The snapshot as one JSON object (`top --once --json`, and each refresh of `--json`).
    pub(crate) fn to_json(&self) -> Value {
        json!({
            "target": self.target,
            "time": rfc3339(self.time_ms),
            "time_ms": self.time_ms,
            "complete": self.complete,
            "nodes": self.nodes.iter().map(|n| json!({
                "node": n.path,
                "rtt_ms": n.rtt.map(|d| d.as_secs_f64() * 1000.0),
                "errors": n.errors,
                "last_error": n.last_error,
            })).collect::<Vec<_>>(),
            "semaphores": self.semaphores.iter().map(SemaphoreRow::to_json).collect::<Vec<_>>(),
            "sessions": self.sessions.iter().map(SessionRow::to_json).collect::<Vec<_>>(),
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
            "limit": exact(self.limit),
            "count": exact(self.count),
            "ephemeral": self.ephemeral,
            "data": String::from_utf8_lossy(&self.data),
            "data_hex": hex(&self.data),
            "queue": self.waiters.len(),
            "grants_per_minute": self.grants_per_minute,
            "owners": self.owners.iter().map(|o| json!({
                "session_id": exact(o.session_id),
                "count": exact(o.count),
                "fencing_token": exact(o.fencing_token),
                "data": String::from_utf8_lossy(&o.data),
                "data_hex": hex(&o.data),
                "held_ms": millis(o.held_for),
                "exact": o.exact,
                "granted": o.granted_ms.map(rfc3339),
                "granted_ms": o.granted_ms,
                "in_lock_delay": o.delay_until_ms.is_some(),
                "lock_delay_until": o.delay_until_ms.map(rfc3339),
            })).collect::<Vec<_>>(),
            "waiters": self.waiters.iter().map(|w| json!({
                "session_id": exact(w.session_id),
                "count": exact(w.count),
                "waiting_ms": millis(w.waiting_for),
                "exact": w.exact,
            })).collect::<Vec<_>>(),
        })
    }
}

impl SessionRow {
    fn to_json(&self) -> Value {
        json!({
            "node": self.node,
            "session_id": exact(self.session_id),
            "description": self.description,
            "announced": self.announced,
            "host": self.host,
            "pid": self.pid,
            "tool": self.tool,
            "age_ms": self.age.map(millis),
            "timeout_ms": self.timeout.map(millis),
            "contact_ms_ago": self.contact.map(millis),
            "holds": self.holds,
            "waits": self.waits,
            "uses": self.uses.iter().map(|u| json!({
                "name": u.name,
                "held": u.held,
                "count": exact(u.count),
                "for_ms": millis(u.since),
                "exact": u.exact,
                "position": u.position,
            })).collect::<Vec<_>>(),
        })
    }
}

pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Bytes as lower-case hex.
pub(crate) fn hex(data: &[u8]) -> String {
    use std::fmt::Write;
    data.iter()
        .fold(String::with_capacity(data.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// Unix milliseconds as an RFC 3339 time in UTC, to the millisecond
/// (`2024-03-01T12:00:00.250Z`).
pub(crate) fn rfc3339(unix_ms: u64) -> String {
    let secs = unix_ms / 1000;
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        unix_ms % 1000
    )
}

/// The Gregorian date `days` after 1970-01-01 (Howard Hinnant's `civil_from_days`).
fn civil(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_as_rfc3339_in_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(951_782_400_250), "2000-02-29T00:00:00.250Z");
        assert_eq!(rfc3339(1_709_294_400_000), "2024-03-01T12:00:00.000Z");
        assert_eq!(rfc3339(253_402_300_799_999), "9999-12-31T23:59:59.999Z");
    }

    #[test]
    fn u64_max_stays_exact_for_a_reader_of_doubles() {
        let row = SemaphoreRow {
            limit: u64::MAX,
            count: u64::MAX,
            owners: vec![OwnerRow {
                session_id: u64::MAX,
                fencing_token: (1 << 53) + 1,
                ..OwnerRow::default()
            }],
            ..SemaphoreRow::default()
        };
        let v = row.to_json();
        assert_eq!(v["limit"], "18446744073709551615");
        assert_eq!(v["owners"][0]["fencing_token"], "9007199254740993");
        // Read back as a double reader would: the string keeps every digit.
        let text = v.to_string();
        assert!(text.contains("\"18446744073709551615\""), "{text}");
    }

    #[test]
    fn data_is_whole_with_its_hex() {
        let row = SemaphoreRow {
            data: [b"x".repeat(200), vec![0xff, 0x00]].concat(),
            ..SemaphoreRow::default()
        };
        let v = row.to_json();
        assert_eq!(v["data_hex"].as_str().unwrap().len(), 404);
        assert!(v["data_hex"].as_str().unwrap().ends_with("ff00"));
        assert!(v["data"].as_str().unwrap().starts_with(&"x".repeat(200)));
    }
}
