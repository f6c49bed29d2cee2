//! The pure state machine of one coordination node (what YDB runs as a Kesus tablet).
//!
//! No async, no locks, no clocks: every method takes `now` and returns the [`Effect`]s the
//! service shell must carry out, in order. Behaviour follows the coordination service's
//! specification, `emulator/SPEC.md`, sections 2-8 and 11; a `§` in this file is a section of
//! `SPEC.md`.
//!
//! Data layout, chosen so that nothing is quadratic:
//!
//! * semaphores live in a map by internal id, with a name index (`by_name`);
//! * owners and waiters of a semaphore are maps keyed by `order_id` (node-wide unique), so the
//!   waiter map *is* the FIFO queue;
//! * each session keeps one link per semaphore (`SemId -> order_id`); whether the link is an
//!   owner or a waiter is answered by the semaphore's two maps;
//! * per-stream associations (which `req_id` answers a pending acquire, which `req_id` a watch
//!   notifies) live on the session and are dropped on every detach and attach;
//! * timers (detached-session expiry, waiter deadlines) sit in one ordered set, as in
//!   mini-redis's `db.rs`.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use tokio::time::{Duration, Instant};

use crate::observe::{Change, OwnerEnd, SessionEnd};
use crate::proto::{
    self, IssueMessage, NodeConfigProto, SemaphoreDescriptionProto, SemaphoreSessionProto,
    SessionResponse, StatusCode, session_request, session_response,
};

// Tests use `unwrap()` freely (house style, as in redis-rs); the library code never does.
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
#[path = "state_tests.rs"]
mod tests;

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
#[path = "state_proptest.rs"]
mod proptests;

/// Identifies one gRPC `Session` stream; assigned by the shell, never reused.
pub type StreamId = u64;

/// What the shell must do, in the order given.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Send a message on a stream.
    Send(StreamId, SessionResponse),
    /// Finish the stream with gRPC OK after the messages already sent to it; the shell then
    /// forgets the stream and must not pass it to the state machine again except as `detach`.
    Close(StreamId),
}

type SessionId = u64;
type SemId = u64;
type OrderId = u64;

/// §2.2 / §7: longest accepted session timeout (30 min); `u64::MAX` is rejected too.
const MAX_SESSION_TIMEOUT_MILLIS: u64 = 1_800_000;
/// §7: longest session description, in bytes.
const MAX_DESCRIPTION_SIZE: usize = 1024;
/// §7: longest protection key, in bytes.
const MAX_PROTECTION_KEY_SIZE: usize = 16;
/// §7: creating a session fails once this many exist.
const MAX_SESSIONS: usize = 1_000_000;
/// §7: creating a semaphore (persistent or ephemeral) fails once this many exist.
const MAX_SEMAPHORES: usize = 1_000_000;
/// §7: longest semaphore name, checked by create and update only.
const MAX_SEMAPHORE_NAME: usize = 1024;
/// §7: largest semaphore or owner data, in bytes.
const MAX_SEMAPHORE_DATA: usize = 1_048_576;
/// §4.2: longest finite acquire timeout (1 day); `u64::MAX` means "wait forever".
const MAX_ACQUIRE_TIMEOUT_MILLIS: u64 = 86_400_000;
/// §8.1: tablet default when `self_check_period_millis` was never set.
const DEFAULT_SELF_CHECK_MILLIS: u64 = 1_000;
/// §8.1: tablet default when `session_grace_period_millis` was never set.
const DEFAULT_GRACE_MILLIS: u64 = 10_000;

const SUPERSEDED: &str = "Operation superseded by another request";

/// A pending timer. Ordered after the deadline in the timer set, so ties fire in key order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum TimerKey {
    /// A detached session expires (§2.5).
    SessionExpiry(SessionId),
    /// A waiter's acquire timeout passes (§4.3).
    WaiterTimeout { sem: SemId, order_id: OrderId },
}

/// A status plus the single issue the server attaches to an error.
#[derive(Debug, Clone, Copy)]
struct Outcome {
    status: StatusCode,
    reason: &'static str,
}

impl Outcome {
    const OK: Outcome = Outcome {
        status: StatusCode::Success,
        reason: "",
    };

    const fn err(status: StatusCode, reason: &'static str) -> Self {
        Outcome { status, reason }
    }

    /// The `status` and `issues` fields of a result: no issue on success, exactly one otherwise.
    fn parts(self) -> (i32, Vec<IssueMessage>) {
        let issues = if self.status == StatusCode::Success {
            Vec::new()
        } else {
            vec![proto::issue(self.reason)]
        };
        (self.status as i32, issues)
    }
}

#[derive(Debug)]
struct Session {
    timeout_millis: u64,
    description: String,
    /// Set at creation, never changed (§2.3).
    protection_key: Vec<u8>,
    /// `LastOwnerSeqNo`: in memory only, reset by a restart (§2.1, §2.5).
    last_seq_no: u64,
    stream: Option<StreamId>,
    /// Expiry deadline while detached (also present in the timer set).
    expiry: Option<Instant>,
    /// The session's single entry (owner or waiter) per semaphore (§4.1).
    links: BTreeMap<SemId, OrderId>,
    /// Which acquire `req_id` answers a pending waiter ("wait cookie", §2.1).
    wait_cookies: HashMap<SemId, u64>,
    /// Which describe `req_id` a watch notifies ("watch cookie", §3.5); the watched kinds are
    /// the semaphore's watcher sets.
    watches: HashMap<SemId, u64>,
}

#[derive(Debug)]
struct Owner {
    session: SessionId,
    count: u64,
    data: Vec<u8>,
}

#[derive(Debug)]
struct Waiter {
    session: SessionId,
    count: u64,
    data: Vec<u8>,
    timeout_millis: u64,
    /// `None` for an infinite (`u64::MAX`) timeout.
    deadline: Option<Instant>,
}

#[derive(Debug)]
struct Semaphore {
    name: String,
    data: Vec<u8>,
    limit: u64,
    /// Sum of the owners' counts, never above `limit`.
    count: u64,
    ephemeral: bool,
    owners: BTreeMap<OrderId, Owner>,
    /// The FIFO queue: ascending `order_id` is queue order.
    waiters: BTreeMap<OrderId, Waiter>,
    data_watchers: BTreeSet<SessionId>,
    owner_watchers: BTreeSet<SessionId>,
}

impl Semaphore {
    /// `can_acquire(n) ⇔ n ≤ limit − count` (§4.1).
    fn can_acquire(&self, count: u64) -> bool {
        count <= self.limit.saturating_sub(self.count)
    }

