//! A small raw-stream harness for the coordination `Session` RPC.
//!
//! Each [`Raw`] is one gRPC `Session` stream. Requests go through an unbounded channel that
//! feeds the request stream; a background task reads every response, stamps it with the
//! (paused) tokio time it arrived, answers server pings when auto-pong is on, and forwards
//! everything else to the test. Every wait is guarded by a timeout so a bug fails the test
//! instead of hanging it.

#![allow(
    dead_code,
    unreachable_pub,
    missing_docs,
    clippy::unwrap_used,
    clippy::expect_used
)]

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prost::Message;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::{Instant, timeout};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::Status;
use tonic::codec::Streaming;
use tonic::transport::Channel;
use ydb_coordination::emulator::Emulator;

pub use ydb_grpc::ydb_proto::coordination::v1::coordination_service_client::CoordinationServiceClient;
pub use ydb_grpc::ydb_proto::coordination::{
    SemaphoreDescription, SemaphoreSession, SessionRequest, SessionResponse, session_request,
    session_response,
};
pub use ydb_grpc::ydb_proto::status_ids::StatusCode;

/// Request variants.
pub use session_request::Request as Rq;
/// Response variants.
pub use session_response::Response as Rs;

/// The database every test emulator serves.
pub const DB: &str = "/local";
/// The coordination node every test emulator creates at start.
pub const NODE: &str = "/local/app";
/// The guard on every single wait. Paused time makes it free.
pub const GUARD: Duration = Duration::from_secs(30);
/// A session timeout long enough to never matter in a test.
pub const LONG: u64 = 600_000;

/// Starts an emulator with database [`DB`] and node [`NODE`].
pub async fn emulator() -> Emulator {
    timeout(GUARD, Emulator::builder().database(DB).node(NODE).start())
        .await
        .unwrap()
        .unwrap()
}

/// A fresh HTTP/2 connection to the emulator.
pub async fn channel(emu: &Emulator) -> Channel {
    let endpoint =
        tonic::transport::Endpoint::from_shared(format!("http://{}", emu.local_addr())).unwrap();
    timeout(GUARD, endpoint.connect()).await.unwrap().unwrap()
}

/// A status code's name, for readable assertion failures.
pub fn st(code: i32) -> &'static str {
    StatusCode::try_from(code)
        .map(|c| c.as_str_name())
        .unwrap_or("<unknown status>")
}

/// Asserts that a raw status equals the expected one.
#[track_caller]
pub fn assert_status(actual: i32, expected: StatusCode) {
    assert_eq!(st(actual), st(expected as i32));
}

/// Session ids of a describe's owners or waiters, sorted.
pub fn sessions_of(entries: &[SemaphoreSession]) -> Vec<u64> {
    let mut ids: Vec<u64> = entries.iter().map(|e| e.session_id).collect();
    ids.sort_unstable();
    ids
}

/// A message whose encoding is given byte by byte (for unknown field numbers and garbage).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RawBytes(pub Vec<u8>);

impl Message for RawBytes {
    fn encode_raw(&self, buf: &mut impl bytes::BufMut) {
        buf.put_slice(&self.0);
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: prost::encoding::WireType,
        buf: &mut impl bytes::Buf,
        ctx: prost::encoding::DecodeContext,
    ) -> Result<(), prost::DecodeError> {
        prost::encoding::skip_field(wire_type, tag, buf, ctx)
    }

    fn encoded_len(&self) -> usize {
        self.0.len()
    }

    fn clear(&mut self) {
        self.0.clear();
    }
}

/// What the reader task hands to the test.
#[derive(Debug)]
pub enum Event {
    /// A response and the time it arrived.
    Msg { at: Instant, msg: SessionResponse },
    /// The stream ended: `None` is gRPC OK, otherwise the error status.
    End { at: Instant, status: Option<Status> },
}

#[derive(Clone, Debug)]
enum Tx {
    Typed(mpsc::UnboundedSender<SessionRequest>),
    Bytes(mpsc::UnboundedSender<RawBytes>),
}

#[derive(Debug)]
enum WeakTx {
    Typed(mpsc::WeakUnboundedSender<SessionRequest>),
    Bytes(mpsc::WeakUnboundedSender<RawBytes>),
}

