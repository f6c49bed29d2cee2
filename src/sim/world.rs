//! The simulated world: emulator node cores, client processes with one session core per
//! node, the streams between them, workers, faults, and a queue of timed events. With a
//! lock space ([`Config::space`]) the world also has its directory (a node of its own, each
//! client's membership a session on it), an operator that reshards the space in the middle
//! of the run, and space workers ([`space`]).

mod space;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub(crate) use self::space::{SpaceConfig, SpaceStats};
use super::Rng;
use super::check::{Checker, LeaseKey, Resource, SEMAPHORE_LIMIT, Signal, Violation};
use crate::config::{AcquireOptions, SessionOptions};
use crate::emulator_core::{Effect as ServerEffect, NodeState, StreamId};
use crate::error::{Error, ErrorKind};
use crate::proto::{
    NodeConfigProto, SessionRequest, SessionResponse, StatusCode, session_request as rq,
    session_response as rs,
};
use crate::session::core::{
    AcquireCmd, Answer, CallerId, Command, Control, CoreConfig, Effect, Grant, Held, SessionCore,
    Terminal, start_message,
};

const MS: Duration = Duration::from_millis(1);
const S: Duration = Duration::from_secs(1);

/// What a run looks like.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) clients: usize,
    pub(crate) workers_per_client: usize,
    /// Lock operations (grants) after which no new cycle starts.
    pub(crate) ops: u64,
    /// Faults to inject.
    pub(crate) faults: u64,
    /// The session timeout of every client.
    pub(crate) timeout: Duration,
    /// The safety margin (default: the options' default).
    pub(crate) margin: Option<Duration>,
    /// Each client's clock runs at a rate drawn from `[1 - skew, 1 + skew]` of the server's.
    pub(crate) skew: f64,
    /// Every client's clock runs at exactly this rate (overrides `skew`).
    pub(crate) rate: Option<f64>,
    /// A deliberately broken client: lease tokens fire this much after the deadline.
    pub(crate) fire_late: Option<Duration>,
    /// Coordination nodes (each its own node core, each client a session on each); the
    /// plain workers (`workers_per_client`) use the first.
    pub(crate) nodes: usize,
    /// A lock space over the nodes, resharded onto one more node in the middle of the run.
    pub(crate) space: Option<SpaceConfig>,
    /// The mutex is taken as `Mutex::lock_delay` takes it (a persistent semaphore with one
    /// token, the marker in its data, the delay after an unclean end), and judged without
    /// fencing: a paused holder holds until it runs again and sees its token fired.
    pub(crate) lock_delay: Option<Duration>,
    /// A deliberately broken lock delay (the mutex's and the lock space's): markers are
    /// kept, the delay is never waited.
    pub(crate) skip_delay: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            clients: 4,
            workers_per_client: 3,
            ops: 1_000,
            faults: 100,
            timeout: 10 * S,
            margin: None,
            skew: 0.02,
            rate: None,
            fire_late: None,
            nodes: 1,
            space: None,
            lock_delay: None,
            skip_delay: false,
        }
    }
}

/// The numbers of one run.
#[derive(Debug, Default, Clone)]
pub(crate) struct Report {
    pub(crate) seed: u64,
    pub(crate) ops: u64,
    pub(crate) faults: u64,
    pub(crate) events: u64,
    pub(crate) writes_accepted: u64,
    pub(crate) writes_rejected: u64,
    pub(crate) leases_lost: u64,
    pub(crate) sessions: u64,
    pub(crate) virtual_time: Duration,
    pub(crate) violations: Vec<Violation>,
    /// The last events before the first violation (or the end), for a failure report.
    pub(crate) trail: Vec<String>,
    /// What the lock space did (zero without one).
    pub(crate) space: SpaceStats,
}

#[derive(Clone, Debug)]
enum Ev {
    ToServer {
        link: u64,
        msg: SessionRequest,
    },
    ToClient {
        link: u64,
        msg: SessionResponse,
    },
    /// The server learns that the client closed the stream.
    ServerClosed {
        link: u64,
    },
    /// The client learns that the server closed the stream (or the wire broke).
    ClientClosed {
        link: u64,
    },
    ServerTimers {
        node: usize,
    },
    ServerPing {
        link: u64,
    },
    ClientWake {
        client: usize,
        node: usize,
        at: Instant,
    },
    DialFailed {
        client: usize,
        node: usize,
        link: u64,
    },
    DialTimeout {
        client: usize,
        node: usize,
        link: u64,
    },
    Worker {
        client: usize,
        worker: usize,
    },
    NewSession {
        client: usize,
        node: usize,
    },
    Close {
        client: usize,
    },
    Fault,
    Write {
        key: LeaseKey,
        token: u64,
        issued_live: bool,
    },
    /// A space worker acts (only the latest wake-up it asked for counts).
    Space {
        client: usize,
        worker: usize,
        wake: u64,
    },
    /// A process sees a publication (its index among the layouts published): from its
    /// watch, or (`join`, the number of the directory session) as the answer to the read
    /// that completes its joining.
    Follow {
        client: usize,
        published: usize,
        join: Option<u64>,
    },
    /// The bound of a space worker's take (`cycle`: which take).
    SpaceBound {
        client: usize,
        worker: usize,
        cycle: u64,
    },
    /// A process's read of the published layout reaches the directory.
    LayoutRead {
        client: usize,
        join: Option<u64>,
    },
    /// A worker's read of the published epoch reaches the directory.
    DirRead {
        client: usize,
        worker: usize,
        wake: u64,
    },
    /// The read's answer (the publication's index) reaches the worker.
    DirAnswer {
        client: usize,
        worker: usize,
        wake: u64,
        published: usize,
    },
    /// A process's report of the epoch it runs reaches the directory, sent on its
    /// directory session `session` (the server's id).
    Reported {
        client: usize,
        session: u64,
        epoch: u64,
    },
    /// The operator looks at the directory.
    Operator,
}

