//! Acquires, leases and releases: the per-name queue and the fencing-token handshake.
//!
//! The server keeps one entry per session and semaphore, so a second acquire of a name this
//! session holds or is acquiring waits here, locally, until the first ends. Each acquire is
//! followed on the wire by a describe of the semaphore's owners, which for an immediate grant
//! shows our `order_id` (the fencing token) at no extra round trip. An acquire the server
//! queues learns its order id one of two ways (`hints.rs` says which, per name): where the
//! session saw the name's queue short lately, from its waiter entry while it waits (the server
//! keeps a waiter's order id when it promotes it to owner), read by the describe behind the
//! acquire itself, so the wait and the grant send nothing more unless that describe came
//! back without us (then the pending answer reads the waiters once more); elsewhere from a
//! describe of the owners after the grant, which costs a round trip but is bounded by the
//! semaphore's limit, not its queue. A resend after a reattach
//! may meet a server that dropped the waiter meanwhile and queues a new one under a new
//! order id, so what a waiter learnt of its order id is forgotten at every replay.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::held::Held;
use super::pending::Replay;
use super::{AcquireCmd, Answer, CallerId, Effect, Grant, Kind, SessionCore, millis};
use crate::clock::later;
use crate::config::AcquireOptions;
use crate::error::{Error, ErrorKind, Result};
use crate::proto::{StatusCode, session_request as rq, session_response as rs};

/// An acquire the server is working on.
#[derive(Debug)]
pub(super) struct Active {
    pub(super) cmd: AcquireCmd,
    deadline: Option<Instant>,
    acquire_req: u64,
    /// The describe of the owners alone in flight (behind the acquire, or after the grant).
    describe_req: Option<u64>,
    /// The describe of the owners and the waiters in flight (behind the acquire, or after
    /// the server queued it).
    waiter_req: Option<u64>,
    /// When the server's grant arrived (the order id may come a round trip later).
    granted: Option<Instant>,
    order_id: Option<u64>,
    /// A describe after the grant was sent (the first one saw us still waiting).
    confirming: bool,
    /// The server answered `acquire_semaphore_pending`.
    pub(super) queued: bool,
    /// The largest owner's order id the describe behind the acquire showed (we were not
    /// among them): with our order id, a bound on the queue that was ahead of us.
    floor: Option<u64>,
    /// The waiter list was read: it showed this many waiters ahead of ours.
    ahead: Option<u64>,
    /// The last describe behind the acquire failed, with this error.
    describe_failed: Option<Error>,
}

/// An acquire waiting locally behind another lease of the same name in this session.
#[derive(Debug)]
pub(super) struct LocalWaiter {
    pub(super) cmd: AcquireCmd,
    deadline: Option<Instant>,
}

/// Everything this session does with one semaphore name. Kept small, since a session may
/// hold many leases: a held name is one pointer to the lease's record, and what only an
/// acquire in progress needs lives behind one box.
#[derive(Debug, Default)]
pub(super) struct NameState {
    /// Shared with the lease's handle.
    pub(super) holding: Option<Arc<Held>>,
    work: Option<Box<Work>>,
}

/// The acquire the server is working on for one name, and the ones waiting locally behind
/// it in arrival order (allocated only while there are any).
#[derive(Debug, Default)]
struct Work {
    active: Option<Active>,
    queue: VecDeque<LocalWaiter>,
}

impl NameState {
    fn is_idle(&self) -> bool {
        self.holding.is_none() && self.work.is_none()
    }

    /// The acquire the server is working on.
    pub(super) fn active(&self) -> Option<&Active> {
        self.work.as_ref()?.active.as_ref()
    }

    fn active_mut(&mut self) -> Option<&mut Active> {
        self.work.as_mut()?.active.as_mut()
    }

    fn set_active(&mut self, active: Active) {
        self.work.get_or_insert_default().active = Some(active);
    }

    fn take_active(&mut self) -> Option<Active> {
        let active = self.work.as_mut()?.active.take();
        self.tidy();
        active
    }

    fn push_waiter(&mut self, waiter: LocalWaiter) {
        self.work.get_or_insert_default().queue.push_back(waiter);
    }

