//! A session's announcement: the names it holds and waits for, as owner data of the ephemeral
//! semaphore `ANNOUNCE_SEMAPHORE`, kept current at one request per change (at most one a
//! second), and gone with the session.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::time::Duration;

use common::{Env, within};
use futures::StreamExt;
use ydb_coordination::config::{DescribeOptions, WatchOptions};
use ydb_coordination::session::{
    ANNOUNCE_LIMIT, ANNOUNCE_SEMAPHORE, Announced, Announcement, Page, WatchStream, page_semaphore,
};
use ydb_coordination::{AcquireOptions, ErrorKind, Session, SessionOptions};

fn announcing(description: &str) -> SessionOptions {
    SessionOptions::new()
        .description(description)
        .announce(true)
}

/// What `session` announces, read by `observer`.
async fn announced(observer: &Session, session: &Session) -> Option<Announcement> {
    let d = observer
        .describe_semaphore(ANNOUNCE_SEMAPHORE, DescribeOptions::new().owners(true))
        .await
        .ok()?;
    let owner = d.owners.iter().find(|o| o.session_id == session.id())?;
    Announcement::parse(&owner.data)
}

/// Follows the announcement semaphore until `session` announces `names`.
async fn until_announced(
    observer: &Session,
    watch: &mut WatchStream,
    session: &Session,
    names: &[&str],
) {
    within(async {
        // Read now, then again after each change: one update may carry several sessions'.
        while announced(observer, session).await.map(|a| name_list(&a)) != Some(to_vec(names)) {
            watch.next().await.unwrap().unwrap();
        }
    })
    .await;
}

/// The names a record lists.
fn name_list(a: &Announcement) -> Vec<String> {
    a.names.iter().map(|n| n.name.clone()).collect()
}

fn to_vec(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| n.to_string()).collect()
}