#[derive(Debug)]
struct Link {
    client: usize,
    node: usize,
    stream: StreamId,
    /// In-flight messages are delivered (a cut loses them).
    wire: bool,
    /// The client still reads the stream.
    client_reads: bool,
    /// The server still serves the stream.
    server_serves: bool,
    last_up: Instant,
    last_down: Instant,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WorkerState {
    Idle,
    Acquiring,
    /// Lock delay: granted, reading the marker.
    Reading,
    /// Lock delay: writing its own `held` marker.
    Marking,
    /// Lock delay: waiting out the delay before the guard is handed over.
    Delaying,
    Holding,
    /// Lock delay: writing the `released` marker before the release.
    Unmarking,
    Releasing,
}

#[derive(Debug)]
struct Worker {
    resource: Resource,
    state: WorkerState,
    count: u64,
    lease: Option<(LeaseKey, u64, u64, Signal)>,
    writes_left: u32,
    /// Lock delay: when the session learnt of the grant (client time).
    since: Instant,
    /// Lock delay: whether the marker said the last tenure ended uncleanly.
    must_wait: bool,
}

/// Who called a session.
#[derive(Debug, Clone, Copy)]
enum Caller {
    Close,
    /// A worker on the first node.
    Worker(usize),
    /// A space worker.
    Space(usize),
}

/// A client process: its clock, its sessions (one per node) and its workers.
#[derive(Debug)]
struct Client {
    rate: f64,
    paused_until: Instant,
    /// Sessions started so far, on every node: a session's number is unique in its client,
    /// as the checker's lease keys need.
    sessions_started: u64,
    sessions: Vec<Session>,
    workers: Vec<Worker>,
    /// The process's lock space and its workers.
    space: space::Process,
}

/// A client's session on one node, and what the driver and session manager keep of it.
#[derive(Debug)]
struct Session {
    core: Option<SessionCore>,
    /// The current session's token, as its handles hold it: the parent of its lease tokens.
    token: CancellationToken,
    session_no: u64,
    /// The attached stream.
    link: Option<u64>,
    /// A dial in progress: its stream and when (client time) the start went out.
    dialing: Option<(u64, Instant)>,
    /// Brand-new session attempts so far without success.
    start_attempts: u32,
    wake_at: Option<Instant>,
    stalled_until: Instant,
    refuse_until: Instant,
    cooldown_until: Instant,
    /// Callers of the current session.
    callers: HashMap<CallerId, Caller>,
    answered: HashSet<CallerId>,
    next_caller: CallerId,
    closing: bool,
}

impl Session {
    fn new(base: Instant) -> Self {
        Self {
            core: None,
            token: CancellationToken::new(),
            session_no: 0,
            link: None,
            dialing: None,
            start_attempts: 0,
            wake_at: None,
            stalled_until: base,
            refuse_until: base,
            cooldown_until: base,
            callers: HashMap::new(),
            answered: HashSet::new(),
            next_caller: 1,
            closing: false,
        }
    }

    fn usable(&self) -> bool {
        self.core.is_some() && !self.closing
    }
}

/// One coordination node: the emulator's core and its timer.
struct Node {
    state: NodeState,
    timer: Option<Instant>,
}

#[derive(Debug)]
struct ServerStream {
    link: u64,
    attached: bool,
    outstanding: u64,
    period: Duration,
}

/// One simulated run.
pub(crate) struct World {
    cfg: Config,
    rng: Rng,
    base: Instant,
    now: Instant,
    seq: u64,
    queue: BTreeMap<(Instant, u64), Ev>,
    nodes: Vec<Node>,
    server_streams: HashMap<StreamId, ServerStream>,
    next_opaque: u64,
    links: HashMap<u64, Link>,
    next_link: u64,
    clients: Vec<Client>,
    checker: Checker,
    ops: u64,
    faults: u64,
    events: u64,
    sessions: u64,
    winding_down: bool,
    /// The last events, kept as they are: formatted only for the report.
    trail: VecDeque<(Duration, Ev)>,
    fault_log: Vec<String>,
    /// The lock space's directory and operator.
    space: Option<space::Space>,
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("World")
            .field("now", &self.now)
            .field("events", &self.events)
            .finish_non_exhaustive()
    }
}

const TRAIL: usize = 40;
/// A run that needs more events than this has lost its way (a livelock).
const MAX_EVENTS: u64 = 20_000_000;

impl World {
    pub(crate) fn new(cfg: Config, seed: u64) -> Self {
        let mut rng = Rng::new(seed);
        let base = Instant::now();
        let space = cfg.space.as_ref().map(|s| space::Space::new(cfg.nodes, s));
        let node_count = space.as_ref().map_or(cfg.nodes, space::Space::node_count);
        let nodes = (0..node_count)
            .map(|n| {
                let mut state = NodeState::new(NodeConfigProto::default());
                if n == 0 {
                    create_semaphore(
                        &mut state,
                        base,
                        Resource::Semaphore.name(),
                        SEMAPHORE_LIMIT,
                    );
                    if cfg.lock_delay.is_some() {
                        create_semaphore(&mut state, base, Resource::Mutex.name(), 1);
                    }
                }
                if let Some(space) = space.as_ref().filter(|s| n != s.directory()) {
                    space.create_semaphores(&mut state, base);
                }
                Node { state, timer: None }
            })
            .collect();
        let space_workers = cfg.space.as_ref().map_or(0, |s| s.workers_per_client);
        let clients = (0..cfg.clients)
            .map(|_| {
                let rate = cfg
                    .rate
                    .unwrap_or_else(|| 1.0 - cfg.skew + 2.0 * cfg.skew * rng.unit());
                let workers = (0..cfg.workers_per_client)
                    .map(|w| Worker {
                        resource: Resource::ALL[w % Resource::ALL.len()],
                        state: WorkerState::Idle,
                        count: 1,
                        lease: None,
                        writes_left: 0,
                        since: base,
                        must_wait: false,
                    })
                    .collect();
                Client {
                    rate,
                    paused_until: base,
                    sessions_started: 0,
                    sessions: (0..node_count).map(|_| Session::new(base)).collect(),
                    workers,
                    space: space::Process::new(space_workers, base, space.as_ref()),
                }
            })
            .collect();
        let mut checker = Checker::default();
        if cfg.lock_delay.is_some() {
            checker = checker.with_lock_delay();
        }
        if cfg.space.as_ref().is_some_and(|s| s.lock_delay.is_some()) {
            checker = checker.with_space_lock_delay();
        }
        let mut world = Self {
            cfg,
            rng,
            base,
            now: base,
            seq: 0,
            queue: BTreeMap::new(),
            nodes,
            server_streams: HashMap::new(),
            next_opaque: 1,
            links: HashMap::new(),
            next_link: 1,
            clients,
            checker,
            ops: 0,
            faults: 0,
            events: 0,
            sessions: 0,
            winding_down: false,
            trail: VecDeque::with_capacity(TRAIL),
            fault_log: Vec::new(),
            space,
        };
        for c in 0..world.clients.len() {
            for node in 0..node_count {
                let at = base + Duration::from_millis(world.rng.range(0, 50));
                world.push(at, Ev::NewSession { client: c, node });
            }
        }
        let first_fault = base + Duration::from_secs(world.rng.range(2, 6));
        world.push(first_fault, Ev::Fault);
        world.start_space();
        world
    }

    /// Runs until the budget is spent and every session has been closed.
    pub(crate) fn run(mut self, seed: u64) -> Report {
        // A generous bound on virtual time: a run that goes on past it has hung.
        let horizon = self.base + Duration::from_secs(24 * 3600);
        while let Some(((at, _), ev)) = self.queue.pop_first() {
            if at > horizon {
                self.checker.violations.push(Violation {
                    what: "hang",
                    detail: "the run did not finish within a virtual day".into(),
                });
                break;
            }
            self.now = at;
            self.events += 1;
            if self.trail.len() == TRAIL {
                self.trail.pop_front();
            }
            self.trail.push_back((at - self.base, ev.clone()));
            self.event(ev);
            if !self.checker.violations.is_empty() {
                break;
            }
            if !self.winding_down
                && self.ops >= self.cfg.ops
                && self.faults >= self.cfg.faults
                && self.space.as_ref().is_none_or(space::Space::done)
            {
                self.wind_down();
            }
            if self.events > MAX_EVENTS {
                self.checker.violations.push(Violation {
                    what: "hang",
                    detail: format!("more than {MAX_EVENTS} events in one run"),
                });
                break;
            }
        }
        self.finish_checks();
        let mut trail = self
            .fault_log
            .split_off(self.fault_log.len().saturating_sub(12));
        trail.push("-- last events --".into());
        trail.extend(
            self.trail
                .iter()
                .map(|(at, ev)| format!("{at:?} {:?}", short(ev))),
        );
        Report {
            seed,
            ops: self.ops,
            faults: self.faults,
            events: self.events,
            writes_accepted: self.checker.writes_accepted,
            writes_rejected: self.checker.writes_rejected,
            leases_lost: self.checker.leases_lost,
            sessions: self.sessions,
            virtual_time: self.now - self.base,
            violations: self.checker.violations,
            trail,
            space: self.space.map(|s| s.stats).unwrap_or_default(),
        }
    }

