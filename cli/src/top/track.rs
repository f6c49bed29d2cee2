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
    /// What the watch last gave (owners, count, data, with the polled queue as waiters),
    /// or that the semaphore is missing, or why it could not be read.
    last: Option<Described>,
    owners: HashMap<u64, Seen>,
    /// Whether `owners` follows the semaphore's owners without a gap: an owner new to the
    /// next watch item was seen arriving (a grant).
    owners_known: bool,
    waiters: HashMap<u64, Seen>,
    /// The queue as last polled, less the waiters granted since: the watch reports owners
    /// only, and a poll's owners could be older than the watch's.
    queue: Vec<SemaphoreSession>,
    /// Whether `queue` follows the semaphore's queue without a gap.
    queue_known: bool,
    /// Why the last poll of the queue failed, if it did.
    poll_failed: Option<String>,
    grants: VecDeque<Instant>,
}

/// Whether the waiter `w` is among `owners` (granted since it was seen waiting).
fn granted(owners: &[SemaphoreSession], w: &SemaphoreSession) -> bool {
    owners
        .iter()
        .any(|o| o.order_id == w.order_id || o.session_id == w.session_id)
}

impl Name {
    /// Takes in a watch item: the owners, count and data (its waiters are ignored).
    fn watched(&mut self, now: Instant, described: Described) {
        match described {
            Described::Found(mut d) => {
                // A read that failed says nothing of what happened meanwhile: whoever is
                // found next may have come in the gap.
                let first = !self.owners_known;
                self.queue.retain(|w| !granted(&d.owners, w));
                d.waiters = self.queue.clone();
                let owners = follow(&mut self.owners, &d.owners, now, first);
                // A new owner seen arriving is a grant.
                if !first {
                    self.grants.extend(std::iter::repeat_n(now, owners));
                }
                follow(&mut self.waiters, &d.waiters, now, !self.queue_known);
                self.owners_known = true;
                self.last = Some(Described::Found(d));
            }
            Described::Missing => self.missing(),
            Described::Failed(why) => {
                // The order ids still name the same grants when the next read succeeds.
                self.owners_known = false;
                self.last = Some(Described::Failed(why));
            }
        }
        self.forget_grants(now);
    }

    /// Takes in a poll: the queue (its owners, if any, are ignored).
    fn polled(&mut self, now: Instant, described: Described) {
        match described {
            Described::Found(d) => {
                let owners = match &self.last {
                    Some(Described::Found(last)) => last.owners.as_slice(),
                    _ => &[],
                };
                self.queue = d
                    .waiters
                    .into_iter()
                    .filter(|w| !granted(owners, w))
                    .collect();
                follow(&mut self.waiters, &self.queue, now, !self.queue_known);
                if let Some(Described::Found(last)) = &mut self.last {
                    last.waiters = self.queue.clone();
                }
                self.queue_known = true;
                self.poll_failed = None;
            }
            Described::Missing => self.missing(),
            Described::Failed(why) => {
                // The watch is made again after a failed poll: a gap in the owners too.
                self.owners_known = false;
                self.queue_known = false;
                self.poll_failed = Some(why);
            }
        }
        self.forget_grants(now);
    }

    /// No such semaphore: a known empty one, whose next owner is seen arriving.
    fn missing(&mut self) {
        self.owners.clear();
        self.waiters.clear();
        self.queue.clear();
        self.owners_known = true;
        self.queue_known = true;
        self.poll_failed = None;
        self.last = Some(Described::Missing);
    }

    /// Whether both the owners and the queue were read (or found missing), or a read
    /// failed (a gap the snapshot reports).
    fn settled(&self) -> bool {
        self.failure().is_some() || (self.owners_known && self.queue_known)
    }

    /// Why the name could not be read, if it could not.
    fn failure(&self) -> Option<&str> {
        match &self.last {
            Some(Described::Failed(why)) => Some(why),
            _ => self.poll_failed.as_deref(),
        }
    }

