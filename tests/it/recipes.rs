//! Recipes and the session manager against the emulator: mutual exclusion, FIFO fairness,
//! counted limits, leader handover, observation, and held locks that come back.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::{Env, wait_state, within};
use futures::StreamExt;
use tokio::time::Instant;
use ydb_coordination::{ErrorKind, SessionOptions, session::SessionState};

#[tokio::test(start_paused = true)]
async fn mutex_excludes_under_contention() {
    let env = Env::new().await;
    if !env.emulated() {
        return;
    }
    let inside = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let session = env.session().await;
        let inside = inside.clone();
        tasks.push(tokio::spawn(async move {
            let mutex = session.mutex("job");
            for _ in 0..5 {
                let guard = mutex.lock().await.unwrap();
                assert_eq!(
                    inside.fetch_add(1, Ordering::SeqCst),
                    0,
                    "two holders at once"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                guard.unlock().await.unwrap();
            }
        }));
    }
    for t in tasks {
        within(t).await.unwrap();
    }
    assert!(env.emulator.semaphore_names("app").is_empty());
}

#[tokio::test(start_paused = true)]
async fn mutex_serves_waiters_in_arrival_order() {
    let env = Env::new().await;
    let holder = env.session().await;
    let guard = within(holder.mutex("job").lock()).await.unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..5 {
        let session = env.session().await;
        let order = order.clone();
        let mut acquire = session.acquire(
            "job",
            ydb_coordination::AcquireOptions::exclusive().ephemeral(true),
        );
        within(acquire.queued()).await;
        tasks.push(tokio::spawn(async move {
            let lease = acquire.await.unwrap();
            order.lock().unwrap().push(i);
            tokio::time::sleep(Duration::from_millis(5)).await;
            drop(lease);
            drop(session);
        }));
    }
    within(guard.unlock()).await.unwrap();
    for t in tasks {
        within(t).await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4]);
}

