//! A lock space mutex's lock delay: after a holder lost the lock without releasing it, the
//! next holder gets its guard only once the delay has passed since its grant; after a clean
//! release at once. Each place of a name carries its own marker, so the delay holds across a
//! reshard, also when nobody held the name during the transition or its marker there is of an
//! older layout. Without the option, a space mutex costs what it did.
//!
//! One [`LockSpace`] is one process; the tests need several coordination nodes and the
//! emulator's session expiry, so they run on the emulator only.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::time::Duration;

use common::within;
use tokio::time::Instant;
use ydb_coordination::emulator::Emulator;
use ydb_coordination::space::{Layout, LockSpace};
use ydb_coordination::{Acquiring, Client, ErrorKind, Guard, Session, SessionOptions};
use ydb_coordination::{Mutex, MutexGuard};

const DELAY: Duration = Duration::from_secs(20);
/// What "at once" allows for the round trips of an acquire.
const PROMPT: Duration = Duration::from_secs(2);
const NODES: [&str; 3] = ["n1", "n2", "n3"];

/// The emulator path of the node a layout knows as `node`.
fn path(node: &str) -> String {
    format!("/local/{node}")
}

/// The nodes [`NODES`] on one emulator, and a client of it.
struct Cluster {
    emulator: Emulator,
    client: Client,
}

impl Cluster {
    async fn start() -> Self {
        let mut builder = Emulator::builder();
        for n in NODES {
            builder = builder.node(path(n));
        }
        let emulator = within(builder.start()).await.unwrap();
        let url = emulator.connection_string();
        let client = within(Client::connect(&url)).await.unwrap();
        Self { emulator, client }
    }

    /// A process running the fixed layout `layout`, given every node.
    async fn process(&self, layout: &Layout) -> LockSpace {
        let builder = NODES.iter().fold(LockSpace::builder(), |b, n| {
            b.node(n, &self.client, &path(n))
        });
        within(builder.layout(layout.clone()).open()).await.unwrap()
    }

    /// A process running `layout` that has run it for longer than the delay, so a place
    /// without a marker holds none of its locks back.
    async fn settled_process(&self, layout: &Layout) -> LockSpace {
        let space = self.process(layout).await;
        tokio::time::sleep(DELAY).await;
        space
    }

    /// Two processes of the layout of epoch 1 on every node, each settled.
    async fn two_settled(&self) -> (LockSpace, LockSpace) {
        let layout = Layout::new(1, NODES).unwrap();
        let p1 = self.process(&layout).await;
        let p2 = self.settled_process(&layout).await;
        (p1, p2)
    }

    /// Ends `space`'s session on `node` on the server, as its expiry does.
    async fn expire(&self, space: &LockSpace, node: &str) {
        let id = session(space, node).await.id();
        assert!(self.emulator.expire_session(&path(node), id));
    }
}

/// The layouts of a reshard: `A` on n1 and n2, the transition adding n3, `B`.
fn reshard() -> (Layout, Layout, Layout) {
    let a = Layout::new(1, ["n1", "n2"]).unwrap();
    let t = a.add_node("n3").unwrap();
    let b = t.finish().unwrap();
    (a, t, b)
}

/// The `n`-th name that moves to n3 in the transition `t`.
fn moved(t: &Layout, n: usize) -> String {
    (0..)
        .map(|i| format!("job-{i}"))
        .filter(|name| t.parts(name).len() == 2)
        .nth(n)
        .unwrap()
}

fn mutex(space: &LockSpace, name: &str) -> Mutex {
    space.mutex(name).lock_delay(DELAY)
}

/// `space`'s session on `node`.
async fn session(space: &LockSpace, node: &str) -> Session {
    within(space.manager(node).unwrap().current())
        .await
        .unwrap()
}

/// When `space`'s session on `node` learnt of its grant of `name`.
async fn grant(space: &LockSpace, node: &str, name: &str) -> Instant {
    let held = within(session(space, node).await.snapshot()).await.held;
    held.into_iter().find(|h| h.name == name).unwrap().since
}

/// Releases `guard` cleanly; every part must still have been held.
async fn release<G: Guard>(guard: G) {
    assert!(
        within(Guard::release(guard)).await.unwrap(),
        "a part was lost"
    );
}

/// `next` queues behind `guard`, which is then released cleanly: `next` has the lock at once.
async fn handed_over_at_once(guard: MutexGuard, next: &Mutex) -> MutexGuard {
    let mut waiting = next.lock();
    assert!(within(waiting.queued()).await);
    let released = Instant::now();
    release(guard).await;
    let taken = within(waiting).await.unwrap();
    assert!(released.elapsed() < PROMPT, "{:?}", released.elapsed());
    taken
}

/// Asserts that a guard granted at `granted` was returned at `returned`, the delay later.
fn waited_the_delay_from(granted: Instant, returned: Instant) {
    let waited = returned - granted;
    assert!(waited >= DELAY, "{waited:?}");
    assert!(waited < DELAY + PROMPT, "{waited:?}");
}