impl Tx {
    fn send(&self, msg: SessionRequest) {
        // A closed stream drops the message; the test sees that through `End`.
        let _ = match self {
            Tx::Typed(tx) => tx.send(msg).map_err(|_| ()),
            Tx::Bytes(tx) => tx.send(RawBytes(msg.encode_to_vec())).map_err(|_| ()),
        };
    }

    fn downgrade(&self) -> WeakTx {
        match self {
            Tx::Typed(tx) => WeakTx::Typed(tx.downgrade()),
            Tx::Bytes(tx) => WeakTx::Bytes(tx.downgrade()),
        }
    }
}

impl WeakTx {
    fn upgrade(&self) -> Option<Tx> {
        match self {
            WeakTx::Typed(tx) => tx.upgrade().map(Tx::Typed),
            WeakTx::Bytes(tx) => tx.upgrade().map(Tx::Bytes),
        }
    }
}

type Opening = Pin<
    Box<dyn Future<Output = Result<tonic::Response<Streaming<SessionResponse>>, Status>> + Send>,
>;

/// How a stream treats server pings and its own reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Answer server pings in the background; the test never sees them.
    AutoPong,
    /// Forward server pings to the test like any other message; the test answers them.
    Manual,
    /// Do not read the response stream at all until [`Raw::start_reading`].
    Unread,
}

/// One raw `Session` stream.
#[derive(Debug)]
pub struct Raw {
    tx: Option<Tx>,
    rx: mpsc::UnboundedReceiver<Event>,
    auto_pong: Arc<AtomicBool>,
    pings: Arc<Mutex<Vec<(Instant, u64)>>>,
    go: Option<oneshot::Sender<()>>,
    reader: JoinHandle<()>,
    /// The id from the last `session_started`.
    pub session_id: u64,
    /// When the last `session_started` arrived.
    pub started_at: Option<Instant>,
    /// Whether the test has seen the stream end.
    pub ended: bool,
}

impl Drop for Raw {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl Raw {
    /// Opens a stream through the generated client; server pings are answered automatically.
    pub fn open(channel: &Channel) -> Raw {
        Raw::open_mode(channel, Mode::AutoPong)
    }

    /// Opens a stream through the generated client in the given mode.
    pub fn open_mode(channel: &Channel, mode: Mode) -> Raw {
        let (tx, rx) = mpsc::unbounded_channel::<SessionRequest>();
        let mut client = CoordinationServiceClient::new(channel.clone());
        let opening: Opening =
            Box::pin(async move { client.session(UnboundedReceiverStream::new(rx)).await });
        Raw::spawn(Tx::Typed(tx), opening, mode)
    }

    /// Opens a stream whose requests are sent as raw bytes (see [`Raw::send_bytes`]);
    /// typed requests are encoded with prost. Server pings are answered automatically.
    pub fn open_bytes(channel: &Channel) -> Raw {
        let (tx, rx) = mpsc::unbounded_channel::<RawBytes>();
        let mut grpc = tonic::client::Grpc::new(channel.clone());
        let opening: Opening = Box::pin(async move {
            grpc.ready()
                .await
                .map_err(|e| Status::unknown(format!("not ready: {e}")))?;
            grpc.streaming(
                tonic::Request::new(UnboundedReceiverStream::new(rx)),
                tonic::codegen::http::uri::PathAndQuery::from_static(
                    "/Ydb.Coordination.V1.CoordinationService/Session",
                ),
                tonic_prost::ProstCodec::<RawBytes, SessionResponse>::default(),
            )
            .await
        });
        Raw::spawn(Tx::Bytes(tx), opening, Mode::AutoPong)
    }

    fn spawn(tx: Tx, opening: Opening, mode: Mode) -> Raw {
        let (out_tx, out_rx) = mpsc::unbounded_channel();
        let auto_pong = Arc::new(AtomicBool::new(mode == Mode::AutoPong));
        let pings = Arc::new(Mutex::new(Vec::new()));
        let (go_tx, go_rx) = oneshot::channel();
        let go = if mode == Mode::Unread {
            Some(go_tx)
        } else {
            let _ = go_tx.send(());
            None
        };
        let reader = tokio::spawn(read_loop(
            opening,
            out_tx,
            tx.downgrade(),
            auto_pong.clone(),
            pings.clone(),
            go_rx,
        ));
        Raw {
            tx: Some(tx),
            rx: out_rx,
            auto_pong,
            pings,
            go,
            reader,
            session_id: 0,
            started_at: None,
            ended: false,
        }
    }

