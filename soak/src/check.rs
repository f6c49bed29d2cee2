//! The checker: a pure function from the merged histories to a verdict.
//!
//! A lease's *tenure* runs from its acquire's ok to the first of: its release's invoke, its
//! token's fire (as the holder saw it), the SIGSTOP, SIGKILL or exit of its process. A
//! stopped process's tenure ends when it is stopped, because from then on only fencing can
//! keep its late writes out: the checks below hold the register to that. A session the
//! server expires ends the tenures on its node at the expiry, as the server grants them to
//! others at once (the holder learns it a message later).

/// The node a lease of the lock node lives on, as histories name it.
const LOCK_NODE: &str = "locks";

mod resource;
mod server;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

use crate::history::{Event, Kind, Phase, Token, What};
use crate::worker::{DEAF, PERMITS};

/// The checks, each a guarantee of the library (or of its users' protocol).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Check {
    /// No two tenures of an exclusive lock overlap (mutex, counter lock, space names).
    Exclusion,
    /// One leader at a time, each with a greater token than the one before.
    OneLeader,
    /// The fenced tokens the register accepted grow strictly per name, and so do the tokens
    /// of successive grants of an exclusive lock (across reshards too).
    TokensGrow,
    /// No fenced write accepted that its writer made after its token fired.
    WriteAfterFired,
    /// No fenced write accepted that its writer made after another holder was granted the
    /// name (a paused holder's late write must be refused).
    StaleWrite,
    /// Never more permits held than the semaphore's limit.
    Permits,
    /// No acquire reported ok without a grant: an invoke before it, a token, and no token
    /// granted twice.
    Grant,
    /// After the last fault healed, every live worker made progress within the window.
    Liveness,
    /// No owner or waiter left on the server at the end.
    Leftovers,
    /// Every published layout is the next step of the one before (two steps a reshard).
    ReshardSteps,
    /// After each fault the server answered and every worker still ran.
    Health,
    /// A lease's token fired before the server, having expired its session, granted its
    /// semaphore to another (and a space lock's before its membership expired).
    LeaseDeadline,
    /// Every lease the server ended (expiry, forced expiry, forced delete, lost membership)
    /// saw its token fire soon after.
    TokenFires,
    /// The server never listed more owners than a semaphore's limit.
    ServerLimit,
    /// A release reported done had been done on the server.
    ReleaseConfirmed,
    /// A space lock is reported granted only while its process is a directory member.
    Membership,
    /// An acquire with a bound ends within it and a round trip.
    Bounds,
    /// The tokens the real resource (PostgreSQL) accepted never decrease per name.
    ResourceTokens,
    /// Every write the real resource accepted was made in a tenure that had begun, with its
    /// lease's token.
    ResourceTenure,
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Check::Exclusion => "exclusion",
            Check::OneLeader => "one-leader",
            Check::TokensGrow => "tokens-grow",
            Check::WriteAfterFired => "write-after-fired",
            Check::StaleWrite => "stale-write",
            Check::Permits => "permits",
            Check::Grant => "grant",
            Check::Liveness => "liveness",
            Check::Leftovers => "leftovers",
            Check::ReshardSteps => "reshard-steps",
            Check::Health => "health",
            Check::LeaseDeadline => "lease-deadline",
            Check::TokenFires => "token-fires",
            Check::ServerLimit => "server-limit",
            Check::ReleaseConfirmed => "release-confirmed",
            Check::Membership => "membership",
            Check::Bounds => "bounds",
            Check::ResourceTokens => "resource-tokens",
            Check::ResourceTenure => "resource-tenure",
        })
    }
}

/// The check named `name` (as the summary prints it).
pub(crate) fn parse_check(name: &str) -> Result<Check, String> {
    CHECKS
        .into_iter()
        .find(|c| c.to_string() == name)
        .ok_or_else(|| format!("{name:?} is not a check; the checks are those the summary lists"))
}

/// Every check, in the order the summary lists them.
pub(crate) const CHECKS: [Check; 19] = [
    Check::Exclusion,
    Check::OneLeader,
    Check::TokensGrow,
    Check::WriteAfterFired,
    Check::StaleWrite,
    Check::Permits,
    Check::Grant,
    Check::Liveness,
    Check::Leftovers,
    Check::ReshardSteps,
    Check::Health,
    Check::LeaseDeadline,
    Check::TokenFires,
    Check::ServerLimit,
    Check::ReleaseConfirmed,
    Check::Membership,
    Check::Bounds,
    Check::ResourceTokens,
    Check::ResourceTenure,
];

/// One broken guarantee.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Violation {
    pub(crate) check: Check,
    pub(crate) message: String,
}

/// What the checker needs besides the events.
#[derive(Debug, Clone)]
pub(crate) struct Params {
    /// How long after the last fault healed every live worker must have made progress
    /// (two session timeouts), in nanoseconds.
    pub(crate) liveness_window: u64,
    /// The session timeout, in nanoseconds.
    pub(crate) session_timeout: u64,
    /// The bound of every acquire, in nanoseconds.
    pub(crate) acquire_wait: u64,
    /// Checks left out of the verdict.
    pub(crate) ignored: Vec<Check>,
}

impl Params {
    /// The parameters of a run with this session timeout.
    pub(crate) fn new(session_timeout: std::time::Duration) -> Self {
        let nanos = |d: std::time::Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Self {
            liveness_window: nanos(session_timeout * 2),
            session_timeout: nanos(session_timeout),
            acquire_wait: nanos(crate::worker::ACQUIRE_WAIT),
            ignored: Vec::new(),
        }
    }
}

/// The verdict and the counts for the summary.
#[derive(Debug, Default)]
pub(crate) struct Report {
    pub(crate) violations: Vec<Violation>,
    pub(crate) processes: usize,
    pub(crate) operations: usize,
    pub(crate) faults: BTreeMap<String, usize>,
    pub(crate) writes_accepted: usize,
    pub(crate) writes_refused: usize,
    pub(crate) lost_updates: usize,
    pub(crate) reshard_steps: usize,
    pub(crate) grants: BTreeMap<What, usize>,
    /// What the server's history counts: grants, session ends by why, tablet restarts.
    pub(crate) server: BTreeMap<String, usize>,
    /// The real resource's writes (`--resource postgres`).
    pub(crate) resource: ResourceCounts,
    /// Checks left out of the verdict (their violations are still listed): a known open
    /// defect, named on the command line (`--ignore`).
    pub(crate) ignored: Vec<Check>,
}

