//! What `top` knows of each node, updated from watches and polls, and the snapshot built from
//! it. Pure: every call takes `now`; nothing here waits or talks to a server.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::time::{Duration, Instant};

use ydb_coordination::Mutex;
use ydb_coordination::session::{Announced, SemaphoreDescription, SemaphoreSession};

use super::follow::{Announcements, Part};
use super::model::{
    NodeRow, OwnerRow, ResourceRow, SemaphoreRow, SessionRow, Snapshot, UseRow, WaiterRow,
};

/// How far back grants are counted.
const GRANT_WINDOW: Duration = Duration::from_secs(60);

/// The wall clock against the monotonic one, taken when the view started: the
/// announcements' times are wall-clock times, the view's own are instants.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    pub(crate) instant: Instant,
    pub(crate) wall_ms: u64,
}

impl Clock {
    /// Now.
    pub(crate) fn now() -> Self {
        let wall_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, super::model::millis);
        Self {
            instant: Instant::now(),
            wall_ms,
        }
    }

    /// `at` in Unix milliseconds.
    pub(crate) fn wall(&self, at: Instant) -> u64 {
        match at.checked_duration_since(self.instant) {
            Some(d) => self.wall_ms.saturating_add(super::model::millis(d)),
            None => self.wall_ms.saturating_sub(super::model::millis(
                self.instant.saturating_duration_since(at),
            )),
        }
    }
}

