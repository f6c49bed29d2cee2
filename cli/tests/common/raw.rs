//! A session of the raw protocol: what a program that is not this library (an older version
//! of it, another SDK, a careless or hostile script) can do on a node. The library refuses
//! the reserved names; the server does not.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;

use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use ydb_grpc::ydb_proto::coordination::v1::coordination_service_client::CoordinationServiceClient;
use ydb_grpc::ydb_proto::coordination::{
    SessionRequest, session_request as rq, session_response as rs,
};

use super::LIMIT;

/// One raw session: it answers the server's pings by itself; requests are sent as they are.
pub struct RawSession {
    tx: mpsc::UnboundedSender<SessionRequest>,
    answers: mpsc::UnboundedReceiver<rs::Response>,
    pub id: u64,
}

fn request(r: rq::Request) -> SessionRequest {
    SessionRequest { request: Some(r) }
}

impl RawSession {
    /// Starts a session on `node` of the emulator at `addr` (session timeout one minute).
    pub async fn start(addr: SocketAddr, node: &str) -> Self {
        let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{addr}")).unwrap();
        let channel = tokio::time::timeout(LIMIT, endpoint.connect())
            .await
            .unwrap()
            .unwrap();
        let mut client = CoordinationServiceClient::new(channel);
        let (tx, rx) = mpsc::unbounded_channel();
        tx.send(request(rq::Request::SessionStart(rq::SessionStart {
            path: node.to_string(),
            timeout_millis: 60_000,
            description: "a raw session".to_string(),
            ..Default::default()
        })))
        .unwrap();
        let mut stream =
            tokio::time::timeout(LIMIT, client.session(UnboundedReceiverStream::new(rx)))
                .await
                .unwrap()
                .unwrap()
                .into_inner();
        let (answers_tx, answers) = mpsc::unbounded_channel();
        let pong = tx.clone();
        tokio::spawn(async move {
            // Keeps the client (and its channel) alive as long as the stream.
            let _client = client;
            while let Ok(Some(msg)) = stream.message().await {
                let answer = match msg.response {
                    Some(rs::Response::Ping(p)) => {
                        let _ = pong.send(request(rq::Request::Pong(rq::PingPong {
                            opaque: p.opaque,
                        })));
                        continue;
                    }
                    Some(r) => r,
                    None => continue,
                };
                if answers_tx.send(answer).is_err() {
                    break;
                }
            }
        });
        let mut session = Self { tx, answers, id: 0 };
        match session.next().await {
            rs::Response::SessionStarted(s) => session.id = s.session_id,
            other => panic!("expected session_started, got {other:?}"),
        }
        session
    }

    async fn next(&mut self) -> rs::Response {
        tokio::time::timeout(LIMIT, self.answers.recv())
            .await
            .expect("no answer in time")
            .expect("the stream ended")
    }

    /// Sends an acquire of `count` units of `name` with `data` as the owner's data, waiting
    /// as long as it takes.
    pub fn acquire(&self, req_id: u64, name: &str, count: u64, ephemeral: bool, data: &[u8]) {
        self.tx
            .send(request(rq::Request::AcquireSemaphore(
                rq::AcquireSemaphore {
                    req_id,
                    name: name.to_string(),
                    timeout_millis: u64::MAX,
                    count,
                    data: data.to_vec(),
                    ephemeral,
                },
            )))
            .unwrap();
    }

    /// Waits for the answer to acquire `req_id`: `true` granted, `false` queued (pending).
    pub async fn granted_or_queued(&mut self, req_id: u64) -> bool {
        loop {
            match self.next().await {
                rs::Response::AcquireSemaphorePending(p) if p.req_id == req_id => return false,
                rs::Response::AcquireSemaphoreResult(r) if r.req_id == req_id => {
                    assert!(r.acquired, "not acquired: {r:?}");
                    return true;
                }
                _ => {}
            }
        }
    }
}
