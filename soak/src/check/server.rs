//! The checks against the server's own history (`server.jsonl`: every grant, revoke,
//! session start, attach, detach and end as the emulator's nodes made them, stamped on the
//! machine's one clock). They judge the library's guarantees directly, not through their
//! consequences at the register:
//!
//! - **lease-deadline**: when the server expires a session (its timeout ran out) and grants
//!   one of its semaphores to another session, every lease the old session held there had
//!   seen its token fire before that grant; and when it expires a member's directory
//!   session, every space lock of that process had seen its token fire before.
//! - **token-fires**: every lease whose ownership the server ended (an expiry, a forced
//!   expiry, a forced delete, a lost membership) sees its token fire: within a second when
//!   its links were untouched, within a session timeout and a second otherwise.
//! - **server-limit**: the server never lists more owners than a semaphore's limit.
//! - **release-confirmed**: a release reported done had been done on the server.
//! - **membership**: a space lock is granted (reported to its holder) only while its
//!   process is a member of the directory (owns the members' semaphore there).
//! - **bounds**: an acquire with a bound ends within it and a second, whatever the network
//!   does (time its process spent stopped aside).
//!
//! A process that was stopped (SIGSTOP) or killed in the window that matters is excused: its
//! token cannot fire while it does not run, and only fencing stops it.
//!
//! A server ownership is matched to the lease it belongs to by its process (the session's
//! description), its name, and its grant falling between the acquire's invoke and its ok.

use std::collections::{BTreeMap, HashMap};

use super::{Check, Params, Report, Violation, is_worker, ts_fmt};
use crate::history::{Event, Kind, Phase, What};
use crate::worker::{COUNTER, LEADER, MUTEX_NAMES, PERMITS, POOL, SPACE_NAMES};

/// The directory's node, as histories name it.
const DIRECTORY: &str = "directory";
/// How long a token may take to fire after the server ended its lease while its holder's
/// link was untouched: one round trip, and slack for a loaded machine.
const NOTICE: u64 = 1_000_000_000;
/// How far past its bound an acquire may end: one round trip, and slack for a loaded
/// machine.
const BOUND_SLACK: u64 = 1_000_000_000;

/// One ownership the server granted.
#[derive(Debug, Clone)]
struct Own {
    node: String,
    sem: String,
    session: u64,
    process: String,
    granted: u64,
    /// Its order id on its node (the grant's `value`).
    order: Option<u64>,
    /// When and why it ended (`released`, `session-ended`, `deleted`).
    ended: Option<(u64, String)>,
}

/// One acquire of a worker and what became of its lease.
#[derive(Debug, Clone, Default)]
struct Lease {
    op: u64,
    what: Option<What>,
    invoke: u64,
    /// When the acquire ended (ok, fail or unknown).
    ended: Option<u64>,
    ok: Option<u64>,
    /// The order id its grant reported, for a lease on one node (every kind but a space
    /// lock, whose token is its layout's).
    order: Option<u64>,
    /// The first fire of its token, as its watcher or its holder saw it.
    fire: Option<u64>,
    /// When its holder let it go: its release's invoke, or the process's exit.
    let_go: Option<u64>,
    /// When its release was reported done.
    released: Option<u64>,
}

/// What the server's history and the workers' tell, indexed.
#[derive(Debug, Default)]
struct World<'a> {
    owns: Vec<Own>,
    /// Grants by (node, semaphore), in time order: (ts, session).
    grants: HashMap<(&'a str, &'a str), Vec<(u64, u64)>>,
    /// Session ends by (node, session): (ts, why).
    ends: HashMap<(String, u64), (u64, String)>,
    /// Leases by (process, name), in invoke order.
    leases: HashMap<(String, String), Vec<Lease>>,
    /// When each process did not run: stopped (to its SIGCONT) or killed (for ever).
    stopped: HashMap<String, Vec<(u64, u64)>>,
    /// When each process's links were disturbed, by (process, link; `all` for every link).
    disturbed: HashMap<(String, String), Vec<(u64, u64)>>,
    /// Every fault that disturbs every link of every process (tablet restarts): from, to.
    everyone: Vec<(u64, u64)>,
}

