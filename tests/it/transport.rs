//! The connection layer under churn: endpoints that fail are left for others, discovery
//! runs again and finds the cluster's new nodes, the connection string's endpoint is the
//! last resort, and idempotent unary calls are retried with the crate's backoff.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use crate::unary;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::within;
use tokio::time::Instant;
use unary::{ALTER, Answer, CREATE, DESCRIBE, DROP, LIST, SESSION, StatusCode, UnaryPeer};
use ydb_coordination::emulator::Emulator;
use ydb_coordination::{
    Client, ClientBuilder, ErrorKind, MutexGuard, Session, SessionOptions, config::NodeConfig,
};

const NODE: &str = "/local/app";
/// The session timeout of the churn tests: the longest outage a lease survives.
const SESSION_TIMEOUT: Duration = Duration::from_secs(10);

async fn emulator() -> Emulator {
    within(Emulator::builder().node(NODE).start())
        .await
        .unwrap()
}

async fn listener(emulator: &Emulator) -> SocketAddr {
    within(emulator.add_listener("127.0.0.1:0".parse().unwrap()))
        .await
        .unwrap()
}

async fn build(builder: ClientBuilder) -> Client {
    within(builder.build()).await.unwrap()
}

async fn session(client: &Client) -> Session {
    let options = SessionOptions::new().timeout(SESSION_TIMEOUT);
    within(client.session(NODE, options)).await.unwrap()
}

/// Whether the server answers the session now (a round trip on its current stream,
/// reattaching first if it must), within the session timeout.
async fn answers(session: &Session) -> bool {
    let describe = session.describe_semaphore("m", Default::default());
    match tokio::time::timeout(SESSION_TIMEOUT, describe).await {
        Ok(Ok(_)) => true,
        Ok(Err(e)) => e.kind() == ErrorKind::NotFound,
        Err(_) => false,
    }
}

/// Whether another client can take the lock now: `false` while the lease is held.
async fn lock_is_free(via: &str) -> bool {
    let other = build(Client::builder(via).discovery(false)).await;
    let s = session(&other).await;
    let free = within(s.mutex("m").try_lock()).await.unwrap().is_some();
    s.close().await;
    free
}

#[tokio::test(start_paused = true)]
async fn a_held_lease_survives_a_complete_rotation_of_the_endpoints() {
    let emulator = emulator().await;
    let (a, b) = (listener(&emulator).await, listener(&emulator).await);
    emulator.advertise(vec![a, b]);
    let client = build(Client::builder(emulator.connection_string())).await;
    let session = session(&client).await;
    let guard = within(session.mutex("m").lock()).await.unwrap();

    // A rolling restart done all at once: new nodes come up, every old one goes down.
    let (c, d) = (listener(&emulator).await, listener(&emulator).await);
    emulator.advertise(vec![c, d]);
    let rotated = Instant::now();
    assert!(emulator.stop_listener(a) && emulator.stop_listener(b));
    assert!(
        answers(&session).await,
        "reattached within the session timeout"
    );
    assert!(
        rotated.elapsed() < SESSION_TIMEOUT,
        "{:?}",
        rotated.elapsed()
    );
    assert!(!guard.is_lost());
    // The session may be back on the connection string's endpoint already; the discovery
    // the failures set off (retried with a backoff of at most 1 s) is done by now.
    tokio::time::sleep(Duration::from_secs(2)).await;

    // The connection string's endpoint goes too and every connection breaks: the session
    // can only be on the new nodes, which the client learned by discovering again.
    assert!(emulator.stop_listener(emulator.local_addr()));
    emulator.net().cut();
    assert!(answers(&session).await);
    tokio::time::sleep(3 * SESSION_TIMEOUT).await;
    assert!(!guard.is_lost(), "the token never fired");
    assert!(!lock_is_free(&format!("grpc://{c}/local")).await);
    within(guard.unlock()).await.unwrap();
}

