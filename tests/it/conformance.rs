//! Raw-protocol conformance suite: one test per scenario of `SPEC.md` §9
//! (`emulator/SPEC.md`: A 1-22, B 23-28, C 29-44, D 45-51, E 52-53, F 54-59), run over real
//! gRPC against the emulator with paused tokio time. Each test's number is its scenario's;
//! sections named below are those of `SPEC.md`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::raw;

use std::time::Duration;

use prost::Message;
use tokio::time::{Instant, sleep, sleep_until, timeout};
use tonic::transport::Channel;
use ydb_coordination::emulator::Emulator;
use ydb_coordination::{AcquireOptions, Client, SessionOptions, config::DescribeOptions};
use ydb_grpc::ydb_proto::VirtualTimestamp;
use ydb_grpc::ydb_proto::coordination::{
    AlterNodeRequest, Config, ConsistencyMode, CreateNodeRequest, DescribeNodeRequest,
    DescribeNodeResult, DropNodeRequest,
};
use ydb_grpc::ydb_proto::discovery::v1::discovery_service_client::DiscoveryServiceClient;
use ydb_grpc::ydb_proto::discovery::{ListEndpointsRequest, ListEndpointsResult};
use ydb_grpc::ydb_proto::operations::Operation;
use ydb_grpc::ydb_proto::scheme::entry;

use raw::*;

const MAX: u64 = u64::MAX;
const MINUTE: u64 = 60_000;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

async fn setup() -> (Emulator, Channel) {
    let emu = emulator().await;
    let ch = channel(&emu).await;
    (emu, ch)
}

