//! The emulator's shared state: the coordination nodes by path, each behind a lock of its
//! own, and the rate limiters behind one more. YDB serves each coordination node from a
//! tablet of its own, so requests on different nodes never wait for each other; here
//! neither do they: a stream, once its session is attached, goes straight to its node.
//!
//! A [`Node`] holds its state machine and the streams bound to it (a session lives on one
//! node, so a node's effects only ever name its own streams). Every change to a node goes
//! through [`Tablet::apply`], which carries out the state machine's effects while the node's
//! lock is held, so a node's messages leave in exactly the order its core decided.
//!
//! A `§` in this file is a section of `emulator/SPEC-rate-limiter.md` (the rate limiter's
//! lifecycle with its node).
//!
//! Lock order: the registry of nodes first, then one node or the rate limiters, one at a
//! time; never two nodes at once, never a node and the rate limiters together, and never
//! the registry while a node or the rate limiters are held. Only creating and dropping a node
//! hold the registry while they take another lock; everything else clones the nodes it needs
//! out of the registry and lets go of it first. The traffic counters are atomics, shared by
//! every node without a lock.

use std::collections::{BTreeMap, HashMap};
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use prost::Message;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::observe::Observer;
use super::quoter::{AcquireTimeouts, Acquired, Answer, CallId, Quoter, Rejection, Units};
use super::state::{Effect, NodeState, StreamId};
use crate::proto::{NodeConfigProto, SessionResponse, StatusCode, session_request};

/// What a stream task is told to write.
#[derive(Debug)]
pub(crate) enum Outbound {
    /// A message for the client.
    Message(SessionResponse),
    /// End the response stream with this gRPC status (instead of OK).
    Status(tonic::Status),
}

/// A stream bound to a node, as the node sees it.
#[derive(Debug)]
struct StreamSlot {
    tx: mpsc::UnboundedSender<Outbound>,
    /// Cancelled when the state machine closes the stream.
    closed: CancellationToken,
}

/// Errors of node administration, as YDB reports them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AdminError {
    pub(crate) status: StatusCode,
    pub(crate) message: String,
}

impl From<Rejection> for AdminError {
    fn from(r: Rejection) -> Self {
        Self {
            status: r.status,
            message: r.message,
        }
    }
}

impl AdminError {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }
}

/// What the coordination nodes were asked and answered, counted since the emulator started:
/// the cost a workload puts on the server, for checks that the cost of an operation does not
/// grow with the work around it (see [`crate::Emulator::traffic`]). Keepalives (pings and
/// pongs) are not counted; every other message a node sends on a session stream is (a
/// session's start and stop, what it sends because of another session's request: a grant,
/// a watch notification).
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> std::io::Result<()> {
/// use ydb_coordination_emulator::Emulator;
///
/// let emulator = Emulator::builder().node("/local/locks").start().await?;
/// let before = emulator.traffic();
/// // ... a workload against `emulator.connection_string()` ...
/// let spent = emulator.traffic().since(&before);
/// println!("{} bytes per request", spent.response_bytes / spent.requests.max(1));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Traffic {
    /// Requests that reached a node on an attached session stream (acquire, release,
    /// describe, create, update, delete, stop).
    pub requests: u64,
    /// Messages the nodes sent on session streams (answers, grants, notifications).
    pub responses: u64,
    /// Their encoded size, in bytes.
    pub response_bytes: u64,
    /// Owner and waiter entries in the descriptions the nodes sent: the part of a describe
    /// whose cost grows with the semaphore.
    pub described_entries: u64,
    /// The largest message the nodes made for a session stream, in bytes, since the emulator
    /// started (one over the message limit included, which fails its stream instead of going
    /// out); not a difference in [`Traffic::since`], the largest of the two.
    pub largest_response: u64,
}

