//! The async shell: tonic services for `Ydb.Coordination.V1.CoordinationService` and
//! `Ydb.Discovery.V1.DiscoveryService`, one task per `Session` stream (first-message checks,
//! the server's ping cadence, dispatch into the state machine) and one timer task.

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::{FutureExt, Stream, StreamExt};
use prost::Message;
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::body::Body;
use tonic::codegen::http;
use tonic::server::NamedService;
use tonic::{Request, Response, Status, Streaming};
use ydb_grpc::ydb_proto::VirtualTimestamp;
use ydb_grpc::ydb_proto::auth::{LoginRequest, LoginResponse, LoginResult};
use ydb_grpc::ydb_proto::coordination::{
    AlterNodeRequest, AlterNodeResponse, CreateNodeRequest, CreateNodeResponse,
    DescribeNodeRequest, DescribeNodeResponse, DescribeNodeResult, DropNodeRequest,
    DropNodeResponse,
};
use ydb_grpc::ydb_proto::discovery::{
    EndpointInfo, ListEndpointsRequest, ListEndpointsResponse, ListEndpointsResult, WhoAmIRequest,
    WhoAmIResponse, WhoAmIResult,
};
use ydb_grpc::ydb_proto::operations::Operation;
use ydb_grpc::ydb_proto::scheme::{Entry, entry};

use super::state::{Effect, StreamId};
use super::world::{AdminError, Node, Outbound, Tablet, World};
use crate::proto::{self, SessionRequest, SessionResponse, StatusCode, session_request};

// Tests use `unwrap()` freely (house style, as in redis-rs); the library code never does.
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
#[path = "service_tests.rs"]
mod tests;

/// Token checking, when the emulator was built with users or tokens.
#[derive(Debug, Default)]
pub(crate) struct Auth {
    /// user -> password, for `AuthService/Login`.
    pub(crate) users: HashMap<String, String>,
    /// Tokens accepted in `x-ydb-auth-ticket` (fixed ones and those issued by login).
    pub(crate) tokens: std::sync::Mutex<HashSet<String>>,
}

/// Everything the services, the stream tasks and the handle share.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) database: String,
    /// The endpoints `ListEndpoints` returns.
    pub(crate) advertised: std::sync::Mutex<Vec<std::net::SocketAddr>>,
    /// Whether the listeners speak TLS (advertised endpoints say `ssl`).
    pub(crate) tls: bool,
    /// The nodes, each behind its own lock, and the rate limiters.
    pub(crate) world: World,
    /// Woken whenever state changed, so the timer task recomputes its deadline.
    pub(crate) changed: Notify,
    pub(crate) shutdown: CancellationToken,
    /// `None`: every request is allowed.
    pub(crate) auth: Option<Auth>,
    /// The largest gRPC message received or sent, in bytes (SPEC.md §7).
    pub(crate) max_message: usize,
}

impl Shared {
    /// Runs `f` on the world and wakes the timer task.
    pub(crate) fn with_world<T>(&self, f: impl FnOnce(&World) -> T) -> T {
        let out = f(&self.world);
        self.changed.notify_one();
        out
    }

