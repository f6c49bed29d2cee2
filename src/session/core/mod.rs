//! The session's pure core: every decision a session makes, with no I/O.
//!
//! [`SessionCore`] is a plain struct. Its methods take an input (a command from a handle, a
//! message from the server, "the stream is lost", "attached", a tick) and `now`, change its
//! tables, and queue [`Effect`]s: write this request, answer this caller, deliver this watch
//! item, publish this state, dial a reattach with this `SessionStart`. It spawns nothing,
//! holds no channel, never reads the clock and draws no random numbers (the backoff jitter
//! comes in with the input that needs it). The driver (`super::driver`) is the thin async
//! shell that feeds it and carries out its effects, in order.
//!
//! The concerns live in their own files:
//! - `acquire.rs`: the acquire queue per name, the fencing-token handshake, releases and
//!   owner-data updates;
//! - `held.rs`: a granted lease's record, shared with its `Lease` handle (its token is made
//!   when first asked for);
//! - `hints.rs`: what the session saw of the queues it waited in;
//! - `watch.rs`: watches, one per name on the server, multiplexed to local subscribers;
//! - `link.rs`: liveness (pings, the stream-dead check, the lease-safety deadline), stream
//!   loss, reattach, replay and close;
//! - `owner_data.rs`: updating a held lease's owner data, and noticing a lost ownership;
//! - `messages.rs`: the inputs and effects, the vocabulary between core and driver;
//! - `pending.rs`: the requests in flight, keyed by `req_id`;
//! - `liveness.rs`: the keepalive arithmetic.

mod acquire;
mod held;
mod hints;
mod ids;
mod link;
mod liveness;
mod messages;
mod owner_data;
mod pending;
#[cfg(test)]
mod tests;
mod watch;

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use self::acquire::NameState;
pub(crate) use self::held::Held;
use self::hints::QueueHints;
pub(crate) use self::ids::Ids;
use self::link::Link;
pub(crate) use self::link::start_message;
use self::liveness::Liveness;
pub(crate) use self::messages::{
    AcquireCmd, Answer, CallerId, Command, Control, CoreConfig, Effect, Grant, SubscriberId,
    Terminal,
};
use self::pending::{PendingTable, Replay};
use self::watch::WatchEntry;
use super::metrics::Metrics;
use super::state::SessionState;
use super::types::{HeldLease, SessionSnapshot, WaitingAcquire};
use crate::error::{Error, ErrorKind};
use crate::proto::{SessionResponse, StatusCode, session_request as rq, session_response as rs};

/// How many of the names a lost session held its one warning lists.
const LOST_EXAMPLES: usize = 5;

/// What a pending request's answer is for.
#[derive(Debug)]
enum Kind {
    Acquire {
        name: Arc<str>,
        caller: CallerId,
    },
    AcquireDescribe {
        name: Arc<str>,
        caller: CallerId,
        /// It asks for the waiters too (the acquire may wait in a queue the hints say is
        /// short).
        waiters: bool,
    },
    Release {
        name: Arc<str>,
        caller: Option<CallerId>,
        /// Sent again after a reattach: the first copy may already have released it.
        resent: bool,
    },
    Describe {
        caller: CallerId,
    },
    Plain {
        caller: CallerId,
        op: PlainOp,
        name: String,
    },
    SetData {
        /// Moved to the check once the update succeeded.
        caller: Option<CallerId>,
        name: String,
        /// The describe pipelined behind it, which shows whether the order id is unchanged.
        check: u64,
    },
    /// After a successful owner-data update: still the same ownership (order id)?
    SetDataCheck {
        caller: Option<CallerId>,
        name: String,
        lease: u64,
        /// The lease's order id.
        order_id: u64,
    },
    Watch {
        name: String,
    },
}

/// What a describe behind an acquire showed of the session's own entry.
#[derive(Debug, Default, Clone)]
struct Seen {
    /// The describe failed (not with NOT_FOUND, which says the semaphore is gone): it shows
    /// nothing, and this is why.
    failed: Option<Error>,
    /// Its order id, among the owners or the waiters.
    order_id: Option<u64>,
    /// Not an owner: the largest order id among the owners.
    floor: Option<u64>,
    /// Among the waiters: how many were ahead of it.
    ahead: Option<u64>,
}