/// Waits until the announcement semaphore exists (the first announcing session made it).
async fn watch_announcements(observer: &Session) -> WatchStream {
    within(async {
        loop {
            let probe = observer
                .describe_semaphore(ANNOUNCE_SEMAPHORE, DescribeOptions::new())
                .await;
            if probe.is_ok() {
                return observer
                    .watch_semaphore(ANNOUNCE_SEMAPHORE, WatchOptions::owners_changes())
                    .await
                    .unwrap();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
}

#[tokio::test(start_paused = true)]
async fn a_session_announces_what_it_holds_and_waits_for_and_follows_changes() {
    let env = Env::new().await;
    let observer = env.session().await;
    let a = env.session_with(announcing("worker a")).await;
    let b = env.session().await;
    let mut watch = watch_announcements(&observer).await;
    until_announced(&observer, &mut watch, &a, &[]).await;
    let first = within(announced(&observer, &a)).await.unwrap();
    assert_eq!(first.description, "worker a");

    let held = within(a.acquire("job", AcquireOptions::exclusive().ephemeral(true)))
        .await
        .unwrap();
    let blocker = within(b.acquire("pool", AcquireOptions::exclusive().ephemeral(true)))
        .await
        .unwrap();
    let mut waiting = a.acquire("pool", AcquireOptions::exclusive().ephemeral(true));
    assert!(within(waiting.queued()).await);
    until_announced(&observer, &mut watch, &a, &["job", "pool"]).await;

    within(held.release()).await.unwrap();
    until_announced(&observer, &mut watch, &a, &["pool"]).await;
    drop(blocker);
    let pool = within(waiting).await.unwrap();
    within(pool.release()).await.unwrap();
    until_announced(&observer, &mut watch, &a, &[]).await;
}

#[tokio::test(start_paused = true)]
async fn the_announcement_is_hidden_from_the_sessions_own_snapshot() {
    let env = Env::new().await;
    let observer = env.session().await;
    let a = env.session_with(announcing("a")).await;
    let mut watch = watch_announcements(&observer).await;
    until_announced(&observer, &mut watch, &a, &[]).await;
    let snapshot = within(a.snapshot()).await;
    assert!(snapshot.held.is_empty(), "{snapshot:?}");
}

#[tokio::test(start_paused = true)]
async fn the_announcement_ends_with_the_session_and_never_keeps_it_open() {
    let env = Env::new().await;
    let observer = env.session().await;
    let a = env.session_with(announcing("a")).await;
    let lease = within(a.acquire("job", AcquireOptions::exclusive().ephemeral(true)))
        .await
        .unwrap();
    let mut watch = watch_announcements(&observer).await;
    until_announced(&observer, &mut watch, &a, &["job"]).await;
    let token = a.token();
    // Every handle and lease dropped: the session ends, the announcer does not keep it.
    drop(a);
    drop(lease);
    within(token.cancelled()).await;
    // The ephemeral semaphore went with its last owner.
    let gone = within(async {
        loop {
            let r = observer
                .describe_semaphore(ANNOUNCE_SEMAPHORE, DescribeOptions::new())
                .await;
            match r {
                Err(e) => return e.kind(),
                Ok(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    })
    .await;
    assert_eq!(gone, ErrorKind::NotFound);
}

#[tokio::test(start_paused = true)]
async fn a_closed_session_takes_its_announcement_with_it() {
    let env = Env::new().await;
    let observer = env.session().await;
    let a = env.session_with(announcing("a")).await;
    let b = env.session_with(announcing("b")).await;
    let mut watch = watch_announcements(&observer).await;
    until_announced(&observer, &mut watch, &a, &[]).await;
    until_announced(&observer, &mut watch, &b, &[]).await;
    within(a.close()).await;
    let d = within(
        observer.describe_semaphore(ANNOUNCE_SEMAPHORE, DescribeOptions::new().owners(true)),
    )
    .await
    .unwrap();
    let ids: Vec<u64> = d.owners.iter().map(|o| o.session_id).collect();
    assert_eq!(ids, [b.id()]);
}

#[tokio::test(start_paused = true)]
async fn without_the_option_nothing_is_announced() {
    let env = Env::new().await;
    let observer = env.session().await;
    let a = env.session().await;
    let _lease = within(a.acquire("job", AcquireOptions::exclusive().ephemeral(true)))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let r = within(observer.describe_semaphore(ANNOUNCE_SEMAPHORE, DescribeOptions::new())).await;
    assert_eq!(r.unwrap_err().kind(), ErrorKind::NotFound);
}

/// Requests `cycles` locks and unlocks of "job" cost on the server: held 250 ms of every
/// 300 ms (a name held at the instant the announcer reads the session's tables).
async fn cycles_cost(env: &Env, s: &Session, cycles: u32) -> u64 {
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = env.emulator.traffic();
    for _ in 0..cycles {
        let lease = within(s.acquire("job", AcquireOptions::exclusive().ephemeral(true)))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(250)).await;
        within(lease.release()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    env.emulator.traffic().since(&before).requests
}

#[tokio::test(start_paused = true)]
async fn announcing_costs_at_most_one_request_a_second() {
    let env = Env::new().await;
    if !env.emulated() {
        return;
    }
    let plain = env.session().await;
    let loud = env.session_with(announcing("loud")).await;
    // 10 locks in 3 s: the plain session's requests, and at most one write a second (plus
    // the one after the last change) for the announcing one.
    let quiet_cost = cycles_cost(&env, &plain, 10).await;
    let loud_cost = cycles_cost(&env, &loud, 10).await;
    assert!(
        loud_cost > quiet_cost && loud_cost <= quiet_cost + 4,
        "plain {quiet_cost}, announcing {loud_cost}"
    );
    // An idle announcing session costs nothing but its pings.
    let before = env.emulator.traffic();
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(env.emulator.traffic().since(&before).requests, 0);
}

#[tokio::test(start_paused = true)]
async fn an_announcement_write_does_not_read_the_other_announcements() {
    let env = Env::new().await;
    if !env.emulated() {
        return;
    }
    let mut crowd = Vec::new();
    for i in 0..30 {
        crowd.push(env.session_with(announcing(&format!("worker {i}"))).await);
    }
    let a = &crowd[0];
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = env.emulator.traffic();
    let lease = within(a.acquire("job", AcquireOptions::exclusive().ephemeral(true)))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let used = env.emulator.traffic().since(&before);
    // The lock (its acquire and the describe that reads its fencing token, one owner) and
    // one write of the announcement: nothing of the 29 other records.
    assert_eq!(used.requests, 3, "{used:?}");
    assert!(used.described_entries <= 1, "{used:?}");
    drop(lease);
}

/// The names the library keeps for itself cannot be taken, made, changed or removed through
/// any entry point: the session's own calls and every recipe, on a session and on a manager.
#[tokio::test(start_paused = true)]
async fn the_announcement_semaphore_is_refused_to_every_entry_point() {
    let env = Env::new().await;
    let s = env.session().await;
    let manager = env.client.session_manager(&env.node, SessionOptions::new());
    let a = env.session_with(announcing("a")).await;
    let observer = env.session().await;
    let mut watch = watch_announcements(&observer).await;
    until_announced(&observer, &mut watch, &a, &[]).await;
    let page = format!("{ANNOUNCE_SEMAPHORE}/{}/1", a.id());
    for name in [ANNOUNCE_SEMAPHORE, page.as_str(), "ydb-coordination:later"] {
        let exclusive = AcquireOptions::exclusive().ephemeral(true);
        let kinds = [
            within(s.acquire(name, exclusive.clone())).await.err(),
            within(s.try_acquire(name, AcquireOptions::new().ephemeral(true)))
                .await
                .err(),
            within(s.create_semaphore(name, 1, b"")).await.err(),
            within(s.update_semaphore(name, b"x")).await.err(),
            within(s.delete_semaphore(name, true)).await.err(),
            within(s.mutex(name).lock()).await.err(),
            within(s.mutex(name).lock_delay(Duration::from_secs(1)).lock())
                .await
                .err(),
            within(s.rwlock(name).read()).await.err(),
            within(s.semaphore(name, 3).acquire(1)).await.err(),
            within(s.election(name).try_campaign(b"me")).await.err(),
            within(manager.mutex(name).try_lock()).await.err(),
        ]
        .map(|e| e.map(|e| e.kind()));
        assert!(
            kinds.iter().all(|k| *k == Some(ErrorKind::InvalidArgument)),
            "{name}: {kinds:?}"
        );
    }
    // Describing it is allowed, and only the announcing session owns it.
    let d = within(
        observer.describe_semaphore(ANNOUNCE_SEMAPHORE, DescribeOptions::new().owners(true)),
    )
    .await
    .unwrap();
    let owners: Vec<u64> = d.owners.iter().map(|o| o.session_id).collect();
    assert_eq!(owners, [a.id()]);
    assert!(d.waiters.is_empty());
    manager.shutdown().await;
}

/// Every name of `session`'s announcement, pages included, read by `observer`; `None` while
/// it cannot be read whole.
async fn every_name(observer: &Session, session: &Session) -> Option<Vec<Announced>> {
    let a = announced(observer, session).await?;
    let mut pages = Vec::new();
    for k in 1..=a.page_count() {
        let name = page_semaphore(session.id(), k);
        let d = observer
            .describe_semaphore(&name, DescribeOptions::new().owners(true))
            .await
            .ok()?;
        let owner = d.owners.iter().find(|o| o.session_id == session.id())?;
        pages.push(Page::parse(&owner.data)?);
    }
    a.names_with(&pages).ok()
}

#[tokio::test(start_paused = true)]
async fn a_session_says_who_it_is_and_since_when_it_holds_and_waits() {
    let env = Env::new().await;
    let observer = env.session().await;
    let started = std::time::SystemTime::now();
    let a = env
        .session_with(announcing("worker a").timeout(Duration::from_secs(7)))
        .await;
    let b = env.session().await;
    let held = within(a.acquire("job", AcquireOptions::exclusive().ephemeral(true)))
        .await
        .unwrap();
    let _blocker = within(b.acquire("pool", AcquireOptions::exclusive().ephemeral(true)))
        .await
        .unwrap();
    let mut waiting = a.acquire("pool", AcquireOptions::exclusive().ephemeral(true));
    assert!(within(waiting.queued()).await);
    let mut watch = watch_announcements(&observer).await;
    until_announced(&observer, &mut watch, &a, &["job", "pool"]).await;
    let record = within(announced(&observer, &a)).await.unwrap();
    assert_eq!(record.version, 2);
    assert_eq!(record.pid, Some(std::process::id()));
    assert!(!record.tool.is_empty());
    assert_eq!(record.timeout_ms, Some(7_000));
    let ms = |t: std::time::SystemTime| {
        t.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64
    };
    // Paused time: the wall clock moved by real milliseconds only.
    let near = |v: Option<u64>| v.is_some_and(|v| v.abs_diff(ms(started)) < 60_000);
    assert!(
        near(record.started_ms) && near(record.contact_ms),
        "{record:?}"
    );
    let names = within(every_name(&observer, &a)).await.unwrap();
    assert_eq!(names.len(), 2);
    assert_eq!((names[0].name.as_str(), names[0].held), ("job", Some(true)));
    assert_eq!(
        (names[1].name.as_str(), names[1].held),
        ("pool", Some(false))
    );
    assert!(names.iter().all(|n| near(n.since_ms)), "{names:?}");
    drop((held, waiting));
}

#[tokio::test(start_paused = true)]
async fn every_name_is_announced_however_many_in_bounded_records_and_pages() {
    let env = Env::new().await;
    let observer = env.session().await;
    let a = env.session_with(announcing("many")).await;
    let many: Vec<String> = (0..300)
        .map(|i| format!("job-{i:03}-{}", "x".repeat(40)))
        .collect();
    let mut leases = Vec::new();
    for name in &many {
        let lease = within(a.acquire(name, AcquireOptions::exclusive().ephemeral(true)))
            .await
            .unwrap();
        leases.push(lease);
    }
    let all = |count: usize| {
        let (observer, a) = (&observer, &a);
        async move {
            loop {
                if let Some(names) = every_name(observer, a).await
                    && names.len() == count
                {
                    return names;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let names = within(all(leases.len())).await;
    let read: Vec<&str> = names.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(read, many.iter().map(String::as_str).collect::<Vec<_>>());
    let record = within(announced(&observer, &a)).await.unwrap();
    assert!(record.page_count() > 1, "{record:?}");
    let d = within(
        observer.describe_semaphore(ANNOUNCE_SEMAPHORE, DescribeOptions::new().owners(true)),
    )
    .await
    .unwrap();
    assert!(d.owners.iter().all(|o| o.data.len() <= ANNOUNCE_LIMIT));
    // Down to a few names: they fit in the record, and the pages are given back.
    let few = leases.len() - 2;
    for lease in leases.drain(..few) {
        within(lease.release()).await.unwrap();
    }
    let names = within(all(2)).await;
    assert_eq!(names.len(), 2);
    let gone = within(async {
        loop {
            let page = page_semaphore(a.id(), 1);
            if observer
                .describe_semaphore(&page, DescribeOptions::new())
                .await
                .is_err_and(|e| e.kind() == ErrorKind::NotFound)
            {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(gone);
    assert_eq!(
        within(announced(&observer, &a)).await.unwrap().page_count(),
        0
    );
}

#[tokio::test(start_paused = true)]
async fn a_session_that_holds_a_name_sends_its_record_again_once_per_session_timeout() {
    let env = Env::new().await;
    if !env.emulated() {
        return;
    }
    let a = env
        .session_with(announcing("holder").timeout(Duration::from_secs(5)))
        .await;
    let lease = within(a.acquire("job", AcquireOptions::exclusive().ephemeral(true)))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = env.emulator.traffic();
    tokio::time::sleep(Duration::from_secs(20)).await;
    let used = env.emulator.traffic().since(&before).requests;
    // Four refreshes in 20 s at one per 5 s timeout (the boundaries may add one).
    assert!((4..=5).contains(&used), "{used}");
    drop(lease);
}
