//! The lock space in the simulated world: space workers taking names in every place of
//! their process's layout, the directory where the layout is published and the processes
//! report the epochs they run, and an operator that reshards the space in the middle of
//! the run.
//!
//! What the async shell (`crate::space`) does is done here as the world's events, with the
//! pure [`Layout`] for the rules:
//!
//! - The directory is a coordination node of its own, and each process has a session on it
//!   like on any node, with the same faults (a stall or cut past the session timeout, the
//!   server expiring it once it had no contact for that long), but never expired by fiat.
//!   The process's *membership* is that session: the directory lists a member for each
//!   directory session alive on the server, with the epoch it last reported there. On the
//!   client's side the membership is a lease on that session: confirmed from its joining
//!   (the session attached, the process's report sent, then the published layout read on
//!   it) until the session's token fires at its lease-safety deadline, which comes before
//!   the server can expire it.
//! - A process (a client) runs one layout, its *space*, shared by its workers. It adopts a
//!   newer one when it sees it published ([`Ev::Follow`], a delay after the publication, as
//!   a watch on the directory session delivers it), and reports the oldest epoch it runs,
//!   its layout's or that of a lock it holds, is taking or releasing, to the directory
//!   ([`Ev::Reported`], on its directory session, in order with its reads).
//! - A process takes space locks only while its membership is confirmed. Once it may be
//!   lost, every lock it holds is lost, and every take in progress gives back its places,
//!   before the server can drop the member from the list; the process joins again with a
//!   new directory session, and only after reading the published layout on it, and
//!   following it, does it take locks again.
//! - A space worker takes a name in each of [`Layout::parts`], in order, one acquire at a
//!   time on its process's session on that node; all or nothing: a part refused or timed
//!   out, or lost before the last is held, releases what was taken. Once every part is
//!   held, in a transition it reads the published epoch from the directory (a round trip,
//!   read when it arrives there) and its token is [`Layout::token`] of the order ids and
//!   that epoch. It holds the name for a while, then releases every part, the last first.
//! - A process that sees a layout two epochs past a lock's loses that lock.
//! - The operator publishes the transition `A+B` once a third of the operations are done,
//!   then `B` as soon as [`Layout::check_advance`] allows it: once no member the directory
//!   lists reports an epoch older than the transition's (a member yet to report lags). It
//!   looks every few tens of milliseconds, so it can take both steps while a process is
//!   cut off from the directory.
//!
//! - With a lock delay ([`SpaceConfig::lock_delay`]) an exclusive name's places are
//!   persistent semaphores with one token: once every part is held, each place's marker is
//!   read and its own written (`lock_delay::held` with the layout's epoch), one place after
//!   the other, and the guard waits for what the markers ask (`lock_delay::asks`): until the
//!   delay after a place's grant after an unclean end, until the delay after the process
//!   began to run its layout for a marker not of that layout. A clean release writes
//!   `released` on every part, then releases them.
//!
//! Broken variants show that the checker bites: an operator that publishes `B` right after
//! `A` ([`SpaceConfig::skip_transition`]), workers that compute a transition's token by
//! `A`'s rule, without reading the directory ([`SpaceConfig::old_token_rule`]), processes
//! whose locks outlive their membership ([`SpaceConfig::locks_outlive_membership`]), a lock
//! delay never waited (`Config::skip_delay`) and one that takes an older layout's marker at
//! its word ([`SpaceConfig::markers_of_any_layout`]).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use tokio::time::Instant;

use super::{Caller, Ev, World, create_semaphore};
use crate::config::AcquireOptions;
use crate::emulator_core::NodeState;
use crate::session::core::{AcquireCmd, Answer, Command, Control, Grant, SessionCore};
use crate::sim::check::Resource;
use crate::sim::check::space::{LIMIT, NAMES, PartHeld, SEMAPHORE};
use crate::space::Layout;

/// The lock space of a run.
#[derive(Debug, Clone, Default)]
pub(crate) struct SpaceConfig {
    /// Space workers on each client.
    pub(crate) workers_per_client: usize,
    /// A broken operator: it publishes `B` straight after `A`, with no transition.
    pub(crate) skip_transition: bool,
    /// Broken workers: a transition's token by `A`'s rule (the old place's order id), with
    /// no directory read, also once `B` is published.
    pub(crate) old_token_rule: bool,
    /// Broken processes: once they joined the directory, they take and keep locks whatever
    /// becomes of their directory session (a lapsed membership costs no lock).
    pub(crate) locks_outlive_membership: bool,
    /// The exclusive names are taken as `SpaceMutex::lock_delay` takes them (each place a
    /// persistent semaphore with one token, its marker naming the layout's epoch) and judged
    /// without fencing: a paused holder holds until it runs again and sees a token fired.
    /// `Config::skip_delay` breaks it: markers are kept, the delay is never waited.
    pub(crate) lock_delay: Option<Duration>,
    /// A broken lock delay: a marker of an older layout, or none, is taken at its word (the
    /// holder does not wait for the delay after its process began to run its layout).
    pub(crate) markers_of_any_layout: bool,
    /// A fault aimed at the reshard: when `A+B` is published, a process holding an
    /// exclusive name that moves, taken in `A`, is paused for the session timeout and 10
    /// to 25 s more (past its leases, and within the 30 s delay the tests use). Its
    /// directory session expires, `B` may be published meanwhile, and the name taken on
    /// its new place while the paused holder still has the old one.
    pub(crate) pause_at_reshard: bool,
}