    fn head(&self) -> Option<OrderId> {
        self.waiters.keys().next().copied()
    }

    fn is_empty(&self) -> bool {
        self.owners.is_empty() && self.waiters.is_empty()
    }

    fn describe(&self, include_owners: bool, include_waiters: bool) -> SemaphoreDescriptionProto {
        let owners = if include_owners {
            // §3.4: owners sorted by order_id, timeout_millis left 0.
            self.owners
                .iter()
                .map(|(&order_id, o)| SemaphoreSessionProto {
                    order_id,
                    session_id: o.session,
                    timeout_millis: 0,
                    count: o.count,
                    data: o.data.clone(),
                })
                .collect()
        } else {
            Vec::new()
        };
        let waiters = if include_waiters {
            // §3.4: queue order, with the timeout of the latest acquire.
            self.waiters
                .iter()
                .map(|(&order_id, w)| SemaphoreSessionProto {
                    order_id,
                    session_id: w.session,
                    timeout_millis: w.timeout_millis,
                    count: w.count,
                    data: w.data.clone(),
                })
                .collect()
        } else {
            Vec::new()
        };
        SemaphoreDescriptionProto {
            name: self.name.clone(),
            data: self.data.clone(),
            count: self.count,
            limit: self.limit,
            ephemeral: self.ephemeral,
            owners,
            waiters,
        }
    }
}

/// One coordination node.
#[derive(Debug)]
pub struct NodeState {
    config: NodeConfigProto,
    next_session_id: SessionId,
    next_semaphore_id: SemId,
    next_order_id: OrderId,
    sessions: HashMap<SessionId, Session>,
    streams: HashMap<StreamId, SessionId>,
    semaphores: HashMap<SemId, Semaphore>,
    by_name: HashMap<String, SemId>,
    timers: BTreeSet<(Instant, TimerKey)>,
    /// The changes made since the shell last took them, while recording
    /// ([`NodeState::record_changes`]); `None`: not recording, nothing noted.
    journal: Option<Vec<Change>>,
}

fn send(out: &mut Vec<Effect>, stream: StreamId, r: session_response::Response) {
    out.push(Effect::Send(stream, proto::response(r)));
}

fn fail_and_close(out: &mut Vec<Effect>, stream: StreamId, status: StatusCode, reason: &str) {
    out.push(Effect::Send(stream, proto::failure(status, reason)));
    out.push(Effect::Close(stream));
}

fn acquire_result(req_id: u64, outcome: Outcome, acquired: bool) -> session_response::Response {
    let (status, issues) = outcome.parts();
    session_response::Response::AcquireSemaphoreResult(session_response::AcquireSemaphoreResult {
        req_id,
        status,
        issues,
        acquired,
    })
}

fn release_result(req_id: u64, outcome: Outcome, released: bool) -> session_response::Response {
    let (status, issues) = outcome.parts();
    session_response::Response::ReleaseSemaphoreResult(session_response::ReleaseSemaphoreResult {
        req_id,
        status,
        issues,
        released,
    })
}

fn changed(req_id: u64, data_changed: bool, owners_changed: bool) -> session_response::Response {
    session_response::Response::DescribeSemaphoreChanged(
        session_response::DescribeSemaphoreChanged {
            req_id,
            data_changed,
            owners_changed,
        },
    )
}

/// `now + millis`, or `None` when that is not representable (treated as "never").
fn deadline_after(now: Instant, millis: u64) -> Option<Instant> {
    now.checked_add(Duration::from_millis(millis))
}

impl NodeState {
    /// A fresh node with the config as given by `CreateNode`.
    pub fn new(config: NodeConfigProto) -> Self {
        NodeState {
            config,
            next_session_id: 1,
            next_semaphore_id: 1,
            next_order_id: 1,
            sessions: HashMap::new(),
            streams: HashMap::new(),
            semaphores: HashMap::new(),
            by_name: HashMap::new(),
            timers: BTreeSet::new(),
            journal: None,
        }
    }

    /// Starts noting every change of sessions and owners (see [`crate::observe`]), for
    /// [`NodeState::take_changes`] to hand out.
    ///
    /// # Examples
    ///
    /// ```
    /// use ydb_coordination_emulator::core::NodeState;
    /// use ydb_coordination_emulator::observe::Change;
    ///
    /// let mut node = NodeState::new(Default::default());
    /// node.record_changes();
    /// node.restart(tokio::time::Instant::now());
    /// assert_eq!(node.take_changes(), vec![Change::Restarted]);
    /// assert!(node.take_changes().is_empty());
    /// ```
    pub fn record_changes(&mut self) {
        self.journal.get_or_insert_with(Vec::new);
    }