/// Asserts `at - since` is `expected` (with a few milliseconds of slack).
#[track_caller]
fn assert_elapsed(since: Instant, at: Instant, expected: Duration) {
    let got = at.duration_since(since);
    assert!(
        got >= expected && got <= expected + ms(5),
        "expected {expected:?} to have passed, got {got:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// A. Stream / session protocol
// ---------------------------------------------------------------------------------------------

/// 1
#[tokio::test(start_paused = true)]
async fn new_sessions_get_consecutive_ids() {
    let (emu, ch) = setup().await;
    let mut a = Raw::open(&ch);
    a.start(NODE, 0, 30_000, 1, b"");
    assert_eq!(a.started().await, 1);
    let mut b = Raw::open(&ch);
    b.start(NODE, 0, 30_000, 1, b"");
    assert_eq!(b.started().await, 2);
    assert_eq!(emu.session_ids(NODE), vec![1, 2]);
}

/// 2
#[tokio::test(start_paused = true)]
async fn first_message_other_than_start_ends_stream_with_invalid_argument() {
    let (emu, ch) = setup().await;
    let mut a = Raw::open(&ch);
    a.ping(7);
    a.expect_end_code(tonic::Code::InvalidArgument).await;
    let mut b = Raw::open(&ch);
    b.acquire(1, "Sem1", 0, 1, true);
    b.expect_end_code(tonic::Code::InvalidArgument).await;
    let mut c = Raw::open(&ch);
    c.stop();
    c.expect_end_code(tonic::Code::InvalidArgument).await;
    assert!(emu.session_ids(NODE).is_empty());
    assert!(emu.semaphore_names(NODE).is_empty());
}

/// 3
#[tokio::test(start_paused = true)]
async fn second_session_start_on_a_stream_fails_with_bad_request() {
    let (emu, ch) = setup().await;
    let mut a = Raw::open(&ch);
    a.start(NODE, 0, 30_000, 1, b"");
    let id = a.started().await;
    a.start(NODE, 0, 30_000, 1, b"");
    a.expect_failure(StatusCode::BadRequest).await;
    // Only one session was created; it is detached, not destroyed.
    assert_eq!(emu.session_ids(NODE), vec![id]);
}

/// 4
#[tokio::test(start_paused = true)]
async fn empty_or_unsupported_request_fails_with_bad_request() {
    let (_emu, ch) = setup().await;
    let unsupported = || ydb_grpc::ydb_proto::coordination::Unsupported {};
    let requests: Vec<Option<Rq>> = vec![
        None,
        Some(Rq::Unsupported5(unsupported())),
        Some(Rq::Unsupported6(unsupported())),
        Some(Rq::Unsupported13(unsupported())),
        Some(Rq::Unsupported14(unsupported())),
        Some(Rq::Unsupported15(unsupported())),
    ];
    for request in requests {
        let mut s = Raw::new_session(&ch, 30_000).await;
        s.send_msg(SessionRequest { request });
        s.expect_failure(StatusCode::BadRequest).await;
    }
}

/// 5
#[tokio::test(start_paused = true)]
async fn start_on_missing_node_fails_with_not_found() {
    let (_emu, ch) = setup().await;
    let mut a = Raw::open(&ch);
    a.start("/local/missing", 0, 30_000, 1, b"");
    a.expect_failure(StatusCode::NotFound).await;
}

/// 6
#[tokio::test(start_paused = true)]
async fn start_with_empty_path_fails_with_bad_request() {
    let (_emu, ch) = setup().await;
    let mut a = Raw::open(&ch);
    a.start("", 0, 30_000, 1, b"");
    a.expect_failure(StatusCode::BadRequest).await;
}

/// 7
#[tokio::test(start_paused = true)]
async fn reattach_of_unknown_session_fails_with_session_expired() {
    let (emu, ch) = setup().await;
    let mut a = Raw::open(&ch);
    a.start(NODE, 1, 30_000, 1, b"");
    a.expect_failure(StatusCode::SessionExpired).await;
    assert!(emu.session_ids(NODE).is_empty());
}

/// 8
#[tokio::test(start_paused = true)]
async fn session_timeout_above_thirty_minutes_fails_with_bad_request() {
    let (emu, ch) = setup().await;
    for timeout_millis in [2 * 24 * 3_600_000, MAX, 1_800_001] {
        let mut a = Raw::open(&ch);
        a.start(NODE, 0, timeout_millis, 1, b"");
        a.expect_failure(StatusCode::BadRequest).await;
    }
    assert!(emu.session_ids(NODE).is_empty());
    // The limit itself is accepted.
    let s = Raw::new_session(&ch, 1_800_000).await;
    assert_eq!(s.session_id, 1);
}

/// 9
#[tokio::test(start_paused = true)]
async fn oversized_description_or_protection_key_fails_with_bad_request() {
    let (emu, ch) = setup().await;
    let mut a = Raw::open(&ch);
    a.start_with(session_request::SessionStart {
        path: NODE.to_string(),
        timeout_millis: 30_000,
        description: "d".repeat(1025),
        seq_no: 1,
        ..Default::default()
    });
    a.expect_failure(StatusCode::BadRequest).await;
    let mut b = Raw::open(&ch);
    b.start(NODE, 0, 30_000, 1, &[7; 17]);
    b.expect_failure(StatusCode::BadRequest).await;
    assert!(emu.session_ids(NODE).is_empty());
    // At the limits both are fine.
    let mut c = Raw::open(&ch);
    c.start_with(session_request::SessionStart {
        path: NODE.to_string(),
        timeout_millis: 30_000,
        description: "d".repeat(1024),
        seq_no: 1,
        protection_key: vec![7; 16],
        ..Default::default()
    });
    assert_eq!(c.started().await, 1);
}

/// 10
#[tokio::test(start_paused = true)]
async fn server_pings_every_third_of_the_session_timeout() {
    let (_emu, ch) = setup().await;
    // (session timeout, expected period, how long to watch)
    for (timeout_millis, period, watch) in
        [(3_000, 1_000, 3_500), (MINUTE, 5_000, 16_000), (0, 10, 55)]
    {
        let mut s = Raw::open(&ch);
        s.start(NODE, 0, timeout_millis, 1, b"");
        s.started().await;
        let started_at = s.started_at.unwrap();
        s.expect_quiet(ms(watch)).await;
        let pings = s.pings();
        let expected = watch / period + 1;
        assert_eq!(
            pings.len() as u64,
            expected,
            "timeout {timeout_millis}: pings at {:?}",
            pings
                .iter()
                .map(|(at, _)| at.duration_since(started_at))
                .collect::<Vec<_>>()
        );
        // The first ping follows session_started at once.
        assert_elapsed(started_at, pings[0].0, Duration::ZERO);
        for pair in pings.windows(2) {
            assert_elapsed(pair[0].0, pair[1].0, ms(period));
        }
        assert!(pings.iter().all(|(_, opaque)| *opaque != 0));
        s.close().await;
    }
}

/// 11
#[tokio::test(start_paused = true)]
async fn unanswered_ping_fails_stream_with_timeout_and_detaches_session() {
    let (emu, ch) = setup().await;
    let mut s = Raw::open_mode(&ch, Mode::Manual);
    s.start(NODE, 0, 3_000, 1, b"");
    let id = s.started().await;
    let (ping_at, msg) = s.recv_at().await;
    assert!(matches!(msg, Rs::Ping(_)), "expected a ping, got {msg:?}");
    let failed_at = s.expect_failure(StatusCode::Timeout).await;
    assert_elapsed(ping_at, failed_at, ms(1_000));
    // The session is detached, not gone: it can be reattached within its timeout.
    assert_eq!(emu.session_ids(NODE), vec![id]);
    sleep(ms(1_000)).await;
    let again = Raw::attach(&ch, id, 3_000, 2, b"").await;
    assert_eq!(again.session_id, id);
}

/// 12
#[tokio::test(start_paused = true)]
async fn mismatched_pong_fails_with_bad_request() {
    let (_emu, ch) = setup().await;
    let mut s = Raw::open_mode(&ch, Mode::Manual);
    s.start(NODE, 0, 30_000, 1, b"");
    s.started().await;
    let opaque = match s.recv().await {
        Rs::Ping(p) => p.opaque,
        other => panic!("expected a ping, got {other:?}"),
    };
    s.pong(opaque.wrapping_add(1));
    s.expect_failure(StatusCode::BadRequest).await;
}

/// 13
#[tokio::test(start_paused = true)]
async fn client_pings_are_answered_with_matching_pongs() {
    let (_emu, ch) = setup().await;
    let mut s = Raw::new_session(&ch, 30_000).await;
    let (a, b) = (0x1234_5678_9abc_def0, 42);
    s.ping(a);
    s.ping(b);
    for expected in [a, b] {
        match s.recv().await {
            Rs::Pong(p) => assert_eq!(p.opaque, expected),
            other => panic!("expected a pong, got {other:?}"),
        }
    }
    // The stream is still healthy.
    s.describe_missing(1, "Sem1").await;
}

/// 14
#[tokio::test(start_paused = true)]
async fn session_stop_answers_stopped_and_session_cannot_be_reattached() {
    let (emu, ch) = setup().await;
    let mut s = Raw::new_session(&ch, 30_000).await;
    let id = s.session_id;
    s.stop();
    s.expect_stopped(id).await;
    assert!(emu.session_ids(NODE).is_empty());
    let mut again = Raw::open(&ch);
    again.start(NODE, id, 30_000, 2, b"");
    again.expect_failure(StatusCode::SessionExpired).await;
}

/// 15
#[tokio::test(start_paused = true)]
async fn reattach_after_disconnect_keeps_semaphores() {
    let (_emu, ch) = setup().await;
    let mut s = Raw::new_session(&ch, 30_000).await;
    let id = s.session_id;
    s.create(1, "Sem1", 5, b"");
    s.expect_create(1, StatusCode::Success).await;
    s.acquire(2, "Sem1", 0, 1, false);
    s.expect_acquired(2).await;
    s.close().await;
    sleep(ms(1_000)).await;
    let mut again = Raw::attach(&ch, id, 30_000, 2, b"").await;
    let d = again.describe_ok(1, "Sem1").await;
    assert_eq!(sessions_of(&d.owners), vec![id]);
    assert_eq!(d.count, 1);
}

/// 16
#[tokio::test(start_paused = true)]
async fn stealing_with_equal_or_higher_seq_no_kicks_the_previous_stream() {
    let (emu, ch) = setup().await;
    let mut a = Raw::open(&ch);
    a.start(NODE, 0, 30_000, 1, b"");
    let id = a.started().await;
    a.create(1, "Sem1", 1, b"");
    a.expect_create(1, StatusCode::Success).await;
    a.acquire(2, "Sem1", 0, 1, false);
    a.expect_acquired(2).await;
    // Equal seq_no steals.
    let mut b = Raw::attach(&ch, id, 30_000, 1, b"").await;
    a.expect_failure(StatusCode::BadSession).await;
    // Higher seq_no steals again.
    let mut c = Raw::attach(&ch, id, 30_000, 2, b"").await;
    b.expect_failure(StatusCode::BadSession).await;
    // Ownership belongs to the session, not the stream.
    let d = c.describe_ok(1, "Sem1").await;
    assert_eq!(sessions_of(&d.owners), vec![id]);
    assert_eq!(emu.session_ids(NODE), vec![id]);
}

/// 17
#[tokio::test(start_paused = true)]
async fn session_created_without_key_can_be_attached_with_any_key() {
    let (_emu, ch) = setup().await;
    let mut a = Raw::attach(&ch, 0, 30_000, 1, b"").await;
    let id = a.session_id;
    let _b = Raw::attach(&ch, id, 30_000, 2, b"foobar").await;
    a.expect_failure(StatusCode::BadSession).await;
}

/// 18
#[tokio::test(start_paused = true)]
async fn session_created_with_key_can_be_attached_with_the_same_key() {
    let (_emu, ch) = setup().await;
    let mut a = Raw::attach(&ch, 0, 30_000, 1, b"foobar").await;
    let id = a.session_id;
    let _b = Raw::attach(&ch, id, 30_000, 2, b"foobar").await;
    a.expect_failure(StatusCode::BadSession).await;
}

/// 19
#[tokio::test(start_paused = true)]
async fn detached_session_expires_after_its_timeout() {
    let (emu, ch) = setup().await;
    let mut s1 = Raw::new_session(&ch, MINUTE).await;
    let mut s2 = Raw::new_session(&ch, MINUTE).await;
    let (id1, id2) = (s1.session_id, s2.session_id);
    let t0 = Instant::now();
    s1.close().await;
    s2.close().await;
    sleep_until(t0 + ms(59_900)).await;
    assert_eq!(emu.session_ids(NODE), vec![id1, id2]);
    let _s1 = Raw::attach(&ch, id1, MINUTE, 2, b"").await;
    sleep_until(t0 + ms(60_001)).await;
    let mut late = Raw::open(&ch);
    late.start(NODE, id2, MINUTE, 2, b"");
    late.expect_failure(StatusCode::SessionExpired).await;
    assert_eq!(emu.session_ids(NODE), vec![id1]);
}

/// 20
#[tokio::test(start_paused = true)]
async fn attached_session_never_expires() {
    let (emu, ch) = setup().await;
    let mut s = Raw::new_session(&ch, 1_000).await;
    let id = s.session_id;
    s.create(1, "Sem1", 1, b"");
    s.expect_create(1, StatusCode::Success).await;
    s.acquire(2, "Sem1", 0, 1, false);
    s.expect_acquired(2).await;
    s.expect_quiet(ms(10_000)).await;
    assert_eq!(emu.session_ids(NODE), vec![id]);
    let d = s.describe_ok(3, "Sem1").await;
    assert_eq!(sessions_of(&d.owners), vec![id]);
    let mut other = Raw::new_session(&ch, 30_000).await;
    other.acquire(1, "Sem1", 0, 1, false);
    other.expect_acquire(1, StatusCode::Success, false).await;
}

/// 21
#[tokio::test(start_paused = true)]
async fn restart_gives_sessions_a_grace_period_and_resets_seq_no() {
    let (emu, ch) = setup().await;
    let mut s1 = Raw::attach(&ch, 0, MINUTE, 5, b"").await;
    let mut s2 = Raw::attach(&ch, 0, MINUTE, 5, b"").await;
    let (id1, id2) = (s1.session_id, s2.session_id);
    let t0 = Instant::now();
    emu.restart();
    s1.expect_failure(StatusCode::Unavailable).await;
    s2.expect_failure(StatusCode::Unavailable).await;
    sleep_until(t0 + ms(69_999)).await;
    assert_eq!(emu.session_ids(NODE), vec![id1, id2]);
    // Any seq_no reattaches after a restart, even one below the last used.
    let _s1 = Raw::attach(&ch, id1, MINUTE, 0, b"").await;
    sleep_until(t0 + ms(70_001)).await;
    let mut late = Raw::open(&ch);
    late.start(NODE, id2, MINUTE, 0, b"");
    late.expect_failure(StatusCode::SessionExpired).await;
    assert_eq!(emu.session_ids(NODE), vec![id1]);
}

/// 22
#[tokio::test(start_paused = true)]
async fn restart_with_request_in_flight_fails_stream_with_unavailable() {
    let (emu, ch) = setup().await;
    let mut s = Raw::new_session(&ch, 30_000).await;
    let id = s.session_id;
    s.create(1, "Sem1", 1, b"");
    emu.restart();
    // No result overtakes the failure.
    s.expect_failure(StatusCode::Unavailable).await;
    // The client reattaches and carries on.
    let mut again = Raw::attach(&ch, id, 30_000, 2, b"").await;
    again.create(1, "Sem2", 1, b"");
    again.expect_create(1, StatusCode::Success).await;
}

// ---------------------------------------------------------------------------------------------
// B. Semaphore CRUD
// ---------------------------------------------------------------------------------------------

/// 23
#[tokio::test(start_paused = true)]
async fn create_rejects_zero_limit_and_duplicates() {
    let (_emu, ch) = setup().await;
    let mut s = Raw::new_session(&ch, 30_000).await;
    s.create(1, "Sem1", 0, b"");
    s.expect_create(1, StatusCode::BadRequest).await;
    s.create(2, "Sem1", 42, b"");
    s.expect_create(2, StatusCode::Success).await;
    s.create(3, "Sem1", 42, b"");
    s.expect_create(3, StatusCode::AlreadyExists).await;
    s.create(4, "Sem1", 51, b"");
    s.expect_create(4, StatusCode::AlreadyExists).await;
    s.describe_missing(5, "Sem2").await;
    let d = s.describe_ok(6, "Sem1").await;
    assert_eq!(d.name, "Sem1");
    assert_eq!(d.limit, 42);
    assert_eq!(d.count, 0);
    assert!(!d.ephemeral);
}

/// 24
#[tokio::test(start_paused = true)]
async fn create_over_ephemeral_semaphore_fails_with_precondition_failed() {
    let (_emu, ch) = setup().await;
    let mut s = Raw::new_session(&ch, 30_000).await;
    s.acquire(1, "Lock1", 0, 1, true);
    s.expect_acquired(1).await;
    for (req, limit) in [(2, 1), (3, MAX)] {
        s.create(req, "Lock1", limit, b"");
        s.expect_create(req, StatusCode::PreconditionFailed).await;
    }
}

/// 25
#[tokio::test(start_paused = true)]
async fn delete_rejects_ephemeral_and_missing_semaphores() {
    let (_emu, ch) = setup().await;
    let mut s = Raw::new_session(&ch, 30_000).await;
    s.acquire(1, "Lock1", 0, 1, true);
    s.expect_acquired(1).await;
    s.delete(2, "Lock1", false);
    s.expect_delete(2, StatusCode::PreconditionFailed).await;
    s.delete(3, "Lock1", true);
    s.expect_delete(3, StatusCode::PreconditionFailed).await;
    s.delete(4, "Sem1", false);
    s.expect_delete(4, StatusCode::NotFound).await;
    s.create(5, "Sem1", 1, b"");
    s.expect_create(5, StatusCode::Success).await;
    s.delete(6, "Sem1", false);
    s.expect_delete(6, StatusCode::Success).await;
    s.delete(7, "Sem1", false);
    s.expect_delete(7, StatusCode::NotFound).await;
    // The ephemeral lock is still held.
    let d = s.describe_ok(8, "Lock1").await;
    assert_eq!(sessions_of(&d.owners), vec![s.session_id]);
}

/// 26
#[tokio::test(start_paused = true)]
async fn semaphore_data_round_trips_and_survives_restart() {
    let (emu, ch) = setup().await;
    let mut s = Raw::new_session(&ch, MINUTE).await;
    let id = s.session_id;
    let data = [0x81, 0x82, 0x83, 0x84];
    s.create(1, "Sem1", 1, b"");
    s.expect_create(1, StatusCode::Success).await;
    s.create(2, "Sem2", 1, &data);
    s.expect_create(2, StatusCode::Success).await;
    assert!(s.describe_ok(3, "Sem1").await.data.is_empty());
    assert_eq!(s.describe_ok(4, "Sem2").await.data, data);
    s.create(5, "Sem2", 1, b"other");
    s.expect_create(5, StatusCode::AlreadyExists).await;
    assert_eq!(s.describe_ok(6, "Sem2").await.data, data);
    s.update(7, "Sem1", &[0x91, 0x92]);
    s.expect_update(7, StatusCode::Success).await;
    s.update(8, "Sem2", &[0xa1]);
    s.expect_update(8, StatusCode::Success).await;
    s.update(9, "Sem3", b"x");
    s.expect_update(9, StatusCode::NotFound).await;
    assert_eq!(s.describe_ok(10, "Sem1").await.data, [0x91, 0x92]);
    assert_eq!(s.describe_ok(11, "Sem2").await.data, [0xa1]);
    // Restart tier: the data persists.
    emu.restart();
    s.expect_failure(StatusCode::Unavailable).await;
    let mut again = Raw::attach(&ch, id, MINUTE, 2, b"").await;
    assert_eq!(again.describe_ok(1, "Sem1").await.data, [0x91, 0x92]);
    assert_eq!(again.describe_ok(2, "Sem2").await.data, [0xa1]);
}

/// 27
#[tokio::test(start_paused = true)]
async fn name_length_is_checked_on_create_and_update_only_and_data_is_capped() {
    let (_emu, ch) = setup().await;
    let mut s = Raw::new_session(&ch, 30_000).await;
    let long = "n".repeat(1025);
    s.create(1, &long, 1, b"");
    s.expect_create(1, StatusCode::BadRequest).await;
    s.update(2, &long, b"x");
    s.expect_update(2, StatusCode::BadRequest).await;
    s.create(3, "Sem1", 1, &vec![0; 1024 * 1024 + 1]);
    s.expect_create(3, StatusCode::BadRequest).await;
    s.describe_missing(4, "Sem1").await;
    // At the limits everything is fine.
    let limit_name = "n".repeat(1024);
    s.create(5, &limit_name, 1, &vec![0; 1024 * 1024]);
    s.expect_create(5, StatusCode::Success).await;
    // Acquire does not check the name length.
    let ephemeral = "e".repeat(2000);
    s.acquire(6, &ephemeral, 0, 1, true);
    s.expect_acquired(6).await;
    let d = s.describe_ok(7, &ephemeral).await;
    assert!(d.ephemeral);
    assert_eq!(sessions_of(&d.owners), vec![s.session_id]);
}

/// 28
#[tokio::test(start_paused = true)]
async fn force_delete_aborts_waiters_and_tells_owners_nothing() {
    let (_emu, ch) = setup().await;
    let mut s1 = Raw::new_session(&ch, 30_000).await;
    let mut s2 = Raw::new_session(&ch, 30_000).await;
    s1.create(1, "Sem1", 1, b"");
    s1.expect_create(1, StatusCode::Success).await;
    s1.acquire(2, "Sem1", 0, 1, false);
    s1.expect_acquired(2).await;
    s2.acquire(1, "Sem1", MINUTE, 1, false);
    s2.expect_pending(1).await;
    s1.delete(3, "Sem1", false);
    s1.expect_delete(3, StatusCode::PreconditionFailed).await;
    s1.delete(4, "Sem1", true);
    s1.expect_delete(4, StatusCode::Success).await;
    s2.expect_acquire(1, StatusCode::Aborted, false).await;
    s1.expect_quiet(ms(1_000)).await;
    s2.expect_quiet(ms(1_000)).await;
    s1.describe_missing(5, "Sem1").await;
}

// ---------------------------------------------------------------------------------------------
// C. Acquire / release
// ---------------------------------------------------------------------------------------------

/// 29
#[tokio::test(start_paused = true)]
async fn acquire_validates_existence_count_timeout_and_ephemeral_flag() {
    let (_emu, ch) = setup().await;
    let mut s = Raw::new_session(&ch, 30_000).await;
    s.acquire(1, "Sem1", 0, 1, false);
    s.expect_acquire(1, StatusCode::NotFound, false).await;
    s.create(2, "Sem1", 1, b"");
    s.expect_create(2, StatusCode::Success).await;
    s.acquire(3, "Sem1", 0, 0, false);
    s.expect_acquire(3, StatusCode::BadRequest, false).await;
    s.acquire(4, "Sem1", 0, 100_500, false);
    s.expect_acquire(4, StatusCode::BadRequest, false).await;
    s.acquire(5, "Sem1", 2 * 24 * 3_600_000, 1, false);
    s.expect_acquire(5, StatusCode::BadRequest, false).await;
    s.acquire(6, "Sem1", 0, 1, true);
    s.expect_acquire(6, StatusCode::PreconditionFailed, false)
        .await;
    let d = s.describe_ok(7, "Sem1").await;
    assert!(d.owners.is_empty() && d.waiters.is_empty());
}

/// 30
#[tokio::test(start_paused = true)]
async fn immediate_acquire_gets_no_pending_and_blocked_acquire_is_pending() {
    let (_emu, ch) = setup().await;
    let mut s1 = Raw::new_session(&ch, 30_000).await;
    let mut s2 = Raw::new_session(&ch, 30_000).await;
    s1.create(1, "Sem1", 1, b"");
    s1.expect_create(1, StatusCode::Success).await;
    s1.acquire(2, "Sem1", 0, 1, false);
    s1.expect_acquired(2).await;
    s2.acquire(1, "Sem1", MINUTE, 1, false);
    s2.expect_pending(1).await;
    let d = s1.describe_ok(3, "Sem1").await;
    assert_eq!(sessions_of(&d.owners), vec![s1.session_id]);
    assert_eq!(sessions_of(&d.waiters), vec![s2.session_id]);
    assert_eq!(d.owners[0].timeout_millis, 0);
    assert_eq!(d.waiters[0].timeout_millis, MINUTE);
    assert_eq!(d.count, 1);
}

/// 31
#[tokio::test(start_paused = true)]
async fn waiter_times_out_with_success_and_not_acquired() {
    let (_emu, ch) = setup().await;
    let mut s1 = Raw::new_session(&ch, 30_000).await;
    let mut s2 = Raw::new_session(&ch, 30_000).await;
    s1.create(1, "Sem1", 1, b"");
    s1.expect_create(1, StatusCode::Success).await;
    s1.acquire(2, "Sem1", 0, 1, false);
    s1.expect_acquired(2).await;
    let t0 = Instant::now();
    s2.acquire(1, "Sem1", MINUTE, 1, false);
    s2.expect_pending(1).await;
    s2.expect_quiet(ms(59_990)).await;
    let at = s2.expect_acquire(1, StatusCode::Success, false).await;
    assert_elapsed(t0, at, ms(MINUTE));
    let d = s1.describe_ok(3, "Sem1").await;
    assert_eq!(sessions_of(&d.owners), vec![s1.session_id]);
    assert!(d.waiters.is_empty());
}

/// 32
#[tokio::test(start_paused = true)]
async fn infinite_wait_stays_queued_until_release() {
    let (_emu, ch) = setup().await;
    let mut s1 = Raw::new_session(&ch, 30_000).await;
    let mut s2 = Raw::new_session(&ch, 30_000).await;
    s1.create(1, "Sem1", 1, b"");
    s1.expect_create(1, StatusCode::Success).await;
    s1.acquire(2, "Sem1", 0, 1, false);
    s1.expect_acquired(2).await;
    s2.acquire(1, "Sem1", MAX, 1, false);
    s2.expect_pending(1).await;
    s2.expect_quiet(Duration::from_secs(3_600)).await;
    let d = s1.describe_ok(3, "Sem1").await;
    assert_eq!(sessions_of(&d.waiters), vec![s2.session_id]);
    assert_eq!(d.waiters[0].timeout_millis, MAX);
    s1.release(4, "Sem1");
    s1.expect_release(4, StatusCode::Success, true).await;
    s2.expect_acquired(1).await;
}

/// Locks Lock1 and Lock2 exclusively (ephemeral, count u64::MAX) for `s`.
async fn lock_both(s: &mut Raw) {
    s.acquire(1, "Lock1", 0, MAX, true);
    s.expect_acquired(1).await;
    s.acquire(2, "Lock2", 0, MAX, true);
    s.expect_acquired(2).await;
}

/// Queues `s` exclusively on Lock1 (req 1) and Lock2 (req 2) with a 60 s timeout.
async fn wait_both(s: &mut Raw) {
    s.acquire(1, "Lock1", MINUTE, MAX, true);
    s.expect_pending(1).await;
    s.acquire(2, "Lock2", MINUTE, MAX, true);
    s.expect_pending(2).await;
}

/// 33
#[tokio::test(start_paused = true)]
async fn release_promotes_waiters() {
    let (_emu, ch) = setup().await;
    let mut s1 = Raw::new_session(&ch, 30_000).await;
    let mut s2 = Raw::new_session(&ch, 30_000).await;
    lock_both(&mut s1).await;
    wait_both(&mut s2).await;
    s1.release(3, "Lock1");
    s1.expect_release(3, StatusCode::Success, true).await;
    s1.release(4, "Lock2");
    s1.expect_release(4, StatusCode::Success, true).await;
    s2.expect_acquired(1).await;
    s2.expect_acquired(2).await;
    for (req, name) in [(3, "Lock1"), (4, "Lock2")] {
        let d = s2.describe_ok(req, name).await;
        assert_eq!(sessions_of(&d.owners), vec![s2.session_id]);
        assert!(d.waiters.is_empty());
    }
}

/// 34
#[tokio::test(start_paused = true)]
async fn session_expiry_promotes_waiters() {
    let (emu, ch) = setup().await;
    let mut s1 = Raw::new_session(&ch, 30_000).await;
    let mut s2 = Raw::new_session(&ch, LONG).await;
    let (id1, id2) = (s1.session_id, s2.session_id);
    lock_both(&mut s1).await;
    wait_both(&mut s2).await;
    let t0 = Instant::now();
    s1.close().await;
    s2.expect_quiet(ms(29_900)).await;
    let d = s2.describe_ok(3, "Lock1").await;
    assert_eq!(sessions_of(&d.owners), vec![id1]);
    assert_eq!(sessions_of(&d.waiters), vec![id2]);
    let at = s2.expect_acquired(1).await;
    assert_elapsed(t0, at, ms(30_000));
    s2.expect_acquired(2).await;
    assert_eq!(emu.session_ids(NODE), vec![id2]);
    let d = s2.describe_ok(4, "Lock2").await;
    assert_eq!(sessions_of(&d.owners), vec![id2]);
}

/// 35
#[tokio::test(start_paused = true)]
async fn queue_is_fifo_across_shared_and_exclusive() {
    let (_emu, ch) = setup().await;
    let mut s1 = Raw::new_session(&ch, 30_000).await;
    let mut s2 = Raw::new_session(&ch, 30_000).await;
    let mut s3 = Raw::new_session(&ch, 30_000).await;
    s1.acquire(1, "Lock1", 0, 1, true);
    s1.expect_acquired(1).await;
    s2.acquire(1, "Lock1", MINUTE, MAX, true);
    s2.expect_pending(1).await;
    // Shared would fit, but an exclusive waiter is ahead.
    s3.acquire(1, "Lock1", MINUTE, 1, true);
    s3.expect_pending(1).await;
    let id2 = s2.session_id;
    s2.stop();
    s2.expect_stopped(id2).await;
    s3.expect_acquired(1).await;
    let d = s1.describe_ok(2, "Lock1").await;
    assert_eq!(sessions_of(&d.owners), vec![s1.session_id, s3.session_id]);
    assert!(d.waiters.is_empty());
}

/// 36
#[tokio::test(start_paused = true)]
async fn owner_may_repeat_or_downgrade_but_not_upgrade() {
    let (_emu, ch) = setup().await;
    let mut s = Raw::new_session(&ch, 30_000).await;
    s.acquire(1, "Lock1", 0, MAX, true);
    s.expect_acquired(1).await;
    s.acquire(2, "Lock1", 0, MAX, true);
    s.expect_acquired(2).await;
    s.acquire(3, "Lock1", 0, 1, true);
    s.expect_acquired(3).await;
    let d = s.describe_ok(4, "Lock1").await;
    assert_eq!(d.count, 1);
    assert_eq!(d.owners.len(), 1);
    assert_eq!(d.owners[0].count, 1);
    s.acquire(5, "Lock1", 0, MAX, true);
    s.expect_acquire(5, StatusCode::BadRequest, false).await;
    let d = s.describe_ok(6, "Lock1").await;
    assert_eq!(d.count, 1);
    assert_eq!(sessions_of(&d.owners), vec![s.session_id]);
}

/// 37
#[tokio::test(start_paused = true)]
async fn owner_downgrade_lets_waiting_shared_acquire_in() {
    let (_emu, ch) = setup().await;
    let mut s1 = Raw::new_session(&ch, 30_000).await;
    let mut s2 = Raw::new_session(&ch, 30_000).await;
    s1.acquire(1, "Lock1", 0, MAX, true);
    s1.expect_acquired(1).await;
    s2.acquire(1, "Lock1", MINUTE, 1, true);
    s2.expect_pending(1).await;
    s1.acquire(2, "Lock1", 0, 1, true);
    s1.expect_acquired(2).await;
    s2.expect_acquired(1).await;
    let d = s1.describe_ok(3, "Lock1").await;
    assert_eq!(sessions_of(&d.owners), vec![s1.session_id, s2.session_id]);
    assert!(d.waiters.is_empty());
}

/// 38
#[tokio::test(start_paused = true)]
async fn waiter_downgrade_aborts_the_previous_request() {
    let (_emu, ch) = setup().await;
    let mut s1 = Raw::new_session(&ch, 30_000).await;
    let mut s2 = Raw::new_session(&ch, 30_000).await;
    s1.acquire(1, "Lock1", 0, 1, true);
    s1.expect_acquired(1).await;
    s2.acquire(1, "Lock1", 30_000, MAX, true);
    s2.expect_pending(1).await;
    s2.acquire(2, "Lock1", 30_000, 1, true);
    s2.expect_acquire(1, StatusCode::Aborted, false).await;
    s2.expect_acquired(2).await;
}

/// 39
#[tokio::test(start_paused = true)]
async fn release_while_waiting_aborts_the_acquire_before_the_release_result() {
    let (_emu, ch) = setup().await;
    let mut s1 = Raw::new_session(&ch, 30_000).await;
    let mut s2 = Raw::new_session(&ch, 30_000).await;
    s1.acquire(1, "Lock1", 0, MAX, true);
    s1.expect_acquired(1).await;
    s2.acquire(1, "Lock1", 30_000, 1, true);
    s2.expect_pending(1).await;
    s2.release(2, "Lock1");
    s2.expect_acquire(1, StatusCode::Aborted, false).await;
    s2.expect_release(2, StatusCode::Success, true).await;
    let d = s1.describe_ok(2, "Lock1").await;
    assert_eq!(sessions_of(&d.owners), vec![s1.session_id]);
    assert!(d.waiters.is_empty());
}

/// 40
#[tokio::test(start_paused = true)]
async fn acquire_after_releasing_a_wait_queues_again() {
    let (_emu, ch) = setup().await;
    let mut s1 = Raw::new_session(&ch, 30_000).await;
    let mut s2 = Raw::new_session(&ch, 30_000).await;
    s1.acquire(1, "Lock1", 0, MAX, true);
    s1.expect_acquired(1).await;
    s2.acquire(1, "Lock1", 30_000, 1, true);
    s2.expect_pending(1).await;
    s2.release(2, "Lock1");
    s2.expect_acquire(1, StatusCode::Aborted, false).await;
    s2.expect_release(2, StatusCode::Success, true).await;
    s2.acquire(3, "Lock1", 10_000, 1, true);
    s2.expect_pending(3).await;
    s1.release(2, "Lock1");
    s1.expect_release(2, StatusCode::Success, true).await;
    s2.expect_acquired(3).await;
}

/// 41
#[tokio::test(start_paused = true)]
async fn session_stop_frees_semaphores_for_others_at_once() {
    let (_emu, ch) = setup().await;
    let mut s1 = Raw::new_session(&ch, 30_000).await;
    let mut s2 = Raw::new_session(&ch, 30_000).await;
    s1.create(1, "Sem1", 5, b"");
    s1.expect_create(1, StatusCode::Success).await;
    s1.acquire(2, "Sem1", 0, 1, false);
    s1.expect_acquired(2).await;
    let t0 = Instant::now();
    s2.acquire(1, "Sem1", 100, 5, false);
    s2.expect_pending(1).await;
    let at = s2.expect_acquire(1, StatusCode::Success, false).await;
    assert_elapsed(t0, at, ms(100));
    let id1 = s1.session_id;
    s1.stop();
    s1.expect_stopped(id1).await;
    let t1 = Instant::now();
    s2.acquire(2, "Sem1", 5_000, 5, false);
    let at = s2.expect_acquired(2).await;
    assert_elapsed(t1, at, Duration::ZERO);
}

/// 42
#[tokio::test(start_paused = true)]
async fn ephemeral_semaphore_disappears_with_its_last_owner() {
    let (emu, ch) = setup().await;
    let mut s1 = Raw::new_session(&ch, 30_000).await;
    s1.acquire(1, "Lock1", 0, 1, true);
    s1.expect_acquired(1).await;
    let d = s1.describe_ok(2, "Lock1").await;
    assert!(d.ephemeral);
    assert_eq!(d.limit, MAX);
    assert_eq!(sessions_of(&d.owners), vec![s1.session_id]);
    let id1 = s1.session_id;
    s1.stop();
    s1.expect_stopped(id1).await;
    let mut s2 = Raw::new_session(&ch, 30_000).await;
    s2.describe_missing(1, "Lock1").await;
    assert!(emu.semaphore_names(NODE).is_empty());
}

/// 43
#[tokio::test(start_paused = true)]
async fn locks_outlive_acquire_timeouts_and_die_with_their_sessions() {
    let (emu, ch) = setup().await;
    let mut s1 = Raw::new_session(&ch, 40_000).await;
    let mut s2 = Raw::new_session(&ch, MINUTE).await;
    let mut s3 = Raw::new_session(&ch, LONG).await;
    let (id1, id2, id3) = (s1.session_id, s2.session_id, s3.session_id);
    s1.acquire(1, "Lock1", 30_000, MAX, true);
    s1.expect_acquired(1).await;
    s1.acquire(2, "Lock2", 30_000, 1, true);
    s1.expect_acquired(2).await;
    s2.acquire(1, "Lock2", 30_000, 1, true);
    s2.expect_acquired(1).await;
    let t0 = Instant::now();
    s1.close().await;
    s2.close().await;

    sleep_until(t0 + ms(30_001)).await;
    let d = s3.describe_ok(1, "Lock1").await;
    assert_eq!(sessions_of(&d.owners), vec![id1]);
    let d = s3.describe_ok(2, "Lock2").await;
    assert_eq!(sessions_of(&d.owners), vec![id1, id2]);
    assert_eq!(emu.session_ids(NODE), vec![id1, id2, id3]);

    sleep_until(t0 + ms(40_001)).await;
    s3.describe_missing(3, "Lock1").await;
    let d = s3.describe_ok(4, "Lock2").await;
    assert_eq!(sessions_of(&d.owners), vec![id2]);
    assert_eq!(emu.session_ids(NODE), vec![id2, id3]);

    sleep_until(t0 + ms(60_001)).await;
    s3.describe_missing(5, "Lock2").await;
    assert_eq!(emu.session_ids(NODE), vec![id3]);
}

/// 44
#[tokio::test(start_paused = true)]
async fn describe_reports_owner_count_and_data() {
    let (_emu, ch) = setup().await;
    let mut s = Raw::new_session(&ch, 30_000).await;
    s.create(1, "Sem1", 5, b"");
    s.expect_create(1, StatusCode::Success).await;
    s.acquire_data(2, "Sem1", 0, 3, false, b"foobar");
    s.expect_acquired(2).await;
    let d = s.describe_ok(3, "Sem1").await;
    assert_eq!(d.count, 3);
    assert_eq!(d.limit, 5);
    assert!(d.data.is_empty());
    assert_eq!(d.owners.len(), 1);
    assert_eq!(d.owners[0].session_id, s.session_id);
    assert_eq!(d.owners[0].count, 3);
    assert_eq!(d.owners[0].data, b"foobar");
    s.release(4, "Sem1");
    s.expect_release(4, StatusCode::Success, true).await;
    let d = s.describe_ok(5, "Sem1").await;
    assert!(d.owners.is_empty());
    assert_eq!(d.count, 0);
}

// ---------------------------------------------------------------------------------------------
// D. Watches
// ---------------------------------------------------------------------------------------------

async fn session_with_sem1(ch: &Channel, limit: u64) -> Raw {
    let mut s = Raw::new_session(ch, 30_000).await;
    s.create(1, "Sem1", limit, b"");
    s.expect_create(1, StatusCode::Success).await;
    s
}

/// 45
#[tokio::test(start_paused = true)]
async fn data_watch_fires_on_data_change_only() {
    let (_emu, ch) = setup().await;
    let mut s = session_with_sem1(&ch, 1).await;
    s.watch(2, "Sem1", true, false);
    let r = s.expect_describe(2, StatusCode::Success).await;
    assert!(r.watch_added);
    assert_eq!(r.semaphore_description.unwrap().count, 0);
    s.acquire(3, "Sem1", 0, 1, false);
    s.expect_acquired(3).await;
    s.expect_quiet(ms(100)).await;
    s.update(4, "Sem1", b"changed");
    s.expect_update(4, StatusCode::Success).await;
    s.expect_changed(2, true, false).await;
    assert_eq!(s.describe_ok(5, "Sem1").await.count, 1);
    // One-shot: nothing more.
    s.update(6, "Sem1", b"again");
    s.expect_update(6, StatusCode::Success).await;
    s.expect_quiet(ms(100)).await;
}

/// 46
#[tokio::test(start_paused = true)]
async fn owners_watch_fires_on_owner_change_only() {
    let (_emu, ch) = setup().await;
    let mut s = session_with_sem1(&ch, 1).await;
    s.watch(2, "Sem1", false, true);
    assert!(s.expect_describe(2, StatusCode::Success).await.watch_added);
    s.update(3, "Sem1", b"changed");
    s.expect_update(3, StatusCode::Success).await;
    s.expect_quiet(ms(100)).await;
    s.acquire(4, "Sem1", 0, 1, false);
    s.expect_acquired(4).await;
    s.expect_changed(2, false, true).await;
    s.expect_quiet(ms(100)).await;
}

/// 47
#[tokio::test(start_paused = true)]
async fn each_session_is_notified_only_of_the_kind_it_watches() {
    let (_emu, ch) = setup().await;
    let mut s1 = session_with_sem1(&ch, 1).await;
    let mut s2 = Raw::new_session(&ch, 30_000).await;
    s1.watch(2, "Sem1", false, true);
    assert!(s1.expect_describe(2, StatusCode::Success).await.watch_added);
    s2.watch(1, "Sem1", true, false);
    assert!(s2.expect_describe(1, StatusCode::Success).await.watch_added);
    s1.update(3, "Sem1", b"changed");
    s1.expect_update(3, StatusCode::Success).await;
    s2.expect_changed(1, true, false).await;
    s1.expect_quiet(ms(100)).await;
    s1.acquire(4, "Sem1", 0, 1, false);
    s1.expect_acquired(4).await;
    s1.expect_changed(2, false, true).await;
    s2.expect_quiet(ms(100)).await;
}

/// 48
#[tokio::test(start_paused = true)]
async fn owner_session_death_notifies_other_owner_watchers() {
    let (_emu, ch) = setup().await;
    let mut s1 = session_with_sem1(&ch, 2).await;
    let mut s2 = Raw::new_session(&ch, 30_000).await;
    let mut s3 = Raw::new_session(&ch, 30_000).await;
    let mut s4 = Raw::new_session(&ch, 30_000).await;
    s2.acquire(1, "Sem1", 0, 2, false);
    s2.expect_acquired(1).await;
    s3.acquire(1, "Sem1", MINUTE, 1, false);
    s3.expect_pending(1).await;
    s4.acquire(1, "Sem1", MINUTE, 1, false);
    s4.expect_pending(1).await;
    s2.watch(2, "Sem1", false, true);
    assert!(s2.expect_describe(2, StatusCode::Success).await.watch_added);
    s4.watch(2, "Sem1", false, true);
    assert!(s4.expect_describe(2, StatusCode::Success).await.watch_added);
    let id2 = s2.session_id;
    s2.stop();
    // The dying session's own watch gets nothing.
    s2.expect_stopped(id2).await;
    s3.expect_acquired(1).await;
    s4.expect_acquired(1).await;
    s4.expect_changed(2, false, true).await;
    let d = s1.describe_ok(2, "Sem1").await;
    assert_eq!(sessions_of(&d.owners), vec![s3.session_id, s4.session_id]);
}

/// 49
#[tokio::test(start_paused = true)]
async fn delete_notifies_watchers_with_both_flags() {
    let (_emu, ch) = setup().await;
    let mut s = session_with_sem1(&ch, 1).await;
    s.acquire(2, "Sem1", 0, 1, false);
    s.expect_acquired(2).await;
    s.watch(3, "Sem1", false, true);
    assert!(s.expect_describe(3, StatusCode::Success).await.watch_added);
    s.delete(4, "Sem1", false);
    s.expect_delete(4, StatusCode::PreconditionFailed).await;
    s.expect_quiet(ms(100)).await;
    s.delete(5, "Sem1", true);
    // Notifications come before the delete result.
    s.expect_changed(3, true, true).await;
    s.expect_delete(5, StatusCode::Success).await;
    s.expect_quiet(ms(100)).await;
}

/// 50
#[tokio::test(start_paused = true)]
async fn describe_of_missing_semaphore_installs_no_watch() {
    let (_emu, ch) = setup().await;
    let mut s = Raw::new_session(&ch, 30_000).await;
    s.watch(1, "Sem1", true, true);
    let r = s.expect_describe(1, StatusCode::NotFound).await;
    assert!(!r.watch_added);
    assert!(r.semaphore_description.is_none());
    s.create(2, "Sem1", 1, b"");
    s.expect_create(2, StatusCode::Success).await;
    s.update(3, "Sem1", b"x");
    s.expect_update(3, StatusCode::Success).await;
    s.acquire(4, "Sem1", 0, 1, false);
    s.expect_acquired(4).await;
    s.expect_quiet(ms(1_000)).await;
}

/// 51
#[tokio::test(start_paused = true)]
async fn watches_die_with_the_stream() {
    let (_emu, ch) = setup().await;
    let mut s = session_with_sem1(&ch, 1).await;
    let id = s.session_id;
    s.watch(2, "Sem1", true, true);
    assert!(s.expect_describe(2, StatusCode::Success).await.watch_added);
    s.close().await;
    let mut again = Raw::attach(&ch, id, 30_000, 2, b"").await;
    again.update(1, "Sem1", b"changed");
    again.expect_update(1, StatusCode::Success).await;
    again.acquire(2, "Sem1", 0, 1, false);
    again.expect_acquired(2).await;
    again.expect_quiet(ms(1_000)).await;
}

// ---------------------------------------------------------------------------------------------
// E. Reattach and pending work
// ---------------------------------------------------------------------------------------------

/// 52
#[tokio::test(start_paused = true)]
async fn waiter_reattached_is_answered_only_for_the_resent_request() {
    let (_emu, ch) = setup().await;
    let mut s1 = session_with_sem1(&ch, 1).await;
    s1.acquire(2, "Sem1", 0, 1, false);
    s1.expect_acquired(2).await;
    let mut s2 = Raw::new_session(&ch, LONG).await;
    let id2 = s2.session_id;
    s2.acquire(1, "Sem1", 3_600_000, 1, false);
    s2.expect_pending(1).await;
    s2.close().await;
    let mut again = Raw::attach(&ch, id2, LONG, 2, b"").await;
    // Still waiting: the re-sent acquire is pending (nothing for the old req_id).
    again.acquire(7, "Sem1", 3_600_000, 1, false);
    again.expect_pending(7).await;
    s1.release(3, "Sem1");
    s1.expect_release(3, StatusCode::Success, true).await;
    again.expect_acquired(7).await;
    again.expect_quiet(ms(1_000)).await;
    let d = s1.describe_ok(4, "Sem1").await;
    assert_eq!(sessions_of(&d.owners), vec![id2]);
}

/// 53
#[tokio::test(start_paused = true)]
async fn waiter_timers_restart_in_full_after_restart() {
    let (emu, ch) = setup().await;
    let mut s1 = Raw::new_session(&ch, LONG).await;
    let mut s2 = Raw::new_session(&ch, LONG).await;
    let (id1, id2) = (s1.session_id, s2.session_id);
    s1.acquire(1, "Lock1", 0, MAX, true);
    s1.expect_acquired(1).await;
    s2.acquire(1, "Lock1", MINUTE, 1, true);
    s2.expect_pending(1).await;
    sleep(ms(20_000)).await;
    let restarted = Instant::now();
    emu.restart();
    s1.expect_failure(StatusCode::Unavailable).await;
    s2.expect_failure(StatusCode::Unavailable).await;
    let mut s1 = Raw::attach(&ch, id1, LONG, 2, b"").await;
    let mut s2 = Raw::attach(&ch, id2, LONG, 2, b"").await;
    // The original deadline (restart + 40 s) has passed; the re-armed one has not.
    sleep_until(restarted + ms(50_001)).await;
    let d = s1.describe_ok(1, "Lock1").await;
    assert_eq!(sessions_of(&d.owners), vec![id1]);
    assert_eq!(sessions_of(&d.waiters), vec![id2]);
    sleep_until(restarted + ms(60_001)).await;
    let d = s1.describe_ok(2, "Lock1").await;
    assert_eq!(sessions_of(&d.owners), vec![id1]);
    assert!(d.waiters.is_empty());
    // The old request's association is gone: no result for it on the new stream.
    s2.expect_quiet(ms(1_000)).await;
}

// ---------------------------------------------------------------------------------------------
// F. Node management and discovery
// ---------------------------------------------------------------------------------------------

fn op_status(op: Option<Operation>) -> i32 {
    let op = op.expect("response without an operation");
    assert!(op.ready, "operation not ready");
    op.status
}

async fn describe_node(
    admin: &mut CoordinationServiceClient<Channel>,
    path: &str,
) -> Result<(DescribeNodeResult, String), i32> {
    let op = timeout(
        GUARD,
        admin.describe_node(DescribeNodeRequest {
            path: path.to_string(),
            ..Default::default()
        }),
    )
    .await
    .unwrap()
    .unwrap()
    .into_inner()
    .operation
    .unwrap();
    if op.status != StatusCode::Success as i32 {
        return Err(op.status);
    }
    let any = op.result.expect("describe result without a value");
    let result = DescribeNodeResult::decode(any.value.as_slice()).unwrap();
    Ok((result, any.type_url))
}

async fn create_node(
    admin: &mut CoordinationServiceClient<Channel>,
    path: &str,
    config: Option<Config>,
) -> i32 {
    let r = timeout(
        GUARD,
        admin.create_node(CreateNodeRequest {
            path: path.to_string(),
            config,
            ..Default::default()
        }),
    )
    .await
    .unwrap()
    .unwrap();
    op_status(r.into_inner().operation)
}

async fn drop_node(admin: &mut CoordinationServiceClient<Channel>, path: &str) -> i32 {
    let r = timeout(
        GUARD,
        admin.drop_node(DropNodeRequest {
            path: path.to_string(),
            ..Default::default()
        }),
    )
    .await
    .unwrap()
    .unwrap();
    op_status(r.into_inner().operation)
}

async fn alter_node(
    admin: &mut CoordinationServiceClient<Channel>,
    path: &str,
    config: Config,
) -> i32 {
    let r = timeout(
        GUARD,
        admin.alter_node(AlterNodeRequest {
            path: path.to_string(),
            config: Some(config),
            ..Default::default()
        }),
    )
    .await
    .unwrap()
    .unwrap();
    op_status(r.into_inner().operation)
}

/// 54
#[tokio::test(start_paused = true)]
async fn nodes_can_be_created_dropped_and_described() {
    let (_emu, ch) = setup().await;
    let mut admin = CoordinationServiceClient::new(ch.clone());
    let ok = StatusCode::Success as i32;
    assert_eq!(
        st(create_node(&mut admin, "/local/node1", None).await),
        st(ok)
    );
    let config = Config {
        self_check_period_millis: 1234,
        ..Default::default()
    };
    let status = create_node(&mut admin, "/local/node2", Some(config.clone())).await;
    assert_eq!(st(status), st(ok));
    // A repeated create may report SUCCESS or ALREADY_EXISTS (not verified against YDB).
    let again = create_node(&mut admin, "/local/node2", Some(config)).await;
    assert!(
        again == ok || again == StatusCode::AlreadyExists as i32,
        "repeated create: {}",
        st(again)
    );
    assert_eq!(st(drop_node(&mut admin, "/local/node1").await), st(ok));

    let (described, type_url) = describe_node(&mut admin, "/local/node2").await.unwrap();
    assert!(
        type_url.ends_with("/Ydb.Coordination.DescribeNodeResult"),
        "{type_url}"
    );
    let config = described.config.unwrap();
    assert_eq!(config.self_check_period_millis, 1234);
    // Only user-set values are reported.
    assert_eq!(config.session_grace_period_millis, 0);
    assert_eq!(config.read_consistency_mode, ConsistencyMode::Unset as i32);
    let entry = described.self_.unwrap();
    assert_eq!(entry.name, "node2");
    assert_eq!(entry.r#type, entry::Type::CoordinationNode as i32);
    let stamp = |at: Option<VirtualTimestamp>| {
        let at = at.expect("created_at is reported");
        (at.plan_step, at.tx_id)
    };
    let node2_created = stamp(entry.created_at);
    assert!(node2_created.0 > 0, "{node2_created:?}");

    let status = describe_node(&mut admin, "/local/node1").await.unwrap_err();
    assert_eq!(st(status), st(StatusCode::SchemeError as i32));
    // Created again, the node is a new incarnation: its stamp is greater.
    assert_eq!(
        st(create_node(&mut admin, "/local/node1", None).await),
        st(ok)
    );
    let (again, _) = describe_node(&mut admin, "/local/node1").await.unwrap();
    assert!(stamp(again.self_.unwrap().created_at) > node2_created);
    assert_eq!(st(drop_node(&mut admin, "/local/node1").await), st(ok));
    // Sessions can be started on the new node but not on the dropped one.
    let mut s = Raw::open(&ch);
    s.start("/local/node2", 0, 30_000, 1, b"");
    assert_eq!(s.started().await, 1);
    let mut gone = Raw::open(&ch);
    gone.start("/local/node1", 0, 30_000, 1, b"");
    gone.expect_failure(StatusCode::NotFound).await;
}

/// 55
#[tokio::test(start_paused = true)]
async fn alter_merges_node_config() {
    let (_emu, ch) = setup().await;
    let mut admin = CoordinationServiceClient::new(ch.clone());
    let ok = st(StatusCode::Success as i32);
    let path = "/local/node1";
    let create = Config {
        self_check_period_millis: 1234,
        ..Default::default()
    };
    assert_eq!(st(create_node(&mut admin, path, Some(create)).await), ok);
    let config = |admin: &mut CoordinationServiceClient<Channel>| {
        let mut admin = admin.clone();
        async move {
            describe_node(&mut admin, path)
                .await
                .unwrap()
                .0
                .config
                .unwrap()
        }
    };

    let grace = Config {
        session_grace_period_millis: 5678,
        ..Default::default()
    };
    assert_eq!(st(alter_node(&mut admin, path, grace).await), ok);
    let c = config(&mut admin).await;
    assert_eq!(
        (c.self_check_period_millis, c.session_grace_period_millis),
        (1234, 5678)
    );

    let self_check = Config {
        self_check_period_millis: 2345,
        ..Default::default()
    };
    assert_eq!(st(alter_node(&mut admin, path, self_check).await), ok);
    let c = config(&mut admin).await;
    assert_eq!(
        (c.self_check_period_millis, c.session_grace_period_millis),
        (2345, 5678)
    );

    let strict = Config {
        read_consistency_mode: ConsistencyMode::Strict as i32,
        ..Default::default()
    };
    assert_eq!(st(alter_node(&mut admin, path, strict).await), ok);
    let c = config(&mut admin).await;
    assert_eq!(c.read_consistency_mode, ConsistencyMode::Strict as i32);
    assert_eq!(
        (c.self_check_period_millis, c.session_grace_period_millis),
        (2345, 5678)
    );
}

/// 56
#[tokio::test(start_paused = true)]
async fn path_in_node_config_is_rejected() {
    let (_emu, ch) = setup().await;
    let mut admin = CoordinationServiceClient::new(ch.clone());
    let with_path = Config {
        path: "/local/node1".to_string(),
        ..Default::default()
    };
    let status = create_node(&mut admin, "/local/node1", Some(with_path.clone())).await;
    assert_eq!(st(status), st(StatusCode::BadRequest as i32));
    assert!(describe_node(&mut admin, "/local/node1").await.is_err());
    let status = alter_node(&mut admin, NODE, with_path).await;
    assert_eq!(st(status), st(StatusCode::BadRequest as i32));
}

/// 57
#[tokio::test(start_paused = true)]
async fn discovery_lists_the_emulator_and_an_sdk_runs_promotion_via_release() {
    let (emu, ch) = setup().await;
    let mut discovery = DiscoveryServiceClient::new(ch.clone());
    let op = timeout(
        GUARD,
        discovery.list_endpoints(ListEndpointsRequest {
            database: DB.to_string(),
            service: Vec::new(),
        }),
    )
    .await
    .unwrap()
    .unwrap()
    .into_inner()
    .operation
    .unwrap();
    assert!(op.ready);
    assert_status(op.status, StatusCode::Success);
    let any = op.result.unwrap();
    assert!(
        any.type_url.ends_with("/Ydb.Discovery.ListEndpointsResult"),
        "{}",
        any.type_url
    );
    let result = ListEndpointsResult::decode(any.value.as_slice()).unwrap();
    assert_eq!(result.endpoints.len(), 1);
    let endpoint = &result.endpoints[0];
    assert_eq!(endpoint.port, u32::from(emu.local_addr().port()));
    assert!(
        endpoint.address == "127.0.0.1" || endpoint.address == "localhost",
        "{}",
        endpoint.address
    );
    assert!(!endpoint.ssl);

    // An SDK driver (this crate's client, which runs discovery) plays scenario 33.
    let client = timeout(GUARD, Client::connect(&emu.connection_string()))
        .await
        .unwrap()
        .unwrap();
    let s1 = timeout(GUARD, client.session(NODE, SessionOptions::new()))
        .await
        .unwrap()
        .unwrap();
    let s2 = timeout(GUARD, client.session(NODE, SessionOptions::new()))
        .await
        .unwrap()
        .unwrap();
    let lock = || AcquireOptions::exclusive().ephemeral(true);
    let l1 = timeout(GUARD, s1.acquire("Lock1", lock()))
        .await
        .unwrap()
        .unwrap();
    let l2 = timeout(GUARD, s1.acquire("Lock2", lock()))
        .await
        .unwrap()
        .unwrap();
    let mut w1 = s2.acquire("Lock1", lock().timeout(Duration::from_secs(60)));
    let mut w2 = s2.acquire("Lock2", lock().timeout(Duration::from_secs(60)));
    assert!(timeout(GUARD, w1.queued()).await.unwrap());
    assert!(timeout(GUARD, w2.queued()).await.unwrap());
    let w1 = tokio::spawn(w1.into_future());
    let w2 = tokio::spawn(w2.into_future());
    assert!(timeout(GUARD, l1.release()).await.unwrap().unwrap());
    assert!(timeout(GUARD, l2.release()).await.unwrap().unwrap());
    let g1 = timeout(GUARD, w1).await.unwrap().unwrap().unwrap();
    let g2 = timeout(GUARD, w2).await.unwrap().unwrap().unwrap();
    assert_eq!(g1.session_id(), s2.id());
    assert_eq!(g2.session_id(), s2.id());
    let d = timeout(
        GUARD,
        s2.describe_semaphore("Lock1", DescribeOptions::new().owners(true)),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(d.owners.len(), 1);
    timeout(GUARD, s1.close()).await.unwrap();
    timeout(GUARD, s2.close()).await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// Extra rule from SPEC.md §10: try-lock and strict FIFO
// ---------------------------------------------------------------------------------------------

/// `SPEC.md` §10 item 2 / §4.2 step 10.
#[tokio::test(start_paused = true)]
async fn try_lock_fails_when_anyone_is_queued() {
    let (_emu, ch) = setup().await;
    let mut s1 = session_with_sem1(&ch, 3).await;
    let mut s2 = Raw::new_session(&ch, 30_000).await;
    let mut s3 = Raw::new_session(&ch, 30_000).await;
    s1.acquire(2, "Sem1", 0, 2, false);
    s1.expect_acquired(2).await;
    s2.acquire(1, "Sem1", MINUTE, 2, false);
    s2.expect_pending(1).await;
    // One token is free, but someone is queued: a try-lock fails...
    s3.acquire(1, "Sem1", 0, 1, false);
    s3.expect_acquire(1, StatusCode::Success, false).await;
    // ...and a waiting acquire does not bypass the queue.
    s3.acquire(2, "Sem1", MINUTE, 1, false);
    s3.expect_pending(2).await;
    let d = s1.describe_ok(3, "Sem1").await;
    let waiters: Vec<u64> = d.waiters.iter().map(|w| w.session_id).collect();
    assert_eq!(waiters, vec![s2.session_id, s3.session_id]);
    assert!(d.waiters[0].order_id < d.waiters[1].order_id);
}

/// 59. Over the server's message limit (§1.6, §7): an answer that cannot be sent, and a
///     request that cannot be received, end the stream with `RESOURCE_EXHAUSTED`.
#[tokio::test(start_paused = true)]
async fn a_message_over_the_limit_ends_its_stream() {
    let emu = timeout(
        GUARD,
        Emulator::builder()
            .database(DB)
            .node(NODE)
            .max_message_size(64 * 1024)
            .start(),
    )
    .await
    .unwrap()
    .unwrap();
    let ch = channel(&emu).await;
    let mut owners = Vec::new();
    for i in 0..4 {
        let s = Raw::new_session(&ch, LONG).await;
        owners.push(s);
        let s = owners.last_mut().unwrap();
        s.acquire_data(1, "big", 0, 1, true, &[b'x'; 20_000]);
        s.expect_acquired(1).await;
        if i == 1 {
            // Two owners: the answer fits.
            let mut reader = Raw::new_session(&ch, LONG).await;
            let d = reader.describe_ok(2, "big").await;
            assert_eq!(d.owners.len(), 2);
        }
    }
    let mut reader = Raw::new_session(&ch, LONG).await;
    reader.describe(2, "big");
    reader.expect_end_code(tonic::Code::ResourceExhausted).await;
    // The node made the answer; the shell would not send it.
    assert!(emu.traffic().largest_response > 64 * 1024);
    let mut writer = Raw::new_session(&ch, LONG).await;
    writer.create(3, "huge", 1, &[0; 70_000]);
    writer.expect_end_code(tonic::Code::ResourceExhausted).await;
}
