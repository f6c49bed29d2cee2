//! The one task per session: the thin async shell around [`SessionCore`].
//!
//! It owns the [`Engine`] (the core and what its effects reach), the reading side of the gRPC
//! stream, the dial in progress and the timer. Each turn of its loop waits for one event,
//! hands it to the core with the current time, and carries out the effects the core queued,
//! in order, then the chores they left. Whatever ends the task, a panic included, a
//! [`Sentinel`] fires every token.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tonic::Streaming;

use super::core::{SessionCore, Terminal};
use super::engine::{Chores, Engine};
use super::inbox::{Handle, Inbox, Mailed, inbox};
pub(crate) use super::replies::{Notice, ReplyTx, Request};
use super::sentinel::Sentinel;
use super::state::SessionState;
pub(crate) use super::stream::{Attached, Conn, attach};
use crate::error::{Error, ErrorKind, Result};
use crate::proto::{SessionResponse, session_request as rq, session_response as rs};
use crate::transport::{Lane, Transport};

/// How many messages already on the stream one turn of the task reads after the one that
/// woke it; the rest wait for the next turn, after the handles' mail and the timer.
const READ_AHEAD: usize = 32;

/// What the driver needs beside the core and the stream.
#[derive(Debug)]
pub(crate) struct DriverIo {
    pub(crate) session_id: u64,
    pub(crate) state: watch::Sender<SessionState>,
    pub(crate) token: CancellationToken,
    pub(crate) terminal: Arc<Terminal>,
}

/// What the stream gives: a message, its error, or its end.
type Inbound = Option<std::result::Result<SessionResponse, tonic::Status>>;

enum Event {
    Mail(Mailed),
    Inbound(Inbound),
    /// Boxed: it is rare, and as large as a stream.
    Dialed(Box<Result<Attached>>),
    Timer,
}

/// The reading side of the live stream.
#[derive(Debug)]
struct Reader {
    inbound: Streaming<SessionResponse>,
    lane: Lane,
}

/// The stream's reading side and the dial: what only the session task holds.
struct Link {
    transport: Arc<Transport>,
    stream: Option<Reader>,
    dialing: Option<BoxFuture<'static, Result<Attached>>>,
    /// A stream on which a reattach got a session that is not ours, kept until the server
    /// confirms it stopped that session (dropping it at once would reset the stream before
    /// the stop is written).
    foreign: Option<Box<Conn>>,
}

/// The session task.
pub(crate) struct Driver {
    // First field: dropped first on an unwind, so callers whose reply channels close next
    // already read the cause.
    sentinel: Sentinel,
    /// After the sentinel: on an unwind, callers whose messages are still queued here read
    /// the cause the sentinel set.
    inbox: Inbox,
    /// After the sentinel too: callers whose answers it still owes read that cause.
    engine: Engine,
    link: Link,
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver")
            .field("inbox", &self.inbox)
            .finish_non_exhaustive()
    }
}

impl Driver {
    /// A driver for a session that just attached on `attached`, and the session's first
    /// handle.
    pub(crate) fn new(
        core: SessionCore,
        transport: Arc<Transport>,
        attached: Attached,
        io: DriverIo,
    ) -> (Handle, Self) {
        let Conn { tx, inbound, lane } = attached.conn;
        let engine = Engine::new(core, tx, io.state.clone());
        let (handle, inbox) = inbox(io.session_id, io.terminal.clone(), io.token.clone());
        let driver = Self {
            sentinel: Sentinel {
                token: io.token,
                state: io.state,
                terminal: io.terminal,
                armed: true,
            },
            inbox,
            engine,
            link: Link {
                transport,
                stream: Some(Reader { inbound, lane }),
                dialing: None,
                foreign: None,
            },
        };
        (handle, driver)
    }

    /// Runs until the session ends. A panic in the core ends it with the sentinel's cause.
    pub(crate) async fn run(mut self) {
        let mut open = true;
        // One timer for the whole life of the task. Most events move the core's next
        // wake-up later (every answer moves the deadline), and a wake-up that comes early is
        // harmless (the core only acts on what is due), so the timer is moved only when the
        // wake-up comes earlier than it is set for, or after it fired.
        let mut armed = self.engine.core.next_wake();
        let timer = tokio::time::sleep_until(armed);
        tokio::pin!(timer);
        let mut fired = false;
        let stop_timeout = loop {
            self.link.carry_out(self.engine.take_chores());
            if self.engine.core.is_done() {
                break self.engine.core.stop_timeout();
            }
            let next = self.engine.core.next_wake();
            if fired || next < armed {
                armed = next;
                timer.as_mut().reset(next);
                fired = false;
            }
            let event = tokio::select! {
                biased;
                m = self.inbox.notices(), if open => Event::Mail(m),
                e = self.link.next_event() => e,
                m = self.inbox.any(), if open => Event::Mail(m),
                () = &mut timer => Event::Timer,
            };
            let now = Instant::now();
            let engine = &mut self.engine;
            match event {
                Event::Mail(Mailed::Mail) => self.inbox.drain(engine, now),
                Event::Mail(Mailed::Ended) => open = false,
                Event::Inbound(item) => {
                    if self.link.inbound(engine, now, item) {
                        self.link.read_ready(engine, now);
                    }
                }
                Event::Dialed(result) => self.link.dialed(engine, now, *result),
                Event::Timer => {
                    fired = true;
                    engine.core.tick(now);
                }
            }
            // After every event, not only on timer wake-ups: a flood of messages on the
            // biased select must not delay the tokens past the deadline.
            engine.core.check_deadline(now);
            if !open {
                engine.core.handles_gone(now);
            }
            engine.apply(now);
        };
        self.sentinel.armed = false;
        // Whatever is still queued gets the cause.
        let (commands, notices) = self.inbox.close();
        let now = Instant::now();
        for r in commands {
            self.engine.request(now, r);
        }
        for n in notices {
            self.engine.notice(now, n);
        }
        self.engine.apply(now);
        self.link.carry_out(self.engine.take_chores());
        self.link.linger(stop_timeout).await;
    }
}