impl World<'_> {
    fn stopped_in(&self, process: &str, from: u64, to: u64) -> bool {
        self.stopped
            .get(process)
            .is_some_and(|s| s.iter().any(|&(a, b)| a <= to && from <= b))
    }

    fn disturbed_in(&self, process: &str, node: &str, from: u64, to: u64) -> bool {
        let hit = |list: Option<&Vec<(u64, u64)>>| {
            list.is_some_and(|s| s.iter().any(|&(a, b)| a <= to && from <= b))
        };
        hit(self.disturbed.get(&(process.to_string(), node.to_string())))
            || hit(self
                .disturbed
                .get(&(process.to_string(), "all".to_string())))
            || hit(Some(&self.everyone))
    }

    /// The lease an ownership belongs to: the same process and name, granted between the
    /// acquire's invoke and its ok, and with the same order id when the lease reported one.
    /// The order id tells apart a grant its acquire reported from one the server made in the
    /// same window to an acquire its caller had given up on (and withdrew, or whose session
    /// expires).
    fn lease_of(&self, own: &Own) -> Option<&Lease> {
        self.leases
            .get(&(own.process.clone(), own.sem.clone()))?
            .iter()
            .find(|l| {
                l.invoke <= own.granted
                    && l.ok.is_some_and(|ok| own.granted <= ok)
                    && (l.order.is_none() || l.order == own.order)
            })
    }

    /// The first grant of (node, sem) at or after `ts` to another session than `session`.
    fn next_grant(&self, node: &str, sem: &str, ts: u64, session: u64) -> Option<u64> {
        self.grants
            .get(&(node, sem))?
            .iter()
            .find(|&&(t, s)| t >= ts && s != session)
            .map(|&(t, _)| t)
    }
}

fn index(events: &[Event]) -> World<'_> {
    let mut w = World::default();
    let mut process_of: HashMap<(&str, u64), &str> = HashMap::new();
    let mut open: HashMap<(&str, &str, u64), usize> = HashMap::new();
    let mut lease_at: HashMap<(String, u64), (String, usize)> = HashMap::new();
    let mut stop_at: HashMap<&str, u64> = HashMap::new();
    let mut fault_at: HashMap<u64, (u64, Option<&str>, &str)> = HashMap::new();
    for e in events {
        let p = e.process.as_str();
        let node = e.node.as_deref().unwrap_or("");
        match (p, e.kind, e.phase) {
            ("server", Kind::ServerSession, _) => {
                if let (Some(s), Some(d)) = (e.session, e.detail.as_deref())
                    && is_worker(d)
                {
                    process_of.insert((node, s), d);
                }
            }
            ("server", Kind::SessionEnd, _) => {
                if let Some(s) = e.session {
                    let why = e.detail.clone().unwrap_or_default();
                    w.ends.insert((node.to_string(), s), (e.ts, why));
                }
            }
            ("server", Kind::Grant, _) => {
                let (Some(s), Some(sem)) = (e.session, e.name.as_deref()) else {
                    continue;
                };
                w.grants.entry((node, sem)).or_default().push((e.ts, s));
                let Some(&process) = process_of.get(&(node, s)) else {
                    continue;
                };
                if let Some(order) = e.value {
                    open.insert((node, sem, order), w.owns.len());
                }
                w.owns.push(Own {
                    node: node.to_string(),
                    sem: sem.to_string(),
                    session: s,
                    process: process.to_string(),
                    granted: e.ts,
                    order: e.value,
                    ended: None,
                });
            }
            ("server", Kind::Revoke, _) => {
                let (Some(sem), Some(order)) = (e.name.as_deref(), e.value) else {
                    continue;
                };
                if let Some(i) = open.remove(&(node, sem, order))
                    && let Some(own) = w.owns.get_mut(i)
                {
                    own.ended = Some((e.ts, e.detail.clone().unwrap_or_default()));
                }
            }
            ("controller", Kind::Stop, _) => {
                if let Some(t) = e.target.as_deref() {
                    stop_at.insert(t, e.ts);
                }
            }
            ("controller", Kind::Cont, _) => {
                if let Some(t) = e.target.as_deref()
                    && let Some(from) = stop_at.remove(t)
                {
                    w.stopped
                        .entry(t.to_string())
                        .or_default()
                        .push((from, e.ts));
                }
            }
            ("controller", Kind::Kill, _) => {
                if let Some(t) = e.target.as_deref() {
                    w.stopped
                        .entry(t.to_string())
                        .or_default()
                        .push((e.ts, u64::MAX));
                }
            }
            ("controller", Kind::Fault, Phase::Invoke) => {
                let kind = e.detail.as_deref().unwrap_or("");
                fault_at.insert(e.op, (e.ts, e.target.as_deref(), kind));
            }
            ("controller", Kind::Fault, Phase::Ok) => {
                let Some((from, target, kind)) = fault_at.remove(&e.op) else {
                    continue;
                };
                match target {
                    Some(t) => {
                        // The heal names the links it touched (`all` unless one).
                        let links = e.node.as_deref().unwrap_or("all");
                        for link in links.split('+') {
                            w.disturbed
                                .entry((t.to_string(), link.to_string()))
                                .or_default()
                                .push((from, e.ts));
                        }
                    }
                    // Faults of every process: a tablet restart, every directory link slow.
                    None if kind == "tablet-restart" || kind.starts_with("directory-delay") => {
                        w.everyone.push((from, e.ts));
                    }
                    None => {}
                }
            }
            (p, kind, phase) if is_worker(p) => {
                index_worker(&mut w, &mut lease_at, e, kind, phase);
            }
            _ => {}
        }
    }
    // Still stopped at the end: for ever.
    for (t, from) in stop_at {
        w.stopped
            .entry(t.to_string())
            .or_default()
            .push((from, u64::MAX));
    }
    w
}