/// What the lock space did in a run.
#[derive(Debug, Clone, Default)]
pub(crate) struct SpaceStats {
    /// Space locks that held every place, by the layout they were taken in (`A`, `A+B`,
    /// `B`).
    pub(crate) held: [u64; 3],
    /// Holders in the transition whose directory read found `B` published (their token is
    /// the new place's).
    pub(crate) late_transition: u64,
    /// Steps the operator tried and [`Layout::check_advance`] refused.
    pub(crate) refused: u64,
    /// When each layout after `A` was published (virtual time since the start).
    pub(crate) steps: Vec<Duration>,
    /// Locks lost because their process saw the published layout two epochs past theirs.
    pub(crate) claims_lost: u64,
    /// Memberships that lapsed: the directory session's token fired (the process then
    /// joins again with a new session).
    pub(crate) lapses: u64,
    /// Locks held (every place taken) that a lapsed membership cost.
    pub(crate) lapse_locks_lost: u64,
    /// Operator steps published while a process's membership had lapsed and the process
    /// had not joined again.
    pub(crate) steps_in_lapse: u64,
    /// Lock delay: guards handed over after a wait a place's marker asked for, by the rule
    /// that asked for the longest: an unclean end, or a marker not of the layout run.
    pub(crate) delayed: [u64; 2],
    /// Runs where [`SpaceConfig::pause_at_reshard`] found a holder to pause.
    pub(crate) paused_at_reshard: u64,
}

impl SpaceStats {
    pub(crate) fn add(&mut self, other: &SpaceStats) {
        for (mine, theirs) in self.held.iter_mut().zip(other.held) {
            *mine += theirs;
        }
        self.late_transition += other.late_transition;
        self.refused += other.refused;
        self.claims_lost += other.claims_lost;
        self.lapses += other.lapses;
        self.lapse_locks_lost += other.lapse_locks_lost;
        self.steps_in_lapse += other.steps_in_lapse;
        for (mine, theirs) in self.delayed.iter_mut().zip(other.delayed) {
            *mine += theirs;
        }
        self.paused_at_reshard += other.paused_at_reshard;
    }
}

/// The directory and the operator.
#[derive(Debug)]
pub(super) struct Space {
    cfg: SpaceConfig,
    /// `A`, `A+B`, `B`: the layout of epoch `e` at `e - 1`.
    layouts: Vec<Layout>,
    /// The epoch published on the directory.
    published: u64,
    /// The epoch each directory session last reported, by the session's id (on the server).
    reports: HashMap<u64, u64>,
    pub(super) stats: SpaceStats,
}

/// The last epoch of a run: `B`.
const LAST: u64 = 3;

impl Space {
    /// `A` over `nodes` nodes, `B` with one more.
    pub(super) fn new(nodes: usize, cfg: &SpaceConfig) -> Self {
        let names: Vec<String> = (0..nodes).map(node_name).collect();
        let a = Layout::new(1, names).unwrap_or_else(|e| panic!("layout A: {e}"));
        let moving = a
            .add_node(&node_name(nodes))
            .unwrap_or_else(|e| panic!("layout A+B: {e}"));
        let b = moving.finish().unwrap_or_else(|e| panic!("layout B: {e}"));
        Self {
            cfg: cfg.clone(),
            layouts: vec![a, moving, b],
            published: 1,
            reports: HashMap::new(),
            stats: SpaceStats::default(),
        }
    }

    /// The nodes of the world: every node any layout names, then the directory.
    pub(super) fn node_count(&self) -> usize {
        self.directory() + 1
    }

    /// The directory's node: the one after every node a layout names.
    pub(super) fn directory(&self) -> usize {
        self.layouts[2].nodes().len()
    }

    /// The reshard is over.
    pub(super) fn done(&self) -> bool {
        self.published == LAST
    }

    fn layout(&self, epoch: u64) -> &Layout {
        &self.layouts[epoch as usize - 1]
    }

    /// The lock delay of the name `name`: the exclusive names', if the run has one.
    fn delay(&self, name: usize) -> Option<Duration> {
        self.cfg.lock_delay.filter(|_| name != SEMAPHORE)
    }

    /// The space's persistent semaphores, created on every node as a setup step: the
    /// counted one, and with a lock delay every exclusive name.
    pub(super) fn create_semaphores(&self, node: &mut NodeState, now: Instant) {
        for name in self.persistent() {
            let limit = if name == semaphore_name() { LIMIT } else { 1 };
            create_semaphore(node, now, name, limit);
        }
    }

    /// The names of [`Space::create_semaphores`].
    pub(super) fn persistent(&self) -> Vec<&'static str> {
        (0..NAMES.len())
            .filter(|&name| name == SEMAPHORE || self.delay(name).is_some())
            .map(|name| NAMES[name])
            .collect()
    }
}

/// The name of node `n` in the layouts.
fn node_name(n: usize) -> String {
    format!("n{n}")
}

/// The index of the node a layout calls `name`.
fn node_index(name: &str) -> usize {
    name.trim_start_matches('n').parse().unwrap_or_default()
}

fn semaphore_name() -> &'static str {
    NAMES[SEMAPHORE]
}

/// A process's lock space: the layout it runs and the locks it has in each epoch.
#[derive(Debug)]
pub(super) struct Process {
    /// The epoch of the layout run.
    layout: u64,
    /// When it began to run it (client time).
    running_since: Instant,
    /// The greatest epoch seen published.
    published: u64,
    /// How many locks (taking or held) each epoch has.
    uses: BTreeMap<u64, usize>,
    /// The epoch last sent to the directory (0: nothing on the current session).
    reported: u64,
    /// The directory session (its number in the client) whose membership is confirmed:
    /// joined, and the published layout read after joining; `None` until then, or once its
    /// token fired.
    member: Option<u64>,
    /// The process has joined once (the broken processes take locks from then on).
    joined_once: bool,
    /// When the last message sent toward the directory arrives (they arrive in order).
    dir_up: Instant,
    workers: Vec<Worker>,
}

