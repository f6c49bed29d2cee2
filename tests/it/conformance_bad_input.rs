//! Malformed and hostile input on the raw `Session` protocol: every case gets the status that
//! `emulator/SPEC.md` names (§1.2, §1.6, §2.3, §2.4, §2.6, §2.7, §7), and the emulator never
//! panics or wedges (each test ends by checking that a fresh session still works).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::raw;

use std::time::Duration;

use tokio::time::sleep;
use tonic::transport::Channel;
use ydb_coordination::emulator::Emulator;

use raw::*;

const MAX: u64 = u64::MAX;
const DAY: u64 = 86_400_000;
const MIB: usize = 1024 * 1024;

async fn setup() -> (Emulator, Channel) {
    let emu = emulator().await;
    let ch = channel(&emu).await;
    (emu, ch)
}

/// Protobuf key for a length-delimited field.
fn key(field: u32) -> Vec<u8> {
    let mut v = (u64::from(field) << 3) | 2;
    let mut out = Vec::new();
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
    out
}

/// A `SessionRequest` whose only field is an unknown oneof member `field` (empty message).
fn unknown_variant(field: u32) -> Vec<u8> {
    let mut bytes = key(field);
    bytes.push(0);
    bytes
}

#[tokio::test(start_paused = true)]
async fn unknown_oneof_variant_or_empty_request_fails_with_bad_request() {
    let (_emu, ch) = setup().await;
    for bytes in [unknown_variant(99), unknown_variant(16), Vec::new()] {
        let mut s = Raw::open_bytes(&ch);
        s.start(NODE, 0, 30_000, 1, b"");
        s.started().await;
        s.send_bytes(bytes);
        s.expect_failure(StatusCode::BadRequest).await;
    }
    // The typed spelling of the empty request.
    let mut s = Raw::new_session(&ch, 30_000).await;
    s.send_msg(SessionRequest { request: None });
    s.expect_failure(StatusCode::BadRequest).await;
    assert_serves_fresh_session(&ch).await;
}

#[tokio::test(start_paused = true)]
async fn unknown_fields_inside_known_messages_are_ignored() {
    let (_emu, ch) = setup().await;
    let mut s = Raw::open_bytes(&ch);
    s.start(NODE, 0, 30_000, 1, b"");
    s.started().await;
    // ping { opaque: 5, <field 9>: "zz" } inside SessionRequest field 1.
    let mut ping = vec![0x08, 0x05];
    ping.extend(key(9));
    ping.extend([2, b'z', b'z']);
    let mut request = key(1);
    request.push(ping.len() as u8);
    request.extend(ping);
    // And an unknown top-level field next to a known variant.
    request.extend(key(100));
    request.push(0);
    s.send_bytes(request);
    match s.recv().await {
        Rs::Pong(p) => assert_eq!(p.opaque, 5),
        other => panic!("expected a pong, got {other:?}"),
    }
    s.describe_missing(1, "Sem1").await;
    assert_serves_fresh_session(&ch).await;
}

#[tokio::test(start_paused = true)]
async fn first_message_not_session_start_ends_stream_with_invalid_argument() {
    let (emu, ch) = setup().await;
    let mut a = Raw::open(&ch);
    a.send_msg(SessionRequest { request: None });
    a.expect_end_code(tonic::Code::InvalidArgument).await;
    let mut b = Raw::open_bytes(&ch);
    b.send_bytes(unknown_variant(99));
    b.expect_end_code(tonic::Code::InvalidArgument).await;
    let mut c = Raw::open(&ch);
    c.pong(0);
    c.expect_end_code(tonic::Code::InvalidArgument).await;
    let mut d = Raw::open(&ch);
    d.create(1, "Sem1", 1, b"");
    d.expect_end_code(tonic::Code::InvalidArgument).await;
    assert!(emu.session_ids(NODE).is_empty());
    assert!(emu.semaphore_names(NODE).is_empty());
    assert_serves_fresh_session(&ch).await;
}

