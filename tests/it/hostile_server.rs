//! The session driver against a scripted, hostile or buggy server: stray, duplicate,
//! reordered and mistyped replies, odd messages, huge messages, streams that stop, verdicts,
//! silence and server pings.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::peer;

use std::time::Duration;

use peer::{
    Peer, Rq, Rs, SemaphoreSession, SessionResponse, StatusCode, acquire_result, create_result,
    describe_ok, description, ping, release_ok, session_request, session_response, within,
};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use ydb_coordination::{
    AcquireOptions, ErrorKind, Result, Session, SessionOptions, config::DescribeOptions,
    session::SemaphoreDescription, session::SessionState,
};

/// The session id every scripted server hands out.
const SID: u64 = 42;

/// Starts a describe of `name` in the background.
fn spawn_describe(s: &Session, name: &str) -> JoinHandle<Result<SemaphoreDescription>> {
    let s = s.clone();
    let name = name.to_string();
    tokio::spawn(async move { s.describe_semaphore(&name, DescribeOptions::new()).await })
}

/// Waits for the next describe request.
async fn expect_describe(peer: &mut Peer) -> (usize, session_request::DescribeSemaphore) {
    match peer.recv().await {
        (i, Rq::DescribeSemaphore(d)) => (i, d),
        (i, other) => panic!("expected describe_semaphore on stream {i}, got {other:?}"),
    }
}

/// Waits for the next `session_start`.
async fn expect_start(peer: &mut Peer) -> (usize, session_request::SessionStart) {
    match peer.recv().await {
        (i, Rq::SessionStart(s)) => (i, s),
        (i, other) => panic!("expected session_start on stream {i}, got {other:?}"),
    }
}

/// Runs one describe of `name` end to end on stream `index`: the session still works.
async fn describe_round_trip(peer: &mut Peer, s: &Session, index: usize, name: &str) {
    let call = spawn_describe(s, name);
    let (i, d) = expect_describe(peer).await;
    assert_eq!(i, index);
    assert_eq!(d.name, name);
    peer.send(i, describe_ok(d.req_id, description(name, b"ok")));
    let got = within(call).await.unwrap().unwrap();
    assert_eq!(got.name, name);
    assert_eq!(got.data, b"ok");
}

/// Answers the attach on stream `index` with the session's own id and waits until the
/// session is attached again.
async fn accept_reattach(peer: &Peer, s: &Session, index: usize) {
    peer.send(
        index,
        Rs::SessionStarted(session_response::SessionStarted {
            session_id: SID,
            timeout_millis: 0,
        }),
    );
    wait_state(s, attached).await;
}

/// Waits until the session's state satisfies `pred`.
async fn wait_state(s: &Session, pred: impl Fn(&SessionState) -> bool) -> SessionState {
    let mut rx = s.state_changes();
    *within(rx.wait_for(|st| pred(st))).await.unwrap()
}

fn attached(st: &SessionState) -> bool {
    matches!(st, SessionState::Attached { session_id: SID })
}

#[tokio::test(start_paused = true)]
async fn replies_with_unknown_req_ids_are_ignored() {
    let mut peer = Peer::start().await;
    let (_client, s, i0, _) = peer.session(SID, SessionOptions::new()).await;
    let call = spawn_describe(&s, "a");
    let (i, d) = expect_describe(&mut peer).await;
    assert_eq!(i, i0);
    // Answers to requests the client never sent, of every kind, with the describe's own type
    // among them.
    for bogus in [0, d.req_id + 1, d.req_id + 1000, u64::MAX] {
        peer.send(i, describe_ok(bogus, description("not-a", b"bogus")));
        peer.send(i, create_result(bogus, StatusCode::Success));
        peer.send(i, release_ok(bogus, true));
        peer.send(i, acquire_result(bogus, StatusCode::Success, true));
        peer.send(
            i,
            Rs::AcquireSemaphorePending(session_response::AcquireSemaphorePending {
                req_id: bogus,
            }),
        );
        peer.send(
            i,
            Rs::DescribeSemaphoreChanged(session_response::DescribeSemaphoreChanged {
                req_id: bogus,
                data_changed: true,
                owners_changed: true,
            }),
        );
    }
    peer.barrier(i, 7).await;
    assert!(!call.is_finished(), "a stray answer completed the call");
    peer.send(i, describe_ok(d.req_id, description("a", b"real")));
    let got = within(call).await.unwrap().unwrap();
    assert_eq!(got.name, "a");
    assert_eq!(got.data, b"real");
    assert!(attached(&s.state()));
    describe_round_trip(&mut peer, &s, i0, "b").await;
}