fn lease_mut<'w>(w: &'w mut World<'_>, p: &str, key: &(String, usize)) -> Option<&'w mut Lease> {
    w.leases
        .get_mut(&(p.to_string(), key.0.clone()))
        .and_then(|l| l.get_mut(key.1))
}

fn index_worker(
    w: &mut World<'_>,
    lease_at: &mut HashMap<(String, u64), (String, usize)>,
    e: &Event,
    kind: Kind,
    phase: Phase,
) {
    let p = e.process.as_str();
    match (kind, phase) {
        (Kind::Acquire, Phase::Invoke) => {
            let Some(name) = e.name.clone() else { return };
            let list = w.leases.entry((p.to_string(), name.clone())).or_default();
            list.push(Lease {
                op: e.op,
                what: e.what,
                invoke: e.ts,
                ..Lease::default()
            });
            lease_at.insert((p.to_string(), e.op), (name, list.len().saturating_sub(1)));
        }
        (Kind::Acquire, _) => {
            if let Some(key) = lease_at.get(&(p.to_string(), e.op)).cloned()
                && let Some(l) = lease_mut(w, p, &key)
            {
                l.ended.get_or_insert(e.ts);
                if phase == Phase::Ok {
                    l.ok = Some(e.ts);
                    if l.what != Some(What::Space) {
                        l.order = e.token.map(|t| t[1]);
                    }
                }
            }
        }
        (Kind::Token | Kind::Fired, _) => {
            if let Some(lease) = e.lease
                && let Some(key) = lease_at.get(&(p.to_string(), lease)).cloned()
                && let Some(l) = lease_mut(w, p, &key)
            {
                l.fire.get_or_insert(e.ts);
            }
        }
        (Kind::Release, Phase::Invoke) => {
            if let Some(lease) = e.lease
                && let Some(key) = lease_at.get(&(p.to_string(), lease)).cloned()
                && let Some(l) = lease_mut(w, p, &key)
            {
                l.let_go.get_or_insert(e.ts);
            }
        }
        (Kind::Release, Phase::Ok) => {
            // Only a release that gave the lease back (not one that found it lost).
            if let Some(lease) = e.lease
                && e.value == Some(1)
                && let Some(key) = lease_at.get(&(p.to_string(), lease)).cloned()
                && let Some(l) = lease_mut(w, p, &key)
            {
                l.released = Some(e.ts);
            }
        }
        (Kind::Exit, _) => {
            for list in w
                .leases
                .iter_mut()
                .filter(|((q, _), _)| q == p)
                .map(|(_, l)| l)
            {
                for l in list.iter_mut() {
                    l.let_go.get_or_insert(e.ts);
                }
            }
        }
        _ => {}
    }
}

