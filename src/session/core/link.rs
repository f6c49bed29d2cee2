//! The stream's life: pings and the stream-dead check, losing the stream, reattaching
//! (dial, backoff, replay) and closing.

use tokio::time::Instant;

use super::liveness::Liveness;
use super::{CallerId, Effect, Kind, SessionCore, closed, millis};
use crate::clock::later;
use crate::error::{Error, ErrorKind};
use crate::proto::{session_request as rq, session_response as rs};
use crate::session::state::SessionState;

/// How many unanswered pings are remembered (older ones can no longer confirm anything
/// the newer ones would not).
const MAX_PINGS_IN_FLIGHT: usize = 64;

/// The stream as the core sees it.
#[derive(Debug)]
pub(super) enum Link {
    /// A stream is attached.
    Up,
    /// No stream: reattaching.
    Down {
        since: Instant,
        attempt: u32,
        /// When the next attempt may start.
        retry_at: Instant,
        /// An attempt is in progress (a `Dial` effect was given and not yet answered).
        dialing: bool,
    },
    /// The session ended.
    Ended,
}

impl Link {
    pub(super) fn is_up(&self) -> bool {
        matches!(self, Link::Up)
    }

    fn down(now: Instant) -> Self {
        Link::Down {
            since: now,
            attempt: 0,
            retry_at: now,
            dialing: false,
        }
    }

    /// When the link itself needs attention.
    pub(super) fn next_wake(&self, live: &Liveness) -> Option<Instant> {
        match self {
            Link::Up => Some(live.next_check()),
            Link::Down {
                retry_at,
                dialing: false,
                ..
            } => Some(*retry_at),
            Link::Down { .. } | Link::Ended => None,
        }
    }
}

impl SessionCore {
    pub(super) fn on_pong(&mut self, now: Instant, opaque: u64) {
        while let Some((sent_opaque, sent)) = self.pings.front().copied() {
            if sent_opaque > opaque {
                break;
            }
            self.pings.pop_front();
            if sent_opaque == opaque {
                self.live.on_confirmed(sent, now);
            }
        }
    }

    pub(super) fn on_failure(&mut self, now: Instant, f: rs::Failure) {
        let err = Error::from_ydb(f.status, &f.issues, "session");
        if self.closing.is_some() {
            self.finish(now, SessionState::Closed, closed());
        } else if err.ends_session() {
            let kind = ErrorKind::from_status(
                err.status()
                    .unwrap_or(crate::error::StatusCode::SessionExpired),
            );
            let msg = format!("session {} ended by the server: {err}", self.session_id());
            self.finish(
                now,
                SessionState::Expired,
                Error::caused_by(kind, msg, &err),
            );
        } else {
            self.stream_lost(now, &err);
        }
    }

    /// The link part of a tick: the dead check and pings while up, the next attempt while
    /// down.
    pub(super) fn tick_link(&mut self, now: Instant) {
        match &mut self.link {
            Link::Up => {
                if self.live.stream_dead(now) {
                    let err = Error::new(
                        ErrorKind::Transport,
                        "no message from the server for two ping intervals",
                    );
                    self.stream_lost(now, &err);
                } else if self.live.ping_due(now) {
                    let opaque = self.next_opaque;
                    self.next_opaque += 1;
                    self.pings.push_back((opaque, now));
                    if self.pings.len() > MAX_PINGS_IN_FLIGHT {
                        self.pings.pop_front();
                    }
                    self.live.on_ping_sent(now);
                    self.send_raw(rq::Request::Ping(rq::PingPong { opaque }));
                }
            }
            Link::Down {
                retry_at,
                dialing,
                attempt,
                ..
            } => {
                if *dialing || *retry_at > now {
                    return;
                }
                *dialing = true;
                *attempt += 1;
                self.cfg.seq_no += 1;
                let mut limit = (self.cfg.options.get_ping_interval() * 2)
                    .min(self.live.deadline().saturating_duration_since(now));
                if let Some((at, _)) = &self.closing {
                    limit = limit.min(at.saturating_duration_since(now));
                }
                let start = self.start_message();
                self.out.push(Effect::Dial { start, limit });
            }
            Link::Ended => {}
        }
    }

    /// The `SessionStart` of a reattach: the same session, key and timeout, the next
    /// sequence number.
    pub(crate) fn start_message(&self) -> rq::SessionStart {
        start_message(&self.cfg, self.cfg.session_id)
    }

    /// The stream broke (a transport error, its end, silence, a non-fatal failure).
    pub(crate) fn stream_lost(&mut self, now: Instant, cause: &Error) {
        if !self.link.is_up() {
            return;
        }
        self.link = Link::down(now);
        self.out.push(Effect::DropStream);
        self.pings.clear();
        self.metrics
            .session_state(Some("attached"), Some("reattaching"));
        if self.closing.is_some() {
            // Closing goes on: the stop is sent again on the next stream, if one opens in
            // time.
            tracing::debug!(session_id = self.session_id(), %cause, "session stream lost while closing");
            return;
        }
        tracing::info!(session_id = self.session_id(), %cause, "session stream lost; reattaching");
        self.publish(SessionState::Reattaching { since: now });
    }