/// Create, update and delete: requests answered with a plain status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PlainOp {
    Create,
    Update,
    Delete,
}

impl PlainOp {
    fn what(self) -> &'static str {
        match self {
            Self::Create => "create semaphore",
            Self::Update => "update semaphore",
            Self::Delete => "delete semaphore",
        }
    }
}

impl Kind {
    /// Whether [`SessionCore::rebuild`] can build the request again for a resend, so the
    /// pending table need not keep it once written.
    fn rebuilt(&self) -> bool {
        matches!(
            self,
            Kind::Acquire { .. } | Kind::AcquireDescribe { .. } | Kind::Release { .. }
        )
    }

    /// The operation's name in metrics.
    fn op(&self) -> &'static str {
        match self {
            Kind::Acquire { .. } | Kind::SetData { .. } => "acquire",
            Kind::AcquireDescribe { .. }
            | Kind::Describe { .. }
            | Kind::Watch { .. }
            | Kind::SetDataCheck { .. } => "describe",
            Kind::Release { .. } => "release",
            Kind::Plain { op, .. } => match op {
                PlainOp::Create => "create",
                PlainOp::Update => "update",
                PlainOp::Delete => "delete",
            },
        }
    }
}

/// The session's state machine.
#[derive(Debug)]
pub(crate) struct SessionCore {
    cfg: CoreConfig,
    /// The parent of every lease token.
    token: CancellationToken,
    terminal: Arc<Terminal>,
    state: SessionState,
    link: Link,
    live: Liveness,
    pending: PendingTable<Kind>,
    // Ordered maps throughout: the order of effects never depends on a hash seed, so a
    // simulated run replays exactly from its seed.
    names: Names,
    /// Local-queue deadlines: (deadline, caller) -> name.
    queue_deadlines: BTreeMap<(Instant, CallerId), Arc<str>>,
    /// When to arm again the lease guards left unarmed (a failed describe, a watch the
    /// server did not add): one ping interval after the first of them, whatever traffic
    /// the stream carries meanwhile.
    guard_rearm_at: Option<Instant>,
    /// Deadlines of acquires the server is working on, which the client enforces itself
    /// when the server's answer cannot come: (deadline, caller) -> name.
    active_deadlines: BTreeMap<(Instant, CallerId), Arc<str>>,
    /// What the queues of past acquires showed, per name: whether a queued acquire reads
    /// the waiter list.
    hints: QueueHints,
    watches: BTreeMap<String, WatchEntry>,
    watch_reqs: BTreeMap<u64, String>,
    /// Pings in flight: (opaque, sent at).
    pings: VecDeque<(u64, Instant)>,
    next_opaque: u64,
    next_lease: u64,
    /// Close asked: the moment to give up waiting for the server, and who waits.
    closing: Option<(Instant, Vec<CallerId>)>,
    done: bool,
    metrics: Metrics,
    out: Vec<Effect>,
    /// A deliberately broken core for the simulator's self-test: tokens fire this late.
    #[cfg(test)]
    fire_late: Duration,
}

/// The per-name table, with a count of the times it was lent out for a change: what the
/// session holds and waits for can only have changed when the count moved, which is how
/// the driver knows when to tell the announcer (`SessionCore::names_version`).
#[derive(Debug, Default)]
struct Names {
    map: BTreeMap<Arc<str>, NameState>,
    version: u64,
}

impl std::ops::Deref for Names {
    type Target = BTreeMap<Arc<str>, NameState>;

    fn deref(&self) -> &Self::Target {
        &self.map
    }
}

impl std::ops::DerefMut for Names {
    fn deref_mut(&mut self) -> &mut Self::Target {
        self.version = self.version.wrapping_add(1);
        &mut self.map
    }
}

