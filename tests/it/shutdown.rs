//! Recipes of a session manager after its shutdown: each ends promptly with the manager's
//! `SessionClosed` (a stream with it as its last item, then `None`) rather than starting
//! over. A recipe that started over would spin inside one poll and freeze its runtime, so
//! each scenario runs on a runtime of its own in a thread, joined with a wall-clock limit.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::future::Future;
use std::sync::mpsc;
use std::time::Duration;

use common::{Env, within};
use futures::{FutureExt, Stream, StreamExt};
use ydb_coordination::{
    Error, ErrorKind, SessionManager, SessionOptions, recipes::MembershipState,
};

/// How long a scenario may take in real time (each takes milliseconds when nothing spins).
const WALL: Duration = Duration::from_secs(30);

/// Runs `scenario` on a current-thread runtime with paused time in a thread of its own,
/// and fails if it has not finished within [`WALL`] (a recipe spinning inside a poll never
/// lets it finish) or panicked.
fn bounded<F, Fut>(scenario: F)
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()>,
{
    let (done, finished) = mpsc::channel();
    let thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        runtime.block_on(scenario());
        let _ = done.send(());
    });
    match finished.recv_timeout(WALL) {
        Ok(()) => thread.join().unwrap(),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            if let Err(panic) = thread.join() {
                std::panic::resume_unwind(panic);
            }
        }
        // The thread is left behind, spinning: the test has failed.
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("the scenario did not finish: a spin"),
    }
}

/// A manager on the test node, with its first session live.
async fn manager(env: &Env) -> SessionManager {
    let manager = env.client.session_manager(&env.node, SessionOptions::new());
    within(manager.current()).await.unwrap();
    manager
}

/// Asserts that `result` is the manager's shutdown error.
fn closed<T: std::fmt::Debug>(result: Result<T, Error>) {
    assert_eq!(result.unwrap_err().kind(), ErrorKind::SessionClosed);
}

/// Polls `f` once: it must be ready at once.
fn once<F: Future>(f: F) -> F::Output {
    f.now_or_never().expect("ready at its first poll")
}

/// Reads `stream` to its end (at most a few items): the last item is the manager's
/// shutdown error, then the stream ends.
async fn ends_closed<S, T>(mut stream: S)
where
    S: Stream<Item = Result<T, Error>> + Unpin,
    T: std::fmt::Debug,
{
    let mut last = None;
    for _ in 0..8 {
        match within(stream.next()).await {
            Some(item) => last = Some(item),
            None => {
                closed(last.expect("an item before the end"));
                return;
            }
        }
    }
    panic!("the stream goes on after the shutdown: {last:?}");
}

#[test]
fn a_membership_ends_with_the_shutdown_and_shutdown_returns() {
    bounded(|| async {
        let env = Env::new().await;
        let manager = manager(&env).await;
        let membership = within(manager.group("workers").join(b"a")).await.unwrap();
        let mut states = membership.state_changes();
        within(manager.shutdown()).await;
        let state = within(states.wait_for(|s| matches!(s, MembershipState::Ended(_))))
            .await
            .unwrap()
            .clone();
        let MembershipState::Ended(Some(e)) = state else {
            panic!("ended without the manager's error: {state:?}");
        };
        assert_eq!(e.kind(), ErrorKind::SessionClosed);
        closed(within(membership.joined()).await);
    });
}

