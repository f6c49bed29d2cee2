//! The session's state machine and what its effects reach: the core, the table of callers
//! waiting for its answers, the stream's writing side and the session's state.
//!
//! The session task owns it and hands it every event. Carrying out an effect that needs the
//! task's own parts (open a stream, drop the stream's reading side) is left to the task as
//! [`Chores`], so that the engine stays free of the stream's reading side and the dial.
//!
//! Handles do not run it themselves. They could, behind a lock, and write their requests
//! without waking the task; measured side by side, that made the bench's lock cycle and its
//! pipelined requests slower than waking the task (the README's performance notes give the
//! numbers), which reads a whole batch of mail in one turn on the thread that also reads the
//! answers.

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
}

impl Engine {
    /// The engine of `core`, whose states go to `state`, writing to `tx`.
    pub(crate) fn new(core: SessionCore, tx: Outbox, state: watch::Sender<SessionState>) -> Self {
        Self {
            core,
            replies: Replies::default(),
            tx: Some(tx),
            state,
            effects: Vec::new(),
            chores: Chores::default(),
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
}