    fn push(&mut self, at: Instant, ev: Ev) {
        self.seq += 1;
        self.queue.insert((at, self.seq), ev);
    }

    fn delay(&mut self) -> Duration {
        if self.rng.chance(0.02) {
            Duration::from_millis(self.rng.range(20, 200))
        } else {
            Duration::from_micros(self.rng.range(100, 3_000))
        }
    }

    // ---- clocks --------------------------------------------------------------------------

    fn client_now(&self, c: usize) -> Instant {
        let elapsed = (self.now - self.base).as_nanos() as f64;
        self.base + Duration::from_nanos((elapsed * self.clients[c].rate) as u64)
    }

    fn global_of(&self, c: usize, at: Instant) -> Instant {
        let elapsed = at.saturating_duration_since(self.base).as_nanos() as f64;
        self.base
            + Duration::from_nanos((elapsed / self.clients[c].rate) as u64)
            + Duration::from_micros(1)
    }

    // ---- the wire ------------------------------------------------------------------------

    fn open_link(&mut self, client: usize, node: usize) -> u64 {
        let id = self.next_link;
        self.next_link += 1;
        self.links.insert(
            id,
            Link {
                client,
                node,
                stream: id,
                wire: true,
                client_reads: true,
                server_serves: true,
                last_up: self.now,
                last_down: self.now,
            },
        );
        id
    }

    /// When a message sent now on `link` toward the server arrives (ordered, delayed,
    /// held by a stall).
    fn up_at(&mut self, link: u64) -> Option<Instant> {
        let d = self.delay();
        let l = self.links.get(&link)?;
        let stall = self.clients[l.client].sessions[l.node].stalled_until;
        let at = (self.now.max(stall) + d).max(l.last_up);
        if let Some(l) = self.links.get_mut(&link) {
            l.last_up = at;
        }
        Some(at)
    }

    fn down_at(&mut self, link: u64) -> Option<Instant> {
        let d = self.delay();
        let l = self.links.get(&link)?;
        let stall = self.clients[l.client].sessions[l.node].stalled_until;
        let at = (self.now.max(stall) + d).max(l.last_down);
        if let Some(l) = self.links.get_mut(&link) {
            l.last_down = at;
        }
        Some(at)
    }

    fn send_up(&mut self, link: u64, r: rq::Request) {
        if let Some(at) = self.up_at(link) {
            let msg = SessionRequest { request: Some(r) };
            self.push(at, Ev::ToServer { link, msg });
        }
    }

    fn send_down(&mut self, link: u64, msg: SessionResponse) {
        if let Some(at) = self.down_at(link) {
            self.push(at, Ev::ToClient { link, msg });
        }
    }

    /// The client closes its side: what it already sent still arrives, then the end.
    fn client_close(&mut self, link: u64) {
        if let Some(l) = self.links.get_mut(&link) {
            if !l.client_reads {
                return;
            }
            l.client_reads = false;
        }
        if let Some(at) = self.up_at(link) {
            self.push(at, Ev::ServerClosed { link });
        }
    }

    /// The server closes its side.
    fn server_close(&mut self, link: u64) {
        if let Some(l) = self.links.get_mut(&link) {
            if !l.server_serves {
                return;
            }
            l.server_serves = false;
        }
        if let Some(at) = self.down_at(link) {
            self.push(at, Ev::ClientClosed { link });
        }
    }

    /// The wire breaks: in-flight messages are lost and each side learns of it.
    fn cut(&mut self, link: u64) {
        let Some(l) = self.links.get_mut(&link) else {
            return;
        };
        l.wire = false;
        let at = self.now + MS;
        self.push(at, Ev::ServerClosed { link });
        self.push(at, Ev::ClientClosed { link });
    }

    // ---- events --------------------------------------------------------------------------

    fn event(&mut self, ev: Ev) {
        match ev {
            Ev::ToServer { link, msg } => self.server_message(link, msg),
            Ev::ServerClosed { link } => self.server_stream_ended(link),
            Ev::ServerTimers { node } => {
                self.nodes[node].timer = None;
                let effects = self.nodes[node].state.advance(self.now);
                self.server_effects(effects);
                self.directory_timers(node);
            }
            Ev::ServerPing { link } => self.server_ping(link),
            Ev::Fault => self.fault(),
            Ev::Write {
                key,
                token,
                issued_live,
            } => {
                self.checker.write(token, issued_live, key);
            }
            Ev::DirRead {
                client,
                worker,
                wake,
            } => self.directory_read(client, worker, wake),
            Ev::Reported {
                client,
                session,
                epoch,
            } => self.reported(client, session, epoch),
            Ev::LayoutRead { client, join } => self.layout_read(client, join),
            Ev::Operator => self.operator(),
            ev => {
                // The client and, for an event of one session, its node.
                let (client, node) = match &ev {
                    Ev::ToClient { link, .. } | Ev::ClientClosed { link } => {
                        match self.links.get(link) {
                            Some(l) => (l.client, Some(l.node)),
                            None => return,
                        }
                    }
                    Ev::ClientWake { client, node, .. }
                    | Ev::DialFailed { client, node, .. }
                    | Ev::DialTimeout { client, node, .. }
                    | Ev::NewSession { client, node } => (*client, Some(*node)),
                    Ev::Worker { client, .. } => (*client, Some(0)),
                    Ev::Close { client }
                    | Ev::Space { client, .. }
                    | Ev::SpaceBound { client, .. }
                    | Ev::Follow { client, .. }
                    | Ev::DirAnswer { client, .. } => (*client, None),
                    _ => return,
                };
                if self.clients[client].paused_until > self.now {
                    // The process is not running: everything for it waits.
                    let at = self.clients[client].paused_until;
                    self.push(at, ev);
                    return;
                }
                match node {
                    Some(n) => self.client_event(client, n, ev),
                    None => self.process_event(client, ev),
                }
            }
        }
        self.schedule_server_timers();
    }

    // ---- the server's shell --------------------------------------------------------------