    /// Runs `f` on a node under its lock, then wakes the timer task.
    pub(crate) fn with_node<T>(&self, node: &Node, f: impl FnOnce(&mut Tablet<'_>) -> T) -> T {
        let out = f(&mut node.lock());
        self.changed.notify_one();
        out
    }

    /// Whether a request carries an accepted token (always, when auth is off).
    pub(crate) fn authorized<T>(&self, req: &Request<T>) -> bool {
        let Some(auth) = &self.auth else {
            return true;
        };
        let Some(ticket) = req
            .metadata()
            .get("x-ydb-auth-ticket")
            .and_then(|v| v.to_str().ok())
        else {
            return false;
        };
        auth.tokens
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(ticket)
    }

    /// `AuthService/Login`: a fresh token for a known user and password.
    fn login(&self, user: &str, password: &str) -> Result<String, AdminError> {
        let Some(auth) = &self.auth else {
            // Without users, any login succeeds; the token is not checked anyway.
            return Ok(format!("{user}@emulator"));
        };
        if auth.users.get(user).is_none_or(|p| p != password) {
            return Err(AdminError {
                status: StatusCode::Unauthorized,
                message: "Invalid user or password".to_string(),
            });
        }
        let token = format!("{user}@emulator:{:016x}", rand::random::<u64>());
        auth.tokens
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(token.clone());
        Ok(token)
    }

    /// A node path from a request: absolute, or relative to the request's database.
    fn resolve(&self, database: Option<&str>, path: &str) -> String {
        if path.starts_with('/') {
            return path.trim_end_matches('/').to_string();
        }
        let db = database.unwrap_or(&self.database).trim_end_matches('/');
        format!("{db}/{}", path.trim_end_matches('/'))
    }
}

/// Fires expiry and waiter deadlines.
pub(crate) async fn run_timers(shared: Arc<Shared>) {
    loop {
        let next = shared.world.next_deadline();
        let sleep = async {
            match next {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = shared.shutdown.cancelled() => return,
            _ = shared.changed.notified() => {}
            _ = sleep => shared.world.advance(Instant::now()),
        }
    }
}

/// The server's ping period for a session timeout (YDB: `clamp(timeout / 3, 10 ms, 5 s)`).
pub(crate) fn ping_period(timeout_millis: u64) -> Duration {
    Duration::from_millis((timeout_millis / 3).clamp(10, 5_000))
}

pub(crate) fn database_of<T>(req: &Request<T>) -> Option<String> {
    req.metadata()
        .get("x-ydb-database")
        .and_then(|v| v.to_str().ok())
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// One `Session` stream from first message to detach.
async fn run_stream(
    shared: Arc<Shared>,
    database: Option<String>,
    authorized: bool,
    mut inbound: Streaming<SessionRequest>,
    tx: mpsc::UnboundedSender<Outbound>,
) {
    let closed = shared.shutdown.child_token();
    let id = shared.world.open_stream();
    let attached = tokio::select! {
        _ = closed.cancelled() => None,
        first = inbound.next() => {
            start(&shared, database.as_deref(), authorized, id, first, &tx, &closed)
        }
    };
    if let Some((node, timeout_millis)) = attached {
        let period = ping_period(timeout_millis);
        serve_attached(&shared, &node, id, inbound, &tx, &closed, period).await;
        shared.with_node(&node, |n| n.close_stream(Instant::now(), id));
    }
}

/// Handles the first message; returns the node and the session timeout when the session is
/// attached.
fn start(
    shared: &Shared,
    database: Option<&str>,
    authorized: bool,
    id: StreamId,
    first: Option<Result<SessionRequest, Status>>,
    tx: &mpsc::UnboundedSender<Outbound>,
    closed: &CancellationToken,
) -> Option<(Arc<Node>, u64)> {
    let Some(Ok(first)) = first else {
        return None;
    };
    let Some(session_request::Request::SessionStart(start)) = first.request else {
        let _ = tx.send(Outbound::Status(Status::invalid_argument(
            "First message must be a SessionStart",
        )));
        return None;
    };
    if start.path.is_empty() {
        let _ = tx.send(Outbound::Message(proto::failure(
            StatusCode::BadRequest,
            "KesusPath cannot be empty",
        )));
        return None;
    }
    let path = shared.resolve(database, &start.path);
    let node = shared.world.node(&path);
    // `None`: there is no such node (or it was dropped since it was looked up).
    let attached = node.as_deref().and_then(|node| {
        shared.with_node(node, |tablet| {
            if tablet.dropped() {
                return None;
            }
            if !authorized {
                let _ = tx.send(Outbound::Message(proto::failure(
                    StatusCode::Unauthorized,
                    "User has no access to the coordination node",
                )));
                return Some(None);
            }
            Some(tablet.open(Instant::now(), id, tx.clone(), closed.clone(), &start))
        })
    });
    let Some(session) = attached else {
        let _ = tx.send(Outbound::Message(proto::failure(
            StatusCode::NotFound,
            "Kesus not found",
        )));
        return None;
    };
    // The first ping follows `session_started` at once; it is sent by the stream loop
    // before it waits for anything.
    let node = node.filter(|_| session.is_some())?;
    Some((node, start.timeout_millis))
}

/// Serves an attached stream: requests, our pings, the client's pings and pongs.
async fn serve_attached(
    shared: &Shared,
    node: &Node,
    id: StreamId,
    mut inbound: Streaming<SessionRequest>,
    tx: &mpsc::UnboundedSender<Outbound>,
    closed: &CancellationToken,
    period: Duration,
) {
    let fail = |status: StatusCode, message: &str| {
        let _ = tx.send(Outbound::Message(proto::failure(status, message)));
    };
    let mut outstanding = send_ping(tx);
    let mut tick = tokio::time::interval_at(Instant::now() + period, period);
    loop {
        tokio::select! {
            biased;
            _ = closed.cancelled() => return,
            _ = tick.tick() => {
                if outstanding != 0 {
                    fail(StatusCode::Timeout, "Ping timeout");
                    return;
                }
                outstanding = send_ping(tx);
            }
            msg = inbound.next() => {
                let msg = match msg {
                    Some(Ok(msg)) => msg,
                    // tonic's refusal of a message over the limit: gRPC's own answer to
                    // it, as YDB's gRPC gives (SPEC.md §1.6).
                    Some(Err(e)) if e.code() == tonic::Code::OutOfRange => {
                        let why = format!("Received message larger than max: {}", e.message());
                        let _ = tx.send(Outbound::Status(Status::resource_exhausted(why)));
                        return;
                    }
                    _ => return,
                };
                use session_request::Request as R;
                match msg.request {
                    None => return fail(StatusCode::BadRequest, "Empty request"),
                    Some(R::Ping(p)) => send_pong(tx, p.opaque),
                    Some(R::Pong(p)) => {
                        if p.opaque != outstanding {
                            return fail(StatusCode::BadRequest, "Pong data mismatch");
                        }
                        outstanding = 0;
                    }
                    Some(R::SessionStart(_)) => {
                        return fail(StatusCode::BadRequest, "Session cannot be started twice");
                    }
                    Some(
                        R::Unsupported5(_)
                        | R::Unsupported6(_)
                        | R::Unsupported13(_)
                        | R::Unsupported14(_)
                        | R::Unsupported15(_),
                    ) => return fail(StatusCode::BadRequest, "Unimplemented request"),
                    Some(req) => {
                        let stopping = matches!(req, R::SessionStop(_));
                        let own = request(shared, node, id, req).unwrap_or_else(|| {
                            // The node was dropped under the stream.
                            fail(StatusCode::Unavailable, "Link failure");
                            closed.cancel();
                            Vec::new()
                        });
                        if stopping {
                            // A request that reached the server before the stop completed
                            // closes the stream with BAD_SESSION instead of
                            // `session_stopped`; the session is destroyed either way.
                            // Pings and pongs never reach the tablet, so only a semaphore
                            // request or another stop counts.
                            while let Some(Some(Ok(next))) = inbound.next().now_or_never() {
                                match next.request {
                                    Some(R::Ping(p)) => send_pong(tx, p.opaque),
                                    Some(R::Pong(_)) => {}
                                    _ => {
                                        fail(StatusCode::BadSession, "Session is not attached");
                                        return;
                                    }
                                }
                            }
                            shared.with_node(node, |n| n.apply(own));
                        }
                    }
                }
            }
        }
    }
}

/// A request from an attached stream on its node, under the node's lock (`None`: the node was
/// dropped). Returns what is held back: the stream's own answer to a stop, which YDB sends
/// only after the tablet destroyed the session.
fn request(
    shared: &Shared,
    node: &Node,
    id: StreamId,
    req: session_request::Request,
) -> Option<Vec<Effect>> {
    let stopping = matches!(req, session_request::Request::SessionStop(_));
    shared.with_node(node, |n| {
        if n.dropped() {
            return None;
        }
        let effects = n.serve(Instant::now(), id, req);
        if !stopping {
            n.apply(effects);
            return Some(Vec::new());
        }
        let (own, others): (Vec<_>, Vec<_>) =
            effects.into_iter().partition(|e| effect_stream(e) == id);
        n.apply(others);
        Some(own)
    })
}

fn send_pong(tx: &mpsc::UnboundedSender<Outbound>, opaque: u64) {
    let _ = tx.send(Outbound::Message(proto::response(
        proto::session_response::Response::Pong(proto::session_response::PingPong { opaque }),
    )));
}

fn effect_stream(effect: &Effect) -> StreamId {
    match effect {
        Effect::Send(stream, _) | Effect::Close(stream) => *stream,
    }
}

/// Sends a server ping with a random non-zero opaque and returns the opaque.
fn send_ping(tx: &mpsc::UnboundedSender<Outbound>) -> u64 {
    let opaque = rand::random::<u64>().max(1);
    let _ = tx.send(Outbound::Message(proto::response(
        proto::session_response::Response::Ping(proto::session_response::PingPong { opaque }),
    )));
    opaque
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;
type SessionStream = Pin<Box<dyn Stream<Item = Result<SessionResponse, Status>> + Send + 'static>>;

/// The tower plumbing every hand-written gRPC service here shares: its name, readiness, and
/// dispatch to its `route` function by path.
macro_rules! grpc_service {
    ($name:ident, $grpc_name:literal) => {
        impl NamedService for $name {
            const NAME: &'static str = $grpc_name;
        }

        impl<B> tonic::codegen::Service<http::Request<B>> for $name
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
                self.route(req)
            }
        }
    };
}

/// The coordination service.
#[derive(Debug, Clone)]
pub(crate) struct CoordinationService(pub(crate) Arc<Shared>);

/// The discovery service.
#[derive(Debug, Clone)]
pub(crate) struct DiscoveryService(pub(crate) Arc<Shared>);

/// The auth service (`Login`).
#[derive(Debug, Clone)]
pub(crate) struct AuthService(pub(crate) Arc<Shared>);

grpc_service!(AuthService, "Ydb.Auth.V1.AuthService");

impl AuthService {
    fn route<B>(&self, req: http::Request<B>) -> BoxFuture<Result<http::Response<Body>, Infallible>>
    where
        B: tonic::codegen::Body + Send + 'static,
        B::Error: Into<tonic::codegen::StdError> + Send + 'static,
    {
        let shared = self.0.clone();
        let max = shared.max_message;
        match req.uri().path() {
            "/Ydb.Auth.V1.AuthService/Login" => Box::pin(async move {
                let svc = Unary(move |r: Request<LoginRequest>| {
                    let r = r.into_inner();
                    let result = shared
                        .login(&r.user, &r.password)
                        .map(|token| pack("Ydb.Auth.LoginResult", &LoginResult { token }));
                    Ok(Response::new(LoginResponse {
                        operation: Some(operation(result)),
                    }))
                });
                Ok(grpc(max).unary(svc, req).await)
            }),
            _ => Box::pin(async { Ok(unimplemented()) }),
        }
    }
}

/// A tonic call handler with YDB's message-size limit both ways (SPEC.md §7).
fn grpc<T, U>(max: usize) -> tonic::server::Grpc<tonic_prost::ProstCodec<T, U>>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    tonic::server::Grpc::new(tonic_prost::ProstCodec::default())
        .max_decoding_message_size(max)
        .max_encoding_message_size(max)
}

/// Wraps a handler closure as a tonic unary service.
#[derive(Clone)]
struct Unary<F>(F);

impl<F, Req, Resp> tonic::server::UnaryService<Req> for Unary<F>
where
    F: FnMut(Request<Req>) -> Result<Response<Resp>, Status>,
    Resp: Send + 'static,
{
    type Response = Resp;
    type Future = std::future::Ready<Result<Response<Resp>, Status>>;

    fn call(&mut self, request: Request<Req>) -> Self::Future {
        std::future::ready((self.0)(request))
    }
}

struct SessionSvc(Arc<Shared>);

impl tonic::server::StreamingService<SessionRequest> for SessionSvc {
    type Response = SessionResponse;
    type ResponseStream = SessionStream;
    type Future = std::future::Ready<Result<Response<SessionStream>, Status>>;