#[tokio::test(start_paused = true)]
async fn oversized_descriptions_keys_names_and_data_are_rejected() {
    let (emu, ch) = setup().await;
    let mut a = Raw::open(&ch);
    a.start_with(session_request::SessionStart {
        path: NODE.to_string(),
        timeout_millis: 30_000,
        description: "d".repeat(64 * 1024),
        seq_no: 1,
        ..Default::default()
    });
    a.expect_failure(StatusCode::BadRequest).await;
    let mut b = Raw::open(&ch);
    b.start(NODE, 0, 30_000, 1, &[1; 1000]);
    b.expect_failure(StatusCode::BadRequest).await;
    assert!(emu.session_ids(NODE).is_empty());

    let mut s = Raw::new_session(&ch, 30_000).await;
    let long = "n".repeat(100_000);
    let big = vec![0xab; MIB + 1];
    s.create(1, &long, 1, b"");
    s.expect_create(1, StatusCode::BadRequest).await;
    s.create(2, "Sem1", 1, &big);
    s.expect_create(2, StatusCode::BadRequest).await;
    s.create(3, "Sem1", 1, b"small");
    s.expect_create(3, StatusCode::Success).await;
    s.update(4, &long, b"x");
    s.expect_update(4, StatusCode::BadRequest).await;
    s.update(5, "Sem1", &big);
    s.expect_update(5, StatusCode::BadRequest).await;
    s.acquire_data(6, "Sem1", 0, 1, false, &big);
    s.expect_acquire(6, StatusCode::BadRequest, false).await;
    s.acquire_data(7, "Lock1", 0, 1, true, &big);
    s.expect_acquire(7, StatusCode::BadRequest, false).await;
    // Names are only length-checked by create and update.
    s.release(8, &long);
    s.expect_release(8, StatusCode::Success, false).await;
    s.describe_missing(9, &long).await;
    s.delete(10, &long, true);
    s.expect_delete(10, StatusCode::NotFound).await;
    let d = s.describe_ok(11, "Sem1").await;
    assert!(d.owners.is_empty());
    assert_eq!(emu.semaphore_names(NODE), vec!["Sem1".to_string()]);
    assert_serves_fresh_session(&ch).await;
}

#[tokio::test(start_paused = true)]
async fn zero_count_and_zero_limit_are_rejected() {
    let (emu, ch) = setup().await;
    let mut s = Raw::new_session(&ch, 30_000).await;
    s.create(1, "Sem1", 0, b"");
    s.expect_create(1, StatusCode::BadRequest).await;
    s.describe_missing(2, "Sem1").await;
    s.create(3, "Sem1", MAX, b"");
    s.expect_create(3, StatusCode::Success).await;
    s.acquire(4, "Sem1", 0, 0, false);
    s.expect_acquire(4, StatusCode::BadRequest, false).await;
    s.acquire(5, "Lock1", 0, 0, true);
    s.expect_acquire(5, StatusCode::BadRequest, false).await;
    // An acquire with every field unset is a zero-count acquire too.
    s.send(Rq::AcquireSemaphore(
        session_request::AcquireSemaphore::default(),
    ));
    s.expect_acquire(0, StatusCode::BadRequest, false).await;
    assert_eq!(emu.semaphore_names(NODE), vec!["Sem1".to_string()]);
    assert_serves_fresh_session(&ch).await;
}

#[tokio::test(start_paused = true)]
async fn huge_timeouts_are_rejected_except_infinite_acquire() {
    let (emu, ch) = setup().await;
    for timeout_millis in [MAX, MAX - 1, 2 * DAY, 1_800_001] {
        let mut a = Raw::open(&ch);
        a.start(NODE, 0, timeout_millis, 1, b"");
        a.expect_failure(StatusCode::BadRequest).await;
    }
    assert!(emu.session_ids(NODE).is_empty());

    let s1 = Raw::new_session(&ch, 30_000).await;
    let id1 = s1.session_id;
    // A reattach is range-checked too, and does not disturb the session.
    let mut bad = Raw::open(&ch);
    bad.start(NODE, id1, MAX, 2, b"");
    bad.expect_failure(StatusCode::BadRequest).await;
    assert_eq!(emu.session_ids(NODE), vec![id1]);
    // (The fate of the old stream after a rejected attach is not asserted; take it over.)
    drop(s1);
    let mut s1 = Raw::attach(&ch, id1, 30_000, 3, b"").await;

    s1.create(1, "Sem1", 1, b"");
    s1.expect_create(1, StatusCode::Success).await;
    s1.acquire(2, "Sem1", MAX, 1, false);
    s1.expect_acquired(2).await;
    let mut s2 = Raw::new_session(&ch, 30_000).await;
    for (req, timeout_millis) in [(1, 2 * DAY), (2, DAY + 1), (3, MAX - 1)] {
        s2.acquire(req, "Sem1", timeout_millis, 1, false);
        s2.expect_acquire(req, StatusCode::BadRequest, false).await;
    }
    s2.acquire(4, "Sem1", DAY, 1, false);
    s2.expect_pending(4).await;
    s2.acquire(5, "Sem1", MAX, 1, false);
    s2.expect_acquire(4, StatusCode::Aborted, false).await;
    s2.expect_pending(5).await;
    let d = s2.describe_ok(6, "Sem1").await;
    assert_eq!(d.waiters.len(), 1);
    assert_eq!(d.waiters[0].timeout_millis, MAX);
    s1.release(3, "Sem1");
    s1.expect_release(3, StatusCode::Success, true).await;
    s2.expect_acquired(5).await;
    assert_serves_fresh_session(&ch).await;
}