    fn server_message(&mut self, link: u64, msg: SessionRequest) {
        let Some(l) = self.links.get(&link) else {
            return;
        };
        if !l.wire || !l.server_serves {
            return;
        }
        let (stream, node) = (l.stream, l.node);
        let Some(req) = msg.request else {
            return;
        };
        let attached = self.server_streams.get(&stream).is_some_and(|s| s.attached);
        if !attached {
            let rq::Request::SessionStart(start) = req else {
                self.server_fail(link, stream, StatusCode::BadRequest);
                return;
            };
            let (id, effects) = self.nodes[node].state.attach(self.now, stream, &start);
            if id.is_some() {
                let period = Duration::from_millis((start.timeout_millis / 3).clamp(10, 5_000));
                self.server_streams.insert(
                    stream,
                    ServerStream {
                        link,
                        attached: true,
                        outstanding: 0,
                        period,
                    },
                );
            } else {
                self.server_streams.insert(
                    stream,
                    ServerStream {
                        link,
                        attached: false,
                        outstanding: 0,
                        period: S,
                    },
                );
            }
            self.server_effects(effects);
            if id.is_some() {
                self.server_ping(link);
            }
            return;
        }
        match req {
            rq::Request::Ping(p) => {
                let pong = rs::Response::Pong(rs::PingPong { opaque: p.opaque });
                self.send_down(
                    link,
                    SessionResponse {
                        response: Some(pong),
                    },
                );
            }
            rq::Request::Pong(p) => {
                if let Some(s) = self.server_streams.get_mut(&stream)
                    && s.outstanding == p.opaque
                {
                    s.outstanding = 0;
                }
            }
            req => {
                let effects = self.nodes[node].state.request(self.now, stream, req);
                self.server_effects(effects);
            }
        }
    }

    /// The server's ping cadence: a ping every period; one still unanswered at the next
    /// tick ends the stream (`TIMEOUT`), as YDB's proxy does.
    fn server_ping(&mut self, link: u64) {
        let Some(stream) = self.links.get(&link).map(|l| l.stream) else {
            return;
        };
        let Some(s) = self.server_streams.get_mut(&stream) else {
            return;
        };
        if s.outstanding != 0 {
            self.server_fail(link, stream, StatusCode::Timeout);
            return;
        }
        let opaque = self.next_opaque;
        self.next_opaque += 1;
        s.outstanding = opaque;
        let at = self.now + s.period;
        let ping = rs::Response::Ping(rs::PingPong { opaque });
        self.send_down(
            link,
            SessionResponse {
                response: Some(ping),
            },
        );
        self.push(at, Ev::ServerPing { link });
    }

    fn server_fail(&mut self, link: u64, stream: StreamId, status: StatusCode) {
        let failure = rs::Response::Failure(rs::Failure {
            status: status as i32,
            issues: Vec::new(),
        });
        self.send_down(
            link,
            SessionResponse {
                response: Some(failure),
            },
        );
        self.server_close(link);
        self.server_streams.remove(&stream);
        if let Some(node) = self.links.get(&link).map(|l| l.node) {
            let effects = self.nodes[node].state.detach(self.now, stream);
            self.server_effects(effects);
        }
    }

    fn server_stream_ended(&mut self, link: u64) {
        let Some(l) = self.links.get_mut(&link) else {
            return;
        };
        l.server_serves = false;
        let (stream, node) = (l.stream, l.node);
        if self.server_streams.remove(&stream).is_some() {
            let effects = self.nodes[node].state.detach(self.now, stream);
            self.server_effects(effects);
        }
        self.forget_link(link);
    }

    fn server_effects(&mut self, effects: Vec<ServerEffect>) {
        for e in effects {
            match e {
                ServerEffect::Send(stream, msg) => {
                    if let Some(s) = self.server_streams.get(&stream) {
                        let link = s.link;
                        self.send_down(link, msg);
                    }
                }
                ServerEffect::Close(stream) => {
                    if let Some(s) = self.server_streams.remove(&stream) {
                        self.server_close(s.link);
                    }
                }
            }
        }
    }

    fn schedule_server_timers(&mut self) {
        for node in 0..self.nodes.len() {
            let n = &mut self.nodes[node];
            if let Some(at) = n.state.next_deadline()
                && n.timer.is_none_or(|t| at < t)
            {
                n.timer = Some(at);
                self.push(at.max(self.now), Ev::ServerTimers { node });
            }
        }
    }

    fn forget_link(&mut self, link: u64) {
        if let Some(l) = self.links.get(&link)
            && !l.server_serves
            && !l.client_reads
        {
            self.links.remove(&link);
        }
    }

    // ---- the client's shell (what the driver and the session manager do) ---------------

    /// An event of the session of client `c` on node `n`.
    fn client_event(&mut self, c: usize, n: usize, ev: Ev) {
        let now_c = self.client_now(c);
        // A process that runs again looks at its deadline before anything else.
        if let Some(core) = self.clients[c].sessions[n].core.as_mut() {
            core.check_deadline(now_c);
        }
        match ev {
            Ev::ToClient { link, msg } => self.client_message(c, n, link, msg, now_c),
            Ev::ClientClosed { link } => {
                if let Some(l) = self.links.get_mut(&link) {
                    l.client_reads = false;
                }
                self.forget_link(link);
                let cause = Error::new(ErrorKind::Transport, "stream ended");
                let s = &mut self.clients[c].sessions[n];
                if s.link == Some(link) {
                    s.link = None;
                    if let Some(core) = s.core.as_mut() {
                        core.stream_lost(now_c, &cause);
                    }
                } else if self.is_dialing(c, n, link) {
                    self.dial_failed(c, n, now_c, &cause);
                }
            }
            // Only the latest wake-up counts; earlier ones were superseded.
            Ev::ClientWake { at, .. } if self.clients[c].sessions[n].wake_at == Some(at) => {
                let s = &mut self.clients[c].sessions[n];
                s.wake_at = None;
                if let Some(core) = s.core.as_mut() {
                    core.tick(now_c);
                }
            }
            Ev::DialFailed { link, .. } if self.is_dialing(c, n, link) => {
                let err = Error::new(ErrorKind::Transport, "connection refused");
                self.dial_failed(c, n, now_c, &err);
            }
            Ev::DialTimeout { link, .. } if self.is_dialing(c, n, link) => {
                self.client_close(link);
                let err = Error::new(ErrorKind::Timeout, "attach timed out");
                self.dial_failed(c, n, now_c, &err);
            }
            Ev::Worker { worker, .. } => self.worker_step(c, worker, now_c),
            Ev::NewSession { .. } => self.start_session(c, n, now_c),
            _ => {}
        }
        self.after_client_step(c, n, now_c);
    }

    /// An event of the whole process `c`: its close, or its lock space's.
    fn process_event(&mut self, c: usize, ev: Ev) {
        let now_c = self.client_now(c);
        if let Ev::Close { .. } = ev {
            self.close_client(c, now_c);
            return;
        }
        // A process that runs again looks at every session's deadline before anything
        // else, so that what it does next sees the tokens that fired.
        for n in 0..self.clients[c].sessions.len() {
            if let Some(core) = self.clients[c].sessions[n].core.as_mut() {
                core.check_deadline(now_c);
            }
            self.after_client_step(c, n, now_c);
        }
        let touched = match ev {
            Ev::Space { worker, wake, .. } => self.space_step(c, worker, wake, now_c),
            Ev::SpaceBound { worker, cycle, .. } => self.space_bound(c, worker, cycle, now_c),
            Ev::Follow {
                published, join, ..
            } => {
                self.follow(c, published, join);
                Vec::new()
            }
            Ev::DirAnswer {
                worker,
                wake,
                published,
                ..
            } => {
                self.directory_answer(c, worker, wake, published);
                Vec::new()
            }
            _ => Vec::new(),
        };
        for n in touched {
            self.after_client_step(c, n, now_c);
        }
    }

