//! Bounded locks count their bound from the grant, and a multi-lock that gives up has
//! given its parts back when it returns; every `_timeout` verb follows one timeout rule.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::time::Duration;

use common::{Env, within};
use tokio::time::Instant;
use ydb_coordination::recipes::Bounded;
use ydb_coordination::{Acquiring, Guard};
use ydb_coordination::{ErrorKind, config::DescribeOptions, config::MAX_ACQUIRE_TIMEOUT};

/// Session A (behind a slow link) multi-locks `[x, y]` while B holds `y`: when
/// `lock_timeout` gives up, `x` is already free for C, who sits on a fast link.
#[tokio::test(start_paused = true)]
async fn a_multi_lock_that_times_out_has_released_its_parts_when_it_returns() {
    let env = Env::new().await;
    if !env.emulated() {
        return;
    }
    let (proxy, a) = env.session_behind_proxy().await;
    let b = env.session().await;
    let c = env.session().await;
    let held = within(b.mutex("y").lock()).await.unwrap();

    // A round trip of 100 ms: the server's "not granted" comes at the bound, the release of
    // `x` is confirmed a round trip later, within the bound's grace.
    proxy.net().delay(Duration::from_millis(50));
    let taking = tokio::spawn({
        let a = a.clone();
        async move {
            a.multi_lock(["x", "y"])
                .lock_timeout(Duration::from_millis(500))
                .await
        }
    });
    // Half-way, A holds x (a part was taken, so there is something to give back).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let owners = within(c.describe_semaphore("x", DescribeOptions::new().owners(true)))
        .await
        .unwrap()
        .owners;
    assert_eq!(
        owners.iter().map(|o| o.session_id).collect::<Vec<_>>(),
        [a.id()]
    );
    let both = within(taking).await.unwrap().unwrap();
    assert!(both.is_none());
    // At once: nothing of A's may still be held.
    let x = within(c.mutex("x").try_lock()).await.unwrap();
    assert!(x.is_some(), "x still held after lock_timeout returned None");
    drop((x, held));
}

#[tokio::test(start_paused = true)]
async fn every_timeout_verb_refuses_a_timeout_over_one_day() {
    let env = Env::new().await;
    let s = env.session().await;
    let too_long = [Duration::MAX, MAX_ACQUIRE_TIMEOUT + Duration::from_secs(1)];
    for t in too_long {
        let kind = |r: Result<bool, ydb_coordination::Error>| r.err().map(|e| e.kind());
        let invalid = Some(ErrorKind::InvalidArgument);
        let multi = within(s.multi_lock(["x", "y"]).lock_timeout(t)).await;
        assert_eq!(
            kind(multi.map(|g| g.is_some())),
            invalid,
            "multi-lock {t:?}"
        );
        let mutex = within(s.mutex("m").lock_timeout(t)).await;
        assert_eq!(kind(mutex.map(|g| g.is_some())), invalid, "mutex {t:?}");
        let sem = within(s.semaphore("pool", 2).acquire_timeout(1, t)).await;
        assert_eq!(kind(sem.map(|g| g.is_some())), invalid, "semaphore {t:?}");
        let read = within(s.rwlock("rw").read_timeout(t)).await;
        assert_eq!(kind(read.map(|g| g.is_some())), invalid, "read {t:?}");
        let write = within(s.rwlock("rw").write_timeout(t)).await;
        assert_eq!(kind(write.map(|g| g.is_some())), invalid, "write {t:?}");
        let lead = within(s.election("e").campaign_timeout(b"a", t)).await;
        assert_eq!(kind(lead.map(|g| g.is_some())), invalid, "election {t:?}");
    }
    // Nothing was asked of the server: no semaphore was made for the refused calls.
    if env.emulated() {
        assert!(env.emulator.semaphore_names("app").is_empty());
    }
    // One day exactly is allowed, for every verb alike.
    let multi = within(s.multi_lock(["x", "y"]).lock_timeout(MAX_ACQUIRE_TIMEOUT)).await;
    assert!(multi.unwrap().is_some());
    let mutex = within(s.mutex("m").lock_timeout(MAX_ACQUIRE_TIMEOUT)).await;
    assert!(mutex.unwrap().is_some());
}

/// `lock_for` on a free lock whose grant `queued()` already saw: the bound runs from the
/// grant, so a caller that awaits 20 s later gets a guard already past its 10 s deadline.
#[tokio::test(start_paused = true)]
async fn lock_for_counts_its_bound_from_the_grant_seen_by_queued() {
    let env = Env::new().await;
    let a = env.session().await;
    let b = env.session().await;
    let bound = Duration::from_secs(10);
    let asked = Instant::now();
    let guard = picked_up_late(a.mutex("job").lock_for(bound)).await;
    assert!(guard.deadline() >= asked + bound);
    // And the lock is released: another session gets it.
    let next = within(b.mutex("job").lock()).await.unwrap();
    assert!(!within(guard.release()).await.unwrap());
    drop(next);
}