    fn call(&mut self, request: Request<Streaming<SessionRequest>>) -> Self::Future {
        let database = database_of(&request);
        let authorized = self.0.authorized(&request);
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run_stream(
            self.0.clone(),
            database,
            authorized,
            request.into_inner(),
            tx,
        ));
        let limit = self.0.max_message;
        // A message over the limit fails the call, as gRPC fails YDB's send (SPEC.md §7).
        let out = UnboundedReceiverStream::new(rx).map(move |o| match o {
            Outbound::Message(m) if m.encoded_len() > limit => {
                Err(Status::resource_exhausted(format!(
                    "Sent message larger than max ({} vs. {limit})",
                    m.encoded_len()
                )))
            }
            Outbound::Message(m) => Ok(m),
            Outbound::Status(s) => Err(s),
        });
        std::future::ready(Ok(Response::new(Box::pin(out) as SessionStream)))
    }
}

pub(crate) type Any = ydb_grpc::google_proto_workaround::protobuf::Any;

/// Packs a result message the way protobuf's `PackFrom` does.
pub(crate) fn pack(type_name: &str, message: &impl Message) -> Option<Any> {
    Some(Any {
        type_url: format!("type.googleapis.com/{type_name}"),
        value: message.encode_to_vec(),
    })
}

/// A completed operation: YDB's unary calls answer gRPC OK with the status inside.
pub(crate) fn operation(result: Result<Option<Any>, AdminError>) -> Operation {
    match result {
        Ok(value) => Operation {
            ready: true,
            status: StatusCode::Success as i32,
            result: value,
            ..Operation::default()
        },
        Err(e) => Operation {
            ready: true,
            status: e.status as i32,
            issues: vec![proto::issue(e.message)],
            ..Operation::default()
        },
    }
}