    /// The changes noted since the last call, in the order they were made (none unless
    /// [`NodeState::record_changes`] was called).
    pub fn take_changes(&mut self) -> Vec<Change> {
        self.journal
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Notes a change, when recording.
    fn note(&mut self, change: impl FnOnce() -> Change) {
        if let Some(journal) = &mut self.journal {
            journal.push(change());
        }
    }

    /// The config as stored: user-set values only, 0 / UNSET for the rest (§8.1).
    pub(crate) fn stored_config(&self) -> &NodeConfigProto {
        &self.config
    }

    /// `AlterNode`: a proto3 merge, so only non-empty / non-zero / non-UNSET fields overwrite.
    pub(crate) fn alter(&mut self, config: &NodeConfigProto) {
        if !config.path.is_empty() {
            self.config.path.clone_from(&config.path);
        }
        if config.self_check_period_millis != 0 {
            self.config.self_check_period_millis = config.self_check_period_millis;
        }
        if config.session_grace_period_millis != 0 {
            self.config.session_grace_period_millis = config.session_grace_period_millis;
        }
        if config.read_consistency_mode != 0 {
            self.config.read_consistency_mode = config.read_consistency_mode;
        }
        if config.attach_consistency_mode != 0 {
            self.config.attach_consistency_mode = config.attach_consistency_mode;
        }
        if config.rate_limiter_counters_mode != 0 {
            self.config.rate_limiter_counters_mode = config.rate_limiter_counters_mode;
        }
    }

    /// The extra time detached sessions get after a restart (§2.5):
    /// `max(min(grace, 30 s), clamp(self_check, 0.5 s, 10 s) + 1 s)` with the tablet defaults
    /// (self check 1 s, grace 10 s) for unset fields.
    pub(crate) fn grace_period(&self) -> Duration {
        let self_check = match u64::from(self.config.self_check_period_millis) {
            0 => DEFAULT_SELF_CHECK_MILLIS,
            v => v,
        }
        .clamp(500, 10_000);
        let grace = match u64::from(self.config.session_grace_period_millis) {
            0 => DEFAULT_GRACE_MILLIS,
            v => v,
        }
        .min(30_000);
        Duration::from_millis(grace.max(self_check + 1_000))
    }

    /// `session_start` on a new stream (the shell already checked it is the first message and
    /// that the path resolves to this node). Does §2.2 steps 4-7 and §2.3.
    ///
    /// On success returns `(Some(session_id), effects)` where effects are
    /// `[Send(stream, session_started{session_id, timeout_millis: 0})]` followed by the eviction
    /// of the previously bound stream, if any (`failure{BAD_SESSION}` then `Close`; tablet
    /// semantics, §2.4). On failure returns `(None, [Send(stream, failure), Close(stream)])`.
    /// The shell sends the first ping itself.
    pub fn attach(
        &mut self,
        now: Instant,
        stream: StreamId,
        start: &session_request::SessionStart,
    ) -> (Option<u64>, Vec<Effect>) {
        let mut out = Vec::new();
        if self.streams.contains_key(&stream) {
            // The shell should have caught this (§1.2); end the stream as the server would.
            self.detach_stream(now, stream);
            fail_and_close(
                &mut out,
                stream,
                StatusCode::BadRequest,
                "Session cannot be started twice",
            );
            return (None, out);
        }
        if let Err((status, reason)) = self.check_attach(start) {
            fail_and_close(&mut out, stream, status, reason);
            return (None, out);
        }

        let (session_id, previous) = if start.session_id == 0 {
            // §2.2 step 6: a new session.
            let id = self.next_session_id;
            self.next_session_id = id.saturating_add(1);
            self.sessions.insert(
                id,
                Session {
                    timeout_millis: start.timeout_millis,
                    description: start.description.clone(),
                    protection_key: start.protection_key.clone(),
                    last_seq_no: start.seq_no,
                    stream: Some(stream),
                    expiry: None,
                    links: BTreeMap::new(),
                    wait_cookies: HashMap::new(),
                    watches: HashMap::new(),
                },
            );
            self.note(|| Change::SessionStarted {
                session: id,
                description: start.description.clone(),
            });
            (id, None)
        } else {
            // §2.3 step 4: restore. Drop the old stream's associations, cancel the expiry.
            let id = start.session_id;
            self.clear_associations(id);
            let Some(session) = self.sessions.get_mut(&id) else {
                // Unreachable: check_attach verified that the session exists.
                fail_and_close(
                    &mut out,
                    stream,
                    StatusCode::SessionExpired,
                    "Session does not exist",
                );
                return (None, out);
            };
            session.timeout_millis = start.timeout_millis;
            session.description.clone_from(&start.description);
            session.last_seq_no = start.seq_no;
            let expiry = session.expiry.take();
            let previous = session.stream.replace(stream);
            if let Some(deadline) = expiry {
                self.timers.remove(&(deadline, TimerKey::SessionExpiry(id)));
            }
            if let Some(old) = previous {
                self.streams.remove(&old);
            }
            (id, previous)
        };
        self.streams.insert(stream, session_id);
        self.note(|| Change::Attached {
            session: session_id,
        });
        send(
            &mut out,
            stream,
            session_response::Response::SessionStarted(session_response::SessionStarted {
                session_id,
                timeout_millis: 0,
            }),
        );
        if let Some(old) = previous {
            // §2.4 tablet semantics: the old stream learns only after the attach succeeded.
            fail_and_close(
                &mut out,
                old,
                StatusCode::BadSession,
                "Session stolen by another remote client",
            );
        }
        (Some(session_id), out)
    }

    /// §2.2 step 4-5 and §2.3 steps 1-3, in the server's order.
    fn check_attach(
        &self,
        start: &session_request::SessionStart,
    ) -> Result<(), (StatusCode, &'static str)> {
        if start.timeout_millis > MAX_SESSION_TIMEOUT_MILLIS {
            return Err((StatusCode::BadRequest, "Session timeout is out of range"));
        }
        if start.description.len() > MAX_DESCRIPTION_SIZE {
            return Err((StatusCode::BadRequest, "Description is too large"));
        }
        if start.protection_key.len() > MAX_PROTECTION_KEY_SIZE {
            return Err((StatusCode::BadRequest, "Protection key is too large"));
        }
        if start.session_id == 0 {
            if self.sessions.len() >= MAX_SESSIONS {
                return Err((
                    StatusCode::PreconditionFailed,
                    "Too many sessions already exist",
                ));
            }
            return Ok(());
        }
        let Some(session) = self.sessions.get(&start.session_id) else {
            return Err((StatusCode::SessionExpired, "Session does not exist"));
        };
        if start.seq_no < session.last_seq_no {
            return Err((StatusCode::BadSession, "Attach request is out of sequence"));
        }
        if !session.protection_key.is_empty() && session.protection_key != start.protection_key {
            return Err((
                StatusCode::BadSession,
                "Attach request protection key mismatch",
            ));
        }
        Ok(())
    }

    /// A request on a stream: acquire, release, describe, create, update, delete or
    /// `session_stop`.
    ///
    /// Ping, pong, `session_start` and the unsupported variants belong to the shell; if passed
    /// here they end the stream with `failure{BAD_REQUEST}`. A stream that is not (or no longer)
    /// bound to a session gets `failure{BAD_SESSION, "Session is not attached"}` and is closed
    /// (§2.7). `session_stop` destroys the session (§2.7) and ends with `session_stopped` and
    /// `Close` after the effects for other streams.
    pub fn request(
        &mut self,
        now: Instant,
        stream: StreamId,
        req: session_request::Request,
    ) -> Vec<Effect> {
        use session_request::Request as R;
        let mut out = Vec::new();
        let misplaced = match &req {
            R::Ping(_) | R::Pong(_) => Some("Unexpected request"),
            R::SessionStart(_) => Some("Session cannot be started twice"),
            R::Unsupported5(_)
            | R::Unsupported6(_)
            | R::Unsupported13(_)
            | R::Unsupported14(_)
            | R::Unsupported15(_) => Some("Unimplemented request"),
            _ => None,
        };
        if let Some(reason) = misplaced {
            // We close the stream, so it is detached now rather than when the shell says so.
            self.detach_stream(now, stream);
            fail_and_close(&mut out, stream, StatusCode::BadRequest, reason);
            return out;
        }
        let Some(&sid) = self.streams.get(&stream) else {
            fail_and_close(
                &mut out,
                stream,
                StatusCode::BadSession,
                "Session is not attached",
            );
            return out;
        };
        match req {
            R::AcquireSemaphore(a) => self.acquire(now, sid, stream, a, &mut out),
            R::ReleaseSemaphore(r) => self.release(sid, stream, r, &mut out),
            R::DescribeSemaphore(d) => self.describe_request(sid, stream, d, &mut out),
            R::CreateSemaphore(c) => self.create(stream, c, &mut out),
            R::UpdateSemaphore(u) => self.update(stream, u, &mut out),
            R::DeleteSemaphore(d) => self.delete(stream, d, &mut out),
            R::SessionStop(_) => {
                self.delete_session(sid, SessionEnd::Stopped, &mut out);
                send(
                    &mut out,
                    stream,
                    session_response::Response::SessionStopped(session_response::SessionStopped {
                        session_id: sid,
                    }),
                );
                out.push(Effect::Close(stream));
            }
            // The misplaced variants were answered above.
            _ => {}
        }
        out
    }

    /// The stream ended for any reason. If it is still bound to a session, the session is
    /// detached: its expiry clock starts (`now + timeout`) and its wait and watch associations
    /// are dropped (§2.3, §2.5). Unknown streams are ignored.
    pub fn detach(&mut self, now: Instant, stream: StreamId) -> Vec<Effect> {
        self.detach_stream(now, stream);
        Vec::new()
    }

    fn detach_stream(&mut self, now: Instant, stream: StreamId) {
        let Some(sid) = self.streams.remove(&stream) else {
            return;
        };
        self.clear_associations(sid);
        let Some(session) = self.sessions.get_mut(&sid) else {
            return;
        };
        session.stream = None;
        let deadline = deadline_after(now, session.timeout_millis);
        if let Some(old) = std::mem::replace(&mut session.expiry, deadline) {
            self.timers.remove(&(old, TimerKey::SessionExpiry(sid)));
        }
        if let Some(deadline) = deadline {
            self.timers.insert((deadline, TimerKey::SessionExpiry(sid)));
        }
        self.note(|| Change::Detached { session: sid });
    }

    /// The earliest pending timer (detached-session expiry or waiter deadline).
    pub fn next_deadline(&self) -> Option<Instant> {
        self.timers.first().map(|&(deadline, _)| deadline)
    }

    /// Fires every timer with a deadline at or before `now`, in deadline order: a session
    /// expiry deletes the session like `session_stop` (§2.5, §2.7); a waiter timeout removes
    /// the waiter and answers `acquired=false` if still associated (§4.3).
    pub fn advance(&mut self, now: Instant) -> Vec<Effect> {
        let mut out = Vec::new();
        while let Some(&(deadline, key)) = self.timers.first() {
            if deadline > now {
                break;
            }
            self.timers.remove(&(deadline, key));
            match key {
                TimerKey::SessionExpiry(sid) => {
                    if let Some(session) = self.sessions.get_mut(&sid) {
                        session.expiry = None;
                        self.expire(sid, SessionEnd::Expired, &mut out);
                    }
                }
                TimerKey::WaiterTimeout { sem, order_id } => {
                    self.waiter_timeout(sem, order_id, &mut out);
                }
            }
        }
        out
    }

    fn waiter_timeout(&mut self, sem_id: SemId, order_id: OrderId, out: &mut Vec<Effect>) {
        let Some(waiter) = self
            .semaphores
            .get_mut(&sem_id)
            .and_then(|sem| sem.waiters.get_mut(&order_id))
        else {
            return;
        };
        // The timer is already out of the set.
        waiter.deadline = None;
        let sid = waiter.session;
        if let Some(session) = self.sessions.get_mut(&sid)
            && let Some(stream) = session.stream
            && let Some(req_id) = session.wait_cookies.remove(&sem_id)
        {
            send(out, stream, acquire_result(req_id, Outcome::OK, false));
        }
        self.remove_waiter(sem_id, order_id, out);
    }

    /// Tablet restart (§2.5, §2.9): every bound stream gets `failure{UNAVAILABLE}` and is
    /// closed; every session is detached with deadline `now + timeout + grace`; `LastOwnerSeqNo`
    /// is reset; waiter timers restart with their full timeout. Everything else is kept.
    pub fn restart(&mut self, now: Instant) -> Vec<Effect> {
        let mut out = Vec::new();
        let grace = self.grace_period();
        self.timers.clear();
        self.streams.clear();
        self.note(|| Change::Restarted);
        let mut ids: Vec<SessionId> = self.sessions.keys().copied().collect();
        ids.sort_unstable();
        for sid in ids {
            self.clear_associations(sid);
            let Some(session) = self.sessions.get_mut(&sid) else {
                continue;
            };
            let detached = session.stream.take();
            if let Some(stream) = detached {
                fail_and_close(&mut out, stream, StatusCode::Unavailable, "Link failure");
            }
            session.last_seq_no = 0;
            session.expiry = now
                .checked_add(grace)
                .and_then(|t| deadline_after(t, session.timeout_millis));
            if let Some(deadline) = session.expiry {
                self.timers.insert((deadline, TimerKey::SessionExpiry(sid)));
            }
            if detached.is_some() {
                self.note(|| Change::Detached { session: sid });
            }
        }
        for (&sem_id, sem) in &mut self.semaphores {
            for (&order_id, waiter) in &mut sem.waiters {
                waiter.deadline = if waiter.timeout_millis == u64::MAX {
                    None
                } else {
                    deadline_after(now, waiter.timeout_millis)
                };
                if let Some(deadline) = waiter.deadline {
                    self.timers.insert((
                        deadline,
                        TimerKey::WaiterTimeout {
                            sem: sem_id,
                            order_id,
                        },
                    ));
                }
            }
        }
        out
    }

    /// Fault control: deletes the session now, as on expiry. A stream still bound to it gets
    /// `failure{SESSION_EXPIRED, "Session has expired"}` and is closed, after the other
    /// effects. Returns whether the session existed.
    pub fn expire_session(&mut self, _now: Instant, session_id: u64) -> (bool, Vec<Effect>) {
        let mut out = Vec::new();
        if !self.sessions.contains_key(&session_id) {
            return (false, out);
        }
        self.expire(session_id, SessionEnd::Forced, &mut out);
        (true, out)
    }

    fn expire(&mut self, sid: SessionId, why: SessionEnd, out: &mut Vec<Effect>) {
        if let Some(stream) = self.delete_session(sid, why, out) {
            fail_and_close(
                out,
                stream,
                StatusCode::SessionExpired,
                "Session has expired",
            );
        }
    }

    /// The node is being dropped: every bound stream gets `failure{UNAVAILABLE}` and is closed.
    /// Sessions are unbound without expiry timers; the node is not meant to be used afterwards.
    pub(crate) fn shutdown(&mut self) -> Vec<Effect> {
        let mut out = Vec::new();
        let mut bound: Vec<(SessionId, StreamId)> = self
            .streams
            .drain()
            .map(|(stream, sid)| (sid, stream))
            .collect();
        bound.sort_unstable();
        for (sid, stream) in bound {
            self.clear_associations(sid);
            if let Some(session) = self.sessions.get_mut(&sid) {
                session.stream = None;
            }
            fail_and_close(&mut out, stream, StatusCode::Unavailable, "Link failure");
        }
        out
    }

    fn semaphore_by_name(&self, name: &str) -> Option<(SemId, &Semaphore)> {
        let &id = self.by_name.get(name)?;
        self.semaphores.get(&id).map(|sem| (id, sem))
    }

    /// Drops the session's wait cookies and watches (TIH `AttachProxy` / `DetachProxy`).
    fn clear_associations(&mut self, sid: SessionId) {
        let Some(session) = self.sessions.get_mut(&sid) else {
            return;
        };
        session.wait_cookies.clear();
        for (sem_id, _) in session.watches.drain() {
            if let Some(sem) = self.semaphores.get_mut(&sem_id) {
                sem.data_watchers.remove(&sid);
                sem.owner_watchers.remove(&sid);
            }
        }
    }

    /// Deletes a session (TDB `DoDeleteSession`): associations first (so its own requests get
    /// nothing), then owned semaphores one by one, then waiter entries. Returns the stream the
    /// session was bound to; the caller decides what that stream hears.
    fn delete_session(
        &mut self,
        sid: SessionId,
        why: SessionEnd,
        out: &mut Vec<Effect>,
    ) -> Option<StreamId> {
        self.clear_associations(sid);
        if !self.sessions.contains_key(&sid) {
            return None;
        }
        self.note(|| Change::SessionEnded { session: sid, why });
        let session = self.sessions.get_mut(&sid)?;
        let stream = session.stream.take();
        let expiry = session.expiry.take();
        let links = std::mem::take(&mut session.links);
        if let Some(stream) = stream {
            self.streams.remove(&stream);
        }
        if let Some(deadline) = expiry {
            self.timers
                .remove(&(deadline, TimerKey::SessionExpiry(sid)));
        }
        let mut waiting = Vec::new();
        for (sem_id, order_id) in links {
            let owns = self
                .semaphores
                .get(&sem_id)
                .is_some_and(|sem| sem.owners.contains_key(&order_id));
            if owns {
                self.remove_owner(sem_id, order_id, OwnerEnd::SessionEnded, out);
            } else {
                waiting.push((sem_id, order_id));
            }
        }
        for (sem_id, order_id) in waiting {
            self.remove_waiter(sem_id, order_id, out);
        }
        self.sessions.remove(&sid);
        stream
    }

    /// Removes an owner (TDB `DoDeleteSessionSemaphore` for owners): an ephemeral semaphore
    /// left empty is deleted, otherwise the queue is processed with "owners changed".
    fn remove_owner(
        &mut self,
        sem_id: SemId,
        order_id: OrderId,
        why: OwnerEnd,
        out: &mut Vec<Effect>,
    ) {
        let Some(sem) = self.semaphores.get_mut(&sem_id) else {
            return;
        };
        let Some(owner) = sem.owners.remove(&order_id) else {
            return;
        };
        if let Some(journal) = &mut self.journal {
            journal.push(Change::Released {
                semaphore: sem.name.clone(),
                session: owner.session,
                order_id,
                why,
            });
        }
        sem.count = sem.count.saturating_sub(owner.count);
        let delete = sem.ephemeral && sem.is_empty();
        if let Some(session) = self.sessions.get_mut(&owner.session) {
            session.links.remove(&sem_id);
        }
        if delete {
            self.destroy_semaphore(sem_id, out);
        } else {
            self.process_queue(sem_id, true, out);
        }
    }

    /// Removes a waiter entry (TDB `DoDeleteSessionSemaphore` for waiters). Any wait cookie
    /// must already have been answered by the caller; a leftover one is dropped silently.
    fn remove_waiter(&mut self, sem_id: SemId, order_id: OrderId, out: &mut Vec<Effect>) {
        let Some(sem) = self.semaphores.get_mut(&sem_id) else {
            return;
        };
        let was_head = sem.head() == Some(order_id);
        let Some(waiter) = sem.waiters.remove(&order_id) else {
            return;
        };
        if let Some(deadline) = waiter.deadline {
            self.timers.remove(&(
                deadline,
                TimerKey::WaiterTimeout {
                    sem: sem_id,
                    order_id,
                },
            ));
        }
        if let Some(session) = self.sessions.get_mut(&waiter.session) {
            session.links.remove(&sem_id);
            session.wait_cookies.remove(&sem_id);
        }
        if was_head {
            self.process_queue(sem_id, false, out);
        }
    }

    /// Queue processing (TDB `DoProcessSemaphoreQueue`, §4.1): promote waiters from the head
    /// while they fit, answering each promoted waiter's associated acquire, then notify owner
    /// watchers if ownership changed.
    fn process_queue(&mut self, sem_id: SemId, mut owners_changed: bool, out: &mut Vec<Effect>) {
        loop {
            let Some(sem) = self.semaphores.get_mut(&sem_id) else {
                return;
            };
            let Some((&order_id, head)) = sem.waiters.first_key_value() else {
                break;
            };
            if !sem.can_acquire(head.count) {
                break;
            }
            let Some(waiter) = sem.waiters.remove(&order_id) else {
                break;
            };
            sem.count = sem.count.saturating_add(waiter.count);
            if let Some(journal) = &mut self.journal {
                journal.push(Change::Granted {
                    semaphore: sem.name.clone(),
                    session: waiter.session,
                    order_id,
                    count: waiter.count,
                    limit: sem.limit,
                });
            }
            sem.owners.insert(
                order_id,
                Owner {
                    session: waiter.session,
                    count: waiter.count,
                    data: waiter.data,
                },
            );
            if let Some(deadline) = waiter.deadline {
                self.timers.remove(&(
                    deadline,
                    TimerKey::WaiterTimeout {
                        sem: sem_id,
                        order_id,
                    },
                ));
            }
            if let Some(session) = self.sessions.get_mut(&waiter.session)
                && let Some(req_id) = session.wait_cookies.remove(&sem_id)
                && let Some(stream) = session.stream
            {
                send(out, stream, acquire_result(req_id, Outcome::OK, true));
            }
            owners_changed = true;
        }
        self.notify_watchers(sem_id, false, owners_changed, out);
    }

    /// One-shot watch notifications (TDB `NotifyWatchers`, §3.5): flags describe the event;
    /// data watchers hear data events, owner watchers owner events; each watch fires once.
    fn notify_watchers(
        &mut self,
        sem_id: SemId,
        data_changed: bool,
        owners_changed: bool,
        out: &mut Vec<Effect>,
    ) {
        let Some(sem) = self.semaphores.get_mut(&sem_id) else {
            return;
        };
        let mut recipients = Vec::new();
        if data_changed {
            for sid in std::mem::take(&mut sem.data_watchers) {
                sem.owner_watchers.remove(&sid);
                recipients.push(sid);
            }
        }
        if owners_changed {
            for sid in std::mem::take(&mut sem.owner_watchers) {
                sem.data_watchers.remove(&sid);
                recipients.push(sid);
            }
        }
        for sid in recipients {
            if let Some(session) = self.sessions.get_mut(&sid)
                && let Some(req_id) = session.watches.remove(&sem_id)
                && let Some(stream) = session.stream
            {
                send(out, stream, changed(req_id, data_changed, owners_changed));
            }
        }
    }

    /// Deletes a semaphore (TDB `DoDeleteSemaphore`): owners dropped silently, waiters'
    /// associated acquires answered ABORTED, every watcher notified `(true, true)`.
    fn destroy_semaphore(&mut self, sem_id: SemId, out: &mut Vec<Effect>) {
        let Some(sem) = self.semaphores.get_mut(&sem_id) else {
            return;
        };
        let owners = std::mem::take(&mut sem.owners);
        let waiters = std::mem::take(&mut sem.waiters);
        sem.count = 0;
        for (&order_id, owner) in &owners {
            if let Some(journal) = &mut self.journal {
                journal.push(Change::Released {
                    semaphore: sem.name.clone(),
                    session: owner.session,
                    order_id,
                    why: OwnerEnd::Deleted,
                });
            }
            if let Some(session) = self.sessions.get_mut(&owner.session) {
                session.links.remove(&sem_id);
            }
        }
        for (order_id, waiter) in waiters {
            if let Some(deadline) = waiter.deadline {
                self.timers.remove(&(
                    deadline,
                    TimerKey::WaiterTimeout {
                        sem: sem_id,
                        order_id,
                    },
                ));
            }
            if let Some(session) = self.sessions.get_mut(&waiter.session) {
                session.links.remove(&sem_id);
                if let Some(req_id) = session.wait_cookies.remove(&sem_id)
                    && let Some(stream) = session.stream
                {
                    send(
                        out,
                        stream,
                        acquire_result(
                            req_id,
                            Outcome::err(StatusCode::Aborted, "Semaphore destroyed"),
                            false,
                        ),
                    );
                }
            }
        }
        self.notify_watchers(sem_id, true, true, out);
        if let Some(sem) = self.semaphores.remove(&sem_id) {
            self.by_name.remove(&sem.name);
        }
    }

    /// `acquire_semaphore`, the decision procedure of §4.2 steps 1-10.
    fn acquire(
        &mut self,
        now: Instant,
        sid: SessionId,
        stream: StreamId,
        a: session_request::AcquireSemaphore,
        out: &mut Vec<Effect>,
    ) {
        let req_id = a.req_id;
        let reply = |out: &mut Vec<Effect>, outcome: Outcome, acquired: bool| {
            send(out, stream, acquire_result(req_id, outcome, acquired));
        };
        let bad = |out: &mut Vec<Effect>, status: StatusCode, reason: &'static str| {
            send(
                out,
                stream,
                acquire_result(req_id, Outcome::err(status, reason), false),
            );
        };
        // Steps 1-3: stateless checks.
        if a.count == 0 {
            return bad(out, StatusCode::BadRequest, "Acquire must have count > 0");
        }
        if a.timeout_millis != u64::MAX && a.timeout_millis > MAX_ACQUIRE_TIMEOUT_MILLIS {
            return bad(
                out,
                StatusCode::BadRequest,
                "Acquire timeout is out of range",
            );
        }
        if a.data.len() > MAX_SEMAPHORE_DATA {
            return bad(out, StatusCode::BadRequest, "Acquire data is too large");
        }
        // Steps 4-7.
        let sem_id = match self.semaphore_by_name(&a.name) {
            Some((id, sem)) => {
                if sem.ephemeral != a.ephemeral {
                    return bad(
                        out,
                        StatusCode::PreconditionFailed,
                        "Semaphore ephemeral mode mismatch",
                    );
                }
                if a.count > sem.limit {
                    return bad(
                        out,
                        StatusCode::BadRequest,
                        "Cannot acquire more than allowed by the semaphore",
                    );
                }
                id
            }
            None if !a.ephemeral => {
                return bad(out, StatusCode::NotFound, "Semaphore does not exist");
            }
            None => {
                if self.semaphores.len() >= MAX_SEMAPHORES {
                    return bad(
                        out,
                        StatusCode::PreconditionFailed,
                        "Too many semaphores already exist",
                    );
                }
                self.insert_semaphore(a.name.clone(), Vec::new(), u64::MAX, true)
            }
        };
        let Some(link) = self
            .sessions
            .get(&sid)
            .and_then(|s| s.links.get(&sem_id).copied())
        else {
            return self.acquire_new(now, sid, stream, sem_id, a, out);
        };
        let Some(sem) = self.semaphores.get_mut(&sem_id) else {
            return;
        };

        // Step 8: the session already owns the semaphore (§4.6).
        if let Some(owner) = sem.owners.get_mut(&link) {
            if a.count > owner.count {
                return bad(
                    out,
                    StatusCode::BadRequest,
                    "Increasing count is not allowed",
                );
            }
            if a.count == owner.count {
                let data_changed = owner.data != a.data;
                owner.data = a.data;
                reply(out, Outcome::OK, true);
                self.notify_watchers(sem_id, false, data_changed, out);
            } else {
                sem.count = sem.count.saturating_sub(owner.count - a.count);
                owner.count = a.count;
                owner.data = a.data;
                reply(out, Outcome::OK, true);
                self.process_queue(sem_id, true, out);
            }
            return;
        }

        // Step 9: the session is already waiting (§4.7).
        let is_head = sem.head() == Some(link);
        let fits = sem.can_acquire(a.count);
        let Some(waiter) = sem.waiters.get_mut(&link) else {
            return;
        };
        if a.count > waiter.count {
            return bad(
                out,
                StatusCode::BadRequest,
                "Increasing count is not allowed",
            );
        }
        let old_deadline = waiter.deadline.take();
        waiter.timeout_millis = a.timeout_millis;
        waiter.count = a.count;
        waiter.data = a.data;
        if let Some(deadline) = old_deadline {
            self.timers.remove(&(
                deadline,
                TimerKey::WaiterTimeout {
                    sem: sem_id,
                    order_id: link,
                },
            ));
        }
        if let Some(old_req) = self
            .sessions
            .get_mut(&sid)
            .and_then(|s| s.wait_cookies.remove(&sem_id))
        {
            send(
                out,
                stream,
                acquire_result(
                    old_req,
                    Outcome::err(StatusCode::Aborted, SUPERSEDED),
                    false,
                ),
            );
        }
        if a.timeout_millis == 0 && !(is_head && fits) {
            // Fold the timeout: this waiter would not be promoted right now.
            reply(out, Outcome::OK, false);
            self.remove_waiter(sem_id, link, out);
            return;
        }
        self.wait_or_promote(now, sid, sem_id, link, req_id, out);
    }