impl SessionCore {
    /// The core of a session whose first attach (sent at `attach_sent`) was answered at
    /// `now`.
    pub(crate) fn new(
        cfg: CoreConfig,
        token: CancellationToken,
        terminal: Arc<Terminal>,
        attach_sent: Instant,
        now: Instant,
    ) -> Self {
        let metrics = Metrics::new(cfg.options.semaphore_labels);
        metrics.session_state(None, Some("attached"));
        tracing::info!(
            session_id = cfg.session_id,
            node = cfg.path.as_str(),
            timeout = ?cfg.options.get_timeout(),
            "session attached"
        );
        let live = Liveness::new(
            cfg.options.get_timeout(),
            cfg.options.get_safety_margin(),
            cfg.options.get_ping_interval(),
            attach_sent,
            now,
        );
        Self {
            state: SessionState::Attached {
                session_id: cfg.session_id,
            },
            cfg,
            token,
            terminal,
            link: Link::Up,
            live,
            pending: PendingTable::default(),
            names: Names::default(),
            queue_deadlines: BTreeMap::new(),
            guard_rearm_at: None,
            active_deadlines: BTreeMap::new(),
            hints: QueueHints::default(),
            watches: BTreeMap::new(),
            watch_reqs: BTreeMap::new(),
            pings: VecDeque::new(),
            next_opaque: 1,
            next_lease: 1,
            closing: None,
            done: false,
            metrics,
            out: Vec::new(),
            #[cfg(test)]
            fire_late: Duration::ZERO,
        }
    }

    /// The effects queued since the last call, in order.
    #[cfg(test)]
    pub(crate) fn take_effects(&mut self) -> Vec<Effect> {
        std::mem::take(&mut self.out)
    }

    /// Moves the effects queued since the last call, in order, into `buf` (which must be
    /// empty), keeping both buffers' capacity: no allocation per event.
    pub(crate) fn swap_effects(&mut self, buf: &mut Vec<Effect>) {
        debug_assert!(buf.is_empty());
        std::mem::swap(&mut self.out, buf);
    }

    /// Whether the session has ended (the driver stops once it has carried out the
    /// effects).
    pub(crate) fn is_done(&self) -> bool {
        self.done
    }

    /// The session's id.
    /// The latest round trip of a request the server answered.
    pub(crate) fn round_trip(&self) -> Duration {
        self.live.round_trip()
    }

    pub(crate) fn session_id(&self) -> u64 {
        self.cfg.session_id
    }

    /// How long the driver lingers on a stream it must close politely.
    pub(crate) fn stop_timeout(&self) -> Duration {
        self.cfg.options.stop_timeout
    }

    /// The terminal cause (or "closed" before there is one).
    pub(crate) fn cause(&self) -> Error {
        self.terminal.cause()
    }

    /// When the core next needs a [`SessionCore::tick`].
    pub(crate) fn next_wake(&self) -> Instant {
        let mut wake = self.live.deadline();
        #[cfg(test)]
        {
            wake += self.fire_late;
        }
        if let Some(at) = self.link.next_wake(&self.live) {
            wake = wake.min(at);
        }
        if let Some(((at, _), _)) = self.queue_deadlines.first_key_value() {
            wake = wake.min(*at);
        }
        if let Some(at) = self.guard_rearm_at {
            wake = wake.min(at);
        }
        if let Some((at, _)) = &self.closing {
            wake = wake.min(*at);
        }
        if let Some(at) = self.earliest_active_deadline() {
            wake = wake.min(at);
        }
        // The broken-on-purpose core checks its deadline late; the liveness check that
        // includes the deadline must wait as long, or it would wake at the same instant
        // forever.
        #[cfg(test)]
        if !self.fire_late.is_zero() && wake == self.live.deadline() {
            wake += self.fire_late;
        }
        wake
    }

    /// Time passed: deadlines, pings, reattach attempts.
    pub(crate) fn tick(&mut self, now: Instant) {
        self.check_deadline(now);
        if self.done {
            return;
        }
        if let Some((at, _)) = &self.closing
            && *at <= now
        {
            self.finish(now, SessionState::Closed, closed());
            return;
        }
        self.expire_queued(now);
        self.expire_unanswered_acquires(now);
        if self.guard_rearm_at.is_some_and(|at| at <= now) {
            self.guard_rearm_at = None;
            self.rearm_unadded_guards(now);
        }
        self.tick_link(now);
    }

    /// Ends the session once the lease-safety deadline has passed. The driver calls it
    /// after every input, so a flood of messages cannot postpone the tokens.
    pub(crate) fn check_deadline(&mut self, now: Instant) {
        #[cfg(test)]
        let now = now.checked_sub(self.fire_late).unwrap_or(now);
        if self.done || !self.live.expired(now) {
            return;
        }
        let msg = format!(
            "session {}: no confirmed contact with the server within the session timeout",
            self.session_id()
        );
        self.expire(now, msg);
    }

