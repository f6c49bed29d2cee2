//! The session engine against the emulator: reattach, keepalive, the lease-safety deadline,
//! verdicts, cancellation and per-request errors.

use crate::common;

use std::time::Duration;

use common::{Env, wait_state, within};
use futures::StreamExt;
use tokio::time::Instant;
use ydb_coordination::emulator::FaultProxy;
use ydb_coordination::{
    AcquireOptions, Client, ErrorKind, SessionOptions, config::DescribeOptions,
    config::WatchOptions, session::SessionState,
};

fn lock() -> AcquireOptions {
    AcquireOptions::exclusive().ephemeral(true)
}

#[tokio::test(start_paused = true)]
async fn reattaches_after_wire_cut_and_keeps_lease() {
    let env = Env::new().await;
    if !env.emulated() {
        return;
    }
    let s = env.session().await;
    let lease = within(s.acquire("job", lock())).await.unwrap();
    let token = lease.token();
    let id = s.id();
    env.emulator.net().cut();
    wait_state(&s, |st| matches!(st, SessionState::Reattaching { .. })).await;
    wait_state(&s, |st| matches!(st, SessionState::Attached { .. })).await;
    assert_eq!(s.id(), id);
    assert!(!token.is_cancelled());
    assert!(!lease.is_lost());
    // Still the owner on the server.
    let d = within(s.describe_semaphore("job", DescribeOptions::new().owners(true)))
        .await
        .unwrap();
    assert_eq!(d.owners.len(), 1);
    assert_eq!(d.owners[0].session_id, id);
    assert_eq!(env.emulator.session_ids("app"), vec![id]);
    // A second session cannot take it.
    let other = env.session().await;
    assert!(
        within(other.try_acquire("job", lock()))
            .await
            .unwrap()
            .is_none()
    );
    assert!(within(lease.release()).await.unwrap());
}

#[tokio::test(start_paused = true)]
async fn survives_a_tablet_restart_without_losing_leases() {
    let env = Env::new().await;
    if !env.emulated() {
        return;
    }
    let s = env.session().await;
    let lease = within(s.acquire("job", lock())).await.unwrap();
    let fence = lease.fencing_token().order;
    env.emulator.restart();
    wait_state(&s, |st| matches!(st, SessionState::Reattaching { .. })).await;
    wait_state(&s, |st| matches!(st, SessionState::Attached { .. })).await;
    assert!(!lease.is_lost());
    let d = within(s.describe_semaphore("job", DescribeOptions::new().owners(true)))
        .await
        .unwrap();
    assert_eq!(d.owners[0].order_id, fence);
}

#[tokio::test(start_paused = true)]
async fn pending_acquire_is_resent_after_reattach_and_granted_on_the_new_stream() {
    let env = Env::new().await;
    if !env.emulated() {
        return;
    }
    let holder = env.session().await;
    let waiter = env.session().await;
    let held = within(holder.acquire("job", lock())).await.unwrap();
    let mut acquire = waiter.acquire("job", lock());
    assert!(within(acquire.queued()).await);
    let pending = tokio::spawn(acquire);
    env.emulator.net().cut();
    wait_state(&waiter, |st| matches!(st, SessionState::Reattaching { .. })).await;
    wait_state(&waiter, |st| matches!(st, SessionState::Attached { .. })).await;
    wait_state(&holder, |st| matches!(st, SessionState::Attached { .. })).await;
    let first = held.fencing_token();
    within(held.release()).await.unwrap();
    let lease = within(pending).await.unwrap().unwrap();
    assert!(lease.fencing_token() > first);
    assert!(!lease.is_lost());
}