#[tokio::test(start_paused = true)]
async fn try_lock_and_lock_timeout() {
    let env = Env::new().await;
    let a = env.session().await;
    let b = env.session().await;
    let guard = within(a.mutex("job").try_lock()).await.unwrap().unwrap();
    assert!(within(b.mutex("job").try_lock()).await.unwrap().is_none());
    let start = Instant::now();
    assert!(
        within(b.mutex("job").lock_timeout(Duration::from_secs(2)))
            .await
            .unwrap()
            .is_none()
    );
    assert!(start.elapsed() >= Duration::from_secs(2));
    drop(guard);
    assert!(
        within(b.mutex("job").lock_timeout(Duration::from_secs(2)))
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test(start_paused = true)]
async fn semaphore_never_exceeds_its_limit() {
    let env = Env::new().await;
    let held = Arc::new(AtomicU64::new(0));
    let peak = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for i in 0..10u64 {
        let session = env.session().await;
        let (held, peak) = (held.clone(), peak.clone());
        tasks.push(tokio::spawn(async move {
            let sem = session.semaphore("pool", 3);
            let n = 1 + i % 2;
            for _ in 0..3 {
                let permit = sem.acquire(n).await.unwrap();
                let now = held.fetch_add(n, Ordering::SeqCst) + n;
                peak.fetch_max(now, Ordering::SeqCst);
                assert!(now <= 3);
                tokio::time::sleep(Duration::from_millis(7)).await;
                held.fetch_sub(n, Ordering::SeqCst);
                permit.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        within(t).await.unwrap();
    }
    assert_eq!(peak.load(Ordering::SeqCst), 3);
}

#[tokio::test(start_paused = true)]
async fn semaphore_with_another_limit_is_refused() {
    let env = Env::new().await;
    let s = env.session().await;
    let _p = within(s.semaphore("pool", 3).acquire(1)).await.unwrap();
    let err = within(s.semaphore("pool", 4).acquire(1)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PreconditionFailed);
    let err = within(s.semaphore("pool", 3).acquire(4)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
}

#[tokio::test(start_paused = true)]
async fn rwlock_readers_share_and_writers_exclude() {
    let env = Env::new().await;
    let a = env.session().await;
    let b = env.session().await;
    let c = env.session().await;
    let r1 = within(a.rwlock("cfg").read()).await.unwrap();
    let r2 = within(b.rwlock("cfg").read()).await.unwrap();
    assert!(within(c.rwlock("cfg").try_write()).await.unwrap().is_none());
    let lock = c.rwlock("cfg");
    let writer = tokio::spawn(async move { lock.write().await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    // A reader arriving after the queued writer waits behind it.
    let d = env.session().await;
    assert!(within(d.rwlock("cfg").try_read()).await.unwrap().is_none());
    drop(r1);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!writer.is_finished());
    drop(r2);
    let w = within(writer).await.unwrap().unwrap();
    assert!(within(b.rwlock("cfg").try_read()).await.unwrap().is_none());
    drop(w);
}

#[tokio::test(start_paused = true)]
async fn election_hands_over_and_observers_see_no_leader() {
    let env = Env::new().await;
    if !env.emulated() {
        return;
    }
    let a = env.session().await;
    let b = env.session().await;
    let watcher = env.session().await;
    let mut observed = watcher.election("sched").observe();
    assert_eq!(within(observed.next()).await.unwrap().unwrap(), None);
    let lead_a = within(a.election("sched").campaign(b"a")).await.unwrap();
    let seen = within(observed.next()).await.unwrap().unwrap().unwrap();
    assert_eq!(seen.data, b"a");
    assert_eq!(seen.session_id, a.id());
    let election_b = b.election("sched");
    let campaign_b = tokio::spawn(async move { election_b.campaign(b"b").await });
    within(lead_a.set_data(b"a2")).await.unwrap();
    assert_eq!(
        within(observed.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
            .data,
        b"a2"
    );
    let token_a = lead_a.fencing_token();
    within(lead_a.resign()).await.unwrap();
    let lead_b = within(campaign_b).await.unwrap().unwrap();
    assert!(lead_b.fencing_token() > token_a);
    let seen = within(observed.next()).await.unwrap().unwrap().unwrap();
    assert_eq!(seen.data, b"b");
    // The leader dies: its session expires; nobody else campaigns.
    env.emulator.expire_session("app", b.id());
    within(lead_b.cancelled()).await;
    assert_eq!(within(observed.next()).await.unwrap().unwrap(), None);
    assert!(
        within(watcher.election("sched").leader())
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test(start_paused = true)]
async fn sessions_stream_yields_a_new_session_after_loss() {
    let env = Env::new().await;
    if !env.emulated() {
        return;
    }
    let mut sessions = env.client.sessions(&env.node, SessionOptions::new());
    let first = within(sessions.next()).await.unwrap().unwrap();
    env.emulator.expire_session("app", first.id());
    let second = within(sessions.next()).await.unwrap().unwrap();
    assert_eq!(first.state(), SessionState::Expired);
    assert_ne!(first.id(), second.id());
    assert!(matches!(second.state(), SessionState::Attached { .. }));
    let mut missing = env.client.sessions("/local/missing", SessionOptions::new());
    assert_eq!(
        within(missing.next()).await.unwrap().unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert!(within(missing.next()).await.is_none());
}

#[tokio::test(start_paused = true)]
async fn held_mutex_comes_back_after_expiry_with_a_greater_fencing_token() {
    let env = Env::new().await;
    if !env.emulated() {
        return;
    }
    let manager = env.client.session_manager(&env.node, SessionOptions::new());
    let mut held = manager.mutex("job").hold();
    let first = within(held.next()).await.unwrap().unwrap();
    let old_token = first.token();
    let old_session = first.lease().unwrap().session_id();
    env.emulator.expire_session("app", old_session);
    let second = within(held.next()).await.unwrap().unwrap();
    // The old guard's token fired before the new guard was issued.
    assert!(old_token.is_cancelled());
    assert!(second.fencing_token() > first.fencing_token());
    assert_ne!(second.lease().unwrap().session_id(), old_session);
    assert!(!second.is_lost());
    drop(first);
    // Restart: survived without a new guard.
    env.emulator.restart();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!second.is_lost());
    manager.shutdown().await;
    assert!(second.is_lost());
}

#[tokio::test(start_paused = true)]
async fn held_mutex_after_a_long_stall_never_overlaps() {
    let env = Env::new().await;
    if !env.emulated() {
        return;
    }
    let (proxy, behind) = env.behind_proxy().await;
    let manager_a = behind.session_manager(&env.node, SessionOptions::new());
    let manager_b = env.client.session_manager(&env.node, SessionOptions::new());
    let mut held_a = manager_a.mutex("job").hold();
    let guard_a = within(held_a.next()).await.unwrap().unwrap();
    let token_a = guard_a.token();
    let fired = tokio::spawn(async move {
        token_a.cancelled().await;
        Instant::now()
    });
    let mut held_b = manager_b.mutex("job").hold();
    let b_next = tokio::spawn(async move {
        let g = held_b.next().await;
        (Instant::now(), g, held_b)
    });
    proxy.net().stall();
    let fired_at = within(fired).await.unwrap();
    let (granted_at, guard_b, _held_b) = within(b_next).await.unwrap();
    let guard_b = guard_b.unwrap().unwrap();
    assert!(fired_at < granted_at);
    assert!(guard_b.fencing_token() > guard_a.fencing_token());
    proxy.net().resume();
    // A comes back with a new session and queues behind B.
    let a_next = tokio::spawn(async move { held_a.next().await });
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(!a_next.is_finished());
    let fence_b = guard_b.fencing_token();
    drop(guard_b);
    let guard_a2 = within(a_next).await.unwrap().unwrap().unwrap();
    assert!(guard_a2.fencing_token() > fence_b);
}

#[tokio::test(start_paused = true)]
async fn manager_current_waits_for_a_replacement() {
    let env = Env::new().await;
    if !env.emulated() {
        return;
    }
    let manager = env.client.session_manager(&env.node, SessionOptions::new());
    let first = within(manager.current()).await.unwrap();
    let mut news = manager.sessions();
    assert_eq!(within(news.next()).await.unwrap().id(), first.id());
    env.emulator.expire_session("app", first.id());
    wait_state(&first, |s| s.is_terminal()).await;
    let second = within(manager.current()).await.unwrap();
    assert_ne!(second.id(), first.id());
    assert_eq!(within(news.next()).await.unwrap().id(), second.id());
    manager.shutdown().await;
    assert_eq!(
        within(manager.current()).await.unwrap_err().kind(),
        ErrorKind::SessionClosed
    );
    assert_eq!(second.state(), SessionState::Closed);
}

#[tokio::test(start_paused = true)]
async fn held_permits_and_leadership_come_back_after_expiry() {
    let env = Env::new().await;
    if !env.emulated() {
        return;
    }
    let manager = env.client.session_manager(&env.node, SessionOptions::new());
    let mut permits = manager.semaphore("pool", 2).hold(2);
    let mut leadership = manager.election("sched").hold(b"me");
    let permit = within(permits.next()).await.unwrap().unwrap();
    let leader = within(leadership.next()).await.unwrap().unwrap();
    assert_eq!(
        within(manager.election("sched").leader())
            .await
            .unwrap()
            .map(|l| l.data),
        Some(b"me".to_vec())
    );
    env.emulator
        .expire_session("app", permit.lease().unwrap().session_id());
    let permit2 = within(permits.next()).await.unwrap().unwrap();
    let leader2 = within(leadership.next()).await.unwrap().unwrap();
    assert!(permit.is_lost() && leader.is_lost());
    assert!(permit2.fencing_token() > permit.fencing_token());
    assert!(leader2.fencing_token() > leader.fencing_token());
    assert_eq!(permit2.lease().unwrap().count(), 2);
    // A resignation makes the stream campaign again.
    let fence = leader2.fencing_token();
    within(leader2.resign()).await.unwrap();
    let leader3 = within(leadership.next()).await.unwrap().unwrap();
    assert!(leader3.fencing_token() > fence);
    manager.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn every_recipe_future_says_it_is_queued_then_completes() {
    let env = Env::new().await;
    let a = env.session().await;
    let b = env.session().await;

    let guard = within(a.mutex("m").lock()).await.unwrap();
    let mut lock = b.mutex("m").lock();
    assert!(within(lock.queued()).await);
    drop(guard);
    drop(within(lock).await.unwrap());

    let permit = within(a.semaphore("s", 2).acquire(2)).await.unwrap();
    let mut acquire = b.semaphore("s", 2).acquire(1);
    assert!(within(acquire.queued()).await);
    drop(permit);
    assert_eq!(within(acquire).await.unwrap().lease().unwrap().count(), 1);

    let write = within(a.rwlock("rw").write()).await.unwrap();
    let mut read = b.rwlock("rw").read();
    assert!(within(read.queued()).await);
    drop(write);
    let read = within(read).await.unwrap();
    let mut write = a.rwlock("rw").write();
    assert!(within(write.queued()).await);
    drop(read);
    drop(within(write).await.unwrap());

    let leadership = within(a.election("e").campaign(b"a")).await.unwrap();
    let mut campaign = b.election("e").campaign(b"b");
    assert!(within(campaign.queued()).await);
    drop(leadership);
    let leadership = within(campaign).await.unwrap();
    // Not queued: free at once.
    let mut free = a.mutex("free").lock();
    assert!(!within(free.queued()).await);
    drop(within(free).await.unwrap());
    drop(leadership);
}

#[tokio::test(start_paused = true)]
async fn try_forms_return_none_while_held() {
    let env = Env::new().await;
    let a = env.session().await;
    let b = env.session().await;
    let _m = within(a.mutex("m").try_lock()).await.unwrap().unwrap();
    assert!(within(b.mutex("m").try_lock()).await.unwrap().is_none());
    let _s = within(a.semaphore("s", 1).try_acquire(1))
        .await
        .unwrap()
        .unwrap();
    assert!(
        within(b.semaphore("s", 1).try_acquire(1))
            .await
            .unwrap()
            .is_none()
    );
    let _w = within(a.rwlock("rw").try_write()).await.unwrap().unwrap();
    assert!(within(b.rwlock("rw").try_read()).await.unwrap().is_none());
    assert!(within(b.rwlock("rw").try_write()).await.unwrap().is_none());
    let _l = within(a.election("e").try_campaign(b"a"))
        .await
        .unwrap()
        .unwrap();
    assert!(
        within(b.election("e").try_campaign(b"b"))
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test(start_paused = true)]
async fn timeout_forms_give_up_after_the_deadline() {
    let env = Env::new().await;
    let a = env.session().await;
    let b = env.session().await;
    let d = Duration::from_secs(2);
    let _m = within(a.mutex("m").lock()).await.unwrap();
    let _s = within(a.semaphore("s", 1).acquire(1)).await.unwrap();
    let _w = within(a.rwlock("rw").write()).await.unwrap();
    let _l = within(a.election("e").campaign(b"a")).await.unwrap();
    let start = Instant::now();
    assert!(
        within(b.mutex("m").lock_timeout(d))
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        within(b.semaphore("s", 1).acquire_timeout(1, d))
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        within(b.rwlock("rw").read_timeout(d))
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        within(b.rwlock("rw").write_timeout(d))
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        within(b.election("e").campaign_timeout(b"b", d))
            .await
            .unwrap()
            .is_none()
    );
    assert!(start.elapsed() >= d * 5);
    // A bad count is refused before anything is asked.
    let err = within(b.semaphore("s", 1).acquire_timeout(2, d))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
}

#[tokio::test(start_paused = true)]
async fn held_read_and_write_come_back_after_expiry() {
    let env = Env::new().await;
    if !env.emulated() {
        return;
    }
    let manager = env.client.session_manager(&env.node, SessionOptions::new());
    let mut reading = manager.rwlock("cfg").hold_read();
    let read = within(reading.next()).await.unwrap().unwrap();
    env.emulator
        .expire_session("app", read.lease().unwrap().session_id());
    let read2 = within(reading.next()).await.unwrap().unwrap();
    assert!(read.is_lost());
    assert_ne!(
        read2.lease().unwrap().session_id(),
        read.lease().unwrap().session_id()
    );
    assert!(read2.fencing_token() > read.fencing_token());
    drop((reading, read2));

    let mut writing = manager.rwlock("cfg").hold_write();
    let write = within(writing.next()).await.unwrap().unwrap();
    env.emulator
        .expire_session("app", write.lease().unwrap().session_id());
    let write2 = within(writing.next()).await.unwrap().unwrap();
    assert!(write.is_lost());
    assert_ne!(
        write2.lease().unwrap().session_id(),
        write.lease().unwrap().session_id()
    );
    assert!(write2.fencing_token() > write.fencing_token());
    manager.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn recipes_on_a_manager_survive_a_session_loss_while_queued() {
    let env = Env::new().await;
    if !env.emulated() {
        return;
    }
    let holder = env.session().await;
    let guard = within(holder.mutex("m").lock()).await.unwrap();
    let permit = within(holder.semaphore("s", 1).acquire(1)).await.unwrap();
    let leadership = within(holder.election("e").campaign(b"h")).await.unwrap();
    let manager = env.client.session_manager(&env.node, SessionOptions::new());
    let first = within(manager.current()).await.unwrap();
    let mut lock = manager.mutex("m").lock();
    let mut acquire = manager.semaphore("s", 1).acquire(1);
    let mut campaign = manager.election("e").campaign(b"m");
    assert!(within(lock.queued()).await);
    assert!(within(acquire.queued()).await);
    assert!(within(campaign.queued()).await);
    env.emulator.expire_session("app", first.id());
    wait_state(&first, |s| s.is_terminal()).await;
    drop((guard, permit, leadership));
    let guard = within(lock).await.unwrap();
    let permit = within(acquire).await.unwrap();
    let leadership = within(campaign).await.unwrap();
    assert_ne!(guard.lease().unwrap().session_id(), first.id());
    assert_eq!(
        permit.lease().unwrap().session_id(),
        guard.lease().unwrap().session_id()
    );
    assert_eq!(
        leadership.lease().unwrap().session_id(),
        guard.lease().unwrap().session_id()
    );
    manager.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn election_candidates_list_the_leader_then_waiters_in_fifo_order() {
    let env = Env::new().await;
    let a = env.session().await;
    let b = env.session().await;
    let c = env.session().await;
    assert!(
        within(a.election("sched").candidates())
            .await
            .unwrap()
            .is_empty()
    );
    let lead_a = within(a.election("sched").campaign(b"a")).await.unwrap();
    let mut campaign_b = b.election("sched").campaign(b"b");
    assert!(within(campaign_b.queued()).await);
    let mut campaign_c = c.election("sched").campaign(b"c");
    assert!(within(campaign_c.queued()).await);

    let queue = within(b.election("sched").candidates()).await.unwrap();
    let seen: Vec<(&[u8], u64, bool, bool)> = queue
        .iter()
        .map(|x| (x.data.as_slice(), x.session_id, x.is_leader, x.is_me))
        .collect();
    assert_eq!(
        seen,
        [
            (b"a".as_slice(), a.id(), true, false),
            (b"b".as_slice(), b.id(), false, true),
            (b"c".as_slice(), c.id(), false, false),
        ]
    );
    assert_eq!(queue[0].fencing_token, lead_a.fencing_token());
    assert!(queue[0].fencing_token < queue[1].fencing_token);
    assert!(queue[1].fencing_token < queue[2].fencing_token);

    // The leader resigns: the first waiter leads with the order id it was listed with.
    within(lead_a.resign()).await.unwrap();
    let lead_b = within(campaign_b).await.unwrap();
    assert_eq!(lead_b.fencing_token(), queue[1].fencing_token);
    let queue = within(a.election("sched").candidates()).await.unwrap();
    let sessions: Vec<(u64, bool)> = queue.iter().map(|x| (x.session_id, x.is_leader)).collect();
    assert_eq!(sessions, [(b.id(), true), (c.id(), false)]);
    drop(campaign_c);
}

#[tokio::test(start_paused = true)]
async fn observe_says_whether_the_leader_is_this_session() {
    let env = Env::new().await;
    let a = env.session().await;
    let b = env.session().await;
    let mut seen_by_a = a.election("sched").observe();
    let mut seen_by_b = b.election("sched").observe();
    assert_eq!(within(seen_by_a.next()).await.unwrap().unwrap(), None);
    assert_eq!(within(seen_by_b.next()).await.unwrap().unwrap(), None);

    let lead_a = within(a.election("sched").campaign(b"a")).await.unwrap();
    let by_a = within(seen_by_a.next()).await.unwrap().unwrap().unwrap();
    let by_b = within(seen_by_b.next()).await.unwrap().unwrap().unwrap();
    assert_eq!((by_a.session_id, by_a.is_me), (a.id(), true));
    assert_eq!((by_b.session_id, by_b.is_me), (a.id(), false));
    let leader = within(b.election("sched").leader()).await.unwrap().unwrap();
    assert!(!leader.is_me);
    let leader = within(a.election("sched").leader()).await.unwrap().unwrap();
    assert!(leader.is_me);

    // The leadership moves to b: now b sees itself and a sees another.
    let election_b = b.election("sched");
    let campaign_b = tokio::spawn(async move { election_b.campaign(b"b").await });
    within(lead_a.resign()).await.unwrap();
    let lead_b = within(campaign_b).await.unwrap().unwrap();
    // Intermediate states (nobody leads) may or may not be seen: wait for b.
    let by_a = loop {
        match within(seen_by_a.next()).await.unwrap().unwrap() {
            Some(l) if l.session_id == b.id() => break l,
            _ => continue,
        }
    };
    let by_b = loop {
        match within(seen_by_b.next()).await.unwrap().unwrap() {
            Some(l) if l.session_id == b.id() => break l,
            _ => continue,
        }
    };
    assert!(!by_a.is_me);
    assert!(by_b.is_me);
    drop(lead_b);
}

#[tokio::test(start_paused = true)]
async fn lock_for_fires_at_the_deadline_and_hands_the_lock_over() {
    let env = Env::new().await;
    let a = env.session().await;
    let b = env.session().await;
    let d = Duration::from_secs(30);
    let start = Instant::now();
    let guard = within(a.mutex("job").lock_for(d)).await.unwrap();
    assert!(guard.deadline() >= start + d);
    let mut next = b.mutex("job").lock();
    assert!(within(next.queued()).await);

    // Not before the deadline, though the holder does nothing and the session is healthy.
    tokio::time::sleep_until(guard.deadline() - Duration::from_millis(1)).await;
    assert!(!guard.is_lost());
    assert!(matches!(a.state(), SessionState::Attached { .. }));
    within(guard.cancelled()).await;
    let fired = Instant::now();
    assert!(fired >= guard.deadline());
    assert!(fired < guard.deadline() + Duration::from_millis(10));

    // The release follows the token: the waiter gets the lock right after.
    let guard_b = within(next).await.unwrap();
    assert!(Instant::now() < fired + Duration::from_secs(1));
    assert!(guard_b.fencing_token() > guard.fencing_token());
    assert_eq!(guard_b.lease().unwrap().session_id(), b.id());
    // Unlocking after the deadline reports the lock as already gone.
    assert!(!within(guard.release()).await.unwrap());
    assert!(!guard_b.is_lost());
}

#[tokio::test(start_paused = true)]
async fn a_holder_cancelling_its_bounded_token_keeps_the_lock_until_the_deadline() {
    let env = Env::new().await;
    let a = env.session().await;
    let b = env.session().await;
    let guard = within(a.mutex("job").lock_for(Duration::from_secs(30)))
        .await
        .unwrap();
    // The holder stops its own work early.
    guard.token().cancel();
    assert!(!guard.is_lost());
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(within(b.mutex("job").try_lock()).await.unwrap().is_none());
    // The lease still ends at its deadline, and `cancelled` waits for that, not the token.
    within(guard.cancelled()).await;
    assert!(Instant::now() >= guard.deadline());
    assert!(guard.is_lost());
}

/// One meaning for a guard's token, whatever the guard: cancelling it stops the holder's own
/// work and never changes the lock (a lease, a recipe guard, a multi-lock, a bounded hold, a
/// lock space's lock). Only `release()` or a drop lets go.
#[tokio::test(start_paused = true)]
async fn cancelling_any_guards_token_keeps_the_lock() {
    use ydb_coordination::space::{Layout, LockSpace};
    let env = Env::new().await;
    if !env.emulated() {
        return;
    }
    let (a, b) = (env.session().await, env.session().await);
    let busy = |r: Option<ydb_coordination::MutexGuard>| r.is_none();
    let guard = within(a.mutex("plain").lock()).await.unwrap();
    guard.token().cancel();
    assert!(!guard.is_lost());
    assert!(busy(within(b.mutex("plain").try_lock()).await.unwrap()));
    assert!(within(guard.release()).await.unwrap());

    let both = within(a.multi_lock(["m1", "m2"]).lock()).await.unwrap();
    both.token().cancel();
    assert!(!both.is_lost());
    assert!(busy(within(b.mutex("m2").try_lock()).await.unwrap()));
    assert!(within(both.unlock()).await.unwrap());

    let bounded = within(a.mutex("bounded").lock_for(Duration::from_secs(30)))
        .await
        .unwrap();
    bounded.token().cancel();
    assert!(!bounded.is_lost());
    assert!(busy(within(b.mutex("bounded").try_lock()).await.unwrap()));
    assert!(within(bounded.release()).await.unwrap());

    let space = within(
        LockSpace::builder()
            .node("n1", &env.client, &env.node)
            .layout(Layout::new(1, ["n1"]).unwrap())
            .open(),
    )
    .await
    .unwrap();
    let held = within(space.mutex("spaced").lock()).await.unwrap();
    held.token().cancel();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!held.is_lost());
    assert!(busy(within(b.mutex("spaced").try_lock()).await.unwrap()));
    assert!(within(held.release()).await.unwrap());
}

#[tokio::test(start_paused = true)]
async fn lock_for_unlocked_before_the_deadline_releases_normally() {
    let env = Env::new().await;
    let a = env.session().await;
    let b = env.session().await;
    let d = Duration::from_secs(30);
    let guard = within(a.mutex("job").lock_for(d)).await.unwrap();
    let token = guard.token();
    let deadline = guard.deadline();
    let mut next = b.mutex("job").lock_for(d);
    assert!(within(next.queued()).await);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!token.is_cancelled());
    assert!(within(guard.release()).await.unwrap());
    assert!(token.is_cancelled());
    let guard_b = within(next).await.unwrap();
    assert!(Instant::now() < deadline);

    // The first guard's deadline passing does nothing to the next holder's lock.
    tokio::time::sleep_until(deadline + Duration::from_secs(1)).await;
    assert!(!guard_b.is_lost());
    assert!(within(a.mutex("job").try_lock()).await.unwrap().is_none());
    // A dropped bounded guard releases too.
    drop(guard_b);
    assert!(
        within(a.mutex("job").lock_timeout(Duration::from_secs(1)))
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test(start_paused = true)]
async fn publish_onto_a_name_another_recipe_uses_is_refused() {
    let env = Env::new().await;
    let a = env.session().await;
    let b = env.session().await;
    // A mutex's ephemeral semaphore: the value would go with the lock.
    let guard = within(a.mutex("m").lock()).await.unwrap();
    let err = within(b.published("m").publish(b"v")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PreconditionFailed);
    // A counted semaphore's (another limit).
    within(a.create_semaphore("pool", 3, b"")).await.unwrap();
    let err = within(b.published("pool").publish(b"v")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PreconditionFailed);
    assert!(
        within(b.describe_semaphore("pool", Default::default()))
            .await
            .unwrap()
            .data
            .is_empty()
    );
    // A group's, which has the limit of a publication, and members.
    let _member = within(a.group("workers").join(b"a")).await.unwrap();
    let err = within(b.published("workers").publish(b"v"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PreconditionFailed);
    // As join and subscribe refuse them.
    let err = within(b.published("m").subscribe().next())
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PreconditionFailed);
    drop(guard);

    // A publication of its own is created, then updated.
    let published = b.published("config");
    within(published.publish(b"1")).await.unwrap();
    within(published.publish(b"2")).await.unwrap();
    assert_eq!(within(a.published("config").get()).await.unwrap(), b"2");
}

/// Asserts that `f` fails with `InvalidArgument`.
async fn invalid<T: std::fmt::Debug>(
    f: impl std::future::IntoFuture<Output = ydb_coordination::Result<T>>,
) {
    match within(f).await {
        Err(e) => assert_eq!(e.kind(), ErrorKind::InvalidArgument),
        Ok(v) => panic!("accepted: {v:?}"),
    }
}

/// Asserts that `stream` yields `InvalidArgument`, then ends.
async fn invalid_stream<T: std::fmt::Debug>(
    mut stream: impl futures::Stream<Item = ydb_coordination::Result<T>> + Unpin,
) {
    match within(stream.next()).await {
        Some(Err(e)) => assert_eq!(e.kind(), ErrorKind::InvalidArgument),
        other => panic!("not refused: {other:?}"),
    }
    assert!(within(stream.next()).await.is_none());
}

#[tokio::test(start_paused = true)]
async fn every_recipe_verb_refuses_a_name_over_the_limit_before_sending_anything() {
    let env = Env::new().await;
    let s = env.session().await;
    let long = "x".repeat(ydb_coordination::config::MAX_NAME_LEN + 1);
    let (long, d) = (long.as_str(), Duration::from_secs(1));

    let mutex = s.mutex(long);
    invalid(mutex.lock()).await;
    invalid(mutex.try_lock()).await;
    invalid(mutex.lock_timeout(d)).await;
    invalid(mutex.lock_for(d)).await;
    invalid_stream(mutex.hold()).await;
    let semaphore = s.semaphore(long, 2);
    invalid(semaphore.acquire(1)).await;
    invalid(semaphore.try_acquire(1)).await;
    invalid(semaphore.acquire_timeout(1, d)).await;
    invalid(semaphore.acquire_for(1, d)).await;
    invalid_stream(semaphore.hold(1)).await;
    let rwlock = s.rwlock(long);
    invalid(rwlock.read()).await;
    invalid(rwlock.write()).await;
    invalid(rwlock.try_read()).await;
    invalid(rwlock.try_write()).await;
    invalid(rwlock.read_timeout(d)).await;
    invalid(rwlock.write_timeout(d)).await;
    invalid(rwlock.read_for(d)).await;
    invalid(rwlock.write_for(d)).await;
    invalid_stream(rwlock.hold_read()).await;
    invalid_stream(rwlock.hold_write()).await;
    let election = s.election(long);
    invalid(election.campaign(b"a")).await;
    invalid(election.try_campaign(b"a")).await;
    invalid(election.campaign_timeout(b"a", d)).await;
    invalid(election.leader()).await;
    invalid(election.candidates()).await;
    invalid_stream(election.hold(b"a")).await;
    invalid_stream(election.observe()).await;
    let group = s.group(long);
    invalid(group.join(b"a")).await;
    invalid(group.members()).await;
    invalid_stream(group.watch()).await;
    let published = s.published(long);
    invalid(published.publish(b"v")).await;
    invalid(published.get()).await;
    invalid_stream(published.subscribe()).await;
    let multi = s.multi_lock([long]);
    invalid(multi.lock()).await;
    invalid(multi.try_lock()).await;
    invalid(multi.lock_timeout(d)).await;

    // The same on a manager: refused, not retried.
    let manager = env.client.session_manager(&env.node, SessionOptions::new());
    invalid(manager.mutex(long).lock()).await;
    invalid_stream(manager.mutex(long).hold()).await;
    invalid(manager.group(long).join(b"a")).await;
    invalid_stream(manager.published(long).subscribe()).await;
    if env.emulated() {
        assert!(env.emulator.semaphore_names("app").is_empty());
    }

    // A name at the limit is a name like any other.
    let at = "x".repeat(ydb_coordination::config::MAX_NAME_LEN);
    drop(within(s.mutex(&at).lock()).await.unwrap());
    within(s.published(&at).publish(b"v")).await.unwrap();
    assert_eq!(within(s.published(&at).get()).await.unwrap(), b"v");
    within(manager.shutdown()).await;
}
