//! What `top` knows of each node, updated from watches and polls, and the snapshot built from
//! it. Pure: every call takes `now`; nothing here waits or talks to a server.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::time::{Duration, Instant};

use ydb_coordination::session::{Announcement, SemaphoreDescription, SemaphoreSession};

use super::model::{OwnerRow, ResourceRow, SemaphoreRow, SessionRow, Snapshot, WaiterRow};

/// How far back grants are counted.
const GRANT_WINDOW: Duration = Duration::from_secs(60);

/// The longest data shown for a semaphore or an owner.
const DATA_SHOWN: usize = 80;

/// Which names to show: exact names and `*`/`?` patterns from the command line. With none,
/// every name the node's sessions announce.
#[derive(Debug, Clone, Default)]
pub(crate) struct Selection {
    exact: BTreeSet<String>,
    patterns: Vec<String>,
}

impl Selection {
    /// Names with `*` or `?` are patterns; the others are exact names.
    pub(crate) fn new(names: &[String]) -> Self {
        let (patterns, exact): (Vec<_>, Vec<_>) =
            names.iter().cloned().partition(|n| n.contains(['*', '?']));
        Self {
            exact: exact.into_iter().collect(),
            patterns,
        }
    }

    /// Whether an announced `name` is shown.
    fn takes(&self, name: &str) -> bool {
        if self.exact.is_empty() && self.patterns.is_empty() {
            return true;
        }
        self.exact.contains(name) || self.patterns.iter().any(|p| matches(p, name))
    }
}

/// Whether `name` matches the glob `pattern` (`*` any run, `?` one character).
pub(crate) fn matches(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    // The last `*` seen and where in the name it was tried from: backtrack there.
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi, ni));
                pi += 1;
            }
            Some(&c) if c == '?' || c == n[ni] => {
                pi += 1;
                ni += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    pi = sp + 1;
                    ni = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// How a describe ended.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Described {
    Found(SemaphoreDescription),
    /// No such semaphore (an ephemeral one goes with its last owner and waiter).
    Missing,
    /// Anything else, in words.
    Failed(String),
}

/// When an owner or a waiter was first seen, and whether it was seen arriving.
#[derive(Debug, Clone, Copy)]
struct Seen {
    since: Instant,
    exact: bool,
}

#[derive(Debug, Default)]
struct Name {
    last: Option<Described>,
    owners: HashMap<u64, Seen>,
    waiters: HashMap<u64, Seen>,
    grants: VecDeque<Instant>,
}

impl Name {
    fn described(&mut self, now: Instant, described: Described) {
        let first = !matches!(self.last, Some(Described::Found(_)));
        if let Described::Found(d) = &described {
            let owners = follow(&mut self.owners, &d.owners, now, first);
            // A new owner seen arriving is a grant.
            if !first {
                self.grants.extend(std::iter::repeat_n(now, owners));
            }
            follow(&mut self.waiters, &d.waiters, now, first);
        } else {
            self.owners.clear();
            self.waiters.clear();
        }
        while self
            .grants
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) > GRANT_WINDOW)
        {
            self.grants.pop_front();
        }
        self.last = Some(described);
    }
}

/// Keeps `seen` to the entries of `now_there`; returns how many are new.
fn follow(
    seen: &mut HashMap<u64, Seen>,
    now_there: &[SemaphoreSession],
    now: Instant,
    first: bool,
) -> usize {
    seen.retain(|order, _| now_there.iter().any(|s| s.order_id == *order));
    let mut new = 0;
    for s in now_there {
        seen.entry(s.order_id).or_insert_with(|| {
            new += 1;
            Seen {
                since: now,
                exact: !first,
            }
        });
    }
    new
}

#[derive(Debug, Default)]
struct Node {
    /// The announcing sessions, once read.
    announced: Option<BTreeMap<u64, Announcement>>,
    /// Why the announcements could not be read.
    unreachable: Option<String>,
    names: BTreeMap<String, Name>,
    resources: Option<Result<Vec<ResourceRow>, String>>,
}

