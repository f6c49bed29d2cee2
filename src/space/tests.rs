//! The shell around the space core: a contradiction published at any moment of a lock's
//! entry, and a ticket dropped while the judge holds the gate shut, never hang the space
//! (the check and the claim are one call under the core's lock, and nothing calls back into
//! the space while that lock or a watch borrow is held).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::core::SpaceCore;
use super::{Layout, Shared, State};
use crate::config::SessionOptions;
use crate::error::ErrorKind;

fn layout(epoch: u64, nodes: &[&str]) -> Layout {
    Layout::new(epoch, nodes.iter().copied()).unwrap_or_else(|e| panic!("{e}"))
}

/// A space's shell with a directory's rules and no node: a confirmed member running `a`.
fn shell(a: &Layout) -> Arc<Shared> {
    let given = ["n1", "n2", "n3"].map(String::from);
    let core = SpaceCore::new(a.clone(), given, true, Instant::now());
    let shared = Arc::new(Shared {
        nodes: BTreeMap::new(),
        options: SessionOptions::new(),
        layout: watch::Sender::new(core.layout().clone()),
        gate: watch::Sender::new(0),
        reported: watch::Sender::new(core.reported()),
        state: StdMutex::new(State {
            core,
            lost: HashMap::new(),
        }),
        directory: None,
        keeper: Default::default(),
        waits: Default::default(),
        _stop: None,
    });
    shared.published_value(Ok(a.clone()));
    shared.member_confirmed();
    shared
}

#[tokio::test(start_paused = true)]
async fn a_contradiction_before_or_after_a_lock_enters_never_hangs_it() {
    let a = layout(3, &["n1", "n2"]);
    let other = layout(3, &["n1", "n3"]);
    let shared = shell(&a);
    let bound = Duration::from_secs(1);
    // Published before the lock enters: it is refused at its bound, and claims nothing.
    shared.published_value(Ok(other.clone()));
    let refused = shared.enter(Some(Instant::now() + bound)).await;
    assert_eq!(
        refused.err().map(|e| e.kind()),
        Some(ErrorKind::PreconditionFailed)
    );
    // The running layout again, with nothing held: the gate opens.
    shared.published_value(Ok(a.clone()));
    let (_, ticket) = shared
        .enter(Some(Instant::now()))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // Published while the lock holds its claim: the claim is lost, the gate shuts, and
    // dropping the ticket (which judges the last published layout again) returns.
    shared.published_value(Ok(other));
    assert!(ticket.lost().is_cancelled());
    shared.published_value(Ok(a.clone()));
    drop(ticket);
    let entered = shared.enter(Some(Instant::now() + bound)).await;
    assert!(entered.is_ok(), "{:?}", entered.err());
}

/// Locks entering and leaving on several threads while contradictions and the running
/// layout are published in turn: everything ends (a deadlock would hang the runtime).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn locks_and_contradictions_on_many_threads_never_deadlock() {
    let a = layout(3, &["n1", "n2"]);
    let other = layout(3, &["n1", "n3"]);
    let shared = shell(&a);
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let shared = shared.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..2_000 {
                let deadline = Instant::now() + Duration::from_millis(1);
                if let Ok((_, ticket)) = shared.enter(Some(deadline)).await {
                    tokio::task::yield_now().await;
                    drop(ticket);
                }
            }
        }));
    }
    let judge = shared.clone();
    tasks.push(tokio::spawn(async move {
        for i in 0..4_000 {
            let published = if i % 2 == 0 { &other } else { &a };
            judge.published_value(Ok(published.clone()));
            tokio::task::yield_now().await;
        }
    }));
    let all = futures::future::join_all(tasks);
    let done = tokio::time::timeout(Duration::from_secs(60), all).await;
    assert!(done.is_ok(), "the space deadlocked");
}
