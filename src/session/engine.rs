//! The session's state machine and what its effects reach, behind the one lock the session
//! task and the handles share.
//!
//! A handle that sends a command or a notice runs the core itself when the lock is free: it
//! hands over its message, writes the requests the core queues straight to the stream and
//! answers whoever the core answers, all on its own thread. A request then costs no wake-up
//! of the session task and no switch to it. When the lock is taken, the message waits in the
//! inbox for the holder or the session task, as before. What only the session task can do
//! (open a stream, drop the stream's reading side, move its timer earlier) the engine leaves
//! it as [`Chores`] and the handle wakes it.

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::core::{Effect, SessionCore};
use super::driver::{Notice, Request};
use super::outbox::Outbox;
use super::replies::Replies;
use super::state::SessionState;
use crate::proto::{self, session_request as rq};

/// The capacity of the effects buffer kept between events.
const EFFECTS_KEPT: usize = 64;

/// What the engine leaves the session task to do.
#[derive(Debug, Default)]
pub(crate) struct Chores {
    /// The stream was dropped: the task drops its reading side; `true` also forgets the
    /// stream's endpoint.
    pub(crate) drop_stream: Option<bool>,
    /// Open a stream and attach with this start message, giving up after the limit.
    pub(crate) dial: Option<(rq::SessionStart, Duration)>,
}

impl Chores {
    fn any(&self) -> bool {
        self.drop_stream.is_some() || self.dial.is_some()
    }
}

/// The core and what its effects touch.
#[derive(Debug)]
pub(crate) struct Engine {
    pub(crate) core: SessionCore,
    replies: Replies,
    /// The writing side of the live stream.
    tx: Option<Outbox>,
    state: watch::Sender<SessionState>,
    /// The buffer the core's effects are carried out from (kept, with its capacity).
    effects: Vec<Effect>,
    chores: Chores,
    /// When the session task's timer fires; a core that must wake earlier wakes the task.
    pub(crate) armed: Instant,
    /// The session's span, entered wherever the engine runs.
    pub(crate) span: tracing::Span,
}

impl Engine {
    /// The engine of `core`, whose states go to `state`, writing to `tx`.
    pub(crate) fn new(
        core: SessionCore,
        tx: Outbox,
        state: watch::Sender<SessionState>,
        span: tracing::Span,
    ) -> Self {
        Self {
            armed: core.next_wake(),
            core,
            replies: Replies::default(),
            tx: Some(tx),
            state,
            effects: Vec::new(),
            chores: Chores::default(),
            span,
        }
    }

    /// Hands a command to the core, keeping where its answer goes.
    pub(crate) fn request(&mut self, now: Instant, request: Request) {
        if let Some(command) = self.replies.request(request) {
            self.core.command(now, command);
        }
    }

    /// Hands a control message to the core, keeping where its answer goes.
    pub(crate) fn notice(&mut self, now: Instant, notice: Notice) {
        let control = self.replies.notice(notice);
        self.core.control(now, control);
    }

    /// A new stream is live: requests go to `tx` from now on.
    pub(crate) fn attach_tx(&mut self, tx: Outbox) {
        self.tx = Some(tx);
    }

    /// The stream is gone: requests are dropped until the next one.
    pub(crate) fn detach_tx(&mut self) {
        self.tx = None;
    }

    /// Whether the session task has something left to do.
    pub(crate) fn has_chores(&self) -> bool {
        self.chores.any()
    }

    /// What the session task is left to do, taken.
    pub(crate) fn take_chores(&mut self) -> Chores {
        std::mem::take(&mut self.chores)
    }

    /// After a message from a handle: checks the deadline and carries out the effects.
    /// Returns whether the session task must look (a chore, an earlier wake-up, the end).
    pub(crate) fn settle(&mut self, now: Instant) -> bool {
        self.core.check_deadline(now);
        self.apply(now);
        self.chores.any() || self.core.is_done() || self.core.next_wake() < self.armed
    }

    /// Carries out the core's effects, in order, until it has none left.
    pub(crate) fn apply(&mut self, now: Instant) {
        let mut effects = std::mem::take(&mut self.effects);
        loop {
            self.core.swap_effects(&mut effects);
            if effects.is_empty() {
                break;
            }
            for effect in effects.drain(..) {
                self.effect(now, effect);
            }
        }
        // A burst (a flood of grants at a reattach, say) must not keep its buffer for ever.
        effects.shrink_to(EFFECTS_KEPT);
        self.effects = effects;
    }

    fn effect(&mut self, now: Instant, effect: Effect) {
        match effect {
            Effect::Send(r) => {
                if let Some(tx) = &self.tx {
                    tx.send(proto::request(r));
                }
            }
            Effect::Answer(caller, answer) => {
                // A grant nobody takes any more goes back.
                if let Some((name, lease)) = self.replies.answer(caller, answer) {
                    self.core.grant_refused(now, name, lease);
                }
            }
            Effect::Queued(caller) => self.replies.queued(caller),
            Effect::Watch(subscriber, item) => self.replies.watch(subscriber, item),
            Effect::State(state) => {
                let _ = self.state.send_replace(state);
            }
            Effect::DropStream => {
                if self.tx.take().is_some() {
                    self.chores.drop_stream = Some(!self.core.is_done());
                }
            }
            Effect::Dial { start, limit } => self.chores.dial = Some((start, limit)),
        }
    }

    /// The session task is gone: every caller still waiting reads the cause, and nothing is
    /// written any more.
    pub(crate) fn abandon(&mut self) {
        self.replies = Replies::default();
        self.tx = None;
    }
}
