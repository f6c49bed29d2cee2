//! The lock space in the simulated world: each process runs the space's own pure core
//! ([`SpaceCore`]: the gate, the layout judge, claims and epochs, the membership) and takes
//! each lock with the space's own take machine ([`Take`]); the world carries out their steps
//! and effects as the async shell does (`crate::space`), against the node cores, the
//! directory and the operator here.
//!
//! - The directory is a coordination node of its own, and each process has a session on it
//!   like on any node, with the same faults (a stall or cut past the session timeout, the
//!   server expiring it once it had no contact for that long), but never expired by fiat.
//!   The process's *membership* is that session: the directory lists a member for each
//!   directory session alive on the server, with the epoch it last reported there. The
//!   core confirms the membership once the session attached and the published layout read
//!   on it was judged, and loses it when the session's token fires (its lease-safety
//!   deadline, before the server can expire it).
//! - A process sees each publication after its own delay, as a watch on the directory
//!   session delivers it ([`Ev::Follow`]), and reports the oldest epoch its core runs
//!   ([`Ev::Reported`], on its directory session, in order with its reads).
//! - A space worker takes a name as [`Take`] says: the gate (its core), each place in order
//!   (an acquire on its process's session on that node), a lock delay's markers, the read of
//!   the published epoch in a transition (a round trip to the directory), giving the places
//!   back. A bounded take is given up at its bound plus a round trip and 200 ms, as the
//!   `Acquiring` future around it does (its places released, its claim given up).
//! - The operator publishes the transition `A+B` once a third of the operations are done,
//!   then `B` as soon as [`Layout::check_advance`] allows it: once no member the directory
//!   lists reports an epoch older than the transition's (a member yet to report lags). It
//!   looks every few tens of milliseconds, so it can take both steps while a process is
//!   cut off from the directory.
//! - A hostile directory ([`SpaceConfig::hostile`]) also publishes, at random moments,
//!   layouts no process may run (the same epoch with other nodes, an older epoch, a next
//!   step onto a node nobody was given) and then the right one again; its layouts may start
//!   near the end of the epochs' range ([`SpaceConfig::epoch_base`]).
//! - With a lock delay ([`SpaceConfig::lock_delay`]) an exclusive name's places are
//!   persistent semaphores with one unit: settling them reads each place's marker, then,
//!   unless the wait they ask for ends past the bound, writes its own `held` one on each
//!   (`lock_delay::held` with the layout's epoch) and waits. A clean release writes
//!   `released` on every part, then releases them.
//!
//! Broken variants show that the checker bites: an operator that publishes `B` right after
//! `A` ([`SpaceConfig::skip_transition`]), workers that compute a transition's token by
//! `A`'s rule, without reading the directory ([`SpaceConfig::old_token_rule`]), processes
//! whose locks outlive their membership ([`SpaceConfig::locks_outlive_membership`]), a lock
//! delay never waited (`Config::skip_delay`) and one that takes an older layout's marker at
//! its word ([`SpaceConfig::markers_of_any_layout`]), a gate that lets a lock through in a
//! layout the published one has left ([`SpaceConfig::gate_ignores_layout`]), and takes with
//! no bound around them ([`SpaceConfig::unbounded`]).

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use super::{Caller, Ev, World, create_semaphore};
use crate::config::AcquireOptions;
use crate::emulator_core::NodeState;
use crate::error::{Error, ErrorKind};
use crate::session::FencingToken;
use crate::session::core::{AcquireCmd, Answer, Command, Control, Grant, SessionCore};
use crate::sim::check::Resource;
use crate::sim::check::space::{LIMIT, NAMES, PartHeld, SEMAPHORE};
use crate::space::Layout;
use crate::space::core::{ClaimId, Effect as SpaceEffect, SpaceCore};
use crate::space::take::{Step, Take};

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
    /// Broken processes: once they joined the directory, their core never hears that the
    /// membership may be lost (a lapsed membership costs no lock).
    pub(crate) locks_outlive_membership: bool,
    /// The exclusive names are taken as a lock space's `Mutex::lock_delay` takes them (each place a
    /// persistent semaphore with one unit, its marker naming the layout's epoch) and judged
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
    /// The directory also publishes layouts no process may run, and then the right one
    /// again (see the module docs).
    pub(crate) hostile: bool,
    /// The epoch of `A` (1 by default): near `u64::MAX`, the reshard's epochs reach the end
    /// of the range.
    pub(crate) epoch_base: u64,
    /// A broken gate (the space core's): it lets a lock through while the published layout
    /// says the one run is left behind or cannot be run.
    pub(crate) gate_ignores_layout: bool,
    /// Broken takes: nothing gives a bounded take up at its bound.
    pub(crate) unbounded: bool,
}

/// What the lock space did in a run.
#[derive(Debug, Clone, Default)]
pub(crate) struct SpaceStats {
    /// Space locks handed over, by the layout they were taken in (`A`, `A+B`, `B`).
    pub(crate) held: [u64; 3],
    /// Holders in the transition whose directory read found `B` published (their token is
    /// the new place's).
    pub(crate) late_transition: u64,
    /// Steps the operator tried and [`Layout::check_advance`] refused.
    pub(crate) refused: u64,
    /// When each layout after `A` was published (virtual time since the start).
    pub(crate) steps: Vec<Duration>,
    /// Locks (taking or held) the core made lost by the layout (left behind or
    /// contradicted), while the membership held.
    pub(crate) claims_lost: u64,
    /// Memberships that lapsed: the directory session's token fired (the process then
    /// joins again with a new session).
    pub(crate) lapses: u64,
    /// Locks held that a lapsed membership cost.
    pub(crate) lapse_locks_lost: u64,
    /// Operator steps published while a process's membership had lapsed and the process
    /// had not joined again.
    pub(crate) steps_in_lapse: u64,
    /// Lock delay: guards handed over after a wait a place's marker asked for, by the rule
    /// that asked for the longest: an unclean end, or a marker not of the layout run.
    pub(crate) delayed: [u64; 2],
    /// Runs where [`SpaceConfig::pause_at_reshard`] found a holder to pause.
    pub(crate) paused_at_reshard: u64,
    /// Layouts no process may run, published by a hostile directory.
    pub(crate) hostile: u64,
    /// Takes the gate refused at their bound.
    pub(crate) refused_at_gate: u64,
    /// Bounded takes given up at their bound (the `Acquiring` future's rule).
    pub(crate) given_up: u64,
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
        self.hostile += other.hostile;
        self.refused_at_gate += other.refused_at_gate;
        self.given_up += other.given_up;
    }
}