/// What happened to the fenced writes sent to the real resource.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ResourceCounts {
    /// The writes it accepted, as its history table tells.
    pub(crate) accepted: usize,
    /// The writes it refused as stale, as their writers were told.
    pub(crate) refused: usize,
    /// The writes whose outcome their writers never learned.
    pub(crate) unknown: usize,
}

impl Report {
    /// Whether every check passed, those in `ignored` aside.
    pub(crate) fn passed(&self) -> bool {
        self.violations
            .iter()
            .all(|v| self.ignored.contains(&v.check))
    }

    /// The number of violations of `check`.
    pub(crate) fn count(&self, check: Check) -> usize {
        self.violations.iter().filter(|v| v.check == check).count()
    }
}

#[derive(Debug, Clone)]
struct Tenure {
    process: String,
    lease: u64,
    what: What,
    name: String,
    start: u64,
    end: u64,
    token: Option<Token>,
    /// The nodes it is held on: the lock node's name, or the space nodes of its place.
    nodes: Vec<String>,
    /// Ended by the server's expiry of its session, which its holder learns a message
    /// later: a write it made in between is the holder's honest mistake, and only the
    /// register's ordering of tokens (and `write-after-fired`) judges it.
    expired: bool,
}

/// The nodes of a grant: a space lock's from its detail (`epoch 3 on n1+n4`).
fn nodes_of(e: &Event) -> Vec<String> {
    match (e.what, e.detail.as_deref()) {
        (Some(What::Space), Some(detail)) => detail
            .split_once(" on ")
            .map(|(_, nodes)| nodes.split('+').map(str::to_string).collect())
            .unwrap_or_default(),
        _ => vec![LOCK_NODE.to_string()],
    }
}

fn is_worker(process: &str) -> bool {
    process.starts_with('w')
}

fn ts_fmt(ts: u64) -> String {
    format!(
        "{}.{:06}s",
        ts / 1_000_000_000,
        (ts % 1_000_000_000) / 1_000
    )
}

/// Checks the merged histories (sorted by timestamp).
pub(crate) fn check(events: &[Event], params: Params) -> Report {
    let mut report = Report {
        ignored: params.ignored.clone(),
        ..Report::default()
    };
    count(events, &mut report);
    let tenures = tenures(events, &mut report);
    exclusion(&tenures, &mut report);
    tokens_grow(events, &tenures, &mut report);
    fenced_writes(events, &tenures, &mut report);
    permits(&tenures, &mut report);
    liveness(events, &params, &mut report);
    for e in events {
        if e.kind == Kind::Health && e.phase == Phase::Fail {
            report.violations.push(Violation {
                check: Check::Health,
                message: format!(
                    "{}: {}",
                    e.target.as_deref().unwrap_or("the server"),
                    e.detail.as_deref().unwrap_or("")
                ),
            });
        }
        if e.kind == Kind::Leftover {
            report.violations.push(Violation {
                check: Check::Leftovers,
                message: format!(
                    "{} left on {}: {}",
                    e.target.as_deref().unwrap_or("someone"),
                    e.name.as_deref().unwrap_or("?"),
                    e.detail.as_deref().unwrap_or("")
                ),
            });
        }
    }
    reshard_steps(events, &mut report);
    server::check(events, &params, &mut report);
    resource::check(events, &mut report);
    report
}

fn count(events: &[Event], report: &mut Report) {
    let mut processes = HashSet::new();
    for e in events {
        processes.insert(e.process.as_str());
        match (e.process.as_str(), e.kind, e.phase) {
            (p, _, Phase::Invoke) if is_worker(p) => report.operations += 1,
            ("register", Kind::Write, Phase::Ok) => {
                report.writes_accepted += 1;
                if e.detail.as_deref() == Some("lost update") {
                    report.lost_updates += 1;
                }
            }
            ("register", Kind::Write, Phase::Fail) => report.writes_refused += 1,
            ("controller", Kind::Fault, Phase::Invoke) => {
                let kind = e.detail.clone().unwrap_or_default();
                *report.faults.entry(kind).or_default() += 1;
            }
            ("controller", Kind::Reshard, Phase::Ok) if e.name.as_deref() != Some("init") => {
                report.reshard_steps += 1;
            }
            ("server", Kind::Grant, _) => *report.server.entry("grants".into()).or_default() += 1,
            ("server", Kind::Restart, _) => {
                *report.server.entry("tablet restarts".into()).or_default() += 1;
            }
            ("server", Kind::SessionEnd, _) => {
                let why = e.detail.as_deref().unwrap_or("other");
                *report
                    .server
                    .entry(format!("sessions ended ({why})"))
                    .or_default() += 1;
            }
            _ => {}
        }
    }
    report.processes = processes.len();
}

