//! A scripted coordination server for driver tests (in the spirit of `tower-test`'s
//! `mock::pair`).
//!
//! [`Peer`] is a tonic server on `127.0.0.1:0` that implements only the coordination
//! `Session` stream (and answers discovery with an error). It does not think for itself: the
//! test receives every [`SessionRequest`] the client sends, tagged with the index of the
//! stream it came on (0 for the first `Session` call, 1 for the next, ...), and decides what
//! to send back on each stream: any [`SessionResponse`] (well formed or not), the end of the
//! stream (gRPC OK), a gRPC error, or a cut of every TCP connection.
//!
//! The only thing it does on its own, and only while [`Peer::set_auto_pong`] is on (the
//! default), is to answer the client's `ping` with a `pong` of the same opaque, as YDB's
//! stream actor does. The ping is still reported to the test.
//!
//! Every wait is bounded by [`GUARD`] so that a bug fails the test instead of hanging it;
//! with paused time the bound costs no wall time.

#![allow(
    dead_code,
    unused_imports,
    unreachable_pub,
    missing_docs,
    clippy::unwrap_used,
    clippy::expect_used
)]

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::{Future, IntoFuture};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::{Stream, StreamExt};
use tokio::io::DuplexStream;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::body::Body;
use tonic::codegen::http;
use tonic::server::NamedService;
use tonic::{Request, Response, Status, Streaming};
use ydb_coordination::{Client, Session, SessionOptions};

pub use ydb_grpc::ydb_proto::coordination::{
    SemaphoreDescription, SemaphoreSession, SessionRequest, SessionResponse, session_request,
    session_response,
};
pub use ydb_grpc::ydb_proto::issue::IssueMessage;
pub use ydb_grpc::ydb_proto::status_ids::StatusCode;

/// Request variants.
pub use session_request::Request as Rq;
/// Response variants.
pub use session_response::Response as Rs;

/// The bound on any single wait (paused time makes it free).
pub const GUARD: Duration = Duration::from_secs(120);

/// The node path every test uses (the peer accepts any path).
pub const NODE: &str = "/local/app";

/// Awaits `f` or fails the test after [`GUARD`].
pub async fn within<F: IntoFuture>(f: F) -> F::Output {
    match tokio::time::timeout(GUARD, f).await {
        Ok(v) => v,
        Err(_) => panic!("a test step did not finish within {GUARD:?}"),
    }
}

/// What the test sends down one stream.
#[derive(Debug)]
enum Out {
    Message(SessionResponse),
    Error(Status),
    End,
}

#[derive(Debug)]
struct Shared {
    requests: mpsc::UnboundedSender<(usize, SessionRequest)>,
    streams: Mutex<Vec<StreamSlot>>,
    auto_pong: AtomicBool,
    cut: Mutex<CancellationToken>,
    shutdown: CancellationToken,
    /// TCP connections accepted so far.
    connections: AtomicUsize,
}

#[derive(Debug)]
struct StreamSlot {
    out: mpsc::UnboundedSender<Out>,
    /// Set when the client's request side of the stream ended (or broke).
    closed: Arc<AtomicBool>,
    /// The `x-ydb-auth-ticket` the stream was opened with.
    ticket: Option<String>,
}

impl Shared {
    fn streams(&self) -> std::sync::MutexGuard<'_, Vec<StreamSlot>> {
        self.streams.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The scripted server. Dropping it shuts the server down.
#[derive(Debug)]
pub struct Peer {
    addr: SocketAddr,
    requests: mpsc::UnboundedReceiver<(usize, SessionRequest)>,
    /// Requests read past by [`Peer::barrier`], returned before newer ones.
    buffered: VecDeque<(usize, SessionRequest)>,
    shared: Arc<Shared>,
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.shared.shutdown.cancel();
    }
}