impl Traffic {
    /// What was counted between `earlier` and `self`.
    pub fn since(&self, earlier: &Traffic) -> Traffic {
        Traffic {
            requests: self.requests.saturating_sub(earlier.requests),
            responses: self.responses.saturating_sub(earlier.responses),
            response_bytes: self.response_bytes.saturating_sub(earlier.response_bytes),
            described_entries: self
                .described_entries
                .saturating_sub(earlier.described_entries),
            largest_response: self.largest_response.max(earlier.largest_response),
        }
    }
}

/// The [`Traffic`] counters, shared by every node without a lock.
#[derive(Debug, Default)]
struct Counters {
    requests: AtomicU64,
    responses: AtomicU64,
    response_bytes: AtomicU64,
    described_entries: AtomicU64,
    largest_response: AtomicU64,
}

impl Counters {
    fn sent(&self, msg: &SessionResponse) {
        use crate::proto::session_response::Response;
        self.responses.fetch_add(1, Ordering::Relaxed);
        let len = msg.encoded_len() as u64;
        self.response_bytes.fetch_add(len, Ordering::Relaxed);
        self.largest_response.fetch_max(len, Ordering::Relaxed);
        if let Some(Response::DescribeSemaphoreResult(r)) = &msg.response
            && let Some(d) = &r.semaphore_description
        {
            self.described_entries
                .fetch_add((d.owners.len() + d.waiters.len()) as u64, Ordering::Relaxed);
        }
    }

    fn read(&self) -> Traffic {
        Traffic {
            requests: self.requests.load(Ordering::Relaxed),
            responses: self.responses.load(Ordering::Relaxed),
            response_bytes: self.response_bytes.load(Ordering::Relaxed),
            described_entries: self.described_entries.load(Ordering::Relaxed),
            largest_response: self.largest_response.load(Ordering::Relaxed),
        }
    }
}

/// One coordination node, YDB's tablet of it: its state machine and the streams bound to
/// it, behind the node's own lock.
#[derive(Debug)]
pub(crate) struct Node {
    traffic: Arc<Counters>,
    tablet: Mutex<NodeInner>,
    /// The node's path, as the observer is told.
    path: String,
    observer: Option<SharedObserver>,
    /// When the scheme created the node: `(plan step, transaction id)`, as YDB's
    /// `Ydb.Scheme.Entry.created_at` reports it (§8.1).
    created_at: (u64, u64),
}

/// The observer of every node, if any (see [`crate::observe`]).
#[derive(Clone)]
pub(crate) struct SharedObserver(pub(crate) Arc<dyn Observer>);

impl std::fmt::Debug for SharedObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Observer")
    }
}

#[derive(Debug)]
struct NodeInner {
    state: NodeState,
    /// The streams whose sessions attached here, until their tasks end (a stream the node
    /// closed keeps its slot until then, so that messages queued for it still go out).
    streams: HashMap<StreamId, StreamSlot>,
    /// Set by `DropNode`: the node is out of the registry and serves nothing more.
    dropped: bool,
}

impl Node {
    /// Locks the node, dropped or not.
    pub(crate) fn lock(&self) -> Tablet<'_> {
        Tablet {
            inner: self.tablet.lock().unwrap_or_else(PoisonError::into_inner),
            traffic: &self.traffic,
            path: &self.path,
            observer: self.observer.as_ref(),
        }
    }

    /// Locks the node, unless it was dropped.
    pub(crate) fn lock_live(&self) -> Option<Tablet<'_>> {
        Some(self.lock()).filter(|t| !t.dropped())
    }
}

/// A locked [`Node`]: its state machine (through `Deref`) and the streams its effects go to.
#[derive(Debug)]
pub(crate) struct Tablet<'a> {
    inner: MutexGuard<'a, NodeInner>,
    traffic: &'a Counters,
    path: &'a str,
    observer: Option<&'a SharedObserver>,
}

impl Deref for Tablet<'_> {
    type Target = NodeState;

    fn deref(&self) -> &NodeState {
        &self.inner.state
    }
}