/// A reshard on one cluster: its layouts, a name that moves to n3, and its node in `A`.
struct Move {
    c: Cluster,
    a: Layout,
    t: Layout,
    b: Layout,
    name: String,
    old: String,
}

impl Move {
    async fn start() -> Self {
        let (a, t, b) = reshard();
        let name = moved(&t, 0);
        let old = a.parts(&name)[0].node.clone();
        let c = Cluster::start().await;
        Self {
            c,
            a,
            t,
            b,
            name,
            old,
        }
    }
}

#[tokio::test(start_paused = true)]
async fn after_a_clean_release_the_next_holder_gets_the_guard_at_once() {
    let c = Cluster::start().await;
    let (p1, p2) = c.two_settled().await;
    let guard = within(mutex(&p1, "job").lock()).await.unwrap();
    let next = handed_over_at_once(guard, &mutex(&p2, "job")).await;
    // And again through the generic release, to a try-lock.
    let released = Instant::now();
    within(Guard::release(next)).await.unwrap();
    let again = within(mutex(&p1, "job").try_lock()).await.unwrap();
    assert!(again.is_some());
    assert!(released.elapsed() < PROMPT, "{:?}", released.elapsed());
}

#[tokio::test(start_paused = true)]
async fn a_holder_whose_session_expired_makes_the_next_one_wait_the_delay_from_its_grant() {
    let c = Cluster::start().await;
    let (p1, p2) = c.two_settled().await;
    let node = p1.node_of("job");
    let guard = within(mutex(&p1, "job").lock()).await.unwrap();
    let mut waiting = mutex(&p2, "job").lock();
    assert!(within(waiting.queued()).await);
    c.expire(&p1, &node).await;
    let next = within(waiting).await.unwrap();
    let returned = Instant::now();
    waited_the_delay_from(grant(&p2, &node, "job").await, returned);
    assert!(guard.is_lost());
    assert!(next.fencing_token() > guard.fencing_token());
    // Its own clean release lets the one after it in at once.
    let after = handed_over_at_once(next, &mutex(&p1, "job")).await;
    release(after).await;
}

#[tokio::test(start_paused = true)]
async fn a_dropped_guard_and_a_bounded_hold_make_the_next_holder_wait() {
    let c = Cluster::start().await;
    let (p1, p2) = c.two_settled().await;
    let guard = within(mutex(&p1, "job").lock()).await.unwrap();
    drop(guard);
    let started = Instant::now();
    let next = within(mutex(&p2, "job").lock()).await.unwrap();
    assert!(started.elapsed() >= DELAY, "{:?}", started.elapsed());
    release(next).await;
    // A bounded hold never ends cleanly, even when its holder releases it.
    let bounded = within(mutex(&p1, "job").lock_for(DELAY * 3)).await.unwrap();
    release(bounded).await;
    let started = Instant::now();
    let next = within(mutex(&p2, "job").lock()).await.unwrap();
    assert!(started.elapsed() >= DELAY, "{:?}", started.elapsed());
    release(next).await;
}

#[tokio::test(start_paused = true)]
async fn a_holder_of_the_old_layout_lost_uncleanly_makes_a_holder_in_the_transition_wait() {
    let Move {
        c,
        a,
        t,
        b,
        name,
        old,
    } = Move::start().await;
    let (pa, pt) = (c.settled_process(&a).await, c.settled_process(&t).await);
    let guard = within(mutex(&pa, &name).lock()).await.unwrap();
    let mut waiting = mutex(&pt, &name).lock();
    assert!(within(waiting.queued()).await);
    c.expire(&pa, &old).await;
    let next = within(waiting).await.unwrap();
    let returned = Instant::now();
    assert_eq!(
        next.space_lease().unwrap().nodes(),
        [old.clone(), "n3".to_string()]
    );
    // The old place said the last tenure was unclean; the new one had no marker, and the
    // process has run the transition longer than the delay.
    waited_the_delay_from(grant(&pt, &old, &name).await, returned);
    assert!(guard.is_lost());
    // The transition's holder wrote its marker on the new place too: when it goes without
    // a clean release, a process of the next layout waits on that place.
    let pb = c.settled_process(&b).await;
    let mut waiting = mutex(&pb, &name).lock();
    assert!(within(waiting.queued()).await);
    drop(next);
    let after = within(waiting).await.unwrap();
    let returned = Instant::now();
    assert_eq!(after.space_lease().unwrap().nodes(), ["n3".to_string()]);
    waited_the_delay_from(grant(&pb, "n3", &name).await, returned);
    release(after).await;
}

