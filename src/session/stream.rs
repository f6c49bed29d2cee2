//! The session stream: opening one and attaching on it, the same way for a session's first
//! attach and for every reattach.

use std::time::Duration;

use tokio::time::Instant;
use tonic::Streaming;
use ydb_grpc::ydb_proto::coordination::v1::coordination_service_client::CoordinationServiceClient;

use super::outbox::{Outbox, OutboxStream, outbox};
use crate::error::{Error, ErrorKind, Result};
use crate::proto::{self, SessionResponse, session_request as rq, session_response as rs};
use crate::transport::{Lane, Transport};

/// A live stream.
#[derive(Debug)]
pub(crate) struct Conn {
    pub(super) tx: Outbox,
    pub(super) inbound: Streaming<SessionResponse>,
    pub(super) lane: Lane,
}

impl Conn {
    pub(super) fn send(&self, r: rq::Request) {
        // A closed request stream shows up as the inbound side ending; nothing to do here.
        self.tx.send(proto::request(r));
    }
}

/// The outcome of one attach attempt.
#[derive(Debug)]
pub(crate) struct Attached {
    pub(crate) conn: Conn,
    pub(crate) session_id: u64,
    pub(crate) sent_at: Instant,
}

/// Opens a stream and attaches: the one attacher, for a session's first attach
/// (`session_id` 0 creates a session) and for every reattach. The credentials are asked for
/// the token at every attempt; when the server rejects it, they are told so and the attach is
/// tried once more with a fresh token before the rejection is reported.
///
/// The server has `limit` to answer each attempt, counted once the token is there: an
/// endpoint that accepts and never answers costs that much and is left for the next one
/// (a [`ErrorKind::Timeout`] without a status). The credentials have the transport's
/// request timeout to give the token, as for a unary call; a token that does not come is no
/// fault of the endpoint, which is not blamed for it.
pub(crate) async fn attach(
    transport: &Transport,
    lane: Lane,
    start: rq::SessionStart,
    limit: Duration,
) -> Result<Attached> {
    let mut renewed = false;
    loop {
        let (tx, request) = start_request(transport, start.clone()).await?;
        let result = attach_once(lane.clone(), tx, request, limit).await;
        match &result {
            Err(err) if err.kind() == ErrorKind::Unauthorized && !renewed => {
                tracing::debug!(%err, "token rejected at attach; retrying with a fresh one");
                renewed = true;
                transport.token_rejected().await;
                continue;
            }
            Err(err) if err.blames_endpoint() => transport.reconnect(&lane),
            // Attached, or the server answered with a failure status: the endpoint works.
            _ => transport.answered(&lane),
        }
        return result;
    }
}

/// The start message in a request with the headers, the token included (waited for at most
/// the transport's request timeout). Its failure returns before the endpoint is judged.
async fn start_request(
    transport: &Transport,
    start: rq::SessionStart,
) -> Result<(Outbox, tonic::Request<OutboxStream>)> {
    let (tx, rx) = outbox();
    tx.send(proto::request(rq::Request::SessionStart(start)));
    let request = transport
        .request_within(rx, transport.request_timeout(), "session start")
        .await?;
    Ok((tx, request))
}

/// One attempt with a request whose token is there; the server has `limit` to answer.
async fn attach_once(
    lane: Lane,
    tx: Outbox,
    request: tonic::Request<OutboxStream>,
    limit: Duration,
) -> Result<Attached> {
    // Taken once the token is there and before the start is written: no later than the
    // server could have seen it, which is what the lease deadline counts from.
    let sent_at = Instant::now();
    tokio::time::timeout(limit, started(lane, tx, request, sent_at))
        .await
        .unwrap_or_else(|_| {
            Err(Error::new(
                ErrorKind::Timeout,
                format!(
                    "the server gave no answer to the session start within {limit:?}; another endpoint is tried next"
                ),
            ))
        })
}

/// Sends the start on a new stream and waits for the session to start.
async fn started(
    lane: Lane,
    tx: Outbox,
    request: tonic::Request<OutboxStream>,
    sent_at: Instant,
) -> Result<Attached> {
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
                let pong = rq::Request::Pong(rq::PingPong { opaque: p.opaque });
                tx.send(proto::request(pong));
            }
            other => {
                tracing::debug!(?other, "ignoring a message before session_started");
            }
        }
    }
}