impl Peer {
    /// Starts the server on `127.0.0.1:0`.
    pub async fn start() -> Self {
        let listener = within(TcpListener::bind("127.0.0.1:0")).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        let (requests_tx, requests) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            requests: requests_tx,
            streams: Mutex::new(Vec::new()),
            auto_pong: AtomicBool::new(true),
            cut: Mutex::new(shutdown.child_token()),
            shutdown: shutdown.clone(),
            connections: AtomicUsize::new(0),
        });
        let (conn_tx, conn_rx) = mpsc::unbounded_channel::<std::io::Result<DuplexStream>>();
        let server = tonic::transport::Server::builder()
            .add_service(CoordinationSvc(shared.clone()))
            .add_service(DiscoverySvc)
            .serve_with_incoming_shutdown(
                UnboundedReceiverStream::new(conn_rx),
                shutdown.clone().cancelled_owned(),
            );
        tokio::spawn(async move {
            let _ = server.await;
        });
        tokio::spawn(accept_loop(listener, conn_tx, shared.clone()));
        Self {
            addr,
            requests,
            buffered: VecDeque::new(),
            shared,
        }
    }

    /// How many TCP connections the server has accepted.
    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::SeqCst)
    }

    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `grpc://127.0.0.1:PORT/local`.
    pub fn connection_string(&self) -> String {
        format!("grpc://{}/local", self.addr)
    }

    /// A client for this server, discovery off.
    pub async fn client(&self) -> Client {
        within(
            Client::builder(self.connection_string())
                .discovery(false)
                .build(),
        )
        .await
        .unwrap()
    }

    /// Whether the peer answers the client's pings by itself (default on).
    pub fn set_auto_pong(&self, on: bool) {
        self.shared.auto_pong.store(on, Ordering::SeqCst);
    }

    /// How many `Session` streams the client has opened so far.
    pub fn stream_count(&self) -> usize {
        self.shared.streams().len()
    }

    /// Whether the client's side of stream `index` has ended.
    pub fn client_closed(&self, index: usize) -> bool {
        self.shared
            .streams()
            .get(index)
            .is_some_and(|s| s.closed.load(Ordering::SeqCst))
    }

    /// The `x-ydb-auth-ticket` header stream `index` was opened with.
    pub fn ticket(&self, index: usize) -> Option<String> {
        self.shared
            .streams()
            .get(index)
            .and_then(|s| s.ticket.clone())
    }

    /// The next request on any stream, pings and pongs included.
    pub async fn recv_any(&mut self) -> (usize, SessionRequest) {
        if let Some(r) = self.buffered.pop_front() {
            return r;
        }
        within(self.requests.recv())
            .await
            .expect("the peer's request channel closed")
    }

    /// The next request on any stream within `wait`, pings and pongs included; `None` if
    /// nothing came.
    pub async fn recv_any_within(&mut self, wait: Duration) -> Option<(usize, SessionRequest)> {
        if let Some(r) = self.buffered.pop_front() {
            return Some(r);
        }
        tokio::time::timeout(wait, self.requests.recv())
            .await
            .ok()
            .flatten()
    }

    /// The next request on any stream that is not a ping or a pong.
    pub async fn recv(&mut self) -> (usize, Rq) {
        loop {
            let (index, r) = self.recv_any().await;
            match r.request {
                Some(Rq::Ping(_) | Rq::Pong(_)) => {}
                Some(r) => return (index, r),
                None => panic!("the client sent an empty request on stream {index}"),
            }
        }
    }

    /// The next request that is not a ping or a pong within `wait`; `None` if none came.
    pub async fn recv_within(&mut self, wait: Duration) -> Option<(usize, Rq)> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let (index, r) = self.recv_any_within(left).await?;
            match r.request {
                Some(Rq::Ping(_) | Rq::Pong(_)) => {}
                Some(r) => return Some((index, r)),
                None => panic!("the client sent an empty request on stream {index}"),
            }
        }
    }

    /// Sends a message on stream `index`.
    pub fn send_message(&self, index: usize, message: SessionResponse) {
        let streams = self.shared.streams();
        let slot = streams.get(index).expect("no such stream");
        let _ = slot.out.send(Out::Message(message));
    }

    /// Sends a response variant on stream `index`.
    pub fn send(&self, index: usize, r: Rs) {
        self.send_message(index, response(r));
    }

    /// A clonable sender of messages on stream `index`, for use from other tasks.
    pub fn sender(&self, index: usize) -> StreamSender {
        let streams = self.shared.streams();
        let slot = streams.get(index).expect("no such stream");
        StreamSender(slot.out.clone())
    }

    /// Sends a server ping on stream `index` every `period` (opaques 1001, 1002, ...), as
    /// YDB does, until the returned task is aborted or the stream ends.
    pub fn pinger(&self, index: usize, period: Duration) -> tokio::task::JoinHandle<()> {
        let sender = self.sender(index);
        tokio::spawn(async move {
            let mut opaque = 1000u64;
            loop {
                tokio::time::sleep(period).await;
                opaque += 1;
                if !sender.send(ping(opaque)) {
                    return;
                }
            }
        })
    }

    /// Ends stream `index` cleanly (gRPC OK, no `failure`).
    pub fn end(&self, index: usize) {
        if let Some(slot) = self.shared.streams().get(index) {
            let _ = slot.out.send(Out::End);
        }
    }

    /// Ends stream `index` with a gRPC error.
    pub fn error(&self, index: usize, status: Status) {
        if let Some(slot) = self.shared.streams().get(index) {
            let _ = slot.out.send(Out::Error(status));
        }
    }

    /// Sends `failure{status}` on stream `index` and ends it, as YDB does.
    pub fn fail(&self, index: usize, status: StatusCode) {
        self.send_message(index, failure(status, "scripted failure"));
        self.end(index);
    }

    /// Cuts every open TCP connection at once (the abrupt end: no trailers, no failure).
    pub fn cut(&self) {
        let fresh = self.shared.shutdown.child_token();
        let old = std::mem::replace(
            &mut *self
                .shared
                .cut
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
            fresh,
        );
        old.cancel();
    }

    /// Sends a server ping with `opaque` on stream `index` and waits for the client's pong of
    /// that opaque. Everything else that arrives meanwhile is kept for the next `recv`. When
    /// it returns, the client has processed every message sent on `index` before the ping.
    pub async fn barrier(&mut self, index: usize, opaque: u64) {
        self.send(index, Rs::Ping(session_response::PingPong { opaque }));
        let mut held = Vec::new();
        loop {
            let (i, r) = match self.buffered.pop_front() {
                Some(r) => r,
                None => within(self.requests.recv())
                    .await
                    .expect("the peer's request channel closed"),
            };
            if i == index && matches!(&r.request, Some(Rq::Pong(p)) if p.opaque == opaque) {
                break;
            }
            held.push((i, r));
        }
        for r in held.into_iter().rev() {
            self.buffered.push_front(r);
        }
    }

    /// Waits for a `session_start`, answers `session_started{session_id}` and returns the
    /// stream index and the start message.
    pub async fn accept_start(
        &mut self,
        session_id: u64,
    ) -> (usize, session_request::SessionStart) {
        let (index, r) = self.recv().await;
        let Rq::SessionStart(start) = r else {
            panic!("expected session_start on stream {index}, got {r:?}");
        };
        self.send(
            index,
            Rs::SessionStarted(session_response::SessionStarted {
                session_id,
                timeout_millis: 0,
            }),
        );
        (index, start)
    }

    /// A client and a session attached to this peer as `session_id`, with the stream index
    /// and the `session_start` the client sent.
    pub async fn session(
        &mut self,
        session_id: u64,
        options: SessionOptions,
    ) -> (Client, Session, usize, session_request::SessionStart) {
        let client = self.client().await;
        let c = client.clone();
        let pending = tokio::spawn(async move { c.session(NODE, options).await });
        let (index, start) = self.accept_start(session_id).await;
        let session = within(pending).await.unwrap().unwrap();
        (client, session, index, start)
    }
}