    /// §4.2 step 10: a session with no entry on the semaphore.
    fn acquire_new(
        &mut self,
        now: Instant,
        sid: SessionId,
        stream: StreamId,
        sem_id: SemId,
        a: session_request::AcquireSemaphore,
        out: &mut Vec<Effect>,
    ) {
        let Some(sem) = self.semaphores.get_mut(&sem_id) else {
            return;
        };
        if a.timeout_millis == 0 && !(sem.waiters.is_empty() && sem.can_acquire(a.count)) {
            // A failed try-lock: no state change, no order_id consumed.
            send(out, stream, acquire_result(a.req_id, Outcome::OK, false));
            return;
        }
        let order_id = self.next_order_id;
        self.next_order_id = order_id.saturating_add(1);
        sem.waiters.insert(
            order_id,
            Waiter {
                session: sid,
                count: a.count,
                data: a.data,
                timeout_millis: a.timeout_millis,
                deadline: None,
            },
        );
        if let Some(session) = self.sessions.get_mut(&sid) {
            session.links.insert(sem_id, order_id);
        }
        self.wait_or_promote(now, sid, sem_id, order_id, a.req_id, out);
    }

    /// The common tail of §4.2 steps 9 and 10: associate the request, process the queue if the
    /// waiter is at the head, then either it was promoted (its result went out through the
    /// association) or it waits: arm its timer and send `acquire_semaphore_pending`.
    fn wait_or_promote(
        &mut self,
        now: Instant,
        sid: SessionId,
        sem_id: SemId,
        order_id: OrderId,
        req_id: u64,
        out: &mut Vec<Effect>,
    ) {
        let Some(session) = self.sessions.get_mut(&sid) else {
            return;
        };
        session.wait_cookies.insert(sem_id, req_id);
        let stream = session.stream;
        let is_head = self
            .semaphores
            .get(&sem_id)
            .is_some_and(|sem| sem.head() == Some(order_id));
        if is_head {
            self.process_queue(sem_id, false, out);
        }
        let Some(waiter) = self
            .semaphores
            .get_mut(&sem_id)
            .and_then(|sem| sem.waiters.get_mut(&order_id))
        else {
            return;
        };
        waiter.deadline = if waiter.timeout_millis == u64::MAX {
            None
        } else {
            deadline_after(now, waiter.timeout_millis)
        };
        if let Some(deadline) = waiter.deadline {
            self.timers.insert((
                deadline,
                TimerKey::WaiterTimeout {
                    sem: sem_id,
                    order_id,
                },
            ));
        }
        if let Some(stream) = stream {
            send(
                out,
                stream,
                session_response::Response::AcquireSemaphorePending(
                    session_response::AcquireSemaphorePending { req_id },
                ),
            );
        }
    }

