//! A scripted server for the unary calls (node administration and discovery): the test
//! queues the answers each method gives, one per call (a gRPC error, a YDB status, or no
//! answer at all), and the server answers success once its queue is empty. Every call is
//! recorded with the time it arrived, so tests can check how many attempts were made and
//! how far apart. A session stream is accepted and never answered, or fails with a scripted gRPC status.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use prost::Message;
use tokio::net::TcpListener;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tonic::body::Body;
use tonic::codegen::http;
use tonic::server::NamedService;
use tonic::{Request, Response, Status};
use ydb_grpc::google_proto_workaround::protobuf::Any;
use ydb_grpc::ydb_proto::coordination::{
    AlterNodeRequest, AlterNodeResponse, CreateNodeRequest, CreateNodeResponse,
    DescribeNodeRequest, DescribeNodeResponse, DescribeNodeResult, DropNodeRequest,
    DropNodeResponse,
};
use ydb_grpc::ydb_proto::discovery::{
    EndpointInfo, ListEndpointsRequest, ListEndpointsResponse, ListEndpointsResult,
};
use ydb_grpc::ydb_proto::operations::Operation;
pub use ydb_grpc::ydb_proto::status_ids::StatusCode;

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum Answer {
    /// A gRPC error (the call fails below YDB's status).
    Grpc(tonic::Code),
    /// gRPC OK with this YDB status in the operation.
    Status(StatusCode),
    /// The call is never answered.
    Silent,
}

/// The methods the server knows, by their last path segment.
pub const DESCRIBE: &str = "DescribeNode";
pub const CREATE: &str = "CreateNode";
pub const ALTER: &str = "AlterNode";
pub const DROP: &str = "DropNode";
pub const LIST: &str = "ListEndpoints";
/// The session stream: accepted (recorded), and never answered, unless a gRPC failure is
/// scripted for it.
pub const SESSION: &str = "Session";