#[tokio::test(start_paused = true)]
async fn create_in_flight_during_a_cut_is_outcome_unknown() {
    let env = Env::new().await;
    if !env.emulated() {
        return;
    }
    let s = env.session().await;
    env.emulator.net().stall();
    let s2 = s.clone();
    let create = tokio::spawn(async move { s2.create_semaphore("sem", 1, b"").await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    env.emulator.net().cut();
    env.emulator.net().resume();
    let err = within(create).await.unwrap().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::OutcomeUnknown);
    wait_state(&s, |st| matches!(st, SessionState::Attached { .. })).await;
}

#[tokio::test(start_paused = true)]
async fn stalled_network_is_detected_and_the_session_reattaches_after_it_heals() {
    let env = Env::new().await;
    if !env.emulated() {
        return;
    }
    let s = env.session().await;
    let lease = within(s.acquire("job", lock())).await.unwrap();
    let stalled_at = Instant::now();
    env.emulator.net().stall();
    wait_state(&s, |st| matches!(st, SessionState::Reattaching { .. })).await;
    // Two ping intervals (2 s each by default) of silence, plus one interval to notice.
    assert!(stalled_at.elapsed() <= Duration::from_secs(7));
    env.emulator.net().resume();
    wait_state(&s, |st| matches!(st, SessionState::Attached { .. })).await;
    assert!(!lease.is_lost());
}

#[tokio::test(start_paused = true)]
async fn lease_token_fires_before_another_session_can_be_granted_the_semaphore() {
    let env = Env::new().await;
    if !env.emulated() {
        return;
    }
    let (proxy, behind) = env.behind_proxy().await;
    let holder = within(behind.session(&env.node, SessionOptions::new()))
        .await
        .unwrap();
    let lease = within(holder.acquire("job", lock())).await.unwrap();
    let other = env.session().await;
    let token = lease.token();
    let fired = tokio::spawn(async move {
        token.cancelled().await;
        Instant::now()
    });
    let waiter = other.acquire("job", lock());
    let granted = tokio::spawn(async move {
        let lease = waiter.await;
        (Instant::now(), lease)
    });
    // The holder's network stalls for good; the other session's works.
    proxy.net().stall();
    let fired_at = within(fired).await.unwrap();
    assert!(lease.is_lost());
    assert_eq!(holder.state(), SessionState::Expired);
    assert_eq!(
        holder.error().map(|e| e.kind()),
        Some(ErrorKind::SessionExpired)
    );
    let (granted_at, new_lease) = within(granted).await.unwrap();
    let new_lease = new_lease.unwrap();
    assert!(
        fired_at < granted_at,
        "token fired at {fired_at:?}, grant at {granted_at:?}"
    );
    assert!(new_lease.fencing_token() > lease.fencing_token());
}

#[tokio::test(start_paused = true)]
async fn expired_session_fires_tokens_and_fails_waiters_with_a_typed_error() {
    let env = Env::new().await;
    if !env.emulated() {
        return;
    }
    let holder = env.session().await;
    let s = env.session().await;
    let _held = within(holder.acquire("job", lock())).await.unwrap();
    let lease = within(s.acquire("other", lock())).await.unwrap();
    let s2 = s.clone();
    let waiting = tokio::spawn(async move { s2.acquire("job", lock()).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(env.emulator.expire_session("app", s.id()));
    within(lease.cancelled()).await;
    let err = within(waiting).await.unwrap().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::SessionExpired);
    assert!(err.is_session_lost());
    assert_eq!(s.state(), SessionState::Expired);
    assert!(s.token().is_cancelled());
    let err = within(s.describe_semaphore("job", DescribeOptions::new()))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::SessionExpired);
}

#[tokio::test(start_paused = true)]
async fn dropping_a_queued_acquire_withdraws_the_waiter() {
    let env = Env::new().await;
    let holder = env.session().await;
    let s = env.session().await;
    let _held = within(holder.acquire("job", lock())).await.unwrap();
    let mut acquire = s.acquire("job", lock());
    assert!(within(acquire.queued()).await);
    let d = within(holder.describe_semaphore("job", DescribeOptions::new().waiters(true)))
        .await
        .unwrap();
    assert_eq!(d.waiters.len(), 1);
    drop(acquire);
    // The release that withdraws the waiter is ordered before this describe on s's stream.
    within(s.describe_semaphore("job", DescribeOptions::new()))
        .await
        .unwrap();
    let d = within(holder.describe_semaphore("job", DescribeOptions::new().waiters(true)))
        .await
        .unwrap();
    assert!(d.waiters.is_empty());
}

#[tokio::test(start_paused = true)]
async fn close_stops_the_session_and_frees_its_semaphores() {
    let env = Env::new().await;
    if !env.emulated() {
        return;
    }
    let s = env.session().await;
    let lease = within(s.acquire("job", lock())).await.unwrap();
    within(s.close()).await;
    assert!(lease.is_lost());
    assert_eq!(s.state(), SessionState::Closed);
    assert!(env.emulator.session_ids("app").is_empty());
    assert!(env.emulator.semaphore_names("app").is_empty());
    let err = within(s.describe_semaphore("job", DescribeOptions::new()))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::SessionClosed);
}

