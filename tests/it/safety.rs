//! Safety properties of sessions, leases and watches: a grant is never leaked by a dropped
//! acquire, invalid options never reach (or kill) the session task, close and timeouts hold
//! while the stream is down, every handle reports the session's real cause, and watches end
//! on the latest value.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use crate::peer;

use std::time::Duration;

use common::{Env, wait_state, within};
use futures::StreamExt;
use peer::{Peer, Rq, Rs, StatusCode, acquire_result, describe_ok, description, session_response};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use ydb_coordination::{
    AcquireOptions, ErrorKind, Lease, Result, Session, SessionOptions, config::DescribeOptions,
    config::WatchOptions, session::SessionState, session::WatchStream, session::WatchUpdate,
};

/// The session id the scripted peer hands out.
const SID: u64 = 42;

fn lock() -> AcquireOptions {
    AcquireOptions::exclusive().ephemeral(true)
}

fn attached(st: &SessionState) -> bool {
    matches!(st, SessionState::Attached { .. })
}

fn reattaching(st: &SessionState) -> bool {
    matches!(st, SessionState::Reattaching { .. })
}

/// Waits (a bounded moment) until the session's own tables hold nothing.
async fn wait_nothing_held(s: &Session) {
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        let snapshot = within(s.snapshot()).await;
        if snapshot.held.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the session still holds {:?} after the acquire was dropped",
            snapshot.held
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// After a dropped acquire of "job" in `s`: the same session can take "job" again, and once
/// it lets go, another session can too.
async fn job_is_free_again(env: &Env, s: &Session) {
    wait_nothing_held(s).await;
    let again = tokio::time::timeout(Duration::from_secs(2), s.acquire("job", lock())).await;
    let again = again
        .expect("the same session could not acquire \"job\" again: the dropped grant leaked")
        .unwrap();
    drop(again);
    let other = env.session().await;
    let theirs = tokio::time::timeout(Duration::from_secs(2), other.acquire("job", lock())).await;
    drop(
        theirs
            .expect("another session could not acquire \"job\": the dropped grant leaked")
            .unwrap(),
    );
}

/// Reads a watch until nothing arrives for a second; every item must be `Ok`.
async fn read_until_quiet(watch: &mut WatchStream) -> Vec<WatchUpdate> {
    let mut items = Vec::new();
    for _ in 0..10_000 {
        match tokio::time::timeout(Duration::from_secs(1), watch.next()).await {
            Err(_) => return items,
            Ok(Some(Ok(item))) => items.push(item),
            Ok(other) => panic!("the watch ended after {} items: {other:?}", items.len()),
        }
    }
    panic!("the watch never went quiet");
}

/// The kind of a failed result, `None` for a success.
fn kind_of<T>(r: Result<T>) -> Option<ErrorKind> {
    r.err().map(|e| e.kind())
}

/// Starts an exclusive ephemeral acquire of `name` in the background and returns it with the
/// stream index and the req_ids of the acquire and of the describe pipelined behind it.
async fn spawn_acquire(
    peer: &mut Peer,
    s: &Session,
    name: &str,
) -> (JoinHandle<Result<Lease>>, usize, u64, u64) {
    let s2 = s.clone();
    let n = name.to_string();
    let call = tokio::spawn(async move { s2.acquire(&n, lock()).await });
    let (i, r) = peer.recv().await;
    let Rq::AcquireSemaphore(a) = r else {
        panic!("expected acquire_semaphore, got {r:?}");
    };
    assert_eq!(a.name, name);
    let (i2, r) = peer.recv().await;
    let Rq::DescribeSemaphore(d) = r else {
        panic!("expected describe_semaphore, got {r:?}");
    };
    assert_eq!((i2, d.name.as_str()), (i, name));
    (call, i, a.req_id, d.req_id)
}

/// A description of `name` owned by the scripted session.
fn owned_by_us(name: &str) -> peer::SemaphoreDescription {
    peer::SemaphoreDescription {
        count: u64::MAX,
        limit: u64::MAX,
        ephemeral: true,
        owners: vec![peer::SemaphoreSession {
            order_id: 7,
            session_id: SID,
            count: u64::MAX,
            ..peer::SemaphoreSession::default()
        }],
        ..description(name, b"")
    }
}

/// A session on the scripted peer holding "lock" (granted at once).
async fn peer_session_holding_lock(
    peer: &mut Peer,
) -> (ydb_coordination::Client, Session, usize, Lease) {
    let (client, s, i0, _) = peer.session(SID, SessionOptions::new()).await;
    let (call, i, acquire_req, describe_req) = spawn_acquire(peer, &s, "lock").await;
    peer.send(i, acquire_result(acquire_req, StatusCode::Success, true));
    peer.send(i, describe_ok(describe_req, owned_by_us("lock")));
    let lease = peer::within(call).await.unwrap().unwrap();
    (client, s, i0, lease)
}

// ---- 1. a dropped acquire never leaks its grant -------------------------------------------

#[tokio::test(start_paused = true)]
async fn an_acquire_dropped_after_queued_said_granted_gives_the_semaphore_back() {
    let env = Env::new().await;
    let s = env.session().await;
    let mut acquire = s.acquire("job", lock());
    assert!(!within(acquire.queued()).await);
    drop(acquire);
    job_is_free_again(&env, &s).await;
}

#[tokio::test(start_paused = true)]
async fn an_acquire_polled_once_and_dropped_after_the_grant_arrived_gives_the_semaphore_back() {
    let env = Env::new().await;
    let s = env.session().await;
    let mut acquire = s.acquire("job", lock());
    assert!(futures::poll!(&mut acquire).is_pending());
    // The driver gets the grant and hands it to the (unpolled) future.
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(acquire);
    job_is_free_again(&env, &s).await;
}

// ---- 2. validation errors are never lost --------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_count_of_zero_is_rejected_by_the_client_even_after_queued() {
    let mut peer = Peer::start().await;
    let (_client, s, _, _) = peer.session(SID, SessionOptions::new()).await;
    let mut acquire = s.acquire("x", AcquireOptions::exclusive().count(0));
    assert!(!peer::within(acquire.queued()).await);
    // The peer answers nothing: only the client's own check can complete the acquire.
    let result = tokio::time::timeout(Duration::from_secs(5), acquire).await;
    match result {
        Ok(r) => assert_eq!(kind_of(r), Some(ErrorKind::InvalidArgument)),
        Err(_) => panic!("the acquire was not rejected locally (it waits for the server)"),
    }
    let sent = peer.recv_within(Duration::from_secs(1)).await;
    assert!(sent.is_none(), "the invalid acquire was sent: {sent:?}");
    assert!(attached(&s.state()));
}