    /// `release_semaphore` (§4.5).
    fn release(
        &mut self,
        sid: SessionId,
        stream: StreamId,
        r: session_request::ReleaseSemaphore,
        out: &mut Vec<Effect>,
    ) {
        let found = self.semaphore_by_name(&r.name).and_then(|(sem_id, sem)| {
            let order_id = self.sessions.get(&sid)?.links.get(&sem_id).copied()?;
            Some((sem_id, order_id, sem.owners.contains_key(&order_id)))
        });
        match found {
            Some((sem_id, order_id, true)) => {
                send(out, stream, release_result(r.req_id, Outcome::OK, true));
                self.remove_owner(sem_id, order_id, OwnerEnd::Released, out);
            }
            Some((sem_id, order_id, false)) => {
                if let Some(old_req) = self
                    .sessions
                    .get_mut(&sid)
                    .and_then(|s| s.wait_cookies.remove(&sem_id))
                {
                    send(
                        out,
                        stream,
                        acquire_result(
                            old_req,
                            Outcome::err(StatusCode::Aborted, SUPERSEDED),
                            false,
                        ),
                    );
                }
                send(out, stream, release_result(r.req_id, Outcome::OK, true));
                self.remove_waiter(sem_id, order_id, out);
            }
            None => send(out, stream, release_result(r.req_id, Outcome::OK, false)),
        }
    }

