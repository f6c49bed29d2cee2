//! What the commands print: human-readable text by default, one JSON object per line with
//! `--json`.

use std::io::Write;

use serde_json::{Map, Value, json};
use ydb_coordination::{
    config::ConsistencyMode, config::NodeConfig, config::RateLimiterCountersMode,
    session::SemaphoreDescription, session::SemaphoreSession,
};

use super::duration;

/// Where and how results are printed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Out {
    pub(crate) json: bool,
}

impl Out {
    /// Prints a JSON object (with `--json`) or the human text on stdout.
    pub(crate) fn print(&self, value: Value, human: impl FnOnce() -> String) {
        // A closed pipe (e.g. `| head -1`) is not an error worth a panic.
        let _ = self.try_print(value, human);
    }

    /// [`Out::print`], telling whether the text could be written: a loop that prints until
    /// stopped ends when its reader is gone.
    pub(crate) fn try_print(
        &self,
        value: Value,
        human: impl FnOnce() -> String,
    ) -> std::io::Result<()> {
        let text = if self.json {
            value.to_string()
        } else {
            human()
        };
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "{text}")?;
        stdout.flush()
    }

    /// Prints `text` as it is on stdout (a format of its own, such as Prometheus's), telling
    /// whether it could be written.
    pub(crate) fn try_print_raw(&self, text: &str) -> std::io::Result<()> {
        let mut stdout = std::io::stdout().lock();
        stdout.write_all(text.as_bytes())?;
        stdout.flush()
    }

    /// Prints an event on stderr: a JSON object with `--json`, otherwise the human text when
    /// there is any (an empty string prints nothing).
    pub(crate) fn event(&self, value: Value, human: impl FnOnce() -> String) {
        let text = if self.json {
            value.to_string()
        } else {
            human()
        };
        if !text.is_empty() {
            eprintln!("{text}");
        }
    }
}

/// Inserts `data` as a string when it is UTF-8, otherwise as `data_hex`.
pub(crate) fn put_data(map: &mut Map<String, Value>, data: &[u8]) {
    match std::str::from_utf8(data) {
        Ok(s) => map.insert("data".into(), Value::String(s.to_string())),
        Err(_) => map.insert("data_hex".into(), Value::String(hex(data))),
    };
}

fn hex(data: &[u8]) -> String {
    data.iter().map(|b| format!("{b:02x}")).collect()
}

/// Data for people: quoted text, or hex for binary data.
pub(crate) fn show_data(data: &[u8]) -> String {
    match std::str::from_utf8(data) {
        Ok(s) => format!("{s:?}"),
        Err(_) => format!("0x{}", hex(data)),
    }
}

fn session_json(s: &SemaphoreSession, waiter: bool) -> Value {
    let mut map = Map::new();
    map.insert("session_id".into(), json!(s.session_id));
    map.insert("count".into(), json!(s.count));
    map.insert("order_id".into(), json!(s.order_id));
    if waiter {
        let timeout = (s.timeout_millis != u64::MAX).then_some(s.timeout_millis);
        map.insert("timeout_ms".into(), json!(timeout));
    }
    put_data(&mut map, &s.data);
    Value::Object(map)
}

/// A semaphore description as a JSON object.
pub(crate) fn semaphore_json(node: &str, d: &SemaphoreDescription) -> Map<String, Value> {
    let mut map = Map::new();
    map.insert("node".into(), json!(node));
    map.insert("name".into(), json!(d.name));
    put_data(&mut map, &d.data);
    map.insert("count".into(), json!(d.count));
    map.insert("limit".into(), json!(d.limit));
    map.insert("ephemeral".into(), json!(d.ephemeral));
    let owners: Vec<Value> = d.owners.iter().map(|o| session_json(o, false)).collect();
    let waiters: Vec<Value> = d.waiters.iter().map(|w| session_json(w, true)).collect();
    map.insert("owners".into(), Value::Array(owners));
    map.insert("waiters".into(), Value::Array(waiters));
    map
}

/// A token count for people: an exclusive lock on an ephemeral semaphore takes them all.
fn count_text(count: u64) -> String {
    if count == u64::MAX {
        "all (exclusive)".to_string()
    } else {
        count.to_string()
    }
}

fn limit_text(d: &SemaphoreDescription) -> String {
    if d.ephemeral {
        "unlimited (ephemeral)".to_string()
    } else {
        d.limit.to_string()
    }
}