/// The server-side checks; nothing when the history has no server (a real YDB).
pub(super) fn check(events: &[Event], params: &Params, report: &mut Report) {
    if !events.iter().any(|e| e.process == "server") {
        return;
    }
    let w = index(events);
    let t = params.session_timeout;
    let mut push = |check, message| report.violations.push(Violation { check, message });

    // lease-deadline and token-fires, per ownership the server ended.
    for own in &w.owns {
        let Some((end, why)) = &own.ended else {
            continue;
        };
        let end = *end;
        let session_end = w.ends.get(&(own.node.clone(), own.session));
        let expired =
            why == "session-ended" && session_end.is_some_and(|(_, why)| why == "expired");
        let server_ended = match why.as_str() {
            "deleted" => true,
            "session-ended" => session_end.is_some_and(|(_, why)| why != "stopped"),
            _ => false,
        };
        if own.node == DIRECTORY && own.sem.ends_with("/members") {
            if server_ended {
                membership_lost(&w, own, end, expired, t, &mut push);
            }
            continue;
        }
        let Some(lease) = w.lease_of(own) else {
            continue;
        };
        if expired && let Some(grant) = w.next_grant(&own.node, &own.sem, end, own.session) {
            let done = |at: Option<u64>| at.is_some_and(|a| a < grant);
            if !done(lease.fire)
                && !done(lease.let_go)
                && !w.stopped_in(&own.process, end.saturating_sub(t), grant)
            {
                push(
                    Check::LeaseDeadline,
                    format!(
                        "{} on {}: {} op {} held it; the server expired its session at {} and granted it again at {}, but its token {}",
                        own.sem,
                        own.node,
                        own.process,
                        lease.op,
                        ts_fmt(end),
                        ts_fmt(grant),
                        fired(lease.fire)
                    ),
                );
            }
        }
        if server_ended {
            token_fires(&w, own, lease, end, t, &own.node, &mut push);
        }
    }

    server_limit(events, &mut push);
    release_confirmed(&w, &mut push);
    membership(&w, &mut push);
    bounds(&w, params.acquire_wait, &mut push);
}

fn fired(fire: Option<u64>) -> String {
    match fire {
        Some(f) => format!("fired only at {}", ts_fmt(f)),
        None => "never fired".to_string(),
    }
}

/// A lease the server ended at `end` must see its token fire soon: within [`NOTICE`] when
/// its process's link to `node` was untouched around then, within a session timeout more
/// otherwise (its holder learns it by its own deadline at the latest).
fn token_fires(
    w: &World<'_>,
    own: &Own,
    lease: &Lease,
    end: u64,
    t: u64,
    node: &str,
    push: &mut impl FnMut(Check, String),
) {
    // Let go before the server ended it: nothing left to fire for.
    if lease.let_go.is_some_and(|g| g <= end) || lease.fire.is_some_and(|f| f <= end) {
        return;
    }
    let quiet = !w.disturbed_in(&own.process, node, end.saturating_sub(t), end + NOTICE);
    let bound = end + if quiet { NOTICE } else { t + NOTICE };
    if w.stopped_in(&own.process, end.saturating_sub(t), bound) {
        return;
    }
    let within = |at: Option<u64>| at.is_some_and(|a| a <= bound);
    if within(lease.fire) || within(lease.let_go) {
        return;
    }
    push(
        Check::TokenFires,
        format!(
            "{} op {} ({} on {}): the server ended it at {}, and by {} its token had not fired ({}; let go {})",
            own.process,
            lease.op,
            own.sem,
            own.node,
            ts_fmt(end),
            ts_fmt(bound),
            fired(lease.fire),
            lease.let_go.map_or("never".to_string(), ts_fmt)
        ),
    );
}

/// The process of `own` lost its membership at `end`: every space lock it held then must
/// see its token fire, before `end` if the membership expired (before the directory could
/// stop listing the process), soon after if the server ended it otherwise.
fn membership_lost(
    w: &World<'_>,
    own: &Own,
    end: u64,
    expired: bool,
    t: u64,
    push: &mut impl FnMut(Check, String),
) {
    // A lock lives in the membership its process had when it was granted: the latest one
    // granted before it (an abandoned session's membership may expire after the process
    // joined again with a new one).
    let next = w
        .owns
        .iter()
        .filter(|o| o.process == own.process && o.node == DIRECTORY && o.sem == own.sem)
        .map(|o| o.granted)
        .filter(|&g| g > own.granted)
        .min()
        .unwrap_or(u64::MAX);
    for ((process, name), leases) in &w.leases {
        if *process != own.process {
            continue;
        }
        for lease in leases {
            let held = lease.what == Some(What::Space)
                && lease
                    .ok
                    .is_some_and(|ok| own.granted <= ok && ok <= end && ok < next)
                && lease.let_go.is_none_or(|g| g > end);
            if !held {
                continue;
            }
            if expired
                && lease.fire.is_none_or(|f| f > end)
                && !w.stopped_in(process, end.saturating_sub(t), end)
            {
                push(
                    Check::LeaseDeadline,
                    format!(
                        "{process} op {} held space name {name} when its directory membership expired at {}, and its token {}",
                        lease.op,
                        ts_fmt(end),
                        fired(lease.fire)
                    ),
                );
            }
            token_fires(w, own, lease, end, t, DIRECTORY, push);
        }
    }
}