    /// `describe_semaphore` (§3.4) and watch installation or replacement (§3.5).
    fn describe_request(
        &mut self,
        sid: SessionId,
        stream: StreamId,
        d: session_request::DescribeSemaphore,
        out: &mut Vec<Effect>,
    ) {
        let result = |outcome: Outcome, desc, watch_added| {
            let (status, issues) = outcome.parts();
            session_response::Response::DescribeSemaphoreResult(
                session_response::DescribeSemaphoreResult {
                    req_id: d.req_id,
                    status,
                    issues,
                    semaphore_description: desc,
                    watch_added,
                },
            )
        };
        let Some((sem_id, sem)) = self.semaphore_by_name(&d.name) else {
            let outcome = Outcome::err(StatusCode::NotFound, "Semaphore not found");
            send(out, stream, result(outcome, None, false));
            return;
        };
        let desc = sem.describe(d.include_owners, d.include_waiters);
        let watch = d.watch_data || d.watch_owners;
        if watch
            && let Some(sem) = self.semaphores.get_mut(&sem_id)
            && let Some(session) = self.sessions.get_mut(&sid)
        {
            let replacing = sem.data_watchers.remove(&sid) | sem.owner_watchers.remove(&sid);
            let old = session.watches.insert(sem_id, d.req_id);
            if replacing && let Some(old_req) = old {
                send(out, stream, changed(old_req, false, false));
            }
            if d.watch_data {
                sem.data_watchers.insert(sid);
            }
            if d.watch_owners {
                sem.owner_watchers.insert(sid);
            }
        }
        send(out, stream, result(Outcome::OK, Some(desc), watch));
    }

