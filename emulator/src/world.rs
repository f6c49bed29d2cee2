//! The emulator's shared state: coordination nodes by path and the live streams, behind one
//! lock. Every change goes through [`World::apply`], which carries out the state machine's
//! effects while the lock is held, so messages leave in exactly the order the core decided.

use std::collections::{BTreeMap, HashMap};

use prost::Message;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::quoter::{AcquireTimeouts, Acquired, Answer, CallId, Quoter, Rejection, Units};
use super::state::{Effect, NodeState, StreamId};
use crate::proto::{NodeConfigProto, SessionResponse, StatusCode};

/// What a stream task is told to write.
#[derive(Debug)]
pub(crate) enum Outbound {
    /// A message for the client.
    Message(SessionResponse),
    /// End the response stream with this gRPC status (instead of OK).
    Status(tonic::Status),
}

/// A live stream as the world sees it.
#[derive(Debug)]
pub(crate) struct StreamSlot {
    /// Path of the node the stream's session lives on, once attached.
    pub(crate) node: Option<String>,
    pub(crate) tx: mpsc::UnboundedSender<Outbound>,
    /// Cancelled when the state machine closes the stream.
    pub(crate) closed: CancellationToken,
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
        }
    }

    fn sent(&mut self, msg: &SessionResponse) {
        use crate::proto::session_response::Response;
        self.responses += 1;
        self.response_bytes += msg.encoded_len() as u64;
        if let Some(Response::DescribeSemaphoreResult(r)) = &msg.response
            && let Some(d) = &r.semaphore_description
        {
            self.described_entries += (d.owners.len() + d.waiters.len()) as u64;
        }
    }
}

/// Nodes and streams.
#[derive(Debug, Default)]
pub(crate) struct World {
    pub(crate) nodes: BTreeMap<String, NodeState>,
    pub(crate) streams: HashMap<StreamId, StreamSlot>,
    next_stream: StreamId,
    pub(crate) traffic: Traffic,
    /// The rate-limiter resources of each node, by node path.
    pub(crate) quoters: BTreeMap<String, Quoter>,
    /// Where the answers of waiting `AcquireResource` calls go.
    acquires: HashMap<CallId, oneshot::Sender<StatusCode>>,
    next_call: CallId,
}

impl World {
    /// Registers a new stream and returns its id.
    pub(crate) fn open_stream(
        &mut self,
        tx: mpsc::UnboundedSender<Outbound>,
        closed: CancellationToken,
    ) -> StreamId {
        self.next_stream += 1;
        let id = self.next_stream;
        self.streams.insert(
            id,
            StreamSlot {
                node: None,
                tx,
                closed,
            },
        );
        id
    }

    /// Carries out effects: messages are queued on their streams, closes end them.
    pub(crate) fn apply(&mut self, effects: Vec<Effect>) {
        for effect in effects {
            match effect {
                Effect::Send(stream, msg) => {
                    self.traffic.sent(&msg);
                    if let Some(slot) = self.streams.get(&stream) {
                        // A stream whose task is gone simply misses the message, as a
                        // disconnected client would.
                        let _ = slot.tx.send(Outbound::Message(msg));
                    }
                }
                Effect::Close(stream) => {
                    // The slot stays until the stream task ends and calls `close_stream`.
                    if let Some(slot) = self.streams.get(&stream) {
                        slot.closed.cancel();
                    }
                }
            }
        }
    }

    /// The stream task ended: the session bound to it (if any) is detached.
    pub(crate) fn close_stream(&mut self, now: Instant, stream: StreamId) {
        let node = self.streams.remove(&stream).and_then(|slot| slot.node);
        let effects = node
            .and_then(|path| self.nodes.get_mut(&path))
            .map(|n| n.detach(now, stream))
            .unwrap_or_default();
        self.apply(effects);
    }