/// A semaphore description as a small table.
pub(crate) fn semaphore_text(
    node: &str,
    d: &SemaphoreDescription,
    owners: bool,
    waiters: bool,
) -> String {
    let mut out = String::new();
    let row = |out: &mut String, k: &str, v: String| out.push_str(&format!("{k:<10} {v}\n"));
    row(&mut out, "node", node.to_string());
    row(&mut out, "semaphore", d.name.clone());
    row(&mut out, "limit", limit_text(d));
    row(&mut out, "count", count_text(d.count));
    row(&mut out, "data", show_data(&d.data));
    if owners {
        table(&mut out, "owners", &d.owners, false);
    }
    if waiters {
        table(&mut out, "waiters", &d.waiters, true);
    }
    out.trim_end().to_string()
}

fn table(out: &mut String, title: &str, rows: &[SemaphoreSession], waiter: bool) {
    out.push_str(&format!("{title} ({})\n", rows.len()));
    if rows.is_empty() {
        return;
    }
    let last = if waiter { "TIMEOUT" } else { "" };
    out.push_str(&format!(
        "  {:<20} {:<8} {:<10} {:<8} DATA\n",
        "SESSION", "COUNT", "ORDER", last
    ));
    for r in rows {
        let timeout = match (waiter, r.timeout_millis) {
            (false, _) => String::new(),
            (true, u64::MAX) => "forever".to_string(),
            (true, ms) => duration::format(std::time::Duration::from_millis(ms)),
        };
        out.push_str(&format!(
            "  {:<20} {:<8} {:<10} {:<8} {}\n",
            r.session_id,
            count_text(r.count).trim_end_matches(" (exclusive)"),
            r.order_id,
            timeout,
            show_data(&r.data)
        ));
    }
}

/// One line summing up a semaphore's state, for `watch`.
pub(crate) fn semaphore_line(d: &SemaphoreDescription) -> String {
    let owners: Vec<String> = d
        .owners
        .iter()
        .map(|o| {
            let data = if o.data.is_empty() {
                String::new()
            } else {
                format!(" {}", show_data(&o.data))
            };
            let count = count_text(o.count);
            let count = count.trim_end_matches(" (exclusive)");
            format!("session {} ({count}){data}", o.session_id)
        })
        .collect();
    let limit = if d.ephemeral {
        "ephemeral".to_string()
    } else {
        d.limit.to_string()
    };
    format!(
        "count={}/{limit} owners=[{}] waiters={} data={}",
        count_text(d.count).trim_end_matches(" (exclusive)"),
        owners.join(", "),
        d.waiters.len(),
        show_data(&d.data)
    )
}

fn consistency(m: ConsistencyMode) -> &'static str {
    match m {
        ConsistencyMode::Strict => "strict",
        ConsistencyMode::Relaxed => "relaxed",
        _ => "unset",
    }
}

fn counters(m: RateLimiterCountersMode) -> &'static str {
    match m {
        RateLimiterCountersMode::Aggregated => "aggregated",
        RateLimiterCountersMode::Detailed => "detailed",
        _ => "unset",
    }
}

/// A node's configuration as a JSON object.
pub(crate) fn node_json(node: &str, c: &NodeConfig) -> Value {
    let ms = |d: Option<std::time::Duration>| {
        d.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    };
    json!({
        "node": node,
        "self_check_period_ms": ms(c.self_check_period),
        "session_grace_period_ms": ms(c.session_grace_period),
        "read_consistency": consistency(c.read_consistency_mode),
        "attach_consistency": consistency(c.attach_consistency_mode),
        "rate_limiter_counters": counters(c.rate_limiter_counters_mode),
    })
}

/// A node's configuration as a small table.
pub(crate) fn node_text(node: &str, c: &NodeConfig) -> String {
    let d = |d: Option<std::time::Duration>| d.map_or("default".to_string(), duration::format);
    [
        ("node", node.to_string()),
        ("self-check-period", d(c.self_check_period)),
        ("session-grace-period", d(c.session_grace_period)),
        (
            "read-consistency",
            consistency(c.read_consistency_mode).into(),
        ),
        (
            "attach-consistency",
            consistency(c.attach_consistency_mode).into(),
        ),
        (
            "rate-limiter-counters",
            counters(c.rate_limiter_counters_mode).into(),
        ),
    ]
    .iter()
    .map(|(k, v)| format!("{k:<22} {v}"))
    .collect::<Vec<_>>()
    .join("\n")
}
