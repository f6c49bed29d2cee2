//! A lock space's locks live inside the process's membership in its directory, against the
//! emulator over TCP: a process cut off from its directory (while it still reaches its lock
//! nodes) takes no lock and loses those it holds before the directory stops listing it, so
//! no operator step meets a lock it cannot see; a bounded lock in a transition stays bounded
//! while the directory does not answer, and gives its places back; a published layout that
//! contradicts the one a process runs shuts that process's space until the directory is
//! consistent again.
//!
//! One [`LockSpace`] is one process. The process under test reaches the directory node
//! through a fault proxy of its own and its lock nodes directly.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::within;
use tokio::time::Instant;
use ydb_coordination::emulator::{Emulator, FaultProxy};
use ydb_coordination::space::{Layout, LockSpace, SpaceDirectory, SpaceGuard};
use ydb_coordination::{Client, ErrorKind, SessionOptions};

const DIR: &str = "/local/dir";
const SPACE: &str = "billing";
const NODES: [&str; 3] = ["n1", "n2", "n3"];

/// The session timeout of the process under test (its nodes' and its directory's).
const TIMEOUT: Duration = Duration::from_secs(2);

fn path(node: &str) -> String {
    format!("/local/{node}")
}

fn layout<const N: usize>(epoch: u64, nodes: [&str; N]) -> Layout {
    Layout::new(epoch, nodes).unwrap()
}

/// One emulator with the lock nodes and the directory; a client of it, and one that reaches
/// it through `proxy`.
struct Cluster {
    _emulator: Emulator,
    client: Client,
    proxy: FaultProxy,
    behind: Client,
}

impl Cluster {
    async fn start() -> Self {
        let builder = NODES
            .iter()
            .fold(Emulator::builder().node(DIR), |b, n| b.node(path(n)));
        let emulator = within(builder.start()).await.unwrap();
        let client = within(Client::connect(&emulator.connection_string()))
            .await
            .unwrap();
        let proxy = within(FaultProxy::start(emulator.local_addr()))
            .await
            .unwrap();
        let behind = within(
            Client::builder(proxy.connection_string(emulator.database()))
                .discovery(false)
                .build(),
        )
        .await
        .unwrap();
        Self {
            _emulator: emulator,
            client,
            proxy,
            behind,
        }
    }

    /// The operator's side, `initial` published.
    async fn directory(&self, initial: &Layout) -> SpaceDirectory {
        let directory =
            SpaceDirectory::new(&self.client, DIR, SPACE, SessionOptions::new()).unwrap();
        within(directory.init(initial.clone())).await.unwrap();
        directory
    }

    /// A process that reaches every node directly.
    async fn process(&self) -> LockSpace {
        let builder = NODES.iter().fold(LockSpace::builder(), |b, n| {
            b.node(n, &self.client, &path(n))
        });
        within(builder.directory(&self.client, DIR, SPACE).open())
            .await
            .unwrap()
    }

    /// The process under test: its lock nodes directly, its directory through the proxy.
    async fn cut_off_process(&self) -> LockSpace {
        let builder = NODES.iter().fold(LockSpace::builder(), |b, n| {
            b.node(n, &self.client, &path(n))
        });
        let builder = builder
            .session_options(SessionOptions::new().timeout(TIMEOUT))
            .directory(&self.behind, DIR, SPACE);
        within(builder.open()).await.unwrap()
    }

    /// Publishes `layout` past the directory's steps, as a careless operator would.
    async fn overwrite(&self, layout: &Layout) {
        let manager = self.client.session_manager(DIR, SessionOptions::new());
        let published = manager.published(&format!("{SPACE}/layout"));
        within(published.publish(&layout.to_bytes())).await.unwrap();
        within(manager.shutdown()).await;
    }
}

/// A name placed on `from` in `a` and on `to` in `b`.
fn moving(a: &Layout, b: &Layout, from: &str, to: &str) -> String {
    (0..)
        .map(|i| format!("acct-{i}"))
        .find(|n| {
            a.parts(n).first().map(|p| p.node.as_str()) == Some(from)
                && b.parts(n).first().map(|p| p.node.as_str()) == Some(to)
        })
        .unwrap()
}