impl DerefMut for Tablet<'_> {
    fn deref_mut(&mut self) -> &mut NodeState {
        &mut self.inner.state
    }
}

impl Tablet<'_> {
    /// Whether `DropNode` took the node away.
    pub(crate) fn dropped(&self) -> bool {
        self.inner.dropped
    }

    /// `session_start` on a new stream: binds the stream to the node while its session is
    /// attached. Returns the session, or `None` when the attach failed (the stream is told).
    pub(crate) fn open(
        &mut self,
        now: Instant,
        stream: StreamId,
        tx: mpsc::UnboundedSender<Outbound>,
        closed: CancellationToken,
        start: &session_request::SessionStart,
    ) -> Option<u64> {
        self.inner.streams.insert(stream, StreamSlot { tx, closed });
        let (session, effects) = self.attach(now, stream, start);
        self.apply(effects);
        if session.is_none() {
            // The failure is queued; nothing on the node names the stream any more.
            self.inner.streams.remove(&stream);
        }
        session
    }

    /// A request from an attached stream, counted in [`Traffic::requests`].
    pub(crate) fn serve(
        &mut self,
        now: Instant,
        stream: StreamId,
        req: session_request::Request,
    ) -> Vec<Effect> {
        self.traffic.requests.fetch_add(1, Ordering::Relaxed);
        self.request(now, stream, req)
    }

    /// Carries out effects: messages are queued on their streams, closes end them. The
    /// observer, if any, first hears the changes that led to them, so that nobody learns of a
    /// change before it is observed.
    pub(crate) fn apply(&mut self, effects: Vec<Effect>) {
        if let Some(observer) = self.observer {
            for change in self.inner.state.take_changes() {
                observer.0.observe(self.path, &change);
            }
        }
        for effect in effects {
            match effect {
                Effect::Send(stream, msg) => {
                    self.traffic.sent(&msg);
                    if let Some(slot) = self.inner.streams.get(&stream) {
                        // A stream whose task is gone simply misses the message, as a
                        // disconnected client would.
                        let _ = slot.tx.send(Outbound::Message(msg));
                    }
                }
                Effect::Close(stream) => {
                    // The slot stays until the stream task ends and calls `close_stream`.
                    if let Some(slot) = self.inner.streams.get(&stream) {
                        slot.closed.cancel();
                    }
                }
            }
        }
    }

    /// The stream task ended: the session bound to it (if any) is detached.
    pub(crate) fn close_stream(&mut self, now: Instant, stream: StreamId) {
        self.inner.streams.remove(&stream);
        if !self.dropped() {
            let effects = self.detach(now, stream);
            self.apply(effects);
        }
    }
}

/// The rate-limiter resources of every node, and the waiting acquires.
#[derive(Debug, Default)]
pub(crate) struct Quoters {
    /// By node path.
    by_node: BTreeMap<String, Quoter>,
    /// Where the answers of waiting `AcquireResource` calls go.
    acquires: HashMap<CallId, oneshot::Sender<StatusCode>>,
    next_call: CallId,
}

impl Quoters {
    /// A node's rate limiter.
    pub(crate) fn get_mut(&mut self, node: &str) -> Option<&mut Quoter> {
        self.by_node.get_mut(node)
    }

    /// `AcquireResource` on a node's rate limiter; a waiting call is answered on `reply`.
    /// A missing node is `BadRequest` (§4.4 step 5).
    pub(crate) fn acquire(
        &mut self,
        now: Instant,
        node: &str,
        resource: &str,
        units: Units,
        timeouts: AcquireTimeouts,
        reply: oneshot::Sender<StatusCode>,
    ) -> Acquired {
        let Some(quoter) = self.by_node.get_mut(node) else {
            return Acquired::Now(StatusCode::BadRequest);
        };
        self.next_call += 1;
        let call = self.next_call;
        let acquired = quoter.acquire(now, call, resource, units, timeouts);
        if acquired == Acquired::Waiting {
            self.acquires.insert(call, reply);
        }
        acquired
    }