/// The directory and the operator.
#[derive(Debug)]
pub(super) struct Space {
    cfg: SpaceConfig,
    /// `A`, `A+B`, `B`.
    layouts: Vec<Layout>,
    /// Which of [`Space::layouts`] the operator has published (0: `A`).
    step: usize,
    /// Every layout published, in order ([`Ev::Follow`] names one by its index).
    published: Vec<Layout>,
    /// A layout no process may run is published: the next look publishes the right one.
    garbage: bool,
    /// The epoch each directory session last reported, by the session's id (on the server).
    reports: HashMap<u64, u64>,
    pub(super) stats: SpaceStats,
}

impl Space {
    /// `A` over `nodes` nodes, `B` with one more.
    pub(super) fn new(nodes: usize, cfg: &SpaceConfig) -> Self {
        let names: Vec<String> = (0..nodes).map(node_name).collect();
        let base = cfg.epoch_base.max(1);
        let a = Layout::new(base, names).unwrap_or_else(|e| panic!("layout A: {e}"));
        let moving = a
            .add_node(&node_name(nodes))
            .unwrap_or_else(|e| panic!("layout A+B: {e}"));
        let b = moving.finish().unwrap_or_else(|e| panic!("layout B: {e}"));
        Self {
            cfg: cfg.clone(),
            published: vec![a.clone()],
            layouts: vec![a, moving, b],
            step: 0,
            garbage: false,
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
        self.step == 2 && !self.garbage
    }

    /// The layout the processes start with.
    pub(super) fn first(&self) -> &Layout {
        &self.layouts[0]
    }

    /// The nodes every process is given: those of every sane layout.
    pub(super) fn given(&self) -> Vec<String> {
        self.layouts[2].nodes().to_vec()
    }

    /// The index of a layout's epoch among `A`, `A+B`, `B` (for the stats).
    fn phase(&self, epoch: u64) -> usize {
        self.layouts
            .iter()
            .position(|l| l.epoch() == epoch)
            .unwrap_or_default()
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

    /// The latest publication's index.
    fn latest(&self) -> usize {
        self.published.len() - 1
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

/// A process's lock space: its core, what it reported, its membership and its workers.
#[derive(Debug)]
pub(super) struct Process {
    core: SpaceCore,
    /// The epoch last sent to the directory (0: nothing on the current session).
    reported: u64,
    /// The directory session (its number in the client) whose joining completed; its token
    /// firing may lose the membership.
    member: Option<u64>,
    /// The process has joined once.
    joined_once: bool,
    /// When the last message sent toward the directory arrives (they arrive in order).
    dir_up: Instant,
    workers: Vec<Worker>,
}

impl Process {
    pub(super) fn new(workers: usize, base: Instant, space: Option<&Space>) -> Self {
        let (first, given) = match space {
            Some(s) => (s.first().clone(), s.given()),
            None => (
                Layout::new(1, ["n0"]).unwrap_or_else(|e| panic!("{e}")),
                vec!["n0".to_string()],
            ),
        };
        let mut core = SpaceCore::new(first, given, true, base);
        if space.is_some_and(|s| s.cfg.gate_ignores_layout) {
            core.break_gate();
        }
        Self {
            core,
            reported: 0,
            member: None,
            joined_once: false,
            dir_up: base,
            workers: (0..workers)
                .map(|_| Worker {
                    state: State::Idle,
                    wake: 0,
                    cycles: 0,
                    lock: None,
                })
                .collect(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Idle,
    /// A take in progress (what it waits for: [`Lock::doing`]).
    Taking,
    Holding,
    /// Lock delay: a clean release writes its marker on every part first.
    Unmarking,
    /// Waiting for the releases' answers.
    Releasing,
}

/// What a take's step in progress waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Doing {
    /// Nothing: the next step may be taken.
    Nothing,
    /// The gate is shut: it waits for the core to open it, or the deadline.
    Gate,
    /// The acquire of a place on this node (`sent`: asked, or still waiting for a session).
    Acquire { node: usize, sent: bool },
    /// Lock delay: the markers of the places, then the wait.
    Settle,
    /// The read of the published epoch, sent with this wake-up number.
    Read(u64),
    /// The releases of the places given back.
    GiveBack,
    /// The pause after an unanswered read.
    Pause,
}

#[derive(Debug)]
struct Worker {
    state: State,
    /// The wake-up that counts (earlier ones were superseded).
    wake: u64,
    /// Takes begun so far.
    cycles: u64,
    lock: Option<Lock>,
}

/// A space lock being taken or held.
#[derive(Debug)]
struct Lock {
    name: usize,
    count: u64,
    take: Take,
    doing: Doing,
    /// The claim and the epoch of the attempt through the gate.
    claim: Option<ClaimId>,
    epoch: u64,
    when: Instant,
    taken: Vec<Part>,
    /// The bound of the whole acquire (client time), and when it is given up at it.
    deadline: Option<Instant>,
    /// Its id with the checker, once handed over.
    holder: Option<u64>,
    /// Releases (or markers of a clean release) not answered yet.
    pending: usize,
    settle: Settle,
    /// This take's number in its worker (the bound's wake-up names it).
    cycle: u64,
    /// The longest round trip its process's sessions showed while it ran.
    round_trip: Duration,
    /// The end of a pause after an unanswered read (client time).
    pause_until: Instant,
    /// When it began (the world's time).
    began: Instant,
}

/// Lock delay: how far the settling of the places got.
#[derive(Debug, Default)]
struct Settle {
    /// The markers read, one per place so far.
    read: Vec<Vec<u8>>,
    /// The places whose own marker was written.
    written: usize,
    /// Until when the guard waits (client time), and whether a marker not of the layout
    /// run asked for it.
    until: Option<(Instant, bool)>,
    /// The answer of the describe or update on its way, by node.
    waiting: Option<usize>,
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

    // ---- the core ------------------------------------------------------------------------

    /// Carries out what process `c`'s core queued: locks lost, the gate, the report.
    fn space_effects(&mut self, c: usize) {
        let effects = self.clients[c].space.core.take_effects();
        let mut gate = false;
        for effect in effects {
            match effect {
                SpaceEffect::Lost(claim) => self.claim_lost(c, claim),
                SpaceEffect::Gate => gate = true,
                SpaceEffect::Layout(_) | SpaceEffect::Report(_) => {}
            }
        }
        self.report(c);
        if gate {
            // Every take waiting at the gate looks again.
            for w in 0..self.clients[c].space.workers.len() {
                if self.lock(c, w).is_some_and(|l| l.doing == Doing::Gate) {
                    self.schedule(c, w, self.now);
                }
            }
        }
    }

    /// The core made the lock of `claim` lost: a held lock lets go, a take gives back.
    fn claim_lost(&mut self, c: usize, claim: ClaimId) {
        let Some(w) = (0..self.clients[c].space.workers.len())
            .find(|&w| self.lock(c, w).is_some_and(|l| l.claim == Some(claim)))
        else {
            return;
        };
        let state = self.worker(c, w).state;
        // With the membership still confirmed, the layout made it lost.
        let by_layout = self.clients[c].space.member.is_some();
        if let Some(space) = self.space.as_mut().filter(|_| by_layout) {
            space.stats.claims_lost += 1;
        }
        match state {
            State::Holding => self.space_lost(c, w),
            State::Taking => {
                let Some(lock) = self.lock(c, w) else {
                    return;
                };
                lock.take.claim_lost();
                // A step that waits on the claim (the markers, the read, the pause) is
                // dropped, as `while_claimed` drops it; an acquire on its way is given
                // back once answered.
                if matches!(lock.doing, Doing::Settle | Doing::Read(_) | Doing::Pause) {
                    lock.doing = Doing::Nothing;
                    lock.settle = Settle::default();
                    self.schedule(c, w, self.now);
                }
            }
            _ => {}
        }
    }

    /// The lock of worker `w` no longer holds its name: what is left of it is released.
    fn space_lost(&mut self, c: usize, w: usize) {
        if let Some(id) = self.lock(c, w).and_then(|l| l.holder.take()) {
            self.checker.space_released(id);
        }
        self.worker(c, w).state = State::Releasing;
        let now_c = self.client_now(c);
        let touched = self.release_parts(c, w, now_c);
        for n in touched {
            self.after_client_step(c, n, now_c);
        }
    }

    // ---- the workers ---------------------------------------------------------------------

    /// Client `c` has a session on node `n` again (a new one, or its own reattached): the
    /// takes waiting for it go on; on the directory, the process reports and reads.
    pub(super) fn session_up(&mut self, c: usize, n: usize) {
        if self.directory() == Some(n) {
            return self.directory_attached(c);
        }
        for w in 0..self.clients[c].space.workers.len() {
            if let Some(lock) = self.lock(c, w).filter(|l| {
                l.doing
                    == Doing::Acquire {
                        node: n,
                        sent: false,
                    }
            }) {
                lock.doing = Doing::Nothing;
                self.schedule(c, w, self.now);
            }
        }
    }

    /// Parts whose token fired are lost: a take notices before it hands the lock over, a
    /// held lock lets go. A membership whose token fired costs every lock (the core says).
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
            match self.worker(c, w).state {
                State::Holding => self.space_lost(c, w),
                State::Taking => {
                    if let Some(lock) = self.lock(c, w) {
                        lock.take.part_lost();
                    }
                }
                _ => {}
            }
        }
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
            if let Some(claim) = lock.claim {
                let now_c = self.client_now(c);
                self.clients[c].space.core.leave(now_c, claim);
            }
        }
        self.clients[c].space.core.take_effects();
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
            State::Taking => {
                self.read_timed_out(c, w, wake);
                self.space_take(c, w, now_c)
            }
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
                self.worker(c, w).state = State::Releasing;
                self.release_parts(c, w, now_c)
            }
            State::Unmarking => {
                if self.lock(c, w).is_none_or(|l| l.pending == 0) {
                    self.worker(c, w).state = State::Releasing;
                    return self.release_parts(c, w, now_c);
                }
                Vec::new()
            }
            State::Releasing => {
                if self.lock(c, w).is_none_or(|l| l.pending == 0) {
                    self.space_done(c, w, now_c);
                }
                Vec::new()
            }
        }
    }

    /// A new cycle: a name, maybe a bound.
    fn space_begin(&mut self, c: usize, w: usize, now_c: Instant) -> Vec<usize> {
        if self.winding_down || self.ops >= self.cfg.ops || !self.clients[c].space.joined_once {
            return Vec::new(); // the process's joining wakes it
        }
        let name = self.rng.range(0, NAMES.len() as u64) as usize;
        let count = if name == SEMAPHORE { 1 } else { u64::MAX };
        let deadline = self
            .rng
            .chance(0.3)
            .then(|| now_c + Duration::from_millis(self.rng.range(0, 2_000)));
        let settle = self.space.as_ref().and_then(|s| s.delay(name)).is_some();
        let take = Take::new(vec![NAMES[name].to_string()], deadline, settle, false);
        let (round_trip, began) = (self.round_trip(c), self.now);
        let worker = self.worker(c, w);
        worker.state = State::Taking;
        worker.cycles += 1;
        let cycle = worker.cycles;
        worker.lock = Some(Lock {
            name,
            count,
            take,
            doing: Doing::Nothing,
            claim: None,
            epoch: 0,
            when: now_c,
            taken: Vec::new(),
            deadline,
            holder: None,
            pending: 0,
            settle: Settle::default(),
            cycle,
            round_trip,
            pause_until: now_c,
            began,
        });
        if let Some(d) = deadline {
            self.schedule_bound(c, w, cycle, d, round_trip);
        }
        self.space_take(c, w, now_c)
    }

    /// The `Acquiring` future gives a bounded take up at its bound, a round trip and 200
    /// ms: a wake-up of its own then (looked at again if the round trip grew meanwhile).
    fn schedule_bound(&mut self, c: usize, w: usize, cycle: u64, deadline: Instant, rtt: Duration) {
        if self.space_cfg().unbounded {
            return;
        }
        let at = self
            .global_of(c, crate::bound::expiry(deadline, rtt))
            .max(self.now);
        self.push(
            at,
            Ev::SpaceBound {
                client: c,
                worker: w,
                cycle,
            },
        );
    }

    /// The bound of take `cycle` of worker `w`: past it, the take is given up.
    pub(super) fn space_bound(
        &mut self,
        c: usize,
        w: usize,
        cycle: u64,
        now_c: Instant,
    ) -> Vec<usize> {
        let rtt = self.round_trip(c);
        let Some(lock) = self.lock(c, w).filter(|l| l.cycle == cycle) else {
            return Vec::new();
        };
        let Some(d) = lock.deadline else {
            return Vec::new();
        };
        lock.round_trip = lock.round_trip.max(rtt);
        let expiry = crate::bound::expiry(d, lock.round_trip);
        if self.worker(c, w).state != State::Taking {
            return Vec::new();
        }
        if now_c < expiry {
            let rtt = self.lock(c, w).map(|l| l.round_trip).unwrap_or_default();
            self.schedule_bound(c, w, cycle, d, rtt);
            return Vec::new();
        }
        self.give_up(c, w, now_c)
    }

    fn space_cfg(&self) -> SpaceConfig {
        self.space
            .as_ref()
            .map(|s| s.cfg.clone())
            .unwrap_or_default()
    }

    /// The longest latest round trip of process `c`'s sessions (what a bound waits past
    /// its deadline for).
    fn round_trip(&self, c: usize) -> Duration {
        self.clients[c]
            .sessions
            .iter()
            .filter_map(|s| s.core.as_ref().map(SessionCore::round_trip))
            .max()
            .unwrap_or_default()
    }

    /// Carries out the take's steps until one waits for something.
    fn space_take(&mut self, c: usize, w: usize, now_c: Instant) -> Vec<usize> {
        let mut touched = Vec::new();
        for _ in 0..64 {
            let rtt = self.round_trip(c);
            let Some(lock) = self.lock(c, w) else {
                return touched;
            };
            lock.round_trip = lock.round_trip.max(rtt);
            match lock.doing {
                Doing::Nothing | Doing::Gate => {}
                Doing::Settle => {
                    touched.extend(self.space_settle(c, w, now_c));
                    return touched;
                }
                Doing::Pause if now_c >= lock.pause_until => {
                    lock.doing = Doing::Nothing;
                    lock.take.paused();
                }
                Doing::Pause | Doing::Acquire { .. } | Doing::Read(_) | Doing::GiveBack => {
                    return touched;
                }
            }
            let step = lock.take.next(now_c);
            match step {
                Step::Enter { deadline } => {
                    let entered = self.clients[c].space.core.enter();
                    self.space_effects(c);
                    let Some(lock) = self.lock(c, w) else {
                        return touched;
                    };
                    match entered {
                        Ok(entry) => {
                            lock.claim = Some(entry.claim);
                            lock.epoch = entry.layout.epoch();
                            lock.when = entry.running_since;
                            lock.doing = Doing::Nothing;
                            lock.take.entered(entry);
                        }
                        Err(why)
                            if why.kind() == ErrorKind::SessionClosed
                                || deadline.is_some_and(|d| now_c >= d) =>
                        {
                            lock.doing = Doing::Nothing;
                            lock.take.refused(why);
                            if let Some(space) = self.space.as_mut() {
                                space.stats.refused_at_gate += 1;
                            }
                        }
                        Err(_) => {
                            // Shut: the core's next gate effect wakes it, or the deadline.
                            lock.doing = Doing::Gate;
                            if let Some(d) = deadline {
                                let at = self.global_of(c, d);
                                self.schedule(c, w, at);
                            }
                            return touched;
                        }
                    }
                }
                Step::Acquire { node, name } => {
                    touched.extend(self.space_acquire(c, w, node_index(&node), &name, now_c));
                    return touched;
                }
                Step::Settle { .. } => {
                    if let Some(lock) = self.lock(c, w) {
                        lock.doing = Doing::Settle;
                        lock.settle = Settle::default();
                    }
                    touched.extend(self.space_settle(c, w, now_c));
                    return touched;
                }
                Step::ReadPublished => {
                    if self.space_cfg().old_token_rule {
                        // Broken: no read, the old layout's rule.
                        if let Some(lock) = self.lock(c, w) {
                            lock.take.read(Ok(None));
                        }
                        continue;
                    }
                    self.schedule_read(c, w, now_c);
                    return touched;
                }
                Step::WriteLeader { .. } => {
                    // The simulated names have no leader.
                    if let Some(lock) = self.lock(c, w) {
                        lock.take.written(Ok(()));
                    }
                }
                Step::GiveBack => {
                    if let Some(lock) = self.lock(c, w) {
                        lock.doing = Doing::GiveBack;
                    }
                    touched.extend(self.release_parts(c, w, now_c));
                    return touched;
                }
                Step::Pause(pause) => {
                    if let Some(lock) = self.lock(c, w) {
                        lock.doing = Doing::Pause;
                        lock.pause_until = now_c + pause;
                    }
                    let at = self.global_of(c, now_c + pause);
                    self.schedule(c, w, at);
                    return touched;
                }
                Step::Done(outcome) => {
                    self.take_ended(c, w, now_c);
                    match outcome {
                        Ok(Some(tokens)) => self.space_hold(c, w, &tokens),
                        Ok(None) | Err(_) => self.space_done(c, w, now_c),
                    }
                    return touched;
                }
            }
        }
        touched
    }

    /// The `Acquiring` future around a bounded take is dropped at its bound: its places
    /// are released (not waited for) and its claim given up.
    fn give_up(&mut self, c: usize, w: usize, now_c: Instant) -> Vec<usize> {
        if let Some(space) = self.space.as_mut() {
            space.stats.given_up += 1;
        }
        self.take_ended(c, w, now_c);
        let touched = self.release_parts(c, w, now_c);
        if let Some(lock) = self.lock(c, w) {
            lock.pending = 0;
        }
        self.space_done(c, w, now_c);
        touched
    }

    /// A bounded take ended: by its bound, a round trip and 200 ms, or the rule is broken.
    /// A process paused meanwhile ran no code at all, its bound's included: not judged.
    fn take_ended(&mut self, c: usize, w: usize, now_c: Instant) {
        let paused_until = self.clients[c].paused_until;
        let Some(lock) = self.lock(c, w) else {
            return;
        };
        if let Some(d) = lock.deadline.filter(|_| paused_until <= lock.began) {
            let expiry = crate::bound::expiry(d, lock.round_trip);
            let name = lock.name;
            self.checker
                .bounded_call_ended(c, NAMES[name], now_c, expiry);
        }
    }

    /// Asks for the place of `name` on node `n`, once the session manager has a session
    /// there.
    fn space_acquire(
        &mut self,
        c: usize,
        w: usize,
        n: usize,
        name: &str,
        now_c: Instant,
    ) -> Vec<usize> {
        let Some(lock) = self.lock(c, w) else {
            return Vec::new();
        };
        let (index, deadline) = (lock.name, lock.deadline);
        if !self.clients[c].sessions[n].usable() {
            // The session manager has no session there now: wait for one (the bound, if
            // any, gives the take up).
            if let Some(lock) = self.lock(c, w) {
                lock.doing = Doing::Acquire {
                    node: n,
                    sent: false,
                };
            }
            return Vec::new();
        }
        let delayed = self.space.as_ref().and_then(|s| s.delay(index)).is_some();
        let mut opts = if index == SEMAPHORE || delayed {
            // The counted semaphore, or a lock-delay mutex's one unit.
            AcquireOptions::new().count(1)
        } else {
            AcquireOptions::exclusive().ephemeral(true)
        };
        if let Some(d) = deadline {
            opts = opts.timeout(d.saturating_duration_since(now_c));
        }
        let caller = self.caller(c, n, Caller::Space(w));
        if let Some(lock) = self.lock(c, w) {
            lock.doing = Doing::Acquire {
                node: n,
                sent: true,
            };
        }
        let cmd = Command::Acquire(AcquireCmd {
            caller,
            name: name.into(),
            opts,
            requested_at: now_c,
        });
        if let Some(core) = self.clients[c].sessions[n].core.as_mut() {
            core.command(now_c, cmd);
        }
        vec![n]
    }

    /// Lock delay: reads each place's marker, then (unless the wait they ask for ends past
    /// the bound) writes its own on each, then waits; then the take goes on.
    fn space_settle(&mut self, c: usize, w: usize, now_c: Instant) -> Vec<usize> {
        let skip = self.cfg.skip_delay;
        let Some((delay, any_layout)) = self
            .space
            .as_ref()
            .map(|s| (s.cfg.lock_delay, s.cfg.markers_of_any_layout))
        else {
            return Vec::new();
        };
        let Some(lock) = self.lock(c, w) else {
            return Vec::new();
        };
        if lock.doing != Doing::Settle || lock.settle.waiting.is_some() {
            return Vec::new();
        }
        let places = lock.taken.len();
        let (epoch, running_since) = (lock.epoch, lock.when);
        // Every marker read: what they ask for, judged once.
        if lock.settle.read.len() == places
            && lock.settle.written == 0
            && lock.settle.until.is_none()
        {
            let mut waits = Vec::new();
            for (part, data) in lock.taken.iter().zip(&lock.settle.read) {
                let asks = crate::recipes::lock_delay::asks(data, part.order_id, Some(epoch));
                if let Some(delay) = delay.filter(|_| !skip) {
                    if asks.after_grant {
                        waits.push((part.since + delay, false));
                    }
                    if asks.after_start && !any_layout {
                        waits.push((running_since + delay, true));
                    }
                }
            }
            let until = waits.into_iter().max_by_key(|w| w.0);
            if until.is_some_and(|(u, _)| lock.deadline.is_some_and(|d| u > d)) {
                // Past the bound: not the caller's in time; nothing is written.
                lock.doing = Doing::Nothing;
                let outcome = Err(Error::new(
                    ErrorKind::NotAcquired,
                    "the delay outlasts the bound",
                ));
                lock.take.settled(outcome);
                self.schedule(c, w, self.now);
                return Vec::new();
            }
            lock.settle.until = Some(until.unwrap_or((now_c, false)));
        }
        let Some(lock) = self.lock(c, w) else {
            return Vec::new();
        };
        let (read, written) = (lock.settle.read.len(), lock.settle.written);
        let next = if read < places { read } else { written };
        if read == places && written == places {
            // Every marker is written: the wait, then the take goes on.
            let until = lock.settle.until;
            if let Some((u, _)) = until
                && now_c < u
            {
                let at = self.global_of(c, u).max(self.now);
                self.schedule(c, w, at);
                return Vec::new();
            }
            if let Some((u, by_layout)) = until
                && u > lock.taken.first().map_or(u, |p| p.since)
                && let Some(space) = self.space.as_mut()
            {
                space.stats.delayed[usize::from(by_layout)] += 1;
            }
            let Some(lock) = self.lock(c, w) else {
                return Vec::new();
            };
            lock.doing = Doing::Nothing;
            lock.take.settled(Ok(()));
            return self.space_take(c, w, now_c);
        }
        let Some(part) = lock.taken.get(next) else {
            return Vec::new();
        };
        let (node, order, session_no) = (part.held.node, part.order_id, part.held.key.1);
        let name = NAMES[lock.name].to_string();
        let data = (read == places).then(|| crate::recipes::lock_delay::held(order, Some(epoch)));
        let s = &self.clients[c].sessions[node];
        if !s.usable() || s.session_no != session_no {
            // The session that held the place is gone: a place lost.
            if let Some(lock) = self.lock(c, w) {
                lock.take.part_lost();
                lock.doing = Doing::Nothing;
                lock.take
                    .settled(Err(Error::new(ErrorKind::SessionExpired, "gone")));
            }
            self.schedule(c, w, self.now);
            return Vec::new();
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
            lock.settle.waiting = Some(node);
        }
        if let Some(core) = self.clients[c].sessions[node].core.as_mut() {
            core.command(now_c, cmd);
        }
        vec![node]
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
            self.worker(c, w).state = State::Releasing;
            return self.release_parts(c, w, now_c);
        }
        let pending = touched.len();
        if let Some(lock) = self.lock(c, w) {
            lock.pending = pending;
        }
        self.worker(c, w).state = State::Unmarking;
        touched
    }