    /// Closing ends what the workers hold (released, not lost) and every session.
    fn close_client(&mut self, c: usize, now_c: Instant) {
        self.end_space_locks(c);
        for n in 0..self.clients[c].sessions.len() {
            if let Some(core) = self.clients[c].sessions[n].core.as_mut() {
                core.check_deadline(now_c);
            }
            if self.clients[c].sessions[n].core.is_some() {
                if n == 0 {
                    for w in 0..self.clients[c].workers.len() {
                        if let Some((key, ..)) = self.clients[c].workers[w].lease.take() {
                            self.checker.ended(self.now, key, false);
                        }
                    }
                }
                let caller = self.caller(c, n, Caller::Close);
                let s = &mut self.clients[c].sessions[n];
                s.closing = true;
                if let Some(core) = s.core.as_mut() {
                    core.command(now_c, Command::Close { caller });
                }
            }
            self.after_client_step(c, n, now_c);
        }
    }

    fn is_dialing(&self, c: usize, n: usize, link: u64) -> bool {
        self.clients[c].sessions[n]
            .dialing
            .is_some_and(|(l, _)| l == link)
    }

    fn client_message(
        &mut self,
        c: usize,
        n: usize,
        link: u64,
        msg: SessionResponse,
        now_c: Instant,
    ) {
        let Some(l) = self.links.get(&link) else {
            return;
        };
        if !l.wire || !l.client_reads {
            return;
        }
        let s = &mut self.clients[c].sessions[n];
        if s.link == Some(link) {
            if let Some(core) = s.core.as_mut() {
                core.inbound(now_c, msg);
            }
            return;
        }
        let Some((dial_link, sent_at)) = s.dialing else {
            return;
        };
        if dial_link != link {
            return;
        }
        // The attacher: wait for session_started, answer pings.
        match msg.response {
            Some(rs::Response::SessionStarted(started)) => {
                s.dialing = None;
                self.attached(c, n, link, started.session_id, sent_at, now_c);
            }
            Some(rs::Response::Failure(f)) => {
                self.client_close(link);
                let err = Error::from_ydb(f.status, &f.issues, "session start");
                self.dial_failed(c, n, now_c, &err);
            }
            Some(rs::Response::Ping(p)) => {
                self.send_up(link, rq::Request::Pong(rq::PingPong { opaque: p.opaque }));
            }
            _ => {}
        }
    }

    fn attached(
        &mut self,
        c: usize,
        n: usize,
        link: u64,
        session_id: u64,
        sent_at: Instant,
        now_c: Instant,
    ) {
        let s = &mut self.clients[c].sessions[n];
        match s.core.as_mut() {
            Some(core) => {
                if core.attached(now_c, session_id, sent_at) {
                    s.link = Some(link);
                    self.session_up(c, n);
                } else {
                    // A session made for nobody: stop it.
                    self.send_up(link, rq::Request::SessionStop(rq::SessionStop {}));
                    self.client_close(link);
                }
            }
            None if self.winding_down => {
                // The run is ending: the session this late attach made is stopped at once.
                self.send_up(link, rq::Request::SessionStop(rq::SessionStop {}));
                self.client_close(link);
            }
            None => {
                s.start_attempts = 0;
                s.link = Some(link);
                s.callers.clear();
                s.answered.clear();
                let client = &mut self.clients[c];
                client.sessions_started += 1;
                client.sessions[n].session_no = client.sessions_started;
                self.sessions += 1;
                let cfg = self.core_config(c, session_id);
                let token = CancellationToken::new();
                self.clients[c].sessions[n].token = token.clone();
                let mut core =
                    SessionCore::new(cfg, token, Arc::new(Terminal::default()), sent_at, now_c);
                if let Some(late) = self.cfg.fire_late {
                    core.fire_late(late);
                }
                if c % 2 == 1 {
                    if n == 0 {
                        for r in Resource::ALL {
                            core.assume_short_queue(r.name(), now_c);
                        }
                    }
                    if self.space.is_some() {
                        for name in super::check::space::NAMES {
                            core.assume_short_queue(name, now_c);
                        }
                    }
                }
                self.clients[c].sessions[n].core = Some(core);
                if n == 0 {
                    for w in 0..self.clients[c].workers.len() {
                        let at = self.now + Duration::from_millis(self.rng.range(0, 20));
                        self.push(
                            at,
                            Ev::Worker {
                                client: c,
                                worker: w,
                            },
                        );
                    }
                }
                self.session_up(c, n);
            }
        }
    }

    fn core_config(&self, c: usize, session_id: u64) -> CoreConfig {
        let mut options = SessionOptions::new().timeout(self.cfg.timeout);
        if let Some(margin) = self.cfg.margin {
            options = options.safety_margin(margin);
        }
        CoreConfig {
            path: "/local/sim".into(),
            options,
            protection_key: vec![c as u8 + 1; 16],
            session_id,
            seq_no: 1,
        }
    }

    fn dial(
        &mut self,
        c: usize,
        n: usize,
        start: rq::SessionStart,
        limit: Duration,
        now_c: Instant,
    ) {
        let link = self.open_link(c, n);
        self.clients[c].sessions[n].dialing = Some((link, now_c));
        if self.clients[c].sessions[n].refuse_until > self.now {
            let at = self.now + MS;
            self.push(
                at,
                Ev::DialFailed {
                    client: c,
                    node: n,
                    link,
                },
            );
            return;
        }
        self.send_up(link, rq::Request::SessionStart(start));
        let at = self.global_of(c, now_c + limit);
        self.push(
            at,
            Ev::DialTimeout {
                client: c,
                node: n,
                link,
            },
        );
    }

    fn dial_failed(&mut self, c: usize, n: usize, now_c: Instant, err: &Error) {
        self.clients[c].sessions[n].dialing = None;
        let jitter = self.rng.unit();
        match self.clients[c].sessions[n].core.as_mut() {
            Some(core) => core.attach_failed(now_c, err, jitter),
            None => {
                // The session manager tries again with backoff.
                let s = &mut self.clients[c].sessions[n];
                let attempt = s.start_attempts;
                s.start_attempts += 1;
                let delay = crate::config::Backoff::default().delay(attempt, jitter);
                let at = self.now + delay + MS;
                self.push(at, Ev::NewSession { client: c, node: n });
            }
        }
    }

    fn start_session(&mut self, c: usize, n: usize, now_c: Instant) {
        let s = &self.clients[c].sessions[n];
        if self.winding_down || s.core.is_some() || s.dialing.is_some() {
            return;
        }
        let cfg = self.core_config(c, 0);
        let start = start_message(&cfg, 0);
        self.dial(c, n, start, self.cfg.timeout, now_c);
    }

    /// Carries out the core's effects, then looks at tokens, the session's end and the
    /// next wake-up.
    fn after_client_step(&mut self, c: usize, n: usize, now_c: Instant) {
        while let Some(core) = self.clients[c].sessions[n].core.as_mut() {
            core.check_deadline(now_c);
            let effects = core.take_effects();
            if effects.is_empty() {
                break;
            }
            for e in effects {
                self.client_effect(c, n, e, now_c);
            }
        }
        self.observe_tokens(c);
        let s = &self.clients[c].sessions[n];
        if s.core.as_ref().is_some_and(SessionCore::is_done) {
            self.session_ended(c, n);
            return;
        }
        if let Some(core) = s.core.as_ref() {
            let wake = self.global_of(c, core.next_wake()).max(self.now);
            if s.wake_at.is_none_or(|w| wake < w) {
                self.clients[c].sessions[n].wake_at = Some(wake);
                self.push(
                    wake,
                    Ev::ClientWake {
                        client: c,
                        node: n,
                        at: wake,
                    },
                );
            }
        }
    }