#[tokio::test(start_paused = true)]
async fn two_thousand_concurrent_streams_all_get_sessions_that_work() {
    const N: usize = 2_000;
    let (emu, ch) = setup().await;
    let mut streams: Vec<Raw> = (0..N).map(|_| Raw::open(&ch)).collect();
    for s in &streams {
        s.start(NODE, 0, 30_000, 1, b"");
    }
    let mut ids = Vec::with_capacity(N);
    for s in &mut streams {
        ids.push(s.started().await);
    }
    ids.sort_unstable();
    assert_eq!(ids, (1..=N as u64).collect::<Vec<_>>());
    assert_eq!(emu.session_ids(NODE).len(), N);

    // All of them keep working: everybody takes a shared token of one ephemeral lock...
    for s in &streams {
        s.acquire(1, "Shared", 0, 1, true);
    }
    for s in &mut streams {
        s.expect_acquired(1).await;
    }
    // ...past several ping periods.
    sleep(Duration::from_secs(30)).await;
    let d = streams[0].describe_ok(2, "Shared").await;
    assert_eq!(d.count, N as u64);
    assert_eq!(d.owners.len(), N);
    for s in &streams {
        s.stop();
    }
    for s in &mut streams {
        let id = s.session_id;
        s.expect_stopped(id).await;
    }
    assert!(emu.session_ids(NODE).is_empty());
    assert!(emu.semaphore_names(NODE).is_empty());
    assert_serves_fresh_session(&ch).await;
}

#[tokio::test(start_paused = true)]
async fn client_that_never_reads_is_dropped_with_timeout_and_its_session_detached() {
    let (emu, ch) = setup().await;
    let mut s = Raw::open_mode(&ch, Mode::Unread);
    // Ping period 1 s.
    s.start(NODE, 0, 3_000, 1, b"");
    sleep(Duration::from_millis(1_500)).await;
    // The session exists (detached) and can be reattached within its timeout.
    assert_eq!(emu.session_ids(NODE), vec![1]);
    let mut again = Raw::attach(&ch, 1, 3_000, 2, b"").await;
    again.describe_missing(1, "Sem1").await;
    // What the silent client would have read: started, one ping, then the TIMEOUT failure.
    s.start_reading();
    assert_eq!(s.started().await, 1);
    match s.recv().await {
        Rs::Ping(p) => assert_ne!(p.opaque, 0),
        other => panic!("expected a ping, got {other:?}"),
    }
    s.expect_failure(StatusCode::Timeout).await;
    // The reattached stream was not disturbed by the old one's end.
    again.expect_quiet(Duration::from_secs(5)).await;
    assert_serves_fresh_session(&ch).await;
}

#[tokio::test(start_paused = true)]
async fn pong_rules_zero_is_accepted_when_nothing_is_outstanding_but_stale_pong_fails() {
    let (_emu, ch) = setup().await;
    let mut s = Raw::open_mode(&ch, Mode::Manual);
    s.start(NODE, 0, 30_000, 1, b"");
    s.started().await;
    let opaque = match s.recv().await {
        Rs::Ping(p) => p.opaque,
        other => panic!("expected a ping, got {other:?}"),
    };
    s.pong(opaque);
    s.pong(0);
    s.describe_missing(1, "Sem1").await;
    // Answering the same ping twice: nothing is outstanding any more, so it mismatches.
    s.pong(opaque);
    s.expect_failure(StatusCode::BadRequest).await;
    assert_serves_fresh_session(&ch).await;
}

