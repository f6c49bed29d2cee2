//! The fleet recipes against the emulator: group membership, published values, multi-locks
//! and bounded holds, across reattach and session replacement.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::time::Duration;

use common::{Env, within};
use futures::StreamExt;
use ydb_coordination::recipes::{MemberStream, ValueStream};
use ydb_coordination::{ErrorKind, SessionOptions, recipes::Member, recipes::MembershipState};

/// The data of each member of `set`, in join order.
fn data(set: &[Member]) -> Vec<Vec<u8>> {
    set.iter().map(|m| m.data.clone()).collect()
}

/// Reads `sets` until a set whose data is `want` (in join order); returns how many sets it
/// read.
async fn until_set(sets: &mut MemberStream, want: &[&[u8]]) -> usize {
    let want: Vec<Vec<u8>> = want.iter().map(|d| d.to_vec()).collect();
    let mut read = 0;
    loop {
        let set = within(sets.next()).await.unwrap().unwrap();
        read += 1;
        if data(&set) == want {
            return read;
        }
    }
}

#[tokio::test(start_paused = true)]
async fn group_members_are_listed_in_join_order_with_their_data() {
    let env = Env::new().await;
    let (a, b, c) = (
        env.session().await,
        env.session().await,
        env.session().await,
    );
    assert!(
        within(a.group("workers").members())
            .await
            .unwrap()
            .is_empty()
    );
    let ma = within(a.group("workers").join(b"a")).await.unwrap();
    // A join is an acquire like any other: nobody waits to join, so it is never queued.
    let mut joining = b.group("workers").join(b"b");
    assert!(!within(joining.queued()).await);
    let mb = within(joining).await.unwrap();
    let _mc = within(c.group("workers").join(b"c")).await.unwrap();
    let seen_by_b = within(b.group("workers").members()).await.unwrap();
    assert_eq!(data(&seen_by_b), [b"a", b"b", b"c"]);
    let me: Vec<bool> = seen_by_b.iter().map(|m| m.is_me).collect();
    assert_eq!(me, [false, true, false]);
    assert_eq!(seen_by_b[0].session_id, a.id());
    assert!(seen_by_b.windows(2).all(|w| w[0].order_id < w[1].order_id));
    assert!(matches!(
        ma.state(),
        MembershipState::Joined { session_id, .. } if session_id == a.id()
    ));

    assert!(within(mb.leave()).await.unwrap());
    let left = within(c.group("workers").members()).await.unwrap();
    assert_eq!(data(&left), [b"a", b"c"]);
    // Dropping the handle leaves too (the release is on its way when the drop returns).
    drop(ma);
    until_set(&mut c.group("workers").watch(), &[b"c"]).await;
}

#[tokio::test(start_paused = true)]
async fn join_with_oversized_data_or_on_a_foreign_semaphore_is_refused() {
    let env = Env::new().await;
    let s = env.session().await;
    let big = vec![0u8; ydb_coordination::config::MAX_DATA_LEN + 1];
    let err = within(s.group("workers").join(&big)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    within(s.create_semaphore("pool", 3, b"")).await.unwrap();
    let err = within(s.group("pool").join(b"a")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PreconditionFailed);
    let err = within(s.group("pool").watch().next())
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PreconditionFailed);
}

#[tokio::test(start_paused = true)]
async fn a_member_whose_session_expires_is_seen_leaving() {
    let env = Env::new().await;
    if !env.emulated() {
        return;
    }
    let watcher = env.session().await;
    let mut sets = watcher.group("workers").watch();
    assert!(within(sets.next()).await.unwrap().unwrap().is_empty());
    let mut members = Vec::new();
    for name in [b"a", b"b", b"c"] {
        let s = env.session().await;
        let m = within(s.group("workers").join(name)).await.unwrap();
        members.push((s, m));
    }
    until_set(&mut sets, &[b"a", b"b", b"c"]).await;
    let (dead, membership) = &members[1];
    env.emulator.expire_session("app", dead.id());
    until_set(&mut sets, &[b"a", b"c"]).await;
    // A membership of a session scope ends with its session.
    let mut state = membership.state_changes();
    within(state.wait_for(|s| matches!(s, MembershipState::Ended(Some(_)))))
        .await
        .unwrap();
    let err = within(membership.joined()).await.unwrap_err();
    assert!(err.is_session_lost());
}