    fn schedule_read(&mut self, c: usize, w: usize, now_c: Instant) {
        let worker = self.worker(c, w);
        worker.wake += 1;
        let wake = worker.wake;
        let Some(lock) = worker.lock.as_mut() else {
            return;
        };
        lock.doing = Doing::Read(wake);
        let deadline = lock.deadline;
        let at = self.now + self.delay();
        self.push(
            at,
            Ev::DirRead {
                client: c,
                worker: w,
                wake,
            },
        );
        // Unanswered by its bound (the caller's, or the session timeout without one), the
        // read ends `Unavailable`.
        let bound = match deadline {
            Some(d) => crate::bound::expiry(d, self.round_trip(c)),
            None => now_c + self.cfg.timeout,
        };
        let at = self.global_of(c, bound).max(self.now);
        self.push(
            at,
            Ev::Space {
                client: c,
                worker: w,
                wake,
            },
        );
    }

    /// The lock is handed over with `tokens`: it holds its name for a while.
    fn space_hold(&mut self, c: usize, w: usize, tokens: &[(String, FencingToken)]) {
        let published = self.clients[c].space.core.published();
        let Some(lock) = self.lock(c, w) else {
            return;
        };
        let (name, count, epoch, claim) = (lock.name, lock.count, lock.epoch, lock.claim);
        let parts = lock.taken.iter().map(|p| p.held.clone()).collect();
        let lost = claim.is_none_or(|claim| self.clients[c].space.core.is_lost(claim));
        self.checker
            .space_handed_over(c, NAMES[name], epoch, published, lost);
        let id = self
            .checker
            .space_held(self.now, c, name, count, epoch, parts);
        self.ops += 1;
        let token = tokens.first().map(|(_, t)| *t).unwrap_or_default();
        self.checker.space_token(id, token);
        let Some(space) = self.space.as_mut() else {
            return;
        };
        let phase = space.phase(epoch);
        space.stats.held[phase] += 1;
        if space.layouts[1].epoch() == epoch && token.epoch > epoch {
            space.stats.late_transition += 1;
        }
        if let Some(lock) = self.lock(c, w) {
            lock.holder = Some(id);
        }
        self.worker(c, w).state = State::Holding;
        let hold = self.hold_time();
        self.schedule(c, w, self.now + hold);
    }

