//! The one task per session: the thin async shell around [`SessionCore`].
//!
//! It owns what the core must not: the gRPC stream, the dial in progress, the timer, the
//! handles' inbox and reply senders. Each turn of its loop waits for one event, hands it
//! to the core with the current time, and carries out the effects the core queued, in
//! order. An event is a batch where one is ready: all the mail queued, or the answers the
//! stream already holds behind the one that woke the task. Whatever ends the task, a panic included, a [`Sentinel`] fires every token.

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::core::{Effect, SessionCore, Terminal};
use super::inbox::{Inbox, Mailed};
use super::replies::Replies;
pub(crate) use super::replies::{Notice, ReplyTx, Request};
use super::sentinel::Sentinel;
use super::state::SessionState;
pub(crate) use super::stream::{Attached, Conn, attach};
use crate::error::{Error, ErrorKind, Result};
use crate::proto::{SessionResponse, session_request as rq, session_response as rs};
use crate::transport::Transport;

/// The inbox and shared cells the driver works with.
#[derive(Debug)]
pub(crate) struct DriverIo {
    pub(crate) inbox: Inbox,
    pub(crate) state: watch::Sender<SessionState>,
    pub(crate) token: CancellationToken,
    pub(crate) terminal: Arc<Terminal>,
    /// Told after every event that can change what the session holds or waits for, when
    /// the session announces itself.
    pub(crate) changed: Option<Arc<tokio::sync::Notify>>,
}

/// How many messages already on the stream one turn of the task reads after the one that
/// woke it; the rest wait for the next turn, after the handles' mail and the timer.
const READ_AHEAD: usize = 32;

/// What the stream gives: a message, its error, or its end.
type Inbound = Option<std::result::Result<SessionResponse, tonic::Status>>;

enum Event {
    Mail(Mailed),
    Inbound(Inbound),
    /// Boxed: it is rare, and as large as a stream.
    Dialed(Box<Result<Attached>>),
    Timer,
}

/// The session task.
pub(crate) struct Driver {
    // First field: dropped first on an unwind, so callers whose reply channels close next
    // already read the cause.
    sentinel: Sentinel,
    /// After the sentinel: on an unwind, callers whose messages are still queued here read
    /// the cause the sentinel set.
    inbox: Inbox,
    core: SessionCore,
    transport: Arc<Transport>,
    stream: Option<Conn>,
    dialing: Option<BoxFuture<'static, Result<Attached>>>,
    /// A stream on which a reattach got a session that is not ours, kept until the server
    /// confirms it stopped that session (dropping it at once would reset the stream before
    /// the stop is written).
    foreign: Option<Box<Conn>>,
    replies: Replies,
    state: watch::Sender<SessionState>,
    /// The buffer the core's effects are carried out from (kept, with its capacity).
    effects: Vec<Effect>,
    /// See [`DriverIo::changed`], and the version of the core's names last told of.
    changed: Option<(Arc<tokio::sync::Notify>, u64)>,
}

/// The capacity of the effects buffer kept between events.
const EFFECTS_KEPT: usize = 64;

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver")
            .field("session_id", &self.core.session_id())
            .field("waiting", &self.replies.waiting())
            .finish_non_exhaustive()
    }
}

impl Driver {
    /// A driver for a session that just attached on `attached`.
    pub(crate) fn new(
        core: SessionCore,
        transport: Arc<Transport>,
        attached: Attached,
        io: DriverIo,
    ) -> Self {
        Self {
            sentinel: Sentinel {
                token: io.token.clone(),
                state: io.state.clone(),
                terminal: io.terminal.clone(),
                armed: true,
            },
            inbox: io.inbox,
            core,
            transport,
            stream: Some(attached.conn),
            dialing: None,
            foreign: None,
            replies: Replies::default(),
            state: io.state.clone(),
            effects: Vec::new(),
            changed: io.changed.map(|n| (n, 0)),
        }
    }

    /// Runs until the session ends.
    pub(crate) async fn run(mut self) {
        let mut open = true;
        // One timer for the whole life of the task. Most events move the core's next
        // wake-up later (every answer moves the deadline), and a wake-up that comes early is
        // harmless (the core only acts on what is due), so the timer is moved only when the
        // wake-up comes earlier than it is set for, or after it fired.
        let mut armed = self.core.next_wake();
        let timer = tokio::time::sleep_until(armed);
        tokio::pin!(timer);
        let mut fired = false;
        while !self.core.is_done() {
            let next = self.core.next_wake();
            if fired || next < armed {
                armed = next;
                timer.as_mut().reset(armed);
                fired = false;
            }
            let event = tokio::select! {
                biased;
                m = self.inbox.notices(), if open => Event::Mail(m),
                e = next_link_event(&mut self.stream, &mut self.dialing) => e,
                m = self.inbox.any(), if open => Event::Mail(m),
                () = &mut timer => Event::Timer,
            };
            let now = Instant::now();
            match event {
                Event::Mail(Mailed::Mail) => {
                    // Notices first: they free what the commands may wait for.
                    let (commands, notices) = self.inbox.take();
                    self.hand_over(now, notices, commands);
                }
                Event::Mail(Mailed::Ended) => open = false,
                Event::Inbound(item) => {
                    if self.inbound(now, item) {
                        self.read_ready(now);
                    }
                }
                Event::Dialed(result) => self.dialed(now, *result),
                Event::Timer => {
                    fired = true;
                    self.core.tick(now);
                }
            }
            // After every event, not only on timer wake-ups: a flood of messages on the
            // biased select must not delay the tokens past the deadline.
            self.core.check_deadline(now);
            if !open {
                self.core.handles_gone(now);
            }
            self.apply(now);
            self.tell_announcer();
            self.inbox.set_round_trip(self.core.round_trip());
        }
        self.sentinel.armed = false;
        // Whatever is still queued gets the cause.
        let (commands, notices) = self.inbox.close();
        self.hand_over(Instant::now(), notices, commands);
        self.apply(Instant::now());
        self.linger().await;
    }

