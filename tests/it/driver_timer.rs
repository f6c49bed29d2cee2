//! The session driver's one timer, against a scripted server, in paused time: every wake-up
//! the session core schedules (a ping, the lease-safety deadline, a local queue timeout)
//! happens at its instant, whether the timer had to move later or earlier to get there.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::peer;

use peer::{
    Peer, Rq, SemaphoreDescription, SemaphoreSession, StatusCode, acquire_result, describe_ok,
    description, within,
};
use tokio::time::Instant;
use ydb_coordination::{
    AcquireOptions, Client, ErrorKind, Lease, Session, SessionOptions, config::DescribeOptions,
};

/// The session id the scripted server hands out.
const SID: u64 = 42;

/// Acquires `name` on `s`, the server granting it at once; returns the lease and the instant
/// the acquire (and the describe that reads its fencing token) was sent and answered: no
/// time passes in between.
async fn acquire_granted(peer: &mut Peer, s: &Session, name: &str) -> (Lease, Instant) {
    let call = tokio::spawn({
        let s = s.clone();
        let name = name.to_string();
        async move { s.acquire(&name, lock()).await }
    });
    let (i, r) = peer.recv().await;
    let Rq::AcquireSemaphore(a) = r else {
        panic!("expected acquire_semaphore, got {r:?}");
    };
    let (_, r) = peer.recv().await;
    let Rq::DescribeSemaphore(d) = r else {
        panic!("expected describe_semaphore, got {r:?}");
    };
    let sent = Instant::now();
    peer.send(i, acquire_result(a.req_id, StatusCode::Success, true));
    let owned = SemaphoreDescription {
        owners: vec![SemaphoreSession {
            order_id: 1,
            session_id: SID,
            count: u64::MAX,
            ..SemaphoreSession::default()
        }],
        ..description(name, b"")
    };
    peer.send(i, describe_ok(d.req_id, owned));
    (within(call).await.unwrap().unwrap(), sent)
}

/// A session on `peer` holding "a", granted at once, with the instant it was granted.
async fn holding(peer: &mut Peer, opts: SessionOptions) -> (Client, Session, Lease, Instant) {
    let (client, s, _, _) = peer.session(SID, opts).await;
    let (lease, granted) = acquire_granted(peer, &s, "a").await;
    (client, s, lease, granted)
}

/// Waits for the client's next request, which must be a ping; returns its stream.
async fn expect_ping(peer: &mut Peer) -> usize {
    let (i, r) = peer.recv_any().await;
    assert!(matches!(r.request, Some(Rq::Ping(_))), "{r:?}");
    i
}

/// An exclusive lock on an ephemeral semaphore.
fn lock() -> AcquireOptions {
    AcquireOptions::exclusive().ephemeral(true)
}

#[tokio::test(start_paused = true)]
async fn with_nothing_else_happening_the_first_ping_goes_out_one_interval_after_the_attach() {
    let mut peer = Peer::start().await;
    let opts = SessionOptions::new();
    let (_client, _s, i0, _) = peer.session(SID, opts.clone()).await;
    // The session_start was sent and answered at this instant.
    let attached = Instant::now();
    assert_eq!(expect_ping(&mut peer).await, i0);
    assert_eq!(Instant::now() - attached, opts.get_ping_interval());
    assert_eq!(opts.get_ping_interval(), opts.get_timeout() / 5);
}

#[tokio::test(start_paused = true)]
async fn an_answer_moves_the_ping_later_and_the_timer_follows() {
    let mut peer = Peer::start().await;
    let opts = SessionOptions::new();
    let interval = opts.get_ping_interval();
    let (_client, s, i0, _) = peer.session(SID, opts).await;
    // Half an interval in, a describe is answered: contact is confirmed as of its sending,
    // so the ping is due one interval after that, not after the attach. The timer, armed
    // for the old instant, wakes there for nothing and is moved to the new one.
    tokio::time::sleep(interval / 2).await;
    let call = tokio::spawn({
        let s = s.clone();
        async move { s.describe_semaphore("a", DescribeOptions::new()).await }
    });
    let (i, r) = peer.recv().await;
    let Rq::DescribeSemaphore(d) = r else {
        panic!("expected describe_semaphore, got {r:?}");
    };
    let sent = Instant::now();
    peer.send(i, describe_ok(d.req_id, description("a", b"")));
    within(call).await.unwrap().unwrap();
    assert_eq!(expect_ping(&mut peer).await, i0);
    assert_eq!(Instant::now() - sent, interval);
}

#[tokio::test(start_paused = true)]
async fn a_wake_up_earlier_than_the_armed_one_moves_the_timer_earlier() {
    let mut peer = Peer::start().await;
    let opts = SessionOptions::new();
    let (_client, s, held, _) = holding(&mut peer, opts.clone()).await;
    // The timer is armed for the next ping. A second acquire of the same semaphore waits in
    // the session (one entry per session and semaphore on the server) with a timeout far
    // shorter than that: its expiry is the earliest wake-up now, and it comes on time.
    let wait = opts.get_ping_interval() / 10;
    let started = Instant::now();
    let second = within(s.acquire("a", lock().timeout(wait))).await;
    assert_eq!(second.unwrap_err().kind(), ErrorKind::NotAcquired);
    assert_eq!(Instant::now() - started, wait);
    assert!(!held.is_lost());
    // Nothing about it went to the server: the next request it sees is the ping.
    expect_ping(&mut peer).await;
    assert_eq!(Instant::now() - started, opts.get_ping_interval());
}

#[tokio::test(start_paused = true)]
async fn against_a_silent_server_a_lease_token_fires_at_contact_plus_timeout_minus_margin() {
    let mut peer = Peer::start().await;
    let opts = SessionOptions::new();
    let (_client, _s, lease, sent) = holding(&mut peer, opts.clone()).await;
    // From now on the server answers nothing: pings go unanswered, the stream is declared
    // dead and reattach attempts are made, none answered. Through all of it, the lease token
    // fires at the instant the server could first expire the session, less the margin.
    peer.set_auto_pong(false);
    within(lease.cancelled()).await;
    assert_eq!(
        Instant::now() - sent,
        opts.get_timeout() - opts.get_safety_margin()
    );
}