    /// Opens a stream (auto-pong), starts a new session and waits for `session_started`.
    pub async fn new_session(channel: &Channel, timeout_millis: u64) -> Raw {
        Raw::attach(channel, 0, timeout_millis, 1, b"").await
    }

    /// Opens a stream (auto-pong), starts or reattaches and waits for `session_started`.
    pub async fn attach(
        channel: &Channel,
        session_id: u64,
        timeout_millis: u64,
        seq_no: u64,
        key: &[u8],
    ) -> Raw {
        let mut raw = Raw::open(channel);
        raw.start(NODE, session_id, timeout_millis, seq_no, key);
        let id = raw.started().await;
        if session_id != 0 {
            assert_eq!(id, session_id, "reattach must report the same session id");
        }
        raw
    }

    // ---- controls ----

    /// Turns automatic answering of server pings on or off.
    pub fn set_auto_pong(&self, on: bool) {
        self.auto_pong.store(on, Ordering::SeqCst);
    }

    /// Every server ping seen so far (arrival time, opaque), answered or not.
    pub fn pings(&self) -> Vec<(Instant, u64)> {
        self.pings.lock().unwrap().clone()
    }

    /// In [`Mode::Unread`], starts reading the (buffered) response stream.
    pub fn start_reading(&mut self) {
        if let Some(go) = self.go.take() {
            let _ = go.send(());
        }
    }

    /// Half-closes the request side (the client is gone as far as the server cares).
    pub fn disconnect(&mut self) {
        self.tx = None;
    }

    /// Half-closes and waits until the server has finished the stream, so the session is
    /// detached by the time this returns. Any end status is accepted.
    pub async fn close(&mut self) {
        self.disconnect();
        self.set_auto_pong(false);
        if self.ended {
            return;
        }
        loop {
            match self.next_event(GUARD).await {
                Event::End { .. } => break,
                Event::Msg { .. } => {}
            }
        }
        self.ended = true;
    }

    /// Waits up to `within` for the stream to end, skipping messages. Returns `None` when it
    /// did not end in time, else its end status (`None` inside for gRPC OK).
    pub async fn wait_end(&mut self, within: Duration) -> Option<Option<Status>> {
        if self.ended {
            return Some(None);
        }
        let deadline = Instant::now() + within;
        loop {
            match tokio::time::timeout_at(deadline, self.rx.recv()).await {
                Ok(Some(Event::End { status, .. })) => {
                    self.ended = true;
                    return Some(status);
                }
                Ok(Some(Event::Msg { .. })) => {}
                Ok(None) | Err(_) => return None,
            }
        }
    }

    // ---- sending ----

    /// Sends a whole `SessionRequest` (possibly with `request: None`).
    pub fn send_msg(&self, msg: SessionRequest) {
        self.tx.as_ref().expect("stream already closed").send(msg);
    }

    /// Sends one request variant.
    pub fn send(&self, request: Rq) {
        self.send_msg(SessionRequest {
            request: Some(request),
        });
    }

    /// Sends a message encoded by hand; only for streams from [`Raw::open_bytes`].
    pub fn send_bytes(&self, bytes: Vec<u8>) {
        match self.tx.as_ref().expect("stream already closed") {
            Tx::Bytes(tx) => {
                let _ = tx.send(RawBytes(bytes));
            }
            Tx::Typed(_) => panic!("send_bytes needs Raw::open_bytes"),
        }
    }

    /// Sends `session_start`.
    pub fn start(&self, path: &str, session_id: u64, timeout_millis: u64, seq_no: u64, key: &[u8]) {
        self.start_with(session_request::SessionStart {
            path: path.to_string(),
            session_id,
            timeout_millis,
            description: String::new(),
            seq_no,
            protection_key: key.to_vec(),
        });
    }

    /// Sends a fully specified `session_start`.
    pub fn start_with(&self, start: session_request::SessionStart) {
        self.send(Rq::SessionStart(start));
    }

    /// Sends `session_stop`.
    pub fn stop(&self) {
        self.send(Rq::SessionStop(session_request::SessionStop {}));
    }

    /// Sends a client ping.
    pub fn ping(&self, opaque: u64) {
        self.send(Rq::Ping(session_request::PingPong { opaque }));
    }