#[tokio::test(start_paused = true)]
async fn dropping_every_handle_closes_the_session() {
    let env = Env::new().await;
    if !env.emulated() {
        return;
    }
    let s = env.session().await;
    let lease = within(s.acquire("job", lock())).await.unwrap();
    drop(s);
    // The lease keeps the session alive.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(env.emulator.semaphore_names("app"), vec!["job".to_string()]);
    drop(lease);
    for _ in 0..100 {
        if env.emulator.session_ids("app").is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(env.emulator.session_ids("app").is_empty());
}

#[tokio::test(start_paused = true)]
async fn per_request_errors_do_not_end_the_session() {
    let env = Env::new().await;
    let s = env.session().await;
    within(s.create_semaphore("sem", 1, b"")).await.unwrap();
    let kind = |r: ydb_coordination::Result<()>| r.unwrap_err().kind();
    assert_eq!(
        kind(within(s.create_semaphore("sem", 1, b"")).await),
        ErrorKind::AlreadyExists
    );
    assert_eq!(
        kind(within(s.update_semaphore("nope", b"")).await),
        ErrorKind::NotFound
    );
    let err = within(s.acquire("nope", AcquireOptions::new()))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    let err = within(s.acquire("sem", AcquireOptions::new().count(2)))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    let err = within(s.acquire("sem", AcquireOptions::new().ephemeral(true)))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PreconditionFailed);
    let _lease = within(s.acquire("sem", AcquireOptions::new()))
        .await
        .unwrap();
    assert_eq!(
        kind(within(s.delete_semaphore("sem", false)).await),
        ErrorKind::PreconditionFailed
    );
    // Timed out in the queue: a typed error, not a lost session.
    let other = env.session().await;
    let err = within(other.acquire("sem", AcquireOptions::new().timeout(Duration::from_secs(1))))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotAcquired);
    assert!(
        within(other.try_acquire("sem", AcquireOptions::new()))
            .await
            .unwrap()
            .is_none()
    );
    assert!(matches!(s.state(), SessionState::Attached { .. }));
    assert!(matches!(other.state(), SessionState::Attached { .. }));
}

#[tokio::test(start_paused = true)]
async fn force_delete_aborts_a_waiting_acquire() {
    let env = Env::new().await;
    let s = env.session().await;
    let other = env.session().await;
    within(s.create_semaphore("sem", 1, b"")).await.unwrap();
    let _lease = within(s.acquire("sem", AcquireOptions::new()))
        .await
        .unwrap();
    let mut acquire = other.acquire("sem", AcquireOptions::new());
    assert!(within(acquire.queued()).await);
    within(s.delete_semaphore("sem", true)).await.unwrap();
    assert_eq!(
        within(acquire).await.unwrap_err().kind(),
        ErrorKind::Aborted
    );
}