    // ---- handles -------------------------------------------------------------------------

    /// A command from a handle.
    pub(crate) fn command(&mut self, now: Instant, command: Command) {
        self.check_deadline(now);
        if self.done || self.closing.is_some() {
            self.refuse(command);
            return;
        }
        match command {
            Command::Acquire(cmd) => self.on_acquire(now, cmd),
            Command::Describe { caller, name, opts } => {
                self.submit(now, Kind::Describe { caller }, Replay::Resend, |req_id| {
                    rq::Request::DescribeSemaphore(rq::DescribeSemaphore {
                        req_id,
                        name,
                        include_owners: opts.owners,
                        include_waiters: opts.waiters,
                        watch_data: false,
                        watch_owners: false,
                    })
                });
            }
            Command::Create {
                caller,
                name,
                limit,
                data,
            } => {
                let kind = Kind::Plain {
                    caller,
                    op: PlainOp::Create,
                    name: name.clone(),
                };
                self.submit(now, kind, Replay::Fail, |req_id| {
                    rq::Request::CreateSemaphore(rq::CreateSemaphore {
                        req_id,
                        name,
                        limit,
                        data,
                    })
                });
            }
            Command::Update { caller, name, data } => {
                let kind = Kind::Plain {
                    caller,
                    op: PlainOp::Update,
                    name: name.clone(),
                };
                self.submit(now, kind, Replay::Resend, |req_id| {
                    rq::Request::UpdateSemaphore(rq::UpdateSemaphore { req_id, name, data })
                });
            }
            Command::Delete {
                caller,
                name,
                force,
            } => {
                let kind = Kind::Plain {
                    caller,
                    op: PlainOp::Delete,
                    name: name.clone(),
                };
                self.submit(now, kind, Replay::Fail, |req_id| {
                    rq::Request::DeleteSemaphore(rq::DeleteSemaphore {
                        req_id,
                        name,
                        force,
                    })
                });
            }
            Command::Watch {
                subscriber,
                name,
                opts,
            } => self.on_watch(now, subscriber, name, opts),
            Command::Close { caller } => self.begin_close(now, Some(caller)),
        }
    }

    /// Answers a command that can no longer be carried out with the cause.
    fn refuse(&mut self, command: Command) {
        let err = self.cause();
        let (caller, answer) = match command {
            Command::Acquire(cmd) => (cmd.caller, Answer::Acquire(Err(err))),
            Command::Describe { caller, .. } => (caller, Answer::Describe(Err(err))),
            Command::Create { caller, .. }
            | Command::Update { caller, .. }
            | Command::Delete { caller, .. } => (caller, Answer::Done(Err(err))),
            Command::Watch { subscriber, .. } => {
                self.out.push(Effect::Watch(subscriber, Err(err)));
                return;
            }
            Command::Close { caller } => {
                if let Some((_, waiting)) = &mut self.closing
                    && !self.done
                {
                    waiting.push(caller);
                    return;
                }
                (caller, Answer::Closed)
            }
        };
        self.answer(caller, answer);
    }

    /// A control message from a lease, a dropped acquire or watch, or a snapshot request.
    pub(crate) fn control(&mut self, now: Instant, control: Control) {
        self.check_deadline(now);
        if self.done {
            self.refuse_control(control);
            return;
        }
        match control {
            Control::Release {
                name,
                lease,
                caller,
            } => self.release(now, name, lease, caller),
            Control::CancelAcquire { name, caller } => self.cancel_acquire(now, &name, caller),
            Control::SetData {
                name,
                lease,
                data,
                caller,
            } => self.set_data(now, name, lease, data, caller),
            Control::Unwatch { name, subscriber } => self.unwatch(&name, subscriber),
            Control::GuardLease { name, lease } => self.guard_lease(now, &name, lease),
            Control::Snapshot { caller } => {
                let snapshot = self.snapshot();
                self.answer(caller, Answer::Snapshot(snapshot));
            }
        }
    }