#[derive(Debug, Default)]
struct Script {
    answers: HashMap<&'static str, VecDeque<Answer>>,
    calls: Vec<(&'static str, Instant)>,
    /// The endpoints `ListEndpoints` returns once its script is used up (none: empty).
    advertised: Vec<SocketAddr>,
}

/// The scripted server. Dropping it shuts it down.
#[derive(Debug)]
pub struct UnaryPeer {
    addr: SocketAddr,
    script: Arc<Mutex<Script>>,
    shutdown: CancellationToken,
}

impl Drop for UnaryPeer {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl UnaryPeer {
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let script = Arc::new(Mutex::new(Script::default()));
        let shutdown = CancellationToken::new();
        let svc = Svc(script.clone());
        let server = tonic::transport::Server::builder()
            .add_service(Named::<Coordination>(svc.clone(), std::marker::PhantomData))
            .add_service(Named::<Discovery>(svc, std::marker::PhantomData))
            .serve_with_incoming_shutdown(
                // No Nagle delay: under paused time a held-back write would let the clock jump.
                tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
                shutdown.clone().cancelled_owned(),
            );
        tokio::spawn(async move {
            let _ = server.await;
        });
        Self {
            addr,
            script,
            shutdown,
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `grpc://127.0.0.1:PORT/local`.
    pub fn connection_string(&self) -> String {
        format!("grpc://{}/local", self.addr)
    }

    /// Queues answers for `method`, given in order before it answers success.
    pub fn script(&self, method: &'static str, answers: impl IntoIterator<Item = Answer>) {
        self.lock()
            .answers
            .entry(method)
            .or_default()
            .extend(answers);
    }

    /// The endpoints a successful `ListEndpoints` returns.
    pub fn advertise(&self, endpoints: Vec<SocketAddr>) {
        self.lock().advertised = endpoints;
    }

    /// When each call of `method` arrived, in order.
    pub fn calls(&self, method: &str) -> Vec<Instant> {
        self.lock()
            .calls
            .iter()
            .filter(|(m, _)| *m == method)
            .map(|(_, t)| *t)
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Script> {
        self.script.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn pack(type_name: &str, message: &impl Message) -> Option<Any> {
    Some(Any {
        type_url: format!("type.googleapis.com/{type_name}"),
        value: message.encode_to_vec(),
    })
}

fn operation(status: StatusCode, result: Option<Any>) -> Option<Operation> {
    Some(Operation {
        ready: true,
        status: status as i32,
        result: if status == StatusCode::Success {
            result
        } else {
            None
        },
        ..Operation::default()
    })
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

#[derive(Debug, Clone)]
struct Svc(Arc<Mutex<Script>>);

impl Svc {
    /// Records a call and takes its scripted answer: `Ok(status)` to answer, `Err` for a
    /// gRPC error, `None` never to answer.
    fn next(&self, method: &'static str) -> Option<Result<StatusCode, Status>> {
        let mut script = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        script.calls.push((method, Instant::now()));
        match script.answers.get_mut(method).and_then(VecDeque::pop_front) {
            None => Some(Ok(StatusCode::Success)),
            Some(Answer::Status(s)) => Some(Ok(s)),
            Some(Answer::Grpc(code)) => Some(Err(Status::new(code, "scripted failure"))),
            Some(Answer::Silent) => None,
        }
    }

    fn advertised(&self) -> Vec<SocketAddr> {
        let script = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        script.advertised.clone()
    }
}

/// A unary method that answers from the script: `respond` builds the response from the
/// status to put in its operation.
struct Scripted<F> {
    svc: Svc,
    method: &'static str,
    respond: F,
}

impl<Req, Resp, F> tonic::server::UnaryService<Req> for Scripted<F>
where
    F: Fn(StatusCode) -> Resp,
    Resp: Send + 'static,
{
    type Response = Resp;
    type Future = BoxFuture<Result<Response<Resp>, Status>>;

    fn call(&mut self, _request: Request<Req>) -> Self::Future {
        let answer = self.svc.next(self.method).map(|r| r.map(&self.respond));
        Box::pin(async move {
            match answer {
                Some(Ok(resp)) => Ok(Response::new(resp)),
                Some(Err(status)) => Err(status),
                None => std::future::pending().await,
            }
        })
    }
}

async fn serve<Req, Resp, B>(
    svc: Svc,
    method: &'static str,
    respond: impl Fn(StatusCode) -> Resp + Send + 'static,
    req: http::Request<B>,
) -> http::Response<Body>
where
    Req: Message + Default + Send + 'static,
    Resp: Message + Send + 'static,
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<tonic::codegen::StdError> + Send + 'static,
{
    let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::<Resp, Req>::default());
    grpc.unary(
        Scripted {
            svc,
            method,
            respond,
        },
        req,
    )
    .await
}

/// Which service a [`Named`] wrapper answers as.
trait Which {
    const NAME: &'static str;
}

#[derive(Debug, Clone)]
struct Coordination;
impl Which for Coordination {
    const NAME: &'static str = "Ydb.Coordination.V1.CoordinationService";
}

#[derive(Debug, Clone)]
struct Discovery;
impl Which for Discovery {
    const NAME: &'static str = "Ydb.Discovery.V1.DiscoveryService";
}

#[derive(Debug, Clone)]
struct Named<W>(Svc, std::marker::PhantomData<W>);

impl<W: Which> NamedService for Named<W> {
    const NAME: &'static str = W::NAME;
}

impl<W, B> tonic::codegen::Service<http::Request<B>> for Named<W>
where
    W: Which,
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
        let svc = self.0.clone();
        let method = req
            .uri()
            .path()
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_string();
        Box::pin(async move {
            let resp = match method.as_str() {
                "DescribeNode" => {
                    serve::<DescribeNodeRequest, _, _>(
                        svc,
                        DESCRIBE,
                        |s| DescribeNodeResponse {
                            operation: operation(
                                s,
                                pack(
                                    "Ydb.Coordination.DescribeNodeResult",
                                    &DescribeNodeResult::default(),
                                ),
                            ),
                        },
                        req,
                    )
                    .await
                }
                "CreateNode" => {
                    serve::<CreateNodeRequest, _, _>(
                        svc,
                        CREATE,
                        |s| CreateNodeResponse {
                            operation: operation(s, None),
                        },
                        req,
                    )
                    .await
                }
                "AlterNode" => {
                    serve::<AlterNodeRequest, _, _>(
                        svc,
                        ALTER,
                        |s| AlterNodeResponse {
                            operation: operation(s, None),
                        },
                        req,
                    )
                    .await
                }
                "DropNode" => {
                    serve::<DropNodeRequest, _, _>(
                        svc,
                        DROP,
                        |s| DropNodeResponse {
                            operation: operation(s, None),
                        },
                        req,
                    )
                    .await
                }
                "ListEndpoints" => {
                    let endpoints: Vec<EndpointInfo> = svc
                        .advertised()
                        .into_iter()
                        .map(|a| EndpointInfo {
                            address: a.ip().to_string(),
                            port: u32::from(a.port()),
                            ..EndpointInfo::default()
                        })
                        .collect();
                    serve::<ListEndpointsRequest, _, _>(
                        svc,
                        LIST,
                        move |s| ListEndpointsResponse {
                            operation: operation(
                                s,
                                pack(
                                    "Ydb.Discovery.ListEndpointsResult",
                                    &ListEndpointsResult {
                                        endpoints: endpoints.clone(),
                                        self_location: String::new(),
                                    },
                                ),
                            ),
                        },
                        req,
                    )
                    .await
                }
                "Session" => match svc.next(SESSION) {
                    // A scripted gRPC failure ends the stream at once.
                    Some(Err(status)) => status.into_http(),
                    // Otherwise the stream stays open and silent: no headers, no message,
                    // no end.
                    _ => std::future::pending().await,
                },
                _ => Status::unimplemented("not scripted").into_http(),
            };
            Ok(resp)
        })
    }
}