impl Process {
    pub(super) fn new(workers: usize, base: Instant) -> Self {
        Self {
            layout: 1,
            running_since: base,
            published: 1,
            uses: BTreeMap::new(),
            reported: 0,
            member: None,
            joined_once: false,
            dir_up: base,
            workers: (0..workers)
                .map(|_| Worker {
                    state: State::Idle,
                    wake: 0,
                    lock: None,
                })
                .collect(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Idle,
    /// Taking the parts, one at a time.
    Taking,
    /// Lock delay: every part held; each place's marker is read, then its own written.
    Settling,
    /// Lock delay: waiting out the delay the markers asked for.
    Delaying,
    /// Every part held; the directory read for the token is on its way.
    Reading,
    Holding,
    /// Lock delay: a clean release writes its marker on every part first.
    Unmarking,
    /// To release what was taken.
    Dropping,
    /// Waiting for the releases' answers.
    Releasing,
}

impl State {
    /// Every part is held: a lost part, a lapsed membership or a lost claim ends the lock.
    fn has_all(self) -> bool {
        matches!(
            self,
            State::Settling | State::Delaying | State::Reading | State::Holding
        )
    }
}

#[derive(Debug)]
struct Worker {
    state: State,
    /// The wake-up that counts (earlier ones were superseded).
    wake: u64,
    lock: Option<Lock>,
}

/// A space lock being taken or held.
#[derive(Debug)]
struct Lock {
    name: usize,
    count: u64,
    /// The epoch of the layout it is taken in.
    epoch: u64,
    /// The nodes of its parts, in order.
    places: Vec<usize>,
    taken: Vec<Part>,
    /// The bound of the whole acquire (client time).
    deadline: Option<Instant>,
    /// The node whose acquire is on its way.
    waiting: Option<usize>,
    /// The node whose session it waits for.
    needs: Option<usize>,
    /// Its id with the checker, once it holds every part.
    holder: Option<u64>,
    /// Its process saw the published layout two epochs past the lock's.
    claim_lost: bool,
    /// The membership it was begun under.
    member: Option<u64>,
    /// Releases (or markers of a clean release) not answered yet.
    pending: usize,
    /// Lock delay: the places whose markers were read and written, in order.
    marked: usize,
    /// Lock delay: the next place's marker was read, its own is to be written.
    read: bool,
    /// Lock delay: until when the guard waits (client time), and whether a marker not of
    /// the layout run asked for it.
    until: Option<(Instant, bool)>,
    /// Lock delay: every place is settled and the delay waited.
    settled: bool,
}

#[derive(Debug)]
struct Part {
    held: PartHeld,
    order_id: u64,
    /// When the session learnt of the grant (client time).
    since: Instant,
    /// Told to the checker as ended (released or lost).
    ended: bool,
}

impl World {
    fn worker(&mut self, c: usize, w: usize) -> &mut Worker {
        &mut self.clients[c].space.workers[w]
    }

    fn lock(&mut self, c: usize, w: usize) -> Option<&mut Lock> {
        self.worker(c, w).lock.as_mut()
    }

    fn schedule(&mut self, c: usize, w: usize, at: Instant) {
        let worker = self.worker(c, w);
        worker.wake += 1;
        let wake = worker.wake;
        self.push(
            at,
            Ev::Space {
                client: c,
                worker: w,
                wake,
            },
        );
    }

    /// The operator and the workers' first cycles (each waits for its process to join).
    pub(super) fn start_space(&mut self) {
        if self.space.is_none() {
            return;
        }
        let clients = self.clients.len();
        let first = self.base + Duration::from_millis(self.rng.range(500, 1_500));
        self.push(first, Ev::Operator);
        for c in 0..clients {
            for w in 0..self.clients[c].space.workers.len() {
                let at = self.base + Duration::from_millis(self.rng.range(50, 200));
                self.schedule(c, w, at);
            }
        }
    }

    /// Client `c` has a session on node `n` again (a new one, or its own reattached): the
    /// workers waiting for it go on; on the directory, the process reports and reads.
    pub(super) fn session_up(&mut self, c: usize, n: usize) {
        if self.directory() == Some(n) {
            return self.directory_attached(c);
        }
        for w in 0..self.clients[c].space.workers.len() {
            if let Some(lock) = self.lock(c, w).filter(|l| l.needs == Some(n)) {
                lock.needs = None;
                self.schedule(c, w, self.now);
            }
        }
    }

    /// Parts whose token fired are lost; a lock that held every part holds no more. A
    /// membership whose token fired costs every lock.
    pub(super) fn observe_space_tokens(&mut self, c: usize) {
        self.observe_membership(c);
        for w in 0..self.clients[c].space.workers.len() {
            let Some(lock) = self.lock(c, w) else {
                continue;
            };
            let mut lost = Vec::new();
            for p in lock.taken.iter_mut().filter(|p| !p.ended) {
                if p.held.token.is_cancelled() {
                    p.ended = true;
                    lost.push(p.held.key);
                }
            }
            if lost.is_empty() {
                continue;
            }
            for key in lost {
                self.checker.ended(self.now, key, true);
            }
            if self.worker(c, w).state.has_all() {
                self.space_lost(c, w);
            }
        }
    }

    /// The lock of worker `w` no longer holds its name: what is left of it is released.
    fn space_lost(&mut self, c: usize, w: usize) {
        if let Some(id) = self.lock(c, w).and_then(|l| l.holder.take()) {
            self.checker.space_released(id);
        }
        self.worker(c, w).state = State::Dropping;
        self.schedule(c, w, self.now);
    }

    /// The process closes: what its workers hold is released, not lost.
    pub(super) fn end_space_locks(&mut self, c: usize) {
        for w in 0..self.clients[c].space.workers.len() {
            let worker = self.worker(c, w);
            worker.state = State::Idle;
            worker.wake += 1;
            let Some(lock) = worker.lock.take() else {
                continue;
            };
            for p in lock.taken.iter().filter(|p| !p.ended) {
                self.checker.ended(self.now, p.held.key, false);
            }
            if let Some(id) = lock.holder {
                self.checker.space_released(id);
            }
        }
        self.clients[c].space.uses.clear();
    }

    /// Worker `w` of client `c` acts; returns the nodes whose sessions it commanded.
    pub(super) fn space_step(
        &mut self,
        c: usize,
        w: usize,
        wake: u64,
        now_c: Instant,
    ) -> Vec<usize> {
        if self.worker(c, w).wake != wake {
            return Vec::new();
        }
        match self.worker(c, w).state {
            State::Idle => self.space_begin(c, w, now_c),
            State::Taking => self.space_take(c, w, now_c),
            State::Settling => self.space_settle(c, w, now_c),
            State::Delaying => self.space_delayed(c, w, now_c),
            State::Holding => {
                // Releasing the first part (or marking it released) ends the hold.
                let Some(lock) = self.lock(c, w) else {
                    return Vec::new();
                };
                let (holder, name) = (lock.holder.take(), lock.name);
                if let Some(id) = holder {
                    self.checker.space_released(id);
                }
                if self.space.as_ref().and_then(|s| s.delay(name)).is_some() {
                    return self.space_unmark(c, w, now_c);
                }
                self.space_release(c, w, now_c)
            }
            State::Unmarking => {
                if self.lock(c, w).is_none_or(|l| l.pending == 0) {
                    return self.space_release(c, w, now_c);
                }
                Vec::new()
            }
            State::Dropping => self.space_release(c, w, now_c),
            State::Releasing => {
                if self.lock(c, w).is_none_or(|l| l.pending == 0) {
                    self.space_done(c, w);
                }
                Vec::new()
            }
            State::Reading => Vec::new(),
        }
    }

    /// A new cycle: a name, maybe a bound, and the layout the process runs now.
    fn space_begin(&mut self, c: usize, w: usize, now_c: Instant) -> Vec<usize> {
        if self.winding_down || self.ops >= self.cfg.ops {
            return Vec::new();
        }
        if !self.may_begin(c) {
            return Vec::new(); // the process's joining wakes it
        }
        let member = self.member(c);
        let Some(space) = self.space.as_ref() else {
            return Vec::new();
        };
        let name = self.rng.range(0, NAMES.len() as u64) as usize;
        let count = if name == SEMAPHORE { 1 } else { u64::MAX };
        let deadline = self
            .rng
            .chance(0.3)
            .then(|| now_c + Duration::from_millis(self.rng.range(0, 2_000)));
        let process = &mut self.clients[c].space;
        // The lock's claim on its layout's epoch, as `Shared::enter` makes it.
        let epoch = process.layout;
        *process.uses.entry(epoch).or_default() += 1;
        let claim_lost = process.published > epoch + 1;
        let places = space
            .layout(epoch)
            .parts(NAMES[name])
            .iter()
            .map(|p| node_index(&p.node))
            .collect();
        let worker = &mut process.workers[w];
        worker.state = State::Taking;
        worker.lock = Some(Lock {
            name,
            count,
            epoch,
            places,
            taken: Vec::new(),
            deadline,
            waiting: None,
            needs: None,
            holder: None,
            claim_lost,
            member,
            pending: 0,
            marked: 0,
            read: false,
            until: None,
            settled: false,
        });
        self.report(c);
        self.space_take(c, w, now_c)
    }

    /// The next part, or the hold once every part is taken.
    fn space_take(&mut self, c: usize, w: usize, now_c: Instant) -> Vec<usize> {
        let Some(lock) = self.lock(c, w).filter(|l| l.waiting.is_none()) else {
            return Vec::new();
        };
        let member = lock.member;
        if !self.may_keep(c, member) {
            // The membership it began under may be lost: its places are given back.
            self.worker(c, w).state = State::Dropping;
            return self.space_release(c, w, now_c);
        }
        let Some(lock) = self.lock(c, w) else {
            return Vec::new();
        };
        let Some(&node) = lock.places.get(lock.taken.len()) else {
            return self.space_all_taken(c, w, now_c);
        };
        let (name, deadline) = (lock.name, lock.deadline);
        if !self.clients[c].sessions[node].usable() {
            // The session manager has no session there now: wait for one, or the bound.
            if deadline.is_some_and(|d| now_c >= d) {
                self.worker(c, w).state = State::Dropping;
                return self.space_release(c, w, now_c);
            }
            if let Some(lock) = self.lock(c, w) {
                lock.needs = Some(node);
            }
            if let Some(d) = deadline {
                let at = self.global_of(c, d);
                self.schedule(c, w, at);
            }
            return Vec::new();
        }
        let delayed = self.space.as_ref().and_then(|s| s.delay(name)).is_some();
        let mut opts = if name == SEMAPHORE || delayed {
            // The counted semaphore, or a lock-delay mutex's one token.
            AcquireOptions::new().count(1)
        } else {
            AcquireOptions::exclusive().ephemeral(true)
        };
        if let Some(d) = deadline {
            opts = opts.timeout(d.saturating_duration_since(now_c));
        }
        let caller = self.caller(c, node, Caller::Space(w));
        if let Some(lock) = self.lock(c, w) {
            lock.waiting = Some(node);
        }
        let cmd = Command::Acquire(AcquireCmd {
            caller,
            name: NAMES[name].into(),
            opts,
            requested_at: now_c,
        });
        if let Some(core) = self.clients[c].sessions[node].core.as_mut() {
            core.command(now_c, cmd);
        }
        vec![node]
    }

    /// Every part is taken: the lock holds its name (unless a part was lost meanwhile),
    /// once its places are settled if it has a lock delay, and its token comes from the
    /// order ids and, in a transition, the directory.
    fn space_all_taken(&mut self, c: usize, w: usize, now_c: Instant) -> Vec<usize> {
        let Some(lock) = self.lock(c, w) else {
            return Vec::new();
        };
        if lock.claim_lost || lock.taken.iter().any(|p| p.held.token.is_cancelled()) {
            // A part was lost while the next was awaited: none of it is worth holding.
            self.worker(c, w).state = State::Dropping;
            self.schedule(c, w, self.now);
            return Vec::new();
        }
        let (name, settled) = (lock.name, lock.settled);
        if !settled && self.space.as_ref().and_then(|s| s.delay(name)).is_some() {
            self.worker(c, w).state = State::Settling;
            return self.space_settle(c, w, now_c);
        }
        let Some(lock) = self.lock(c, w) else {
            return Vec::new();
        };
        let (name, count, epoch) = (lock.name, lock.count, lock.epoch);
        let parts = lock.taken.iter().map(|p| p.held.clone()).collect();
        let id = self
            .checker
            .space_held(self.now, c, name, count, epoch, parts);
        self.ops += 1;
        if let Some(lock) = self.lock(c, w) {
            lock.holder = Some(id);
        }
        let Some(space) = self.space.as_mut() else {
            return Vec::new();
        };
        space.stats.held[epoch as usize - 1] += 1;
        if space.layout(epoch).is_transition() && !space.cfg.old_token_rule {
            self.worker(c, w).state = State::Reading;
            self.schedule_read(c, w);
        } else {
            // A stable layout's token, or (broken) a transition's by the old rule.
            self.space_hold(c, w, None);
        }
        Vec::new()
    }

    /// Lock delay: the next place's marker is read, then its own written on it, in order;
    /// once every place's is, the guard waits until the latest the markers asked for.
    fn space_settle(&mut self, c: usize, w: usize, now_c: Instant) -> Vec<usize> {
        let Some(lock) = self.lock(c, w).filter(|l| l.waiting.is_none()) else {
            return Vec::new();
        };
        let member = lock.member;
        let lost = lock.claim_lost || lock.taken.iter().any(|p| p.held.token.is_cancelled());
        if lost || !self.may_keep(c, member) {
            self.worker(c, w).state = State::Dropping;
            return self.space_release(c, w, now_c);
        }
        let Some(lock) = self.lock(c, w) else {
            return Vec::new();
        };
        let Some(part) = lock.taken.get(lock.marked) else {
            let until = lock.until.map(|(until, _)| until);
            self.worker(c, w).state = State::Delaying;
            let at = until.map_or(self.now, |u| self.global_of(c, u).max(self.now));
            self.schedule(c, w, at);
            return Vec::new();
        };
        let (node, order, session_no) = (part.held.node, part.order_id, part.held.key.1);
        let name = NAMES[lock.name].to_string();
        let data = lock
            .read
            .then(|| crate::recipes::lock_delay::held(order, Some(lock.epoch)));
        let s = &self.clients[c].sessions[node];
        if !s.usable() || s.session_no != session_no {
            self.worker(c, w).state = State::Dropping;
            return self.space_release(c, w, now_c);
        }
        let caller = self.caller(c, node, Caller::Space(w));
        let cmd = match data {
            None => Command::Describe {
                caller,
                name,
                opts: crate::config::DescribeOptions::new(),
            },
            Some(data) => Command::Update { caller, name, data },
        };
        if let Some(lock) = self.lock(c, w) {
            lock.waiting = Some(node);
        }
        if let Some(core) = self.clients[c].sessions[node].core.as_mut() {
            core.command(now_c, cmd);
        }
        vec![node]
    }

    /// Lock delay: the marker `data` of the next place to settle was read; what it asks
    /// for (see `lock_delay::asks`) joins what the places before asked.
    fn space_marker_read(&mut self, c: usize, w: usize, data: &[u8]) {
        let Some(space) = self.space.as_ref() else {
            return;
        };
        let (delay, any_layout) = (space.cfg.lock_delay, space.cfg.markers_of_any_layout);
        let skip = self.cfg.skip_delay;
        let running_since = self.clients[c].space.running_since;
        let Some(lock) = self.lock(c, w) else {
            return;
        };
        lock.read = true;
        let (Some(delay), Some(part)) = (delay, lock.taken.get(lock.marked)) else {
            return;
        };
        let asks = crate::recipes::lock_delay::asks(data, part.order_id, Some(lock.epoch));
        let mut waits = Vec::new();
        if asks.after_grant && !skip {
            waits.push((part.since + delay, false));
        }
        if asks.after_start && !skip && !any_layout {
            waits.push((running_since + delay, true));
        }
        lock.until = waits.into_iter().chain(lock.until).max_by_key(|w| w.0);
    }

    /// Lock delay: the wait is over (an earlier wake-up is not): the lock holds its name.
    fn space_delayed(&mut self, c: usize, w: usize, now_c: Instant) -> Vec<usize> {
        let Some(lock) = self.lock(c, w) else {
            return Vec::new();
        };
        let until = lock.until;
        if until.is_some_and(|(until, _)| now_c < until) {
            return Vec::new();
        }
        lock.settled = true;
        let member = lock.member;
        if !self.may_keep(c, member) {
            self.worker(c, w).state = State::Dropping;
            return self.space_release(c, w, now_c);
        }
        if let (Some((_, by_layout)), Some(space)) = (until, self.space.as_mut()) {
            space.stats.delayed[usize::from(by_layout)] += 1;
        }
        self.space_all_taken(c, w, now_c)
    }

    /// Lock delay: a clean release writes `released` on every part still held, then
    /// releases them all (a marker not written leaves `held`: the next holder waits).
    fn space_unmark(&mut self, c: usize, w: usize, now_c: Instant) -> Vec<usize> {
        let Some(lock) = self.lock(c, w) else {
            return Vec::new();
        };
        let epoch = lock.epoch;
        let name = NAMES[lock.name];
        let parts: Vec<(usize, u64, u64)> = lock
            .taken
            .iter()
            .filter(|p| !p.ended && !p.held.token.is_cancelled())
            .map(|p| (p.held.node, p.held.key.1, p.order_id))
            .collect();
        let mut touched = Vec::new();
        for (node, session_no, order) in parts {
            let s = &self.clients[c].sessions[node];
            if !s.usable() || s.session_no != session_no {
                continue;
            }
            let caller = self.caller(c, node, Caller::Space(w));
            let data = crate::recipes::lock_delay::released(order, Some(epoch));
            let cmd = Command::Update {
                caller,
                name: name.into(),
                data,
            };
            if let Some(core) = self.clients[c].sessions[node].core.as_mut() {
                core.command(now_c, cmd);
            }
            touched.push(node);
        }
        if touched.is_empty() {
            return self.space_release(c, w, now_c);
        }
        let pending = touched.len();
        if let Some(lock) = self.lock(c, w) {
            lock.pending = pending;
        }
        self.worker(c, w).state = State::Unmarking;
        touched
    }

    fn schedule_read(&mut self, c: usize, w: usize) {
        let worker = self.worker(c, w);
        worker.wake += 1;
        let wake = worker.wake;
        let at = self.now + self.delay();
        self.push(
            at,
            Ev::DirRead {
                client: c,
                worker: w,
                wake,
            },
        );
    }

    /// The lock computes its token (with `published`, the epoch its directory read found)
    /// and holds its name for a while.
    fn space_hold(&mut self, c: usize, w: usize, published: Option<u64>) {
        let Some(lock) = self.lock(c, w) else {
            return;
        };
        let orders: Vec<u64> = lock.taken.iter().map(|p| p.order_id).collect();
        let (epoch, holder) = (lock.epoch, lock.holder);
        let Some(space) = self.space.as_mut() else {
            return;
        };
        let token = space.layout(epoch).token(&orders, published);
        if published.is_some_and(|p| p > epoch) {
            space.stats.late_transition += 1;
        }
        if let Some(id) = holder {
            self.checker.space_token(id, token);
        }
        self.worker(c, w).state = State::Holding;
        let hold = self.hold_time();
        self.schedule(c, w, self.now + hold);
    }

    /// Releases every part still held, the last taken first.
    fn space_release(&mut self, c: usize, w: usize, now_c: Instant) -> Vec<usize> {
        let Some(lock) = self.lock(c, w) else {
            return Vec::new();
        };
        let name = lock.name;
        let taken = std::mem::take(&mut lock.taken);
        let mut touched = Vec::new();
        for p in taken.iter().rev() {
            if !p.ended {
                self.checker.ended(self.now, p.held.key, false);
            }
            let (node, (_, session_no, lease)) = (p.held.node, p.held.key);
            let s = &self.clients[c].sessions[node];
            if !s.usable() || s.session_no != session_no {
                continue; // the session that held it is gone, and the lease with it
            }
            let caller = self.caller(c, node, Caller::Space(w));
            let release = Control::Release {
                name: NAMES[name].into(),
                lease,
                caller: Some(caller),
            };
            if let Some(core) = self.clients[c].sessions[node].core.as_mut() {
                core.control(now_c, release);
            }
            touched.push(node);
        }
        let pending = touched.len();
        if let Some(lock) = self.lock(c, w) {
            lock.pending = pending;
        }
        self.worker(c, w).state = State::Releasing;
        if pending == 0 {
            self.space_done(c, w);
        }
        touched
    }

    /// The cycle is over: the lock gives up its epoch's claim.
    fn space_done(&mut self, c: usize, w: usize) {
        let worker = self.worker(c, w);
        worker.state = State::Idle;
        if let Some(lock) = worker.lock.take() {
            let uses = &mut self.clients[c].space.uses;
            if let Some(n) = uses.get_mut(&lock.epoch) {
                *n -= 1;
                if *n == 0 {
                    uses.remove(&lock.epoch);
                }
            }
        }
        self.report(c);
        let think = Duration::from_millis(self.rng.range(0, 40));
        self.schedule(c, w, self.now + think);
    }

    /// A session answered space worker `w`.
    pub(super) fn space_answered(&mut self, c: usize, n: usize, w: usize, answer: Answer) {
        let state = self.worker(c, w).state;
        let session_no = self.clients[c].sessions[n].session_no;
        let token = match &answer {
            Answer::Acquire(Ok(Some(Grant { held }))) => Some(self.lease_signal(c, n, held)),
            _ => None,
        };
        let settling =
            state == State::Settling && self.lock(c, w).is_some_and(|l| l.waiting == Some(n));
        match &answer {
            Answer::Describe(Ok(d)) if settling => {
                let data = d.data.clone();
                self.space_marker_read(c, w, &data);
            }
            Answer::Done(Ok(())) if settling => {
                if let Some(lock) = self.lock(c, w) {
                    lock.marked += 1;
                    lock.read = false;
                }
            }
            Answer::Describe(Err(_)) | Answer::Done(Err(_)) if settling => {
                // A marker not read or written: the grant is given back.
                self.worker(c, w).state = State::Dropping;
            }
            _ => {}
        }
        let Some(lock) = self.lock(c, w) else {
            return; // the process closed: the sessions release it
        };
        match (answer, token) {
            (Answer::Acquire(Ok(Some(Grant { held }))), Some(token))
                if state == State::Taking && lock.waiting == Some(n) =>
            {
                let (lease, order_id) = (held.lease(), held.order_id);
                lock.waiting = None;
                let key = (c, session_no, lease);
                let resource = Resource::Part {
                    node: n,
                    name: lock.name,
                };
                let count = lock.count;
                lock.taken.push(Part {
                    held: PartHeld {
                        node: n,
                        key,
                        token: token.clone(),
                    },
                    order_id,
                    since: held.since,
                    ended: false,
                });
                self.checker
                    .granted(self.now, key, resource, count, order_id, token);
                self.schedule(c, w, self.now);
            }
            (Answer::Acquire(_), _) if state == State::Taking && lock.waiting == Some(n) => {
                // Refused, timed out or the session ended: release what was taken.
                lock.waiting = None;
                self.worker(c, w).state = State::Dropping;
                self.schedule(c, w, self.now);
            }
            (Answer::Describe(_) | Answer::Done(_), _) if settling => {
                lock.waiting = None;
                self.schedule(c, w, self.now);
            }
            (Answer::Done(_), _) if state == State::Unmarking => {
                lock.pending = lock.pending.saturating_sub(1);
                if lock.pending == 0 {
                    self.schedule(c, w, self.now);
                }
            }
            (Answer::Release(_), _) if state == State::Releasing => {
                lock.pending = lock.pending.saturating_sub(1);
                if lock.pending == 0 {
                    self.schedule(c, w, self.now);
                }
            }
            _ => {}
        }
    }

    // ---- the membership ------------------------------------------------------------------

    /// The directory's node, in a world with a lock space.
    fn directory(&self) -> Option<usize> {
        self.space.as_ref().map(Space::directory)
    }

    fn broken_membership(&self) -> bool {
        self.space
            .as_ref()
            .is_some_and(|s| s.cfg.locks_outlive_membership)
    }

    /// The membership of process `c` that is confirmed now: the directory session it
    /// joined with, still current and its token not fired.
    fn member(&self, c: usize) -> Option<u64> {
        let d = self.directory()?;
        let no = self.clients[c].space.member?;
        let s = &self.clients[c].sessions[d];
        let live = s.usable() && s.session_no == no && !s.token.is_cancelled();
        live.then_some(no)
    }

    /// Whether a worker of process `c` may begin a lock: while its membership is confirmed
    /// (the broken processes: once they joined).
    fn may_begin(&self, c: usize) -> bool {
        if self.broken_membership() {
            self.clients[c].space.joined_once
        } else {
            self.member(c).is_some()
        }
    }

    /// Whether a lock begun under `member` may go on: its membership is still confirmed.
    fn may_keep(&self, c: usize, member: Option<u64>) -> bool {
        self.broken_membership() || (member.is_some() && self.member(c) == member)
    }

    /// The membership of process `c` may be lost (its directory session's token fired):
    /// every lock it holds is lost and every take gives back its places, before the server
    /// can drop the member from the list.
    fn observe_membership(&mut self, c: usize) {
        if self.clients[c].space.member.is_none() || self.member(c).is_some() || self.winding_down {
            return;
        }
        self.clients[c].space.member = None;
        let broken = self.broken_membership();
        let mut lost = 0;
        for w in 0..self.clients[c].space.workers.len() {
            if broken {
                break;
            }
            let state = self.worker(c, w).state;
            match state {
                State::Reading | State::Holding => {
                    lost += 1;
                    self.space_lost(c, w);
                }
                // Settling or waiting the delay: nothing handed over yet, the places given
                // back (an answer on its way is not waited for).
                State::Settling | State::Delaying => self.space_lost(c, w),
                // A take waiting for an answer gives back its places when the answer comes.
                State::Taking if self.lock(c, w).is_some_and(|l| l.waiting.is_none()) => {
                    self.schedule(c, w, self.now);
                }
                _ => {}
            }
        }
        if let Some(space) = self.space.as_mut() {
            space.stats.lapses += 1;
            space.stats.lapse_locks_lost += lost;
        }
    }

    /// Process `c`'s directory session attached (a new one, or its own again): it reports
    /// the epoch it runs and then reads the published layout on it, which completes its
    /// joining if the session is new.
    fn directory_attached(&mut self, c: usize) {
        let Some(d) = self.directory() else {
            return;
        };
        // What the session had of the report may be gone with a cut: report it again.
        self.clients[c].space.reported = 0;
        self.report(c);
        let no = self.clients[c].sessions[d].session_no;
        let join = (self.clients[c].space.member != Some(no)).then_some(no);
        let at = self.dir_up(c);
        self.push(at, Ev::LayoutRead { client: c, join });
    }

    /// When a message process `c` sends now reaches the directory: after the ones sent
    /// before, and held by a stall of its directory session.
    fn dir_up(&mut self, c: usize) -> Instant {
        let stall = self.dir_stall(c).unwrap_or(self.now);
        let at = (stall + self.delay()).max(self.clients[c].space.dir_up);
        self.clients[c].space.dir_up = at;
        at
    }

    /// Until when process `c`'s directory session is stalled, if it is now.
    fn dir_stall(&self, c: usize) -> Option<Instant> {
        let d = self.directory()?;
        let until = self.clients[c].sessions[d].stalled_until;
        (until > self.now).then_some(until)
    }

    /// Whether process `c`'s directory session has a stream now (what was on its way
    /// over a stream that broke is lost; the next attach sends again).
    fn dir_attached(&self, c: usize) -> bool {
        self.directory()
            .is_some_and(|d| self.clients[c].sessions[d].link.is_some())
    }

    // ---- the directory -------------------------------------------------------------------

    /// Client `c` reports the oldest epoch it runs, if that changed, on its directory
    /// session (if it has none attached, its next attach reports).
    fn report(&mut self, c: usize) {
        let process = &self.clients[c].space;
        let oldest = process.uses.keys().next().copied();
        let epoch = oldest.map_or(process.layout, |o| o.min(process.layout));
        if epoch == process.reported || !self.dir_attached(c) {
            return;
        }
        let Some(session) = self
            .directory()
            .and_then(|d| self.clients[c].sessions[d].core.as_ref())
            .map(SessionCore::session_id)
        else {
            return;
        };
        self.clients[c].space.reported = epoch;
        let at = self.dir_up(c);
        self.push(
            at,
            Ev::Reported {
                client: c,
                session,
                epoch,
            },
        );
    }

    /// A report of client `c` reaches the directory: it counts if its session is alive.
    pub(super) fn reported(&mut self, c: usize, session: u64, epoch: u64) {
        if let Some(at) = self.dir_stall(c) {
            let ev = Ev::Reported {
                client: c,
                session,
                epoch,
            };
            return self.push(at, ev);
        }
        let alive = self.directory().is_some_and(|d| {
            self.nodes[d].state.session_ids().contains(&session) && self.dir_attached(c)
        });
        if let Some(space) = self.space.as_mut().filter(|_| alive) {
            let r = space.reports.entry(session).or_insert(epoch);
            *r = (*r).max(epoch);
            self.operator_look();
        }
    }

    /// A read of client `c` reaches the directory: it answers with the epoch published.
    pub(super) fn layout_read(&mut self, c: usize, join: Option<u64>) {
        if let Some(at) = self.dir_stall(c) {
            return self.push(at, Ev::LayoutRead { client: c, join });
        }
        let Some(epoch) = self.space.as_ref().map(|s| s.published) else {
            return;
        };
        if self.dir_attached(c) {
            let at = self.now + self.delay();
            self.push(
                at,
                Ev::Follow {
                    client: c,
                    epoch,
                    join,
                },
            );
        }
    }

    /// Client `c` sees `epoch` published: the locks two epochs behind it are lost.
    fn seen(&mut self, c: usize, epoch: u64) {
        let process = &mut self.clients[c].space;
        if epoch <= process.published {
            return;
        }
        process.published = epoch;
        for w in 0..self.clients[c].space.workers.len() {
            let state = self.worker(c, w).state;
            let Some(lock) = self
                .lock(c, w)
                .filter(|l| !l.claim_lost && l.epoch + 1 < epoch)
            else {
                continue;
            };
            lock.claim_lost = true;
            // A lock given up already (its membership lapsed) leaves nothing behind.
            let member = lock.member;
            let kept = !matches!(state, State::Dropping | State::Releasing);
            if kept
                && self.may_keep(c, member)
                && let Some(space) = self.space.as_mut()
            {
                space.stats.claims_lost += 1;
            }
            if state.has_all() {
                self.space_lost(c, w);
            }
        }
    }

    /// Client `c` sees the layout of `epoch` published on its directory session, and runs
    /// it if it is newer; the answer to the read after joining with the session `join`
    /// confirms the membership, and the workers take locks again.
    pub(super) fn follow(&mut self, c: usize, epoch: u64, join: Option<u64>) {
        if let Some(at) = self.dir_stall(c) {
            return self.push(
                at,
                Ev::Follow {
                    client: c,
                    epoch,
                    join,
                },
            );
        }
        if !self.dir_attached(c) {
            return;
        }
        self.seen(c, epoch);
        let now_c = self.client_now(c);
        let process = &mut self.clients[c].space;
        if epoch > process.layout {
            process.layout = epoch;
            process.running_since = now_c;
            self.report(c);
        }
        let current = self
            .directory()
            .map(|d| self.clients[c].sessions[d].session_no);
        if join.is_none() || join != current {
            return;
        }
        let process = &mut self.clients[c].space;
        process.member = join;
        process.joined_once = true;
        for w in 0..self.clients[c].space.workers.len() {
            if self.worker(c, w).state == State::Idle {
                self.schedule(c, w, self.now);
            }
        }
    }

    /// A worker's read reaches the directory: it answers with the epoch published now.
    pub(super) fn directory_read(&mut self, c: usize, w: usize, wake: u64) {
        let Some(epoch) = self.space.as_ref().map(|s| s.published) else {
            return;
        };
        let at = self.now + self.delay();
        self.push(
            at,
            Ev::DirAnswer {
                client: c,
                worker: w,
                wake,
                epoch,
            },
        );
    }

    pub(super) fn directory_answer(&mut self, c: usize, w: usize, wake: u64, epoch: u64) {
        self.seen(c, epoch);
        let worker = self.worker(c, w);
        if worker.wake == wake && worker.state == State::Reading {
            self.space_hold(c, w, Some(epoch));
        }
    }

    // ---- the operator --------------------------------------------------------------------

    /// The operator's periodic look at the directory (every few hundred milliseconds).
    pub(super) fn operator(&mut self) {
        if self.space.as_ref().is_none_or(Space::done) {
            return;
        }
        if self.operator_look() == Some(false)
            && let Some(space) = self.space.as_mut()
        {
            space.stats.refused += 1;
        }
        let at = self.now + Duration::from_millis(self.rng.range(200, 1_000));
        self.push(at, Ev::Operator);
    }

    /// The directory node's timers ran (a member's session may have expired): the operator,
    /// which watches the members, looks again.
    pub(super) fn directory_timers(&mut self, node: usize) {
        if self.directory() == Some(node) {
            self.operator_look();
        }
    }

    /// The next step of the reshard, published if it is due and the members listed now
    /// allow it (a member whose report has not arrived lags); `None` if none is due, else
    /// whether it was published. The operator looks at every change of the members and
    /// their reports, so it steps the moment [`Layout::check_advance`] allows it.
    fn operator_look(&mut self) -> Option<bool> {
        let space = self.space.as_ref().filter(|s| !s.done())?;
        let published = space.published;
        // The reshard starts a third into the run; its second step is tried from then on.
        if published == 1 && self.ops < self.cfg.ops / 3 {
            return None;
        }
        let next = if space.cfg.skip_transition {
            LAST
        } else {
            let members = self.nodes[space.directory()]
                .state
                .session_ids()
                .into_iter()
                .map(|id| (id, space.reports.get(&id).copied().unwrap_or(0)));
            let allowed = space
                .layout(published)
                .check_advance(space.layout(published + 1), members);
            if allowed.is_err() {
                return Some(false);
            }
            published + 1
        };
        self.publish(next);
        Some(true)
    }

    /// [`SpaceConfig::pause_at_reshard`], as `A+B` is published: one of the processes
    /// holding an exclusive name that moves, taken in `A`, is paused past its leases.
    fn pause_at_reshard(&mut self) {
        let Some(space) = self.space.as_ref().filter(|s| s.cfg.pause_at_reshard) else {
            return;
        };
        let node = |name: usize| space.layout(1).parts(NAMES[name])[0].node.clone();
        let moves: Vec<bool> = (0..NAMES.len())
            .map(|n| node(n) != space.layout(LAST).parts(NAMES[n])[0].node)
            .collect();
        let holders: Vec<usize> = (0..self.clients.len())
            .filter(|&c| {
                self.clients[c].paused_until <= self.now
                    && self.clients[c].space.workers.iter().any(|w| {
                        w.state == State::Holding
                            && w.lock.as_ref().is_some_and(|l| {
                                l.epoch == 1 && moves[l.name] && l.name != SEMAPHORE
                            })
                    })
            })
            .collect();
        if holders.is_empty() {
            return;
        }
        let c = holders[self.rng.range(0, holders.len() as u64) as usize];
        // Past the session timeout by more than a long fault's 10 s at most, and less than
        // the lock delay: the paused holder wakes before the delay after the next grant.
        let long = self.cfg.timeout + Duration::from_millis(self.rng.range(10_000, 25_000));
        let until = self.long_pause(c, long);
        for s in &mut self.clients[c].sessions {
            s.cooldown_until = s.cooldown_until.max(until + self.cfg.timeout);
        }
        let log = format!(
            "{:?} pause at the reshard of client {c} for {long:?}",
            self.now - self.base
        );
        self.fault_log.push(log);
        if let Some(space) = self.space.as_mut() {
            space.stats.paused_at_reshard += 1;
        }
    }

    /// Publishes the layout of `epoch`; each process sees it after its own delay.
    fn publish(&mut self, epoch: u64) {
        let since = self.now - self.base;
        let lapsed = self
            .clients
            .iter()
            .any(|c| c.space.joined_once && c.space.member.is_none());
        if let Some(space) = self.space.as_mut() {
            space.published = epoch;
            space.stats.steps.push(since);
            space.stats.steps_in_lapse += u64::from(lapsed);
        }
        if epoch == 2 {
            self.pause_at_reshard();
        }
        for c in 0..self.clients.len() {
            let delay = if self.rng.chance(0.2) {
                Duration::from_millis(self.rng.range(500, 5_000))
            } else {
                Duration::from_millis(self.rng.range(1, 500))
            };
            let follow = Ev::Follow {
                client: c,
                epoch,
                join: None,
            };
            self.push(self.now + delay, follow);
        }
    }
}