/// A lease held through a client that knows one discovered node `a` and the connection
/// string's endpoint; then a new node `b` is advertised, 31 s pass, and `a` and the
/// connection string's endpoint go down: only a client that discovered `b` in the meantime
/// can reattach.
async fn slow_rotation(discovery_interval: Duration) -> (Emulator, Session, MutexGuard) {
    let emulator = emulator().await;
    let a = listener(&emulator).await;
    emulator.advertise(vec![a]);
    let builder =
        Client::builder(emulator.connection_string()).discovery_interval(discovery_interval);
    let session = session(&build(builder).await).await;
    let guard = within(session.mutex("m").lock()).await.unwrap();

    let b = listener(&emulator).await;
    emulator.advertise(vec![b]);
    tokio::time::sleep(Duration::from_secs(31)).await;
    assert!(emulator.stop_listener(a) && emulator.stop_listener(emulator.local_addr()));
    (emulator, session, guard)
}

#[tokio::test(start_paused = true)]
async fn periodic_discovery_learns_new_nodes_before_the_old_ones_go() {
    let (_emulator, session, guard) = slow_rotation(Duration::from_secs(30)).await;
    assert!(answers(&session).await);
    tokio::time::sleep(3 * SESSION_TIMEOUT).await;
    assert!(!guard.is_lost());
    within(guard.unlock()).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn without_rediscovery_in_time_the_same_rotation_loses_the_lease() {
    let (_emulator, _session, guard) = slow_rotation(Duration::from_secs(3600)).await;
    within(guard.cancelled()).await;
    assert!(guard.is_lost(), "nowhere to reattach: the token fired");
}

#[tokio::test(start_paused = true)]
async fn when_every_discovered_endpoint_fails_the_connection_strings_endpoint_is_used() {
    let emulator = emulator().await;
    let a = listener(&emulator).await;
    emulator.advertise(vec![a]);
    let client = build(Client::builder(emulator.connection_string())).await;
    // Discovery keeps naming a node that is down (a stale answer).
    assert!(emulator.stop_listener(a));
    let started = Instant::now();
    within(client.describe_node(NODE)).await.unwrap();
    let session = session(&client).await;
    let guard = within(session.mutex("m").lock()).await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    within(guard.unlock()).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_failing_endpoint_is_preferred_last() {
    let emulator = emulator().await;
    let (a, b) = (listener(&emulator).await, listener(&emulator).await);
    emulator.advertise(vec![a, b]);
    let client = build(Client::builder(emulator.connection_string())).await;
    assert!(emulator.stop_listener(a));
    // The first call that lands on `a` fails over to `b`; after that `a` is skipped, so
    // every call succeeds at its first attempt.
    within(client.describe_node(NODE)).await.unwrap();
    within(client.describe_node(NODE)).await.unwrap();
    for _ in 0..10 {
        let started = Instant::now();
        within(client.describe_node(NODE)).await.unwrap();
        assert_eq!(started.elapsed(), Duration::ZERO, "no retry, no backoff");
    }
}

/// A TCP listener that accepts every connection and never sends a byte; how many it
/// accepted.
async fn mute_listener() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = within(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((tcp, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            held.push(tcp);
        }
    });
    (addr, accepted)
}

/// Discovery names `hung` first and a healthy endpoint second: the first session start
/// lands on `hung`, gives up on it after two ping intervals and starts on the healthy one,
/// well within the connect budget (the session timeout); the next one goes straight to the
/// healthy endpoint.
async fn sessions_start_past(hung: SocketAddr) {
    let emulator = emulator().await;
    let healthy = listener(&emulator).await;
    emulator.advertise(vec![hung, healthy]);
    let client = build(Client::builder(emulator.connection_string())).await;
    let started = Instant::now();
    let first = session(&client).await;
    let took = started.elapsed();
    // Two ping intervals (2 × 2 s) on the hung endpoint, then a backoff under 50 ms.
    assert!(took < SESSION_TIMEOUT / 2, "{took:?}");
    assert!(answers(&first).await);
    let started = Instant::now();
    let second = session(&client).await;
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "the hung endpoint is preferred last"
    );
    assert!(answers(&second).await);
}

#[tokio::test(start_paused = true)]
async fn a_session_starts_past_an_endpoint_that_accepts_and_never_answers() {
    let (hung, accepted) = mute_listener().await;
    sessions_start_past(hung).await;
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "the hung endpoint was tried once"
    );
}