#[tokio::test(start_paused = true)]
async fn duplicate_replies_are_ignored_after_the_first() {
    let mut peer = Peer::start().await;
    let (_client, s, i0, _) = peer.session(SID, SessionOptions::new()).await;

    // A describe answered twice: the caller gets the first answer.
    let call = spawn_describe(&s, "a");
    let (i, d) = expect_describe(&mut peer).await;
    peer.send(i, describe_ok(d.req_id, description("a", b"first")));
    peer.send(i, describe_ok(d.req_id, description("a", b"second")));
    let got = within(call).await.unwrap().unwrap();
    assert_eq!(got.data, b"first");

    // A create answered SUCCESS, then ALREADY_EXISTS: the caller sees the success.
    let s2 = s.clone();
    let create = tokio::spawn(async move { s2.create_semaphore("c", 1, b"").await });
    let (i, r) = peer.recv().await;
    let Rq::CreateSemaphore(c) = r else {
        panic!("expected create_semaphore, got {r:?}");
    };
    peer.send(i, create_result(c.req_id, StatusCode::Success));
    peer.send(i, create_result(c.req_id, StatusCode::AlreadyExists));
    within(create).await.unwrap().unwrap();

    // The next request gets a new req_id, and the late duplicates, replayed once more, do
    // not complete it.
    let call = spawn_describe(&s, "b");
    let (i, d2) = expect_describe(&mut peer).await;
    assert_ne!(d2.req_id, d.req_id);
    assert_ne!(d2.req_id, c.req_id);
    peer.send(i, describe_ok(d.req_id, description("a", b"third")));
    peer.send(i, create_result(c.req_id, StatusCode::AlreadyExists));
    peer.barrier(i, 9).await;
    assert!(!call.is_finished());
    peer.send(i, describe_ok(d2.req_id, description("b", b"mine")));
    let got = within(call).await.unwrap().unwrap();
    assert_eq!(
        (got.name.as_str(), got.data.as_slice()),
        ("b", &b"mine"[..])
    );
    assert!(attached(&s.state()));
    describe_round_trip(&mut peer, &s, i0, "d").await;
}

#[tokio::test(start_paused = true)]
async fn out_of_order_replies_to_concurrent_describes_reach_the_right_callers() {
    let mut peer = Peer::start().await;
    let (_client, s, _, _) = peer.session(SID, SessionOptions::new()).await;
    let a = spawn_describe(&s, "a");
    let b = spawn_describe(&s, "b");
    let (ia, ra) = expect_describe(&mut peer).await;
    let (ib, rb) = expect_describe(&mut peer).await;
    assert_ne!(ra.req_id, rb.req_id);
    let (first, second) = if ra.req_id < rb.req_id {
        ((ia, ra), (ib, rb))
    } else {
        ((ib, rb), (ia, ra))
    };
    // The later request is answered first.
    peer.send(
        second.0,
        describe_ok(second.1.req_id, description(&second.1.name, b"2")),
    );
    peer.send(
        first.0,
        describe_ok(first.1.req_id, description(&first.1.name, b"1")),
    );
    let a = within(a).await.unwrap().unwrap();
    let b = within(b).await.unwrap().unwrap();
    assert_eq!(a.name, "a");
    assert_eq!(b.name, "b");
    let by_name = |n: &str| if first.1.name == n { b"1" } else { b"2" };
    assert_eq!(a.data, by_name("a"));
    assert_eq!(b.data, by_name("b"));
}

#[tokio::test(start_paused = true)]
async fn an_unexpected_session_started_mid_stream_is_ignored() {
    let mut peer = Peer::start().await;
    let (_client, s, i0, _) = peer.session(SID, SessionOptions::new()).await;
    let call = spawn_describe(&s, "a");
    let (i, d) = expect_describe(&mut peer).await;
    for session_id in [SID, SID + 1, 0] {
        peer.send(
            i,
            Rs::SessionStarted(session_response::SessionStarted {
                session_id,
                timeout_millis: 1,
            }),
        );
    }
    peer.barrier(i, 11).await;
    assert!(!call.is_finished());
    assert!(attached(&s.state()));
    assert_eq!(s.id(), SID);
    peer.send(i, describe_ok(d.req_id, description("a", b"")));
    within(call).await.unwrap().unwrap();
    describe_round_trip(&mut peer, &s, i0, "b").await;
    assert!(!s.token().is_cancelled());
    assert_eq!(peer.stream_count(), 1, "the client reattached needlessly");
}