/// What `top` knows of the nodes it watches.
#[derive(Debug)]
pub(crate) struct Tracker {
    target: String,
    selection: Selection,
    nodes: BTreeMap<String, Node>,
}

impl Tracker {
    /// Nothing known yet of the nodes `nodes` (their paths).
    pub(crate) fn new(target: impl Into<String>, selection: Selection, nodes: &[String]) -> Self {
        let mut t = Self {
            target: target.into(),
            selection,
            nodes: BTreeMap::new(),
        };
        t.set_nodes(nodes);
        t
    }

    /// The nodes now watched (a lock space's change with its layout); returns the new ones.
    pub(crate) fn set_nodes(&mut self, nodes: &[String]) -> Vec<String> {
        self.nodes.retain(|path, _| nodes.contains(path));
        let new: Vec<String> = nodes
            .iter()
            .filter(|path| !self.nodes.contains_key(*path))
            .cloned()
            .collect();
        for path in &new {
            self.nodes.insert(path.clone(), Node::default());
        }
        new
    }

    /// The owners of the announcement semaphore of `node` (none when it does not exist), or
    /// why they could not be read.
    pub(crate) fn announced(&mut self, node: &str, owners: Result<Vec<SemaphoreSession>, String>) {
        let Some(n) = self.nodes.get_mut(node) else {
            return;
        };
        match owners {
            Ok(owners) => {
                n.unreachable = None;
                n.announced = Some(
                    owners
                        .iter()
                        .map(|o| {
                            let a = Announcement::parse(&o.data).unwrap_or_default();
                            (o.session_id, a)
                        })
                        .collect(),
                );
            }
            Err(why) => n.unreachable = Some(why),
        }
    }

    /// The names of `node` to describe and watch: the exact ones, and the announced ones
    /// the selection takes.
    pub(crate) fn wanted(&self, node: &str) -> BTreeSet<String> {
        let mut wanted = self.selection.exact.clone();
        if let Some(announced) = self.nodes.get(node).and_then(|n| n.announced.as_ref()) {
            let names = announced.values().flat_map(|a| a.names.iter());
            wanted.extend(names.filter(|n| self.selection.takes(n)).cloned());
        }
        wanted
    }

    /// A describe of `name` on `node` (a watch's item or a poll's answer).
    pub(crate) fn described(&mut self, now: Instant, node: &str, name: &str, d: Described) {
        let wanted = self.wanted(node).contains(name);
        let Some(n) = self.nodes.get_mut(node) else {
            return;
        };
        if !wanted {
            n.names.remove(name);
            return;
        }
        n.names
            .entry(name.to_string())
            .or_default()
            .described(now, d);
    }

    /// Forgets the names of `node` no longer wanted.
    pub(crate) fn prune(&mut self, node: &str) {
        let wanted = self.wanted(node);
        if let Some(n) = self.nodes.get_mut(node) {
            n.names.retain(|name, _| wanted.contains(name));
        }
    }

    /// The rate-limiter resources of `node`, or why they could not be read.
    pub(crate) fn resources(&mut self, node: &str, rows: Result<Vec<ResourceRow>, String>) {
        if let Some(n) = self.nodes.get_mut(node) {
            n.resources = Some(rows);
        }
    }

    /// Whether every node's announcements and resources were read (or failed) and every
    /// wanted name described once: what `--once` waits for.
    pub(crate) fn settled(&self) -> bool {
        self.nodes.iter().all(|(path, n)| {
            (n.announced.is_some() || n.unreachable.is_some())
                && n.resources.is_some()
                && self
                    .wanted(path)
                    .iter()
                    .all(|name| n.names.get(name).is_some_and(|x| x.last.is_some()))
        })
    }

