//! A multi-lock that gives up has given its parts back when it returns; every `_timeout`
//! verb follows one timeout rule.

mod common;

use std::time::Duration;

use common::{Env, within};
use ydb_coordination::{ErrorKind, MAX_ACQUIRE_TIMEOUT, SessionOptions};

/// Session A (behind a slow link) multi-locks `[x, y]` while B holds `y`: when
/// `lock_timeout` gives up, `x` is already free for C, who sits on a fast link.
#[tokio::test(start_paused = true)]
async fn a_multi_lock_that_times_out_has_released_its_parts_when_it_returns() {
    let env = Env::new().await;
    if !env.emulated() {
        return;
    }
    let (proxy, slow) = env.behind_proxy().await;
    let a = within(slow.session(&env.node, SessionOptions::new()))
        .await
        .unwrap();
    let b = env.session().await;
    let c = env.session().await;
    let held = within(b.mutex("y").lock()).await.unwrap();

    proxy.net().delay(Duration::from_millis(100));
    let both = within(
        a.multi_lock(["x", "y"])
            .lock_timeout(Duration::from_millis(500)),
    )
    .await
    .unwrap();
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