    /// `create_semaphore` (§3.1).
    fn create(
        &mut self,
        stream: StreamId,
        c: session_request::CreateSemaphore,
        out: &mut Vec<Effect>,
    ) {
        let outcome = if c.limit == 0 {
            Outcome::err(StatusCode::BadRequest, "Semaphores must have limit > 0")
        } else if c.name.len() > MAX_SEMAPHORE_NAME {
            Outcome::err(StatusCode::BadRequest, "Semaphore name is too long")
        } else if c.data.len() > MAX_SEMAPHORE_DATA {
            Outcome::err(StatusCode::BadRequest, "Semaphore data is too large")
        } else if let Some((_, sem)) = self.semaphore_by_name(&c.name) {
            if sem.ephemeral {
                Outcome::err(
                    StatusCode::PreconditionFailed,
                    "Cannot create semaphore due to ephemeral locks",
                )
            } else {
                Outcome::err(StatusCode::AlreadyExists, "Semaphore already exists")
            }
        } else if self.semaphores.len() >= MAX_SEMAPHORES {
            Outcome::err(
                StatusCode::PreconditionFailed,
                "Too many semaphores already exist",
            )
        } else {
            self.insert_semaphore(c.name, c.data, c.limit, false);
            Outcome::OK
        };
        let (status, issues) = outcome.parts();
        send(
            out,
            stream,
            session_response::Response::CreateSemaphoreResult(
                session_response::CreateSemaphoreResult {
                    req_id: c.req_id,
                    status,
                    issues,
                },
            ),
        );
    }