    /// The nodes whose announcements could not be read (a node that cannot be reached is
    /// never shown as one where nothing is held).
    pub(crate) fn unreachable(&self) -> Vec<&str> {
        self.nodes
            .iter()
            .filter(|(_, n)| n.unreachable.is_some())
            .map(|(path, _)| path.as_str())
            .collect()
    }

    /// Everything known, as of `now`.
    pub(crate) fn snapshot(&self, now: Instant) -> Snapshot {
        let mut s = Snapshot {
            target: self.target.clone(),
            ..Snapshot::default()
        };
        let mut sessions: BTreeMap<(String, u64), SessionRow> = BTreeMap::new();
        for (path, node) in &self.nodes {
            if let Some(why) = &node.unreachable {
                s.notes.push(format!("{path}: {why}"));
            }
            for (id, a) in node.announced.iter().flatten() {
                let row = session(&mut sessions, path, *id);
                row.description = a.description.clone();
                row.announced = true;
                if a.omitted > 0 {
                    s.notes.push(format!(
                        "{path}: session {id} uses {} more names than its announcement holds",
                        a.omitted
                    ));
                }
            }
            for (name, n) in &node.names {
                match &n.last {
                    Some(Described::Found(d)) => {
                        for o in &d.owners {
                            session(&mut sessions, path, o.session_id).holds += 1;
                        }
                        for w in &d.waiters {
                            session(&mut sessions, path, w.session_id).waits += 1;
                        }
                        s.semaphores.push(row(path, d, n, now));
                    }
                    Some(Described::Missing) if self.selection.exact.contains(name) => {
                        s.notes.push(format!("{path}: no semaphore {name:?}"));
                    }
                    Some(Described::Failed(why)) => {
                        s.notes.push(format!("{path}: {name:?}: {why}"));
                    }
                    Some(Described::Missing) | None => {}
                }
            }
            match &node.resources {
                Some(Ok(rows)) => s.resources.extend(rows.iter().cloned()),
                Some(Err(why)) => s.notes.push(format!("{path}: rate limiter: {why}")),
                None => {}
            }
        }
        s.sessions = sessions.into_values().collect();
        s
    }
}

fn session<'a>(
    sessions: &'a mut BTreeMap<(String, u64), SessionRow>,
    node: &str,
    id: u64,
) -> &'a mut SessionRow {
    sessions
        .entry((node.to_string(), id))
        .or_insert_with(|| SessionRow {
            node: node.to_string(),
            session_id: id,
            ..SessionRow::default()
        })
}

fn row(node: &str, d: &SemaphoreDescription, n: &Name, now: Instant) -> SemaphoreRow {
    let seen = |map: &HashMap<u64, Seen>, order: u64| {
        map.get(&order).map_or((Duration::ZERO, false), |s| {
            (now.saturating_duration_since(s.since), s.exact)
        })
    };
    SemaphoreRow {
        node: node.to_string(),
        name: d.name.clone(),
        limit: d.limit,
        count: d.count,
        ephemeral: d.ephemeral,
        data: text(&d.data),
        owners: d
            .owners
            .iter()
            .map(|o| {
                let (held_for, exact) = seen(&n.owners, o.order_id);
                OwnerRow {
                    session_id: o.session_id,
                    count: o.count,
                    fencing_token: o.order_id,
                    data: text(&o.data),
                    held_for,
                    exact,
                }
            })
            .collect(),
        waiters: d
            .waiters
            .iter()
            .map(|w| {
                let (waiting_for, exact) = seen(&n.waiters, w.order_id);
                WaiterRow {
                    session_id: w.session_id,
                    count: w.count,
                    waiting_for,
                    exact,
                }
            })
            .collect(),
        grants_per_minute: n.grants.len() as u64,
    }
}

/// Data for one line of a table: text (lossy), line breaks as spaces, cut.
fn text(data: &[u8]) -> String {
    let s = String::from_utf8_lossy(data);
    let mut out: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(DATA_SHOWN)
        .collect();
    if s.chars().count() > DATA_SHOWN {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests;