    fn refuse_control(&mut self, control: Control) {
        match control {
            Control::Release {
                caller: Some(caller),
                ..
            } => {
                let err = self.cause();
                self.answer(caller, Answer::Release(Err(err)));
            }
            Control::SetData { caller, .. } => {
                let err = self.cause();
                self.answer(caller, Answer::Done(Err(err)));
            }
            Control::Snapshot { caller } => {
                let snapshot = self.snapshot();
                self.answer(caller, Answer::Snapshot(snapshot));
            }
            Control::Release { caller: None, .. }
            | Control::CancelAcquire { .. }
            | Control::Unwatch { .. }
            | Control::GuardLease { .. } => {}
        }
    }

    /// Every handle, lease and watch is gone: stop the session.
    pub(crate) fn handles_gone(&mut self, now: Instant) {
        if !self.done && self.closing.is_none() {
            self.begin_close(now, None);
        }
    }

    /// The driver could not hand a grant to its caller (it went away at the last moment):
    /// give the semaphore back.
    pub(crate) fn grant_refused(&mut self, now: Instant, name: Arc<str>, lease: u64) {
        self.release(now, name, lease, None);
    }

    /// Moves whenever the table of names was open to a change (more often than it changed,
    /// never less).
    pub(crate) fn names_version(&self) -> u64 {
        self.names.version
    }

    /// What the session holds and waits for, from its own tables (without its
    /// announcement, which is the session's own business).
    pub(crate) fn snapshot(&self) -> SessionSnapshot {
        let mut held = Vec::new();
        let mut waiting = Vec::new();
        let own = |name: &str| super::types::is_announcement(name);
        for (name, state) in self.names.iter().filter(|(name, _)| !own(name)) {
            if let Some(h) = &state.holding {
                held.push(HeldLease {
                    name: name.to_string(),
                    count: h.count,
                    fencing_token: crate::session::FencingToken::new(0, h.order_id),
                    since: h.since,
                });
            }
            if let Some(a) = state.active() {
                waiting.push(WaitingAcquire {
                    name: name.to_string(),
                    count: a.cmd.opts.count,
                    since: a.cmd.requested_at,
                    queued_on_server: a.queued,
                });
            }
            for q in state.waiters() {
                waiting.push(WaitingAcquire {
                    name: name.to_string(),
                    count: q.cmd.opts.count,
                    since: q.cmd.requested_at,
                    queued_on_server: false,
                });
            }
        }
        held.sort_by(|a, b| a.name.cmp(&b.name));
        waiting.sort_by(|a, b| a.since.cmp(&b.since).then_with(|| a.name.cmp(&b.name)));
        SessionSnapshot {
            session_id: self.cfg.session_id,
            state: self.state,
            held,
            waiting,
            requests_in_flight: self.pending.len(),
        }
    }

    // ---- sending -------------------------------------------------------------------------

    /// Registers a request and writes it if a stream is up.
    fn submit(
        &mut self,
        now: Instant,
        kind: Kind,
        replay: Replay,
        build: impl FnOnce(u64) -> rq::Request,
    ) -> u64 {
        let req_id = self.pending.register(kind, replay, build);
        self.write(now, req_id);
        req_id
    }

    fn write(&mut self, now: Instant, req_id: u64) {
        if !self.link.is_up() {
            return;
        }
        let Some(keep) = self.pending.get(req_id).map(|e| !e.kind.rebuilt()) else {
            return;
        };
        let request = match self.pending.take_for_write(req_id, keep) {
            Some(r) => Some(r),
            None => self.rebuild(now, req_id),
        };
        if let Some(r) = request {
            self.pending.mark_sent(req_id, now);
            self.out.push(Effect::Send(r));
        }
    }

    fn send_raw(&mut self, r: rq::Request) {
        if self.link.is_up() {
            self.out.push(Effect::Send(r));
        }
    }

    fn answer(&mut self, caller: CallerId, answer: Answer) {
        self.out.push(Effect::Answer(caller, answer));
    }

    fn publish(&mut self, state: SessionState) {
        self.state = state;
        self.out.push(Effect::State(state));
    }

    // ---- inbound -------------------------------------------------------------------------