/// Sends messages on one stream from any task.
#[derive(Debug, Clone)]
pub struct StreamSender(mpsc::UnboundedSender<Out>);

impl StreamSender {
    /// Sends a response variant; `false` if the stream is gone.
    pub fn send(&self, r: Rs) -> bool {
        self.0.send(Out::Message(response(r))).is_ok()
    }
}

// ---- message builders ---------------------------------------------------------------------

/// Wraps a variant.
pub fn response(r: Rs) -> SessionResponse {
    SessionResponse { response: Some(r) }
}

/// `failure{status}` with one issue.
pub fn failure(status: StatusCode, message: &str) -> SessionResponse {
    response(Rs::Failure(session_response::Failure {
        status: status as i32,
        issues: vec![IssueMessage {
            message: message.to_string(),
            ..IssueMessage::default()
        }],
    }))
}

/// A semaphore description with no owners or waiters.
pub fn description(name: &str, data: &[u8]) -> SemaphoreDescription {
    SemaphoreDescription {
        name: name.to_string(),
        data: data.to_vec(),
        limit: 1,
        ..SemaphoreDescription::default()
    }
}

/// A successful `describe_semaphore_result`.
pub fn describe_ok(req_id: u64, d: SemaphoreDescription) -> Rs {
    Rs::DescribeSemaphoreResult(session_response::DescribeSemaphoreResult {
        req_id,
        status: StatusCode::Success as i32,
        issues: Vec::new(),
        semaphore_description: Some(d),
        watch_added: false,
    })
}

/// A `create_semaphore_result` with `status`.
pub fn create_result(req_id: u64, status: StatusCode) -> Rs {
    Rs::CreateSemaphoreResult(session_response::CreateSemaphoreResult {
        req_id,
        status: status as i32,
        issues: Vec::new(),
    })
}

/// A successful `release_semaphore_result`.
pub fn release_ok(req_id: u64, released: bool) -> Rs {
    Rs::ReleaseSemaphoreResult(session_response::ReleaseSemaphoreResult {
        req_id,
        status: StatusCode::Success as i32,
        issues: Vec::new(),
        released,
    })
}