    /// Fires every due timer of every rate limiter.
    fn advance(&mut self, now: Instant) {
        let answers: Vec<Answer> = self
            .by_node
            .values_mut()
            .flat_map(|q| q.advance(now))
            .collect();
        self.answer(answers);
    }

    /// Delivers the answers of waiting acquires (a caller that gave up misses its answer).
    pub(crate) fn answer(&mut self, answers: Vec<Answer>) {
        for (call, status) in answers {
            if let Some(reply) = self.acquires.remove(&call) {
                let _ = reply.send(status);
            }
        }
    }
}

/// The nodes, each behind its own lock, and the rate limiters (see the module's lock order).
#[derive(Debug, Default)]
pub(crate) struct World {
    /// The registry: every node by path. Held only to find, add or remove a node.
    nodes: RwLock<BTreeMap<String, Arc<Node>>>,
    /// Told every change of every node, when set (before any node is created).
    observer: Option<SharedObserver>,
    next_stream: AtomicU64,
    traffic: Arc<Counters>,
    /// The rate limiters, by node path.
    quoters: Mutex<Quoters>,
    /// The last `(plan step, transaction id)` a created node got (§8.1).
    last_created: Mutex<(u64, u64)>,
}

impl World {
    /// A world whose nodes tell `observer` every change they make.
    pub(crate) fn observed(observer: Option<SharedObserver>) -> Self {
        Self {
            observer,
            ..Self::default()
        }
    }

    /// A fresh id for a new stream.
    pub(crate) fn open_stream(&self) -> StreamId {
        self.next_stream.fetch_add(1, Ordering::Relaxed) + 1
    }

    fn registry(&self) -> RwLockReadGuard<'_, BTreeMap<String, Arc<Node>>> {
        self.nodes.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn registry_mut(&self) -> RwLockWriteGuard<'_, BTreeMap<String, Arc<Node>>> {
        self.nodes.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// The rate limiters, locked.
    pub(crate) fn quoters(&self) -> MutexGuard<'_, Quoters> {
        self.quoters.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A node by path.
    pub(crate) fn node(&self, path: &str) -> Option<Arc<Node>> {
        self.registry().get(path).cloned()
    }