    /// Fires every due timer on every node, the rate limiters' too.
    pub(crate) fn advance(&mut self, now: Instant) {
        let effects: Vec<Effect> = self
            .nodes
            .values_mut()
            .flat_map(|n| n.advance(now))
            .collect();
        self.apply(effects);
        let answers: Vec<Answer> = self
            .quoters
            .values_mut()
            .flat_map(|q| q.advance(now))
            .collect();
        self.answer(answers);
    }

    /// The earliest timer of any node or rate limiter.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        let nodes = self.nodes.values().filter_map(NodeState::next_deadline);
        let quoters = self.quoters.values().filter_map(Quoter::next_deadline);
        nodes.chain(quoters).min()
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
        let Some(quoter) = self.quoters.get_mut(node) else {
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

    /// Delivers the answers of waiting acquires (a caller that gave up misses its answer).
    pub(crate) fn answer(&mut self, answers: Vec<Answer>) {
        for (call, status) in answers {
            if let Some(reply) = self.acquires.remove(&call) {
                let _ = reply.send(status);
            }
        }
    }

    /// Restarts every node's tablet. The rate limiters carry on unchanged: their resources
    /// and settings are the tablet's persisted state (§5), while balances, debt and waiting
    /// acquires live on the server node's proxy and quoter, which reconnect and re-subscribe
    /// (§7.8); the tablet accumulates nothing between ticks that a restart could lose (§7.1).
    pub(crate) fn restart(&mut self, now: Instant) {
        let effects: Vec<Effect> = self
            .nodes
            .values_mut()
            .flat_map(|n| n.restart(now))
            .collect();
        self.apply(effects);
    }

    /// Creates a coordination node.
    pub(crate) fn create_node(
        &mut self,
        path: String,
        config: NodeConfigProto,
    ) -> Result<(), AdminError> {
        if !config.path.is_empty() {
            return Err(AdminError::new(
                StatusCode::BadRequest,
                "Setting path is not allowed",
            ));
        }
        if self.nodes.contains_key(&path) {
            // YDB's create accepts an existing coordination node (the scheme shard answers
            // "already exists", which the RPC layer reports as SUCCESS) and leaves its config.
            return Ok(());
        }
        self.quoters.insert(path.clone(), Quoter::default());
        self.nodes.insert(path, NodeState::new(config));
        Ok(())
    }

    /// Merges `config` into a node's stored config.
    pub(crate) fn alter_node(
        &mut self,
        path: &str,
        config: &NodeConfigProto,
    ) -> Result<(), AdminError> {
        if !config.path.is_empty() {
            return Err(AdminError::new(
                StatusCode::BadRequest,
                "Setting path is not allowed",
            ));
        }
        self.node_mut(path)?.alter(config);
        Ok(())
    }

    /// Drops a node; its streams fail with UNAVAILABLE.
    pub(crate) fn drop_node(&mut self, path: &str) -> Result<(), AdminError> {
        let mut node = self.nodes.remove(path).ok_or_else(|| path_missing(path))?;
        let effects = node.shutdown();
        self.apply(effects);
        // The resources go with the node (§5); waiting acquires fail as YDB's do (§7.8).
        let answers = self
            .quoters
            .remove(path)
            .map(|mut q| q.shutdown())
            .unwrap_or_default();
        self.answer(answers);
        Ok(())
    }

    /// The stored config of a node.
    pub(crate) fn describe_node(&self, path: &str) -> Result<NodeConfigProto, AdminError> {
        self.nodes
            .get(path)
            .map(|n| n.stored_config().clone())
            .ok_or_else(|| path_missing(path))
    }

    /// A node by path, or the SCHEME_ERROR YDB reports for a missing path.
    pub(crate) fn node_mut(&mut self, path: &str) -> Result<&mut NodeState, AdminError> {
        self.nodes.get_mut(path).ok_or_else(|| path_missing(path))
    }
}

fn path_missing(path: &str) -> AdminError {
    AdminError::new(
        StatusCode::SchemeError,
        format!("Path does not exist: '{path}'"),
    )
}