/// `Ok(None)` for an operation without a result value.
fn no_result(r: Result<(), AdminError>) -> Result<Option<Any>, AdminError> {
    r.map(|()| None)
}

/// A request of node administration: carries a node path.
trait NodeRequest: Message + Default + Send + 'static {
    fn path(&self) -> &str;
}

macro_rules! node_request {
    ($($t:ty),*) => {$(
        impl NodeRequest for $t {
            fn path(&self) -> &str {
                &self.path
            }
        }
    )*};
}
node_request!(
    CreateNodeRequest,
    AlterNodeRequest,
    DropNodeRequest,
    DescribeNodeRequest
);

/// Serves one node-administration call: checks the token, resolves the path, runs
/// `handle` and wraps its outcome in a completed operation.
fn admin<B, Req, Resp>(
    shared: Arc<Shared>,
    req: http::Request<B>,
    handle: fn(&Shared, String, Req) -> Result<Option<Any>, AdminError>,
    wrap: fn(Option<Operation>) -> Resp,
) -> BoxFuture<Result<http::Response<Body>, Infallible>>
where
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<tonic::codegen::StdError> + Send + 'static,
    Req: NodeRequest,
    Resp: Message + Send + 'static,
{
    let max = shared.max_message;
    Box::pin(async move {
        let svc = Unary(move |r: Request<Req>| {
            let result = if shared.authorized(&r) {
                let db = database_of(&r);
                let r = r.into_inner();
                let path = shared.resolve(db.as_deref(), r.path());
                handle(&shared, path, r)
            } else {
                Err(AdminError {
                    status: StatusCode::Unauthorized,
                    message: "Access denied".to_string(),
                })
            };
            Ok(Response::new(wrap(Some(operation(result)))))
        });
        Ok(grpc(max).unary(svc, req).await)
    })
}