#[tokio::test(start_paused = true)]
async fn a_membership_on_a_manager_joins_again_in_the_next_session() {
    let env = Env::new().await;
    if !env.emulated() {
        return;
    }
    let manager = env.client.session_manager(&env.node, SessionOptions::new());
    let membership = within(manager.group("workers").join(b"a")).await.unwrap();
    let first = within(membership.joined()).await.unwrap();
    let observer = env.session().await;
    let mut sets = observer.group("workers").watch();
    until_set(&mut sets, &[b"a"]).await;

    let mut state = membership.state_changes();
    state.borrow_and_update();
    env.emulator.expire_session("app", first);
    within(state.wait_for(|s| matches!(s, MembershipState::Joining)))
        .await
        .unwrap();
    let second = within(membership.joined()).await.unwrap();
    assert_ne!(first, second);
    // The old entry went with the old session; the new one is there.
    let set = loop {
        let set = within(sets.next()).await.unwrap().unwrap();
        if set.iter().any(|m| m.session_id == second) {
            break set;
        }
    };
    assert_eq!(set.len(), 1);
    assert_eq!(set[0].data, b"a");

    // Dropping the handle leaves.
    drop(membership);
    until_set(&mut sets, &[]).await;
}

#[tokio::test(start_paused = true)]
async fn a_slow_group_watcher_skips_sets_but_reads_the_last() {
    let env = Env::new().await;
    let watcher = env.session().await;
    let mut sets = watcher.group("workers").watch();
    assert!(within(sets.next()).await.unwrap().unwrap().is_empty());
    // Twenty changes while the watcher does not read.
    let mut members = Vec::new();
    for i in 0..10u8 {
        let s = env.session().await;
        members.push(within(s.group("workers").join(&[i])).await.unwrap());
    }
    for m in members.drain(..5) {
        within(m.leave()).await.unwrap();
    }
    let want: Vec<&[u8]> = vec![&[5], &[6], &[7], &[8], &[9]];
    let read = until_set(&mut sets, &want).await;
    assert!(read < 20, "read {read} sets for 20 changes");
    // Nothing more: the last set was the final one.
    assert!(
        tokio::time::timeout(Duration::from_secs(5), sets.next())
            .await
            .is_err()
    );
}

#[tokio::test(start_paused = true)]
async fn a_group_watch_rides_out_a_reattach_and_a_session_replacement() {
    let env = Env::new().await;
    if !env.emulated() {
        return;
    }
    let manager = env.client.session_manager(&env.node, SessionOptions::new());
    let mut sets = manager.group("workers").watch();
    assert!(within(sets.next()).await.unwrap().unwrap().is_empty());
    let member = env.session().await;
    let _a = within(member.group("workers").join(b"a")).await.unwrap();
    until_set(&mut sets, &[b"a"]).await;

    // A reattach: a join while the stream is down shows up after it.
    let watching = within(manager.current()).await.unwrap();
    env.emulator.net().cut();
    let other = env.session().await;
    let _b = within(other.group("workers").join(b"b")).await.unwrap();
    until_set(&mut sets, &[b"a", b"b"]).await;
    assert_eq!(within(manager.current()).await.unwrap().id(), watching.id());

    // A session replacement: no error item, the set from the next session.
    let old = watching.id();
    env.emulator.expire_session("app", old);
    drop(watching);
    let third = env.session().await;
    let _c = within(third.group("workers").join(b"c")).await.unwrap();
    until_set(&mut sets, &[b"a", b"b", b"c"]).await;
    assert_ne!(within(manager.current()).await.unwrap().id(), old);
}