    fn pop_waiter(&mut self) -> Option<LocalWaiter> {
        let first = self.work.as_mut()?.queue.pop_front();
        self.tidy();
        first
    }

    /// Removes the local waiter of `caller`.
    fn remove_waiter(&mut self, caller: CallerId) -> Option<LocalWaiter> {
        let queue = &mut self.work.as_mut()?.queue;
        let pos = queue.iter().position(|w| w.cmd.caller == caller)?;
        let waiter = queue.remove(pos);
        self.tidy();
        waiter
    }

    /// The acquires waiting locally, in arrival order.
    pub(super) fn waiters(&self) -> impl Iterator<Item = &LocalWaiter> {
        self.work.iter().flat_map(|w| w.queue.iter())
    }

    fn take_waiters(&mut self) -> VecDeque<LocalWaiter> {
        let queue = self
            .work
            .as_mut()
            .map(|w| std::mem::take(&mut w.queue))
            .unwrap_or_default();
        self.tidy();
        queue
    }

    /// The acquire in progress and the local waiters, for a session that ends.
    pub(super) fn into_acquires(self) -> (Option<Active>, VecDeque<LocalWaiter>) {
        match self.work {
            Some(work) => (work.active, work.queue),
            None => (None, VecDeque::new()),
        }
    }

    /// Frees the box once nothing is in it.
    fn tidy(&mut self) {
        if self
            .work
            .as_ref()
            .is_some_and(|w| w.active.is_none() && w.queue.is_empty())
        {
            self.work = None;
        }
    }
}

fn remaining_millis(opts: &AcquireOptions, deadline: Option<Instant>, now: Instant) -> u64 {
    match deadline {
        None => opts.timeout_millis(),
        Some(d) => millis(d.saturating_duration_since(now)),
    }
}

impl SessionCore {
    pub(super) fn on_acquire(&mut self, now: Instant, cmd: AcquireCmd) {
        let deadline = cmd.opts.get_timeout().map(|t| later(now, t));
        let state = self.names.entry(cmd.name.clone()).or_default();
        if state.holding.is_some() || state.active().is_some() {
            // One entry per session and semaphore on the server: wait locally.
            if cmd.opts.get_timeout() == Some(Duration::ZERO) {
                self.answer(cmd.caller, Answer::Acquire(Ok(None)));
                return;
            }
            if let Some(at) = deadline {
                self.queue_deadlines
                    .insert((at, cmd.caller), cmd.name.clone());
            }
            state.push_waiter(LocalWaiter { cmd, deadline });
            return;
        }
        self.activate(now, cmd, deadline);
    }

    fn activate(&mut self, now: Instant, cmd: AcquireCmd, deadline: Option<Instant>) {
        let name = cmd.name.clone();
        let caller = cmd.caller;
        let timeout_millis = remaining_millis(&cmd.opts, deadline, now);
        let acquire_req = self.submit(
            now,
            Kind::Acquire {
                name: name.clone(),
                caller,
            },
            Replay::Resend,
            |req_id| acquire_request(req_id, &name, &cmd.opts, timeout_millis),
        );
        // Pipelined right behind the acquire: for an immediate grant it shows our order_id
        // (the fencing token) at no extra round trip. Where the name's queue was short
        // lately (and the acquire may wait), it reads the waiters too: a queued acquire
        // then finds its order id in the same answer, and sends nothing more for it. An
        // unfenced acquire reads nothing: the grant alone completes it.
        let may_wait = cmd.opts.get_timeout() != Some(Duration::ZERO);
        let waiters = may_wait && self.hints.reads_waiters(&name, now);
        let (describe_req, waiter_req, order_id) = if !cmd.opts.fenced {
            (None, None, Some(0))
        } else {
            let describe_req = self.submit_owners_describe(now, &name, caller, waiters);
            if waiters {
                (None, Some(describe_req), None)
            } else {
                (Some(describe_req), None, None)
            }
        };
        let active = Active {
            cmd,
            deadline,
            acquire_req,
            describe_req,
            waiter_req,
            granted: None,
            order_id,
            confirming: false,
            queued: false,
            floor: None,
            ahead: None,
            describe_failed: None,
        };
        if let Some(at) = active.client_deadline() {
            self.active_deadlines.insert((at, caller), name.clone());
        }
        let state = self.names.entry(name).or_default();
        state.set_active(active);
    }