fn unimplemented() -> http::Response<Body> {
    let mut response = http::Response::new(Body::default());
    let headers = response.headers_mut();
    headers.insert(
        "grpc-status",
        http::HeaderValue::from(tonic::Code::Unimplemented as i32),
    );
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/grpc"),
    );
    response
}

grpc_service!(
    CoordinationService,
    "Ydb.Coordination.V1.CoordinationService"
);

impl CoordinationService {
    fn route<B>(&self, req: http::Request<B>) -> BoxFuture<Result<http::Response<Body>, Infallible>>
    where
        B: tonic::codegen::Body + Send + 'static,
        B::Error: Into<tonic::codegen::StdError> + Send + 'static,
    {
        let shared = self.0.clone();
        let max = shared.max_message;

        match req.uri().path() {
            "/Ydb.Coordination.V1.CoordinationService/Session" => Box::pin(async move {
                let mut grpc = grpc(max);
                Ok(grpc.streaming(SessionSvc(shared), req).await)
            }),
            "/Ydb.Coordination.V1.CoordinationService/CreateNode" => admin(
                shared,
                req,
                |shared, path, r: CreateNodeRequest| {
                    let config = r.config.unwrap_or_default();
                    no_result(shared.with_world(|w| w.create_node(path, config)))
                },
                |operation| CreateNodeResponse { operation },
            ),
            "/Ydb.Coordination.V1.CoordinationService/AlterNode" => admin(
                shared,
                req,
                |shared, path, r: AlterNodeRequest| {
                    let config = r.config.unwrap_or_default();
                    no_result(shared.with_world(|w| w.alter_node(&path, &config)))
                },
                |operation| AlterNodeResponse { operation },
            ),
            "/Ydb.Coordination.V1.CoordinationService/DropNode" => admin(
                shared,
                req,
                |shared, path, _: DropNodeRequest| {
                    no_result(shared.with_world(|w| w.drop_node(&path)))
                },
                |operation| DropNodeResponse { operation },
            ),
            "/Ydb.Coordination.V1.CoordinationService/DescribeNode" => admin(
                shared,
                req,
                |shared, path, _: DescribeNodeRequest| {
                    let (config, (plan_step, tx_id)) = shared.world.describe_node(&path)?;
                    let name = path.rsplit('/').next().unwrap_or_default().to_string();
                    let result = DescribeNodeResult {
                        self_: Some(Entry {
                            name,
                            owner: "root@builtin".to_string(),
                            r#type: entry::Type::CoordinationNode as i32,
                            created_at: Some(VirtualTimestamp { plan_step, tx_id }),
                            ..Entry::default()
                        }),
                        config: Some(config),
                    };
                    Ok(pack("Ydb.Coordination.DescribeNodeResult", &result))
                },
                |operation| DescribeNodeResponse { operation },
            ),
            _ => Box::pin(async { Ok(unimplemented()) }),
        }
    }
}