/// An `acquire_semaphore_result` with `status` and `acquired`.
pub fn acquire_result(req_id: u64, status: StatusCode, acquired: bool) -> Rs {
    Rs::AcquireSemaphoreResult(session_response::AcquireSemaphoreResult {
        req_id,
        status: status as i32,
        issues: Vec::new(),
        acquired,
    })
}

/// A server ping.
pub fn ping(opaque: u64) -> Rs {
    Rs::Ping(session_response::PingPong { opaque })
}

// ---- the server ---------------------------------------------------------------------------

/// Accepts TCP connections and relays each to the tonic server through an in-memory pipe
/// that [`Peer::cut`] can sever.
async fn accept_loop(
    listener: TcpListener,
    server: mpsc::UnboundedSender<std::io::Result<DuplexStream>>,
    shared: Arc<Shared>,
) {
    loop {
        let accepted = tokio::select! {
            _ = shared.shutdown.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let Ok((mut tcp, _)) = accepted else {
            continue;
        };
        let _ = tcp.set_nodelay(true);
        shared.connections.fetch_add(1, Ordering::SeqCst);
        let (mut near, far) = tokio::io::duplex(4 * 1024 * 1024);
        if server.send(Ok(far)).is_err() {
            return;
        }
        let cut = shared
            .cut
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = cut.cancelled() => {}
                _ = tokio::io::copy_bidirectional(&mut tcp, &mut near) => {}
            }
        });
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;
type OutStream = Pin<Box<dyn Stream<Item = Result<SessionResponse, Status>> + Send + 'static>>;

#[derive(Debug, Clone)]
struct CoordinationSvc(Arc<Shared>);

impl NamedService for CoordinationSvc {
    const NAME: &'static str = "Ydb.Coordination.V1.CoordinationService";
}

#[derive(Debug, Clone)]
struct DiscoverySvc;

impl NamedService for DiscoverySvc {
    const NAME: &'static str = "Ydb.Discovery.V1.DiscoveryService";
}

struct SessionSvc(Arc<Shared>);

impl tonic::server::StreamingService<SessionRequest> for SessionSvc {
    type Response = SessionResponse;
    type ResponseStream = OutStream;
    type Future = std::future::Ready<Result<Response<OutStream>, Status>>;

    fn call(&mut self, request: Request<Streaming<SessionRequest>>) -> Self::Future {
        let shared = self.0.clone();
        let (out_tx, out_rx) = mpsc::unbounded_channel();
        let closed = Arc::new(AtomicBool::new(false));
        let ticket = request
            .metadata()
            .get("x-ydb-auth-ticket")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let index = {
            let mut streams = shared.streams();
            streams.push(StreamSlot {
                out: out_tx.clone(),
                closed: closed.clone(),
                ticket,
            });
            streams.len() - 1
        };
        let mut inbound = request.into_inner();
        tokio::spawn(async move {
            while let Some(Ok(msg)) = inbound.next().await {
                if shared.auto_pong.load(Ordering::SeqCst)
                    && let Some(Rq::Ping(p)) = &msg.request
                {
                    let _ = out_tx.send(Out::Message(response(Rs::Pong(
                        session_response::PingPong { opaque: p.opaque },
                    ))));
                }
                if shared.requests.send((index, msg)).is_err() {
                    break;
                }
            }
            closed.store(true, Ordering::SeqCst);
        });
        let out = futures::stream::unfold(Some(out_rx), |rx| async move {
            let mut rx = rx?;
            match rx.recv().await? {
                Out::Message(m) => Some((Ok(m), Some(rx))),
                Out::Error(s) => Some((Err(s), None)),
                Out::End => None,
            }
        });
        std::future::ready(Ok(Response::new(Box::pin(out) as OutStream)))
    }
}

impl<B> tonic::codegen::Service<http::Request<B>> for CoordinationSvc
where
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<tonic::codegen::StdError> + Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let shared = self.0.clone();
        if req.uri().path() == "/Ydb.Coordination.V1.CoordinationService/Session" {
            Box::pin(async move {
                let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::default())
                    .max_encoding_message_size(usize::MAX)
                    .max_decoding_message_size(64 * 1024 * 1024);
                Ok(grpc.streaming(SessionSvc(shared), req).await)
            })
        } else {
            Box::pin(async { Ok(Status::unimplemented("not scripted").into_http()) })
        }
    }
}

impl<B> tonic::codegen::Service<http::Request<B>> for DiscoverySvc
where
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<tonic::codegen::StdError> + Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _req: http::Request<B>) -> Self::Future {
        // Discovery is never part of the script: clients must fall back to the seed endpoint.
        Box::pin(async { Ok(Status::unavailable("discovery is not scripted").into_http()) })
    }
}