#[tokio::test(start_paused = true)]
async fn an_acquire_timeout_over_a_day_is_rejected_after_queued_and_the_session_stays_healthy() {
    let env = Env::new().await;
    let s = env.session().await;
    let held = within(s.acquire("held", lock())).await.unwrap();
    let mut acquire = s.acquire("x", lock().timeout(Duration::MAX));
    assert!(!within(acquire.queued()).await);
    assert_eq!(
        kind_of(within(acquire).await),
        Some(ErrorKind::InvalidArgument)
    );
    assert!(attached(&s.state()), "{:?}", s.state());
    // Healthy for longer than the session timeout: the lease is kept, on the server too.
    tokio::time::sleep(Duration::from_secs(15)).await;
    assert!(attached(&s.state()), "{:?}", s.state());
    assert!(!held.is_lost());
    let other = env.session().await;
    assert!(
        within(other.try_acquire("held", lock()))
            .await
            .unwrap()
            .is_none(),
        "another session took a lock the session still thinks it holds"
    );
    let d = within(s.describe_semaphore("held", DescribeOptions::new().owners(true)))
        .await
        .unwrap();
    assert_eq!(d.owners.len(), 1);
    assert_eq!(d.owners[0].session_id, s.id());
}

// ---- 3. out-of-range session options are rejected up front --------------------------------

