//! The one task per session: it alone owns the gRPC stream, multiplexes requests by
//! `req_id`, keeps the session alive, reattaches after a broken stream and fails everything
//! with one shared cause when the session ends.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tonic::Streaming;
use ydb_grpc::ydb_proto::coordination::v1::coordination_service_client::CoordinationServiceClient;

use super::keepalive::Liveness;
use super::mailbox;
use super::metrics::Metrics;
use super::pending::{PendingTable, Replay};
use super::state::SessionState;
use super::types::{HeldLease, SemaphoreDescription, SessionSnapshot, WaitingAcquire, WatchUpdate};
use crate::config::{AcquireOptions, DescribeOptions, SessionOptions, WatchOptions};
use crate::error::{Error, ErrorKind, Result};
use crate::proto::{
    self, SessionRequest, SessionResponse, StatusCode, session_request as rq,
    session_response as rs,
};
use crate::transport::{Lane, Transport};

/// A reply channel.
pub(crate) type Reply<T> = oneshot::Sender<Result<T>>;

/// What a granted acquire hands to the caller.
#[derive(Debug)]
pub(crate) struct Grant {
    pub(crate) lease: u64,
    pub(crate) order_id: u64,
    pub(crate) token: CancellationToken,
}

/// An acquire as sent by a handle.
#[derive(Debug)]
pub(crate) struct AcquireCmd {
    pub(crate) id: u64,
    pub(crate) name: String,
    pub(crate) opts: AcquireOptions,
    pub(crate) queued: Option<oneshot::Sender<()>>,
    pub(crate) reply: Reply<Option<Grant>>,
    /// When the caller asked (for the wait-time metric).
    pub(crate) requested_at: Instant,
}

/// Requests from handles (bounded channel: backpressure).
#[derive(Debug)]
pub(crate) enum Command {
    Acquire(AcquireCmd),
    Describe {
        name: String,
        opts: DescribeOptions,
        reply: Reply<SemaphoreDescription>,
    },
    Create {
        name: String,
        limit: u64,
        data: Vec<u8>,
        reply: Reply<()>,
    },
    Update {
        name: String,
        data: Vec<u8>,
        reply: Reply<()>,
    },
    Delete {
        name: String,
        force: bool,
        reply: Reply<()>,
    },
    Watch {
        name: String,
        opts: WatchOptions,
        tx: mailbox::Sender,
    },
    Close {
        reply: oneshot::Sender<()>,
    },
}

/// Messages that must never be lost (unbounded channel): sent from `Drop` impls.
#[derive(Debug)]
pub(crate) enum Control {
    Release {
        name: String,
        lease: u64,
        reply: Option<Reply<bool>>,
    },
    CancelAcquire {
        name: String,
        id: u64,
    },
    SetData {
        name: String,
        lease: u64,
        data: Vec<u8>,
        reply: Reply<()>,
    },
    Snapshot {
        reply: oneshot::Sender<SessionSnapshot>,
    },
}

/// The terminal cause, shared by every handle.
#[derive(Debug, Default)]
pub(crate) struct Terminal(Mutex<Option<Error>>);

impl Terminal {
    pub(crate) fn get(&self) -> Option<Error> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The terminal cause, or a plain "closed" while the session is shutting down.
    pub(crate) fn cause(&self) -> Error {
        self.get().unwrap_or_else(closed)
    }

    fn set(&self, err: Error) {
        let mut slot = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if slot.is_none() {
            *slot = Some(err);
        }
    }
}

/// A live stream.
#[derive(Debug)]
pub(crate) struct Conn {
    tx: mpsc::UnboundedSender<SessionRequest>,
    inbound: Streaming<SessionResponse>,
    lane: Lane,
}

impl Conn {
    fn send(&self, r: rq::Request) {
        // A closed request stream shows up as the inbound side ending; nothing to do here.
        let _ = self.tx.send(proto::request(r));
    }
}

/// The outcome of one attach attempt.
#[derive(Debug)]
pub(crate) struct Attached {
    pub(crate) conn: Conn,
    pub(crate) session_id: u64,
    pub(crate) sent_at: Instant,
}

/// Whether an attach error ends the session (`true`) or is worth another attempt.
pub(crate) fn is_fatal(err: &Error) -> bool {
    matches!(
        err.status(),
        Some(
            StatusCode::SessionExpired
                | StatusCode::BadSession
                | StatusCode::NotFound
                | StatusCode::Unauthorized
                | StatusCode::BadRequest
                | StatusCode::PreconditionFailed
        )
    )
}

/// Opens a stream and attaches (`session_id` 0 creates a session).
pub(crate) async fn attach(
    transport: &Transport,
    lane: Lane,
    start: rq::SessionStart,
) -> Result<Attached> {
    let (tx, rx) = mpsc::unbounded_channel();
    let _ = tx.send(proto::request(rq::Request::SessionStart(start)));
    let sent_at = Instant::now();
    let request = transport
        .request(tokio_stream::wrappers::UnboundedReceiverStream::new(rx))
        .await?;
    let mut client = CoordinationServiceClient::new(lane.channel.clone())
        .max_decoding_message_size(64 * 1024 * 1024);
    let mut inbound = client
        .session(request)
        .await
        .map_err(|s| Error::from_grpc(s, "session stream"))?
        .into_inner();
    loop {
        let msg = inbound
            .message()
            .await
            .map_err(|s| Error::from_grpc(s, "session stream"))?
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::Transport,
                    "session stream ended before the session started",
                )
            })?;
        match msg.response {
            Some(rs::Response::SessionStarted(s)) if s.session_id == 0 => {
                return Err(Error::new(
                    ErrorKind::Protocol,
                    "the server started a session with id 0",
                ));
            }
            Some(rs::Response::SessionStarted(s)) => {
                return Ok(Attached {
                    conn: Conn { tx, inbound, lane },
                    session_id: s.session_id,
                    sent_at,
                });
            }
            Some(rs::Response::Failure(f)) => {
                return Err(Error::from_ydb(f.status, &f.issues, "session start"));
            }
            Some(rs::Response::Ping(p)) => {
                let _ = tx.send(proto::request(rq::Request::Pong(rq::PingPong {
                    opaque: p.opaque,
                })));
            }
            other => {
                tracing::debug!(?other, "ignoring a message before session_started");
            }
        }
    }
}

/// What a pending request's answer is for.
#[derive(Debug)]
enum Kind {
    Acquire {
        name: String,
        id: u64,
    },
    AcquireDescribe {
        name: String,
        id: u64,
    },
    Release {
        reply: Option<Reply<bool>>,
        /// Sent again after a reattach: the first copy may already have released it.
        resent: bool,
    },
    Describe {
        reply: Reply<SemaphoreDescription>,
    },
    Plain {
        reply: Reply<()>,
        what: &'static str,
        name: String,
    },
    SetData {
        reply: Option<Reply<()>>,
        name: String,
        /// The describe pipelined behind it, which shows whether the order id is unchanged.
        check: u64,
    },
    /// After a successful owner-data update: still the same ownership (order id)?
    SetDataCheck {
        reply: Option<Reply<()>>,
        name: String,
        lease: u64,
    },
    Watch {
        name: String,
    },
}

impl Kind {
    /// The operation's name in metrics.
    fn op(&self) -> &'static str {
        match self {
            Kind::Acquire { .. } | Kind::SetData { .. } => "acquire",
            Kind::AcquireDescribe { .. }
            | Kind::Describe { .. }
            | Kind::Watch { .. }
            | Kind::SetDataCheck { .. } => "describe",
            Kind::Release { .. } => "release",
            Kind::Plain { what, .. } => match *what {
                "create semaphore" => "create",
                "update semaphore" => "update",
                _ => "delete",
            },
        }
    }
}