    fn insert_semaphore(
        &mut self,
        name: String,
        data: Vec<u8>,
        limit: u64,
        ephemeral: bool,
    ) -> SemId {
        let id = self.next_semaphore_id;
        self.next_semaphore_id = id.saturating_add(1);
        self.by_name.insert(name.clone(), id);
        self.semaphores.insert(
            id,
            Semaphore {
                name,
                data,
                limit,
                count: 0,
                ephemeral,
                owners: BTreeMap::new(),
                waiters: BTreeMap::new(),
                data_watchers: BTreeSet::new(),
                owner_watchers: BTreeSet::new(),
            },
        );
        id
    }

    /// `update_semaphore` (§3.2). Oversized data is rejected without being applied (the
    /// recommended deviation from the real server's missing early return).
    fn update(
        &mut self,
        stream: StreamId,
        u: session_request::UpdateSemaphore,
        out: &mut Vec<Effect>,
    ) {
        let reply = |out: &mut Vec<Effect>, outcome: Outcome| {
            let (status, issues) = outcome.parts();
            send(
                out,
                stream,
                session_response::Response::UpdateSemaphoreResult(
                    session_response::UpdateSemaphoreResult {
                        req_id: u.req_id,
                        status,
                        issues,
                    },
                ),
            );
        };
        if u.name.len() > MAX_SEMAPHORE_NAME {
            return reply(
                out,
                Outcome::err(StatusCode::BadRequest, "Semaphore name is too long"),
            );
        }
        if u.data.len() > MAX_SEMAPHORE_DATA {
            return reply(
                out,
                Outcome::err(StatusCode::BadRequest, "Semaphore data is too large"),
            );
        }
        let Some(sem_id) = self.by_name.get(&u.name).copied() else {
            return reply(
                out,
                Outcome::err(StatusCode::NotFound, "Semaphore does not exist"),
            );
        };
        let Some(sem) = self.semaphores.get_mut(&sem_id) else {
            return;
        };
        let data_changed = sem.data != u.data;
        if data_changed {
            sem.data = u.data;
        }
        reply(out, Outcome::OK);
        self.notify_watchers(sem_id, data_changed, false, out);
    }

    /// `delete_semaphore` (§3.3): aborts and notifications precede the result.
    fn delete(
        &mut self,
        stream: StreamId,
        d: session_request::DeleteSemaphore,
        out: &mut Vec<Effect>,
    ) {
        let outcome = match self.semaphore_by_name(&d.name) {
            None => Outcome::err(StatusCode::NotFound, "Semaphore does not exist"),
            Some((_, sem)) if sem.ephemeral => Outcome::err(
                StatusCode::PreconditionFailed,
                "Cannot delete ephemeral semaphores",
            ),
            Some((_, sem)) if !sem.is_empty() && !d.force => {
                Outcome::err(StatusCode::PreconditionFailed, "Semaphore not empty")
            }
            Some((sem_id, _)) => {
                self.destroy_semaphore(sem_id, out);
                Outcome::OK
            }
        };
        let (status, issues) = outcome.parts();
        send(
            out,
            stream,
            session_response::Response::DeleteSemaphoreResult(
                session_response::DeleteSemaphoreResult {
                    req_id: d.req_id,
                    status,
                    issues,
                },
            ),
        );
    }
}

/// Introspection for tests and the service shell (the shell may not need every method).
#[allow(dead_code)]
impl NodeState {
    /// Ids of all live sessions, ascending.
    pub fn session_ids(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self.sessions.keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    /// Names of all semaphores (persistent and ephemeral), sorted.
    pub fn semaphore_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.by_name.keys().cloned().collect();
        names.sort_unstable();
        names
    }

    /// A semaphore as `describe_semaphore` with owners and waiters would show it.
    pub(crate) fn describe(&self, name: &str) -> Option<SemaphoreDescriptionProto> {
        self.semaphore_by_name(name)
            .map(|(_, sem)| sem.describe(true, true))
    }

    /// The session a stream is bound to, if any.
    pub(crate) fn stream_session(&self, stream: StreamId) -> Option<u64> {
        self.streams.get(&stream).copied()
    }

    /// The stream a session is bound to, if the session exists and is attached.
    pub(crate) fn session_stream(&self, session_id: u64) -> Option<StreamId> {
        self.sessions.get(&session_id).and_then(|s| s.stream)
    }

    /// The expiry deadline of a detached session, if any.
    pub(crate) fn session_expiry(&self, session_id: u64) -> Option<Instant> {
        self.sessions.get(&session_id).and_then(|s| s.expiry)
    }
}