    /// A describe for the acquire of `caller`: of the owners, and with `waiters` (the
    /// acquire may wait, and the hints say the queue is short) of the waiters too.
    fn submit_owners_describe(
        &mut self,
        now: Instant,
        name: &Arc<str>,
        caller: CallerId,
        waiters: bool,
    ) -> u64 {
        let n = name.to_string();
        let kind = Kind::AcquireDescribe {
            name: name.clone(),
            caller,
            waiters,
        };
        self.submit(now, kind, Replay::Resend, |req_id| {
            owners_describe(req_id, n, waiters)
        })
    }

    pub(super) fn active_mut(&mut self, name: &str, caller: CallerId) -> Option<&mut Active> {
        self.names
            .get_mut(name)
            .and_then(|s| s.active_mut())
            .filter(|a| a.cmd.caller == caller)
    }

    pub(super) fn on_acquire_pending(&mut self, now: Instant, req_id: u64) {
        let Some(super::pending::Entry {
            kind: Kind::Acquire { name, caller },
            sent_at,
            ..
        }) = self.pending.get(req_id)
        else {
            return;
        };
        let (name, caller, sent_at) = (name.clone(), *caller, *sent_at);
        // The server says at once that the acquire waits: a sample of the round trip (the
        // grant or the timeout that ends the wait is not one).
        if let Some(sent) = sent_at {
            self.live.on_confirmed(sent, now);
        }
        let Some(active) = self.active_mut(&name, caller) else {
            return;
        };
        if std::mem::replace(&mut active.queued, true) {
            return;
        }
        // The describe behind the acquire reads the waiters, or it showed us already.
        let known = active.waiter_req.is_some() || active.order_id.is_some();
        self.metrics.queued(&name, 1.0);
        self.out.push(Effect::Queued(caller));
        if known {
            return;
        }
        if !self.hints.reads_waiters(&name, now) {
            return; // the order id comes from the owners after the grant
        }
        // The describe behind the acquire came back without us, or it did not read the
        // waiters though the hints now say the queue is short (only a hint set from outside,
        // as the simulator sets it, flips that way): read our order id from our waiter entry
        // while we wait, so the grant needs no describe after it.
        let req = self.submit_owners_describe(now, &name, caller, true);
        if let Some(active) = self.active_mut(&name, caller) {
            active.waiter_req = Some(req);
        }
    }

    pub(super) fn on_acquire_result(&mut self, now: Instant, r: rs::AcquireSemaphoreResult) {
        let kind = self.take_answer(now, r.req_id, |k| {
            matches!(k, Kind::Acquire { .. } | Kind::SetData { .. })
        });
        let (name, caller) = match kind {
            Some(Kind::Acquire { name, caller }) => (name, caller),
            Some(Kind::SetData {
                caller,
                name,
                check,
            }) => {
                self.on_set_data_result(&name, caller, check, &r);
                return;
            }
            _ => return,
        };
        if self.active_mut(&name, caller).is_none() {
            return;
        }
        if r.status != StatusCode::Success as i32 {
            let err = Error::from_ydb(r.status, &r.issues, &format!("acquire semaphore {name:?}"));
            self.end_active(now, &name, Err(err), false);
        } else if !r.acquired {
            self.end_active(now, &name, Ok(None), false);
        } else {
            let deadline = self.active_mut(&name, caller).and_then(|active| {
                let at = active.client_deadline();
                active.granted = Some(now);
                at
            });
            if let Some(at) = deadline {
                self.active_deadlines.remove(&(at, caller));
            }
            self.try_complete(now, &name);
        }
    }

    /// The owners describe behind an acquire was answered.
    pub(super) fn on_acquire_describe(
        &mut self,
        now: Instant,
        name: &str,
        caller: CallerId,
        req_id: u64,
        seen: super::Seen,
    ) {
        let Some(active) = self.active_mut(name, caller) else {
            return;
        };
        if active.describe_req == Some(req_id) {
            active.describe_req = None;
        }
        if active.waiter_req == Some(req_id) {
            active.waiter_req = None;
        }
        active.describe_failed = seen.failed;
        if seen.order_id.is_some() {
            active.order_id = seen.order_id;
        }
        if active.floor.is_none() {
            active.floor = seen.floor;
        }
        if let Some(ahead) = seen.ahead {
            active.ahead = Some(ahead);
            self.hints.learn(name, ahead, now);
        }
        self.try_complete(now, name);
    }