/// One stream convention: a manager's `observe()` carries on across a session replacement
/// without an error item, as `watch()` does, and yields the leader the next session sees.
#[tokio::test(start_paused = true)]
async fn an_observed_election_rides_out_a_session_replacement_without_an_error_item() {
    let env = Env::new().await;
    if !env.emulated() {
        return;
    }
    let manager = env.client.session_manager(&env.node, SessionOptions::new());
    let mut leaders = manager.election("sched").observe();
    assert_eq!(within(leaders.next()).await.unwrap().unwrap(), None);
    let watching = within(manager.current()).await.unwrap();
    env.emulator.expire_session("app", watching.id());
    drop(watching);
    let candidate = env.session().await;
    let leadership = within(candidate.election("sched").campaign(b"a"))
        .await
        .unwrap();
    // Every item is a state, never the loss; the first one with a leader is the new one.
    loop {
        match within(leaders.next()).await.expect("the stream goes on") {
            Ok(Some(leader)) => {
                assert_eq!(leader.fencing_token, leadership.fencing_token());
                break;
            }
            Ok(None) => {}
            Err(e) => panic!("an error item across a session replacement: {e}"),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn multi_locks_on_overlapping_sets_in_opposite_orders_never_deadlock() {
    let env = Env::new().await;
    let inside = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut tasks = Vec::new();
    for names in [["a", "b"], ["b", "a"]] {
        let session = env.session().await;
        let inside = inside.clone();
        tasks.push(tokio::spawn(async move {
            let both = session.multi_lock(names);
            for _ in 0..50 {
                // Bounded: a deadlock fails the test instead of hanging it.
                let guard = within(both.lock()).await.unwrap();
                assert_eq!(guard.names(), ["a", "b"]);
                let was = inside.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                assert_eq!(was, 0, "two holders of {{a, b}} at once");
                tokio::time::sleep(Duration::from_millis(3)).await;
                inside.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                assert!(!guard.is_lost());
                assert!(within(guard.unlock()).await.unwrap());
            }
        }));
    }
    for t in tasks {
        within(t).await.unwrap();
    }
    if env.emulated() {
        assert!(env.emulator.semaphore_names("app").is_empty());
    }
}

#[tokio::test(start_paused = true)]
async fn a_multi_lock_gives_back_what_it_took_when_the_deadline_passes() {
    let env = Env::new().await;
    let (a, b) = (env.session().await, env.session().await);
    let held = within(b.mutex("c").lock()).await.unwrap();
    let started = tokio::time::Instant::now();
    let all = a.multi_lock(["c", "a", "b"]);
    assert!(
        within(all.lock_timeout(Duration::from_secs(2)))
            .await
            .unwrap()
            .is_none()
    );
    // One deadline for all three, not one per lock.
    assert!(started.elapsed() < Duration::from_secs(3));
    // "a" and "b" were taken on the way and are free again.
    let snapshot = within(a.snapshot()).await;
    assert!(snapshot.held.is_empty() && snapshot.waiting.is_empty());
    let other = within(b.multi_lock(["a", "b"]).try_lock())
        .await
        .unwrap()
        .unwrap();
    assert!(within(all.try_lock()).await.unwrap().is_none());
    drop((held, other));
    let guard = within(all.lock_timeout(Duration::from_secs(2)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(guard.names(), ["a", "b", "c"]);
}

#[tokio::test(start_paused = true)]
async fn a_multi_lock_token_fires_when_any_part_is_lost() {
    let env = Env::new().await;
    if !env.emulated() {
        return;
    }
    let s = env.session().await;
    let guard = within(s.multi_lock(["a", "b"]).lock()).await.unwrap();
    let token = guard.token();
    assert!(!token.is_cancelled());
    env.emulator.expire_session("app", s.id());
    within(token.cancelled()).await;
    assert!(guard.is_lost());

    // On a manager, a session lost half-way starts over in the next session.
    let manager = env.client.session_manager(&env.node, SessionOptions::new());
    let other = env.session().await;
    let held = within(other.mutex("b").lock()).await.unwrap();
    let waiting = tokio::spawn({
        let manager = manager.clone();
        async move { manager.multi_lock(["a", "b"]).lock().await }
    });
    let first = within(manager.current()).await.unwrap();
    within(async {
        while !within(first.snapshot())
            .await
            .held
            .iter()
            .any(|h| h.name == "a")
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    env.emulator.expire_session("app", first.id());
    tokio::time::sleep(Duration::from_secs(1)).await;
    drop(held);
    let guard = within(waiting).await.unwrap().unwrap();
    assert_ne!(guard.leases()[0].session_id(), first.id());
    assert_eq!(guard.names(), ["a", "b"]);
    assert!(!guard.is_lost());
}

/// A multi-lock held on one node costs no task: its parts share one token, which their
/// session fires. 20 more held multi-locks start none; a guard's token fires when it is
/// dropped, and its parts are free for another session.
#[tokio::test(start_paused = true)]
async fn held_multi_locks_start_no_task() {
    let env = Env::new().await;
    let s = env.session().await;
    let other = env.session().await;
    let before = common::alive_tasks();
    let mut guards = Vec::new();
    for i in 0..20 {
        let names = [format!("x{i}"), format!("y{i}"), format!("z{i}")];
        guards.push(within(s.multi_lock(names).lock()).await.unwrap());
    }
    common::assert_tasks_at_most(before, 4, "20 held multi-locks");
    let last = guards.pop().unwrap();
    let token = last.token();
    assert!(!token.is_cancelled());
    drop(last);
    assert!(
        token.is_cancelled(),
        "a dropped guard's token fires at once"
    );
    let freed = within(other.multi_lock(["x19", "y19", "z19"]).lock())
        .await
        .unwrap();
    assert!(within(freed.unlock()).await.unwrap());
    for guard in guards {
        assert!(within(guard.unlock()).await.unwrap());
    }
}

/// Memberships cost no task each: they wait in the one task their session or manager keeps
/// for its recipes. 20 joins start at most those two; the manager's memberships all join
/// again in its next session, one left answers, and one dropped leaves its group.
#[tokio::test(start_paused = true)]
async fn memberships_wait_in_one_task_of_their_source() {
    let env = Env::new().await;
    if !env.emulated() {
        return;
    }
    let session = env.session().await;
    let manager = env.client.session_manager(&env.node, SessionOptions::new());
    let first = within(manager.current()).await.unwrap().id();
    let observer = env.session().await;
    let before = common::alive_tasks();
    let mut on_session = Vec::new();
    let mut on_manager = Vec::new();
    for i in 0..10 {
        on_session.push(
            within(session.group(&format!("s{i}")).join(b"s"))
                .await
                .unwrap(),
        );
        on_manager.push(
            within(manager.group(&format!("m{i}")).join(b"m"))
                .await
                .unwrap(),
        );
    }
    common::assert_tasks_at_most(before, 2, "20 memberships");

    env.emulator.expire_session("app", first);
    for membership in &on_manager {
        let mut state = membership.state_changes();
        let joined = within(state.wait_for(
            |s| matches!(s, MembershipState::Joined { session_id, .. } if *session_id != first),
        ))
        .await;
        assert!(joined.is_ok(), "{:?}", membership.state());
    }
    for i in [0, 9] {
        let members = within(observer.group(&format!("m{i}")).members())
            .await
            .unwrap();
        assert_eq!(data(&members), [b"m".to_vec()]);
        assert_ne!(members[0].session_id, first);
    }

    assert!(within(on_session.remove(0).leave()).await.unwrap());
    drop(on_session.remove(0));
    for name in ["s0", "s1"] {
        let members = within(observer.group(name).members()).await.unwrap();
        assert!(members.is_empty(), "{name}: {members:?}");
    }
    let members = within(observer.group("s2").members()).await.unwrap();
    assert_eq!(data(&members), [b"s".to_vec()]);
}

/// A membership whose wait ran on a runtime that shut down never reads as joined: it ends
/// with `SessionClosed`, and its lease, dropped with the wait, leaves the group.
#[tokio::test(start_paused = true)]
async fn a_membership_kept_on_a_runtime_that_shut_down_ends() {
    let env = Env::new().await;
    let session = env.session().await;
    let observer = env.session().await;
    let group = session.group("g");
    // The session's first wait starts its task on that other runtime.
    let membership = common::on_a_runtime_that_shuts_down(group.join(b"a").into_future())
        .await
        .unwrap();
    match membership.state() {
        MembershipState::Ended(Some(e)) => assert_eq!(e.kind(), ErrorKind::SessionClosed),
        other => panic!("a membership nothing keeps is {other:?}"),
    }
    let err = within(membership.joined()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::SessionClosed);
    let mut sets = observer.group("g").watch();
    until_set(&mut sets, &[]).await;
    // The session itself goes on: a new membership is kept by a new task.
    let again = within(session.group("g").join(b"b")).await.unwrap();
    until_set(&mut sets, &[b"b"]).await;
    assert!(within(again.leave()).await.unwrap());
}

#[tokio::test(start_paused = true)]
async fn a_multi_lock_refuses_bad_input() {
    let env = Env::new().await;
    let s = env.session().await;
    let none: [&str; 0] = [];
    let err = within(s.multi_lock(none).lock()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    let long = "x".repeat(ydb_coordination::config::MAX_NAME_LEN + 1);
    let err = within(s.multi_lock([long.as_str(), "a"]).try_lock())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    // Repeats count once.
    let guard = within(s.multi_lock(["a", "a"]).lock()).await.unwrap();
    assert_eq!(guard.names(), ["a"]);
}

/// Reads `values` until `want`, checking that no value read is older than one before it
/// (values are big-endian counters); returns how many it read.
async fn until_value(values: &mut ValueStream, want: u32) -> usize {
    let mut read = 0;
    let mut newest = 0;
    loop {
        let value = within(values.next()).await.unwrap().unwrap();
        read += 1;
        let n = u32::from_be_bytes(value.try_into().unwrap());
        assert!(n > newest, "read {n} after {newest}");
        newest = n;
        if n == want {
            return read;
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_published_value_is_read_and_replaced() {
    let env = Env::new().await;
    let (a, b) = (env.session().await, env.session().await);
    let config = a.published("config");
    assert!(within(config.get()).await.unwrap().is_empty());
    within(config.publish(b"v1")).await.unwrap();
    assert_eq!(within(b.published("config").get()).await.unwrap(), b"v1");
    // Concurrent publishers overwrite each other: the last one wins.
    within(b.published("config").publish(b"v2")).await.unwrap();
    assert_eq!(within(config.get()).await.unwrap(), b"v2");

    let big = vec![1u8; ydb_coordination::config::MAX_DATA_LEN + 1];
    let err = within(config.publish(&big)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    let full = vec![1u8; ydb_coordination::config::MAX_DATA_LEN];
    within(config.publish(&full)).await.unwrap();
    assert_eq!(within(config.get()).await.unwrap(), full);
}

#[tokio::test(start_paused = true)]
async fn a_slow_subscriber_converges_on_the_newest_value() {
    let env = Env::new().await;
    let (publisher, subscriber) = (env.session().await, env.session().await);
    let mut values = subscriber.published("config").subscribe();
    assert!(within(values.next()).await.unwrap().unwrap().is_empty());
    let config = publisher.published("config");
    for n in 1..=200u32 {
        within(config.publish(&n.to_be_bytes())).await.unwrap();
    }
    let read = until_value(&mut values, 200).await;
    assert!(read < 200, "read {read} values for 200 publishes");
    // Publishing the same value again yields nothing.
    within(config.publish(&200u32.to_be_bytes())).await.unwrap();
    assert!(
        tokio::time::timeout(Duration::from_secs(5), values.next())
            .await
            .is_err()
    );
}

#[tokio::test(start_paused = true)]
async fn subscribers_converge_across_a_reattach_and_a_session_replacement() {
    let env = Env::new().await;
    if !env.emulated() {
        return;
    }
    let manager = env.client.session_manager(&env.node, SessionOptions::new());
    let mut values = manager.published("config").subscribe();
    assert!(within(values.next()).await.unwrap().unwrap().is_empty());
    let publisher = env.client.session_manager(&env.node, SessionOptions::new());
    let config = publisher.published("config");
    within(config.publish(&1u32.to_be_bytes())).await.unwrap();
    until_value(&mut values, 1).await;

    // Published while every stream is down: the next item after the reattach.
    let watching = within(manager.current()).await.unwrap();
    env.emulator.net().stall();
    let publish = tokio::spawn({
        let config = config.clone();
        async move { config.publish(&2u32.to_be_bytes()).await }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    env.emulator.net().cut();
    env.emulator.net().resume();
    within(publish).await.unwrap().unwrap();
    until_value(&mut values, 2).await;
    assert_eq!(within(manager.current()).await.unwrap().id(), watching.id());

    // Both sessions replaced: no error item, the value from the next session.
    let old = watching.id();
    drop(watching);
    env.emulator.expire_session("app", old);
    let old_publisher = within(publisher.current()).await.unwrap().id();
    env.emulator.expire_session("app", old_publisher);
    within(config.publish(&3u32.to_be_bytes())).await.unwrap();
    until_value(&mut values, 3).await;
    assert_ne!(within(manager.current()).await.unwrap().id(), old);
    assert_ne!(
        within(publisher.current()).await.unwrap().id(),
        old_publisher
    );
}

#[tokio::test(start_paused = true)]
async fn acquire_for_fires_at_the_deadline_and_hands_the_tokens_over() {
    let env = Env::new().await;
    let (a, b) = (env.session().await, env.session().await);
    let d = Duration::from_secs(20);
    let start = tokio::time::Instant::now();
    let permit = within(a.semaphore("pool", 2).acquire_for(2, d))
        .await
        .unwrap();
    assert!(permit.deadline() >= start + d);
    let mut next = b.semaphore("pool", 2).acquire(1);
    assert!(within(next.queued()).await);
    tokio::time::sleep_until(permit.deadline() - Duration::from_millis(1)).await;
    assert!(!permit.is_lost());
    within(permit.cancelled()).await;
    let fired = tokio::time::Instant::now();
    assert!(fired >= permit.deadline());
    let got = within(next).await.unwrap();
    assert!(got.fencing_token() > permit.fencing_token());
    assert!(!within(permit.release()).await.unwrap());

    // Released before the deadline: `true`, and the deadline then does nothing.
    let early = within(a.semaphore("pool", 2).acquire_for(1, d))
        .await
        .unwrap();
    let deadline = early.deadline();
    assert!(within(early.release()).await.unwrap());
    let later = within(a.semaphore("pool", 2).acquire(1)).await.unwrap();
    tokio::time::sleep_until(deadline + Duration::from_secs(1)).await;
    assert!(!later.is_lost() && !got.is_lost());
}

#[tokio::test(start_paused = true)]
async fn read_for_and_write_for_end_at_their_deadlines() {
    let env = Env::new().await;
    let (a, b) = (env.session().await, env.session().await);
    let read = within(a.rwlock("config").read_for(Duration::from_secs(5)))
        .await
        .unwrap();
    let mut write = b.rwlock("config").write_for(Duration::from_secs(5));
    assert!(within(write.queued()).await);
    let write = within(write).await.unwrap();
    // The writer got in when the reader's time was up, not before.
    assert!(tokio::time::Instant::now() >= read.deadline());
    assert!(read.is_lost());
    let mut next = a.rwlock("config").read();
    assert!(within(next.queued()).await);
    within(write.cancelled()).await;
    assert!(tokio::time::Instant::now() >= write.deadline());
    let next = within(next).await.unwrap();
    assert!(!next.is_lost());
    assert!(!within(write.release()).await.unwrap());
}

#[tokio::test(start_paused = true)]
async fn following_streams_on_a_missing_node_end_with_its_error() {
    let env = Env::new().await;
    let manager = env
        .client
        .session_manager("/local/missing", SessionOptions::new());
    let mut sets = manager.group("workers").watch();
    let err = within(sets.next()).await.unwrap().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert!(within(sets.next()).await.is_none());
    let mut values = manager.published("config").subscribe();
    let err = within(values.next()).await.unwrap().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert!(within(values.next()).await.is_none());
    let err = within(manager.group("workers").join(b"a"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    let err = within(manager.multi_lock(["a"]).lock()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
}

#[tokio::test(start_paused = true)]
async fn reads_on_a_manager_carry_on_in_the_next_session_after_a_loss() {
    let env = Env::new().await;
    if !env.emulated() {
        return;
    }
    let (proxy, client) = env.behind_proxy().await;
    let manager = client.session_manager(&env.node, SessionOptions::new());
    let first = within(manager.current()).await.unwrap();
    within(manager.published("config").publish(b"v1"))
        .await
        .unwrap();

    // Each read is sent, then its session is lost before the answer: the server expires
    // it while the stream is stalled, and the reattach is told so.
    let reads: Vec<(
        &str,
        tokio::task::JoinHandle<Result<bool, ydb_coordination::Error>>,
    )> = {
        let m = manager.clone();
        let published =
            tokio::spawn(async move { Ok(m.published("config").get().await? == b"v1") });
        let m = manager.clone();
        let members = tokio::spawn(async move { Ok(m.group("g").members().await?.is_empty()) });
        let m = manager.clone();
        let leader = tokio::spawn(async move { Ok(m.election("e").leader().await?.is_none()) });
        let m = manager.clone();
        let candidates =
            tokio::spawn(async move { Ok(m.election("e").candidates().await?.is_empty()) });
        proxy.net().stall();
        vec![
            ("get", published),
            ("members", members),
            ("leader", leader),
            ("candidates", candidates),
        ]
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        reads.iter().all(|(_, read)| !read.is_finished()),
        "every read is still in flight in the first session"
    );
    assert!(env.emulator.expire_session("app", first.id()));
    proxy.net().cut();
    proxy.net().resume();

    for (what, read) in reads {
        let answer = within(read).await.unwrap();
        assert!(
            answer.unwrap_or_else(|e| panic!("{what}: {:?}", e.kind())),
            "{what}"
        );
    }
    let next = within(manager.current()).await.unwrap();
    assert_ne!(
        next.id(),
        first.id(),
        "the reads were answered in a new session"
    );
}

#[tokio::test(start_paused = true)]
async fn a_recipe_whose_semaphore_is_gone_after_a_create_of_unknown_outcome_creates_it_again() {
    let env = Env::new().await;
    if !env.emulated() {
        return;
    }
    let (proxy, session) = env.session_behind_proxy().await;
    let admin = env.session().await;
    // The create's answer is lost with the connection, so its outcome is unknown after the
    // reattach; it did happen, but another session deletes the semaphore before the
    // describe that follows, which finds nothing.
    proxy.net().delay(Duration::from_secs(1));
    let s = session.clone();
    let first = tokio::spawn(async move {
        let mut members = s.group("pool").watch();
        members.next().await
    });
    // The create has reached the server (after 1 s), its answer is on its way back.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    within(admin.delete_semaphore("pool", true)).await.unwrap();
    proxy.net().cut();
    proxy.net().delay(Duration::ZERO);
    let members = within(first).await.unwrap().unwrap().unwrap();
    assert!(members.is_empty());
    let d = within(session.describe_semaphore("pool", Default::default()))
        .await
        .unwrap();
    assert_eq!(d.limit, u64::MAX);
}