    /// Sends a pong.
    pub fn pong(&self, opaque: u64) {
        self.send(Rq::Pong(session_request::PingPong { opaque }));
    }

    /// Sends `acquire_semaphore` with empty data.
    pub fn acquire(&self, req_id: u64, name: &str, timeout_millis: u64, count: u64, eph: bool) {
        self.acquire_data(req_id, name, timeout_millis, count, eph, b"");
    }

    /// Sends `acquire_semaphore`.
    pub fn acquire_data(
        &self,
        req_id: u64,
        name: &str,
        timeout_millis: u64,
        count: u64,
        ephemeral: bool,
        data: &[u8],
    ) {
        self.send(Rq::AcquireSemaphore(session_request::AcquireSemaphore {
            req_id,
            name: name.to_string(),
            timeout_millis,
            count,
            data: data.to_vec(),
            ephemeral,
        }));
    }

    /// Sends `release_semaphore`.
    pub fn release(&self, req_id: u64, name: &str) {
        self.send(Rq::ReleaseSemaphore(session_request::ReleaseSemaphore {
            req_id,
            name: name.to_string(),
        }));
    }

    /// Sends `create_semaphore`.
    pub fn create(&self, req_id: u64, name: &str, limit: u64, data: &[u8]) {
        self.send(Rq::CreateSemaphore(session_request::CreateSemaphore {
            req_id,
            name: name.to_string(),
            limit,
            data: data.to_vec(),
        }));
    }

    /// Sends `update_semaphore`.
    pub fn update(&self, req_id: u64, name: &str, data: &[u8]) {
        self.send(Rq::UpdateSemaphore(session_request::UpdateSemaphore {
            req_id,
            name: name.to_string(),
            data: data.to_vec(),
        }));
    }

    /// Sends `delete_semaphore`.
    pub fn delete(&self, req_id: u64, name: &str, force: bool) {
        self.send(Rq::DeleteSemaphore(session_request::DeleteSemaphore {
            req_id,
            name: name.to_string(),
            force,
        }));
    }

    /// Sends `describe_semaphore` with owners and waiters and no watch.
    pub fn describe(&self, req_id: u64, name: &str) {
        self.watch(req_id, name, false, false);
    }

    /// Sends `describe_semaphore` with owners and waiters and the given watch flags.
    pub fn watch(&self, req_id: u64, name: &str, watch_data: bool, watch_owners: bool) {
        self.send(Rq::DescribeSemaphore(session_request::DescribeSemaphore {
            req_id,
            name: name.to_string(),
            include_owners: true,
            include_waiters: true,
            watch_data,
            watch_owners,
        }));
    }

    // ---- receiving ----

    /// The next event within `within`; panics when none arrives.
    pub async fn next_event(&mut self, within: Duration) -> Event {
        match timeout(within, self.rx.recv()).await {
            Ok(Some(event)) => {
                if matches!(event, Event::End { .. }) {
                    self.ended = true;
                }
                event
            }
            Ok(None) => panic!("reader task is gone"),
            Err(_) => panic!("nothing arrived within {within:?}"),
        }
    }

    /// The next message (with its arrival time); panics if the stream ends instead.
    pub async fn recv_at(&mut self) -> (Instant, Rs) {
        match self.next_event(GUARD).await {
            Event::Msg { at, msg } => (at, msg.response.expect("response with an empty oneof")),
            Event::End { status, .. } => panic!("stream ended ({status:?}) instead of a message"),
        }
    }

    /// The next message; panics if the stream ends instead.
    pub async fn recv(&mut self) -> Rs {
        self.recv_at().await.1
    }

    /// Asserts nothing arrives (not even the end of the stream) for `d`.
    pub async fn expect_quiet(&mut self, d: Duration) {
        if let Ok(event) = timeout(d, self.rx.recv()).await {
            panic!("expected silence, got {event:?}");
        }
    }

    /// Expects the stream to end with gRPC OK and nothing before that.
    pub async fn expect_end_ok(&mut self) {
        match self.next_event(GUARD).await {
            Event::End { status: None, .. } => {}
            other => panic!("expected the stream to finish with gRPC OK, got {other:?}"),
        }
    }