    /// Finishes the active acquire of `name` once both the grant and our order_id are known.
    fn try_complete(&mut self, now: Instant, name: &str) {
        let Some(active) = self.names.get_mut(name).and_then(|s| s.active_mut()) else {
            return;
        };
        let describing = active.describe_req.is_some() || active.waiter_req.is_some();
        if active.granted.is_none() || (active.order_id.is_none() && describing) {
            return; // the grant, or the describe that shows our order id, is on the way
        }
        let Some(order_id) = active.order_id else {
            if active.confirming {
                // The grant happened, yet a describe right after it does not list us:
                // ownership already ended (force delete), or the describe failed and
                // showed nothing (the caller hears its error). A release gives back what
                // the server may still hold for us (after a force delete it finds nothing,
                // and does nothing).
                let err = active.describe_failed.take().unwrap_or_else(|| {
                    Error::new(
                        ErrorKind::Aborted,
                        format!("semaphore {name:?}: ownership ended before it could be confirmed"),
                    )
                });
                self.end_active(now, name, Err(err), true);
                return;
            }
            active.confirming = true;
            let (name, caller) = (active.cmd.name.clone(), active.cmd.caller);
            let req = self.submit_owners_describe(now, &name, caller, false);
            let name = &*name;
            if let Some(active) = self.active_mut(name, caller) {
                active.describe_req = Some(req);
            }
            return;
        };
        let Some(active) = self.take_active(name) else {
            return;
        };
        if let (true, None, Some(floor)) = (active.queued, active.ahead, active.floor) {
            self.hints
                .learn(name, super::hints::waiters_ahead(floor, order_id), now);
        }
        // The lease counts from the server's grant, not from the describe that showed the
        // order id a round trip later.
        let granted_at = active.granted.unwrap_or(now);
        let lease = self.next_lease;
        self.next_lease += 1;
        let held = Held::new(
            lease,
            active.cmd.name.clone(),
            active.cmd.opts.count,
            order_id,
            granted_at,
            active.cmd.opts.ephemeral,
        );
        let held = Arc::new(if active.cmd.opts.fenced {
            held
        } else {
            held.unfenced()
        });
        let state = self.names.entry(active.cmd.name.clone()).or_default();
        state.holding = Some(held.clone());
        let waited = granted_at.saturating_duration_since(active.cmd.requested_at);
        self.metrics.acquire_ended(name, "acquired", waited);
        tracing::debug!(
            semaphore = name,
            count = active.cmd.opts.count,
            ephemeral = active.cmd.opts.ephemeral,
            fencing_token = order_id,
            ?waited,
            "acquired"
        );
        let grant = Grant { held };
        // If the caller went away at the last moment, the driver calls `grant_refused`.
        self.answer(active.cmd.caller, Answer::Acquire(Ok(Some(grant))));
    }

    /// Ends the active acquire of `name` and starts the next local waiter. With `withdraw`,
    /// the server's view is unknown (it may have queued or granted the request), so a
    /// release is sent to be sure.
    pub(super) fn end_active(
        &mut self,
        now: Instant,
        name: &str,
        result: Result<Option<Grant>>,
        withdraw: bool,
    ) {
        let Some(active) = self.take_active(name) else {
            return;
        };
        let outcome = match &result {
            Ok(Some(_)) => "acquired",
            Ok(None) => "timed_out",
            Err(e) if e.kind() == ErrorKind::Cancelled => "cancelled",
            Err(_) => "error",
        };
        let waited = now.saturating_duration_since(active.cmd.requested_at);
        self.metrics.acquire_ended(name, outcome, waited);
        tracing::debug!(semaphore = name, outcome, ?waited, "acquire ended");
        let acquire = self.pending.remove(active.acquire_req);
        for req in [active.describe_req, active.waiter_req]
            .into_iter()
            .flatten()
        {
            self.pending.remove(req);
        }
        let sent = active.granted.is_some() || acquire.is_none_or(|e| e.sent_at.is_some());
        if withdraw && sent {
            self.submit_release(now, active.cmd.name.clone(), None);
        }
        self.answer(active.cmd.caller, Answer::Acquire(result));
        self.next_in_line(now, name);
    }