#[tokio::test(start_paused = true)]
async fn a_second_acquire_of_the_same_name_in_one_session_waits_for_the_first_lease() {
    let env = Env::new().await;
    let s = env.session().await;
    let first = within(s.acquire("job", lock())).await.unwrap();
    assert!(
        within(s.try_acquire("job", lock()))
            .await
            .unwrap()
            .is_none()
    );
    let s2 = s.clone();
    let second = tokio::spawn(async move { s2.acquire("job", lock()).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!second.is_finished());
    let f1 = first.fencing_token();
    drop(first);
    let second = within(second).await.unwrap().unwrap();
    assert!(second.fencing_token() > f1);
}

#[tokio::test(start_paused = true)]
async fn watch_reports_changes_and_resyncs_after_a_reattach() {
    let env = Env::new().await;
    if !env.emulated() {
        return;
    }
    let s = env.session().await;
    let other = env.session().await;
    within(s.create_semaphore("sem", 2, b"a")).await.unwrap();
    let mut watch = within(s.watch_semaphore("sem", WatchOptions::new()))
        .await
        .unwrap();
    let first = within(watch.next()).await.unwrap().unwrap();
    assert_eq!(first.description.data, b"a");
    assert!(!first.resynced);
    within(other.update_semaphore("sem", b"b")).await.unwrap();
    let second = within(watch.next()).await.unwrap().unwrap();
    assert_eq!(second.description.data, b"b");
    let _lease = within(other.acquire("sem", AcquireOptions::new()))
        .await
        .unwrap();
    let third = within(watch.next()).await.unwrap().unwrap();
    assert_eq!(third.description.owners.len(), 1);
    env.emulator.net().cut();
    let fourth = within(watch.next()).await.unwrap().unwrap();
    assert!(fourth.resynced);
    within(other.delete_semaphore("sem", true)).await.unwrap();
    let fifth = within(watch.next()).await.unwrap();
    assert_eq!(fifth.unwrap_err().kind(), ErrorKind::NotFound);
    assert!(within(watch.next()).await.is_none());
}

#[tokio::test(start_paused = true)]
async fn session_on_a_missing_node_is_not_found() {
    let env = Env::new().await;
    let err = within(env.client.session("/local/missing", SessionOptions::new()))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    let err = within(env.client.session(
        "/local/app",
        SessionOptions::new().timeout(Duration::from_secs(3600)),
    ))
    .await
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
}

#[tokio::test(start_paused = true)]
async fn stolen_session_is_a_verdict() {
    // A reattach with the same session id and our protection key from elsewhere (as a
    // second process would) takes the session over: the first stream gets BAD_SESSION.
    let env = Env::new().await;
    let s = env.session().await;
    let lease = within(s.acquire("job", lock())).await.unwrap();
    env.emulator.restart(); // resets the server's seq_no check
    // While we reattach, nothing is lost.
    wait_state(&s, |st| matches!(st, SessionState::Attached { .. })).await;
    assert!(!lease.is_lost());
}

#[tokio::test(start_paused = true)]
async fn reattach_moves_to_another_endpoint_when_one_dies() {
    let env = Env::new().await;
    if !env.emulated() {
        return;
    }
    let a = within(FaultProxy::start(env.emulator.local_addr()))
        .await
        .unwrap();
    let b = within(FaultProxy::start(env.emulator.local_addr()))
        .await
        .unwrap();
    env.emulator.advertise(vec![a.local_addr(), b.local_addr()]);
    // Discovery hands out both proxies; the emulator's own address is not among them.
    let client = within(Client::connect(&env.emulator.connection_string()))
        .await
        .unwrap();
    let s = within(client.session(&env.node, SessionOptions::new()))
        .await
        .unwrap();
    let lease = within(s.acquire("job", lock())).await.unwrap();
    // Whichever endpoint carries the session dies for good: both refuse and cut in turn,
    // then one comes back.
    a.net().refuse_for(Duration::from_secs(3600));
    a.net().cut();
    b.net().refuse_for(Duration::from_secs(3600));
    b.net().cut();
    wait_state(&s, |st| matches!(st, SessionState::Reattaching { .. })).await;
    b.net().refuse_for(Duration::ZERO);
    wait_state(&s, |st| matches!(st, SessionState::Attached { .. })).await;
    assert!(!lease.is_lost());
    within(s.describe_semaphore("job", DescribeOptions::new()))
        .await
        .unwrap();
}