    /// Expects the stream to end with the given gRPC status and no message before that.
    pub async fn expect_end_code(&mut self, code: tonic::Code) {
        match self.next_event(GUARD).await {
            Event::End {
                status: Some(s), ..
            } => assert_eq!(s.code(), code, "stream end status: {s:?}"),
            other => panic!("expected the stream to end with {code:?}, got {other:?}"),
        }
    }

    /// Expects `session_started`, records and returns its id.
    pub async fn started(&mut self) -> u64 {
        match self.recv_at().await {
            (at, Rs::SessionStarted(s)) => {
                self.session_id = s.session_id;
                self.started_at = Some(at);
                s.session_id
            }
            other => panic!("expected session_started, got {other:?}"),
        }
    }

    /// Expects `failure{status}` as the next message, then the stream finishing with gRPC OK.
    /// Returns when the failure arrived.
    pub async fn expect_failure(&mut self, status: StatusCode) -> Instant {
        let at = match self.recv_at().await {
            (at, Rs::Failure(f)) => {
                assert_status(f.status, status);
                at
            }
            other => panic!("expected failure {}, got {other:?}", st(status as i32)),
        };
        self.expect_end_ok().await;
        at
    }

    /// Expects `session_stopped{id}` and the stream finishing with gRPC OK.
    pub async fn expect_stopped(&mut self, session_id: u64) {
        match self.recv().await {
            Rs::SessionStopped(s) => assert_eq!(s.session_id, session_id),
            other => panic!("expected session_stopped, got {other:?}"),
        }
        self.expect_end_ok().await;
    }

    /// Expects `acquire_semaphore_pending{req_id}`.
    pub async fn expect_pending(&mut self, req_id: u64) {
        match self.recv().await {
            Rs::AcquireSemaphorePending(p) => assert_eq!(p.req_id, req_id, "pending req_id"),
            other => panic!("expected acquire_semaphore_pending({req_id}), got {other:?}"),
        }
    }

    /// Expects `acquire_semaphore_result{req_id, status, acquired}`; returns its arrival time.
    pub async fn expect_acquire(
        &mut self,
        req_id: u64,
        status: StatusCode,
        acquired: bool,
    ) -> Instant {
        match self.recv_at().await {
            (at, Rs::AcquireSemaphoreResult(r)) => {
                assert_eq!(r.req_id, req_id, "acquire result req_id");
                assert_status(r.status, status);
                assert_eq!(r.acquired, acquired, "acquired flag of req {req_id}");
                at
            }
            other => panic!("expected acquire_semaphore_result({req_id}), got {other:?}"),
        }
    }

    /// Expects a successful acquire.
    pub async fn expect_acquired(&mut self, req_id: u64) -> Instant {
        self.expect_acquire(req_id, StatusCode::Success, true).await
    }

    /// Expects `release_semaphore_result{req_id, status, released}`.
    pub async fn expect_release(&mut self, req_id: u64, status: StatusCode, released: bool) {
        match self.recv().await {
            Rs::ReleaseSemaphoreResult(r) => {
                assert_eq!(r.req_id, req_id, "release result req_id");
                assert_status(r.status, status);
                assert_eq!(r.released, released, "released flag of req {req_id}");
            }
            other => panic!("expected release_semaphore_result({req_id}), got {other:?}"),
        }
    }

    /// Expects `create_semaphore_result{req_id, status}`.
    pub async fn expect_create(&mut self, req_id: u64, status: StatusCode) {
        match self.recv().await {
            Rs::CreateSemaphoreResult(r) => {
                assert_eq!(r.req_id, req_id, "create result req_id");
                assert_status(r.status, status);
            }
            other => panic!("expected create_semaphore_result({req_id}), got {other:?}"),
        }
    }

    /// Expects `update_semaphore_result{req_id, status}`.
    pub async fn expect_update(&mut self, req_id: u64, status: StatusCode) {
        match self.recv().await {
            Rs::UpdateSemaphoreResult(r) => {
                assert_eq!(r.req_id, req_id, "update result req_id");
                assert_status(r.status, status);
            }
            other => panic!("expected update_semaphore_result({req_id}), got {other:?}"),
        }
    }

    /// Expects `delete_semaphore_result{req_id, status}`.
    pub async fn expect_delete(&mut self, req_id: u64, status: StatusCode) {
        match self.recv().await {
            Rs::DeleteSemaphoreResult(r) => {
                assert_eq!(r.req_id, req_id, "delete result req_id");
                assert_status(r.status, status);
            }
            other => panic!("expected delete_semaphore_result({req_id}), got {other:?}"),
        }
    }