    /// Runs `f` on a node under its lock; `None` when there is no such node.
    pub(crate) fn on_node<T>(&self, path: &str, f: impl FnOnce(&mut Tablet<'_>) -> T) -> Option<T> {
        let node = self.node(path)?;
        let mut tablet = node.lock_live()?;
        Some(f(&mut tablet))
    }

    /// Runs `f` on every node, one after another, each under its own lock.
    fn each_node(&self, mut f: impl FnMut(&mut Tablet<'_>)) {
        let nodes: Vec<Arc<Node>> = self.registry().values().cloned().collect();
        for node in nodes {
            if let Some(mut tablet) = node.lock_live() {
                f(&mut tablet);
            }
        }
    }

    /// What the nodes were asked and answered so far.
    pub(crate) fn traffic(&self) -> Traffic {
        self.traffic.read()
    }

    /// Fires every due timer on every node, the rate limiters' too.
    pub(crate) fn advance(&self, now: Instant) {
        self.each_node(|n| {
            let effects = n.advance(now);
            n.apply(effects);
        });
        self.quoters().advance(now);
    }

    /// The earliest timer of any node or rate limiter.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        let mut next = self
            .quoters()
            .by_node
            .values()
            .filter_map(Quoter::next_deadline)
            .min();
        self.each_node(|n| next = next.into_iter().chain(n.next_deadline()).min());
        next
    }

    /// Restarts every node's tablet. The rate limiters carry on unchanged: their resources
    /// and settings are the tablet's persisted state (§5), while balances, debt and waiting
    /// acquires live on the server node's proxy and quoter, which reconnect and re-subscribe
    /// (§7.8); the tablet accumulates nothing between ticks that a restart could lose (§7.1).
    pub(crate) fn restart(&self, now: Instant) {
        self.each_node(|n| {
            let effects = n.restart(now);
            n.apply(effects);
        });
    }

    /// Creates a coordination node.
    pub(crate) fn create_node(
        &self,
        path: String,
        config: NodeConfigProto,
    ) -> Result<(), AdminError> {
        if !config.path.is_empty() {
            return Err(AdminError::new(
                StatusCode::BadRequest,
                "Setting path is not allowed",
            ));
        }
        let mut nodes = self.registry_mut();
        if nodes.contains_key(&path) {
            // YDB's create accepts an existing coordination node (the scheme shard answers
            // "already exists", which the RPC layer reports as SUCCESS) and leaves its config.
            return Ok(());
        }
        self.quoters()
            .by_node
            .insert(path.clone(), Quoter::default());
        let mut state = NodeState::new(config);
        if self.observer.is_some() {
            state.record_changes();
        }
        let node = Node {
            created_at: self.next_created_at(),
            traffic: self.traffic.clone(),
            tablet: Mutex::new(NodeInner {
                state,
                streams: HashMap::new(),
                dropped: false,
            }),
            path: path.clone(),
            observer: self.observer.clone(),
        };
        nodes.insert(path, Arc::new(node));
        drop(nodes);
        Ok(())
    }

    /// Merges `config` into a node's stored config.
    pub(crate) fn alter_node(
        &self,
        path: &str,
        config: &NodeConfigProto,
    ) -> Result<(), AdminError> {
        if !config.path.is_empty() {
            return Err(AdminError::new(
                StatusCode::BadRequest,
                "Setting path is not allowed",
            ));
        }
        self.on_node(path, |n| n.alter(config))
            .ok_or_else(|| path_missing(path))
    }

    /// Drops a node; its streams fail with UNAVAILABLE.
    pub(crate) fn drop_node(&self, path: &str) -> Result<(), AdminError> {
        // The registry stays locked until the rate limiter is gone too, so that a node
        // created again at this path gets a fresh one.
        #[allow(
            clippy::significant_drop_tightening,
            reason = "held on purpose until the node's rate limiter is gone"
        )]
        let mut nodes = self.registry_mut();
        let node = nodes.remove(path).ok_or_else(|| path_missing(path))?;
        let mut tablet = node.lock();
        tablet.inner.dropped = true;
        let effects = tablet.shutdown();
        tablet.apply(effects);
        drop(tablet);
        // The resources go with the node (§5); waiting acquires fail as YDB's do (§7.8).
        let mut quoters = self.quoters();
        let answers = quoters
            .by_node
            .remove(path)
            .map(|mut q| q.shutdown())
            .unwrap_or_default();
        quoters.answer(answers);
        drop(quoters);
        drop(nodes);
        Ok(())
    }

    /// The stored config of a node, and when it was created (`(plan step, transaction id)`).
    pub(crate) fn describe_node(
        &self,
        path: &str,
    ) -> Result<(NodeConfigProto, (u64, u64)), AdminError> {
        let node = self.node(path).ok_or_else(|| path_missing(path))?;
        let config = node
            .lock_live()
            .map(|n| n.stored_config().clone())
            .ok_or_else(|| path_missing(path))?;
        Ok((config, node.created_at))
    }

    /// The creation stamp of a new node: the wall clock's milliseconds as the plan step (YDB's
    /// plan steps are the coordinators' milliseconds), kept above the last one, so that a node
    /// dropped and created again at a path gets a greater stamp; the transaction id counts.
    fn next_created_at(&self) -> (u64, u64) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let mut last = self
            .last_created
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *last = (now.max(last.0.saturating_add(1)), last.1 + 1);
        *last
    }
}

fn path_missing(path: &str) -> AdminError {
    AdminError::new(
        StatusCode::SchemeError,
        format!("Path does not exist: '{path}'"),
    )
}