/// The tenures of every granted lease; also checks that every grant had an invoke and a
/// token.
fn tenures(events: &[Event], report: &mut Report) -> Vec<Tenure> {
    let mut invoked: HashSet<(&str, u64)> = HashSet::new();
    let mut sessions: HashMap<(&str, u64), &str> = HashMap::new();
    let mut open: HashMap<(String, u64), Tenure> = HashMap::new();
    let mut done = Vec::new();
    let close = |open: &mut HashMap<(String, u64), Tenure>,
                 done: &mut Vec<Tenure>,
                 key: &(String, u64),
                 ts: u64| {
        if let Some(mut t) = open.remove(key) {
            t.end = ts;
            done.push(t);
        }
    };
    for e in events {
        let p = e.process.as_str();
        match (e.kind, e.phase) {
            (Kind::Acquire, Phase::Invoke) => {
                invoked.insert((p, e.op));
            }
            (Kind::Acquire, Phase::Ok) => {
                let (Some(what), Some(name)) = (e.what, e.name.clone()) else {
                    continue;
                };
                *report.grants.entry(what).or_default() += 1;
                if !invoked.contains(&(p, e.op)) {
                    report.violations.push(Violation {
                        check: Check::Grant,
                        message: format!("{p} op {}: {what:?} {name} ok without an invoke", e.op),
                    });
                }
                if e.token.is_none_or(|t| t[1] == 0) {
                    report.violations.push(Violation {
                        check: Check::Grant,
                        message: format!("{p} op {}: {what:?} {name} ok without a token", e.op),
                    });
                }
                open.insert(
                    (p.to_string(), e.op),
                    Tenure {
                        process: p.to_string(),
                        lease: e.op,
                        what,
                        name,
                        start: e.ts,
                        end: u64::MAX,
                        token: e.token,
                        nodes: nodes_of(e),
                        expired: false,
                    },
                );
            }
            // The library's token (seen by the worker's watcher, whatever the holder does)
            // ends a tenure as its holder's own notice does.
            (Kind::Release, Phase::Invoke) | (Kind::Fired | Kind::Token, _) => {
                if let Some(lease) = e.lease {
                    close(&mut open, &mut done, &(p.to_string(), lease), e.ts);
                }
            }
            (Kind::Exit, _) => {
                let keys: Vec<_> = open.keys().filter(|k| k.0 == p).cloned().collect();
                for k in keys {
                    close(&mut open, &mut done, &k, e.ts);
                }
            }
            (Kind::Session, _) => {
                if let (Some(node), Some(id)) = (e.name.as_deref(), e.value) {
                    sessions.insert((node, id), p);
                }
            }
            (Kind::ServerSession, _) => {
                if let (Some(node), Some(id), Some(owner)) =
                    (e.node.as_deref(), e.session, e.detail.as_deref())
                {
                    sessions.insert((node, id), owner);
                }
            }
            // The server's end of a session (not one its client stopped) ends the tenures on
            // its node, as the controller's note of an expiry it forces does.
            (Kind::Expire, _) | (Kind::SessionEnd, _) => {
                let (node, id) = match e.kind {
                    Kind::SessionEnd if e.detail.as_deref() != Some("stopped") => {
                        (e.node.as_deref(), e.session)
                    }
                    Kind::Expire => (e.name.as_deref(), e.value),
                    _ => continue,
                };
                let (Some(node), Some(id)) = (node, id) else {
                    continue;
                };
                if let Some(owner) = sessions.get(&(node, id)) {
                    let keys: Vec<_> = open
                        .iter()
                        .filter(|(k, t)| k.0 == *owner && t.nodes.iter().any(|n| n == node))
                        .map(|(k, _)| k.clone())
                        .collect();
                    for k in keys {
                        if let Some(t) = open.get_mut(&k) {
                            t.expired = true;
                        }
                        close(&mut open, &mut done, &k, e.ts);
                    }
                }
            }
            (Kind::Stop | Kind::Kill, _) => {
                if let Some(target) = &e.target {
                    let keys: Vec<_> = open.keys().filter(|k| &k.0 == target).cloned().collect();
                    for k in keys {
                        close(&mut open, &mut done, &k, e.ts);
                    }
                }
            }
            _ => {}
        }
    }
    done.extend(open.into_values());
    done.sort_by(|a, b| (a.start, &a.process, a.lease).cmp(&(b.start, &b.process, b.lease)));
    // A token granted twice on one name was not a grant of the server's.
    let mut seen: HashMap<(What, &str, Token), &Tenure> = HashMap::new();
    for t in &done {
        let Some(token) = t.token else { continue };
        if let Some(first) = seen.insert((t.what, &t.name, token), t) {
            report.violations.push(Violation {
                check: Check::Grant,
                message: format!(
                    "{:?} {}: token {token:?} granted to {} op {} and to {} op {}",
                    t.what, t.name, first.process, first.lease, t.process, t.lease
                ),
            });
        }
    }
    done
}

fn by_name(tenures: &[Tenure]) -> BTreeMap<(What, &str), Vec<&Tenure>> {
    let mut map: BTreeMap<(What, &str), Vec<&Tenure>> = BTreeMap::new();
    for t in tenures {
        map.entry((t.what, &t.name)).or_default().push(t);
    }
    map
}

fn exclusion(tenures: &[Tenure], report: &mut Report) {
    for ((what, name), list) in by_name(tenures) {
        if !what.exclusive() {
            continue;
        }
        let check = if what == What::Election {
            Check::OneLeader
        } else {
            Check::Exclusion
        };
        for (i, b) in list.iter().enumerate() {
            for a in &list[..i] {
                if a.start <= b.start && b.start < a.end {
                    report.violations.push(Violation {
                        check,
                        message: format!(
                            "{what:?} {name}: {} (op {}) granted at {} while {} (op {}) held it since {}",
                            b.process,
                            b.lease,
                            ts_fmt(b.start),
                            a.process,
                            a.lease,
                            ts_fmt(a.start)
                        ),
                    });
                }
            }
        }
    }
}

fn tokens_grow(events: &[Event], tenures: &[Tenure], report: &mut Report) {
    // The register's log is in acceptance order (it writes under its lock).
    let mut last: HashMap<&str, Token> = HashMap::new();
    for e in events {
        if e.process != "register" || e.kind != Kind::Write || e.phase != Phase::Ok {
            continue;
        }
        let (Some(name), Some(token)) = (e.name.as_deref(), e.token) else {
            continue;
        };
        if let Some(prev) = last.insert(name, token)
            && token <= prev
        {
            report.violations.push(Violation {
                check: Check::TokensGrow,
                message: format!("{name}: the register accepted {token:?} after {prev:?}"),
            });
        }
    }
    for ((what, name), list) in by_name(tenures) {
        if !what.exclusive() {
            continue;
        }
        let check = if what == What::Election {
            Check::OneLeader
        } else {
            Check::TokensGrow
        };
        for pair in list.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            if let (Some(ta), Some(tb)) = (a.token, b.token)
                && tb[..2] <= ta[..2]
            {
                report.violations.push(Violation {
                    check,
                    message: format!(
                        "{what:?} {name}: {} (op {}) granted {:?} after {} (op {}) had {:?}",
                        b.process,
                        b.lease,
                        &tb[..2],
                        a.process,
                        a.lease,
                        &ta[..2]
                    ),
                });
            }
        }
    }
}