    /// Expects `describe_semaphore_result{req_id, status}` and returns it.
    pub async fn expect_describe(
        &mut self,
        req_id: u64,
        status: StatusCode,
    ) -> session_response::DescribeSemaphoreResult {
        match self.recv().await {
            Rs::DescribeSemaphoreResult(r) => {
                assert_eq!(r.req_id, req_id, "describe result req_id");
                assert_status(r.status, status);
                r
            }
            other => panic!("expected describe_semaphore_result({req_id}), got {other:?}"),
        }
    }

    /// Expects `describe_semaphore_changed{req_id, data_changed, owners_changed}`.
    pub async fn expect_changed(&mut self, req_id: u64, data_changed: bool, owners_changed: bool) {
        match self.recv().await {
            Rs::DescribeSemaphoreChanged(c) => {
                assert_eq!(c.req_id, req_id, "changed req_id");
                assert_eq!(
                    (c.data_changed, c.owners_changed),
                    (data_changed, owners_changed),
                    "(data_changed, owners_changed)"
                );
            }
            other => panic!("expected describe_semaphore_changed({req_id}), got {other:?}"),
        }
    }

    /// Describes `name` (owners and waiters, no watch) and returns the description.
    pub async fn describe_ok(&mut self, req_id: u64, name: &str) -> SemaphoreDescription {
        self.describe(req_id, name);
        let r = self.expect_describe(req_id, StatusCode::Success).await;
        assert!(!r.watch_added);
        r.semaphore_description
            .expect("successful describe without a description")
    }

    /// Describes `name` and expects NOT_FOUND.
    pub async fn describe_missing(&mut self, req_id: u64, name: &str) {
        self.describe(req_id, name);
        let r = self.expect_describe(req_id, StatusCode::NotFound).await;
        assert!(r.semaphore_description.is_none());
        assert!(!r.watch_added);
    }
}

async fn read_loop(
    opening: Opening,
    out: mpsc::UnboundedSender<Event>,
    pong_tx: WeakTx,
    auto_pong: Arc<AtomicBool>,
    pings: Arc<Mutex<Vec<(Instant, u64)>>>,
    go: oneshot::Receiver<()>,
) {
    let mut stream = match opening.await {
        Ok(response) => response.into_inner(),
        Err(status) => {
            let _ = out.send(Event::End {
                at: Instant::now(),
                status: Some(status),
            });
            return;
        }
    };
    // In `Mode::Unread` this waits until the test lets us read.
    let _ = go.await;
    loop {
        let next = stream.message().await;
        let at = Instant::now();
        let event = match next {
            Ok(Some(msg)) => {
                if let Some(Rs::Ping(p)) = &msg.response {
                    pings.lock().unwrap().push((at, p.opaque));
                    if auto_pong.load(Ordering::SeqCst) {
                        if let Some(tx) = pong_tx.upgrade() {
                            tx.send(SessionRequest {
                                request: Some(Rq::Pong(session_request::PingPong {
                                    opaque: p.opaque,
                                })),
                            });
                        }
                        continue;
                    }
                }
                Event::Msg { at, msg }
            }
            Ok(None) => Event::End { at, status: None },
            Err(status) => Event::End {
                at,
                status: Some(status),
            },
        };
        let end = matches!(event, Event::End { .. });
        if out.send(event).is_err() || end {
            return;
        }
    }
}

/// Checks that the emulator still serves a brand-new session normally: start, create,
/// acquire, describe, release, delete, stop.
pub async fn assert_serves_fresh_session(channel: &Channel) {
    let mut s = Raw::new_session(channel, 30_000).await;
    let name = format!("fresh-{}", s.session_id);
    s.create(1, &name, 1, b"");
    s.expect_create(1, StatusCode::Success).await;
    s.acquire(2, &name, 0, 1, false);
    s.expect_acquired(2).await;
    let d = s.describe_ok(3, &name).await;
    assert_eq!(sessions_of(&d.owners), vec![s.session_id]);
    s.release(4, &name);
    s.expect_release(4, StatusCode::Success, true).await;
    s.delete(5, &name, false);
    s.expect_delete(5, StatusCode::Success).await;
    s.stop();
    let id = s.session_id;
    s.expect_stopped(id).await;
}