    /// A dial succeeded: the attach request sent at `sent_at` was answered with
    /// `session_id`. Returns whether the driver keeps the stream; if not, it stops the
    /// session the server made by mistake on it and drops it.
    pub(crate) fn attached(&mut self, now: Instant, session_id: u64, sent_at: Instant) -> bool {
        let Link::Down { since, .. } = self.link else {
            return false;
        };
        if session_id != self.cfg.session_id {
            let msg = format!(
                "reattach to session {} answered with session {session_id}",
                self.cfg.session_id
            );
            self.expire(now, msg);
            return false;
        }
        tracing::info!(
            session_id,
            seq_no = self.cfg.seq_no,
            downtime = ?now.saturating_duration_since(since),
            "session reattached"
        );
        self.live.on_attached(sent_at, now);
        self.link = Link::Up;
        self.metrics
            .session_state(Some("reattaching"), Some("attached"));
        self.metrics.reattached();
        if self.closing.is_some() {
            // Queued releases first, then the stop.
            self.replay(now);
            self.send_raw(rq::Request::SessionStop(rq::SessionStop {}));
            return true;
        }
        self.publish(SessionState::Attached { session_id });
        self.replay(now);
        self.rearm_watches(now);
        true
    }

    /// A dial failed; `jitter` in `[0, 1)` spreads the next attempt.
    pub(crate) fn attach_failed(&mut self, now: Instant, err: &Error, jitter: f64) {
        let Link::Down { since, attempt, .. } = self.link else {
            return;
        };
        if err.ends_session() {
            let kind = match err.kind() {
                kind @ (ErrorKind::SessionExpired
                | ErrorKind::BadSession
                | ErrorKind::NotFound
                | ErrorKind::Unauthorized) => kind,
                _ => ErrorKind::SessionExpired,
            };
            let msg = format!(
                "session {} could not be reattached: {err}",
                self.cfg.session_id
            );
            self.finish(now, SessionState::Expired, Error::caused_by(kind, msg, err));
            return;
        }
        tracing::debug!(%err, attempt, "reattach attempt failed");
        let delay = self.cfg.options.backoff.delay(attempt, jitter);
        self.link = Link::Down {
            since,
            attempt,
            retry_at: later(now, delay),
            dialing: false,
        };
    }

    /// Sends again what the old stream left unanswered.
    fn replay(&mut self, now: Instant) {
        let (resend, removed) = self.pending.replay();
        for (_, entry) in removed {
            if let Some(err) = entry.replay_error() {
                self.fail_kind(now, entry.kind, err);
            }
        }
        // The acquires sent again: every acquire not yet granted has its request in flight.
        let mut acquires = Vec::new();
        for req_id in resend {
            let acquire = match self.pending.get_mut(req_id) {
                Some(entry) => {
                    if entry.sent_at.is_some()
                        && let Kind::Release { resent, .. } = &mut entry.kind
                    {
                        *resent = true;
                    }
                    match &entry.kind {
                        Kind::Acquire { name, caller } => Some((name.clone(), *caller)),
                        _ => None,
                    }
                }
                None => continue,
            };
            // An acquire goes out with the time it has left, not its original timeout.
            if let Some((name, caller)) = acquire {
                if let Some(left) = self.acquire_millis_left(&name, caller, now)
                    && let Some(entry) = self.pending.get_mut(req_id)
                    && let Some(rq::Request::AcquireSemaphore(a)) = &mut entry.request
                {
                    a.timeout_millis = left;
                }
                acquires.push((name, caller));
            }
            self.write(now, req_id);
        }
        // Only these: a reattach costs what was in flight, not what the session holds.
        self.reread_waiting_order_ids(now, acquires);
    }

    /// Starts closing: leases end and pending acquires fail at once; the server is asked to
    /// stop the session, on this stream or, while it is down, on the next one a reattach
    /// opens within the stop timeout (so the server does not keep the semaphores for a whole
    /// session timeout).
    pub(super) fn begin_close(&mut self, now: Instant, caller: Option<CallerId>) {
        if let Some((_, waiting)) = &mut self.closing {
            waiting.extend(caller);
            return;
        }
        // Leases end now, before the server is even asked.
        self.token.cancel();
        self.fail_acquires(now, &closed());
        let stop_at = later(now, self.cfg.options.stop_timeout);
        self.closing = Some((stop_at, caller.into_iter().collect()));
        self.send_raw(rq::Request::SessionStop(rq::SessionStop {}));
    }
}

/// The `SessionStart` for a session on `cfg.path`: `session_id` 0 creates one.
pub(crate) fn start_message(cfg: &super::CoreConfig, session_id: u64) -> rq::SessionStart {
    rq::SessionStart {
        path: cfg.path.clone(),
        session_id,
        timeout_millis: millis(cfg.options.get_timeout()),
        description: cfg.options.description.clone(),
        seq_no: cfg.seq_no,
        protection_key: cfg.protection_key.clone(),
    }
}