#[test]
fn every_recipe_verb_after_a_shutdown_fails_at_its_first_poll() {
    bounded(|| async {
        let env = Env::new().await;
        let manager = manager(&env).await;
        within(manager.shutdown()).await;
        assert!(manager.is_stopped());

        let mutex = manager.mutex("m");
        closed(once(mutex.lock()));
        closed(once(mutex.try_lock()));
        closed(once(mutex.lock_timeout(Duration::from_secs(1))));
        closed(once(mutex.lock_for(Duration::from_secs(1))));
        let semaphore = manager.semaphore("s", 2);
        closed(once(semaphore.acquire(1)));
        closed(once(semaphore.try_acquire(1)));
        let rwlock = manager.rwlock("rw");
        closed(once(rwlock.read()));
        closed(once(rwlock.write()));
        let election = manager.election("e");
        closed(once(election.campaign(b"a")));
        closed(once(election.try_campaign(b"a")));
        closed(once(election.leader()));
        closed(once(election.candidates()));
        let group = manager.group("g");
        closed(once(group.members()));
        let published = manager.published("p");
        closed(once(published.publish(b"v")));
        closed(once(published.get()));
        closed(once(manager.multi_lock(["x", "y"]).lock()));
        closed(once(manager.multi_lock(["x", "y"]).try_lock()));
        // A join waits for the task that keeps the membership.
        closed(within(group.join(b"a")).await);

        // Streams: the error, then the end, each at the first poll.
        let mut held = mutex.hold();
        closed(once(held.next()).unwrap());
        assert!(once(held.next()).is_none());
        let mut held = semaphore.hold(1);
        closed(once(held.next()).unwrap());
        assert!(once(held.next()).is_none());
        let mut held = rwlock.hold_read();
        closed(once(held.next()).unwrap());
        assert!(once(held.next()).is_none());
        let mut held = rwlock.hold_write();
        closed(once(held.next()).unwrap());
        assert!(once(held.next()).is_none());
        let mut held = election.hold(b"a");
        closed(once(held.next()).unwrap());
        assert!(once(held.next()).is_none());
        let mut watch = group.watch();
        closed(once(watch.next()).unwrap());
        assert!(once(watch.next()).is_none());
        let mut values = published.subscribe();
        closed(once(values.next()).unwrap());
        assert!(once(values.next()).is_none());
        let mut leaders = election.observe();
        closed(once(leaders.next()).unwrap());
        assert!(once(leaders.next()).is_none());
    });
}

#[test]
fn recipes_in_progress_at_a_shutdown_end_with_it() {
    bounded(|| async {
        let env = Env::new().await;
        let manager = manager(&env).await;
        let other = env.session().await;

        // A lock queued behind another session's, and one held for ever.
        let _taken = within(other.mutex("m").lock()).await.unwrap();
        let mut queued = manager.mutex("m").lock();
        assert!(within(queued.queued()).await);
        let mut held = manager.mutex("h").hold();
        let guard = within(held.next()).await.unwrap().unwrap();
        // Streams following state, each past its first item.
        let mut watch = manager.group("g").watch();
        within(watch.next()).await.unwrap().unwrap();
        let mut values = manager.published("p").subscribe();
        within(values.next()).await.unwrap().unwrap();
        let mut leaders = manager.election("e").observe();
        within(leaders.next()).await.unwrap().unwrap();

        within(manager.shutdown()).await;
        closed(within(queued).await);
        within(guard.cancelled()).await;
        ends_closed(held).await;
        ends_closed(watch).await;
        ends_closed(values).await;
        ends_closed(leaders).await;
    });
}

#[test]
fn a_session_lost_as_the_manager_stops_ends_with_the_managers_error() {
    bounded(|| async {
        let env = Env::new().await;
        if !env.emulated() {
            return;
        }
        let manager = manager(&env).await;
        let other = env.session().await;
        let _taken = within(other.mutex("m").lock()).await.unwrap();
        let mut queued = manager.mutex("m").lock();
        assert!(within(queued.queued()).await);

        // The server expires the session under the queued lock, and the manager is shut
        // down before the lock is polled again: what the lock saw is a lost session, what
        // it ends with is the manager's own error.
        let session = within(manager.current()).await.unwrap();
        assert!(env.emulator.expire_session("app", session.id()));
        let mut states = session.state_changes();
        within(states.wait_for(|s| s.is_terminal())).await.unwrap();
        within(manager.shutdown()).await;
        closed(within(queued).await);
    });
}