impl Link {
    /// Does what the engine left the session task.
    fn carry_out(&mut self, chores: Chores) {
        if let Some(reconnect) = chores.drop_stream
            && let Some(reader) = self.stream.take()
            && reconnect
        {
            self.transport.reconnect(&reader.lane);
        }
        if let Some((start, limit)) = chores.dial {
            let transport = self.transport.clone();
            self.dialing = Some(Box::pin(async move {
                attach(&transport, transport.lane(), start, limit).await
            }));
        }
    }

    /// The stream broke: it is dropped here, and the core decides what follows. The
    /// endpoint is blamed unless the server ended the stream with a status that does not
    /// blame it (`classify.rs`: a gRPC `INTERNAL`, say).
    fn lost(&mut self, engine: &mut Engine, now: Instant, cause: &Error) {
        if let Some(reader) = self.stream.take()
            && cause.blames_endpoint()
        {
            self.transport.reconnect(&reader.lane);
        }
        engine.detach_tx();
        engine.core.stream_lost(now, cause);
    }

    fn dialed(&mut self, engine: &mut Engine, now: Instant, result: Result<Attached>) {
        match result {
            Ok(a) => {
                if engine.core.attached(now, a.session_id, a.sent_at) {
                    let Conn { tx, inbound, lane } = a.conn;
                    engine.attach_tx(tx);
                    self.stream = Some(Reader { inbound, lane });
                } else if a.session_id != engine.core.session_id() {
                    // The server made a session for nobody: stop it.
                    a.conn.send(rq::Request::SessionStop(rq::SessionStop {}));
                    self.foreign = Some(Box::new(a.conn));
                }
            }
            Err(err) => engine.core.attach_failed(now, &err, rand::random::<f64>()),
        }
    }

    /// Hands the core the messages the stream already holds, at most [`READ_AHEAD`] of
    /// them, so that answers that came together (an acquire's and the describe pipelined
    /// behind it, a burst of grants) take one turn of the task. Stops before a message that
    /// would come after the stream was dropped, and at the stream's end or error, which the
    /// next turn reads as any other event.
    fn read_ready(&mut self, engine: &mut Engine, now: Instant) {
        for _ in 0..READ_AHEAD {
            engine.apply(now);
            if engine.has_chores() {
                return;
            }
            let Some(reader) = &mut self.stream else {
                return;
            };
            // Polled without the task's waker; the next turn polls the stream with it
            // before the task waits.
            let Some(item) = reader.inbound.next().now_or_never() else {
                return;
            };
            if !self.inbound(engine, now, item) {
                return;
            }
        }
    }

    /// Hands the core what the stream gave; returns whether the stream is still live.
    fn inbound(&mut self, engine: &mut Engine, now: Instant, item: Inbound) -> bool {
        let cause = match item {
            Some(Ok(msg)) => {
                engine.core.inbound(now, msg);
                return true;
            }
            Some(Err(status)) => Error::from_grpc(status, "session stream"),
            None => Error::new(ErrorKind::Transport, "session stream ended"),
        };
        self.lost(engine, now, &cause);
        false
    }

    /// The next message on the stream, or the outcome of the dial in progress.
    async fn next_event(&mut self) -> Event {
        if let Some(reader) = &mut self.stream {
            return Event::Inbound(reader.inbound.next().await);
        }
        if let Some(dial) = &mut self.dialing {
            let result = dial.as_mut().await;
            self.dialing = None;
            return Event::Dialed(Box::new(result));
        }
        std::future::pending().await
    }

    /// After the end: wait (within the stop timeout) for the server to confirm it stopped
    /// a session a reattach got by mistake.
    async fn linger(&mut self, stop_timeout: Duration) {
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
        let _ = tokio::time::timeout(stop_timeout, stopped).await;
    }
}