#[tokio::test(start_paused = true)]
async fn an_empty_response_oneof_is_ignored() {
    let mut peer = Peer::start().await;
    let (_client, s, i0, _) = peer.session(SID, SessionOptions::new()).await;
    let call = spawn_describe(&s, "a");
    let (i, d) = expect_describe(&mut peer).await;
    peer.send_message(i, SessionResponse { response: None });
    peer.send_message(i, SessionResponse { response: None });
    // Variants no server sends: ignored as well.
    peer.send(i, Rs::Unsupported6(Default::default()));
    peer.send(i, Rs::Unsupported18(Default::default()));
    peer.barrier(i, 13).await;
    assert!(!call.is_finished());
    peer.send(i, describe_ok(d.req_id, description("a", b"")));
    within(call).await.unwrap().unwrap();
    assert!(attached(&s.state()));
    describe_round_trip(&mut peer, &s, i0, "b").await;
    assert_eq!(peer.stream_count(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_reply_of_the_wrong_type_fails_that_call_with_a_protocol_error() {
    let mut peer = Peer::start().await;
    let (_client, s, i0, _) = peer.session(SID, SessionOptions::new()).await;

    let call = spawn_describe(&s, "a");
    let (i, d) = expect_describe(&mut peer).await;
    peer.send(i, release_ok(d.req_id, true));
    let err = within(call).await.unwrap().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Protocol);

    // The same for a create answered with a describe result.
    let s2 = s.clone();
    let create = tokio::spawn(async move { s2.create_semaphore("c", 1, b"").await });
    let (i, r) = peer.recv().await;
    let Rq::CreateSemaphore(c) = r else {
        panic!("expected create_semaphore, got {r:?}");
    };
    peer.send(i, describe_ok(c.req_id, description("c", b"")));
    let err = within(create).await.unwrap().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Protocol);

    // The right answer arriving late changes nothing, and the session stays usable.
    peer.send(i, describe_ok(d.req_id, description("a", b"")));
    peer.send(i, create_result(c.req_id, StatusCode::Success));
    assert!(attached(&s.state()));
    assert!(!s.token().is_cancelled());
    describe_round_trip(&mut peer, &s, i0, "b").await;
    assert_eq!(peer.stream_count(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_describe_with_a_hundred_thousand_owners_is_returned_whole() {
    const OWNERS: u64 = 100_000;
    let mut peer = Peer::start().await;
    let (_client, s, i0, _) = peer.session(SID, SessionOptions::new()).await;
    let s2 = s.clone();
    let call = tokio::spawn(async move {
        s2.describe_semaphore("big", DescribeOptions::new().owners(true))
            .await
    });
    let (i, d) = expect_describe(&mut peer).await;
    assert!(d.include_owners);
    let owners: Vec<SemaphoreSession> = (0..OWNERS)
        .map(|n| SemaphoreSession {
            order_id: n + 1,
            session_id: 1_000_000 + n,
            timeout_millis: 0,
            count: 1,
            // 40 bytes each: the message is well over gRPC's default 4 MiB limit.
            data: format!("{n:040}").into_bytes(),
        })
        .collect();
    let big = peer::SemaphoreDescription {
        name: "big".to_string(),
        data: Vec::new(),
        count: OWNERS,
        limit: OWNERS,
        ephemeral: false,
        owners,
        waiters: Vec::new(),
    };
    let size = prost::Message::encoded_len(&big);
    assert!(size > 4 * 1024 * 1024, "only {size} bytes");
    peer.send(i, describe_ok(d.req_id, big));
    let got = within(call).await.unwrap().unwrap();
    assert_eq!(got.owners.len(), 100_000);
    assert_eq!(got.count, OWNERS);
    assert_eq!(got.owners[99_999].order_id, OWNERS);
    assert_eq!(
        got.owners[99_999].data,
        format!("{:040}", OWNERS - 1).into_bytes()
    );
    assert!(attached(&s.state()));
    describe_round_trip(&mut peer, &s, i0, "b").await;
    assert_eq!(peer.stream_count(), 1);
}

/// Ends stream `i0` with `end`, then checks the client reattaches as it should and that an
/// unanswered describe is replayed on the new stream.
async fn reattaches_after(end: impl FnOnce(&Peer, usize)) {
    let mut peer = Peer::start().await;
    let (_client, s, i0, first) = peer.session(SID, SessionOptions::new()).await;
    assert_eq!(first.session_id, 0);
    let call = spawn_describe(&s, "a");
    let (_, _) = expect_describe(&mut peer).await;
    end(&peer, i0);
    let (i1, start) = expect_start(&mut peer).await;
    assert_ne!(i1, i0);
    assert_eq!(start.session_id, SID);
    assert_eq!(start.protection_key, first.protection_key);
    assert!(!start.protection_key.is_empty());
    assert_eq!(start.seq_no, first.seq_no + 1);
    assert_eq!(start.path, first.path);
    assert_eq!(start.timeout_millis, first.timeout_millis);
    assert!(matches!(s.state(), SessionState::Reattaching { .. }));
    assert!(!s.token().is_cancelled());
    accept_reattach(&peer, &s, i1).await;
    // The describe that was in flight is sent again on the new stream.
    let (i, d2) = expect_describe(&mut peer).await;
    assert_eq!(i, i1);
    assert_eq!(d2.name, "a");
    peer.send(i1, describe_ok(d2.req_id, description("a", b"again")));
    let got = within(call).await.unwrap().unwrap();
    assert_eq!(got.data, b"again");
    describe_round_trip(&mut peer, &s, i1, "b").await;
    assert!(!s.token().is_cancelled());
}

#[tokio::test(start_paused = true)]
async fn a_stream_the_server_ends_cleanly_is_reattached() {
    reattaches_after(|peer, i| peer.end(i)).await;
}

#[tokio::test(start_paused = true)]
async fn a_stream_the_server_ends_with_a_grpc_error_is_reattached() {
    reattaches_after(|peer, i| peer.error(i, tonic::Status::internal("boom"))).await;
}

#[tokio::test(start_paused = true)]
async fn a_cut_connection_is_reattached() {
    reattaches_after(|peer, _| peer.cut()).await;
}

#[tokio::test(start_paused = true)]
async fn failure_unavailable_is_reattached() {
    reattaches_after(|peer, i| peer.fail(i, StatusCode::Unavailable)).await;
}

#[tokio::test(start_paused = true)]
async fn failure_timeout_is_reattached() {
    reattaches_after(|peer, i| peer.fail(i, StatusCode::Timeout)).await;
}

/// Sends `failure{status}` with a describe and an acquire in flight and checks the session
/// ends at once, everything fails with a session-lost error and nothing is retried.
async fn session_ends_after_failure(status: StatusCode) {
    let mut peer = Peer::start().await;
    let (_client, s, i0, _) = peer.session(SID, SessionOptions::new()).await;
    let token = s.token();
    let describe = spawn_describe(&s, "a");
    let (_, _) = expect_describe(&mut peer).await;
    let s2 = s.clone();
    let acquire = tokio::spawn(async move {
        s2.acquire("lock", AcquireOptions::exclusive().ephemeral(true))
            .await
            .map(drop)
    });
    let (_, r) = peer.recv().await;
    assert!(matches!(r, Rq::AcquireSemaphore(_)), "{r:?}");
    let (_, r) = peer.recv().await; // the describe pipelined behind the acquire
    assert!(matches!(r, Rq::DescribeSemaphore(_)), "{r:?}");

    let at = Instant::now();
    peer.fail(i0, status);
    let state = wait_state(&s, SessionState::is_terminal).await;
    assert_eq!(state, SessionState::Expired);
    assert_eq!(s.state(), SessionState::Expired);
    assert!(token.is_cancelled());
    assert!(Instant::now() - at < Duration::from_secs(1));
    let err = within(describe).await.unwrap().unwrap_err();
    assert!(err.is_session_lost(), "{err:?}");
    let err = within(acquire).await.unwrap().unwrap_err();
    assert!(err.is_session_lost(), "{err:?}");
    // A call made afterwards fails at once with the same cause.
    let err = within(s.describe_semaphore("b", DescribeOptions::new()))
        .await
        .unwrap_err();
    assert!(err.is_session_lost(), "{err:?}");
    assert!(s.error().is_some_and(|e| e.is_session_lost()));
    // Nothing more is sent: no reattach.
    assert!(
        peer.recv_within(Duration::from_secs(30)).await.is_none(),
        "the client kept talking after a session verdict"
    );
    assert_eq!(peer.stream_count(), 1);
}

#[tokio::test(start_paused = true)]
async fn failure_session_expired_ends_the_session() {
    session_ends_after_failure(StatusCode::SessionExpired).await;
}

#[tokio::test(start_paused = true)]
async fn failure_bad_session_ends_the_session() {
    session_ends_after_failure(StatusCode::BadSession).await;
}

#[tokio::test(start_paused = true)]
async fn an_unanswered_request_stays_pending_while_the_server_keeps_pinging() {
    let mut peer = Peer::start().await;
    let (_client, s, i0, _) = peer.session(SID, SessionOptions::new()).await;
    // The server pings once a second, as YDB does for a 3 s timeout, and (auto-pong) answers
    // the client's pings; it never answers the describe.
    let pinger = peer.pinger(i0, Duration::from_secs(1));
    let mut call = spawn_describe(&s, "a");
    let (i, _) = expect_describe(&mut peer).await;
    assert_eq!(i, i0);
    let started = Instant::now();
    let waited = tokio::time::timeout(Duration::from_secs(60), &mut call).await;
    assert!(waited.is_err(), "the describe completed: {waited:?}");
    assert!(Instant::now() - started >= Duration::from_secs(60));
    assert!(!call.is_finished());
    assert!(attached(&s.state()));
    assert!(!s.token().is_cancelled());
    // The client answered the server's pings all along and never left the stream.
    let mut pongs = 0;
    while let Some((i, r)) = peer.recv_any_within(Duration::ZERO).await {
        assert_eq!(i, i0);
        match r.request {
            Some(Rq::Pong(_)) => pongs += 1,
            Some(Rq::Ping(_)) => {}
            other => panic!("unexpected request {other:?}"),
        }
    }
    assert!(pongs >= 55, "only {pongs} pongs in 60 s");
    assert_eq!(peer.stream_count(), 1);
    assert!(!peer.client_closed(i0), "the client half-closed its stream");
    call.abort();
    pinger.abort();
    describe_round_trip(&mut peer, &s, i0, "b").await;
}

#[tokio::test(start_paused = true)]
async fn a_silent_server_is_pinged_then_abandoned_and_the_session_expires_in_time() {
    let mut peer = Peer::start().await;
    peer.set_auto_pong(false);
    let before = Instant::now();
    let (_client, s, i0, first) = peer.session(SID, SessionOptions::new()).await;
    // The session_start is the last request the server ever answers; it was sent no later
    // than now.
    let answered = Instant::now();
    let timeout = SessionOptions::new().get_timeout();
    let token = s.token();
    let call = spawn_describe(&s, "a");
    let (_, _) = expect_describe(&mut peer).await;

    // The client's own pings go out on the silent stream.
    let (i, r) = peer.recv_any().await;
    assert_eq!(i, i0);
    assert!(matches!(r.request, Some(Rq::Ping(_))), "{r:?}");
    assert!(Instant::now() >= before + SessionOptions::new().get_ping_interval());
    // Then it declares the stream dead and opens a new one to reattach.
    let (i1, start) = loop {
        let (i, r) = peer.recv_any().await;
        match r.request {
            Some(Rq::Ping(_)) => assert_eq!(i, i0),
            Some(Rq::SessionStart(start)) => break (i, start),
            other => panic!("unexpected request on stream {i}: {other:?}"),
        }
    };
    assert_ne!(i1, i0);
    assert_eq!(start.session_id, SID);
    assert_eq!(start.protection_key, first.protection_key);
    assert_eq!(start.seq_no, first.seq_no + 1);
    assert!(matches!(s.state(), SessionState::Reattaching { .. }));
    assert!(!token.is_cancelled());

    // Nothing ever answers: the session expires no later than one session timeout after the
    // last answered request was sent, and its token fires.
    let state = wait_state(&s, SessionState::is_terminal).await;
    let expired_at = Instant::now();
    assert_eq!(state, SessionState::Expired);
    assert!(
        expired_at <= answered + timeout,
        "expired {:?} after the last answer",
        expired_at - answered
    );
    assert!(token.is_cancelled());
    let err = within(call).await.unwrap().unwrap_err();
    assert!(err.is_session_lost(), "{err:?}");
    assert_eq!(err.kind(), ErrorKind::SessionExpired);

    // Every further attempt was a reattach of the same session with a growing seq_no, and
    // nothing at all goes out after the expiry.
    let mut seq_no = start.seq_no;
    while let Some((i, r)) = peer.recv_any_within(Duration::from_secs(60)).await {
        match r.request {
            Some(Rq::Ping(_)) => {}
            Some(Rq::SessionStart(st)) => {
                assert!(i > i1);
                assert_eq!(st.session_id, SID);
                assert_eq!(st.protection_key, first.protection_key);
                assert!(st.seq_no > seq_no);
                seq_no = st.seq_no;
            }
            other => panic!("unexpected request on stream {i}: {other:?}"),
        }
        assert!(
            Instant::now() <= expired_at,
            "the client talked after expiry"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn server_pings_are_answered_at_once_with_the_same_opaque() {
    let mut peer = Peer::start().await;
    let (_client, s, i0, _) = peer.session(SID, SessionOptions::new()).await;
    // With a request in flight, too: the pong does not wait for anything.
    let call = spawn_describe(&s, "a");
    let (_, d) = expect_describe(&mut peer).await;
    for opaque in [1, 0, u64::MAX, 0xDEAD_BEEF, 0xDEAD_BEEF, 7] {
        let sent = Instant::now();
        peer.send(i0, ping(opaque));
        let (i, pong) = loop {
            let (i, r) = peer.recv_any().await;
            match r.request {
                Some(Rq::Pong(p)) => break (i, p),
                Some(Rq::Ping(_)) => {}
                other => panic!("unexpected request {other:?}"),
            }
        };
        assert_eq!(i, i0);
        assert_eq!(pong.opaque, opaque);
        assert!(
            Instant::now() - sent < Duration::from_millis(10),
            "pong took {:?}",
            Instant::now() - sent
        );
    }
    peer.send(i0, describe_ok(d.req_id, description("a", b"")));
    within(call).await.unwrap().unwrap();
    assert!(attached(&s.state()));
}

/// Starts an exclusive ephemeral acquire of `name` in the background and returns it with the
/// req_ids of the acquire and of the describe the client pipelines behind it.
async fn spawn_acquire(
    peer: &mut Peer,
    s: &Session,
    name: &str,
) -> (JoinHandle<Result<ydb_coordination::Lease>>, usize, u64, u64) {
    let s2 = s.clone();
    let n = name.to_string();
    let call = tokio::spawn(async move {
        s2.acquire(&n, AcquireOptions::exclusive().ephemeral(true))
            .await
    });
    let (i, r) = peer.recv().await;
    let Rq::AcquireSemaphore(a) = r else {
        panic!("expected acquire_semaphore, got {r:?}");
    };
    assert_eq!(a.name, name);
    let (i2, d) = expect_describe(peer).await;
    assert_eq!(i2, i);
    assert_eq!(d.name, name);
    (call, i, a.req_id, d.req_id)
}

#[tokio::test(start_paused = true)]
async fn a_reply_of_the_wrong_type_to_an_acquire_fails_it_and_withdraws_it() {
    let mut peer = Peer::start().await;
    let (_client, s, i0, _) = peer.session(SID, SessionOptions::new()).await;
    let (call, i, acquire_req, _) = spawn_acquire(&mut peer, &s, "lock").await;
    peer.send(i, create_result(acquire_req, StatusCode::Success));
    let err = within(call).await.unwrap().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Protocol);
    // The server may have queued or granted it: the client gives it back.
    let (_, r) = peer
        .recv_within(Duration::from_secs(5))
        .await
        .expect("no release_semaphore after a failed acquire");
    let Rq::ReleaseSemaphore(rel) = r else {
        panic!("expected release_semaphore, got {r:?}");
    };
    assert_eq!(rel.name, "lock");
    peer.send(i, release_ok(rel.req_id, true));
    assert!(attached(&s.state()));
    describe_round_trip(&mut peer, &s, i0, "b").await;
}

#[tokio::test(start_paused = true)]
async fn a_reply_of_the_wrong_type_to_the_acquires_describe_fails_it_and_withdraws_it() {
    let mut peer = Peer::start().await;
    let (_client, s, i0, _) = peer.session(SID, SessionOptions::new()).await;
    let (call, i, acquire_req, describe_req) = spawn_acquire(&mut peer, &s, "lock").await;
    peer.send(i, release_ok(describe_req, true));
    let err = within(call).await.unwrap().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Protocol);
    // The acquire itself is still in the server's hands: it must be withdrawn, so that a
    // later grant does not leave the semaphore held by nobody.
    peer.send(i, acquire_result(acquire_req, StatusCode::Success, true));
    let released = peer.recv_within(Duration::from_secs(5)).await;
    assert!(
        matches!(&released, Some((_, Rq::ReleaseSemaphore(r))) if r.name == "lock"),
        "expected release_semaphore(lock), got {released:?}"
    );
    assert!(attached(&s.state()));
    describe_round_trip(&mut peer, &s, i0, "b").await;
}

#[tokio::test(start_paused = true)]
async fn an_acquire_failed_by_a_protocol_error_is_not_replayed_after_reattach() {
    let mut peer = Peer::start().await;
    let (_client, s, i0, _) = peer.session(SID, SessionOptions::new()).await;
    let (call, i, _acquire_req, describe_req) = spawn_acquire(&mut peer, &s, "lock").await;
    peer.send(i, release_ok(describe_req, true));
    let err = within(call).await.unwrap().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Protocol);
    peer.barrier(i0, 3).await;
    // Whatever the client sent to clean up on the old stream is left unanswered.
    while peer.recv_within(Duration::ZERO).await.is_some() {}
    peer.end(i0);
    let (i1, _) = peer.accept_start(SID).await;
    wait_state(&s, attached).await;
    // A failed acquire whose caller is gone must not be sent again (it would take the
    // semaphore for nobody).
    while let Some((i, r)) = peer.recv_within(Duration::from_secs(5)).await {
        assert_eq!(i, i1);
        assert!(
            !matches!(r, Rq::AcquireSemaphore(_)),
            "the failed acquire was replayed: {r:?}"
        );
        if let Rq::ReleaseSemaphore(rel) = r {
            peer.send(i1, release_ok(rel.req_id, false));
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_describe_result_without_a_description_is_a_protocol_error() {
    let mut peer = Peer::start().await;
    let (_client, s, i0, _) = peer.session(SID, SessionOptions::new()).await;
    let call = spawn_describe(&s, "a");
    let (i, d) = expect_describe(&mut peer).await;
    peer.send(
        i,
        Rs::DescribeSemaphoreResult(session_response::DescribeSemaphoreResult {
            req_id: d.req_id,
            status: StatusCode::Success as i32,
            issues: Vec::new(),
            semaphore_description: None,
            watch_added: false,
        }),
    );
    let err = within(call).await.unwrap().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Protocol);
    describe_round_trip(&mut peer, &s, i0, "b").await;
}

#[tokio::test(start_paused = true)]
async fn a_reattach_answered_with_another_session_id_ends_the_session_as_lost() {
    let mut peer = Peer::start().await;
    let (_client, s, i0, _) = peer.session(SID, SessionOptions::new()).await;
    let token = s.token();
    let call = spawn_describe(&s, "a");
    let (_, _) = expect_describe(&mut peer).await;
    peer.end(i0);
    let (i1, start) = expect_start(&mut peer).await;
    assert_eq!(start.session_id, SID);
    peer.send(
        i1,
        Rs::SessionStarted(session_response::SessionStarted {
            session_id: SID + 1,
            timeout_millis: 0,
        }),
    );
    let state = wait_state(&s, SessionState::is_terminal).await;
    assert_eq!(state, SessionState::Expired);
    assert!(token.is_cancelled());
    let err = within(call).await.unwrap().unwrap_err();
    assert!(err.is_session_lost(), "{err:?}");
}

#[tokio::test(start_paused = true)]
async fn failure_session_expired_on_reattach_ends_the_session() {
    let mut peer = Peer::start().await;
    let (_client, s, i0, _) = peer.session(SID, SessionOptions::new()).await;
    let token = s.token();
    let call = spawn_describe(&s, "a");
    let (_, _) = expect_describe(&mut peer).await;
    peer.fail(i0, StatusCode::Unavailable);
    let (i1, _) = expect_start(&mut peer).await;
    peer.fail(i1, StatusCode::SessionExpired);
    let state = wait_state(&s, SessionState::is_terminal).await;
    assert_eq!(state, SessionState::Expired);
    assert!(token.is_cancelled());
    let err = within(call).await.unwrap().unwrap_err();
    assert!(err.is_session_lost(), "{err:?}");
    assert_eq!(err.kind(), ErrorKind::SessionExpired);
    assert!(peer.recv_within(Duration::from_secs(30)).await.is_none());
}

#[tokio::test(start_paused = true)]
async fn an_unsolicited_session_stopped_ends_the_session() {
    let mut peer = Peer::start().await;
    let (_client, s, i0, _) = peer.session(SID, SessionOptions::new()).await;
    let token = s.token();
    let call = spawn_describe(&s, "a");
    let (_, _) = expect_describe(&mut peer).await;
    peer.send(
        i0,
        Rs::SessionStopped(session_response::SessionStopped { session_id: SID }),
    );
    peer.end(i0);
    let state = wait_state(&s, SessionState::is_terminal).await;
    assert_eq!(state, SessionState::Expired);
    assert!(token.is_cancelled());
    let err = within(call).await.unwrap().unwrap_err();
    assert!(err.is_session_lost(), "{err:?}");
    assert!(peer.recv_within(Duration::from_secs(30)).await.is_none());
}

#[tokio::test(start_paused = true)]
async fn a_server_that_never_starts_the_session_makes_session_time_out() {
    let peer = Peer::start().await;
    peer.set_auto_pong(false);
    let client = peer.client().await;
    let opts = SessionOptions::new().connect_timeout(Duration::from_secs(5));
    let started = Instant::now();
    let err = within(client.session(peer::NODE, opts)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout);
    assert!(Instant::now() - started <= Duration::from_secs(5));
    assert!(peer.stream_count() >= 1);
}

#[tokio::test(start_paused = true)]
async fn a_session_started_with_session_id_zero_is_rejected() {
    // Session id 0 means "create a new session" in session_start: a client that accepted it
    // would, on its first reattach, silently get a brand-new session without its semaphores.
    let mut peer = Peer::start().await;
    let client = peer.client().await;
    let c = client.clone();
    let opts = SessionOptions::new().connect_timeout(Duration::from_secs(5));
    let pending = tokio::spawn(async move { c.session(peer::NODE, opts).await });
    let (_, _) = peer.accept_start(0).await;
    let result = within(pending).await.unwrap();
    match result {
        Err(err) => assert!(
            matches!(err.kind(), ErrorKind::Protocol | ErrorKind::Timeout),
            "{err:?}"
        ),
        Ok(s) => panic!("a session with id {} was accepted", s.id()),
    }
}

/// Starts `n` describes and returns them with the requests the server got, in the order
/// the callers were started.
async fn describes_in_flight(
    peer: &mut Peer,
    s: &Session,
    n: usize,
) -> Vec<(
    JoinHandle<Result<SemaphoreDescription>>,
    session_request::DescribeSemaphore,
)> {
    let calls: Vec<_> = (0..n)
        .map(|k| spawn_describe(s, &format!("s{k}")))
        .collect();
    let mut asked = Vec::new();
    for _ in 0..n {
        asked.push(expect_describe(peer).await.1);
    }
    asked.sort_by_key(|d| d.name[1..].parse::<usize>().unwrap());
    calls.into_iter().zip(asked).collect()
}

#[tokio::test(start_paused = true)]
async fn a_burst_of_answers_longer_than_one_read_reaches_every_caller() {
    let mut peer = Peer::start().await;
    let (_client, s, i0, _) = peer.session(SID, SessionOptions::new()).await;
    let calls = describes_in_flight(&mut peer, &s, 100).await;
    // All hundred answers are on the stream before the session task reads the first.
    for (_, d) in &calls {
        peer.send(
            i0,
            describe_ok(d.req_id, description(&d.name, d.name.as_bytes())),
        );
    }
    for (call, d) in calls {
        let got = within(call).await.unwrap().unwrap();
        assert_eq!(got.name, d.name);
        assert_eq!(got.data, d.name.as_bytes());
    }
    describe_round_trip(&mut peer, &s, i0, "after").await;
}

#[tokio::test(start_paused = true)]
async fn an_answer_read_after_the_servers_verdict_in_one_burst_is_not_taken() {
    let mut peer = Peer::start().await;
    let (_client, s, i0, _) = peer.session(SID, SessionOptions::new()).await;
    let mut calls = describes_in_flight(&mut peer, &s, 2).await.into_iter();
    let (a, da) = calls.next().unwrap();
    let (b, db) = calls.next().unwrap();
    peer.send(i0, describe_ok(da.req_id, description("s0", b"before")));
    peer.send_message(i0, peer::failure(StatusCode::SessionExpired, "scripted"));
    peer.send(i0, describe_ok(db.req_id, description("s1", b"after")));
    peer.end(i0);
    assert_eq!(within(a).await.unwrap().unwrap().data, b"before");
    let err = within(b).await.unwrap().unwrap_err();
    assert!(err.is_session_lost(), "{err:?}");
    assert_eq!(
        wait_state(&s, SessionState::is_terminal).await,
        SessionState::Expired
    );
}

#[tokio::test(start_paused = true)]
async fn an_answer_and_the_streams_error_in_one_burst_are_both_read() {
    let mut peer = Peer::start().await;
    let (_client, s, i0, _) = peer.session(SID, SessionOptions::new()).await;
    let mut calls = describes_in_flight(&mut peer, &s, 1).await.into_iter();
    let (a, da) = calls.next().unwrap();
    peer.send(i0, describe_ok(da.req_id, description("s0", b"kept")));
    // A status that does not blame the endpoint (the server giving up on the call).
    peer.error(i0, tonic::Status::cancelled("shutting down"));
    assert_eq!(within(a).await.unwrap().unwrap().data, b"kept");
    // The error is read too: the session reattaches at once and keeps working.
    let (i1, start) = expect_start(&mut peer).await;
    assert_ne!(i1, i0);
    assert_eq!(start.session_id, SID);
    accept_reattach(&peer, &s, i1).await;
    describe_round_trip(&mut peer, &s, i1, "after").await;
    // On the same connection: the client read the status, which does not blame the endpoint
    // (an end without one would have it connect again).
    assert_eq!(peer.connections(), 1);
}

/// A server's `TIMEOUT` status on an acquire is an error of its own kind: a `try_` form
/// reads as `None` only the answer "not acquired" (`SUCCESS`, `acquired: false`).
#[tokio::test(start_paused = true)]
async fn a_timeout_status_on_a_try_is_an_error_and_only_not_acquired_is_none() {
    let mut peer = Peer::start().await;
    let (_client, s, _, _) = peer.session(SID, SessionOptions::new()).await;
    for (status, busy) in [(StatusCode::Timeout, false), (StatusCode::Success, true)] {
        let s2 = s.clone();
        let call = tokio::spawn(async move {
            s2.try_acquire("lock", AcquireOptions::exclusive().ephemeral(true))
                .await
        });
        let (i, acquire) = loop {
            match peer.recv().await {
                (i, Rq::AcquireSemaphore(a)) => break (i, a),
                (i, Rq::DescribeSemaphore(d)) => {
                    peer.send(i, describe_ok(d.req_id, description("lock", b"")));
                }
                (_, other) => panic!("expected acquire_semaphore, got {other:?}"),
            }
        };
        peer.send(i, acquire_result(acquire.req_id, status, false));
        let outcome = within(call).await.unwrap();
        if busy {
            assert!(outcome.unwrap().is_none());
        } else {
            assert_eq!(outcome.unwrap_err().kind(), ErrorKind::Timeout);
        }
    }
}