    fn forget_grants(&mut self, now: Instant) {
        while self
            .grants
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) > GRANT_WINDOW)
        {
            self.grants.pop_front();
        }
    }

    /// Grants within the minute before `now`.
    fn grants_per_minute(&self, now: Instant) -> u64 {
        let recent = self
            .grants
            .iter()
            .filter(|t| now.saturating_duration_since(**t) <= GRANT_WINDOW)
            .count();
        u64::try_from(recent).unwrap_or(u64::MAX)
    }

    /// No longer followed: nobody announces it. Its grants stay for the minute; if it is
    /// followed again, whoever holds or waits then may have come in the gap.
    fn let_go(&mut self) {
        *self = Self {
            grants: std::mem::take(&mut self.grants),
            ..Self::default()
        };
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
    /// Sessions whose announcement this version cannot read.
    unreadable: BTreeSet<u64>,
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
                n.unreadable.clear();
                let mut announced = BTreeMap::new();
                for o in &owners {
                    let a = Announcement::parse(&o.data).unwrap_or_else(|| {
                        n.unreadable.insert(o.session_id);
                        Announcement::default()
                    });
                    announced.insert(o.session_id, a);
                }
                n.announced = Some(announced);
            }
            // Its names stay followed (each read fails or not on its own), but its sessions
            // are not shown as current while it cannot be read.
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

    /// A describe of `name` on `node` with its queue (a poll's answer): only the waiters
    /// are taken from it, less those the watch has seen granted.
    pub(crate) fn polled(&mut self, now: Instant, node: &str, name: &str, d: Described) {
        if let Some(n) = self.name(node, name) {
            n.polled(now, d);
        }
    }

    /// A describe of `name` on `node` with its owners (a watch's item): the waiters are
    /// the last polled ones, less those granted since.
    pub(crate) fn watched(&mut self, now: Instant, node: &str, name: &str, d: Described) {
        if let Some(n) = self.name(node, name) {
            n.watched(now, d);
        }
    }

    /// What is known of a wanted `name` on `node` (a late answer for a name no longer
    /// wanted is dropped).
    fn name(&mut self, node: &str, name: &str) -> Option<&mut Name> {
        if !self.wanted(node).contains(name) {
            return None;
        }
        let n = self.nodes.get_mut(node)?;
        Some(n.names.entry(name.to_string()).or_default())
    }

    /// Lets go of the names of `node` no longer wanted; those granted within the minute are
    /// kept, taken as empty, so that their grants still count if they come back.
    pub(crate) fn prune(&mut self, now: Instant, node: &str) {
        let wanted = self.wanted(node);
        if let Some(n) = self.nodes.get_mut(node) {
            n.names.retain(|name, x| {
                if wanted.contains(name) {
                    return true;
                }
                x.let_go();
                x.forget_grants(now);
                !x.grants.is_empty()
            });
        }
    }

    /// The rate-limiter resources of `node`, or why they could not be read.
    pub(crate) fn resources(&mut self, node: &str, rows: Result<Vec<ResourceRow>, String>) {
        if let Some(n) = self.nodes.get_mut(node) {
            n.resources = Some(rows);
        }
    }

    /// Whether every node's announcements and resources were read (or failed) and every
    /// wanted name described once: what `--once` waits for. Never while there is no node
    /// (a space whose layout was not read yet).
    pub(crate) fn settled(&self) -> bool {
        !self.nodes.is_empty()
            && self.nodes.iter().all(|(path, n)| {
                (n.announced.is_some() || n.unreachable.is_some())
                    && n.resources.is_some()
                    && self
                        .wanted(path)
                        .iter()
                        .all(|name| n.names.get(name).is_some_and(Name::settled))
            })
    }

    /// What could not be read, one item each: a node's announcements, a wanted name, a
    /// node's resources. Empty when the snapshot is whole (a missing name is not a gap).
    pub(crate) fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (path, n) in &self.nodes {
            if n.unreachable.is_some() {
                out.push(path.clone());
            }
            for name in self.wanted(path) {
                if n.names.get(&name).and_then(Name::failure).is_some() {
                    out.push(format!("{name:?} on {path}"));
                }
            }
            if let Some(Err(_)) = n.resources {
                out.push(format!("the rate limiter of {path}"));
            }
        }
        out
    }

    /// Everything known, as of `now`.
    pub(crate) fn snapshot(&self, now: Instant) -> Snapshot {
        let mut s = Snapshot {
            target: self.target.clone(),
            ..Snapshot::default()
        };
        let mut sessions: BTreeMap<(String, u64), SessionRow> = BTreeMap::new();
        // Exact names found on some node, and those found missing where they were read.
        let mut found = BTreeSet::new();
        let mut missing = BTreeSet::new();
        for (path, node) in &self.nodes {
            if let Some(why) = &node.unreachable {
                s.notes.push(format!("{path}: {why}"));
            }
            for id in &node.unreadable {
                s.notes.push(format!(
                    "{path}: session {id} announces in a format this version cannot read"
                ));
            }
            // The announcements of a node that cannot be read now are not current.
            let announced = node.announced.iter().filter(|_| node.unreachable.is_none());
            for (id, a) in announced.flatten() {
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
            let wanted = self.wanted(path);
            for (name, n) in node.names.iter().filter(|(name, _)| wanted.contains(*name)) {
                match &n.last {
                    Some(Described::Found(d)) => {
                        found.insert(name);
                        for o in &d.owners {
                            session(&mut sessions, path, o.session_id).holds += 1;
                        }
                        for w in &d.waiters {
                            session(&mut sessions, path, w.session_id).waits += 1;
                        }
                        s.semaphores.push(row(path, d, n, now));
                        if let Some(why) = &n.poll_failed {
                            s.notes.push(format!("{path}: {name:?}: queue: {why}"));
                        }
                    }
                    Some(Described::Missing) if self.selection.exact.contains(name) => {
                        missing.insert(name);
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
        // In a space an exact name is looked for on every node and lives on one.
        for name in missing.difference(&found) {
            s.notes
                .push(format!("{}: no semaphore {name:?}", self.target));
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
        grants_per_minute: n.grants_per_minute(now),
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