#[tokio::test(start_paused = true)]
async fn a_session_starts_past_an_endpoint_that_never_answers_the_stream() {
    let peer = UnaryPeer::start().await;
    sessions_start_past(peer.addr()).await;
    assert_eq!(
        peer.calls(SESSION).len(),
        1,
        "the hung endpoint was tried once"
    );
}

// Retries, against a scripted server (discovery off unless the test is about it).

async fn scripted_client(peer: &UnaryPeer) -> Client {
    build(Client::builder(peer.connection_string()).discovery(false)).await
}

/// The gaps between successive calls.
fn gaps(calls: &[Instant]) -> Vec<Duration> {
    calls.windows(2).map(|w| w[1] - w[0]).collect()
}

#[tokio::test(start_paused = true)]
async fn describe_node_is_retried_until_the_server_answers() {
    let peer = UnaryPeer::start().await;
    peer.script(
        DESCRIBE,
        [
            Answer::Grpc(tonic::Code::Unavailable),
            Answer::Status(StatusCode::Unavailable),
            Answer::Status(StatusCode::Overloaded),
        ],
    );
    let client = scripted_client(&peer).await;
    within(client.describe_node(NODE)).await.unwrap();
    let calls = peer.calls(DESCRIBE);
    assert_eq!(calls.len(), 4);
    // The crate's default backoff: full jitter under 50 ms, 100 ms, 200 ms.
    for (gap, ceiling) in gaps(&calls).into_iter().zip([50, 100, 200]) {
        assert!(
            gap <= Duration::from_millis(ceiling),
            "{gap:?} > {ceiling} ms"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn create_alter_and_drop_are_retried_as_the_sdks_do() {
    let peer = UnaryPeer::start().await;
    for method in [CREATE, ALTER, DROP] {
        peer.script(
            method,
            [
                Answer::Status(StatusCode::Undetermined),
                Answer::Grpc(tonic::Code::Unavailable),
            ],
        );
    }
    let client = scripted_client(&peer).await;
    within(client.create_node("app", NodeConfig::new()))
        .await
        .unwrap();
    within(client.alter_node("app", NodeConfig::new()))
        .await
        .unwrap();
    within(client.drop_node("app")).await.unwrap();
    for method in [CREATE, ALTER, DROP] {
        assert_eq!(peer.calls(method).len(), 3, "{method}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_silent_attempt_costs_one_attempt_timeout_and_the_call_is_answered() {
    let peer = UnaryPeer::start().await;
    peer.script(DESCRIBE, [Answer::Silent]);
    let client = build(
        Client::builder(peer.connection_string())
            .discovery(false)
            .request_timeout(Duration::from_secs(9)),
    )
    .await;
    // The default attempt timeout is a third of the request timeout: 3 s, then a backoff
    // under 50 ms, and the second attempt is answered.
    let started = Instant::now();
    within(client.describe_node(NODE)).await.unwrap();
    let took = started.elapsed();
    assert!(took >= Duration::from_secs(3), "{took:?}");
    assert!(took < Duration::from_secs(4), "{took:?}");
    assert_eq!(peer.calls(DESCRIBE).len(), 2);
}

#[tokio::test(start_paused = true)]
async fn the_attempt_timeout_can_be_set_and_the_request_timeout_still_bounds_the_call() {
    let peer = UnaryPeer::start().await;
    peer.script(DESCRIBE, vec![Answer::Silent; 1000]);
    let client = build(
        Client::builder(peer.connection_string())
            .discovery(false)
            .request_timeout(Duration::from_secs(5))
            .attempt_timeout(Duration::from_secs(1)),
    )
    .await;
    let started = Instant::now();
    let err = within(client.describe_node(NODE)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout);
    assert!(started.elapsed() <= Duration::from_secs(5));
    // 1 s attempts and backoffs under 1 s: at least three attempts, at most five.
    let calls = peer.calls(DESCRIBE).len();
    assert!((3..=5).contains(&calls), "{calls} attempts");
}

/// Discovery names `hung` first and a healthy endpoint second: the first admin call lands
/// on `hung`, gives up on it after one attempt timeout and is answered by the healthy one;
/// the next calls go straight to the healthy endpoint, `hung` being preferred last.
async fn admin_calls_go_past(hung: SocketAddr) {
    let emulator = emulator().await;
    let healthy = listener(&emulator).await;
    emulator.advertise(vec![hung, healthy]);
    let request_timeout = Duration::from_secs(9);
    let attempt = Duration::from_secs(3);
    let client =
        build(Client::builder(emulator.connection_string()).request_timeout(request_timeout)).await;
    let started = Instant::now();
    within(client.describe_node(NODE)).await.unwrap();
    let took = started.elapsed();
    // One attempt timeout on the hung endpoint, then a backoff under 50 ms.
    assert!(took >= attempt, "{took:?}");
    assert!(took < attempt + Duration::from_secs(1), "{took:?}");
    for _ in 0..3 {
        let started = Instant::now();
        within(client.create_node("other", NodeConfig::new()))
            .await
            .unwrap();
        within(client.describe_node(NODE)).await.unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "the hung endpoint is preferred last"
        );
    }
    let started = Instant::now();
    let session = session(&client).await;
    assert!(started.elapsed() < Duration::from_secs(1));
    assert!(answers(&session).await);
}

#[tokio::test(start_paused = true)]
async fn an_admin_call_goes_past_an_endpoint_that_accepts_and_never_answers() {
    let (hung, accepted) = mute_listener().await;
    admin_calls_go_past(hung).await;
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "the hung endpoint was tried once"
    );
}

#[tokio::test(start_paused = true)]
async fn an_admin_call_goes_past_an_endpoint_that_never_answers_the_call() {
    let peer = UnaryPeer::start().await;
    for method in [DESCRIBE, CREATE, SESSION] {
        peer.script(method, vec![Answer::Silent; 10]);
    }
    admin_calls_go_past(peer.addr()).await;
    assert_eq!(peer.calls(DESCRIBE).len(), 1, "tried once");
    assert!(peer.calls(CREATE).is_empty() && peer.calls(SESSION).is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_request_timeout_of_duration_max_means_no_limit() {
    let peer = UnaryPeer::start().await;
    peer.script(DESCRIBE, [Answer::Grpc(tonic::Code::Unavailable)]);
    let client = build(
        Client::builder(peer.connection_string())
            .discovery(false)
            .request_timeout(Duration::MAX),
    )
    .await;
    within(client.describe_node(NODE)).await.unwrap();
    assert_eq!(peer.calls(DESCRIBE).len(), 2);
}

#[tokio::test(start_paused = true)]
async fn answers_that_would_repeat_themselves_are_not_retried() {
    let peer = UnaryPeer::start().await;
    peer.script(DESCRIBE, [Answer::Status(StatusCode::NotFound)]);
    peer.script(CREATE, [Answer::Status(StatusCode::BadRequest)]);
    // A rejected token is renewed and sent once more (twice rejected here), then reported.
    peer.script(
        DROP,
        [
            Answer::Grpc(tonic::Code::Unauthenticated),
            Answer::Grpc(tonic::Code::Unauthenticated),
        ],
    );
    let client = scripted_client(&peer).await;
    let err = within(client.describe_node(NODE)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    let err = within(client.create_node("app", NodeConfig::new()))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    let err = within(client.drop_node("app")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unauthorized);
    for method in [DESCRIBE, CREATE] {
        assert_eq!(peer.calls(method).len(), 1, "{method}");
    }
    assert_eq!(peer.calls(DROP).len(), 2);
}

#[tokio::test(start_paused = true)]
async fn retries_stop_at_the_request_timeout_with_the_last_error() {
    let peer = UnaryPeer::start().await;
    peer.script(
        DESCRIBE,
        vec![Answer::Status(StatusCode::Unavailable); 1000],
    );
    let client = build(
        Client::builder(peer.connection_string())
            .discovery(false)
            .request_timeout(Duration::from_secs(3)),
    )
    .await;
    let started = Instant::now();
    let err = within(client.describe_node(NODE)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    assert!(started.elapsed() <= Duration::from_secs(3));
    let calls = peer.calls(DESCRIBE).len();
    // Backoff capped at 1 s, full jitter: more than 3 attempts in 3 s, far fewer than 1000.
    assert!((3..100).contains(&calls), "{calls} attempts");
}

#[tokio::test(start_paused = true)]
async fn discovery_is_retried_and_its_endpoints_are_used() {
    let emulator = emulator().await;
    let peer = UnaryPeer::start().await;
    peer.script(
        LIST,
        [
            Answer::Grpc(tonic::Code::Unavailable),
            Answer::Status(StatusCode::Overloaded),
        ],
    );
    // The scripted server has no sessions: a session works only on the discovered endpoint.
    peer.advertise(vec![emulator.local_addr()]);
    let client = build(Client::builder(peer.connection_string())).await;
    assert_eq!(peer.calls(LIST).len(), 3);
    let session = session(&client).await;
    assert!(answers(&session).await);
}

#[tokio::test(start_paused = true)]
async fn a_session_start_whose_renewed_token_is_rejected_again_fails_at_once() {
    let peer = UnaryPeer::start().await;
    // The gRPC layer rejects the token (as YDB's does), and the renewed one too.
    peer.script(
        SESSION,
        [
            Answer::Grpc(tonic::Code::Unauthenticated),
            Answer::Grpc(tonic::Code::Unauthenticated),
        ],
    );
    let client = scripted_client(&peer).await;
    let started = Instant::now();
    let options = SessionOptions::new().connect_timeout(Duration::from_secs(10));
    let err = within(client.session(NODE, options)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unauthorized);
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    // One attempt: the token, then a renewed one.
    assert_eq!(peer.calls(SESSION).len(), 2);
}

/// Discovery names the scripted `peer` first and a healthy endpoint second; the peer
/// answers the first describe with `code`, the ones after it with success. Returns how many
/// of six describes reached the peer: one if `code` made it be preferred last, more if the
/// calls kept taking turns.
async fn describes_reaching_a_peer_that_answered(code: tonic::Code) -> usize {
    let emulator = emulator().await;
    let healthy = listener(&emulator).await;
    let peer = UnaryPeer::start().await;
    peer.script(DESCRIBE, [Answer::Grpc(code)]);
    emulator.advertise(vec![peer.addr(), healthy]);
    let client = build(Client::builder(emulator.connection_string())).await;
    for _ in 0..6 {
        within(client.describe_node(NODE)).await.unwrap();
    }
    peer.calls(DESCRIBE).len()
}

#[tokio::test(start_paused = true)]
async fn resource_exhausted_does_not_blame_the_endpoint_while_internal_and_unavailable_do() {
    // RESOURCE_EXHAUSTED (the cluster is short of capacity, not this node): the describe is
    // repeated on the healthy endpoint, and the peer keeps its turn.
    assert!(describes_reaching_a_peer_that_answered(tonic::Code::ResourceExhausted).await > 1);
    // UNAVAILABLE and INTERNAL (also what tonic reports for a body cut short): the peer is
    // preferred last from then on.
    for code in [tonic::Code::Unavailable, tonic::Code::Internal] {
        assert_eq!(
            describes_reaching_a_peer_that_answered(code).await,
            1,
            "{code:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn grpc_statuses_are_repeated_by_their_rule() {
    let peer = UnaryPeer::start().await;
    peer.script(
        DESCRIBE,
        [
            Answer::Grpc(tonic::Code::Internal),
            Answer::Grpc(tonic::Code::ResourceExhausted),
            Answer::Grpc(tonic::Code::Aborted),
            Answer::Grpc(tonic::Code::DataLoss),
        ],
    );
    peer.script(CREATE, [Answer::Grpc(tonic::Code::Unimplemented)]);
    peer.script(ALTER, [Answer::Grpc(tonic::Code::AlreadyExists)]);
    let client = scripted_client(&peer).await;
    // INTERNAL, RESOURCE_EXHAUSTED and ABORTED are repeated; DATA_LOSS ends the call.
    let err = within(client.describe_node(NODE)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Internal);
    assert_eq!(peer.calls(DESCRIBE).len(), 4);
    let err = within(client.create_node("app", NodeConfig::new()))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Internal);
    let err = within(client.alter_node("app", NodeConfig::new()))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AlreadyExists);
    assert_eq!(peer.calls(CREATE).len() + peer.calls(ALTER).len(), 2);
}
