//! A mutex's lock delay: after a holder lost the lock without releasing it, the next holder
//! gets its guard only once the delay has passed since its grant; after a clean unlock at
//! once. A holder stopped past its lease and woken within the delay never overlaps the next.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::time::Duration;

use common::{Env, within};
use tokio::time::Instant;
use ydb_coordination::config::DescribeOptions;
use ydb_coordination::{ErrorKind, Guard, Mutex, Session, SessionOptions};

const DELAY: Duration = Duration::from_secs(20);
/// The session timeout of the holders that are lost.
const SESSION_TIMEOUT: Duration = Duration::from_secs(5);
/// What "at once" allows for the round trips of an acquire.
const PROMPT: Duration = Duration::from_secs(2);

fn mutex(s: &Session) -> Mutex {
    s.mutex("job").lock_delay(DELAY)
}

/// Waits until the session `s` owns "job" on the server; returns when `s` learnt of its grant.
async fn granted(observer: &Session, s: &Session) -> Instant {
    within(async {
        loop {
            let d = observer
                .describe_semaphore("job", DescribeOptions::new().owners(true))
                .await
                .unwrap();
            if d.owners.iter().any(|o| o.session_id == s.id())
                && let Some(held) = s
                    .snapshot()
                    .await
                    .held
                    .into_iter()
                    .find(|h| h.name == "job")
            {
                return held.since;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
}

#[tokio::test(start_paused = true)]
async fn after_a_clean_unlock_the_next_holder_gets_the_guard_at_once() {
    let env = Env::new().await;
    let (a, b) = (env.session().await, env.session().await);
    let guard = within(mutex(&a).lock()).await.unwrap();
    let mut waiting = mutex(&b).lock();
    assert!(within(waiting.queued()).await);
    let unlocked = Instant::now();
    assert!(within(guard.unlock()).await.unwrap());
    let next = within(waiting).await.unwrap();
    assert!(unlocked.elapsed() < PROMPT, "{:?}", unlocked.elapsed());
    // The same through the generic release.
    let released = Instant::now();
    within(Guard::release(next)).await.unwrap();
    let again = within(mutex(&a).try_lock()).await.unwrap();
    assert!(again.is_some());
    assert!(released.elapsed() < PROMPT, "{:?}", released.elapsed());
}

#[tokio::test(start_paused = true)]
async fn after_a_dropped_guard_the_next_holder_waits_the_delay() {
    let env = Env::new().await;
    let (a, b) = (env.session().await, env.session().await);
    let guard = within(mutex(&a).lock()).await.unwrap();
    let mut waiting = mutex(&b).lock();
    assert!(within(waiting.queued()).await);
    drop(guard);
    let next = within(waiting).await.unwrap();
    let grant = b.snapshot().await.held[0].since;
    assert!(grant.elapsed() >= DELAY, "{:?}", grant.elapsed());
    assert!(!next.is_lost());
}

#[tokio::test(start_paused = true)]
async fn a_holder_expired_by_the_server_makes_the_next_one_wait_the_delay_from_its_grant() {
    let env = Env::new().await;
    if !env.emulated() {
        return;
    }
    let (a, b) = (env.session().await, env.session().await);
    let guard = within(mutex(&a).lock()).await.unwrap();
    let mut waiting = mutex(&b).lock();
    assert!(within(waiting.queued()).await);
    assert!(env.emulator.expire_session(&env.node, a.id()));
    let next = within(waiting).await.unwrap();
    let returned = Instant::now();
    let grant = b.snapshot().await.held[0].since;
    assert!(returned - grant >= DELAY, "{:?}", returned - grant);
    assert!(returned - grant < DELAY + PROMPT, "{:?}", returned - grant);
    assert!(guard.is_lost());
    // Its own clean unlock lets the one after it in at once.
    let c = env.session().await;
    let mut after = mutex(&c).lock();
    assert!(within(after.queued()).await);
    let unlocked = Instant::now();
    within(next.unlock()).await.unwrap();
    let after = within(after).await.unwrap();
    assert!(unlocked.elapsed() < PROMPT, "{:?}", unlocked.elapsed());
    drop(after);
}

#[tokio::test(start_paused = true)]
async fn a_holder_lost_in_a_stalled_network_makes_the_next_one_wait_the_delay_from_its_grant() {
    let env = Env::new().await;
    if !env.emulated() {
        return;
    }
    let (proxy, behind) = env.behind_proxy().await;
    let opts = SessionOptions::new().timeout(SESSION_TIMEOUT);
    let a = within(behind.session(&env.node, opts)).await.unwrap();
    let b = env.session().await;
    let guard = within(mutex(&a).lock()).await.unwrap();
    let mut waiting = mutex(&b).lock();
    assert!(within(waiting.queued()).await);
    proxy.net().stall();
    let next = within(waiting).await.unwrap();
    let returned = Instant::now();
    let grant = b.snapshot().await.held[0].since;
    assert!(returned - grant >= DELAY, "{:?}", returned - grant);
    assert!(returned - grant < DELAY + PROMPT, "{:?}", returned - grant);
    assert!(guard.is_lost());
    drop(next);
}

/// THE property: a holder stopped past its lease (its process paused: neither its stream nor
/// its work moves) that wakes within the delay, sees its token fired and stops, never
/// overlaps the next holder. Each tenure runs from the guard's return to the moment its
/// holder sees the token fired.
#[tokio::test(start_paused = true)]
async fn a_holder_stopped_past_its_lease_and_woken_within_the_delay_never_overlaps_the_next() {
    let env = Env::new().await;
    if !env.emulated() {
        return;
    }
    // Long enough for the server to expire the stopped holder and grant the lock to the next,
    // short of the delay after that grant.
    const PAUSE: Duration = Duration::from_secs(12);
    let (proxy, behind) = env.behind_proxy().await;
    let opts = SessionOptions::new().timeout(SESSION_TIMEOUT);
    let a = within(behind.session(&env.node, opts)).await.unwrap();
    let b = env.session().await;
    let observer = env.session().await;

    let guard = within(mutex(&a).lock()).await.unwrap();
    let a_start = Instant::now();
    let mut waiting = mutex(&b).lock();
    assert!(within(waiting.queued()).await);

    let holder_a = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        // The process stops: its network and its work stand still.
        proxy.net().stall();
        tokio::time::sleep(PAUSE).await;
        proxy.net().resume();
        // It wakes and looks at its token before doing anything more.
        let lost = guard.is_lost();
        (Instant::now(), lost)
    });
    let holder_b = tokio::spawn(async move {
        let guard = waiting.await.unwrap();
        let start = Instant::now();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let end = Instant::now();
        guard.unlock().await.unwrap();
        (start, end)
    });
    let b_grant = granted(&observer, &b).await;
    let (a_end, a_saw_loss) = within(holder_a).await.unwrap();
    let (b_start, b_end) = within(holder_b).await.unwrap();

    assert!(a_saw_loss, "the stopped holder's token had not fired");
    // The server did give the lock away while the holder was stopped: the window is real.
    assert!(
        b_grant < a_end,
        "B granted at {b_grant:?}, A woke at {a_end:?}"
    );
    assert!(
        a_end <= b_start || b_end <= a_start,
        "tenures overlap: A [{a_start:?}, {a_end:?}], B [{b_start:?}, {b_end:?}]"
    );
}

#[tokio::test(start_paused = true)]
async fn dropping_the_acquire_during_the_delay_releases_the_lock() {
    let env = Env::new().await;
    if !env.emulated() {
        return;
    }
    let (a, b, c) = (
        env.session().await,
        env.session().await,
        env.session().await,
    );
    let guard = within(mutex(&a).lock()).await.unwrap();
    let mut waiting = mutex(&b).lock();
    assert!(within(waiting.queued()).await);
    assert!(env.emulator.expire_session(&env.node, a.id()));
    // B is granted but held in the delay: its acquire has not returned.
    let grant = within(async {
        tokio::select! {
            biased;
            r = &mut waiting => panic!("the guard came before the delay: {r:?}"),
            at = granted(&c, &b) => at,
        }
    })
    .await;
    tokio::time::sleep(DELAY / 2).await;
    assert!(
        futures::poll!(&mut waiting).is_pending(),
        "the guard came within the delay"
    );
    drop(waiting);
    // C gets the lock (after a delay of its own: B never released it cleanly).
    let taken = within(mutex(&c).lock()).await.unwrap();
    assert!(grant.elapsed() >= DELAY / 2);
    let d = within(c.describe_semaphore("job", DescribeOptions::new().owners(true)))
        .await
        .unwrap();
    let owners: Vec<u64> = d.owners.iter().map(|o| o.session_id).collect();
    assert_eq!(owners, vec![c.id()]);
    assert!(within(b.snapshot()).await.held.is_empty());
    drop((guard, taken));
}

#[tokio::test(start_paused = true)]
async fn a_grant_lost_during_the_delay_ends_the_acquire_without_a_guard() {
    let env = Env::new().await;
    if !env.emulated() {
        return;
    }
    let (a, b, observer) = (
        env.session().await,
        env.session().await,
        env.session().await,
    );
    let guard = within(mutex(&a).lock()).await.unwrap();
    let mut waiting = mutex(&b).lock();
    assert!(within(waiting.queued()).await);
    // Polled all along, as a caller's await is.
    let waiting = tokio::spawn(waiting);
    assert!(env.emulator.expire_session(&env.node, a.id()));
    granted(&observer, &b).await;
    tokio::time::sleep(DELAY / 2).await;
    assert!(!waiting.is_finished(), "the guard came within the delay");
    assert!(env.emulator.expire_session(&env.node, b.id()));
    let started = Instant::now();
    let result = within(waiting).await.unwrap();
    assert_eq!(
        result.err().map(|e| e.kind()),
        Some(ErrorKind::SessionExpired)
    );
    assert!(started.elapsed() < PROMPT, "{:?}", started.elapsed());
    drop(guard);
}

/// The bound covers the delay: a `try_` form after an unclean end answers `None` at once
/// (the lock is not the caller's in time) and writes nothing, so the delay still holds;
/// a `_timeout` form whose bound outlasts the delay gets the guard once it has passed.
#[tokio::test(start_paused = true)]
async fn a_bounded_form_gets_the_lock_only_if_its_delay_ends_within_the_bound() {
    let env = Env::new().await;
    if !env.emulated() {
        return;
    }
    let (a, b) = (env.session().await, env.session().await);
    let guard = within(mutex(&a).lock()).await.unwrap();
    assert!(within(mutex(&b).try_lock()).await.unwrap().is_none());
    assert!(env.emulator.expire_session(&env.node, a.id()));
    let started = Instant::now();
    assert!(within(mutex(&b).try_lock()).await.unwrap().is_none());
    assert!(started.elapsed() < PROMPT, "{:?}", started.elapsed());
    // Too short a bound: not acquired, at its bound or before.
    let short = DELAY / 2;
    let started = Instant::now();
    assert!(
        within(mutex(&b).lock_timeout(short))
            .await
            .unwrap()
            .is_none()
    );
    assert!(started.elapsed() <= short, "{:?}", started.elapsed());
    // Long enough: the guard, once the delay after its grant has passed.
    let started = Instant::now();
    let taken = within(mutex(&b).lock_timeout(DELAY + PROMPT))
        .await
        .unwrap();
    assert!(taken.is_some());
    assert!(started.elapsed() >= DELAY, "{:?}", started.elapsed());
    drop((guard, taken));
}

#[tokio::test(start_paused = true)]
async fn a_mutex_without_a_delay_on_the_same_name_is_refused_as_the_other_mode() {
    let env = Env::new().await;
    let (a, b) = (env.session().await, env.session().await);
    let guard = within(mutex(&a).lock()).await.unwrap();
    let plain = within(b.mutex("job").try_lock()).await;
    assert_eq!(plain.err().map(|e| e.kind()), Some(ErrorKind::ModeMismatch));
    // Every verb alike, and with the lock released too: the semaphore stays.
    within(guard.unlock()).await.unwrap();
    let plain = within(b.mutex("job").lock()).await;
    assert_eq!(plain.err().map(|e| e.kind()), Some(ErrorKind::ModeMismatch));
    let plain = within(b.mutex("job").lock_timeout(Duration::from_secs(1))).await;
    assert_eq!(plain.err().map(|e| e.kind()), Some(ErrorKind::ModeMismatch));
}

#[tokio::test(start_paused = true)]
async fn a_mutex_with_a_delay_on_a_name_a_plain_lock_holds_is_refused_as_the_other_mode() {
    let env = Env::new().await;
    let (a, b) = (env.session().await, env.session().await);
    let plain = within(a.mutex("job").lock()).await.unwrap();
    let delayed = within(mutex(&b).try_lock()).await;
    assert_eq!(
        delayed.err().map(|e| e.kind()),
        Some(ErrorKind::ModeMismatch)
    );
    let delayed = within(mutex(&b).lock_timeout(Duration::from_secs(1))).await;
    assert_eq!(
        delayed.err().map(|e| e.kind()),
        Some(ErrorKind::ModeMismatch)
    );
    // Once the plain lock is gone (and its ephemeral semaphore with it), the name is free.
    within(plain.unlock()).await.unwrap();
    let guard = within(mutex(&b).lock()).await.unwrap();
    within(guard.unlock()).await.unwrap();
}

/// Requests one lock and unlock of `m` costs on the server, once its semaphore exists.
async fn cost(env: &Env, m: &Mutex) -> (u64, u64) {
    within(within(m.lock()).await.unwrap().unlock())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = env.emulator.traffic();
    let guard = within(m.lock()).await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let locked = env.emulator.traffic();
    within(guard.unlock()).await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let unlocked = env.emulator.traffic();
    (
        locked.since(&before).requests,
        unlocked.since(&locked).requests,
    )
}

#[tokio::test(start_paused = true)]
async fn the_cost_of_a_lock_delay_is_six_requests_per_lock_and_two_per_unlock() {
    let env = Env::new().await;
    if !env.emulated() {
        return;
    }
    let s = env.session().await;
    let plain = cost(&env, &s.mutex("plain")).await;
    let delayed = cost(&env, &mutex(&s)).await;
    // A lock: the semaphore made sure of (create, describe), the marker read and written,
    // the watch against a forced delete (a describe now and after the marker's write).
    assert!(
        delayed.0 <= plain.0 + 6,
        "plain {plain:?}, delayed {delayed:?}"
    );
    // An unlock: the marker written (and the watch's describe after it).
    assert!(
        delayed.1 <= plain.1 + 2,
        "plain {plain:?}, delayed {delayed:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_held_lock_whose_session_expired_comes_back_in_the_next_session_after_the_delay() {
    use futures::StreamExt;
    let env = Env::new().await;
    if !env.emulated() {
        return;
    }
    let manager = env.client.session_manager(&env.node, SessionOptions::new());
    let mut held = manager.mutex("job").lock_delay(DELAY).hold();
    let first = within(held.next()).await.unwrap().unwrap();
    let first_session = first.lease().unwrap().session_id();
    let expired_at = Instant::now();
    assert!(env.emulator.expire_session(&env.node, first_session));
    within(first.cancelled()).await;
    let second = within(held.next()).await.unwrap().unwrap();
    assert_ne!(second.lease().unwrap().session_id(), first_session);
    assert!(second.fencing_token() > first.fencing_token());
    assert!(expired_at.elapsed() >= DELAY, "{:?}", expired_at.elapsed());
    assert!(!second.is_lost());
    within(second.unlock()).await.unwrap();
    manager.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_holder_waiting_out_the_delay_says_until_when_in_the_semaphore_data() {
    let env = Env::new().await;
    let observer = env.session().await;
    let (a, b) = (env.session().await, env.session().await);
    let guard = within(mutex(&a).lock()).await.unwrap();
    drop(guard);
    let waiting = tokio::spawn({
        let b = b.clone();
        async move { mutex(&b).lock().await }
    });
    granted(&observer, &b).await;
    let until = within(async {
        loop {
            let d = observer
                .describe_semaphore("job", DescribeOptions::new().owners(true))
                .await
                .unwrap();
            let owner = d.owners.iter().find(|o| o.session_id == b.id());
            if let Some(until) = owner.and_then(|o| Mutex::delay_until(&d.data, o.order_id)) {
                return until;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    // The wall clock runs on while tokio's is paused: the time is ahead by about the delay.
    let ahead = until
        .duration_since(std::time::SystemTime::now())
        .unwrap_or_default();
    assert!(ahead > DELAY - PROMPT && ahead <= DELAY, "{ahead:?}");
    let guard = within(waiting).await.unwrap().unwrap();
    // Handed over: a clean unlock, and the next holder's marker says nothing of a delay.
    within(guard.unlock()).await.unwrap();
    let guard = within(mutex(&a).lock()).await.unwrap();
    let d = within(observer.describe_semaphore("job", DescribeOptions::new().owners(true)))
        .await
        .unwrap();
    assert_eq!(Mutex::delay_until(&d.data, d.owners[0].order_id), None);
    within(guard.unlock()).await.unwrap();
}