/// The accepted fenced writes against their writers' fires and their successors' grants.
fn fenced_writes(events: &[Event], tenures: &[Tenure], report: &mut Report) {
    let mut invoked: HashMap<(&str, u64), u64> = HashMap::new();
    let mut fired: HashMap<(&str, u64), u64> = HashMap::new();
    for e in events {
        match (e.kind, e.phase, e.lease) {
            // A write its holder made without looking at its token (deaf) is judged by
            // fencing alone: the register's order of tokens (`tokens-grow`).
            (Kind::Write, Phase::Invoke, _) if e.detail.as_deref() == Some(DEAF) => {}
            (Kind::Write, Phase::Invoke, _) => {
                invoked.insert((&e.process, e.op), e.ts);
            }
            (Kind::Fired, _, Some(lease)) => {
                fired.entry((&e.process, lease)).or_insert(e.ts);
            }
            _ => {}
        }
    }
    let grants = by_name(tenures);
    let mut lease_of: HashMap<(&str, u64), &Tenure> = HashMap::new();
    for t in tenures {
        lease_of.insert((&t.process, t.lease), t);
    }
    for e in events {
        if e.process != "register" || e.kind != Kind::Write || e.phase != Phase::Ok {
            continue;
        }
        let (Some(writer), Some(op), Some(lease), Some(_)) =
            (e.target.as_deref(), e.target_op, e.lease, e.token)
        else {
            continue;
        };
        let Some(&at) = invoked.get(&(writer, op)) else {
            continue;
        };
        let name = e.name.as_deref().unwrap_or("?");
        if let Some(&fire) = fired.get(&(writer, lease))
            && at > fire
        {
            report.violations.push(Violation {
                check: Check::WriteAfterFired,
                message: format!(
                    "{name}: {writer} op {op} made at {} was accepted, its token fired at {}",
                    ts_fmt(at),
                    ts_fmt(fire)
                ),
            });
        }
        let Some(own) = lease_of.get(&(writer, lease)) else {
            continue;
        };
        let Some(rivals) = grants.get(&(own.what, own.name.as_str())) else {
            continue;
        };
        if let Some(rival) = rivals.iter().find(|r| {
            own.what.exclusive()
                && !own.expired
                && (r.process.as_str(), r.lease) != (writer, lease)
                && own.start < r.start
                && r.start < at
        }) {
            report.violations.push(Violation {
                check: Check::StaleWrite,
                message: format!(
                    "{name}: {writer} op {op} made at {} was accepted after {} (op {}) was granted at {}",
                    ts_fmt(at),
                    rival.process,
                    rival.lease,
                    ts_fmt(rival.start)
                ),
            });
        }
    }
}

fn permits(tenures: &[Tenure], report: &mut Report) {
    for ((what, name), list) in by_name(tenures) {
        if what != What::Semaphore {
            continue;
        }
        // Ends sort before starts at one instant: a permit given back and taken again.
        let mut edges: Vec<(u64, i64)> = Vec::new();
        for t in list {
            edges.push((t.start, 1));
            edges.push((t.end, -1));
        }
        edges.sort();
        let mut held: i64 = 0;
        for (ts, delta) in edges {
            held += delta;
            if held > i64::try_from(PERMITS).unwrap_or(i64::MAX) {
                report.violations.push(Violation {
                    check: Check::Permits,
                    message: format!(
                        "{name}: {held} permits held at {} (limit {PERMITS})",
                        ts_fmt(ts)
                    ),
                });
            }
        }
    }
}

fn liveness(events: &[Event], params: &Params, report: &mut Report) {
    let Some(healed) = events
        .iter()
        .filter(|e| e.kind == Kind::Fault && e.phase == Phase::Ok)
        .map(|e| e.ts)
        .max()
    else {
        return;
    };
    let mut started: HashMap<&str, u64> = HashMap::new();
    let mut exited: HashMap<&str, u64> = HashMap::new();
    let mut progress: HashMap<&str, Vec<u64>> = HashMap::new();
    for e in events {
        let p = e.process.as_str();
        if !is_worker(p) {
            continue;
        }
        match (e.kind, e.phase) {
            (Kind::Start, _) => {
                started.entry(p).or_insert(e.ts);
            }
            (Kind::Exit, _) => {
                exited.insert(p, e.ts);
            }
            (Kind::Acquire | Kind::Write, Phase::Ok) => progress.entry(p).or_default().push(e.ts),
            _ => {}
        }
    }
    // The live workers are the ones that ran to their end.
    for (p, &exit) in &exited {
        let from = healed.max(started.get(p).copied().unwrap_or(healed));
        let until = from.saturating_add(params.liveness_window);
        let made = progress
            .get(p)
            .is_some_and(|ts| ts.iter().any(|&t| from <= t && t <= until));
        if !made {
            report.violations.push(Violation {
                check: Check::Liveness,
                message: format!(
                    "{p} made no progress between {} and {} (it exited at {})",
                    ts_fmt(from),
                    ts_fmt(until),
                    ts_fmt(exit)
                ),
            });
        }
    }
}