    /// Removes the active acquire of `name`, keeping the queued gauge right.
    fn take_active(&mut self, name: &str) -> Option<Active> {
        let active = self.names.get_mut(name).and_then(|s| s.take_active())?;
        if let Some(at) = active.client_deadline() {
            self.active_deadlines.remove(&(at, active.cmd.caller));
        }
        if active.queued {
            self.metrics.queued(name, -1.0);
        }
        Some(active)
    }

    pub(super) fn submit_release(
        &mut self,
        now: Instant,
        name: Arc<str>,
        caller: Option<CallerId>,
    ) {
        let kind = Kind::Release {
            name: name.clone(),
            caller,
            resent: false,
        };
        self.submit(now, kind, Replay::Resend, |req_id| {
            release_request(req_id, &name)
        });
    }

    pub(super) fn next_in_line(&mut self, now: Instant, name: &str) {
        loop {
            let Some(state) = self.names.get_mut(name) else {
                return;
            };
            if state.holding.is_some() || state.active().is_some() {
                return;
            }
            let Some(q) = state.pop_waiter() else {
                if state.is_idle() {
                    self.names.remove(name);
                }
                return;
            };
            if let Some(at) = q.deadline {
                self.queue_deadlines.remove(&(at, q.cmd.caller));
            }
            if q.deadline.is_some_and(|d| d <= now) {
                let waited = now.saturating_duration_since(q.cmd.requested_at);
                self.metrics.acquire_ended(name, "timed_out", waited);
                self.answer(q.cmd.caller, Answer::Acquire(Ok(None)));
                continue;
            }
            self.activate(now, q.cmd, q.deadline);
            return;
        }
    }

    pub(super) fn release(
        &mut self,
        now: Instant,
        name: Arc<str>,
        lease: u64,
        caller: Option<CallerId>,
    ) {
        let held = self
            .names
            .get(&*name)
            .and_then(|s| s.holding.as_ref())
            .map(|h| h.lease());
        if held != Some(lease) {
            if let Some(caller) = caller {
                self.answer(caller, Answer::Release(Ok(false)));
            }
            return;
        }
        if let Some(h) = self.names.get_mut(&*name).and_then(|s| s.holding.take()) {
            h.end();
            let held_for = now.saturating_duration_since(h.since);
            self.metrics.lease_ended(&name, held_for, None);
            tracing::debug!(
                semaphore = &*name,
                fencing_token = h.order_id,
                ?held_for,
                "released"
            );
        }
        self.unguard(now, &name);
        self.submit_release(now, name.clone(), caller);
        self.next_in_line(now, &name);
    }

    pub(super) fn on_release_result(&mut self, now: Instant, r: rs::ReleaseSemaphoreResult) {
        let Some(Kind::Release {
            caller: Some(caller),
            resent,
            ..
        }) = self.take_answer(now, r.req_id, |k| matches!(k, Kind::Release { .. }))
        else {
            return;
        };
        let result = if r.status == StatusCode::Success as i32 {
            // The lease was held until this release was asked for, and the session
            // survived the reattach: "not held" on a resend means the first copy did the
            // work.
            Ok(r.released || resent)
        } else {
            Err(Error::from_ydb(r.status, &r.issues, "release semaphore"))
        };
        self.answer(caller, Answer::Release(result));
    }

    pub(super) fn cancel_acquire(&mut self, now: Instant, name: &str, caller: CallerId) {
        let Some(state) = self.names.get_mut(name) else {
            return;
        };
        if let Some(q) = state.remove_waiter(caller) {
            if let Some(at) = q.deadline {
                self.queue_deadlines.remove(&(at, caller));
            }
            let waited = now.saturating_duration_since(q.cmd.requested_at);
            self.metrics.acquire_ended(name, "cancelled", waited);
            if self.names.get(name).is_some_and(NameState::is_idle) {
                self.names.remove(name);
            }
            return;
        }
        if state.active().is_none_or(|a| a.cmd.caller != caller) {
            return;
        }
        // Withdraw the waiter (or give back a grant nobody will take).
        let cancelled = Error::new(ErrorKind::Cancelled, "the acquire was dropped");
        self.end_active(now, name, Err(cancelled), true);
    }