    fn client_effect(&mut self, c: usize, n: usize, e: Effect, now_c: Instant) {
        match e {
            Effect::Send(r) => {
                if let Some(link) = self.clients[c].sessions[n].link {
                    self.send_up(link, r);
                }
            }
            Effect::Answer(caller, answer) => self.answered(c, n, caller, answer),
            Effect::Queued(_) | Effect::Watch(..) | Effect::State(_) => {}
            Effect::DropStream => {
                if let Some(link) = self.clients[c].sessions[n].link.take() {
                    self.client_close(link);
                }
            }
            Effect::Dial { start, limit } => self.dial(c, n, start, limit, now_c),
        }
    }

    fn session_ended(&mut self, c: usize, n: usize) {
        let s = &mut self.clients[c].sessions[n];
        let Some(core) = s.core.take() else {
            return;
        };
        if !core.is_empty() {
            self.checker.violations.push(Violation {
                what: "leak",
                detail: format!(
                    "client {c}, node {n}: the ended session left entries in its tables"
                ),
            });
        }
        let unanswered: Vec<CallerId> = s
            .callers
            .keys()
            .filter(|k| !s.answered.contains(k))
            .copied()
            .collect();
        if !unanswered.is_empty() {
            self.checker.violations.push(Violation {
                what: "unanswered",
                detail: format!("client {c}, node {n}: callers {unanswered:?} never answered"),
            });
        }
        s.closing = false;
        let link = s.link.take();
        let dialing = s.dialing.take();
        if n == 0 {
            for w in &mut self.clients[c].workers {
                w.state = WorkerState::Idle;
                w.lease = None;
            }
        }
        if let Some(link) = link {
            self.client_close(link);
        }
        if let Some((link, _)) = dialing {
            self.client_close(link);
        }
        let at = self.now + Duration::from_millis(self.rng.range(10, 300));
        self.push(at, Ev::NewSession { client: c, node: n });
    }

    /// Leases whose token fired without a release are lost.
    fn observe_tokens(&mut self, c: usize) {
        for w in 0..self.clients[c].workers.len() {
            let worker = &self.clients[c].workers[w];
            if worker.state != WorkerState::Holding {
                continue;
            }
            let Some((key, ..)) = worker
                .lease
                .as_ref()
                .filter(|l| l.3.is_cancelled())
                .cloned()
            else {
                continue;
            };
            self.checker.ended(self.now, key, true);
            let worker = &mut self.clients[c].workers[w];
            worker.lease = None;
            worker.state = WorkerState::Idle;
            let at = self.now + Duration::from_millis(self.rng.range(1, 50));
            self.push(
                at,
                Ev::Worker {
                    client: c,
                    worker: w,
                },
            );
        }
        self.observe_space_tokens(c);
    }

    // ---- workers -------------------------------------------------------------------------

    fn caller(&mut self, c: usize, n: usize, who: Caller) -> CallerId {
        let s = &mut self.clients[c].sessions[n];
        let id = s.next_caller;
        s.next_caller += 1;
        s.callers.insert(id, who);
        id
    }

    fn worker_step(&mut self, c: usize, w: usize, now_c: Instant) {
        if !self.clients[c].sessions[0].usable() {
            return;
        }
        match self.clients[c].workers[w].state {
            WorkerState::Idle => {
                if self.winding_down || self.ops >= self.cfg.ops {
                    return;
                }
                let resource = self.clients[c].workers[w].resource;
                let (count, mut opts) = match resource {
                    Resource::Semaphore => (1, AcquireOptions::new().count(1)),
                    Resource::RwLock if self.rng.chance(0.3) => {
                        (u64::MAX, AcquireOptions::exclusive().ephemeral(true))
                    }
                    Resource::RwLock => (1, AcquireOptions::shared().ephemeral(true)),
                    // The checker counts the lock-delay mutex's one unit as the whole lock.
                    Resource::Mutex if self.cfg.lock_delay.is_some() => {
                        (u64::MAX, AcquireOptions::new().count(1))
                    }
                    Resource::Mutex | Resource::Part { .. } => {
                        (u64::MAX, AcquireOptions::exclusive().ephemeral(true))
                    }
                };
                if self.rng.chance(0.3) {
                    opts = opts.timeout(Duration::from_millis(self.rng.range(0, 500)));
                }
                let caller = self.caller(c, 0, Caller::Worker(w));
                let worker = &mut self.clients[c].workers[w];
                worker.state = WorkerState::Acquiring;
                worker.count = count;
                let cmd = Command::Acquire(AcquireCmd {
                    caller,
                    name: resource.name().into(),
                    opts,
                    requested_at: now_c,
                });
                if let Some(core) = self.clients[c].sessions[0].core.as_mut() {
                    core.command(now_c, cmd);
                }
            }
            WorkerState::Holding => {
                let Some((key, _, order_id, token)) = self.clients[c].workers[w].lease.clone()
                else {
                    return;
                };
                let resource = self.clients[c].workers[w].resource;
                if resource == Resource::Mutex && self.clients[c].workers[w].writes_left > 0 {
                    self.clients[c].workers[w].writes_left -= 1;
                    // Only a live lease writes (as `run_until_cancelled` does); the
                    // register judges the rest.
                    if !token.is_cancelled() {
                        let at = self.now + self.delay();
                        self.push(
                            at,
                            Ev::Write {
                                key,
                                token: order_id,
                                issued_live: !token.is_cancelled(),
                            },
                        );
                    }
                    let at = self.now + Duration::from_millis(self.rng.range(1, 30));
                    self.push(
                        at,
                        Ev::Worker {
                            client: c,
                            worker: w,
                        },
                    );
                    return;
                }
                self.checker.ended(self.now, key, false);
                if resource == Resource::Mutex
                    && self.cfg.lock_delay.is_some()
                    && !token.is_cancelled()
                {
                    // A clean unlock: the marker first, then the release.
                    self.clients[c].workers[w].state = WorkerState::Unmarking;
                    let data = crate::recipes::lock_delay::released(order_id, None);
                    self.worker_command(c, w, now_c, |caller, name| Command::Update {
                        caller,
                        name,
                        data,
                    });
                    return;
                }
                self.worker_release(c, w, now_c);
            }
            WorkerState::Delaying => {
                let Some((key, _, order_id, token)) = self.clients[c].workers[w].lease.clone()
                else {
                    return;
                };
                let worker = &self.clients[c].workers[w];
                let until = self
                    .cfg
                    .lock_delay
                    .and_then(|d| worker.since.checked_add(d));
                if worker.must_wait && until.is_some_and(|until| now_c < until) {
                    return; // an early wake: the delay's own comes later
                }
                if token.is_cancelled() {
                    // Lost during the delay: no guard, the grant given back.
                    self.worker_release(c, w, now_c);
                    return;
                }
                self.hand_over(c, w, key, order_id, token);
            }
            WorkerState::Acquiring
            | WorkerState::Reading
            | WorkerState::Marking
            | WorkerState::Unmarking
            | WorkerState::Releasing => {}
        }
    }