/// An acquire the server is working on.
#[derive(Debug)]
struct Active {
    cmd: AcquireCmd,
    deadline: Option<Instant>,
    acquire_req: u64,
    describe_req: Option<u64>,
    granted: bool,
    order_id: Option<u64>,
    /// A describe after the grant was sent (the first one saw us still waiting).
    confirming: bool,
    /// The server answered `acquire_semaphore_pending`.
    queued: bool,
}

/// An acquire waiting locally behind another lease of the same name in this session.
#[derive(Debug)]
struct Queued {
    cmd: AcquireCmd,
    deadline: Option<Instant>,
}

/// A granted lease as the driver remembers it.
#[derive(Debug)]
struct Held {
    lease: u64,
    token: CancellationToken,
    count: u64,
    ephemeral: bool,
    order_id: u64,
    since: Instant,
}

/// Everything this session does with one semaphore name.
#[derive(Debug, Default)]
struct Slot {
    held: Option<Held>,
    active: Option<Active>,
    queue: VecDeque<Queued>,
}

impl Slot {
    fn is_idle(&self) -> bool {
        self.held.is_none() && self.active.is_none() && self.queue.is_empty()
    }
}

/// The server-side watch of one name and its local subscribers.
#[derive(Debug)]
struct WatchSlot {
    subscribers: Vec<(mailbox::Sender, WatchOptions)>,
    /// `req_id` of the describe whose watch is armed or in flight.
    req_id: Option<u64>,
    resynced: bool,
}

/// Options fixed for the life of the session.
#[derive(Debug)]
pub(crate) struct DriverConfig {
    pub(crate) transport: Arc<Transport>,
    pub(crate) path: String,
    pub(crate) options: SessionOptions,
    pub(crate) protection_key: Vec<u8>,
    pub(crate) session_id: u64,
    pub(crate) seq_no: u64,
}

/// The channels and shared cells the driver works with.
#[derive(Debug)]
pub(crate) struct DriverIo {
    pub(crate) commands: mpsc::Receiver<Command>,
    pub(crate) control: mpsc::UnboundedReceiver<Control>,
    pub(crate) state: watch::Sender<SessionState>,
    pub(crate) token: CancellationToken,
    pub(crate) terminal: Arc<Terminal>,
}

enum Link {
    Up(Box<Conn>),
    Down {
        since: Instant,
        attempt: u32,
        retry_at: Instant,
        connecting: Option<futures::future::BoxFuture<'static, Result<Attached>>>,
    },
}

enum Event {
    Command(Option<Command>),
    Control(Option<Control>),
    Inbound(Option<std::result::Result<SessionResponse, tonic::Status>>),
    Attach(Result<Attached>),
    Timer,
}

/// The session driver.
pub(crate) struct Driver {
    // First field: dropped first on an unwind, so callers whose reply channels close next
    // already read the cause.
    sentinel: Sentinel,
    cfg: DriverConfig,
    state: watch::Sender<SessionState>,
    token: CancellationToken,
    terminal: Arc<Terminal>,
    link: Link,
    live: Liveness,
    pending: PendingTable<Kind>,
    slots: HashMap<String, Slot>,
    /// Local-queue deadlines: (deadline, acquire id) -> name.
    queue_deadlines: BTreeMap<(Instant, u64), String>,
    watches: HashMap<String, WatchSlot>,
    watch_reqs: HashMap<u64, String>,
    pings: VecDeque<(u64, Instant)>,
    next_opaque: u64,
    next_lease: u64,
    closing: Option<(Instant, Vec<oneshot::Sender<()>>)>,
    /// A stream on which a reattach got a session that is not ours, kept until the server
    /// confirms it stopped that session (dropping it at once would reset the stream before
    /// the stop is written).
    foreign: Option<Conn>,
    done: bool,
    metrics: Metrics,
}

/// Whatever ends the session task, a panic included, no lease may look valid afterwards:
/// dropped while armed, this publishes a cause, fires every token and makes the state
/// terminal (in the spirit of tower's buffer worker). `finish` disarms it after doing the
/// same in order.
#[derive(Debug)]
struct Sentinel {
    token: CancellationToken,
    state: watch::Sender<SessionState>,
    terminal: Arc<Terminal>,
    armed: bool,
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.terminal.set(Error::new(
            ErrorKind::Internal,
            "the session task stopped unexpectedly; its leases may be lost",
        ));
        self.token.cancel();
        let _ = self.state.send_replace(SessionState::Expired);
    }
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver")
            .field("session_id", &self.cfg.session_id)
            .field("pending", &self.pending.len())
            .finish_non_exhaustive()
    }
}