/// Whether at most one owner may hold a semaphore of the workers at once, whatever its
/// counts (the mutexes, the counter's lock, the election, the space's names).
fn exclusive(sem: &str) -> bool {
    sem == COUNTER || sem == LEADER || MUTEX_NAMES.contains(&sem) || SPACE_NAMES.contains(&sem)
}

fn server_limit(events: &[Event], push: &mut impl FnMut(Check, String)) {
    let mut held: HashMap<(&str, &str), BTreeMap<u64, u64>> = HashMap::new();
    for e in events {
        if e.process != "server" {
            continue;
        }
        let (Some(node), Some(sem), Some(order)) = (e.node.as_deref(), e.name.as_deref(), e.value)
        else {
            continue;
        };
        let owners = held.entry((node, sem)).or_default();
        match e.kind {
            Kind::Grant => {
                let [limit, _, count] = e.token.unwrap_or([u64::MAX, 0, 0]);
                owners.insert(order, count);
                let total: u128 = owners.values().map(|&c| u128::from(c)).sum();
                let limit = if sem == POOL {
                    limit.min(PERMITS)
                } else {
                    limit
                };
                if total > u128::from(limit) || (exclusive(sem) && owners.len() > 1) {
                    push(
                        Check::ServerLimit,
                        format!(
                            "{sem} on {node}: {total} held at {} (limit {limit}), by orders {:?}",
                            ts_fmt(e.ts),
                            owners.keys().collect::<Vec<_>>()
                        ),
                    );
                }
            }
            Kind::Revoke => {
                owners.remove(&order);
            }
            _ => {}
        }
    }
}

fn release_confirmed(w: &World<'_>, push: &mut impl FnMut(Check, String)) {
    for own in &w.owns {
        let Some(lease) = w.lease_of(own) else {
            continue;
        };
        let Some(done) = lease.released else { continue };
        let ended = own.ended.as_ref().map(|(ts, _)| *ts);
        if ended.is_none_or(|e| e > done) {
            push(
                Check::ReleaseConfirmed,
                format!(
                    "{} op {}: its release of {} was reported done at {}, but the server listed it as owner on {} until {}",
                    own.process,
                    lease.op,
                    own.sem,
                    ts_fmt(done),
                    own.node,
                    ended.map_or("the end".to_string(), ts_fmt)
                ),
            );
        }
    }
}

fn membership(w: &World<'_>, push: &mut impl FnMut(Check, String)) {
    let mut member: HashMap<&str, Vec<(u64, u64)>> = HashMap::new();
    for own in &w.owns {
        if own.node == DIRECTORY && own.sem.ends_with("/members") {
            let end = own.ended.as_ref().map_or(u64::MAX, |(ts, _)| *ts);
            member
                .entry(own.process.as_str())
                .or_default()
                .push((own.granted, end));
        }
    }
    if member.is_empty() {
        return;
    }
    for ((process, name), leases) in &w.leases {
        for lease in leases {
            let (Some(What::Space), Some(ok)) = (lease.what, lease.ok) else {
                continue;
            };
            let inside = member
                .get(process.as_str())
                .is_some_and(|m| m.iter().any(|&(from, to)| from <= ok && ok <= to));
            if !inside {
                push(
                    Check::Membership,
                    format!(
                        "{process} op {}: space name {name} granted at {}, while the directory did not list the process as a member",
                        lease.op,
                        ts_fmt(ok)
                    ),
                );
            }
        }
    }
}

/// Every acquire has a bound ([`Params::acquire_wait`]): it ends by then, and a round
/// trip, whatever the network does; time its process spent stopped is not counted.
fn bounds(w: &World<'_>, acquire_wait: u64, push: &mut impl FnMut(Check, String)) {
    for ((process, name), leases) in &w.leases {
        for lease in leases {
            let Some(ended) = lease.ended else { continue };
            let stopped: u64 = w.stopped.get(process).map_or(0, |s| {
                s.iter()
                    .map(|&(a, b)| b.min(ended).saturating_sub(a.max(lease.invoke)))
                    .sum()
            });
            let took = ended.saturating_sub(lease.invoke).saturating_sub(stopped);
            if took > acquire_wait + BOUND_SLACK {
                push(
                    Check::Bounds,
                    format!(
                        "{process} op {}: the acquire of {name} with a bound of {} ms took {} ms (invoked at {})",
                        lease.op,
                        acquire_wait / 1_000_000,
                        took / 1_000_000,
                        ts_fmt(lease.invoke)
                    ),
                );
            }
        }
    }
}