#[tokio::test(start_paused = true)]
async fn requests_after_session_stop_close_the_stream_with_bad_session() {
    let (emu, ch) = setup().await;
    let mut s = Raw::new_session(&ch, 30_000).await;
    s.stop();
    s.acquire(1, "Lock1", 0, 1, true);
    s.expect_failure(StatusCode::BadSession).await;
    // The session is destroyed all the same.
    assert!(emu.session_ids(NODE).is_empty());
    let mut t = Raw::new_session(&ch, 30_000).await;
    t.stop();
    t.stop();
    t.expect_failure(StatusCode::BadSession).await;
    assert!(emu.session_ids(NODE).is_empty());
    assert!(emu.semaphore_names(NODE).is_empty());
    assert_serves_fresh_session(&ch).await;
}

#[tokio::test(start_paused = true)]
async fn steal_with_wrong_key_or_older_seq_no_is_rejected_and_session_keeps_semaphores() {
    let (emu, ch) = setup().await;
    let mut a = Raw::attach(&ch, 0, 30_000, 5, b"foobar").await;
    let id = a.session_id;
    a.acquire(1, "Lock1", 0, 1, true);
    a.expect_acquired(1).await;
    let mut wrong_key = Raw::open(&ch);
    wrong_key.start(NODE, id, 30_000, 6, b"other");
    wrong_key.expect_failure(StatusCode::BadSession).await;
    let mut no_key = Raw::open(&ch);
    no_key.start(NODE, id, 30_000, 7, b"");
    no_key.expect_failure(StatusCode::BadSession).await;
    let mut old_seq = Raw::open(&ch);
    old_seq.start(NODE, id, 30_000, 4, b"foobar");
    old_seq.expect_failure(StatusCode::BadSession).await;
    // The session and its lock survive; the legitimate client reattaches.
    assert_eq!(emu.session_ids(NODE), vec![id]);
    let mut b = Raw::attach(&ch, id, 30_000, 8, b"foobar").await;
    let d = b.describe_ok(1, "Lock1").await;
    assert_eq!(sessions_of(&d.owners), vec![id]);
    assert_serves_fresh_session(&ch).await;
}

#[tokio::test(start_paused = true)]
async fn garbage_and_oversized_messages_do_not_wedge_the_server() {
    let (emu, ch) = setup().await;
    // Not protobuf at all, as the first message and after a start.
    let mut a = Raw::open_bytes(&ch);
    a.send_bytes(vec![0xff; 32]);
    let mut b = Raw::open_bytes(&ch);
    b.start(NODE, 0, 30_000, 1, b"");
    let id = b.started().await;
    b.send_bytes(vec![0xff; 32]);
    // Larger than the transport's message limit.
    let mut c = Raw::new_session(&ch, 30_000).await;
    c.acquire_data(1, "Lock1", 0, 1, true, &vec![0; 5 * MIB]);
    for s in [&mut a, &mut b, &mut c] {
        // Whatever happens to these streams, it happens without hanging the test.
        s.disconnect();
        let _ = s.wait_end(GUARD).await;
    }
    sleep(Duration::from_secs(1)).await;
    assert!(emu.session_ids(NODE).contains(&id));
    assert!(emu.semaphore_names(NODE).is_empty());
    assert_serves_fresh_session(&ch).await;
    // A fresh connection works too.
    let fresh = channel(&emu).await;
    assert_serves_fresh_session(&fresh).await;
}

#[tokio::test(start_paused = true)]
async fn after_all_the_abuse_a_fresh_session_works() {
    let (emu, ch) = setup().await;
    // A burst of every kind of bad start on one connection...
    let mut bad = Vec::new();
    for i in 0..50u64 {
        let s = Raw::open(&ch);
        match i % 5 {
            0 => s.start("", 0, 30_000, 1, b""),
            1 => s.start("/local/missing", 0, 30_000, 1, b""),
            2 => s.start(NODE, 1_000 + i, 30_000, 1, b""),
            3 => s.start(NODE, 0, MAX, 1, b""),
            _ => s.ping(i),
        }
        bad.push(s);
    }
    for s in &mut bad {
        match s.next_event(GUARD).await {
            Event::Msg { msg, .. } => {
                assert!(
                    matches!(msg.response, Some(Rs::Failure(_))),
                    "expected a failure, got {msg:?}"
                );
            }
            Event::End { status, .. } => {
                assert_eq!(status.map(|s| s.code()), Some(tonic::Code::InvalidArgument))
            }
        }
    }
    assert!(emu.session_ids(NODE).is_empty());
    // ...and the emulator still serves a brand-new session normally.
    assert_serves_fresh_session(&ch).await;
    assert_eq!(emu.session_ids(NODE).len(), 0);
}