    /// What tells the holder of a lease session `n` of client `c` granted that it may be
    /// lost. Every other lease asks for its token at the grant, as the recipes that watch it
    /// do; the rest read the record and the session's token, as a `Lease` whose token nobody
    /// asked for does.
    pub(super) fn lease_signal(&self, c: usize, n: usize, held: &Arc<Held>) -> Signal {
        let session = &self.clients[c].sessions[n].token;
        if held.lease().is_multiple_of(2) {
            Signal::Token(held.token(session))
        } else {
            Signal::Record(held.clone(), session.clone())
        }
    }

    fn answered(&mut self, c: usize, n: usize, caller: CallerId, answer: Answer) {
        if !self.clients[c].sessions[n].answered.insert(caller) {
            self.checker.violations.push(Violation {
                what: "answered twice",
                detail: format!("client {c}, node {n}: caller {caller}"),
            });
            return;
        }
        let w = match self.clients[c].sessions[n].callers.get(&caller).copied() {
            Some(Caller::Worker(w)) => w,
            Some(Caller::Space(w)) => return self.space_answered(c, n, w, answer),
            Some(Caller::Close) | None => return,
        };
        let think = Duration::from_millis(self.rng.range(0, 40));
        match answer {
            Answer::Acquire(Ok(Some(Grant { held }))) => {
                let token = self.lease_signal(c, n, &held);
                let (lease, order_id) = (held.lease(), held.order_id);
                self.ops += 1;
                let key = (c, self.clients[c].sessions[n].session_no, lease);
                let resource = self.clients[c].workers[w].resource;
                if resource == Resource::Mutex && self.cfg.lock_delay.is_some() {
                    let worker = &mut self.clients[c].workers[w];
                    worker.state = WorkerState::Reading;
                    worker.lease = Some((key, lease, order_id, token));
                    worker.since = held.since;
                    let now_c = self.client_now(c);
                    let opts = crate::config::DescribeOptions::new();
                    self.worker_command(c, w, now_c, |caller, name| Command::Describe {
                        caller,
                        name,
                        opts,
                    });
                    return;
                }
                self.hand_over(c, w, key, order_id, token);
            }
            Answer::Describe(result)
                if self.clients[c].workers[w].state == WorkerState::Reading =>
            {
                let now_c = self.client_now(c);
                let Some((_, _, order_id, _)) = self.clients[c].workers[w].lease.clone() else {
                    return;
                };
                match result {
                    Ok(d) => {
                        let worker = &mut self.clients[c].workers[w];
                        worker.must_wait = !self.cfg.skip_delay
                            && crate::recipes::lock_delay::asks(&d.data, order_id, None)
                                .after_grant;
                        worker.state = WorkerState::Marking;
                        let data = crate::recipes::lock_delay::held(order_id, None);
                        self.worker_command(c, w, now_c, |caller, name| Command::Update {
                            caller,
                            name,
                            data,
                        });
                    }
                    Err(_) => self.worker_release(c, w, now_c),
                }
            }
            Answer::Done(result) if self.clients[c].workers[w].state == WorkerState::Marking => {
                let now_c = self.client_now(c);
                if result.is_err() {
                    self.worker_release(c, w, now_c);
                    return;
                }
                self.clients[c].workers[w].state = WorkerState::Delaying;
                let worker = &self.clients[c].workers[w];
                let until = self
                    .cfg
                    .lock_delay
                    .and_then(|d| worker.since.checked_add(d));
                let at = match until {
                    Some(until) if worker.must_wait => self.global_of(c, until).max(self.now),
                    _ => self.now,
                };
                self.push(
                    at,
                    Ev::Worker {
                        client: c,
                        worker: w,
                    },
                );
            }
            Answer::Done(_) if self.clients[c].workers[w].state == WorkerState::Unmarking => {
                // Written or not, the lock is released now (a failed write leaves `held`).
                let now_c = self.client_now(c);
                self.worker_release(c, w, now_c);
            }
            Answer::Acquire(_) | Answer::Release(_) => {
                let worker = &mut self.clients[c].workers[w];
                worker.state = WorkerState::Idle;
                worker.lease = None;
                self.push(
                    self.now + think,
                    Ev::Worker {
                        client: c,
                        worker: w,
                    },
                );
            }
            _ => {}
        }
    }

    /// The worker `w` of client `c` is handed its lease: the checker judges the grant, the
    /// worker holds it for a while (the mutex writing to the register meanwhile).
    fn hand_over(&mut self, c: usize, w: usize, key: LeaseKey, order_id: u64, token: Signal) {
        let lease = key.2;
        let resource = self.clients[c].workers[w].resource;
        let count = self.clients[c].workers[w].count;
        self.checker
            .granted(self.now, key, resource, count, order_id, token.clone());
        let writes = if resource == Resource::Mutex {
            self.rng.range(1, 4) as u32
        } else {
            0
        };
        let worker = &mut self.clients[c].workers[w];
        worker.state = WorkerState::Holding;
        worker.lease = Some((key, lease, order_id, token));
        worker.writes_left = writes;
        // Mostly short critical sections, some long ones, so that faults find
        // leases held.
        let hold = self.hold_time();
        self.push(
            self.now + hold,
            Ev::Worker {
                client: c,
                worker: w,
            },
        );
    }

    /// The worker `w` of client `c` sends `make(caller, name)` for its resource.
    fn worker_command(
        &mut self,
        c: usize,
        w: usize,
        now_c: Instant,
        make: impl FnOnce(CallerId, String) -> Command,
    ) {
        let name = self.clients[c].workers[w].resource.name().to_string();
        let caller = self.caller(c, 0, Caller::Worker(w));
        if let Some(core) = self.clients[c].sessions[0].core.as_mut() {
            core.command(now_c, make(caller, name));
        }
    }

    /// The worker `w` of client `c` releases what it has (its answer makes it idle).
    fn worker_release(&mut self, c: usize, w: usize, now_c: Instant) {
        let resource = self.clients[c].workers[w].resource;
        let Some((_, lease, ..)) = self.clients[c].workers[w].lease.take() else {
            return;
        };
        let caller = self.caller(c, 0, Caller::Worker(w));
        self.clients[c].workers[w].state = WorkerState::Releasing;
        let release = Control::Release {
            name: resource.name().into(),
            lease,
            caller: Some(caller),
        };
        if let Some(core) = self.clients[c].sessions[0].core.as_mut() {
            core.control(now_c, release);
        }
    }

    /// Mostly short critical sections, some long ones, so that faults find leases held.
    fn hold_time(&mut self) -> Duration {
        if self.rng.chance(0.2) {
            Duration::from_millis(self.rng.range(500, 15_000))
        } else {
            Duration::from_millis(self.rng.range(1, 60))
        }
    }

    // ---- faults --------------------------------------------------------------------------