    /// Local waiters whose timeout passed.
    pub(super) fn expire_queued(&mut self, now: Instant) {
        while let Some(((at, caller), name)) = self
            .queue_deadlines
            .first_key_value()
            .map(|(k, v)| (*k, v.clone()))
        {
            if at > now {
                break;
            }
            self.queue_deadlines.remove(&(at, caller));
            if let Some(state) = self.names.get_mut(&name)
                && let Some(q) = state.remove_waiter(caller)
            {
                let waited = now.saturating_duration_since(q.cmd.requested_at);
                self.metrics.acquire_ended(&name, "timed_out", waited);
                self.answer(caller, Answer::Acquire(Ok(None)));
            }
        }
    }

    /// How long past its deadline an acquire the server is working on may go unanswered:
    /// the latest round trip and a moment ([`crate::bound`], the rule of every bounded
    /// call), since the server times the waiter out at the same deadline counted from its
    /// receipt and its answer then travels back; a stream down at the deadline may be back
    /// within it.
    fn acquire_grace(&self) -> Duration {
        crate::bound::grace(self.live.round_trip())
    }

    /// When the client answers an acquire's timeout itself (see
    /// [`SessionCore::expire_unanswered_acquires`]).
    pub(super) fn earliest_active_deadline(&self) -> Option<Instant> {
        let ((at, _), _) = self.active_deadlines.first_key_value()?;
        Some(later(*at, self.acquire_grace()))
    }

    /// A stream that is down (or stalled, not yet known dead) cannot bring the server's
    /// answer to an acquire's timeout, so the caller hears from here that the node did not
    /// answer ([`ErrorKind::Unavailable`], never "not acquired"); the waiter is
    /// withdrawn (after the reattach, if the stream is down). A try (timeout zero) is no
    /// exception: its deadline is its request's time.
    pub(super) fn expire_unanswered_acquires(&mut self, now: Instant) {
        let grace = self.acquire_grace();
        while let Some(((at, caller), name)) = self
            .active_deadlines
            .first_key_value()
            .map(|(k, v)| (*k, v.clone()))
        {
            if later(at, grace) > now {
                break;
            }
            self.active_deadlines.remove(&(at, caller));
            if self.active_mut(&name, caller).is_some() {
                // Not "not acquired": the server said nothing, and the lock may be free.
                let unanswered = Error::new(
                    ErrorKind::Unavailable,
                    format!(
                        "the coordination node did not answer the acquire of semaphore {name:?} by its deadline; check that the node is reachable"
                    ),
                );
                self.end_active(now, &name, Err(unanswered), true);
            }
        }
    }

    /// Answers every acquire in progress or queued locally with `err`. What the server
    /// may still grant is released by the stop that follows.
    pub(super) fn fail_acquires(&mut self, now: Instant, err: &Error) {
        let names: Vec<Arc<str>> = self.names.keys().cloned().collect();
        for name in names {
            let queue = self
                .names
                .get_mut(&name)
                .map(NameState::take_waiters)
                .unwrap_or_default();
            for q in queue {
                if let Some(at) = q.deadline {
                    self.queue_deadlines.remove(&(at, q.cmd.caller));
                }
                let waited = now.saturating_duration_since(q.cmd.requested_at);
                self.metrics.acquire_ended(&name, "error", waited);
                self.answer(q.cmd.caller, Answer::Acquire(Err(err.clone())));
            }
            if let Some(active) = self.take_active(&name) {
                self.pending.remove(active.acquire_req);
                for req in [active.describe_req, active.waiter_req]
                    .into_iter()
                    .flatten()
                {
                    self.pending.remove(req);
                }
                let waited = now.saturating_duration_since(active.cmd.requested_at);
                self.metrics.acquire_ended(&name, "error", waited);
                self.answer(active.cmd.caller, Answer::Acquire(Err(err.clone())));
            }
            if self.names.get(&name).is_some_and(NameState::is_idle) {
                self.names.remove(&name);
            }
        }
    }