fn reshard_steps(events: &[Event], report: &mut Report) {
    let mut last: Option<(u64, bool)> = None;
    for e in events {
        if e.kind != Kind::Reshard || e.phase != Phase::Ok {
            continue;
        }
        let Some(epoch) = e.value else { continue };
        let transition = e.name.as_deref() == Some("transition");
        if let Some((prev, was_transition)) = last
            && (epoch != prev + 1 || transition == was_transition)
        {
            report.violations.push(Violation {
                check: Check::ReshardSteps,
                message: format!(
                    "layout {} published after epoch {prev} ({}): not its next step",
                    e.detail.as_deref().unwrap_or("?"),
                    if was_transition {
                        "a transition"
                    } else {
                        "stable"
                    }
                ),
            });
        }
        last = Some((epoch, transition));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const PARAMS: Params = Params {
        liveness_window: 6_000 * MS,
        session_timeout: 3_000 * MS,
        acquire_wait: 2_000 * MS,
        ignored: Vec::new(),
    };

    /// A small history builder: events at millisecond times.
    #[derive(Default)]
    struct H {
        events: Vec<Event>,
        next_op: u64,
    }

    impl H {
        fn push(&mut self, e: Event) -> &mut Self {
            self.events.push(e);
            self
        }

        fn op(&mut self) -> u64 {
            self.next_op += 1;
            self.next_op
        }

        /// `p` acquires `name` at `t` with `token`; returns the lease.
        fn grant(&mut self, p: &str, what: What, name: &str, t: u64, token: u64) -> u64 {
            let op = self.op();
            self.push(
                Event::new(p, op, Kind::Acquire, Phase::Invoke)
                    .at((t - 1) * MS)
                    .what(what)
                    .name(name),
            );
            self.push(
                Event::new(p, op, Kind::Acquire, Phase::Ok)
                    .at(t * MS)
                    .what(what)
                    .name(name)
                    .token([0, token, 0]),
            );
            op
        }

        fn release(&mut self, p: &str, lease: u64, t: u64) {
            let op = self.op();
            self.push(
                Event::new(p, op, Kind::Release, Phase::Invoke)
                    .at(t * MS)
                    .lease(lease),
            );
        }

        fn fired(&mut self, p: &str, lease: u64, t: u64) {
            let op = self.op();
            self.push(
                Event::new(p, op, Kind::Fired, Phase::Info)
                    .at(t * MS)
                    .lease(lease),
            );
        }

        /// `p` writes `name` under `lease` with `token` at `t`; the register answers at
        /// `t + 1`.
        fn write(&mut self, p: &str, lease: u64, name: &str, token: Token, t: u64, accepted: bool) {
            let op = self.op();
            self.push(
                Event::new(p, op, Kind::Write, Phase::Invoke)
                    .at(t * MS)
                    .lease(lease)
                    .token(token),
            );
            let phase = if accepted { Phase::Ok } else { Phase::Fail };
            let reg = self.op();
            self.push(
                Event::new("register", reg, Kind::Write, phase)
                    .at((t + 1) * MS)
                    .name(name)
                    .token(token)
                    .target(p)
                    .target_op(op)
                    .lease(lease),
            );
        }

        fn controller(&mut self, kind: Kind, target: &str, t: u64) {
            let op = self.op();
            self.push(
                Event::new("controller", op, kind, Phase::Info)
                    .at(t * MS)
                    .target(target),
            );
        }

        fn check(&mut self) -> Report {
            self.events.sort_by_key(|e| e.ts);
            check(&self.events, PARAMS.clone())
        }

        /// The server starts `session` of `process` on `node` at `t` ms.
        fn server_session(&mut self, node: &str, session: u64, process: &str, t: u64) {
            let op = self.op();
            self.push(
                Event::new("server", op, Kind::ServerSession, Phase::Info)
                    .at(t * MS)
                    .node(node)
                    .session(session)
                    .detail(process),
            );
        }

        /// The server grants `sem` on `node` to `session` at `t` ms less half a millisecond
        /// (inside the acquire `grant` records with its ok at `t`).
        fn server_grant(&mut self, node: &str, sem: &str, session: u64, order: u64, t: u64) {
            let op = self.op();
            self.push(
                Event::new("server", op, Kind::Grant, Phase::Info)
                    .at(t * MS - MS / 2)
                    .node(node)
                    .session(session)
                    .name(sem)
                    .value(order)
                    .token([if sem == "pool" { 3 } else { 1 }, order, 1]),
            );
        }

        /// The server ends `session`'s ownership of `sem` at `t` ms.
        fn server_revoke(
            &mut self,
            node: &str,
            sem: &str,
            session: u64,
            order: u64,
            t: u64,
            why: &str,
        ) {
            let op = self.op();
            self.push(
                Event::new("server", op, Kind::Revoke, Phase::Info)
                    .at(t * MS)
                    .node(node)
                    .session(session)
                    .name(sem)
                    .value(order)
                    .detail(why),
            );
        }

        /// The server ends `session` on `node` at `t` ms (`expired`, `forced`, `stopped`).
        fn server_end(&mut self, node: &str, session: u64, t: u64, why: &str) {
            let op = self.op();
            self.push(
                Event::new("server", op, Kind::SessionEnd, Phase::Info)
                    .at(t * MS)
                    .node(node)
                    .session(session)
                    .detail(why),
            );
        }

        /// The worker's watcher saw the token of `lease` fire at `t` ms.
        fn token(&mut self, p: &str, lease: u64, t: u64) {
            let op = self.op();
            self.push(
                Event::new(p, op, Kind::Token, Phase::Info)
                    .at(t * MS)
                    .lease(lease),
            );
        }

        /// The release of `lease` invoked at `t` ms and reported done (`released`: it gave
        /// the lease back) half a millisecond later.
        fn release_done(&mut self, p: &str, lease: u64, t: u64, released: bool) {
            let op = self.op();
            self.push(
                Event::new(p, op, Kind::Release, Phase::Invoke)
                    .at(t * MS)
                    .lease(lease),
            );
            self.push(
                Event::new(p, op, Kind::Release, Phase::Ok)
                    .at(t * MS + MS / 2)
                    .lease(lease)
                    .value(u64::from(released)),
            );
        }

        /// w0 holds m0 from 10 ms (session 1, order 1); the server expires the session at
        /// 5,000 ms (`why`) and grants m0 to w1's session 2 at once.
        fn expired_holder(why: &str) -> (Self, u64) {
            let mut h = H::default();
            h.server_session(LOCK_NODE, 1, "w0.0", 1);
            h.server_session(LOCK_NODE, 2, "w1.0", 1);
            h.server_grant(LOCK_NODE, "m0", 1, 1, 10);
            let a = h.grant("w0.0", What::Mutex, "m0", 10, 1);
            h.server_end(LOCK_NODE, 1, 5_000, why);
            h.server_revoke(LOCK_NODE, "m0", 1, 1, 5_000, "session-ended");
            h.server_grant(LOCK_NODE, "m0", 2, 2, 5_001);
            h.grant("w1.0", What::Mutex, "m0", 5_001, 2);
            (h, a)
        }
    }

    fn has(report: &Report, check: Check) {
        assert!(
            report.count(check) > 0,
            "expected a {check} violation: {:?}",
            report.violations
        );
    }

    fn passes(report: &Report) {
        assert!(report.passed(), "{:?}", report.violations);
    }

    #[test]
    fn a_token_that_fires_after_the_servers_next_grant_breaks_the_deadline() {
        // Fired before the session expired: as the library promises.
        let (mut h, a) = H::expired_holder("expired");
        h.token("w0.0", a, 4_800);
        passes(&h.check());
        // Fired after the server had expired the session and granted the lock again.
        let (mut h, a) = H::expired_holder("expired");
        h.token("w0.0", a, 5_200);
        only(&h.check(), Check::LeaseDeadline);
        // Never fired: late, and the server-ended tenure never saw its token.
        let (mut h, _) = H::expired_holder("expired");
        let r = h.check();
        has(&r, Check::LeaseDeadline);
        has(&r, Check::TokenFires);
        // Stopped through the deadline: its token could not fire; fencing is left to judge.
        let (mut h, a) = H::expired_holder("expired");
        h.controller(Kind::Stop, "w0.0", 2_500);
        h.controller(Kind::Cont, "w0.0", 6_000);
        h.token("w0.0", a, 6_001);
        passes(&h.check());
    }

    #[test]
    fn a_forced_expiry_needs_the_token_within_a_round_trip_on_a_quiet_link() {
        // The deadline does not apply (the holder could not know), the notice does.
        let (mut h, a) = H::expired_holder("forced");
        h.token("w0.0", a, 5_010);
        passes(&h.check());
        let (mut h, a) = H::expired_holder("forced");
        h.token("w0.0", a, 7_000);
        only(&h.check(), Check::TokenFires);
        // Released 700 ms after the server ended it, its token never fired: the holder
        // worked on a lease it no longer had.
        let (mut h, a) = H::expired_holder("forced");
        h.release("w0.0", a, 5_700);
        passes(&h.check());
        // With its link cut around then, it may learn only by its own deadline.
        let (mut h, a) = H::expired_holder("forced");
        h.push(
            Event::new("controller", 900, Kind::Fault, Phase::Invoke)
                .at(4_900 * MS)
                .detail("link-blackhole")
                .target("w0.0"),
        );
        h.push(
            Event::new("controller", 900, Kind::Fault, Phase::Ok)
                .at(6_000 * MS)
                .detail("link-blackhole")
                .node(LOCK_NODE),
        );
        h.token("w0.0", a, 7_000);
        passes(&h.check());
    }

    #[test]
    fn two_owners_on_the_server_fail() {
        let mut h = H::default();
        h.server_grant(LOCK_NODE, "m0", 1, 1, 10);
        h.server_grant(LOCK_NODE, "m0", 2, 2, 11);
        only(&h.check(), Check::ServerLimit);

        let mut h = H::default();
        for order in 1..=3 {
            h.server_grant(LOCK_NODE, "pool", order, order, 10 + order);
        }
        h.server_revoke(LOCK_NODE, "pool", 1, 1, 20, "released");
        h.server_grant(LOCK_NODE, "pool", 4, 4, 21);
        passes(&h.check());
        h.server_grant(LOCK_NODE, "pool", 5, 5, 22);
        only(&h.check(), Check::ServerLimit);
    }

    #[test]
    fn a_release_reported_before_the_server_revoked_fails() {
        let setup = || {
            let mut h = H::default();
            h.server_session(LOCK_NODE, 1, "w0.0", 1);
            h.server_grant(LOCK_NODE, "m1", 1, 1, 10);
            let a = h.grant("w0.0", What::Mutex, "m1", 10, 1);
            (h, a)
        };
        let (mut h, a) = setup();
        h.release_done("w0.0", a, 20, true);
        h.server_revoke(LOCK_NODE, "m1", 1, 1, 20, "released");
        passes(&h.check());
        let (mut h, a) = setup();
        h.release_done("w0.0", a, 20, true);
        h.server_revoke(LOCK_NODE, "m1", 1, 1, 21, "released");
        only(&h.check(), Check::ReleaseConfirmed);
        // A release that found the lease lost claims nothing.
        let (mut h, a) = setup();
        h.release_done("w0.0", a, 20, false);
        h.server_revoke(LOCK_NODE, "m1", 1, 1, 21, "released");
        passes(&h.check());
    }

    /// An acquire given up on (its stream cut) can still be granted on its old session while
    /// the next acquire waits, and that ownership lasts until the old session expires. It is
    /// not the next lease's: the order ids tell them apart.
    #[test]
    fn a_grant_to_an_acquire_given_up_on_is_not_the_next_leases() {
        let mut h = H::default();
        h.server_session(LOCK_NODE, 1, "w0.0", 1);
        h.server_session(LOCK_NODE, 2, "w0.0", 2);
        h.server_grant(LOCK_NODE, "pool", 1, 7, 12);
        h.server_grant(LOCK_NODE, "pool", 2, 8, 12);
        let a = h.grant("w0.0", What::Semaphore, "pool", 12, 8);
        h.release_done("w0.0", a, 20, true);
        h.server_revoke(LOCK_NODE, "pool", 2, 8, 20, "released");
        h.server_end(LOCK_NODE, 1, 25, "expired");
        h.server_revoke(LOCK_NODE, "pool", 1, 7, 25, "session-ended");
        passes(&h.check());
        // The same history with the lease reporting the orphan's order id fails: the release
        // reported done while the server still listed it.
        let mut h = H::default();
        h.server_session(LOCK_NODE, 1, "w0.0", 1);
        h.server_grant(LOCK_NODE, "pool", 1, 7, 12);
        let a = h.grant("w0.0", What::Semaphore, "pool", 12, 7);
        h.release_done("w0.0", a, 20, true);
        h.server_end(LOCK_NODE, 1, 25, "expired");
        h.server_revoke(LOCK_NODE, "pool", 1, 7, 25, "session-ended");
        only(&h.check(), Check::ReleaseConfirmed);
    }

    #[test]
    fn a_space_lock_outside_the_membership_fails() {
        let setup = || {
            let mut h = H::default();
            h.server_session("directory", 1, "w0.0", 1);
            h.server_session("n1", 1, "w0.0", 1);
            h.server_grant("directory", "soak/members", 1, 1, 5);
            h.server_grant("n1", "s0", 1, 1, 10);
            let a = h.grant("w0.0", What::Space, "s0", 10, 1);
            (h, a)
        };
        let (mut h, a) = setup();
        h.release("w0.0", a, 100);
        passes(&h.check());
        // Held when its membership expired: its token must have fired first.
        let (mut h, a) = setup();
        h.server_end("directory", 1, 3_000, "expired");
        h.server_revoke("directory", "soak/members", 1, 1, 3_000, "session-ended");
        h.token("w0.0", a, 2_900);
        passes(&h.check());
        let (mut h, a) = setup();
        h.server_end("directory", 1, 3_000, "expired");
        h.server_revoke("directory", "soak/members", 1, 1, 3_000, "session-ended");
        h.token("w0.0", a, 3_100);
        only(&h.check(), Check::LeaseDeadline);
        // A lock granted after the membership ended, before the process joined again.
        let (mut h, a) = setup();
        h.token("w0.0", a, 2_900);
        h.server_end("directory", 1, 3_000, "expired");
        h.server_revoke("directory", "soak/members", 1, 1, 3_000, "session-ended");
        h.server_grant("n1", "s1", 1, 2, 3_500);
        let b = h.grant("w0.0", What::Space, "s1", 3_500, 2);
        h.release("w0.0", b, 3_600);
        only(&h.check(), Check::Membership);
    }

    #[test]
    fn an_acquire_past_its_bound_fails_unless_its_process_was_stopped() {
        let mut h = H::default();
        h.push(
            Event::new("w0.0", 1, Kind::Acquire, Phase::Invoke)
                .at(10 * MS)
                .what(What::Mutex)
                .name("m0"),
        );
        h.push(
            Event::new("w0.0", 1, Kind::Acquire, Phase::Fail)
                .at(3_500 * MS)
                .what(What::Mutex)
                .name("m0"),
        );
        // Any server history turns the server-side checks on.
        h.server_session(LOCK_NODE, 1, "w0.0", 1);
        only(&h.check(), Check::Bounds);
        h.controller(Kind::Stop, "w0.0", 100);
        h.controller(Kind::Cont, "w0.0", 1_500);
        passes(&h.check());
    }

    #[test]
    fn a_deaf_write_is_judged_by_fencing_alone() {
        let mut h = H::default();
        let a = h.grant("w0.0", What::Mutex, "m1", 10, 1);
        h.token("w0.0", a, 20);
        let b = h.grant("w1.0", What::Mutex, "m1", 30, 2);
        h.write("w1.0", b, "mutex/m1", [0, 2, 0], 31, true);
        // Made after the token fired and after the next grant: refused, as it must be.
        h.push(
            Event::new("w0.0", 50, Kind::Write, Phase::Invoke)
                .at(40 * MS)
                .lease(a)
                .token([0, 1, 5])
                .detail(DEAF),
        );
        h.push(
            Event::new("register", 51, Kind::Write, Phase::Fail)
                .at(41 * MS)
                .name("mutex/m1")
                .token([0, 1, 5])
                .target("w0.0")
                .target_op(50)
                .lease(a),
        );
        passes(&h.check());
    }

    fn only(report: &Report, check: Check) {
        assert!(
            report.count(check) > 0,
            "expected a {check} violation: {:?}",
            report.violations
        );
        assert!(
            report.violations.iter().all(|v| v.check == check),
            "only {check} expected: {:?}",
            report.violations
        );
    }

    #[test]
    fn a_clean_handover_passes() {
        let mut h = H::default();
        let a = h.grant("w0.0", What::Mutex, "m0", 10, 1);
        h.write("w0.0", a, "mutex/m0", [0, 1, 0], 11, true);
        h.release("w0.0", a, 20);
        let b = h.grant("w1.0", What::Mutex, "m0", 21, 2);
        h.write("w1.0", b, "mutex/m0", [0, 2, 0], 22, true);
        h.write("w0.0", a, "mutex/m0", [0, 1, 1], 23, false);
        h.release("w1.0", b, 30);
        let r = h.check();
        assert!(r.passed(), "{:?}", r.violations);
        assert_eq!((r.writes_accepted, r.writes_refused), (2, 1));
    }

    #[test]
    fn two_holders_at_once_fail() {
        let mut h = H::default();
        let a = h.grant("w0.0", What::Mutex, "m0", 10, 1);
        h.grant("w1.0", What::Mutex, "m0", 15, 2);
        h.release("w0.0", a, 20);
        only(&h.check(), Check::Exclusion);
    }

    #[test]
    fn a_fired_token_ends_the_tenure() {
        let mut h = H::default();
        let a = h.grant("w0.0", What::Space, "s1", 10, 1);
        h.fired("w0.0", a, 14);
        h.grant("w1.0", What::Space, "s1", 15, 2);
        h.release("w0.0", a, 20);
        assert!(h.check().passed());
    }

    #[test]
    fn a_stop_ends_the_tenure_and_late_writes_must_be_refused() {
        let mut h = H::default();
        let a = h.grant("w0.0", What::Mutex, "m0", 10, 1);
        h.controller(Kind::Stop, "w0.0", 12);
        let b = h.grant("w1.0", What::Mutex, "m0", 5000, 2);
        h.write("w1.0", b, "mutex/m0", [0, 2, 0], 5001, true);
        h.controller(Kind::Cont, "w0.0", 6000);
        h.write("w0.0", a, "mutex/m0", [0, 1, 1], 6001, false);
        assert!(h.check().passed());

        // The same, but the register took the late write: fencing failed.
        let mut h = H::default();
        let a = h.grant("w0.0", What::Mutex, "m0", 10, 1);
        h.controller(Kind::Stop, "w0.0", 12);
        h.grant("w1.0", What::Mutex, "m0", 5000, 2);
        h.controller(Kind::Cont, "w0.0", 6000);
        h.write("w0.0", a, "mutex/m0", [0, 1, 1], 6001, true);
        only(&h.check(), Check::StaleWrite);
    }

    #[test]
    fn a_write_after_the_fire_fails() {
        let mut h = H::default();
        let a = h.grant("w0.0", What::Mutex, "m1", 10, 1);
        h.write("w0.0", a, "mutex/m1", [0, 1, 0], 11, true);
        h.fired("w0.0", a, 20);
        h.write("w0.0", a, "mutex/m1", [0, 1, 1], 21, true);
        only(&h.check(), Check::WriteAfterFired);
    }

    #[test]
    fn a_write_stamped_before_the_fire_passes() {
        let mut h = H::default();
        let a = h.grant("w0.0", What::Mutex, "m1", 10, 1);
        h.write("w0.0", a, "mutex/m1", [0, 1, 0], 19, true);
        h.fired("w0.0", a, 20);
        assert!(h.check().passed());
    }

    #[test]
    fn tokens_that_go_back_fail() {
        let mut h = H::default();
        let a = h.grant("w0.0", What::Space, "s2", 10, 5);
        h.release("w0.0", a, 20);
        let b = h.grant("w1.0", What::Space, "s2", 30, 3);
        h.release("w1.0", b, 40);
        only(&h.check(), Check::TokensGrow);

        let mut h = H::default();
        h.push(
            Event::new("register", 1, Kind::Write, Phase::Ok)
                .at(MS)
                .name("space/s2")
                .token([2, 1, 0]),
        );
        h.push(
            Event::new("register", 2, Kind::Write, Phase::Ok)
                .at(2 * MS)
                .name("space/s2")
                .token([1, 9, 0]),
        );
        only(&h.check(), Check::TokensGrow);
    }

    #[test]
    fn a_space_token_grows_across_a_reshard() {
        let mut h = H::default();
        let op = h.op();
        h.push(
            Event::new("w0.0", op, Kind::Acquire, Phase::Invoke)
                .at(9 * MS)
                .what(What::Space)
                .name("s0"),
        );
        h.push(
            Event::new("w0.0", op, Kind::Acquire, Phase::Ok)
                .at(10 * MS)
                .what(What::Space)
                .name("s0")
                .token([1, 900, 0]),
        );
        h.release("w0.0", op, 20);
        let op = h.op();
        h.push(
            Event::new("w1.0", op, Kind::Acquire, Phase::Invoke)
                .at(29 * MS)
                .what(What::Space)
                .name("s0"),
        );
        h.push(
            Event::new("w1.0", op, Kind::Acquire, Phase::Ok)
                .at(30 * MS)
                .what(What::Space)
                .name("s0")
                .token([3, 4, 0]),
        );
        h.release("w1.0", op, 40);
        assert!(h.check().passed());
    }

    #[test]
    fn a_server_side_expiry_ends_the_tenures_on_its_node() {
        let expiry = |h: &mut H, node: &str, t: u64| {
            let op = h.op();
            h.push(
                Event::new("controller", op, Kind::Expire, Phase::Info)
                    .at(t * MS)
                    .name(node)
                    .value(9),
            );
        };
        let mut h = H::default();
        h.push(
            Event::new("w0.0", 100, Kind::Session, Phase::Info)
                .at(MS)
                .name(LOCK_NODE)
                .value(9),
        );
        let a = h.grant("w0.0", What::Mutex, "m1", 10, 1);
        expiry(&mut h, LOCK_NODE, 20);
        h.grant("w1.0", What::Mutex, "m1", 20, 2);
        h.fired("w0.0", a, 21);
        let r = h.check();
        assert!(r.passed(), "{:?}", r.violations);

        // The expired session is on another node: the lock is still held.
        let mut h = H::default();
        h.push(
            Event::new("w0.0", 100, Kind::Session, Phase::Info)
                .at(MS)
                .name("n1")
                .value(9),
        );
        let a = h.grant("w0.0", What::Mutex, "m1", 10, 1);
        expiry(&mut h, "n1", 20);
        h.grant("w1.0", What::Mutex, "m1", 20, 2);
        h.fired("w0.0", a, 21);
        only(&h.check(), Check::Exclusion);
    }

    #[test]
    fn two_leaders_fail() {
        let mut h = H::default();
        h.grant("w0.0", What::Election, "leader", 10, 1);
        h.grant("w1.0", What::Election, "leader", 11, 2);
        only(&h.check(), Check::OneLeader);
    }

    #[test]
    fn permits_over_the_limit_fail() {
        let mut h = H::default();
        let mut leases = Vec::new();
        for (i, p) in ["w0.0", "w1.0", "w2.0"].iter().enumerate() {
            leases.push(h.grant(p, What::Semaphore, "pool", 10 + i as u64, 1 + i as u64));
        }
        h.release("w0.0", leases[0], 20);
        h.grant("w3.0", What::Semaphore, "pool", 20, 4);
        assert!(
            h.check().passed(),
            "a permit given back and taken at one instant"
        );
        h.grant("w4.0", What::Semaphore, "pool", 21, 5);
        only(&h.check(), Check::Permits);
    }

    #[test]
    fn an_ok_without_an_invoke_or_a_duplicate_token_fails() {
        let mut h = H::default();
        h.push(
            Event::new("w0.0", 1, Kind::Acquire, Phase::Ok)
                .at(MS)
                .what(What::Semaphore)
                .name("pool")
                .token([0, 1, 0]),
        );
        only(&h.check(), Check::Grant);

        let mut h = H::default();
        h.grant("w0.0", What::Semaphore, "pool", 10, 7);
        h.grant("w1.0", What::Semaphore, "pool", 11, 7);
        only(&h.check(), Check::Grant);
    }

    #[test]
    fn liveness_needs_progress_after_the_last_fault() {
        let mut h = H::default();
        h.push(Event::new("w0.0", 1, Kind::Start, Phase::Info).at(MS));
        h.push(
            Event::new("controller", 1, Kind::Fault, Phase::Invoke)
                .at(100 * MS)
                .detail("stall"),
        );
        h.push(
            Event::new("controller", 1, Kind::Fault, Phase::Ok)
                .at(200 * MS)
                .detail("stall"),
        );
        h.grant("w0.0", What::Mutex, "m0", 150, 1);
        h.push(Event::new("w0.0", 9, Kind::Exit, Phase::Info).at(20_000 * MS));
        only(&h.check(), Check::Liveness);

        h.grant("w0.0", What::Mutex, "m1", 3000, 1);
        assert!(h.check().passed());
    }

    #[test]
    fn a_leftover_fails() {
        let mut h = H::default();
        h.push(
            Event::new("controller", 1, Kind::Leftover, Phase::Info)
                .at(MS)
                .name("pool")
                .target("session 7"),
        );
        only(&h.check(), Check::Leftovers);
    }

    #[test]
    fn a_skipped_transition_fails() {
        let step = |epoch: u64, kind: &str| {
            Event::new("controller", epoch, Kind::Reshard, Phase::Ok)
                .at(epoch * MS)
                .name(kind)
                .value(epoch)
        };
        let mut h = H::default();
        h.push(step(1, "init"));
        h.push(step(2, "transition"));
        h.push(step(3, "stable"));
        let r = h.check();
        assert!(r.passed(), "{:?}", r.violations);
        assert_eq!(r.reshard_steps, 2);

        let mut h = H::default();
        h.push(step(1, "init"));
        h.push(step(2, "stable"));
        only(&h.check(), Check::ReshardSteps);
    }
}