    fn fault(&mut self) {
        if self.winding_down {
            return;
        }
        let timeout = self.cfg.timeout;
        let next = self.now + Duration::from_millis(self.rng.range(500, 4_000));
        self.push(next, Ev::Fault);
        // A client's session on a node, ready for another fault.
        let ready: Vec<(usize, usize)> = (0..self.clients.len())
            .flat_map(|c| (0..self.nodes.len()).map(move |n| (c, n)))
            .filter(|&(c, n)| self.clients[c].sessions[n].cooldown_until <= self.now)
            .collect();
        if ready.is_empty() {
            return;
        }
        let (c, n) = ready[self.rng.range(0, ready.len() as u64) as usize];
        self.faults += 1;
        let short = Duration::from_millis(self.rng.range(50, timeout.as_millis() as u64 * 4 / 10));
        let long = timeout + Duration::from_millis(self.rng.range(1_000, 10_000));
        let mut kind = self.rng.range(0, 100);
        if kind > 90 && self.space.as_ref().is_some_and(|s| n == s.directory()) {
            // A directory session is expired by the server on its own, after the session
            // timeout without contact (a long stall), never by fiat: a membership that the
            // server could end before its client's deadline would be no lease at all.
            kind = 75;
        }
        let what = match kind {
            0..=24 => "cut",
            25..=44 => "short stall",
            45..=59 => "short pause",
            60..=66 => "restart",
            67..=74 => "long outage",
            75..=82 => "long stall",
            83..=90 => "long pause",
            _ => "expire",
        };
        let log = format!(
            "{:?} fault {what} on client {c} node {n} (short {short:?}, long {long:?}, rate {:.3})",
            self.now - self.base,
            self.clients[c].rate
        );
        self.fault_log.push(log);
        let s = &mut self.clients[c].sessions[n];
        let end = match kind {
            // A cut, reconnects refused for a short while.
            0..=24 => {
                if let Some(link) = s.link {
                    self.cut(link);
                }
                self.clients[c].sessions[n].refuse_until = self.now + short / 2;
                self.now + short / 2
            }
            // A stall shorter than the session timeout.
            25..=44 => {
                s.stalled_until = self.now + short;
                self.now + short
            }
            // A process pause shorter than the session timeout.
            45..=59 => self.pause(c, short),
            // A tablet restart: every stream fails, sessions are kept.
            60..=66 => {
                let effects = self.nodes[n].state.restart(self.now);
                self.server_effects(effects);
                for other in &mut self.clients {
                    let s = &mut other.sessions[n];
                    s.cooldown_until = s.cooldown_until.max(self.now + timeout);
                }
                self.now
            }
            // Long faults: the session may be lost, and its leases with it.
            67..=74 => {
                if let Some(link) = s.link {
                    self.cut(link);
                }
                self.clients[c].sessions[n].refuse_until = self.now + long;
                self.checker.may_lose(c, self.now + long + 3 * timeout);
                self.now + long
            }
            75..=82 => {
                s.stalled_until = self.now + long;
                self.checker.may_lose(c, self.now + long + 3 * timeout);
                self.now + long
            }
            83..=90 => self.long_pause(c, long),
            _ => {
                let sid = s.core.as_ref().map(SessionCore::session_id);
                if let Some(sid) = sid {
                    let (_, effects) = self.nodes[n].state.expire_session(self.now, sid);
                    self.checker
                        .revoke(c, self.clients[c].sessions[n].session_no);
                    self.server_effects(effects);
                }
                self.checker.may_lose(c, self.now + 3 * timeout);
                self.now
            }
        };
        let cooled = end + timeout;
        if (45..=59).contains(&kind) || (83..=90).contains(&kind) {
            // A pause stops the whole process: every session of it cools down.
            for s in &mut self.clients[c].sessions {
                s.cooldown_until = cooled;
            }
        } else {
            self.clients[c].sessions[n].cooldown_until = cooled;
        }
    }

    /// A pause longer than the session timeout: the process may lose its leases. Returns
    /// when it runs again.
    fn long_pause(&mut self, c: usize, long: Duration) -> Instant {
        self.checker
            .may_lose(c, self.now + long + 3 * self.cfg.timeout);
        self.pause(c, long)
    }

    /// The process `c` is not stepped for `span`; returns when it runs again.
    fn pause(&mut self, c: usize, span: Duration) -> Instant {
        let until = self.now + span;
        self.clients[c].paused_until = until;
        self.checker.pause(c, until);
        until
    }

    // ---- the end -------------------------------------------------------------------------

    /// No new work: every client closes its sessions.
    fn wind_down(&mut self) {
        self.winding_down = true;
        for c in 0..self.clients.len() {
            let mut open = false;
            for s in &mut self.clients[c].sessions {
                s.stalled_until = s.stalled_until.min(self.now);
                s.refuse_until = s.refuse_until.min(self.now);
                open |= s.core.is_some();
            }
            for n in 0..self.clients[c].sessions.len() {
                if self.clients[c].sessions[n].core.is_none()
                    && let Some((link, _)) = self.clients[c].sessions[n].dialing.take()
                {
                    self.client_close(link);
                }
            }
            if open {
                let at = self.now;
                self.push(at, Ev::Close { client: c });
            }
        }
    }

    fn finish_checks(&mut self) {
        if !self.checker.violations.is_empty() {
            return;
        }
        if self
            .clients
            .iter()
            .any(|c| c.sessions.iter().any(|s| s.core.is_some()))
        {
            self.checker.violations.push(Violation {
                what: "hang",
                detail: "a session did not end after close".into(),
            });
            return;
        }
        // The servers forget everything of the closed sessions once their timers ran.
        let later = self.now + self.cfg.timeout * 4;
        for n in 0..self.nodes.len() {
            let effects = self.nodes[n].state.advance(later);
            self.server_effects(effects);
            let sessions = self.nodes[n].state.session_ids();
            let names = self.nodes[n].state.semaphore_names();
            let mut persistent = Vec::new();
            if n == 0 {
                persistent.push(Resource::Semaphore.name().to_string());
                if self.cfg.lock_delay.is_some() {
                    persistent.push(Resource::Mutex.name().to_string());
                }
            }
            if let Some(space) = self.space.as_ref().filter(|s| n != s.directory()) {
                persistent.extend(space.persistent().into_iter().map(String::from));
            }
            persistent.sort_unstable();
            if !sessions.is_empty() || names != persistent {
                self.checker.violations.push(Violation {
                    what: "server leak",
                    detail: format!("sessions {sessions:?}, semaphores {names:?} left on node {n}"),
                });
            }
        }
    }
}

/// Creates a persistent semaphore through a throwaway session, as a setup step.
fn create_semaphore(node: &mut NodeState, now: Instant, name: &str, limit: u64) {
    let start = rq::SessionStart {
        path: "/local/sim".into(),
        session_id: 0,
        timeout_millis: 1_000,
        description: String::new(),
        seq_no: 1,
        protection_key: Vec::new(),
    };
    let stream = 0;
    let _ = node.attach(now, stream, &start);
    let create = rq::Request::CreateSemaphore(rq::CreateSemaphore {
        req_id: 1,
        name: name.into(),
        limit,
        data: Vec::new(),
    });
    let _ = node.request(now, stream, create);
    let _ = node.request(now, stream, rq::Request::SessionStop(rq::SessionStop {}));
}

fn short(ev: &Ev) -> String {
    match ev {
        Ev::ToServer { link, msg } => format!("to server on {link}: {:?}", msg.request),
        Ev::ToClient { link, msg } => format!("to client on {link}: {:?}", msg.response),
        Ev::ClientWake { client, node, .. } => format!("wake client {client} on node {node}"),
        other => format!("{other:?}"),
    }
}