    /// Releases every part still held, the last taken first.
    fn release_parts(&mut self, c: usize, w: usize, now_c: Instant) -> Vec<usize> {
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
        if pending == 0 {
            self.released(c, w, now_c);
        }
        touched
    }

    /// Every release is answered: a take goes on, a lock is done.
    fn released(&mut self, c: usize, w: usize, now_c: Instant) {
        match self.worker(c, w).state {
            State::Taking => {
                let Some(lock) = self.lock(c, w) else {
                    return;
                };
                if lock.doing != Doing::GiveBack {
                    return;
                }
                lock.doing = Doing::Nothing;
                let claim = lock.claim.take();
                lock.take.gave_back();
                if let Some(claim) = claim {
                    self.clients[c].space.core.leave(now_c, claim);
                    self.space_effects(c);
                }
                self.schedule(c, w, self.now);
            }
            State::Releasing => self.space_done(c, w, now_c),
            _ => {}
        }
    }

    /// The cycle is over: the lock gives up its claim.
    fn space_done(&mut self, c: usize, w: usize, now_c: Instant) {
        let worker = self.worker(c, w);
        worker.state = State::Idle;
        worker.wake += 1;
        if let Some(claim) = worker.lock.take().and_then(|l| l.claim) {
            self.clients[c].space.core.leave(now_c, claim);
            self.space_effects(c);
        }
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
        let now_c = self.client_now(c);
        let Some(lock) = self.lock(c, w) else {
            return; // the process closed: the sessions release it
        };
        let settling =
            state == State::Taking && lock.doing == Doing::Settle && lock.settle.waiting == Some(n);
        match (answer, token) {
            (Answer::Acquire(Ok(Some(Grant { held }))), Some(token))
                if state == State::Taking
                    && lock.doing
                        == (Doing::Acquire {
                            node: n,
                            sent: true,
                        }) =>
            {
                let (lease, order_id) = (held.lease(), held.order_id);
                lock.doing = Doing::Nothing;
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
                lock.take.acquired(Ok(Some(order_id)));
                self.checker
                    .granted(self.now, key, resource, count, order_id, token);
                self.schedule(c, w, self.now);
            }
            (Answer::Acquire(outcome), _)
                if state == State::Taking
                    && lock.doing
                        == (Doing::Acquire {
                            node: n,
                            sent: true,
                        }) =>
            {
                // Not granted in time, refused, or the session ended.
                lock.doing = Doing::Nothing;
                lock.take.acquired(outcome.map(|_| None));
                self.schedule(c, w, self.now);
            }
            (Answer::Describe(d), _) if settling => {
                lock.settle.waiting = None;
                match d {
                    Ok(d) => lock.settle.read.push(d.data),
                    Err(e) => {
                        lock.doing = Doing::Nothing;
                        lock.take.settled(Err(e));
                    }
                }
                self.schedule(c, w, self.now);
            }
            (Answer::Done(done), _) if settling => {
                lock.settle.waiting = None;
                match done {
                    Ok(()) => lock.settle.written += 1,
                    Err(e) => {
                        lock.doing = Doing::Nothing;
                        lock.take.settled(Err(e));
                    }
                }
                self.schedule(c, w, self.now);
            }
            (Answer::Done(_), _) if state == State::Unmarking => {
                lock.pending = lock.pending.saturating_sub(1);
                if lock.pending == 0 {
                    self.schedule(c, w, self.now);
                }
            }
            (Answer::Release(_), _)
                if state == State::Releasing
                    || (state == State::Taking && lock.doing == Doing::GiveBack) =>
            {
                lock.pending = lock.pending.saturating_sub(1);
                if lock.pending == 0 {
                    self.released(c, w, now_c);
                }
            }
            _ => {}
        }
    }