    /// A message from the server.
    pub(crate) fn inbound(&mut self, now: Instant, msg: SessionResponse) {
        // Past the deadline nothing more is handed out, not even an answer in hand.
        self.check_deadline(now);
        if self.done || !self.link.is_up() {
            return;
        }
        self.live.on_inbound(now);
        let Some(response) = msg.response else {
            tracing::warn!(
                session_id = self.session_id(),
                "server sent an empty message; ignored"
            );
            return;
        };
        match response {
            rs::Response::Ping(p) => {
                self.send_raw(rq::Request::Pong(rq::PingPong { opaque: p.opaque }))
            }
            rs::Response::Pong(p) => self.on_pong(now, p.opaque),
            rs::Response::Failure(f) => self.on_failure(now, f),
            rs::Response::SessionStarted(s) => {
                tracing::warn!(
                    session_id = self.session_id(),
                    got = s.session_id,
                    "unexpected session_started; ignored"
                );
            }
            rs::Response::SessionStopped(_) => self.finish(
                now,
                SessionState::Expired,
                Error::new(ErrorKind::SessionExpired, "the server stopped the session"),
            ),
            rs::Response::AcquireSemaphorePending(p) => self.on_acquire_pending(now, p.req_id),
            rs::Response::AcquireSemaphoreResult(r) => self.on_acquire_result(now, r),
            rs::Response::ReleaseSemaphoreResult(r) => self.on_release_result(now, r),
            rs::Response::DescribeSemaphoreResult(r) => self.on_describe_result(now, r),
            rs::Response::DescribeSemaphoreChanged(c) => self.on_watch_changed(now, c),
            rs::Response::CreateSemaphoreResult(r) => {
                self.on_plain(now, r.req_id, r.status, &r.issues)
            }
            rs::Response::UpdateSemaphoreResult(r) => {
                self.on_plain(now, r.req_id, r.status, &r.issues)
            }
            rs::Response::DeleteSemaphoreResult(r) => {
                self.on_plain(now, r.req_id, r.status, &r.issues)
            }
            other => tracing::debug!(?other, "ignoring an unsupported message"),
        }
    }

    /// Removes the entry an answer belongs to, if it is of the expected kind; an answer to a
    /// request of another kind is a server bug and fails that request.
    fn take_answer(
        &mut self,
        now: Instant,
        req_id: u64,
        expected: impl Fn(&Kind) -> bool,
    ) -> Option<Kind> {
        let Some(entry) = self.pending.get(req_id) else {
            tracing::debug!(req_id, "answer for an unknown req_id; ignored");
            return None;
        };
        let matches = expected(&entry.kind);
        let entry = self.pending.remove(req_id)?;
        if let Some(sent) = entry.sent_at {
            if matches!(entry.kind, Kind::Acquire { .. }) {
                // Held by the server while the acquire waited: contact, not a round trip
                // (its first word, the pending answer, was the sample).
                self.live.on_contact(sent);
            } else {
                self.live.on_confirmed(sent, now);
            }
            self.metrics
                .request(entry.kind.op(), now.saturating_duration_since(sent));
        }
        if matches {
            return Some(entry.kind);
        }
        tracing::warn!(req_id, "answer of the wrong type for a request");
        self.fail_kind(
            now,
            entry.kind,
            Error::new(
                ErrorKind::Protocol,
                "the server answered with a message of the wrong type",
            ),
        );
        None
    }

    fn on_plain(
        &mut self,
        now: Instant,
        req_id: u64,
        status: i32,
        issues: &[crate::proto::IssueMessage],
    ) {
        let Some(Kind::Plain { caller, op, name }) =
            self.take_answer(now, req_id, |k| matches!(k, Kind::Plain { .. }))
        else {
            return;
        };
        let result = if status == StatusCode::Success as i32 {
            Ok(())
        } else {
            Err(Error::from_ydb(
                status,
                issues,
                &format!("{} {name:?}", op.what()),
            ))
        };
        self.answer(caller, Answer::Done(result));
    }

