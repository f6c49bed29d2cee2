//! A snapshot in Prometheus's text exposition format (`top --once --prometheus`), for
//! node_exporter's textfile collector or any scrape that runs a command: the same numbers as
//! the text and JSON views, one gauge family each, labelled by node, semaphore and session.
//!
//! Sample values are doubles, as the format has them: a limit of `u64::MAX` reads as
//! `1.8446744073709552e19` (the JSON view keeps it exact).

use std::fmt::Write;
use std::time::Duration;

use super::model::{SemaphoreRow, SessionRow, Snapshot};

/// One metric family: its name, help, and samples (labels, value).
struct Family {
    name: &'static str,
    help: &'static str,
    samples: Vec<(Vec<(&'static str, String)>, String)>,
}

impl Family {
    fn new(name: &'static str, help: &'static str) -> Self {
        Self {
            name,
            help,
            samples: Vec::new(),
        }
    }

    fn add(&mut self, labels: Vec<(&'static str, String)>, value: String) {
        self.samples.push((labels, value));
    }

    fn write(&self, out: &mut String) {
        let _ = writeln!(out, "# HELP {} {}", self.name, self.help);
        let _ = writeln!(out, "# TYPE {} gauge", self.name);
        for (labels, value) in &self.samples {
            out.push_str(self.name);
            if !labels.is_empty() {
                out.push('{');
                for (i, (k, v)) in labels.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    let _ = write!(out, "{k}=\"{}\"", escape(v));
                }
                out.push('}');
            }
            let _ = writeln!(out, " {value}");
        }
    }
}

/// A label value as the format quotes it: backslash, double quote and line feed escaped.
fn escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// A count as a sample: exact up to 2^53, in exponent form beyond (a double either way).
fn count(n: u64) -> String {
    if n <= 1 << 53 {
        n.to_string()
    } else {
        #[allow(clippy::cast_precision_loss)]
        let f = n as f64;
        format!("{f:e}")
    }
}

fn seconds(d: Duration) -> String {
    format!("{}", d.as_secs_f64())
}

fn semaphore_labels(s: &SemaphoreRow) -> Vec<(&'static str, String)> {
    vec![("node", s.node.clone()), ("semaphore", s.name.clone())]
}

fn session_labels(s: &SessionRow) -> Vec<(&'static str, String)> {
    vec![
        ("node", s.node.clone()),
        ("session", s.session_id.to_string()),
    ]
}

/// The snapshot's exposition.
pub(crate) fn render(snapshot: &Snapshot) -> String {
    let target = || vec![("target", snapshot.target.clone())];
    let mut complete = Family::new(
        "ydb_coord_top_complete",
        "1 when everything was read, 0 when the notes say what could not be.",
    );
    complete.add(target(), u64::from(snapshot.complete).to_string());
    let mut notes = Family::new(
        "ydb_coord_top_notes",
        "Notes of the snapshot: what could not be read or looks wrong.",
    );
    notes.add(target(), snapshot.notes.len().to_string());
    let mut time = Family::new(
        "ydb_coord_top_timestamp_seconds",
        "When the snapshot was taken, in Unix seconds.",
    );
    #[allow(clippy::cast_precision_loss)]
    let taken = snapshot.time_ms as f64 / 1000.0;
    time.add(target(), format!("{taken}"));

    let mut rtt = Family::new(
        "ydb_coord_node_rtt_seconds",
        "Round trip of the last read of the node's announcements.",
    );
    let mut errors = Family::new(
        "ydb_coord_node_read_errors",
        "Reads of the node that failed while the view ran.",
    );
    for n in &snapshot.nodes {
        let labels = vec![("node", n.path.clone())];
        if let Some(d) = n.rtt {
            rtt.add(labels.clone(), seconds(d));
        }
        errors.add(labels, n.errors.to_string());
    }

    let mut limit = Family::new("ydb_coord_semaphore_limit", "The semaphore's units.");
    let mut held = Family::new("ydb_coord_semaphore_held_units", "Units held.");
    let mut owners = Family::new("ydb_coord_semaphore_owners", "Owners.");
    let mut waiters = Family::new("ydb_coord_semaphore_waiters", "Waiters in the queue.");
    let mut grants = Family::new(
        "ydb_coord_semaphore_grants_per_minute",
        "Grants in the last minute that the view could see.",
    );
    let mut longest = Family::new(
        "ydb_coord_semaphore_longest_held_seconds",
        "How long its longest owner has held it (a lower bound where not exact).",
    );
    let mut owner_held = Family::new(
        "ydb_coord_owner_held_seconds",
        "How long each owner has held the semaphore.",
    );
    let mut owner_delay = Family::new(
        "ydb_coord_owner_in_lock_delay",
        "1 while the owner waits out a mutex's lock delay before its holder gets the guard.",
    );
    for s in &snapshot.semaphores {
        limit.add(semaphore_labels(s), count(s.limit));
        held.add(semaphore_labels(s), count(s.count));
        owners.add(semaphore_labels(s), s.owners.len().to_string());
        waiters.add(semaphore_labels(s), s.waiters.len().to_string());
        grants.add(semaphore_labels(s), s.grants_per_minute.to_string());
        let max = s
            .owners
            .iter()
            .map(|o| o.held_for)
            .max()
            .unwrap_or_default();
        longest.add(semaphore_labels(s), seconds(max));
        for o in &s.owners {
            let mut labels = semaphore_labels(s);
            labels.push(("session", o.session_id.to_string()));
            owner_held.add(labels.clone(), seconds(o.held_for));
            owner_delay.add(labels, u64::from(o.delay_until_ms.is_some()).to_string());
        }
    }

    let mut info = Family::new(
        "ydb_coord_session_info",
        "1 per session, with who it is as its announcement says.",
    );
    let mut age = Family::new("ydb_coord_session_age_seconds", "How long ago it started.");
    let mut timeout = Family::new("ydb_coord_session_timeout_seconds", "Its session timeout.");
    let mut contact = Family::new(
        "ydb_coord_session_contact_age_seconds",
        "How long ago the server last confirmed contact with it (sessions that hold or wait).",
    );
    let mut holds = Family::new("ydb_coord_session_holds", "Semaphores it owns.");
    let mut waits = Family::new("ydb_coord_session_waits", "Semaphores it waits for.");
    for s in &snapshot.sessions {
        let mut labels = session_labels(s);
        labels.extend([
            ("host", s.host.clone()),
            ("pid", s.pid.map(|p| p.to_string()).unwrap_or_default()),
            ("tool", s.tool.clone()),
            ("description", s.description.clone()),
            ("announced", s.announced.to_string()),
        ]);
        info.add(labels, "1".to_string());
        if let Some(d) = s.age {
            age.add(session_labels(s), seconds(d));
        }
        if let Some(d) = s.timeout {
            timeout.add(session_labels(s), seconds(d));
        }
        if let Some(d) = s.contact {
            contact.add(session_labels(s), seconds(d));
        }
        holds.add(session_labels(s), s.holds.to_string());
        waits.add(session_labels(s), s.waits.to_string());
    }

    let mut out = String::new();
    for family in [
        complete,
        notes,
        time,
        rtt,
        errors,
        limit,
        held,
        owners,
        waiters,
        grants,
        longest,
        owner_held,
        owner_delay,
        info,
        age,
        timeout,
        contact,
        holds,
        waits,
    ] {
        family.write(&mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::top::model::{NodeRow, OwnerRow};

    #[test]
    fn labels_are_escaped_and_big_numbers_are_doubles() {
        let s = Snapshot {
            target: "/local/app".to_string(),
            complete: true,
            nodes: vec![NodeRow {
                path: "/local/app".to_string(),
                rtt: Some(Duration::from_millis(2)),
                ..NodeRow::default()
            }],
            semaphores: vec![SemaphoreRow {
                node: "/local/app".to_string(),
                name: "a\"b\\c\nd".to_string(),
                limit: u64::MAX,
                count: u64::MAX,
                owners: vec![OwnerRow {
                    session_id: 7,
                    held_for: Duration::from_millis(1500),
                    delay_until_ms: Some(1),
                    ..OwnerRow::default()
                }],
                ..SemaphoreRow::default()
            }],
            ..Snapshot::default()
        };
        let text = render(&s);
        assert!(text.contains(r#"semaphore="a\"b\\c\nd""#), "{text}");
        assert!(
            text.contains("ydb_coord_semaphore_limit{node=\"/local/app\",semaphore=\"a\\\"b\\\\c\\nd\"} 1.8446744073709552e19"),
            "{text}"
        );
        assert!(text.contains("ydb_coord_top_complete{target=\"/local/app\"} 1"));
        assert!(text.contains("ydb_coord_node_rtt_seconds{node=\"/local/app\"} 0.002"));
        assert!(text.contains("ydb_coord_owner_in_lock_delay{node=\"/local/app\",semaphore=\"a\\\"b\\\\c\\nd\",session=\"7\"} 1"));
        assert!(text.contains(",session=\"7\"} 1.5\n"));
        // Every sample line is `name{labels} value` or `name value`.
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let value = line.rsplit(' ').next().unwrap();
            assert!(value.parse::<f64>().is_ok(), "{line}");
        }
    }
}