    /// Tells the announcer, if the session has one, to read the session's names again when
    /// the core's table of names was open to a change. One stored permit, however many
    /// events: it reads the tables when it is ready.
    fn tell_announcer(&mut self) {
        if let Some((changed, seen)) = &mut self.changed {
            let version = self.core.names_version();
            if version != *seen {
                *seen = version;
                changed.notify_one();
            }
        }
    }

    /// Hands the core the mail taken from the inbox, keeping where each answer goes.
    fn hand_over(
        &mut self,
        now: Instant,
        notices: impl IntoIterator<Item = Notice>,
        commands: impl IntoIterator<Item = Request>,
    ) {
        for notice in notices {
            let control = self.replies.notice(notice);
            self.core.control(now, control);
        }
        for request in commands {
            if let Some(command) = self.replies.request(request) {
                self.core.command(now, command);
            }
        }
    }

    /// Hands the core what the stream gave; returns whether the stream is still live.
    fn inbound(&mut self, now: Instant, item: Inbound) -> bool {
        let cause = match item {
            Some(Ok(msg)) => {
                self.core.inbound(now, msg);
                return true;
            }
            Some(Err(status)) => Error::from_grpc(status, "session stream"),
            None => Error::new(ErrorKind::Transport, "session stream ended"),
        };
        self.lost(now, cause);
        false
    }

    /// Hands the core the messages the stream already holds, at most [`READ_AHEAD`] of
    /// them, so that answers that came together (an acquire's and the describe pipelined
    /// behind it, a burst of grants) take one turn of the task. The effects of each are
    /// carried out before the next is read, so nothing is read from a stream an effect
    /// dropped; the stream's end or error is handed over as when the select reads it.
    fn read_ready(&mut self, now: Instant) {
        for _ in 0..READ_AHEAD {
            self.apply(now);
            // Polled without the task's waker; the next turn polls the stream with it
            // before the task waits.
            let Some(item) = self
                .stream
                .as_mut()
                .and_then(|c| c.inbound.next().now_or_never())
            else {
                return;
            };
            if !self.inbound(now, item) {
                return;
            }
        }
    }

    /// The stream broke: it is dropped here, and the core decides what follows. The
    /// endpoint is blamed unless the server ended the stream with a status that does not
    /// blame it (`error/classify.rs`: a gRPC `INTERNAL`, say).
    fn lost(&mut self, now: Instant, cause: Error) {
        if let Some(conn) = self.stream.take()
            && cause.blames_endpoint()
        {
            self.transport.reconnect(&conn.lane);
        }
        self.core.stream_lost(now, &cause);
    }

    fn dialed(&mut self, now: Instant, result: Result<Attached>) {
        match result {
            Ok(a) => {
                if self.core.attached(now, a.session_id, a.sent_at) {
                    self.stream = Some(a.conn);
                } else if a.session_id != self.core.session_id() {
                    // The server made a session for nobody: stop it.
                    a.conn.send(rq::Request::SessionStop(rq::SessionStop {}));
                    self.foreign = Some(Box::new(a.conn));
                }
            }
            Err(err) => self.core.attach_failed(now, &err, rand::random::<f64>()),
        }
    }

    /// Carries out the core's effects, in order, until it has none left.
    fn apply(&mut self, now: Instant) {
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
                if let Some(conn) = &self.stream {
                    conn.send(r);
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
                if let Some(conn) = self.stream.take()
                    && !self.core.is_done()
                {
                    self.transport.reconnect(&conn.lane);
                }
            }
            Effect::Dial { start, limit } => {
                let transport = self.transport.clone();
                self.dialing = Some(Box::pin(async move {
                    attach(&transport, transport.lane(), start, limit).await
                }));
            }
        }
    }

    /// After the end: wait (within the stop timeout) for the server to confirm it stopped
    /// a session a reattach got by mistake.
    async fn linger(&mut self) {
        let Some(mut conn) = self.foreign.take() else {
            return;
        };
        let stopped = async {
            while let Some(Ok(msg)) = conn.inbound.next().await {
                if matches!(msg.response, Some(rs::Response::SessionStopped(_))) {
                    break;
                }
            }
        };
        let _ = tokio::time::timeout(self.core.stop_timeout(), stopped).await;
    }
}

/// The next message on the stream, or the outcome of the dial in progress.
async fn next_link_event(
    stream: &mut Option<Conn>,
    dialing: &mut Option<BoxFuture<'static, Result<Attached>>>,
) -> Event {
    if let Some(conn) = stream {
        return Event::Inbound(conn.inbound.next().await);
    }
    if let Some(dial) = dialing {
        let result = dial.as_mut().await;
        *dialing = None;
        return Event::Dialed(Box::new(result));
    }
    std::future::pending().await
}