grpc_service!(DiscoveryService, "Ydb.Discovery.V1.DiscoveryService");

impl DiscoveryService {
    fn route<B>(&self, req: http::Request<B>) -> BoxFuture<Result<http::Response<Body>, Infallible>>
    where
        B: tonic::codegen::Body + Send + 'static,
        B::Error: Into<tonic::codegen::StdError> + Send + 'static,
    {
        let shared = self.0.clone();
        let max = shared.max_message;

        match req.uri().path() {
            "/Ydb.Discovery.V1.DiscoveryService/ListEndpoints" => Box::pin(async move {
                let svc = Unary(move |_r: Request<ListEndpointsRequest>| {
                    let advertised = shared
                        .advertised
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .clone();
                    let endpoints = (1..)
                        .zip(advertised)
                        .map(|(node_id, addr)| EndpointInfo {
                            address: addr.ip().to_string(),
                            port: u32::from(addr.port()),
                            node_id,
                            ssl: shared.tls,
                            ..EndpointInfo::default()
                        })
                        .collect();
                    let result = ListEndpointsResult {
                        endpoints,
                        self_location: String::new(),
                    };
                    Ok(Response::new(ListEndpointsResponse {
                        operation: Some(operation(Ok(pack(
                            "Ydb.Discovery.ListEndpointsResult",
                            &result,
                        )))),
                    }))
                });
                Ok(grpc(max).unary(svc, req).await)
            }),
            "/Ydb.Discovery.V1.DiscoveryService/WhoAmI" => Box::pin(async move {
                let svc = Unary(move |_r: Request<WhoAmIRequest>| {
                    let result = WhoAmIResult {
                        user: "anonymous".to_string(),
                        groups: Vec::new(),
                    };
                    Ok(Response::new(WhoAmIResponse {
                        operation: Some(operation(Ok(pack("Ydb.Discovery.WhoAmIResult", &result)))),
                    }))
                });
                Ok(grpc(max).unary(svc, req).await)
            }),
            _ => Box::pin(async { Ok(unimplemented()) }),
        }
    }
}