    // ---- the membership ------------------------------------------------------------------

    /// The layout published as the publication `index`.
    fn publication(&self, index: usize) -> Option<Layout> {
        self.space.as_ref()?.published.get(index).cloned()
    }

    /// The directory's node, in a world with a lock space.
    fn directory(&self) -> Option<usize> {
        self.space.as_ref().map(Space::directory)
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

    /// The membership of process `c` may be lost (its directory session's token fired): the
    /// core loses every lock, before the server can drop the member from the list.
    fn observe_membership(&mut self, c: usize) {
        if self.clients[c].space.member.is_none() || self.member(c).is_some() || self.winding_down {
            return;
        }
        self.clients[c].space.member = None;
        if self.space_cfg().locks_outlive_membership {
            return; // broken: the core never hears of it
        }
        let held = (0..self.clients[c].space.workers.len())
            .filter(|&w| self.clients[c].space.workers[w].state == State::Holding)
            .count() as u64;
        self.clients[c]
            .space
            .core
            .member_lost(crate::space::core::not_member());
        self.space_effects(c);
        if let Some(space) = self.space.as_mut() {
            space.stats.lapses += 1;
            space.stats.lapse_locks_lost += held;
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

    /// Client `c` reports the oldest epoch its core runs, if that changed, on its directory
    /// session (if it has none attached, its next attach reports).
    fn report(&mut self, c: usize) {
        let epoch = self.clients[c].space.core.reported();
        if epoch == self.clients[c].space.reported || !self.dir_attached(c) {
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

    /// A read of client `c` reaches the directory: it answers with the layout published.
    pub(super) fn layout_read(&mut self, c: usize, join: Option<u64>) {
        if let Some(at) = self.dir_stall(c) {
            return self.push(at, Ev::LayoutRead { client: c, join });
        }
        let Some(published) = self.space.as_ref().map(Space::latest) else {
            return;
        };
        if self.dir_attached(c) {
            let at = self.now + self.delay();
            self.push(
                at,
                Ev::Follow {
                    client: c,
                    published,
                    join,
                },
            );
        }
    }

    /// Client `c` sees the publication `published` on its directory session: its core
    /// judges it; the answer to the read after joining with the session `join` confirms
    /// the membership, and the workers take locks again.
    pub(super) fn follow(&mut self, c: usize, published: usize, join: Option<u64>) {
        if let Some(at) = self.dir_stall(c) {
            return self.push(
                at,
                Ev::Follow {
                    client: c,
                    published,
                    join,
                },
            );
        }
        if !self.dir_attached(c) {
            return;
        }
        let Some(layout) = self.publication(published) else {
            return;
        };
        let now_c = self.client_now(c);
        self.clients[c]
            .space
            .core
            .published_value(now_c, Ok(layout));
        self.space_effects(c);
        let current = self
            .directory()
            .map(|d| self.clients[c].sessions[d].session_no);
        if join.is_none() || join != current {
            return;
        }
        let process = &mut self.clients[c].space;
        process.member = join;
        process.joined_once = true;
        process.core.member_confirmed();
        self.space_effects(c);
        for w in 0..self.clients[c].space.workers.len() {
            if self.worker(c, w).state == State::Idle {
                self.schedule(c, w, self.now);
            }
        }
    }

    /// A worker's read reaches the directory: it answers with the layout published now.
    pub(super) fn directory_read(&mut self, c: usize, w: usize, wake: u64) {
        if let Some(at) = self.dir_stall(c) {
            return self.push(
                at,
                Ev::DirRead {
                    client: c,
                    worker: w,
                    wake,
                },
            );
        }
        let Some(published) = self.space.as_ref().map(Space::latest) else {
            return;
        };
        let at = self.now + self.delay();
        self.push(
            at,
            Ev::DirAnswer {
                client: c,
                worker: w,
                wake,
                published,
            },
        );
    }

    /// The read's answer: the core notes its epoch, as the shell's read does, and the take
    /// reads its token's place from it.
    pub(super) fn directory_answer(&mut self, c: usize, w: usize, wake: u64, published: usize) {
        let Some(layout) = self.publication(published) else {
            return;
        };
        self.clients[c].space.core.seen(layout.epoch());
        self.space_effects(c);
        let Some(lock) = self.lock(c, w) else {
            return;
        };
        if lock.doing == Doing::Read(wake) {
            lock.doing = Doing::Nothing;
            lock.take.read(Ok(Some(layout)));
            self.schedule(c, w, self.now);
        }
    }

    /// A read's bound passed before its answer (its wake-up, `wake`, came first): it ends
    /// `Unavailable`.
    fn read_timed_out(&mut self, c: usize, w: usize, wake: u64) {
        let Some(lock) = self.lock(c, w) else {
            return;
        };
        if lock.doing != Doing::Read(wake) {
            return;
        }
        lock.doing = Doing::Nothing;
        let silent = Error::new(ErrorKind::Unavailable, "the directory did not answer");
        lock.take.read(Err(silent));
    }

    // ---- the operator --------------------------------------------------------------------

    /// The operator's periodic look at the directory (every few hundred milliseconds).
    pub(super) fn operator(&mut self) {
        if self.space.as_ref().is_none_or(Space::done) {
            return;
        }
        if self.space.as_ref().is_some_and(|s| s.garbage) {
            // The right layout again.
            if let Some(right) = self.space.as_ref().map(|s| s.layouts[s.step].clone()) {
                if let Some(space) = self.space.as_mut() {
                    space.garbage = false;
                }
                self.publish(right);
            }
        } else if self.space.as_ref().is_some_and(|s| s.cfg.hostile) && self.rng.chance(0.15) {
            self.publish_garbage();
        } else if self.operator_look() == Some(false)
            && let Some(space) = self.space.as_mut()
        {
            space.stats.refused += 1;
        }
        let at = self.now + Duration::from_millis(self.rng.range(200, 1_000));
        self.push(at, Ev::Operator);
    }

    /// A hostile directory publishes a layout no process may run: the same epoch with other
    /// nodes, an older epoch, or the next epoch. Each names a node nobody was given, so
    /// that no process runs it whatever epoch it runs itself (a layout of a newer epoch that
    /// a lagging process could run would split the fleet, which no process can tell from a
    /// real step: the directory's steps are what prevent it).
    fn publish_garbage(&mut self) {
        let Some(space) = self.space.as_ref() else {
            return;
        };
        let right = &space.layouts[space.step];
        let first = space.given().first().cloned().unwrap_or_default();
        let kind = self.rng.range(0, 3);
        let epoch = match kind {
            0 => right.epoch(),
            1 => right.epoch().saturating_sub(1).max(1),
            _ => right.epoch().saturating_add(1),
        };
        let garbage = Layout::new(epoch, [first.as_str(), "n99"]);
        let Ok(garbage) = garbage else {
            return;
        };
        if garbage == *right {
            return;
        }
        if let Some(space) = self.space.as_mut() {
            space.garbage = true;
            space.stats.hostile += 1;
        }
        self.publish(garbage);
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
        let space = self.space.as_ref().filter(|s| !s.done() && !s.garbage)?;
        if space.step == 2 {
            return None;
        }
        // The reshard starts a third into the run; its second step is tried from then on.
        if space.step == 0 && self.ops < self.cfg.ops / 3 {
            return None;
        }
        let next = if space.cfg.skip_transition {
            2
        } else {
            let members = self.nodes[space.directory()]
                .state
                .session_ids()
                .into_iter()
                .map(|id| (id, space.reports.get(&id).copied().unwrap_or(0)));
            let allowed =
                space.layouts[space.step].check_advance(&space.layouts[space.step + 1], members);
            if allowed.is_err() {
                return Some(false);
            }
            space.step + 1
        };
        let layout = space.layouts[next].clone();
        if let Some(space) = self.space.as_mut() {
            space.step = next;
            space.stats.steps.push(self.now - self.base);
        }
        let lapsed = self
            .clients
            .iter()
            .any(|c| c.space.joined_once && c.space.member.is_none());
        if let Some(space) = self.space.as_mut() {
            space.stats.steps_in_lapse += u64::from(lapsed);
        }
        if next == 1 {
            self.pause_at_reshard();
        }
        self.publish(layout);
        Some(true)
    }

    /// [`SpaceConfig::pause_at_reshard`], as `A+B` is published: one of the processes
    /// holding an exclusive name that moves, taken in `A`, is paused past its leases.
    fn pause_at_reshard(&mut self) {
        let Some(space) = self.space.as_ref().filter(|s| s.cfg.pause_at_reshard) else {
            return;
        };
        let node = |layout: &Layout, name: usize| layout.parts(NAMES[name])[0].node.clone();
        let a_epoch = space.layouts[0].epoch();
        let moves: Vec<bool> = (0..NAMES.len())
            .map(|n| node(&space.layouts[0], n) != node(&space.layouts[2], n))
            .collect();
        let holders: Vec<usize> = (0..self.clients.len())
            .filter(|&c| {
                self.clients[c].paused_until <= self.now
                    && self.clients[c].space.workers.iter().any(|w| {
                        w.state == State::Holding
                            && w.lock.as_ref().is_some_and(|l| {
                                l.epoch == a_epoch && moves[l.name] && l.name != SEMAPHORE
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

    /// Publishes `layout`; each process sees it after its own delay.
    fn publish(&mut self, layout: Layout) {
        let Some(space) = self.space.as_mut() else {
            return;
        };
        space.published.push(layout);
        let published = space.latest();
        for c in 0..self.clients.len() {
            let delay = if self.rng.chance(0.2) {
                Duration::from_millis(self.rng.range(500, 5_000))
            } else {
                Duration::from_millis(self.rng.range(1, 500))
            };
            let follow = Ev::Follow {
                client: c,
                published,
                join: None,
            };
            self.push(self.now + delay, follow);
        }
    }
}