async fn members(directory: &SpaceDirectory) -> usize {
    within(directory.members()).await.unwrap().len()
}

/// Polls `check` (bounded, sleeping between polls) until it is true.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    for _ in 0..400 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("never: {what}");
}

async fn try_lock(space: &LockSpace, name: &str) -> ydb_coordination::Result<Option<SpaceGuard>> {
    within(space.mutex(name).try_lock()).await
}

/// 1 (a). A process cut off from its directory while the fleet reshards past it takes no
/// lock in its old layout next to a holder in the new one; once it reaches the directory
/// again it runs the new layout.
#[tokio::test(start_paused = true)]
async fn a_process_cut_off_from_its_directory_takes_no_lock_in_the_old_layout() {
    let c = Cluster::start().await;
    let a = layout(1, ["n1", "n2"]);
    let b = a.add_node("n3").unwrap().finish().unwrap();
    let directory = c.directory(&a).await;
    let cut = c.cut_off_process().await;
    assert_eq!(members(&directory).await, 1);

    c.proxy.net().stall();
    eventually("the directory drops the cut-off process", || async {
        members(&directory).await == 0
    })
    .await;
    // Nobody lags: both steps are accepted.
    within(directory.begin_add("n3")).await.unwrap();
    assert_eq!(within(directory.finish()).await.unwrap(), b);
    let fresh = c.process().await;
    assert_eq!(fresh.layout().epoch(), b.epoch());
    let name = moving(&a, &b, "n1", "n3");
    let held = try_lock(&fresh, &name).await.unwrap().unwrap();

    // The cut-off process still runs `A`, where the name is free on n1: it must not take it.
    assert_eq!(cut.layout().epoch(), a.epoch());
    let err = try_lock(&cut, &name).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    let start = Instant::now();
    let err = within(cut.mutex(&name).lock_timeout(Duration::from_secs(1)))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    assert!(
        start.elapsed() <= Duration::from_millis(1100),
        "{:?}",
        start.elapsed()
    );

    // Back in touch: it joins again, runs `B`, and meets the holder there.
    c.proxy.net().resume();
    let mut layouts = cut.layout_changes();
    within(layouts.wait_for(|l| l.epoch() == b.epoch()))
        .await
        .unwrap();
    drop(layouts);
    let busy = within(cut.mutex(&name).lock_timeout(Duration::from_secs(10))).await;
    assert!(busy.unwrap().is_none());
    assert!(within(held.unlock()).await.unwrap());
    let mine = within(cut.mutex(&name).lock_timeout(Duration::from_secs(10)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(mine.epoch(), b.epoch());
    assert_eq!(members(&directory).await, 2);
}

/// 1 (b). A lock held by a process whose directory connection stalls (the server then
/// expires its directory session by itself) is lost before the directory stops listing the
/// process: no operator step can meet it.
#[tokio::test(start_paused = true)]
async fn a_held_lock_is_lost_before_the_directory_stops_listing_its_process() {
    let c = Cluster::start().await;
    let a = layout(1, ["n1", "n2"]);
    let directory = c.directory(&a).await;
    let cut = c.cut_off_process().await;
    let guard = try_lock(&cut, "nightly").await.unwrap().unwrap();
    c.proxy.net().stall();
    let stalled = Instant::now();
    let mut lost_at = None;
    for _ in 0..400 {
        if lost_at.is_none() && guard.is_lost() {
            lost_at = Some(Instant::now());
        }
        if members(&directory).await == 0 {
            assert!(
                guard.is_lost(),
                "the directory dropped the process {:?} after the stall while its lock was held",
                stalled.elapsed()
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let lost_at = lost_at.unwrap();
    assert!(lost_at - stalled < TIMEOUT, "{:?}", lost_at - stalled);
    // No new lock while it is not a member.
    assert_eq!(
        try_lock(&cut, "nightly").await.unwrap_err().kind(),
        ErrorKind::Unavailable
    );
}

/// 2. A bounded lock of a moved name in a transition ends near its bound while the
/// directory does not answer (its fencing token needs the published layout), and gives
/// back both places.
#[tokio::test(start_paused = true)]
async fn a_bounded_lock_in_a_transition_is_bounded_while_the_directory_is_silent() {
    let c = Cluster::start().await;
    let a = layout(1, ["n1", "n2"]);
    let directory = c.directory(&a).await;
    let t = within(directory.begin_add("n3")).await.unwrap();
    let cut = c.cut_off_process().await;
    assert_eq!(cut.layout().epoch(), t.epoch());
    let name = moving(&a, &t.finish().unwrap(), "n1", "n3");
    assert_eq!(t.parts(&name).len(), 2);

    c.proxy.net().stall();
    for bound in [Duration::from_millis(500), Duration::ZERO] {
        let start = Instant::now();
        let err = within(cut.mutex(&name).lock_timeout(bound))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unavailable);
        // The bound, or one read past it for a try.
        let took = start.elapsed();
        assert!(
            took <= bound.max(Duration::from_secs(1)) + Duration::from_millis(100),
            "{took:?}"
        );
        // Both places were given back.
        let other = c.process().await;
        let guard = try_lock(&other, &name).await.unwrap().unwrap();
        assert!(within(guard.unlock()).await.unwrap());
        within(other.shutdown()).await;
    }
}

/// 3. A layout of the same epoch with other nodes, written over the published one, shuts
/// a running process's space (its locks lost, no new one, the error reported) while a
/// process opened afterwards runs it; publishing the process's layout again reopens it; an
/// older epoch shuts it the same way.
#[tokio::test(start_paused = true)]
async fn a_contradicting_layout_shuts_the_space_until_the_directory_is_consistent() {
    let c = Cluster::start().await;
    let a = layout(1, ["n1", "n2"]);
    let directory = c.directory(&a).await;
    let running = c.process().await;
    let held = try_lock(&running, "nightly").await.unwrap().unwrap();

    let rewritten = layout(1, ["n3"]);
    c.overwrite(&rewritten).await;
    within(held.cancelled()).await;
    eventually("the contradiction is reported", || async {
        running.layout_error().is_some()
    })
    .await;
    assert_eq!(
        running.layout_error().unwrap().kind(),
        ErrorKind::PreconditionFailed
    );
    assert_eq!(*running.layout(), a);
    let later = c.process().await;
    assert_eq!(*later.layout(), rewritten);
    let theirs = try_lock(&later, "acct-0").await.unwrap().unwrap();
    assert_eq!(
        try_lock(&running, "acct-0").await.unwrap_err().kind(),
        ErrorKind::PreconditionFailed
    );
    drop(theirs);

    // The directory's own layout again: the running process goes on.
    c.overwrite(&a).await;
    eventually("the contradiction clears", || async {
        running.layout_error().is_none()
    })
    .await;
    let guard = try_lock(&running, "acct-0").await.unwrap().unwrap();
    assert!(within(guard.unlock()).await.unwrap());
    within(later.shutdown()).await;

    // An older epoch than the one run.
    let t = within(directory.begin_add("n3")).await.unwrap();
    let mut layouts = running.layout_changes();
    within(layouts.wait_for(|l| l.epoch() == t.epoch()))
        .await
        .unwrap();
    c.overwrite(&a).await;
    eventually("the older epoch is refused", || async {
        running.layout_error().is_some()
    })
    .await;
    assert_eq!(running.layout().epoch(), t.epoch());
    assert!(try_lock(&running, "acct-1").await.is_err());
    c.overwrite(&t).await;
    eventually("the contradiction clears", || async {
        running.layout_error().is_none()
    })
    .await;
    assert!(try_lock(&running, "acct-1").await.unwrap().is_some());
}