/// Creates a session with `options` and checks it is refused with `InvalidArgument`.
async fn session_is_refused(options: SessionOptions) {
    let env = Env::new().await;
    let (client, node) = (env.client.clone(), env.node.clone());
    let created = within(tokio::spawn(
        async move { client.session(&node, options).await },
    ))
    .await;
    match created {
        Ok(Err(e)) => assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e:?}"),
        Ok(Ok(s)) => {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let describe = kind_of(within(s.describe_semaphore("x", DescribeOptions::new())).await);
            panic!(
                "the session was created; a second later its state is {:?} and a describe gives {describe:?}",
                s.state()
            );
        }
        Err(join) => panic!("Client::session panicked: {join}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_ping_interval_out_of_range_is_rejected_when_the_session_is_created() {
    session_is_refused(SessionOptions::new().ping_interval(Duration::MAX)).await;
}

#[tokio::test(start_paused = true)]
async fn a_stop_timeout_out_of_range_is_rejected_when_the_session_is_created() {
    session_is_refused(SessionOptions::new().stop_timeout(Duration::MAX)).await;
}

#[tokio::test(start_paused = true)]
async fn a_connect_timeout_out_of_range_is_rejected_when_the_session_is_created() {
    session_is_refused(SessionOptions::new().connect_timeout(Duration::MAX)).await;
}

// ---- 4. close while reattaching -----------------------------------------------------------

/// A session behind its own fault proxy holding "job", and another session queued for it.
async fn held_behind_proxy(
    env: &Env,
) -> (
    ydb_coordination::emulator::FaultProxy,
    Session,
    Lease,
    ydb_coordination::Acquiring<Lease>,
) {
    let (proxy, behind) = env.behind_proxy().await;
    let s = within(behind.session(&env.node, SessionOptions::new()))
        .await
        .unwrap();
    let lease = within(s.acquire("job", lock())).await.unwrap();
    let other = env.session().await;
    let mut waiter = other.acquire("job", lock());
    assert!(within(waiter.queued()).await);
    (proxy, s, lease, waiter)
}

/// The queued session gets "job" within 3 s of `since`: well before the server could have
/// expired the session that held it (10 s).
async fn granted_soon_after(env: &Env, since: Instant, waiter: ydb_coordination::Acquiring<Lease>) {
    let granted = tokio::time::timeout_at(since + Duration::from_secs(3), waiter).await;
    let granted = granted.unwrap_or_else(|_| {
        panic!(
            "the lock was still held 3 s later; server sessions: {:?}",
            env.emulator.session_ids("app")
        )
    });
    drop(granted.unwrap());
}

#[tokio::test(start_paused = true)]
async fn close_while_reattaching_stops_the_session_on_the_server_within_the_stop_timeout() {
    let env = Env::new().await;
    if !env.emulated() {
        return;
    }
    let (proxy, s, lease, waiter) = held_behind_proxy(&env).await;
    let token = lease.token();
    proxy.net().refuse_for(Duration::from_millis(500));
    proxy.net().cut();
    wait_state(&s, reattaching).await;
    let closed_at = Instant::now();
    within(s.close()).await;
    assert_eq!(s.state(), SessionState::Closed);
    assert!(token.is_cancelled());
    assert!(lease.is_lost());
    granted_soon_after(&env, closed_at, waiter).await;
}

// ---- 5. an acquire's own timeout holds while the stream is down ---------------------------

#[tokio::test(start_paused = true)]
async fn an_acquire_times_out_at_its_deadline_while_the_stream_is_stalled() {
    let env = Env::new().await;
    if !env.emulated() {
        return;
    }
    let a = env.session().await;
    let held = within(a.acquire("job", lock())).await.unwrap();
    let (proxy, behind) = env.behind_proxy().await;
    let b = within(behind.session(&env.node, SessionOptions::new()))
        .await
        .unwrap();
    let called = Instant::now();
    let mut acquire = b.acquire("job", lock().timeout(Duration::from_secs(1)));
    assert!(within(acquire.queued()).await);
    proxy.net().stall();
    let ((result, ended), ()) = tokio::join!(
        async {
            let r = tokio::time::timeout(Duration::from_secs(30), acquire).await;
            (r, Instant::now())
        },
        async {
            tokio::time::sleep(Duration::from_secs(3)).await;
            proxy.net().resume();
        },
    );
    let result = result.expect("the acquire never ended");
    assert_eq!(kind_of(result), Some(ErrorKind::Unavailable));
    let took = ended - called;
    assert!(
        took < Duration::from_millis(1500),
        "the 1 s acquire ended after {took:?}"
    );
    // The network is back; when A lets go, B does not get the lock behind its caller's back.
    wait_state(&b, attached).await;
    within(held.release()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(within(b.snapshot()).await.held.is_empty());
    let c = env.session().await;
    let taken = within(c.try_acquire("job", lock())).await.unwrap();
    assert!(
        taken.is_some(),
        "someone (B) still holds or waits for the lock"
    );
    let d = within(c.describe_semaphore("job", DescribeOptions::new().owners(true)))
        .await
        .unwrap();
    let owners: Vec<u64> = d.owners.iter().map(|o| o.session_id).collect();
    assert_eq!(owners, vec![c.id()]);
}

// ---- 6. close racing an in-flight acquire -------------------------------------------------

#[tokio::test(start_paused = true)]
async fn an_acquire_granted_after_close_was_asked_fails_with_session_closed() {
    let mut peer = Peer::start().await;
    let (_client, s, i0, _) = peer.session(SID, SessionOptions::new()).await;
    let (call, i, acquire_req, describe_req) = spawn_acquire(&mut peer, &s, "lock").await;
    let s2 = s.clone();
    let close = tokio::spawn(async move { s2.close().await });
    let (istop, r) = peer.recv().await;
    assert!(
        matches!(r, Rq::SessionStop(_)),
        "expected session_stop, got {r:?}"
    );
    assert_eq!(istop, i);
    // The server had granted the acquire before it saw the stop.
    peer.send(i, acquire_result(acquire_req, StatusCode::Success, true));
    peer.send(i, describe_ok(describe_req, owned_by_us("lock")));
    peer.barrier(i, 77).await;
    peer.send(
        i,
        Rs::SessionStopped(session_response::SessionStopped { session_id: SID }),
    );
    peer.end(i);
    within(close).await.unwrap();
    match within(call).await.unwrap() {
        Err(e) => assert_eq!(e.kind(), ErrorKind::SessionClosed, "{e:?}"),
        Ok(lease) => panic!(
            "close() was asked first, yet the acquire returned a lease (lost: {})",
            lease.is_lost()
        ),
    }
    assert_eq!(s.state(), SessionState::Closed);
    assert!(s.token().is_cancelled());
    // After the stop the client sends nothing but, at most, a release of what it was given.
    while let Some((idx, r)) = peer.recv_within(Duration::from_secs(5)).await {
        assert_eq!(idx, i0);
        assert!(
            matches!(&r, Rq::ReleaseSemaphore(rel) if rel.name == "lock"),
            "unexpected request after session_stop: {r:?}"
        );
    }
    assert_eq!(peer.stream_count(), 1, "the client opened another stream");
}

// ---- 7. a reattach answered with a different session id -----------------------------------

#[tokio::test(start_paused = true)]
async fn a_foreign_session_from_a_reattach_is_stopped_and_the_session_ends_expired() {
    let mut peer = Peer::start().await;
    let (_client, s, i0, _) = peer.session(SID, SessionOptions::new()).await;
    peer.cut();
    let (i1, r) = peer.recv().await;
    let Rq::SessionStart(start) = r else {
        panic!("expected session_start, got {r:?}");
    };
    assert_ne!(i1, i0);
    assert_eq!(start.session_id, SID);
    peer.send(
        i1,
        Rs::SessionStarted(session_response::SessionStarted {
            session_id: SID + 1,
            timeout_millis: 0,
        }),
    );
    // Session SID + 1 was created for nobody: the client stops it on that stream.
    let stop = peer.recv_within(Duration::from_secs(5)).await;
    assert!(
        matches!(&stop, Some((i, Rq::SessionStop(_))) if *i == i1),
        "expected session_stop on stream {i1}, got {stop:?}"
    );
    peer.send(
        i1,
        Rs::SessionStopped(session_response::SessionStopped {
            session_id: SID + 1,
        }),
    );
    peer.end(i1);
    let state = wait_state(&s, SessionState::is_terminal).await;
    assert_eq!(state, SessionState::Expired);
    assert_eq!(s.error().map(|e| e.kind()), Some(ErrorKind::SessionExpired));
    assert!(s.token().is_cancelled());
}

// ---- 8. watches end on the latest value ---------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_watch_that_was_not_polled_during_many_changes_ends_on_the_latest_data() {
    let env = Env::new().await;
    let s = env.session().await;
    let writer = env.session().await;
    within(writer.create_semaphore("cfg", 1, b"0"))
        .await
        .unwrap();
    let mut watch = within(s.watch_semaphore("cfg", WatchOptions::data_changes()))
        .await
        .unwrap();
    for n in 1..=100 {
        within(writer.update_semaphore("cfg", n.to_string().as_bytes()))
            .await
            .unwrap();
    }
    // Still not polling: every notification of those changes has reached the session.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let items = read_until_quiet(&mut watch).await;
    let versions: Vec<u64> = items
        .iter()
        .map(|u| {
            String::from_utf8(u.description.data.clone())
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    assert!(
        versions.windows(2).all(|w| w[0] <= w[1]),
        "the watch went back in time: {versions:?}"
    );
    assert_eq!(
        versions.last(),
        Some(&100),
        "the watch ended on stale data: {versions:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_observer_that_was_not_polled_during_many_leader_changes_ends_on_the_final_leader() {
    let env = Env::new().await;
    let observer = env.session().await;
    let mut leaders = observer.election("sched").observe();
    let first = within(leaders.next()).await.unwrap().unwrap();
    assert!(first.is_none(), "{first:?}");
    let candidates = [
        env.session().await,
        env.session().await,
        env.session().await,
    ];
    let mut last = None;
    for n in 0..30 {
        let c = &candidates[n % candidates.len()];
        let data = format!("leader-{n}");
        let leadership = within(c.election("sched").campaign(data.as_bytes()))
            .await
            .unwrap();
        if n < 29 {
            within(leadership.resign()).await.unwrap();
        } else {
            last = Some(leadership);
        }
    }
    // Still not polling: every notification of those changes has reached the session.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut seen = Vec::new();
    loop {
        match tokio::time::timeout(Duration::from_secs(1), leaders.next()).await {
            Err(_) => break,
            Ok(Some(Ok(leader))) => seen.push(leader.map(|l| String::from_utf8(l.data).unwrap())),
            Ok(other) => panic!("the observation ended: {other:?}"),
        }
        assert!(seen.len() < 1000, "the observation never went quiet");
    }
    assert_eq!(
        seen.last(),
        Some(&Some("leader-29".to_string())),
        "the observer ended on a stale leader: {seen:?}"
    );
    drop(last);
}

// ---- 9. every handle reports the session's real cause -------------------------------------

/// How a session ends in [`handle_errors_after`].
#[derive(Debug, Clone, Copy)]
enum Ending {
    Expire,
    Close,
}

/// Ends a session that holds a lease and a watch, then returns what each handle reports.
async fn handle_errors_after(env: &Env, ending: Ending) -> Vec<(&'static str, Option<ErrorKind>)> {
    let s = env.session().await;
    within(s.create_semaphore("w", 1, b"")).await.unwrap();
    let lease = within(s.acquire("job", lock())).await.unwrap();
    let mut watch = within(s.watch_semaphore("w", WatchOptions::data_changes()))
        .await
        .unwrap();
    within(watch.next()).await.unwrap().unwrap();
    match ending {
        Ending::Expire => {
            assert!(env.emulator.expire_session("app", s.id()));
            let state = wait_state(&s, SessionState::is_terminal).await;
            assert_eq!(state, SessionState::Expired);
        }
        Ending::Close => {
            within(s.close()).await;
            assert_eq!(s.state(), SessionState::Closed);
        }
    }
    let watch_item = match within(watch.next()).await {
        Some(item) => kind_of(item),
        None => panic!("the watch ended without an error item"),
    };
    let result = vec![
        (
            "lease.set_data",
            kind_of(within(lease.set_data(b"x")).await),
        ),
        ("lease.release", kind_of(within(lease.release()).await)),
        (
            "describe",
            kind_of(within(s.describe_semaphore("w", DescribeOptions::new())).await),
        ),
        ("acquire", kind_of(within(s.acquire("job2", lock())).await)),
        ("watch", watch_item),
    ];
    within(env.session().await.delete_semaphore("w", true))
        .await
        .unwrap();
    result
}

#[tokio::test(start_paused = true)]
async fn every_handle_reports_the_real_cause_after_expiry_and_after_close() {
    let env = Env::new().await;
    if !env.emulated() {
        return;
    }
    let names = [
        "lease.set_data",
        "lease.release",
        "describe",
        "acquire",
        "watch",
    ];
    let expect = |kind| names.iter().map(|n| (*n, Some(kind))).collect::<Vec<_>>();
    assert_eq!(
        handle_errors_after(&env, Ending::Expire).await,
        expect(ErrorKind::SessionExpired),
        "after the server expired the session"
    );
    assert_eq!(
        handle_errors_after(&env, Ending::Close).await,
        expect(ErrorKind::SessionClosed),
        "after close()"
    );
}

// ---- 10. a watch alone keeps its session open ---------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_watch_alone_keeps_its_session_open_and_dropping_it_closes_the_session() {
    let env = Env::new().await;
    if !env.emulated() {
        return;
    }
    let other = env.session().await;
    within(other.create_semaphore("w", 1, b"0")).await.unwrap();
    let s = env.session().await;
    let id = s.id();
    let mut watch = within(s.watch_semaphore("w", WatchOptions::data_changes()))
        .await
        .unwrap();
    let first = within(watch.next()).await.unwrap().unwrap();
    assert_eq!(first.description.data, b"0");
    drop(s);
    // Longer than the session timeout.
    tokio::time::sleep(Duration::from_secs(30)).await;
    within(other.update_semaphore("w", b"1")).await.unwrap();
    match within(watch.next()).await {
        Some(Ok(update)) => assert_eq!(update.description.data, b"1"),
        item => panic!("the watch ended once the session handles were dropped: {item:?}"),
    }
    assert!(
        env.emulator.session_ids("app").contains(&id),
        "the watch's session is gone from the server"
    );
    drop(watch);
    within(other.update_semaphore("w", b"2")).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while env.emulator.session_ids("app").contains(&id) {
        assert!(
            Instant::now() < deadline,
            "the session outlived its last watch by 5 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ---- 11. the lease-safety deadline under a flood of server pings --------------------------

#[tokio::test(start_paused = true)]
async fn a_flood_of_server_pings_does_not_postpone_the_lease_deadline() {
    let mut peer = Peer::start().await;
    let (_client, s, i0, lease) = peer_session_holding_lock(&mut peer).await;
    // The acquire and its describe were sent no later than this; nothing sent later is ever
    // answered.
    let answered = Instant::now();
    peer.set_auto_pong(false);
    let flood = peer.pinger(i0, Duration::from_millis(1));
    let token = lease.token();
    let fired = tokio::spawn(async move {
        token.cancelled().await;
        Instant::now()
    });
    let fired_at = within(fired).await.unwrap();
    flood.abort();
    // Default timeout 10 s, margin 1 s: at most 9 s after the last confirmed request.
    assert!(
        fired_at <= answered + Duration::from_millis(9500),
        "the token fired {:?} after the last answer",
        fired_at - answered
    );
    assert!(lease.is_lost());
    assert_eq!(
        wait_state(&s, SessionState::is_terminal).await,
        SessionState::Expired
    );
}

#[tokio::test(start_paused = true)]
async fn a_lease_whose_token_was_never_asked_for_is_lost_with_its_session() {
    // A lease makes its token on the first ask: one nobody asked for must still read as lost
    // when its session's deadline passes, and hand out a token that has already fired.
    let mut peer = Peer::start().await;
    let (_client, s, _i0, lease) = peer_session_holding_lock(&mut peer).await;
    assert!(!lease.is_lost());
    peer.set_auto_pong(false);
    assert_eq!(
        wait_state(&s, SessionState::is_terminal).await,
        SessionState::Expired
    );
    assert!(lease.is_lost());
    assert!(lease.token().is_cancelled());
    within(lease.cancelled()).await;
}

// ---- 3 (more). closing survives a lost stream; a manager's shutdown while reattaching ------

#[tokio::test(start_paused = true)]
async fn a_stream_lost_while_closing_is_reattached_to_send_the_stop() {
    let env = Env::new().await;
    if !env.emulated() {
        return;
    }
    let (proxy, s, _lease, waiter) = held_behind_proxy(&env).await;
    // The stop is written into a stalled stream, which then breaks; the network is back
    // soon after.
    proxy.net().stall();
    let closing = tokio::spawn({
        let s = s.clone();
        async move { s.close().await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    proxy.net().refuse_for(Duration::from_millis(300));
    proxy.net().cut();
    proxy.net().resume();
    let closed_at = Instant::now();
    within(closing).await.unwrap();
    assert_eq!(s.state(), SessionState::Closed);
    granted_soon_after(&env, closed_at, waiter).await;
}

#[tokio::test(start_paused = true)]
async fn a_manager_shut_down_while_reattaching_frees_its_locks_within_the_stop_timeout() {
    let env = Env::new().await;
    if !env.emulated() {
        return;
    }
    let (proxy, behind) = env.behind_proxy().await;
    let manager = behind.session_manager(&env.node, SessionOptions::new());
    let session = within(manager.current()).await.unwrap();
    let _guard = within(session.mutex("job").lock()).await.unwrap();
    let other = env.session().await;
    let mut waiter = other.acquire("job", lock());
    assert!(within(waiter.queued()).await);
    proxy.net().refuse_for(Duration::from_millis(500));
    proxy.net().cut();
    wait_state(&session, reattaching).await;
    let shut_at = Instant::now();
    within(manager.shutdown()).await;
    granted_soon_after(&env, shut_at, waiter).await;
}

// ---- 6. owner data on a semaphore deleted and made anew -----------------------------------

#[tokio::test(start_paused = true)]
async fn set_data_after_the_semaphore_was_recreated_ends_the_lease_instead_of_taking_it_anew() {
    let env = Env::new().await;
    let s = env.session().await;
    within(s.create_semaphore("pool", 1, b"")).await.unwrap();
    let lease = within(s.acquire("pool", AcquireOptions::exclusive().count(1)))
        .await
        .unwrap();
    let old = lease.fencing_token();
    let admin = env.session().await;
    within(admin.delete_semaphore("pool", true)).await.unwrap();
    within(admin.create_semaphore("pool", 1, b""))
        .await
        .unwrap();
    let err = within(lease.set_data(b"new")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Aborted);
    assert!(
        lease.is_lost(),
        "the lease still looks valid with fencing token {old}"
    );
    // What the update took by mistake was given back: another session can have it.
    let taken = within(admin.try_acquire("pool", AcquireOptions::exclusive().count(1)))
        .await
        .unwrap();
    assert!(taken.is_some(), "the recreated semaphore is still held");
}