    fn on_describe_result(&mut self, now: Instant, r: rs::DescribeSemaphoreResult) {
        let Some(kind) = self.take_answer(now, r.req_id, |k| {
            matches!(
                k,
                Kind::Describe { .. }
                    | Kind::AcquireDescribe { .. }
                    | Kind::Watch { .. }
                    | Kind::SetDataCheck { .. }
            )
        }) else {
            return;
        };
        let ok = r.status == StatusCode::Success as i32;
        match kind {
            Kind::Describe { caller } => {
                let result = match (ok, r.semaphore_description) {
                    (true, Some(d)) => Ok(d.into()),
                    (true, None) => Err(Error::new(
                        ErrorKind::Protocol,
                        "describe answered without a description",
                    )),
                    (false, _) => Err(Error::from_ydb(r.status, &r.issues, "describe semaphore")),
                };
                self.answer(caller, Answer::Describe(result));
            }
            Kind::AcquireDescribe {
                name,
                caller,
                waiters,
            } => {
                let mut seen = self.seen(ok, &r, waiters);
                if !ok && r.status != StatusCode::NotFound as i32 {
                    seen.failed = Some(Error::from_ydb(
                        r.status,
                        &r.issues,
                        &format!("describe semaphore {name:?}"),
                    ));
                }
                self.on_acquire_describe(now, &name, caller, r.req_id, seen);
            }
            Kind::SetDataCheck {
                caller,
                name,
                lease,
                order_id: fencing,
            } => {
                // A describe that failed (not NOT_FOUND) shows nothing either way.
                let order_id = if ok || r.status == StatusCode::NotFound as i32 {
                    Some(self.seen(ok, &r, false).order_id)
                } else {
                    None
                };
                self.on_set_data_check(now, &name, lease, fencing, caller, order_id);
            }
            Kind::Watch { name } => self.on_watch_described(now, &name, r),
            Kind::Acquire { .. }
            | Kind::Release { .. }
            | Kind::Plain { .. }
            | Kind::SetData { .. } => {}
        }
    }

    /// What a description shows of this session's entry: its order id among the owners,
    /// and with `waiters` among the waiters too (a waiter keeps its order id when the
    /// server promotes it to owner).
    fn seen(&self, ok: bool, r: &rs::DescribeSemaphoreResult, waiters: bool) -> Seen {
        let me = self.session_id();
        let Some(d) = r.semaphore_description.as_ref().filter(|_| ok) else {
            return Seen::default();
        };
        if let Some(o) = d.owners.iter().find(|o| o.session_id == me) {
            return Seen {
                order_id: Some(o.order_id),
                ..Seen::default()
            };
        }
        let floor = d.owners.iter().map(|o| o.order_id).max();
        let position = d
            .waiters
            .iter()
            .filter(|_| waiters)
            .position(|w| w.session_id == me);
        Seen {
            order_id: position.map(|i| d.waiters[i].order_id),
            floor,
            ahead: position.map(|i| i as u64),
            failed: None,
        }
    }

    /// Answers a request that failed as a whole (a protocol violation, a replay error).
    fn fail_kind(&mut self, now: Instant, kind: Kind, err: Error) {
        match kind {
            Kind::Acquire { name, caller } | Kind::AcquireDescribe { name, caller, .. } => {
                if self.active_mut(&name, caller).is_some() {
                    self.end_active(now, &name, Err(err), true);
                }
            }
            Kind::Release { caller, .. } => {
                if let Some(caller) = caller {
                    self.answer(caller, Answer::Release(Err(err)));
                }
            }
            Kind::Describe { caller } => self.answer(caller, Answer::Describe(Err(err))),
            Kind::Plain { caller, .. } => self.answer(caller, Answer::Done(Err(err))),
            Kind::SetData { caller, .. } | Kind::SetDataCheck { caller, .. } => {
                if let Some(caller) = caller {
                    self.answer(caller, Answer::Done(Err(err)));
                }
            }
            Kind::Watch { name } => self.deliver_watch(now, &name, Err(err)),
        }
    }

    // ---- the end -------------------------------------------------------------------------

    /// Ends the session as expired (`SessionExpired` with `msg`).
    fn expire(&mut self, now: Instant, msg: String) {
        let err = Error::new(ErrorKind::SessionExpired, msg);
        self.finish(now, SessionState::Expired, err);
    }