/// A holder of `A` is lost on the old place (after a holder of the transition released
/// cleanly on both places, if `transition_first`); the first holder of `B`, started after
/// the loss, finds on its only place no marker, or a clean one of an older layout, and
/// waits out the delay since the loss all the same.
async fn lost_in_the_old_layout_then_taken_in_the_next(transition_first: bool) {
    let Move {
        c,
        a,
        t,
        b,
        name,
        old,
    } = Move::start().await;
    let pa = c.settled_process(&a).await;
    if transition_first {
        let pt = c.process(&t).await;
        release(within(mutex(&pt, &name).lock()).await.unwrap()).await;
    }
    let guard = within(mutex(&pa, &name).lock()).await.unwrap();
    c.expire(&pa, &old).await;
    within(guard.cancelled()).await;
    let lost = Instant::now();
    let pb = c.process(&b).await;
    let taken = within(mutex(&pb, &name).lock()).await.unwrap();
    assert_eq!(taken.space_lease().unwrap().nodes(), ["n3".to_string()]);
    assert!(lost.elapsed() >= DELAY, "{:?}", lost.elapsed());
    release(taken).await;
}

#[tokio::test(start_paused = true)]
async fn a_holder_of_the_next_layout_waits_after_an_unclean_end_nobody_held_the_name_since() {
    lost_in_the_old_layout_then_taken_in_the_next(false).await;
}

#[tokio::test(start_paused = true)]
async fn a_clean_release_in_the_transition_does_not_hide_a_later_unclean_end_in_the_old_layout() {
    lost_in_the_old_layout_then_taken_in_the_next(true).await;
}

#[tokio::test(start_paused = true)]
async fn a_name_new_to_its_node_waits_only_the_rest_of_the_delay_since_the_process_started() {
    let c = Cluster::start().await;
    let layout = Layout::new(1, NODES).unwrap();
    let space = c.process(&layout).await;
    let opened = Instant::now();
    tokio::time::sleep(DELAY / 4).await;
    let first = within(mutex(&space, "fresh-1").lock()).await.unwrap();
    let waited = opened.elapsed();
    assert!(waited >= DELAY, "{waited:?}");
    assert!(waited < DELAY + PROMPT, "{waited:?}");
    release(first).await;
    // Past the delay since it started, a name new to its node is taken at once.
    let started = Instant::now();
    let second = within(mutex(&space, "fresh-2").lock()).await.unwrap();
    assert!(started.elapsed() < PROMPT, "{:?}", started.elapsed());
    release(second).await;
}

#[tokio::test(start_paused = true)]
async fn a_space_mutex_without_a_delay_on_the_same_name_is_refused() {
    let c = Cluster::start().await;
    let layout = Layout::new(1, NODES).unwrap();
    let (p1, p2) = (c.process(&layout).await, c.process(&layout).await);
    let guard = within(mutex(&p1, "job").lock()).await.unwrap();
    let plain = within(p2.mutex("job").try_lock()).await;
    assert_eq!(plain.err().map(|e| e.kind()), Some(ErrorKind::ModeMismatch));
    release(guard).await;
}

/// `work`'s outcome, and the requests the servers had while it ran and one second after.
async fn requests<T>(c: &Cluster, work: impl IntoFuture<Output = T>) -> (T, u64) {
    let before = c.emulator.traffic();
    let done = within(work).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    (done, c.emulator.traffic().since(&before).requests)
}

/// Requests one lock and release of `lock()`'s lock cost, once its semaphores exist.
async fn cost<G: Guard>(c: &Cluster, lock: impl Fn() -> Acquiring<G>) -> (u64, u64) {
    within(lock().await.unwrap().release()).await.unwrap();
    let (guard, locked) = requests(c, lock()).await;
    let (released, unlocked) = requests(c, guard.unwrap().release()).await;
    assert!(released.unwrap(), "the lock was lost");
    (locked, unlocked)
}

#[tokio::test(start_paused = true)]
async fn the_cost_of_a_lock_delay_is_six_requests_per_place_per_lock_and_two_per_release() {
    let c = Cluster::start().await;
    let (a, t, _) = reshard();
    let (name, other) = (moved(&t, 0), moved(&t, 1));
    let (pa, pt) = (c.settled_process(&a).await, c.settled_process(&t).await);
    // Without the option, a space mutex costs what the node's own mutex costs.
    let manager = c.client.session_manager(&path("n1"), SessionOptions::new());
    let on_node = cost(&c, || manager.mutex("on-node").lock()).await;
    let plain = cost(&c, || pa.mutex(&other).lock()).await;
    assert_eq!(plain, on_node);
    // One place, then two in the transition: at most six more per place per lock, two more
    // per place per release.
    for (space, places) in [(&pa, 1), (&pt, 2)] {
        let plain = cost(&c, || space.mutex(&other).lock()).await;
        let delayed = cost(&c, || mutex(space, &name).lock()).await;
        let most = (plain.0 + 6 * places, plain.1 + 2 * places);
        assert!(
            delayed.0 <= most.0 && delayed.1 <= most.1,
            "{places} places: plain {plain:?}, delayed {delayed:?}"
        );
    }
    manager.shutdown().await;
}