/// The same for a queued request granted while nobody polls it: the bound runs from the
/// server's grant, not from the await that picks the guard up.
#[tokio::test(start_paused = true)]
async fn a_bounded_grant_nobody_polls_counts_from_the_grant() {
    let env = Env::new().await;
    let a = env.session().await;
    let b = env.session().await;
    let bound = Duration::from_secs(10);
    let held = within(b.mutex("job").lock()).await.unwrap();
    let mut acquiring = a.mutex("job").lock_for(bound);
    assert!(within(acquiring.queued()).await);
    let released = Instant::now();
    assert!(within(held.unlock()).await.unwrap());
    tokio::time::sleep(Duration::from_secs(20)).await;
    let guard = within(acquiring).await.unwrap();
    assert!(guard.deadline() >= released + bound);
    assert!(guard.deadline() <= released + bound + Duration::from_secs(1));
    assert!(guard.is_lost(), "the guard outlived its bound");
    let next = within(b.mutex("job").lock()).await.unwrap();
    drop((guard, next));
}

/// Awaits `acquiring`, a bounded acquire of a free lock, 20 s after `queued()` saw its
/// 10 s grant: the guard must come back past its deadline.
async fn picked_up_late<G: Guard>(mut acquiring: Acquiring<Bounded<G>>) -> Bounded<G> {
    assert!(!within(acquiring.queued()).await);
    let granted = Instant::now();
    tokio::time::sleep(Duration::from_secs(20)).await;
    let guard = within(acquiring).await.unwrap();
    assert!(guard.deadline() <= granted + Duration::from_secs(10));
    assert!(guard.is_lost(), "the guard outlived its bound");
    guard
}

/// The bound of a semaphore permit and of read and write guards runs from the grant too.
#[tokio::test(start_paused = true)]
async fn acquire_for_read_for_and_write_for_count_from_the_grant() {
    let env = Env::new().await;
    let s = env.session().await;
    let bound = Duration::from_secs(10);
    let permit = picked_up_late(s.semaphore("pool", 2).acquire_for(1, bound)).await;
    let read = picked_up_late(s.rwlock("rw").read_for(bound)).await;
    let write = picked_up_late(s.rwlock("rw-2").write_for(bound)).await;
    drop((permit, read, write));
}

/// `None` says one thing: the server answered that the lock is busy. A manager whose node
/// cannot be reached (no session ever comes) fails its `try_` and `_timeout` forms with
/// [`ErrorKind::Unavailable`] near their bound; once the node answers, a lock someone
/// holds reads as `None`.
#[tokio::test(start_paused = true)]
async fn a_node_that_cannot_be_reached_is_an_error_never_a_busy_lock() {
    let env = Env::new().await;
    if !env.emulated() {
        return;
    }
    let holder = env.session().await;
    let held = within(holder.mutex("job").lock()).await.unwrap();
    let (proxy, client) = env.behind_proxy().await;
    proxy.net().stall();
    let manager = client.session_manager(&env.node, ydb_coordination::SessionOptions::new());
    let mutex = manager.mutex("job");

    let err = within(mutex.try_lock()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    let timeout = Duration::from_secs(2);
    let start = Instant::now();
    let err = within(mutex.lock_timeout(timeout)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    // The bound, and the rule's 200 ms (no round trip was measured).
    assert!(start.elapsed() <= timeout + Duration::from_millis(210));

    proxy.net().resume();
    // A `try_` form needs the session to be up (its bound is now): wait for it.
    within(manager.current()).await.unwrap();
    assert!(within(mutex.try_lock()).await.unwrap().is_none());
    assert!(within(mutex.lock_timeout(timeout)).await.unwrap().is_none());
    within(held.unlock()).await.unwrap();
    let guard = within(mutex.try_lock()).await.unwrap();
    assert!(guard.is_some());
    drop(guard);
    within(manager.shutdown()).await;
}

/// The bounded holds taken through a session, or through a manager, wait for their
/// deadlines in one task of that session or manager, not a task each: 20 more holds start
/// at most one task; each still ends at its deadline, and one dropped early is released at
/// once.
#[tokio::test(start_paused = true)]
async fn bounded_holds_wait_in_one_task_of_their_source() {
    let env = Env::new().await;
    let session = env.session().await;
    let manager = env
        .client
        .session_manager(&env.node, ydb_coordination::SessionOptions::new());
    within(manager.current()).await.unwrap();
    let other = env.session().await;
    let before = common::alive_tasks();
    let bound = Duration::from_secs(5);
    let mut holds = Vec::new();
    for i in 0..10 {
        holds.push(
            within(session.mutex(&format!("s{i}")).lock_for(bound))
                .await
                .unwrap(),
        );
        holds.push(
            within(manager.mutex(&format!("m{i}")).lock_for(bound))
                .await
                .unwrap(),
        );
    }
    common::assert_tasks_at_most(before, 2, "20 bounded holds");

    // One dropped early: its token fires at once and the lock is free for another session.
    let first = holds.remove(0);
    let token = first.token();
    drop(first);
    assert!(token.is_cancelled());
    let next = within(other.mutex("s0").lock()).await.unwrap();
    assert!(within(next.unlock()).await.unwrap());

    // The rest end at their deadline, released while their holders sleep on.
    let tokens: Vec<_> = holds.iter().map(Bounded::token).collect();
    within(async {
        for token in &tokens {
            token.cancelled().await;
        }
    })
    .await;
    for name in ["s1", "m1", "s9", "m9"] {
        let next = within(other.mutex(name).lock()).await.unwrap();
        assert!(within(next.unlock()).await.unwrap());
    }
    drop(holds);
}