    /// Ends the session: publish the cause, fire every token, answer everything in flight
    /// with the cause (tower's order: the slot first, so a handle that sees its channel
    /// close reads the same cause).
    fn finish(&mut self, now: Instant, state: SessionState, err: Error) {
        if self.done {
            return;
        }
        // Once the owner asked to close, however the stop ends, the session is closed.
        let (state, err) = if self.closing.is_some() {
            (SessionState::Closed, closed())
        } else {
            (state, err)
        };
        self.done = true;
        self.terminal.set(err.clone());
        self.token.cancel();
        self.publish(state);
        let was = if self.link.is_up() {
            "attached"
        } else {
            "reattaching"
        };
        self.metrics.session_state(Some(was), None);
        let cause = match (state, err.kind()) {
            (SessionState::Closed, _) => "closed",
            (_, ErrorKind::SessionExpired) if err.status().is_none() => "deadline",
            _ => "session_expired",
        };
        if matches!(state, SessionState::Expired) {
            tracing::warn!(session_id = self.session_id(), %err, cause, "session lost");
        } else {
            tracing::debug!(session_id = self.session_id(), "session closed");
        }
        // One line for the session's lost leases, however many (a few names as examples);
        // each lease's own line is at debug level.
        let mut lost = 0usize;
        let mut examples: Vec<&str> = Vec::new();
        for (name, state) in self.names.iter() {
            if let Some(h) = &state.holding {
                let held_for = now.saturating_duration_since(h.since);
                self.metrics.lease_ended(name, held_for, Some(cause));
                if cause != "closed" && !super::types::is_announcement(name) {
                    lost += 1;
                    if examples.len() < LOST_EXAMPLES {
                        examples.push(name);
                    }
                    tracing::debug!(
                        semaphore = &**name,
                        fencing_token = h.order_id,
                        why = cause,
                        "lease lost"
                    );
                }
            }
            if state.active().is_some_and(|a| a.queued) {
                self.metrics.queued(name, -1.0);
            }
        }
        if lost > 0 {
            tracing::warn!(
                session_id = self.session_id(),
                leases = lost,
                semaphores = ?examples,
                why = cause,
                "leases lost"
            );
        }
        for (_, entry) in self.pending.drain() {
            match entry.kind {
                // Answered below, from the acquire tables.
                Kind::Acquire { .. } | Kind::AcquireDescribe { .. } | Kind::Watch { .. } => {}
                kind => self.fail_kind(now, kind, err.clone()),
            }
        }
        let names: Vec<NameState> = std::mem::take(&mut *self.names).into_values().collect();
        for state in names {
            let (active, waiters) = state.into_acquires();
            if let Some(active) = active {
                self.answer(active.cmd.caller, Answer::Acquire(Err(err.clone())));
            }
            for q in waiters {
                self.answer(q.cmd.caller, Answer::Acquire(Err(err.clone())));
            }
        }
        self.queue_deadlines.clear();
        self.active_deadlines.clear();
        let watches: Vec<WatchEntry> = std::mem::take(&mut self.watches).into_values().collect();
        self.watch_reqs.clear();
        for w in watches {
            for (subscriber, _) in w.subscribers {
                self.out.push(Effect::Watch(subscriber, Err(err.clone())));
            }
        }
        if let Some((_, waiting)) = self.closing.take() {
            for caller in waiting {
                self.answer(caller, Answer::Closed);
            }
        }
        if self.link.is_up() {
            self.out.push(Effect::DropStream);
        }
        self.link = Link::Ended;
    }

    /// Makes a queued acquire of `name` read the waiter list, as after a short queue seen
    /// at `now` (the simulator runs both ways of learning a fencing token from the start).
    #[cfg(test)]
    pub(crate) fn assume_short_queue(&mut self, name: &str, now: Instant) {
        self.hints.learn(name, 0, now);
    }

    /// Breaks the core on purpose (simulator self-test): lease tokens fire `by` after the
    /// deadline.
    #[cfg(test)]
    pub(crate) fn fire_late(&mut self, by: Duration) {
        self.fire_late = by;
    }

    /// Whether anything is left in any table (a finished session must have nothing).
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.pending.len() == 0
            && self.names.is_empty()
            && self.queue_deadlines.is_empty()
            && self.active_deadlines.is_empty()
            && self.watches.is_empty()
            && self.watch_reqs.is_empty()
    }
}

/// The error of a session closed by its owner.
pub(crate) fn closed() -> Error {
    Error::new(ErrorKind::SessionClosed, "the session is closed")
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