    /// After a replay: an acquire still waiting (one of `resent`, the acquires sent again)
    /// was sent again, and the server may have
    /// dropped its waiter meanwhile (its timer runs while the session is detached) and
    /// queued a new one under a new order id. What a describe showed before the reattach is
    /// forgotten; where the waiter list is read, a describe behind the resend reads it
    /// again, elsewhere the owners after the grant show it.
    pub(super) fn reread_waiting_order_ids(
        &mut self,
        now: Instant,
        resent: Vec<(Arc<str>, CallerId)>,
    ) {
        let mut stale = Vec::new();
        for (name, caller) in resent {
            let reads = self.hints.reads_waiters(&name, now);
            let Some(active) = self.active_mut(&name, caller) else {
                continue;
            };
            if active.granted.is_some() || !active.cmd.opts.fenced {
                continue;
            }
            active.order_id = None;
            active.ahead = None;
            let describing = active.describe_req.is_some() || active.waiter_req.is_some();
            if !describing && active.queued && reads {
                stale.push((name, caller));
            }
        }
        for (name, caller) in stale {
            let req = self.submit_owners_describe(now, &name, caller, true);
            if let Some(active) = self.active_mut(&name, caller) {
                active.waiter_req = Some(req);
            }
        }
    }

    /// The time left of an acquire about to be sent again after a reattach.
    pub(super) fn acquire_millis_left(
        &mut self,
        name: &str,
        caller: CallerId,
        now: Instant,
    ) -> Option<u64> {
        self.active_mut(name, caller)
            .map(|a| remaining_millis(&a.cmd.opts, a.deadline, now))
    }
}

impl Active {
    /// The deadline the client enforces itself until the server grants (see
    /// `expire_unanswered_acquires`).
    fn client_deadline(&self) -> Option<Instant> {
        self.deadline.filter(|_| self.granted.is_none())
    }
}

pub(super) fn not_held(name: &str) -> Error {
    Error::new(
        ErrorKind::Aborted,
        format!("semaphore {name:?} is no longer held"),
    )
}

fn release_request(req_id: u64, name: &str) -> rq::Request {
    rq::Request::ReleaseSemaphore(rq::ReleaseSemaphore {
        req_id,
        name: name.to_string(),
    })
}

fn acquire_request(
    req_id: u64,
    name: &str,
    opts: &AcquireOptions,
    timeout_millis: u64,
) -> rq::Request {
    rq::Request::AcquireSemaphore(rq::AcquireSemaphore {
        req_id,
        name: name.to_string(),
        timeout_millis,
        count: opts.count,
        data: opts.data.clone(),
        ephemeral: opts.ephemeral,
    })
}

impl SessionCore {
    /// Builds again a request of the acquire path written before (those are not kept after
    /// their first write): the acquire with the time it has left, the describe behind it, a
    /// release. `None` for any other kind, which the pending table keeps.
    pub(super) fn rebuild(&mut self, now: Instant, req_id: u64) -> Option<rq::Request> {
        match &self.pending.get(req_id)?.kind {
            Kind::Acquire { name, caller } => {
                let (name, caller) = (name.clone(), *caller);
                let left = self.acquire_millis_left(&name, caller, now)?;
                let active = self.active_mut(&name, caller)?;
                Some(acquire_request(req_id, &name, &active.cmd.opts, left))
            }
            Kind::AcquireDescribe { name, waiters, .. } => {
                Some(owners_describe(req_id, name.to_string(), *waiters))
            }
            Kind::Release { name, .. } => Some(release_request(req_id, name)),
            _ => None,
        }
    }
}

/// A describe of a semaphore's owners, and with `waiters` its waiters too (no watch).
pub(super) fn owners_describe(req_id: u64, name: String, waiters: bool) -> rq::Request {
    rq::Request::DescribeSemaphore(rq::DescribeSemaphore {
        req_id,
        name,
        include_owners: true,
        include_waiters: waiters,
        watch_data: false,
        watch_owners: false,
    })
}