/// How long before `now_ms` the wall-clock time `then_ms` was (zero for one ahead of it:
/// another machine's clock).
fn ago(now_ms: u64, then_ms: u64) -> Duration {
    Duration::from_millis(now_ms.saturating_sub(then_ms))
}

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
    /// The grants seen arriving: when, and their order ids.
    grants: VecDeque<(Instant, u64)>,
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
                    self.grants
                        .extend(owners.into_iter().map(|order| (now, order)));
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

    /// A describe with owners and queue (`--once`).
    fn whole(&mut self, now: Instant, described: Described) {
        self.watched(now, described.clone());
        self.polled(now, described);
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
            .is_some_and(|(t, _)| now.saturating_duration_since(*t) > GRANT_WINDOW)
        {
            self.grants.pop_front();
        }
    }

    /// Grants within the minute before `now`: those seen arriving, and the owners in
    /// `announced` (order ids) whose sessions say they were granted within it.
    fn grants_per_minute(&self, now: Instant, announced: &[u64]) -> u64 {
        let seen: BTreeSet<u64> = self
            .grants
            .iter()
            .filter(|(t, _)| now.saturating_duration_since(*t) <= GRANT_WINDOW)
            .map(|(_, order)| *order)
            .collect();
        let more = announced.iter().filter(|o| !seen.contains(o)).count();
        u64::try_from(seen.len() + more).unwrap_or(u64::MAX)
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

/// Keeps `seen` to the entries of `now_there`; returns the order ids of the new ones.
fn follow(
    seen: &mut HashMap<u64, Seen>,
    now_there: &[SemaphoreSession],
    now: Instant,
    first: bool,
) -> Vec<u64> {
    seen.retain(|order, _| now_there.iter().any(|s| s.order_id == *order));
    let mut new = Vec::new();
    for s in now_there {
        seen.entry(s.order_id).or_insert_with(|| {
            new.push(s.order_id);
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
    /// The announcements, once read.
    announced: Option<Announcements>,
    /// Why the announcements could not be read.
    unreachable: Option<String>,
    names: BTreeMap<String, Name>,
    resources: Option<Result<Vec<ResourceRow>, String>>,
    /// The names to describe: the exact ones, and the announced ones the selection takes
    /// (kept as the announcements change, so that a read of a name costs no walk of them).
    wanted: BTreeSet<String>,
    /// The round trip of the last read of the announcements.
    rtt: Option<Duration>,
    /// Reads that failed, and why the last one did.
    errors: u64,
    last_error: Option<String>,
}

impl Node {
    fn failed(&mut self, why: &str) {
        self.errors += 1;
        self.last_error = Some(why.to_string());
    }
}

/// What `top` knows of the nodes it watches.
#[derive(Debug)]
pub(crate) struct Tracker {
    target: String,
    selection: Selection,
    nodes: BTreeMap<String, Node>,
    clock: Clock,
}

impl Tracker {
    /// Nothing known yet of the nodes `nodes` (their paths); `clock` ties the announcements'
    /// wall-clock times to the view's instants.
    pub(crate) fn new(
        target: impl Into<String>,
        selection: Selection,
        nodes: &[String],
        clock: Clock,
    ) -> Self {
        let mut t = Self {
            target: target.into(),
            selection,
            nodes: BTreeMap::new(),
            clock,
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
            let node = Node {
                wanted: self.selection.exact.clone(),
                ..Node::default()
            };
            self.nodes.insert(path.clone(), node);
        }
        new
    }

    /// The announcements of `node` (none when nobody announces), or why they could not be
    /// read, with the round trip of the read.
    pub(crate) fn announced(
        &mut self,
        node: &str,
        read: Result<Announcements, String>,
        rtt: Option<Duration>,
    ) {
        let Some(n) = self.nodes.get_mut(node) else {
            return;
        };
        match read {
            Ok(announcements) => {
                n.unreachable = None;
                n.rtt = rtt.or(n.rtt);
                let mut wanted = self.selection.exact.clone();
                for a in announcements.sessions.values() {
                    // What a session says, whole or as far as it could be read.
                    let names = a.names.as_deref().unwrap_or(&a.record.names);
                    wanted.extend(
                        names
                            .iter()
                            .map(|n| &n.name)
                            .filter(|n| self.selection.takes(n))
                            .cloned(),
                    );
                }
                n.wanted = wanted;
                n.announced = Some(announcements);
            }
            // Its names stay followed (each read fails or not on its own), but its sessions
            // are not shown as current while it cannot be read.
            Err(why) => {
                n.failed(&why);
                n.unreachable = Some(why);
            }
        }
    }

    /// The names of `node` to describe and watch: the exact ones, and the announced ones
    /// the selection takes.
    pub(crate) fn wanted(&self, node: &str) -> BTreeSet<String> {
        self.nodes
            .get(node)
            .map(|n| n.wanted.clone())
            .unwrap_or_default()
    }

    /// A description of `name` on `node`: `Part::Owners` is a watch's item (the waiters are
    /// the last polled ones, less those granted since); `Part::Queue` a poll's (only its
    /// waiters count, less those the watch has seen granted); `Part::Whole` both.
    pub(crate) fn described(
        &mut self,
        now: Instant,
        node: &str,
        name: &str,
        part: Part,
        d: Described,
    ) {
        let Some(n) = self.nodes.get_mut(node) else {
            return;
        };
        // A late answer for a name no longer wanted is dropped.
        if !n.wanted.contains(name) {
            return;
        }
        if let Described::Failed(why) = &d {
            n.failed(why);
        }
        let x = n.names.entry(name.to_string()).or_default();
        match part {
            Part::Owners => x.watched(now, d),
            Part::Queue => x.polled(now, d),
            Part::Whole => x.whole(now, d),
        }
    }

    /// A watch's item (see [`Tracker::described`]).
    #[cfg(test)]
    pub(crate) fn watched(&mut self, now: Instant, node: &str, name: &str, d: Described) {
        self.described(now, node, name, Part::Owners, d);
    }

    /// A poll's answer (see [`Tracker::described`]).
    #[cfg(test)]
    pub(crate) fn polled(&mut self, now: Instant, node: &str, name: &str, d: Described) {
        self.described(now, node, name, Part::Queue, d);
    }

    /// Lets go of the names of `node` no longer wanted; those granted within the minute are
    /// kept, taken as empty, so that their grants still count if they come back.
    pub(crate) fn prune(&mut self, now: Instant, node: &str) {
        if let Some(n) = self.nodes.get_mut(node) {
            let wanted = &n.wanted;
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
            if let Err(why) = &rows {
                n.failed(why);
            }
            n.resources = Some(rows);
        }
    }

    /// Whether every node's announcements and resources were read (or failed) and every
    /// wanted name described once: what `--once` waits for. Never while there is no node
    /// (a space whose layout was not read yet), nor while a session's pages were read as
    /// they changed (the next read may tell them whole).
    pub(crate) fn settled(&self) -> bool {
        !self.nodes.is_empty()
            && self.nodes.values().all(|n| {
                let announced = match &n.announced {
                    _ if n.unreachable.is_some() => true,
                    Some(a) => a.sessions.values().all(|s| !s.torn),
                    None => false,
                };
                announced
                    && n.resources.is_some()
                    && n.wanted
                        .iter()
                        .all(|name| n.names.get(name).is_some_and(Name::settled))
            })
    }

    /// What could not be read, one item each: a node's announcements, something holding
    /// them that is not one, a session whose names cannot be told whole, a wanted name, a
    /// node's resources. Empty when the snapshot is whole (a missing name is not a gap).
    pub(crate) fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (path, n) in &self.nodes {
            if n.unreachable.is_some() {
                out.push(format!("the announcements of {path}"));
            }
            if let Some(a) = n.announced.as_ref().filter(|_| n.unreachable.is_none()) {
                if !a.intruders.is_empty() {
                    out.push(format!("the announcement semaphores of {path}"));
                }
                for (id, s) in &a.sessions {
                    if s.names.is_err() {
                        out.push(format!("the names of session {id} on {path}"));
                    }
                }
            }
            for name in &n.wanted {
                if n.names.get(name).and_then(Name::failure).is_some() {
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
        let wall = self.clock.wall(now);
        let mut s = Snapshot {
            target: self.target.clone(),
            time_ms: wall,
            complete: self.settled() && self.problems().is_empty(),
            ..Snapshot::default()
        };
        let mut sessions: BTreeMap<(String, u64), SessionRow> = BTreeMap::new();
        // Exact names found on some node, and those found missing where they were read.
        let mut found = BTreeSet::new();
        let mut missing = BTreeSet::new();
        for (path, node) in &self.nodes {
            s.nodes.push(NodeRow {
                path: path.clone(),
                rtt: node.rtt,
                errors: node.errors,
                last_error: node.last_error.clone(),
            });
            if let Some(why) = &node.unreachable {
                s.notes.push(format!(
                    "{path}: the announcements could not be read: {why}"
                ));
            }
            // The announcements of a node that cannot be read now are not current.
            let announced = node
                .announced
                .as_ref()
                .filter(|_| node.unreachable.is_none());
            // (session, name) -> what the session says of it.
            let mut says: HashMap<(u64, &str), &Announced> = HashMap::new();
            if let Some(a) = announced {
                for why in &a.intruders {
                    s.notes.push(format!("{path}: {why}"));
                }
                for (id, a) in &a.sessions {
                    let row = session(&mut sessions, path, *id);
                    let r = &a.record;
                    row.description = r.description.clone();
                    row.announced = true;
                    row.host = r.host.clone();
                    row.pid = r.pid;
                    row.tool = r.tool.clone();
                    row.age = r.started_ms.map(|t| ago(wall, t));
                    row.timeout = r.timeout_ms.map(Duration::from_millis);
                    let names = match &a.names {
                        Ok(names) => names,
                        Err(why) => {
                            s.notes.push(format!("{path}: session {id}: {why}"));
                            &r.names
                        }
                    };
                    // An idle session does not send its record again: its time says
                    // nothing of its contact since.
                    if !names.is_empty() {
                        row.contact = r.contact_ms.map(|t| ago(wall, t));
                    }
                    for n in names {
                        says.insert((*id, n.name.as_str()), n);
                    }
                }
            }
            for (name, n) in node
                .names
                .iter()
                .filter(|(name, _)| node.wanted.contains(*name))
            {
                match &n.last {
                    Some(Described::Found(d)) => {
                        found.insert(name);
                        let row = row(path, d, n, now, wall, &says);
                        let owners = row
                            .owners
                            .iter()
                            .map(|o| (o.session_id, o.count, o.held_for, o.exact, None));
                        let waiters = row.waiters.iter().enumerate().map(|(i, w)| {
                            (w.session_id, w.count, w.waiting_for, w.exact, Some(i + 1))
                        });
                        for (id, count, since, exact, position) in owners.chain(waiters) {
                            let r = session(&mut sessions, path, id);
                            if position.is_some() {
                                r.waits += 1;
                            } else {
                                r.holds += 1;
                            }
                            r.uses.push(UseRow {
                                name: name.clone(),
                                held: position.is_none(),
                                count,
                                since,
                                exact,
                                position,
                            });
                        }
                        s.semaphores.push(row);
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

/// The row of semaphore `d` on `node`, as of `now` (`wall` on the wall clock): times from
/// what the owners' and waiters' sessions say (`says`), else from when the view saw them.
fn row(
    node: &str,
    d: &SemaphoreDescription,
    n: &Name,
    now: Instant,
    wall: u64,
    says: &HashMap<(u64, &str), &Announced>,
) -> SemaphoreRow {
    let seen = |map: &HashMap<u64, Seen>, order: u64| {
        map.get(&order).map_or((Duration::ZERO, false), |s| {
            (now.saturating_duration_since(s.since), s.exact)
        })
    };
    let said = |session: u64, held: bool| {
        says.get(&(session, d.name.as_str()))
            .filter(|a| a.held == Some(held))
            .and_then(|a| a.since_ms)
    };
    let mut announced_grants = Vec::new();
    let owners = d
        .owners
        .iter()
        .map(|o| {
            let granted_ms = said(o.session_id, true);
            let (held_for, exact) = match granted_ms {
                Some(t) => {
                    if ago(wall, t) <= GRANT_WINDOW {
                        announced_grants.push(o.order_id);
                    }
                    (ago(wall, t), true)
                }
                None => seen(&n.owners, o.order_id),
            };
            let delay_until_ms = Mutex::delay_until(&d.data, o.order_id)
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(super::model::millis)
                .filter(|t| *t > wall);
            OwnerRow {
                session_id: o.session_id,
                count: o.count,
                fencing_token: o.order_id,
                data: o.data.clone(),
                held_for,
                exact,
                granted_ms,
                delay_until_ms,
            }
        })
        .collect();
    let waiters = d
        .waiters
        .iter()
        .map(|w| {
            let (waiting_for, exact) = match said(w.session_id, false) {
                Some(t) => (ago(wall, t), true),
                None => seen(&n.waiters, w.order_id),
            };
            WaiterRow {
                session_id: w.session_id,
                count: w.count,
                waiting_for,
                exact,
            }
        })
        .collect();
    SemaphoreRow {
        node: node.to_string(),
        name: d.name.clone(),
        limit: d.limit,
        count: d.count,
        ephemeral: d.ephemeral,
        data: d.data.clone(),
        owners,
        waiters,
        grants_per_minute: n.grants_per_minute(now, &announced_grants),
    }
}

#[cfg(test)]
mod tests;