impl Driver {
    /// A driver for a session that just attached.
    pub(crate) fn new(cfg: DriverConfig, attached: Attached, io: &DriverIo) -> Self {
        let now = Instant::now();
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
            attached.sent_at,
            now,
        );
        Self {
            sentinel: Sentinel {
                token: io.token.clone(),
                state: io.state.clone(),
                terminal: io.terminal.clone(),
                armed: true,
            },
            cfg,
            state: io.state.clone(),
            token: io.token.clone(),
            terminal: io.terminal.clone(),
            link: Link::Up(Box::new(attached.conn)),
            live,
            pending: PendingTable::default(),
            slots: HashMap::new(),
            queue_deadlines: BTreeMap::new(),
            watches: HashMap::new(),
            watch_reqs: HashMap::new(),
            pings: VecDeque::new(),
            next_opaque: 1,
            next_lease: 1,
            closing: None,
            foreign: None,
            done: false,
            metrics,
        }
    }

    /// Runs until the session ends.
    pub(crate) async fn run(mut self, io: DriverIo) {
        let DriverIo {
            mut commands,
            mut control,
            ..
        } = io;
        let mut commands_open = true;
        let mut control_open = true;
        while !self.done {
            let wake = self.next_wake();
            let event = tokio::select! {
                biased;
                c = control.recv(), if control_open => Event::Control(c),
                e = next_link_event(&mut self.link) => e,
                c = commands.recv(), if commands_open && self.closing.is_none() => Event::Command(c),
                _ = tokio::time::sleep_until(wake) => Event::Timer,
            };
            let now = Instant::now();
            match event {
                Event::Command(Some(c)) => self.on_command(now, c),
                Event::Command(None) => commands_open = false,
                Event::Control(Some(c)) => self.on_control(now, c),
                Event::Control(None) => control_open = false,
                Event::Inbound(Some(Ok(msg))) => self.on_inbound(now, msg),
                Event::Inbound(Some(Err(status))) => {
                    self.stream_lost(now, &Error::from_grpc(status, "session stream"))
                }
                Event::Inbound(None) => self.stream_lost(
                    now,
                    &Error::new(ErrorKind::Transport, "session stream ended"),
                ),
                Event::Attach(result) => self.on_attach(now, result),
                Event::Timer => self.on_timer(now),
            }
            // Checked after every event, not only on timer wake-ups: a flood of messages
            // on the biased select must not delay the tokens past the deadline.
            self.check_deadline(now);
            if !commands_open && !control_open && self.closing.is_none() && !self.done {
                // Every handle and lease is gone: stop the session.
                self.begin_close(now, None);
            }
        }
        // Whatever is still queued in the channels learns the cause from the shared slot.
        commands.close();
        control.close();
        while let Ok(c) = commands.try_recv() {
            self.fail_command(c);
        }
        while let Ok(c) = control.try_recv() {
            self.fail_control(c);
        }
        if let Some(mut conn) = self.foreign.take() {
            let stopped = async {
                while let Some(Ok(msg)) = conn.inbound.next().await {
                    if matches!(msg.response, Some(rs::Response::SessionStopped(_))) {
                        break;
                    }
                }
            };
            let _ = tokio::time::timeout(self.cfg.options.stop_timeout, stopped).await;
        }
    }

    /// Answers a control message that arrived after the session ended.
    fn fail_control(&self, control: Control) {
        match control {
            Control::Release {
                reply: Some(reply), ..
            } => {
                let _ = reply.send(Err(self.cause()));
            }
            Control::SetData { reply, .. } => {
                let _ = reply.send(Err(self.cause()));
            }
            Control::Snapshot { reply } => {
                let _ = reply.send(self.snapshot());
            }
            Control::Release { reply: None, .. } | Control::CancelAcquire { .. } => {}
        }
    }

    /// Ends the session once the lease-safety deadline has passed.
    fn check_deadline(&mut self, now: Instant) {
        if self.done || !self.live.expired(now) {
            return;
        }
        if self.closing.is_some() {
            self.finish(SessionState::Closed, closed());
            return;
        }
        self.finish(
            SessionState::Expired,
            Error::new(
                ErrorKind::SessionExpired,
                format!(
                    "session {}: no confirmed contact with the server within the session timeout",
                    self.session_id()
                ),
            ),
        );
    }

    fn next_wake(&self) -> Instant {
        let mut wake = self.live.deadline();
        match &self.link {
            Link::Up(_) => wake = wake.min(self.live.next_check()),
            Link::Down {
                retry_at,
                connecting: None,
                ..
            } => wake = wake.min(*retry_at),
            Link::Down { .. } => {}
        }
        if let Some(((at, _), _)) = self.queue_deadlines.first_key_value() {
            wake = wake.min(*at);
        }
        if let Some((at, _)) = &self.closing {
            wake = wake.min(*at);
        }
        if let Some(at) = self.earliest_active_deadline() {
            wake = wake.min(at);
        }
        wake
    }

    /// When the client answers an acquire's timeout itself: at its deadline while the
    /// stream is down; while it is up, a moment later, since the server times the waiter
    /// out at the same deadline (counted from its receipt) and its answer is on the way.
    fn earliest_active_deadline(&self) -> Option<Instant> {
        let grace = if matches!(self.link, Link::Up(_)) {
            ACQUIRE_ANSWER_GRACE
        } else {
            Duration::ZERO
        };
        self.slots
            .values()
            .filter_map(|s| {
                let a = s.active.as_ref()?;
                let waits = !a.granted && a.cmd.opts.get_timeout() != Some(Duration::ZERO);
                a.deadline.filter(|_| waits).map(|d| later(d, grace))
            })
            .min()
    }

    /// A stream that is down (or stalled, not yet known dead) cannot bring the server's
    /// answer to an acquire's timeout, so the caller hears it from here; the waiter is
    /// withdrawn (after the reattach, if the stream is down). A
    /// try (timeout zero) is the exception: it asks the server whether the semaphore is
    /// free now, which only the server can say, so it waits for the reattach (bounded by
    /// the session's own deadline).
    fn expire_unanswered_acquires(&mut self, now: Instant) {
        let grace = if matches!(self.link, Link::Up(_)) {
            ACQUIRE_ANSWER_GRACE
        } else {
            Duration::ZERO
        };
        let due: Vec<String> = self
            .slots
            .iter()
            .filter(|(_, s)| {
                s.active.as_ref().is_some_and(|a| {
                    !a.granted
                        && a.cmd.opts.get_timeout() != Some(Duration::ZERO)
                        && a.deadline.is_some_and(|d| later(d, grace) <= now)
                })
            })
            .map(|(name, _)| name.clone())
            .collect();
        for name in due {
            self.end_active(now, &name, Ok(None), true);
        }
    }

    fn session_id(&self) -> u64 {
        self.cfg.session_id
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
        if let Link::Up(conn) = &self.link
            && let Some(r) = self.pending.mark_sent(req_id, now)
        {
            conn.send(r);
        }
    }

    fn send_raw(&self, r: rq::Request) {
        if let Link::Up(conn) = &self.link {
            conn.send(r);
        }
    }

    // ---- commands ------------------------------------------------------------------------

    fn on_command(&mut self, now: Instant, command: Command) {
        match command {
            Command::Acquire(cmd) => self.on_acquire(now, cmd),
            Command::Describe { name, opts, reply } => {
                self.submit(now, Kind::Describe { reply }, Replay::Resend, |req_id| {
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
                name,
                limit,
                data,
                reply,
            } => {
                let kind = Kind::Plain {
                    reply,
                    what: "create semaphore",
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
            Command::Update { name, data, reply } => {
                let kind = Kind::Plain {
                    reply,
                    what: "update semaphore",
                    name: name.clone(),
                };
                self.submit(now, kind, Replay::Resend, |req_id| {
                    rq::Request::UpdateSemaphore(rq::UpdateSemaphore { req_id, name, data })
                });
            }
            Command::Delete { name, force, reply } => {
                let kind = Kind::Plain {
                    reply,
                    what: "delete semaphore",
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
            Command::Watch { name, opts, tx } => {
                let slot = self
                    .watches
                    .entry(name.clone())
                    .or_insert_with(|| WatchSlot {
                        subscribers: Vec::new(),
                        req_id: None,
                        resynced: false,
                    });
                slot.subscribers.push((tx, opts));
                // (Re)arm with the union of every subscriber's wishes; the server keeps one
                // watch per session and semaphore, and the newest describe replaces it.
                self.arm_watch(now, &name);
            }
            Command::Close { reply } => self.begin_close(now, Some(reply)),
        }
    }

    fn fail_command(&self, command: Command) {
        let err = self.cause();
        match command {
            Command::Acquire(cmd) => {
                let _ = cmd.reply.send(Err(err));
            }
            Command::Describe { reply, .. } => {
                let _ = reply.send(Err(err));
            }
            Command::Create { reply, .. }
            | Command::Update { reply, .. }
            | Command::Delete { reply, .. } => {
                let _ = reply.send(Err(err));
            }
            Command::Watch { tx, .. } => {
                tx.put(Err(err));
            }
            Command::Close { reply } => {
                let _ = reply.send(());
            }
        }
    }

    fn cause(&self) -> Error {
        self.terminal.cause()
    }

    // ---- acquire and release -------------------------------------------------------------

    fn on_acquire(&mut self, now: Instant, cmd: AcquireCmd) {
        if cmd.reply.is_closed() {
            return; // the caller gave up before we saw the request
        }
        let deadline = cmd.opts.get_timeout().map(|t| later(now, t));
        let slot = self.slots.entry(cmd.name.clone()).or_default();
        if slot.held.is_some() || slot.active.is_some() {
            // One entry per session and semaphore on the server: wait locally.
            if cmd.opts.get_timeout() == Some(Duration::ZERO) {
                let _ = cmd.reply.send(Ok(None));
                return;
            }
            if let Some(at) = deadline {
                self.queue_deadlines.insert((at, cmd.id), cmd.name.clone());
            }
            slot.queue.push_back(Queued { cmd, deadline });
            return;
        }
        self.activate(now, cmd, deadline);
    }

    fn activate(&mut self, now: Instant, cmd: AcquireCmd, deadline: Option<Instant>) {
        let name = cmd.name.clone();
        let id = cmd.id;
        let timeout_millis = remaining_millis(&cmd.opts, deadline, now);
        let (count, data, ephemeral) = (cmd.opts.count, cmd.opts.data.clone(), cmd.opts.ephemeral);
        let acquire_req = self.submit(
            now,
            Kind::Acquire {
                name: name.clone(),
                id,
            },
            Replay::Resend,
            |req_id| {
                rq::Request::AcquireSemaphore(rq::AcquireSemaphore {
                    req_id,
                    name: name.clone(),
                    timeout_millis,
                    count,
                    data,
                    ephemeral,
                })
            },
        );
        // Pipelined right behind the acquire: for an immediate grant it shows our order_id
        // (the fencing token) at no extra round trip.
        let describe_req = self.submit_acquire_describe(now, &name, id);
        let slot = self.slots.entry(name).or_default();
        slot.active = Some(Active {
            cmd,
            deadline,
            acquire_req,
            describe_req: Some(describe_req),
            granted: false,
            order_id: None,
            confirming: false,
            queued: false,
        });
    }

    fn submit_acquire_describe(&mut self, now: Instant, name: &str, id: u64) -> u64 {
        let n = name.to_string();
        self.submit(
            now,
            Kind::AcquireDescribe {
                name: name.to_string(),
                id,
            },
            Replay::Resend,
            |req_id| {
                rq::Request::DescribeSemaphore(rq::DescribeSemaphore {
                    req_id,
                    name: n,
                    include_owners: true,
                    include_waiters: false,
                    watch_data: false,
                    watch_owners: false,
                })
            },
        )
    }

    /// Finishes the active acquire of `name` once both the grant and our order_id are known.
    fn try_complete(&mut self, now: Instant, name: &str) {
        let Some(slot) = self.slots.get_mut(name) else {
            return;
        };
        let Some(active) = slot.active.as_mut() else {
            return;
        };
        if !active.granted {
            return;
        }
        if active.describe_req.is_some() {
            return; // its answer is on the way
        }
        let Some(order_id) = active.order_id else {
            if active.confirming {
                // The grant happened, yet a describe right after it does not list us:
                // ownership already ended (force delete).
                let err = Error::new(
                    ErrorKind::Aborted,
                    format!("semaphore {name:?}: ownership ended before it could be confirmed"),
                );
                self.end_active(now, name, Err(err), false);
                return;
            }
            active.confirming = true;
            let id = active.cmd.id;
            let req = self.submit_acquire_describe(now, name, id);
            if let Some(active) = self.slots.get_mut(name).and_then(|s| s.active.as_mut()) {
                active.describe_req = Some(req);
            }
            return;
        };
        let Some(active) = self.take_active(name) else {
            return;
        };
        let Some(slot) = self.slots.get_mut(name) else {
            return;
        };
        let lease = self.next_lease;
        self.next_lease += 1;
        let token = self.token.child_token();
        slot.held = Some(Held {
            lease,
            token: token.clone(),
            count: active.cmd.opts.count,
            ephemeral: active.cmd.opts.ephemeral,
            order_id,
            since: now,
        });
        let waited = now.saturating_duration_since(active.cmd.requested_at);
        self.metrics.acquire_ended(name, "acquired", waited);
        tracing::debug!(
            semaphore = name,
            count = active.cmd.opts.count,
            ephemeral = active.cmd.opts.ephemeral,
            fencing_token = order_id,
            ?waited,
            "acquired"
        );
        let grant = Grant {
            lease,
            order_id,
            token,
        };
        if active.cmd.reply.send(Ok(Some(grant))).is_err() {
            // The caller went away at the last moment: give the semaphore back.
            self.release(now, name, lease, None);
        }
    }

    /// Ends the active acquire of `name` with `result` and starts the next local waiter.
    fn finish_active(&mut self, now: Instant, name: &str, result: Result<Option<Grant>>) {
        self.end_active(now, name, result, false);
    }

    /// Ends the active acquire of `name`. With `withdraw`, the server's view is unknown (it
    /// may have queued or granted the request), so a release is sent to be sure.
    fn end_active(
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
        if let Some(req) = active.describe_req {
            self.pending.remove(req);
        }
        let sent = active.granted || acquire.is_none_or(|e| e.sent_at.is_some());
        if withdraw && sent {
            self.submit_release(now, name, None);
        }
        let _ = active.cmd.reply.send(result);
        self.next_in_line(now, name);
    }

    /// Removes the active acquire of `name`, keeping the queued gauge right.
    fn take_active(&mut self, name: &str) -> Option<Active> {
        let active = self.slots.get_mut(name).and_then(|s| s.active.take())?;
        if active.queued {
            self.metrics.queued(name, -1.0);
        }
        Some(active)
    }

    fn submit_release(&mut self, now: Instant, name: &str, reply: Option<Reply<bool>>) {
        let name = name.to_string();
        let kind = Kind::Release {
            reply,
            resent: false,
        };
        self.submit(now, kind, Replay::Resend, |req_id| {
            rq::Request::ReleaseSemaphore(rq::ReleaseSemaphore { req_id, name })
        });
    }

    fn next_in_line(&mut self, now: Instant, name: &str) {
        loop {
            let Some(slot) = self.slots.get_mut(name) else {
                return;
            };
            if slot.held.is_some() || slot.active.is_some() {
                return;
            }
            let Some(q) = slot.queue.pop_front() else {
                if slot.is_idle() {
                    self.slots.remove(name);
                }
                return;
            };
            if let Some(at) = q.deadline {
                self.queue_deadlines.remove(&(at, q.cmd.id));
            }
            if q.cmd.reply.is_closed() {
                let waited = now.saturating_duration_since(q.cmd.requested_at);
                self.metrics.acquire_ended(name, "cancelled", waited);
                continue;
            }
            if q.deadline.is_some_and(|d| d <= now) {
                let waited = now.saturating_duration_since(q.cmd.requested_at);
                self.metrics.acquire_ended(name, "timed_out", waited);
                let _ = q.cmd.reply.send(Ok(None));
                continue;
            }
            self.activate(now, q.cmd, q.deadline);
            return;
        }
    }

    fn release(&mut self, now: Instant, name: &str, lease: u64, reply: Option<Reply<bool>>) {
        let held = self
            .slots
            .get(name)
            .and_then(|s| s.held.as_ref())
            .map(|h| h.lease);
        if held != Some(lease) {
            if let Some(reply) = reply {
                let _ = reply.send(Ok(false));
            }
            return;
        }
        if let Some(held) = self.slots.get_mut(name).and_then(|s| s.held.take()) {
            held.token.cancel();
            let held_for = now.saturating_duration_since(held.since);
            self.metrics.lease_ended(name, held_for, None);
            tracing::debug!(
                semaphore = name,
                fencing_token = held.order_id,
                ?held_for,
                "released"
            );
        }
        self.submit_release(now, name, reply);
        self.next_in_line(now, name);
    }

    fn on_control(&mut self, now: Instant, control: Control) {
        match control {
            Control::Release { name, lease, reply } => self.release(now, &name, lease, reply),
            Control::CancelAcquire { name, id } => self.cancel_acquire(now, &name, id),
            Control::SetData {
                name,
                lease,
                data,
                reply,
            } => self.set_data(now, name, lease, data, reply),
            Control::Snapshot { reply } => {
                let _ = reply.send(self.snapshot());
            }
        }
    }

    /// What the session holds and waits for, from the driver's own tables.
    fn snapshot(&self) -> SessionSnapshot {
        let mut held = Vec::new();
        let mut waiting = Vec::new();
        for (name, slot) in &self.slots {
            if let Some(h) = &slot.held {
                held.push(HeldLease {
                    name: name.clone(),
                    count: h.count,
                    fencing_token: h.order_id,
                    since: h.since,
                });
            }
            if let Some(a) = &slot.active {
                waiting.push(WaitingAcquire {
                    name: name.clone(),
                    count: a.cmd.opts.count,
                    since: a.cmd.requested_at,
                    queued_on_server: a.queued,
                });
            }
            for q in &slot.queue {
                waiting.push(WaitingAcquire {
                    name: name.clone(),
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
            state: *self.state.borrow(),
            held,
            waiting,
            requests_in_flight: self.pending.len(),
        }
    }

    /// Replaces a held lease's owner data: a repeated acquire with the same count, which the
    /// server answers at once without changing the order of owners.
    fn set_data(
        &mut self,
        now: Instant,
        name: String,
        lease: u64,
        data: Vec<u8>,
        reply: Reply<()>,
    ) {
        let held = self
            .slots
            .get(&name)
            .and_then(|s| s.held.as_ref())
            .filter(|h| h.lease == lease)
            .map(|h| (h.count, h.ephemeral));
        let Some((count, ephemeral)) = held else {
            let _ = reply.send(Err(Error::new(
                ErrorKind::Aborted,
                format!("semaphore {name:?} is no longer held"),
            )));
            return;
        };
        // The repeated acquire would also *take* a semaphore that was force-deleted and
        // made anew; the describe right behind it tells whether our order id is unchanged.
        // (Registered in this order, so a replay after a reattach keeps it.)
        let kind = Kind::SetData {
            reply: Some(reply),
            name: name.clone(),
            check: 0,
        };
        let n = name.clone();
        let update = self.pending.register(kind, Replay::Resend, |req_id| {
            rq::Request::AcquireSemaphore(rq::AcquireSemaphore {
                req_id,
                name: n,
                timeout_millis: 0,
                count,
                data,
                ephemeral,
            })
        });
        let kind = Kind::SetDataCheck {
            reply: None,
            name: name.clone(),
            lease,
        };
        let check = self.pending.register(kind, Replay::Resend, |req_id| {
            rq::Request::DescribeSemaphore(rq::DescribeSemaphore {
                req_id,
                name,
                include_owners: true,
                include_waiters: false,
                watch_data: false,
                watch_owners: false,
            })
        });
        if let Some(super::pending::Entry {
            kind: Kind::SetData { check: c, .. },
            ..
        }) = self.pending.get_mut(update)
        {
            *c = check;
        }
        self.write(now, update);
        self.write(now, check);
    }

    /// The describe behind an owner-data update: the same order id means the same
    /// ownership; any other means the old one ended and the update took the semaphore anew,
    /// which is given back, and the lease ends.
    fn on_set_data_check(
        &mut self,
        now: Instant,
        name: &str,
        lease: u64,
        reply: Option<Reply<()>>,
        order_id: Option<u64>,
    ) {
        let Some(reply) = reply else {
            return; // the update itself failed and was answered
        };
        let held = self
            .slots
            .get(name)
            .and_then(|s| s.held.as_ref())
            .filter(|h| h.lease == lease)
            .map(|h| h.order_id);
        let Some(held) = held else {
            let _ = reply.send(Err(Error::new(
                ErrorKind::Aborted,
                format!("semaphore {name:?} is no longer held"),
            )));
            return;
        };
        if order_id == Some(held) {
            let _ = reply.send(Ok(()));
            return;
        }
        if let Some(h) = self.slots.get_mut(name).and_then(|s| s.held.take()) {
            h.token.cancel();
            let held_for = now.saturating_duration_since(h.since);
            self.metrics
                .lease_ended(name, held_for, Some("session_expired"));
            tracing::warn!(
                semaphore = name,
                fencing_token = h.order_id,
                why = "ownership_ended",
                "lease lost"
            );
        }
        if order_id.is_some() {
            self.submit_release(now, name, None);
        }
        let _ = reply.send(Err(Error::new(
            ErrorKind::Aborted,
            format!("semaphore {name:?}: the lease ended before its data could be set"),
        )));
        self.next_in_line(now, name);
    }

    fn cancel_acquire(&mut self, now: Instant, name: &str, id: u64) {
        let Some(slot) = self.slots.get_mut(name) else {
            return;
        };
        if let Some(pos) = slot.queue.iter().position(|q| q.cmd.id == id) {
            if let Some(q) = slot.queue.remove(pos) {
                if let Some(at) = q.deadline {
                    self.queue_deadlines.remove(&(at, id));
                }
                let waited = now.saturating_duration_since(q.cmd.requested_at);
                self.metrics.acquire_ended(name, "cancelled", waited);
            }
            let Some(slot) = self.slots.get_mut(name) else {
                return;
            };
            if slot.is_idle() {
                self.slots.remove(name);
            }
            return;
        }
        if slot.active.as_ref().is_none_or(|a| a.cmd.id != id) {
            return;
        }
        // Withdraw the waiter (or give back a grant nobody will take).
        let cancelled = Error::new(ErrorKind::Cancelled, "the acquire was dropped");
        self.end_active(now, name, Err(cancelled), true);
    }

    // ---- watches -------------------------------------------------------------------------

    fn arm_watch(&mut self, now: Instant, name: &str) {
        let Some(slot) = self.watches.get_mut(name) else {
            return;
        };
        slot.subscribers.retain(|(tx, _)| !tx.is_closed());
        if slot.subscribers.is_empty() {
            if let Some(old) = slot.req_id.take() {
                self.watch_reqs.remove(&old);
            }
            self.watches.remove(name);
            return;
        }
        let union = slot.subscribers.iter().fold(
            WatchOptions::new()
                .data(false)
                .owners(false)
                .describe(DescribeOptions::new()),
            |acc, (_, o)| WatchOptions {
                data: acc.data || o.data,
                owners: acc.owners || o.owners,
                describe: DescribeOptions {
                    owners: acc.describe.owners || o.describe.owners,
                    waiters: acc.describe.waiters || o.describe.waiters,
                },
            },
        );
        if let Some(old) = slot.req_id.take() {
            // A describe of the replaced watch still unanswered is answered for nobody.
            self.watch_reqs.remove(&old);
            self.pending.remove(old);
        }
        let n = name.to_string();
        let req_id = self.submit(
            now,
            Kind::Watch {
                name: name.to_string(),
            },
            Replay::Drop,
            |req_id| {
                rq::Request::DescribeSemaphore(rq::DescribeSemaphore {
                    req_id,
                    name: n,
                    include_owners: union.describe.owners,
                    include_waiters: union.describe.waiters,
                    watch_data: union.data,
                    watch_owners: union.owners,
                })
            },
        );
        self.watch_reqs.insert(req_id, name.to_string());
        if let Some(slot) = self.watches.get_mut(name) {
            slot.req_id = Some(req_id);
        }
    }

    fn deliver_watch(&mut self, now: Instant, name: &str, item: Result<WatchUpdate>) {
        let Some(slot) = self.watches.get_mut(name) else {
            return;
        };
        let end = item.is_err();
        // Latest value: an unread item is replaced, never queued behind, so a slow reader
        // neither blocks the session nor misses the newest state.
        slot.subscribers.retain(|(tx, _)| tx.put(item.clone()));
        if end || slot.subscribers.is_empty() {
            if let Some(old) = slot.req_id.take() {
                self.watch_reqs.remove(&old);
            }
            self.watches.remove(name);
        }
        let _ = now;
    }

    // ---- inbound -------------------------------------------------------------------------

    fn on_inbound(&mut self, now: Instant, msg: SessionResponse) {
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
            rs::Response::Pong(p) => {
                while let Some((opaque, sent)) = self.pings.front().copied() {
                    if opaque > p.opaque {
                        break;
                    }
                    self.pings.pop_front();
                    if opaque == p.opaque {
                        self.live.on_confirmed(sent);
                    }
                }
            }
            rs::Response::Failure(f) => {
                let err = Error::from_ydb(f.status, &f.issues, "session");
                if self.closing.is_some() {
                    self.finish(SessionState::Closed, closed());
                } else if is_fatal(&err) {
                    self.finish(
                        SessionState::Expired,
                        Error::caused_by(
                            ErrorKind::from_status(
                                err.status().unwrap_or(StatusCode::SessionExpired),
                            ),
                            format!("session {} ended by the server: {err}", self.session_id()),
                            &err,
                        ),
                    );
                } else {
                    self.stream_lost(now, &err);
                }
            }
            rs::Response::SessionStarted(s) => {
                tracing::warn!(
                    session_id = self.session_id(),
                    got = s.session_id,
                    "unexpected session_started; ignored"
                );
            }
            rs::Response::SessionStopped(_) => {
                let (state, err) = if self.closing.is_some() {
                    (SessionState::Closed, closed())
                } else {
                    (
                        SessionState::Expired,
                        Error::new(ErrorKind::SessionExpired, "the server stopped the session"),
                    )
                };
                self.finish(state, err);
            }
            rs::Response::AcquireSemaphorePending(p) => {
                if let Some(super::pending::Entry {
                    kind: Kind::Acquire { name, id },
                    ..
                }) = self.pending.get(p.req_id)
                {
                    let (name, id) = (name.clone(), *id);
                    if let Some(active) = self.active_mut(&name, id) {
                        if let Some(q) = active.cmd.queued.take() {
                            let _ = q.send(());
                        }
                        if !std::mem::replace(&mut active.queued, true) {
                            self.metrics.queued(&name, 1.0);
                        }
                    }
                }
            }
            rs::Response::AcquireSemaphoreResult(r) => self.on_acquire_result(now, r),
            rs::Response::ReleaseSemaphoreResult(r) => {
                let Some(entry) = self.take_answer(r.req_id, |k| matches!(k, Kind::Release { .. }))
                else {
                    return;
                };
                if let Kind::Release {
                    reply: Some(reply),
                    resent,
                } = entry
                {
                    let result = if r.status == StatusCode::Success as i32 {
                        // The lease was held until this release was asked for, and the
                        // session survived the reattach: "not held" on a resend means the
                        // first copy did the work.
                        Ok(r.released || resent)
                    } else {
                        Err(Error::from_ydb(r.status, &r.issues, "release semaphore"))
                    };
                    let _ = reply.send(result);
                }
            }
            rs::Response::DescribeSemaphoreResult(r) => self.on_describe_result(now, r),
            rs::Response::DescribeSemaphoreChanged(c) => {
                if let Some(name) = self.watch_reqs.get(&c.req_id).cloned()
                    && (c.data_changed || c.owners_changed)
                {
                    self.arm_watch(now, &name);
                }
            }
            rs::Response::CreateSemaphoreResult(r) => self.on_plain(r.req_id, r.status, &r.issues),
            rs::Response::UpdateSemaphoreResult(r) => self.on_plain(r.req_id, r.status, &r.issues),
            rs::Response::DeleteSemaphoreResult(r) => self.on_plain(r.req_id, r.status, &r.issues),
            other => tracing::debug!(?other, "ignoring an unsupported message"),
        }
    }

    fn active_mut(&mut self, name: &str, id: u64) -> Option<&mut Active> {
        self.slots
            .get_mut(name)
            .and_then(|s| s.active.as_mut())
            .filter(|a| a.cmd.id == id)
    }

    /// Removes the entry an answer belongs to, if it is of the expected kind; an answer to a
    /// request of another kind is a server bug and fails that request.
    fn take_answer(&mut self, req_id: u64, expected: impl Fn(&Kind) -> bool) -> Option<Kind> {
        let Some(entry) = self.pending.get(req_id) else {
            tracing::debug!(req_id, "answer for an unknown req_id; ignored");
            return None;
        };
        let matches = expected(&entry.kind);
        let entry = self.pending.remove(req_id)?;
        if let Some(sent) = entry.sent_at {
            self.live.on_confirmed(sent);
            let took = Instant::now().saturating_duration_since(sent);
            self.metrics.request(entry.kind.op(), took);
        }
        if matches {
            return Some(entry.kind);
        }
        tracing::warn!(req_id, "answer of the wrong type for a request");
        self.fail_kind(
            entry.kind,
            Error::new(
                ErrorKind::Protocol,
                "the server answered with a message of the wrong type",
            ),
        );
        None
    }

    fn on_acquire_result(&mut self, now: Instant, r: rs::AcquireSemaphoreResult) {
        let kind = self.take_answer(r.req_id, |k| {
            matches!(k, Kind::Acquire { .. } | Kind::SetData { .. })
        });
        let (name, id) = match kind {
            Some(Kind::Acquire { name, id }) => (name, id),
            Some(Kind::SetData { reply, name, check }) => {
                let result = if r.status != StatusCode::Success as i32 {
                    Err(Error::from_ydb(
                        r.status,
                        &r.issues,
                        &format!("set owner data of {name:?}"),
                    ))
                } else if !r.acquired {
                    Err(Error::new(
                        ErrorKind::Aborted,
                        format!("semaphore {name:?} is no longer held"),
                    ))
                } else {
                    Ok(())
                };
                match result {
                    // The describe behind it answers the caller.
                    Ok(()) => {
                        if let Some(super::pending::Entry {
                            kind: Kind::SetDataCheck { reply: slot, .. },
                            ..
                        }) = self.pending.get_mut(check)
                        {
                            *slot = reply;
                        }
                    }
                    Err(err) => {
                        if let Some(reply) = reply {
                            let _ = reply.send(Err(err));
                        }
                    }
                }
                return;
            }
            _ => return,
        };
        if self.active_mut(&name, id).is_none() {
            return;
        }
        if r.status != StatusCode::Success as i32 {
            let err = Error::from_ydb(r.status, &r.issues, &format!("acquire semaphore {name:?}"));
            self.finish_active(now, &name, Err(err));
        } else if !r.acquired {
            self.finish_active(now, &name, Ok(None));
        } else {
            if let Some(active) = self.active_mut(&name, id) {
                active.granted = true;
            }
            self.try_complete(now, &name);
        }
    }

    fn on_describe_result(&mut self, now: Instant, r: rs::DescribeSemaphoreResult) {
        let Some(kind) = self.take_answer(r.req_id, |k| {
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
            Kind::SetDataCheck { reply, name, lease } => {
                let me = self.session_id();
                let order_id = r
                    .semaphore_description
                    .iter()
                    .flat_map(|d| d.owners.iter())
                    .find(|o| o.session_id == me)
                    .map(|o| o.order_id);
                self.on_set_data_check(now, &name, lease, reply, order_id.filter(|_| ok));
            }
            Kind::Describe { reply } => {
                let result = match (ok, r.semaphore_description) {
                    (true, Some(d)) => Ok(d.into()),
                    (true, None) => Err(Error::new(
                        ErrorKind::Protocol,
                        "describe answered without a description",
                    )),
                    (false, _) => Err(Error::from_ydb(r.status, &r.issues, "describe semaphore")),
                };
                let _ = reply.send(result);
            }
            Kind::AcquireDescribe { name, id } => {
                let me = self.session_id();
                let Some(active) = self.active_mut(&name, id) else {
                    return;
                };
                if active.describe_req == Some(r.req_id) {
                    active.describe_req = None;
                }
                if ok
                    && let Some(owner) = r
                        .semaphore_description
                        .iter()
                        .flat_map(|d| d.owners.iter())
                        .find(|o| o.session_id == me)
                {
                    active.order_id = Some(owner.order_id);
                }
                self.try_complete(now, &name);
            }
            Kind::Watch { name } => {
                if self.watches.get(&name).and_then(|w| w.req_id) != Some(r.req_id) {
                    return; // superseded by a newer arm
                }
                let item = match (ok, r.semaphore_description) {
                    (true, Some(d)) => {
                        let resynced = self
                            .watches
                            .get_mut(&name)
                            .is_some_and(|w| std::mem::take(&mut w.resynced));
                        if !r.watch_added {
                            // Nothing armed: try again on the next change we cause or see.
                            tracing::debug!(name, "watch not added");
                        }
                        Ok(WatchUpdate {
                            description: d.into(),
                            resynced,
                        })
                    }
                    (true, None) => Err(Error::new(
                        ErrorKind::Protocol,
                        "describe answered without a description",
                    )),
                    (false, _) => Err(Error::from_ydb(
                        r.status,
                        &r.issues,
                        &format!("watch semaphore {name:?}"),
                    )),
                };
                self.deliver_watch(now, &name, item);
            }
            _ => {}
        }
    }

    fn on_plain(&mut self, req_id: u64, status: i32, issues: &[proto::IssueMessage]) {
        let Some(Kind::Plain { reply, what, name }) =
            self.take_answer(req_id, |k| matches!(k, Kind::Plain { .. }))
        else {
            return;
        };
        let result = if status == StatusCode::Success as i32 {
            Ok(())
        } else {
            Err(Error::from_ydb(status, issues, &format!("{what} {name:?}")))
        };
        let _ = reply.send(result);
    }

    fn fail_kind(&mut self, kind: Kind, err: Error) {
        match kind {
            Kind::Acquire { name, id } | Kind::AcquireDescribe { name, id } => {
                if self.active_mut(&name, id).is_some() {
                    let now = Instant::now();
                    self.end_active(now, &name, Err(err), true);
                }
            }
            Kind::Release { reply, .. } => {
                if let Some(reply) = reply {
                    let _ = reply.send(Err(err));
                }
            }
            Kind::Describe { reply } => {
                let _ = reply.send(Err(err));
            }
            Kind::Plain { reply, .. } => {
                let _ = reply.send(Err(err));
            }
            Kind::SetData { reply, .. } | Kind::SetDataCheck { reply, .. } => {
                if let Some(reply) = reply {
                    let _ = reply.send(Err(err));
                }
            }
            Kind::Watch { name } => {
                let now = Instant::now();
                self.deliver_watch(now, &name, Err(err));
            }
        }
    }

    // ---- timers, loss and reattach -------------------------------------------------------

    fn on_timer(&mut self, now: Instant) {
        self.check_deadline(now);
        if self.done {
            return;
        }
        if let Some((at, _)) = &self.closing
            && *at <= now
        {
            self.finish(SessionState::Closed, closed());
            return;
        }
        self.expire_unanswered_acquires(now);
        while let Some(((at, id), name)) = self
            .queue_deadlines
            .first_key_value()
            .map(|(k, v)| (*k, v.clone()))
        {
            if at > now {
                break;
            }
            self.queue_deadlines.remove(&(at, id));
            if let Some(slot) = self.slots.get_mut(&name)
                && let Some(pos) = slot.queue.iter().position(|q| q.cmd.id == id)
                && let Some(q) = slot.queue.remove(pos)
            {
                let waited = now.saturating_duration_since(q.cmd.requested_at);
                self.metrics.acquire_ended(&name, "timed_out", waited);
                let _ = q.cmd.reply.send(Ok(None));
            }
        }
        match &mut self.link {
            Link::Up(_) => {
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
                    if self.pings.len() > 64 {
                        self.pings.pop_front();
                    }
                    self.live.on_ping_sent(now);
                    self.send_raw(rq::Request::Ping(rq::PingPong { opaque }));
                }
            }
            Link::Down {
                retry_at,
                connecting,
                attempt,
                ..
            } => {
                if connecting.is_none() && *retry_at <= now {
                    *attempt += 1;
                    let lane = match self.cfg.transport.lane() {
                        Ok(lane) => lane,
                        Err(err) => {
                            tracing::debug!(%err, "no endpoint to reattach to");
                            *retry_at = later(now, self.cfg.options.backoff.ceiling(*attempt));
                            return;
                        }
                    };
                    self.cfg.seq_no += 1;
                    let start = rq::SessionStart {
                        path: self.cfg.path.clone(),
                        session_id: self.cfg.session_id,
                        timeout_millis: millis(self.cfg.options.get_timeout()),
                        description: self.cfg.options.description.clone(),
                        seq_no: self.cfg.seq_no,
                        protection_key: self.cfg.protection_key.clone(),
                    };
                    let transport = self.cfg.transport.clone();
                    let mut limit = (self.cfg.options.get_ping_interval() * 2)
                        .min(self.live.deadline().saturating_duration_since(now));
                    if let Some((at, _)) = &self.closing {
                        limit = limit.min(at.saturating_duration_since(now));
                    }
                    *connecting = Some(Box::pin(async move {
                        match tokio::time::timeout(limit, attach(&transport, lane.clone(), start))
                            .await
                        {
                            Ok(result) => result,
                            Err(_) => {
                                transport.reconnect(&lane);
                                Err(Error::new(ErrorKind::Timeout, "reattach attempt timed out"))
                            }
                        }
                    }));
                }
            }
        }
    }

    fn stream_lost(&mut self, now: Instant, cause: &Error) {
        let Link::Up(conn) = std::mem::replace(
            &mut self.link,
            Link::Down {
                since: now,
                attempt: 0,
                retry_at: now,
                connecting: None,
            },
        ) else {
            return;
        };
        self.cfg.transport.reconnect(&conn.lane);
        self.pings.clear();
        self.metrics
            .session_state(Some("attached"), Some("reattaching"));
        if self.closing.is_some() {
            // Closing goes on: the stop is sent again on the next stream, if one opens in time.
            tracing::debug!(session_id = self.session_id(), %cause, "session stream lost while closing");
            return;
        }
        tracing::info!(session_id = self.session_id(), %cause, "session stream lost; reattaching");
        let _ = self
            .state
            .send_replace(SessionState::Reattaching { since: now });
    }

    fn on_attach(&mut self, now: Instant, result: Result<Attached>) {
        let Link::Down { since, attempt, .. } = &mut self.link else {
            return;
        };
        let (since, attempt) = (*since, *attempt);
        match result {
            Ok(a) if a.session_id == self.cfg.session_id => {
                tracing::info!(session_id = a.session_id, seq_no = self.cfg.seq_no, downtime = ?now.saturating_duration_since(since), "session reattached");
                self.live.on_attached(a.sent_at, now);
                self.link = Link::Up(Box::new(a.conn));
                self.metrics
                    .session_state(Some("reattaching"), Some("attached"));
                self.metrics.reattached();
                if self.closing.is_some() {
                    // Queued releases first, then the stop.
                    self.replay(now);
                    self.send_raw(rq::Request::SessionStop(rq::SessionStop {}));
                    return;
                }
                let _ = self.state.send_replace(SessionState::Attached {
                    session_id: self.cfg.session_id,
                });
                self.replay(now);
            }
            Ok(a) => {
                // The server made a new session for us instead: stop it, or it would hold
                // the node's resources for a whole session timeout.
                a.conn.send(rq::Request::SessionStop(rq::SessionStop {}));
                self.foreign = Some(a.conn);
                self.finish(
                    SessionState::Expired,
                    Error::new(
                        ErrorKind::SessionExpired,
                        format!(
                            "reattach to session {} answered with session {}",
                            self.cfg.session_id, a.session_id
                        ),
                    ),
                );
            }
            Err(err) if is_fatal(&err) => {
                let kind = err.kind();
                let kind = if matches!(
                    kind,
                    ErrorKind::SessionExpired
                        | ErrorKind::BadSession
                        | ErrorKind::NotFound
                        | ErrorKind::Unauthorized
                ) {
                    kind
                } else {
                    ErrorKind::SessionExpired
                };
                self.finish(
                    SessionState::Expired,
                    Error::caused_by(
                        kind,
                        format!(
                            "session {} could not be reattached: {err}",
                            self.cfg.session_id
                        ),
                        &err,
                    ),
                );
            }
            Err(err) => {
                tracing::debug!(%err, attempt, "reattach attempt failed");
                let delay = self
                    .cfg
                    .options
                    .backoff
                    .delay(attempt, rand::random::<f64>());
                self.link = Link::Down {
                    since,
                    attempt,
                    retry_at: later(now, delay),
                    connecting: None,
                };
            }
        }
    }

    /// Sends again what the old stream left unanswered, and re-arms watches.
    fn replay(&mut self, now: Instant) {
        let (resend, removed) = self.pending.replay();
        for (_, entry) in removed {
            if let Some(err) = entry.replay_error() {
                self.fail_kind(entry.kind, err);
            }
        }
        for req_id in resend {
            if let Some(entry) = self.pending.get_mut(req_id)
                && entry.sent_at.is_some()
                && let Kind::Release { resent, .. } = &mut entry.kind
            {
                *resent = true;
            }
            // An acquire goes out with the time it has left, not its original timeout.
            if let Some(entry) = self.pending.get(req_id)
                && let Kind::Acquire { name, id } = &entry.kind
            {
                let (name, id) = (name.clone(), *id);
                let left = self
                    .active_mut(&name, id)
                    .map(|a| remaining_millis(&a.cmd.opts, a.deadline, now));
                if let (Some(left), Some(entry)) = (left, self.pending.get_mut(req_id))
                    && let rq::Request::AcquireSemaphore(a) = &mut entry.request
                {
                    a.timeout_millis = left;
                }
            }
            self.write(now, req_id);
        }
        let names: Vec<String> = if self.closing.is_some() {
            Vec::new()
        } else {
            self.watches.keys().cloned().collect()
        };
        for name in names {
            if let Some(w) = self.watches.get_mut(&name) {
                w.resynced = true;
                if let Some(old) = w.req_id.take() {
                    self.watch_reqs.remove(&old);
                }
            }
            self.arm_watch(now, &name);
        }
    }

    /// Starts closing: leases end and pending acquires fail at once; the server is asked to
    /// stop the session, on this stream or, while it is down, on the next one a reattach
    /// opens within the stop timeout (so the server does not keep the semaphores for a whole
    /// session timeout).
    fn begin_close(&mut self, now: Instant, reply: Option<oneshot::Sender<()>>) {
        if let Some((_, replies)) = &mut self.closing {
            replies.extend(reply);
            return;
        }
        let replies: Vec<_> = reply.into_iter().collect();
        // Leases end now, before the server is even asked.
        self.token.cancel();
        self.fail_acquires(now, &closed());
        self.closing = Some((later(now, self.cfg.options.stop_timeout), replies));
        self.send_raw(rq::Request::SessionStop(rq::SessionStop {}));
    }

    /// Answers every acquire in progress or queued locally with `err`. What the server
    /// may still grant is released by the stop that follows.
    fn fail_acquires(&mut self, now: Instant, err: &Error) {
        let names: Vec<String> = self.slots.keys().cloned().collect();
        for name in names {
            if let Some(slot) = self.slots.get_mut(&name) {
                for q in std::mem::take(&mut slot.queue) {
                    if let Some(at) = q.deadline {
                        self.queue_deadlines.remove(&(at, q.cmd.id));
                    }
                    let waited = now.saturating_duration_since(q.cmd.requested_at);
                    self.metrics.acquire_ended(&name, "error", waited);
                    let _ = q.cmd.reply.send(Err(err.clone()));
                }
            }
            if let Some(active) = self.take_active(&name) {
                self.pending.remove(active.acquire_req);
                if let Some(req) = active.describe_req {
                    self.pending.remove(req);
                }
                let waited = now.saturating_duration_since(active.cmd.requested_at);
                self.metrics.acquire_ended(&name, "error", waited);
                let _ = active.cmd.reply.send(Err(err.clone()));
            }
            if self.slots.get(&name).is_some_and(Slot::is_idle) {
                self.slots.remove(&name);
            }
        }
    }

    /// Ends the session: publish the cause, fire every token, fail everything in flight.
    fn finish(&mut self, state: SessionState, err: Error) {
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
        self.sentinel.armed = false;
        self.terminal.set(err.clone());
        self.token.cancel();
        let _ = self.state.send_replace(state);
        let was = if matches!(self.link, Link::Up(_)) {
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
        let now = Instant::now();
        for (name, slot) in &self.slots {
            if let Some(held) = &slot.held {
                let held_for = now.saturating_duration_since(held.since);
                self.metrics.lease_ended(name, held_for, Some(cause));
                if cause != "closed" {
                    tracing::warn!(
                        semaphore = name.as_str(),
                        fencing_token = held.order_id,
                        why = cause,
                        "lease lost"
                    );
                }
            }
            if slot.active.as_ref().is_some_and(|a| a.queued) {
                self.metrics.queued(name, -1.0);
            }
        }
        for (_, entry) in self.pending.drain() {
            match entry.kind {
                Kind::Acquire { .. } | Kind::AcquireDescribe { .. } | Kind::Watch { .. } => {}
                kind => self.fail_kind(kind, err.clone()),
            }
        }
        for (_, slot) in self.slots.drain() {
            if let Some(active) = slot.active {
                let _ = active.cmd.reply.send(Err(err.clone()));
            }
            for q in slot.queue {
                let _ = q.cmd.reply.send(Err(err.clone()));
            }
        }
        for (_, w) in self.watches.drain() {
            for (tx, _) in w.subscribers {
                tx.put(Err(err.clone()));
            }
        }
        if let Some((_, replies)) = self.closing.take() {
            for r in replies {
                let _ = r.send(());
            }
        }
        self.link = Link::Down {
            since: Instant::now(),
            attempt: 0,
            retry_at: Instant::now(),
            connecting: None,
        };
    }
}

/// How long past an acquire's deadline the client waits for the server's own timeout
/// answer on a live stream before answering the caller itself.
const ACQUIRE_ANSWER_GRACE: Duration = Duration::from_millis(200);

/// The error of a session closed by its owner.
fn closed() -> Error {
    Error::new(ErrorKind::SessionClosed, "the session is closed")
}

/// `now + d`, saturating far in the future instead of overflowing on huge durations.
fn later(now: Instant, d: Duration) -> Instant {
    now.checked_add(d)
        .unwrap_or_else(|| now + Duration::from_secs(30 * 365 * 24 * 3600))
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn remaining_millis(opts: &AcquireOptions, deadline: Option<Instant>, now: Instant) -> u64 {
    match deadline {
        None => opts.timeout_millis(),
        Some(d) => millis(d.saturating_duration_since(now)),
    }
}

/// The next message on the stream, or the outcome of the attach attempt in progress.
async fn next_link_event(link: &mut Link) -> Event {
    match link {
        Link::Up(conn) => Event::Inbound(conn.inbound.next().await),
        Link::Down {
            connecting: Some(f),
            ..
        } => {
            let result = f.as_mut().await;
            if let Link::Down { connecting, .. } = link {
                *connecting = None;
            }
            Event::Attach(result)
        }
        Link::Down { .. } => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_panicking_session_task_fires_every_token_and_publishes_a_cause() {
        let token = CancellationToken::new();
        let lease = token.child_token();
        let (state, rx) = watch::channel(SessionState::Attached { session_id: 7 });
        let terminal = Arc::new(Terminal::default());
        let sentinel = Sentinel {
            token: token.clone(),
            state,
            terminal: terminal.clone(),
            armed: true,
        };
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            let _held = sentinel;
            panic!("a bug in the session task");
        }));
        assert!(unwound.is_err());
        assert!(lease.is_cancelled());
        assert_eq!(*rx.borrow(), SessionState::Expired);
        assert_eq!(terminal.get().map(|e| e.kind()), Some(ErrorKind::Internal));
    }

    #[test]
    fn a_disarmed_sentinel_changes_nothing() {
        let token = CancellationToken::new();
        let (state, rx) = watch::channel(SessionState::Attached { session_id: 7 });
        let terminal = Arc::new(Terminal::default());
        drop(Sentinel {
            token: token.clone(),
            state,
            terminal: terminal.clone(),
            armed: false,
        });
        assert!(!token.is_cancelled());
        assert_eq!(*rx.borrow(), SessionState::Attached { session_id: 7 });
        assert!(terminal.get().is_none());
    }

    #[test]
    fn later_saturates_instead_of_overflowing() {
        let now = Instant::now();
        assert!(later(now, Duration::MAX) > now + Duration::from_secs(365 * 24 * 3600));
        assert_eq!(
            later(now, Duration::from_secs(1)),
            now + Duration::from_secs(1)
        );
    }
}
