//! The lock space against the emulator over TCP: names land where placement says, exclusion
//! and limits hold in both phases of a reshard (and would not without the transition),
//! fencing tokens grow across a move, the locks a space holds are watched by one task of
//! the space (which releases a dropped guard's parts) and its bounded holds and memberships
//! wait in one more (what a runtime that shut down kept reads as lost or ended), the
//! operator's steps wait for lagging members, a layout that cannot be followed or that
//! skips an epoch is handled, a node down affects only its names, multi-locks are all or
//! nothing, bad input is refused by kind, a publication keeps its value through a reshard, a
//! membership ends with its error and leaves without waiting for a move, and a process's
//! locks live inside its membership in the directory (cut off from it, it takes and keeps
//! none; a layout that contradicts its own shuts it; a bounded lock stays bounded while the
//! directory is silent).
//!
//! One [`LockSpace`] is one process (one session per node): two holders of a name in one
//! space would queue in the client, so every test that needs two holders opens two spaces.
//! The tests need several coordination nodes and the emulator's fault controls, so they run
//! on the emulator only.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::within;
use tokio::time::Instant;
use ydb_coordination::emulator::{Emulator, FaultProxy};
use ydb_coordination::recipes::MembershipState;
use ydb_coordination::space::placement::place;
use ydb_coordination::space::{Layout, LockSpace, LockSpaceBuilder, SpaceDirectory};
use ydb_coordination::{
    Client, ErrorKind, FencingToken, Session, SessionOptions, config::DescribeOptions,
    config::MAX_NAME_LEN,
};
use ydb_coordination::{Guard, MutexGuard, SemaphorePermit};

/// The directory node of the tests that have one, and the space's name there.
const DIR: &str = "/local/dir";
const SPACE: &str = "billing";

/// The emulator path of the node a layout knows as `node`.
fn path(node: &str) -> String {
    format!("/local/{node}")
}

/// The lock nodes of one emulator.
const NODES: [&str; 3] = ["n1", "n2", "n3"];

/// One emulator with the lock nodes [`NODES`] and the directory node, and a client of it.
struct Cluster {
    emulator: Emulator,
    client: Client,
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
        Self { emulator, client }
    }

    /// A builder of a space given `nodes`.
    fn builder(&self, nodes: &[&str]) -> LockSpaceBuilder {
        nodes.iter().fold(LockSpace::builder(), |b, n| {
            b.node(n, &self.client, &path(n))
        })
    }

    /// A process running the fixed layout `layout`, given every node.
    async fn fixed(&self, layout: &Layout) -> LockSpace {
        within(self.builder(&NODES).layout(layout.clone()).open())
            .await
            .unwrap()
    }

    /// A process following the directory of [`SPACE`], given `nodes`.
    async fn following(&self, nodes: &[&str]) -> LockSpace {
        let builder = self.builder(nodes).directory(&self.client, DIR, SPACE);
        within(builder.open()).await.unwrap()
    }

    /// The operator's side of [`SPACE`], its first layout `initial` published.
    async fn directory(&self, initial: &Layout) -> SpaceDirectory {
        let options = SessionOptions::new();
        let directory = SpaceDirectory::new(&self.client, DIR, SPACE, options).unwrap();
        within(directory.init(initial.clone())).await.unwrap();
        directory
    }
}

fn layout<const N: usize>(epoch: u64, nodes: [&str; N]) -> Layout {
    Layout::new(epoch, nodes).unwrap()
}

/// The reshard of every multi-layout test: `A` on n1 and n2, the transition adding n3, `B`.
fn reshard() -> (Layout, Layout, Layout) {
    let a = layout(1, ["n1", "n2"]);
    let t = a.add_node("n3").unwrap();
    let b = t.finish().unwrap();
    (a, t, b)
}

/// The first `n` of the names `{prefix}-0`, `{prefix}-1`, ... that `keep` keeps.
fn names_where(prefix: &str, n: usize, keep: impl Fn(&str) -> bool) -> Vec<String> {
    (0..)
        .map(|i| format!("{prefix}-{i}"))
        .filter(|name| keep(name))
        .take(n)
        .collect()
}

/// `n` names that move in the transition `t` (placed twice in it).
fn moved(t: &Layout, n: usize) -> Vec<String> {
    let names = names_where("job", n, |name| t.parts(name).len() == 2);
    assert!(names.iter().all(|name| t.parts(name)[1].node == "n3"));
    names
}

/// `space`'s try-lock of `name`: the guard, or `None` when someone holds it.
async fn try_lock(space: &LockSpace, name: &str) -> Option<MutexGuard> {
    within(space.mutex(name).try_lock()).await.unwrap()
}

/// `space` takes `name`, which must be free.
async fn take(space: &LockSpace, name: &str) -> MutexGuard {
    try_lock(space, name)
        .await
        .unwrap_or_else(|| panic!("{name} is held"))
}

/// Releases `guard`, which must still have held every part.
async fn unlock<G: Guard>(guard: G) {
    assert!(
        within(Guard::release(guard)).await.unwrap(),
        "a part was lost"
    );
}

/// `space`'s session on `node`.
async fn session(space: &LockSpace, node: &str) -> Session {
    within(space.manager(node).unwrap().current())
        .await
        .unwrap()
}

/// The tokens held of the semaphore `name` on `node` (as a describe through `space` shows),
/// and the sessions holding it; `None` when the node has no such semaphore.
async fn held_on(space: &LockSpace, node: &str, name: &str) -> Option<(u64, Vec<u64>)> {
    let session = session(space, node).await;
    match within(session.describe_semaphore(name, DescribeOptions::new().owners(true))).await {
        Ok(d) => Some((d.count, d.owners.iter().map(|o| o.session_id).collect())),
        Err(e) if e.kind() == ErrorKind::NotFound => None,
        Err(e) => panic!("describe {name} on {node}: {e}"),
    }
}

/// Waits (bounded) until `space` runs the layout of `epoch`.
async fn follows(space: &LockSpace, epoch: u64) {
    let mut changes = space.layout_changes();
    within(changes.wait_for(|l| l.epoch() == epoch))
        .await
        .unwrap();
}

/// Polls `check` (bounded, sleeping between polls) until it is true.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    for _ in 0..200 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("never: {what}");
}

/// Waits (bounded) until the directory sees no member lagging behind the published layout.
async fn none_lagging(directory: &SpaceDirectory) {
    eventually("no member lags", || async {
        within(directory.lagging()).await.unwrap().is_empty()
    })
    .await;
}

/// 1. Each lock lands on the node `node_of` names (the placement function's answer), and
///    only there; 60 names use all three nodes.
#[tokio::test(start_paused = true)]
async fn each_lock_lands_on_its_node_and_names_spread_over_all() {
    let c = Cluster::start().await;
    let space = c.fixed(&layout(1, NODES)).await;
    let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
    for i in 0..60 {
        let name = format!("tenant-{i}/migrate");
        let node = space.node_of(&name);
        assert_eq!(Some(node.as_str()), place(NODES, &name), "{name}");
        let guard = take(&space, &name).await;
        assert_eq!(
            guard.space_lease().unwrap().nodes(),
            std::slice::from_ref(&node)
        );
        let me = session(&space, &node).await.id();
        for other in NODES {
            let owners = held_on(&space, other, &name).await.map(|h| h.1);
            if other == node {
                assert_eq!(owners, Some(vec![me]), "{name} on {other}");
            } else {
                assert_eq!(owners, None, "{name} on {other} too");
            }
        }
        unlock(guard).await;
        *per_node.entry(node).or_default() += 1;
    }
    assert_eq!(per_node.len(), 3, "{per_node:?}");
    assert!(per_node.values().all(|&n| n >= 10), "{per_node:?}");
}

/// A lock of `space` (running `l`) on every node: its sessions, and the space's task that
/// watches its locks, run from here on.
async fn warm(space: &LockSpace, l: &Layout) -> Vec<MutexGuard> {
    let mut held = Vec::new();
    for node in NODES {
        let name = names_where("warm", 1, |n| l.parts(n)[0].node == node).remove(0);
        held.push(take(space, &name).await);
    }
    held
}

/// Two processes of a space running one part over every node, the first with a lock on
/// each node (see [`warm`]), and the cluster under them (keep it while they are used).
async fn warmed_pair() -> (Cluster, LockSpace, LockSpace, Vec<MutexGuard>) {
    let c = Cluster::start().await;
    let l = layout(1, NODES);
    let space = c.fixed(&l).await;
    let other = c.fixed(&l).await;
    let first = warm(&space, &l).await;
    (c, space, other, first)
}

/// Waits (bounded) until `other` can take each of `names`, and lets it go again.
async fn free_again(other: &LockSpace, names: &[String]) {
    for name in names {
        eventually(&format!("{name} is free again"), || async {
            match try_lock(other, name).await {
                Some(guard) => {
                    unlock(guard).await;
                    true
                }
                None => false,
            }
        })
        .await;
    }
}

/// 1b. The locks a space holds are watched by one task of the space, and its bounded holds
///     wait for their deadlines in one more, not a task each: 40 held locks and 20 bounded
///     holds start at most that one; dropped guards are released by the first (another
///     process takes each name), and each bounded hold ends at its deadline.
#[tokio::test(start_paused = true)]
async fn held_locks_and_bounded_holds_cost_no_task_each() {
    let (_c, space, other, first) = warmed_pair().await;
    let before = common::alive_tasks();
    let names = names_where("job", 40, |_| true);
    let mut guards = Vec::new();
    for name in &names {
        guards.push(take(&space, name).await);
    }
    let bounded = names_where("bounded", 20, |_| true);
    let mut holds = Vec::new();
    for name in &bounded {
        let hold = within(space.mutex(name).lock_for(Duration::from_secs(30))).await;
        holds.push(hold.unwrap());
    }
    common::assert_tasks_at_most(before, 1, "40 held locks and 20 bounded holds");
    drop(guards);
    free_again(&other, &names).await;
    for hold in &holds {
        within(hold.cancelled()).await;
    }
    free_again(&other, &bounded).await;
    drop(holds);
    for guard in first {
        unlock(guard).await;
    }
}

/// 1c. The group memberships a space keeps wait in the same task as its bounded holds, not
///     a task each, and so do their places' memberships, in the task of their node's
///     manager: 20 joins start at most four (the space's and one per node); each is a
///     member where its name is placed, one left answers, and one dropped leaves by itself.
#[tokio::test(start_paused = true)]
async fn memberships_cost_no_task_each() {
    let (_c, space, other, first) = warmed_pair().await;
    let before = common::alive_tasks();
    let names = names_where("group", 20, |_| true);
    let mut memberships = Vec::new();
    for name in &names {
        memberships.push(within(space.group(name).join(b"x")).await.unwrap());
    }
    common::assert_tasks_at_most(before, 1 + NODES.len(), "20 memberships");
    for name in &names {
        let members = within(other.group(name).members()).await.unwrap();
        assert_eq!(members.len(), 1, "{name}");
        assert_eq!(members[0].data, b"x");
    }
    assert!(within(memberships.remove(0).leave()).await.unwrap());
    drop(memberships.remove(0));
    for name in &names[..2] {
        eventually(&format!("{name} has no member"), || async {
            within(other.group(name).members())
                .await
                .unwrap()
                .is_empty()
        })
        .await;
    }
    let members = within(other.group(&names[2]).members()).await.unwrap();
    assert_eq!(members.len(), 1);
    drop(memberships);
    for guard in first {
        unlock(guard).await;
    }
}

/// 1d. A membership and a lock of a space, whose waits ran on a runtime that shut down,
///     never read as joined or held: the membership ends with `SessionClosed` and its places
///     leave the group; the lock counts as lost.
#[tokio::test(start_paused = true)]
async fn what_a_runtime_that_shut_down_kept_ends() {
    let (_c, space, other, first) = warmed_pair().await;
    let group = space.group("g");
    let mutex = other.mutex("job");
    // The space's first wait, its nodes' managers' and the other space's first lock watch
    // start their tasks on that other runtime.
    let (membership, guard) = common::on_a_runtime_that_shuts_down(async move {
        let membership = within(group.join(b"a")).await.unwrap();
        let guard = within(mutex.lock()).await.unwrap();
        (membership, guard)
    })
    .await;
    let err = within(membership.joined()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::SessionClosed);
    assert!(guard.is_lost());
    eventually("g has no member", || async {
        within(space.group("g").members()).await.unwrap().is_empty()
    })
    .await;
    drop(guard);
    for guard in first {
        unlock(guard).await;
    }
}

/// 2. A moved name: holders of A and A+B exclude each other (on the A place), holders of
///    A+B and B too (on the B place); a holder of A and one of B do not, which is why no
///    process may run B while another runs A.
#[tokio::test(start_paused = true)]
async fn exclusion_holds_in_both_phases_of_a_reshard() {
    let c = Cluster::start().await;
    let (a, t, b) = reshard();
    let (pa, pt, pb) = (c.fixed(&a).await, c.fixed(&t).await, c.fixed(&b).await);
    for name in moved(&t, 3) {
        let name = name.as_str();
        for (first, second) in [(&pa, &pt), (&pt, &pa), (&pt, &pb), (&pb, &pt)] {
            let guard = take(first, name).await;
            assert!(
                try_lock(second, name).await.is_none(),
                "{name}: two holders"
            );
            unlock(guard).await;
            // Refused, the second kept no part: the name is held nowhere now.
            for node in NODES {
                assert!(!c.emulator.semaphore_names(node).contains(&name.to_string()));
            }
        }
        let old = take(&pa, name).await;
        let new = take(&pb, name).await;
        assert_ne!(
            old.space_lease().unwrap().nodes(),
            new.space_lease().unwrap().nodes()
        );
        unlock(old).await;
        unlock(new).await;
    }
}

/// One process's permits of a counted semaphore, and how many it holds.
struct Holder {
    space: LockSpace,
    held: Option<(SemaphorePermit, u64)>,
}

/// The tokens `holders` hold together.
fn held_by(holders: &[Holder]) -> u64 {
    holders
        .iter()
        .filter_map(|h| h.held.as_ref())
        .map(|h| h.1)
        .sum()
}

/// A pseudo-random history of try-acquires and releases of the semaphore `name` (limit 2)
/// by `holders`, which all meet on `node`: each answer is the one a single semaphore of
/// limit 2 would give, and `node` holds exactly what they hold, never more than 2.
async fn limit_holds(holders: &mut [Holder], name: &str, node: &str, seed: u64) {
    let mut rng = seed;
    let mut next = |n: u64| {
        rng = rng.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        (rng >> 33) % n
    };
    for _ in 0..30 {
        let i = usize::try_from(next(holders.len() as u64)).unwrap();
        if let Some((guard, _)) = holders[i].held.take() {
            assert!(within(guard.release()).await.unwrap());
        } else {
            let n = 1 + next(2);
            let total = held_by(holders);
            let sem = holders[i].space.semaphore(name, 2);
            let got = within(sem.try_acquire(n)).await.unwrap();
            assert_eq!(got.is_some(), total + n <= 2, "{n} more after {total}");
            holders[i].held = got.map(|g| (g, n));
        }
        let on_node = held_on(&holders[0].space, node, name).await.map(|h| h.0);
        assert_eq!(on_node.unwrap_or(0), held_by(holders), "on {node}");
    }
    for h in holders {
        if let Some((guard, _)) = h.held.take() {
            assert!(within(guard.release()).await.unwrap());
        }
    }
}

/// 3. A counted semaphore of a moved name: A and A+B holders together stay within the
///    limit on the A node, A+B and B holders on the B node.
#[tokio::test(start_paused = true)]
async fn limits_hold_in_both_phases_of_a_reshard() {
    let c = Cluster::start().await;
    let (a, t, b) = reshard();
    let name = moved(&t, 1).remove(0);
    let old_node = a.parts(&name)[0].node.clone();
    let mut processes = Vec::new();
    for l in [&a, &a, &t, &t, &b, &b] {
        processes.push(c.fixed(l).await);
    }
    let holders = |range: std::ops::Range<usize>| -> Vec<Holder> {
        processes[range]
            .iter()
            .map(|space| Holder {
                space: space.clone(),
                held: None,
            })
            .collect()
    };
    // Phase one: A and A+B, on the old node.
    limit_holds(&mut holders(0..4), &name, &old_node, 7).await;
    // Phase two: A+B and B, on the new node.
    limit_holds(&mut holders(2..6), &name, "n3", 11).await;
}

/// 4. With a directory: the fencing tokens of one moved name grow over a history of holders
///    in A, in A+B before and after `finish` is published (the latter after a holder in B),
///    and in B.
#[tokio::test(start_paused = true)]
async fn fencing_tokens_grow_across_a_move() {
    let c = Cluster::start().await;
    let (a, t, _) = reshard();
    let directory = c.directory(&a).await;
    let (p1, p2) = (c.following(&NODES).await, c.following(&NODES).await);
    let name = moved(&t, 1).remove(0);
    let name = name.as_str();
    let mut history: Vec<FencingToken> = Vec::new();
    let mut record = |guard: &MutexGuard| {
        let token = guard.fencing_token();
        if let Some(last) = history.last() {
            assert!(token > *last, "{token} after {last}");
        }
        history.push(token);
    };

    // In A.
    let h1 = take(&p1, name).await;
    record(&h1);
    unlock(h1).await;
    let h2 = take(&p1, name).await;
    record(&h2);

    // The transition is published while h2 (taken in A) is held; p2 follows it and queues
    // behind h2 on the A place.
    within(directory.begin_add("n3")).await.unwrap();
    follows(&p2, t.epoch()).await;
    follows(&p1, t.epoch()).await;
    let mut waiting = p2.mutex(name).lock();
    assert!(within(waiting.queued()).await);
    unlock(h2).await;
    let h3 = within(waiting).await.unwrap();
    assert_eq!(
        (
            h3.space_lease().unwrap().epoch(),
            h3.space_lease().unwrap().nodes().len()
        ),
        (t.epoch(), 2)
    );
    record(&h3);

    // p1 (in A+B) queues behind h3; then B is published.
    let mut late = p1.mutex(name).lock();
    assert!(within(late.queued()).await);
    none_lagging(&directory).await;
    let b = within(directory.finish()).await.unwrap();
    follows(&p1, b.epoch()).await;
    follows(&p2, b.epoch()).await;

    // A process in B queues on the B place behind h3; when h3 goes it is served first, and
    // p1's acquire, taken in A+B, completes after it.
    let p3 = c.following(&NODES).await;
    assert_eq!(p3.layout().epoch(), b.epoch());
    let mut in_b = p3.mutex(name).lock();
    assert!(within(in_b.queued()).await);
    unlock(h3).await;
    let h4 = within(in_b).await.unwrap();
    assert_eq!(h4.space_lease().unwrap().epoch(), b.epoch());
    record(&h4);
    unlock(h4).await;
    let h5 = within(late).await.unwrap();
    assert_eq!(h5.space_lease().unwrap().epoch(), t.epoch());
    record(&h5);
    unlock(h5).await;

    // In B.
    let h6 = take(&p2, name).await;
    record(&h6);
    unlock(h6).await;
    assert_eq!(history.len(), 6);
}

/// 5. A process holding a lock taken in epoch 1 reports epoch 1 after following the
///    transition, so `finish` is refused naming it; once it lets go it reports 2 and
///    `finish` goes through.
#[tokio::test(start_paused = true)]
async fn finish_waits_for_a_member_holding_an_old_lock() {
    let c = Cluster::start().await;
    let (a, t, b) = reshard();
    let directory = c.directory(&a).await;
    let holder = c.following(&NODES).await;
    let other = c.following(&NODES).await;
    let guard = take(&holder, "nightly").await;
    within(directory.begin_add("n3")).await.unwrap();
    follows(&holder, t.epoch()).await;
    follows(&other, t.epoch()).await;
    assert_eq!(holder.running_epoch(), a.epoch());
    assert_eq!(other.running_epoch(), t.epoch());

    // Wait until the directory has the other member's report: then only the holder lags.
    eventually("the other member reports the transition", || async {
        let members = within(directory.members()).await.unwrap();
        members
            .iter()
            .filter(|m| m.epoch == Some(t.epoch()))
            .count()
            == 1
    })
    .await;
    let err = within(directory.finish()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PreconditionFailed);
    let lagging = within(directory.lagging()).await.unwrap();
    let members = within(directory.members()).await.unwrap();
    assert_eq!(members.len(), 2);
    assert_eq!(lagging.len(), 1, "{lagging:?}");
    let lagging_member = members
        .iter()
        .find(|m| m.session_id == lagging[0].session_id)
        .unwrap();
    assert_eq!(
        (lagging[0].epoch, lagging_member.epoch),
        (a.epoch(), Some(a.epoch()))
    );
    assert_eq!(within(directory.layout()).await.unwrap(), t);

    unlock(guard).await;
    assert_eq!(holder.running_epoch(), t.epoch());
    eventually("every member reports the transition", || async {
        let members = within(directory.members()).await.unwrap();
        members.len() == 2 && members.iter().all(|m| m.epoch == Some(t.epoch()))
    })
    .await;
    assert_eq!(within(directory.finish()).await.unwrap(), b);
    follows(&holder, b.epoch()).await;
}

/// 6. A process given n1 and n2 only cannot follow a transition onto n3: it says why,
///    keeps epoch 1 (so it holds the operator's next step back) and takes no lock until a
///    layout it can run is published: no guard is handed out to be lost on arrival.
#[tokio::test(start_paused = true)]
async fn a_layout_naming_an_unknown_node_is_not_followed_and_shuts_the_gate() {
    let c = Cluster::start().await;
    let (a, t, _) = reshard();
    let directory = c.directory(&a).await;
    let space = c.following(&["n1", "n2"]).await;
    assert!(space.layout_error().is_none());
    within(directory.begin_add("n3")).await.unwrap();
    eventually("the layout error is set", || async {
        space.layout_error().is_some()
    })
    .await;
    let err = space.layout_error().unwrap();
    assert_eq!(err.kind(), ErrorKind::PreconditionFailed);
    assert_eq!(space.layout().epoch(), a.epoch());
    assert_eq!(space.running_epoch(), a.epoch());
    let refused = within(space.mutex("nightly").try_lock()).await.unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::PreconditionFailed);
    // A lock without a bound waits at the gate; `hold()` yields nothing meanwhile.
    let mut held = space.mutex("nightly").hold();
    let waited = tokio::time::timeout(Duration::from_secs(30), futures::StreamExt::next(&mut held));
    assert!(waited.await.is_err(), "a guard was handed out");
    assert_eq!(within(directory.layout()).await.unwrap(), t);
    let refused = within(directory.finish()).await.unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::PreconditionFailed);
    // The layout it runs, published again past the directory's steps: it takes locks.
    let manager = c.client.session_manager(DIR, SessionOptions::new());
    let published = manager.published(&format!("{SPACE}/layout"));
    within(published.publish(&a.to_bytes())).await.unwrap();
    let guard = within(futures::StreamExt::next(&mut held))
        .await
        .unwrap()
        .unwrap();
    assert!(space.layout_error().is_none());
    unlock(guard).await;
}

/// 7. An operator who bypasses the directory's check and publishes a layout two epochs on
///    makes a lock taken in the old one lost.
#[tokio::test(start_paused = true)]
async fn a_lock_two_epochs_behind_the_published_layout_is_lost() {
    let c = Cluster::start().await;
    let (a, _, b) = reshard();
    let _directory = c.directory(&a).await;
    let space = c.following(&NODES).await;
    let guard = take(&space, "nightly").await;
    let manager = c.client.session_manager(DIR, SessionOptions::new());
    let published = manager.published(&format!("{SPACE}/layout"));
    within(published.publish(&b.to_bytes())).await.unwrap();
    within(guard.cancelled()).await;
    assert!(guard.is_lost());
    follows(&space, b.epoch()).await;
    // Its parts were given back: the name can be taken again, in the new layout.
    let again = within(space.mutex("nightly").lock_timeout(Duration::from_secs(5)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.space_lease().unwrap().epoch(), b.epoch());
    unlock(again).await;
}

/// Two servers, one node each (n1 on the first, n2 on the second), and a client of each.
struct TwoServers {
    _up: Emulator,
    down: Option<Emulator>,
    c1: Client,
    c2: Client,
}

impl TwoServers {
    async fn start() -> Self {
        let start = |node: &str| Emulator::builder().node(path(node)).start();
        let up = within(start("n1")).await.unwrap();
        let down = within(start("n2")).await.unwrap();
        let c1 = within(Client::connect(&up.connection_string()))
            .await
            .unwrap();
        let c2 = within(Client::connect(&down.connection_string()))
            .await
            .unwrap();
        Self {
            _up: up,
            down: Some(down),
            c1,
            c2,
        }
    }

    /// A process over both.
    async fn open(&self) -> LockSpace {
        let builder = LockSpace::builder()
            .node("n1", &self.c1, &path("n1"))
            .node("n2", &self.c2, &path("n2"))
            .layout(layout(1, ["n1", "n2"]));
        within(builder.open()).await.unwrap()
    }

    /// Stops the second server; the first keeps serving.
    async fn stop_second(&mut self) {
        if let Some(down) = self.down.take() {
            within(down.shutdown()).await;
        }
    }
}

/// Three names `space` places on `node`.
fn names_on(space: &LockSpace, node: &str) -> Vec<String> {
    names_where("job", 3, |name| space.node_of(name) == node)
}

/// The names on the node that is up lock and unlock in `space`; those on the node that is
/// down give up within their timeout with an error saying the node is unreachable.
async fn only_the_down_node_fails(space: &LockSpace) {
    for name in names_on(space, "n1") {
        unlock(take(space, &name).await).await;
    }
    let timeout = Duration::from_secs(1);
    for name in names_on(space, "n2") {
        let start = Instant::now();
        let outcome = tokio::time::timeout(
            Duration::from_secs(60),
            space.mutex(&name).lock_timeout(timeout),
        )
        .await
        .unwrap_or_else(|_| panic!("lock_timeout({timeout:?}) of {name} did not return in 60 s"));
        // Never `None`: that says the server answered the lock is busy.
        match outcome {
            Ok(None) => panic!("{name} read as busy on a node that is down"),
            Ok(Some(_)) => panic!("{name} locked on a node that is down"),
            Err(e) => assert_eq!(e.kind(), ErrorKind::Unavailable, "{name}: {e}"),
        }
        assert!(
            start.elapsed() <= timeout * 2,
            "{name}: {:?}",
            start.elapsed()
        );
    }
}

/// 8. With one node's server down (within the session timeout of the space's session
///    there), names placed on the other still lock and unlock, and a lock of a name on the
///    down node gives up by its timeout.
#[tokio::test(start_paused = true)]
async fn a_node_down_affects_only_its_names() {
    let mut servers = TwoServers::start().await;
    let space = servers.open().await;
    // Both nodes in use before the second goes down.
    for name in names_on(&space, "n1").iter().chain(&names_on(&space, "n2")) {
        unlock(take(&space, name).await).await;
    }
    servers.stop_second().await;
    only_the_down_node_fails(&space).await;
}

/// 8b. The same for a process that has no session on the down node: one that reaches it
///     first after it went down, and one whose session there expired meanwhile.
#[tokio::test(start_paused = true)]
async fn a_node_down_before_first_use_affects_only_its_names() {
    let mut servers = TwoServers::start().await;
    let old = servers.open().await;
    unlock(take(&old, &names_on(&old, "n2")[0]).await).await;
    servers.stop_second().await;
    only_the_down_node_fails(&servers.open().await).await;
    // Past the session timeout (10 s by default): the old process's session on n2 is gone.
    tokio::time::sleep(Duration::from_secs(30)).await;
    only_the_down_node_fails(&old).await;
}

/// 9. A multi-lock over names on every node, one of which another process holds, takes
///    none of them: afterwards each of the others is free for a third process.
#[tokio::test(start_paused = true)]
async fn a_multi_lock_across_nodes_is_all_or_nothing() {
    let c = Cluster::start().await;
    let l = layout(1, NODES);
    let (p1, p2, p3) = (c.fixed(&l).await, c.fixed(&l).await, c.fixed(&l).await);
    // Two names on each node.
    let mut names: Vec<String> = Vec::new();
    for node in NODES {
        names.extend(names_where("account", 2, |name| p1.node_of(name) == node));
    }
    names.sort();
    // The held one is taken last (the names go sorted), so every other was taken first.
    for held in [names.len() - 1, names.len() / 2] {
        let guard = take(&p2, &names[held]).await;
        let all = within(p1.multi_lock(&names).try_lock()).await.unwrap();
        assert!(all.is_none(), "the multi-lock took {}", names[held]);
        for (i, name) in names.iter().enumerate() {
            if i != held {
                unlock(take(&p3, name).await).await;
            }
        }
        unlock(guard).await;
    }
    let all = within(p1.multi_lock(&names).try_lock())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(all.fencing_tokens().len(), names.len());
    unlock(all).await;
}

/// 10. In a transition, an acquire whose B place is held by a process running B reports
///     `queued()` and completes, in both places, once that holder lets go.
#[tokio::test(start_paused = true)]
async fn an_acquire_in_a_transition_queues_on_the_new_place() {
    let c = Cluster::start().await;
    let (_, t, b) = reshard();
    let (pt, pb) = (c.fixed(&t).await, c.fixed(&b).await);
    let name = moved(&t, 1).remove(0);
    let old_node = t.parts(&name)[0].node.clone();
    // Free: not queued.
    let mut free = pt.mutex(&name).lock();
    assert!(!within(free.queued()).await);
    unlock(within(free).await.unwrap()).await;

    let in_b = take(&pb, &name).await;
    let mut waiting = pt.mutex(&name).lock();
    assert!(within(waiting.queued()).await);
    // It holds the old place meanwhile, and waits on the new.
    let me = session(&pt, &old_node).await.id();
    let owners = held_on(&pt, &old_node, &name).await.map(|h| h.1);
    assert_eq!(owners, Some(vec![me]));
    unlock(in_b).await;
    let guard = within(waiting).await.unwrap();
    assert_eq!(
        guard.space_lease().unwrap().nodes(),
        [old_node, "n3".to_string()]
    );
    unlock(guard).await;
}

/// 11. `lock_for`: the guard's token fires at the bound, not before, and the name is then
///     free for another process.
#[tokio::test(start_paused = true)]
async fn a_bounded_lock_ends_at_its_bound() {
    let c = Cluster::start().await;
    let l = layout(1, ["n1", "n2"]);
    let (p1, p2) = (c.fixed(&l).await, c.fixed(&l).await);
    let bound = Duration::from_secs(5);
    let start = Instant::now();
    let guard = within(p1.mutex("report").lock_for(bound)).await.unwrap();
    let deadline = guard.deadline();
    assert!(deadline >= start + bound && deadline <= Instant::now() + bound);
    let token = guard.token();
    tokio::time::sleep_until(deadline - Duration::from_millis(100)).await;
    assert!(!token.is_cancelled(), "fired before the bound");
    assert!(try_lock(&p2, "report").await.is_none());
    within(token.cancelled()).await;
    assert!(Instant::now() >= deadline);
    assert!(guard.is_lost());
    let after = within(p2.mutex("report").lock_timeout(Duration::from_secs(1)))
        .await
        .unwrap();
    assert!(after.is_some(), "still held after the bound");
    drop(guard);
}

/// 11b. One recipe family: the verbs a lock space lacked before it shared the node's recipes
///     (`read_for`, `write_for`, a bounded permit, `hold()` of each lock, a multi-lock's
///     tokens) work in a space, and its guards say what they hold.
#[tokio::test(start_paused = true)]
async fn every_lock_verb_works_in_a_space() {
    use futures::StreamExt;
    let c = Cluster::start().await;
    let l = layout(1, ["n1", "n2"]);
    let (p1, p2) = (c.fixed(&l).await, c.fixed(&l).await);
    let bound = Duration::from_secs(2);

    // A bounded write lock shuts readers out until its bound, then lets them in.
    let write = within(p1.rwlock("config").write_for(bound)).await.unwrap();
    assert!(
        within(p2.rwlock("config").try_read())
            .await
            .unwrap()
            .is_none()
    );
    within(write.cancelled()).await;
    let read = within(p2.rwlock("config").read_for(bound)).await.unwrap();
    assert!(read.deadline() > Instant::now());
    assert!(within(read.release()).await.unwrap());

    // A bounded permit counts against the limit until its bound.
    let permit = within(p1.semaphore("pool", 2).acquire_for(2, bound))
        .await
        .unwrap();
    let pool = p2.semaphore("pool", 2);
    assert!(within(pool.try_acquire(1)).await.unwrap().is_none());
    within(permit.cancelled()).await;
    let taken = within(pool.try_acquire(2)).await.unwrap().unwrap();
    let parts = taken.space_lease().unwrap();
    assert_eq!(parts.epoch(), 1);
    assert_eq!(parts.nodes(), [p2.node_of("pool")]);
    assert!(taken.lease().is_none());
    // A guard of a space has no one lease: `into_lease` gives it back.
    let taken = taken.into_lease().unwrap_err();
    unlock(taken).await;

    // `hold()` of a space's mutex: a new guard with a greater token after the last ended.
    let mut held = p1.mutex("singleton").hold();
    let first = within(held.next()).await.unwrap().unwrap();
    let first_token = first.fencing_token();
    unlock(first).await;
    let second = within(held.next()).await.unwrap().unwrap();
    assert!(second.fencing_token() > first_token);
    drop(second);

    // A multi-lock of a space reports each name's token, in the canonical order.
    let both = within(p1.multi_lock(["b", "a"]).lock()).await.unwrap();
    let tokens = both.fencing_tokens();
    assert_eq!(tokens.iter().map(|t| t.0).collect::<Vec<_>>(), ["a", "b"]);
    assert!(tokens.iter().all(|t| t.1.epoch == 1));
    assert!(both.leases().is_empty());
    assert_eq!(both.space_lease().unwrap().epoch(), 1);
    assert!(within(p2.mutex("a").try_lock()).await.unwrap().is_none());
    unlock(both).await;
    unlock(take(&p2, "a").await).await;
}

/// 11c. A group of a space is the node's `Group`: its membership says `Joined` with its
///      place's session, `Joining` and `Joined` again when that session is replaced, and
///      `Ended` once left.
#[tokio::test(start_paused = true)]
async fn a_space_membership_says_where_it_is() {
    let c = Cluster::start().await;
    let space = c.fixed(&layout(1, ["n1", "n2"])).await;
    let node = space.node_of("workers");
    let me = within(space.group("workers").join(b"w1")).await.unwrap();
    let first = session(&space, &node).await.id();
    assert!(
        matches!(me.state(), MembershipState::Joined { session_id, .. } if session_id == first)
    );
    let mut changes = me.state_changes();
    assert!(c.emulator.expire_session(&path(&node), first));
    let again = within(changes.wait_for(
        |s| matches!(s, MembershipState::Joined { session_id, .. } if *session_id != first),
    ))
    .await
    .unwrap()
    .clone();
    let MembershipState::Joined { session_id, .. } = again else {
        unreachable!("waited for Joined")
    };
    assert_eq!(session_id, session(&space, &node).await.id());
    assert!(me.error().is_none());
    let members = within(space.group("workers").members()).await.unwrap();
    assert_eq!(members.len(), 1);
    assert!(members[0].is_me && members[0].session_id == session_id);
    let mut changes = me.state_changes();
    assert!(within(me.leave()).await.unwrap());
    let ended = within(changes.wait_for(|s| matches!(s, MembershipState::Ended(_))))
        .await
        .unwrap()
        .clone();
    assert!(matches!(ended, MembershipState::Ended(None)));
}

/// 11d. A space's `observe()` is the node's stream through the space: a session of the
///      observer replaced on the name's node is no error item and does not end it.
#[tokio::test(start_paused = true)]
async fn a_space_observer_rides_out_its_session_replacement() {
    let c = Cluster::start().await;
    let l = layout(1, ["n1", "n2"]);
    let (p1, observer) = (c.fixed(&l).await, c.fixed(&l).await);
    let node = observer.node_of("sched");
    let mut leaders = observer.election("sched").observe();
    next_where(&mut leaders, "nobody leads", Option::is_none).await;
    let old = session(&observer, &node).await.id();
    assert!(c.emulator.expire_session(&path(&node), old));
    let leadership = within(p1.election("sched").campaign(b"a")).await.unwrap();
    let seen = next_where(&mut leaders, "the leader", Option::is_some).await;
    assert_eq!(
        seen.map(|l| l.fencing_token),
        Some(leadership.fencing_token())
    );
    assert_ne!(session(&observer, &node).await.id(), old);
}

/// 12. Bad input is refused by kind: a name too long, more permits than the limit, no
///     layout, a node twice, a layout naming a node the space lacks.
#[tokio::test(start_paused = true)]
async fn bad_input_is_refused_by_kind() {
    let c = Cluster::start().await;
    let space = c.fixed(&layout(1, ["n1", "n2"])).await;
    let long = "x".repeat(MAX_NAME_LEN + 1);
    fn kind<T>(r: ydb_coordination::Result<Option<T>>) -> Option<ErrorKind> {
        r.err().map(|e| e.kind())
    }
    let invalid = Some(ErrorKind::InvalidArgument);
    assert_eq!(kind(within(space.mutex(&long).try_lock()).await), invalid);
    let err = within(space.mutex(&long).lock()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    let err = within(space.semaphore("pool", 2).acquire(3))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    let sem = space.semaphore("pool", 2);
    assert_eq!(kind(within(sem.try_acquire(3)).await), invalid);
    for node in NODES {
        assert!(c.emulator.semaphore_names(node).is_empty(), "asked {node}");
    }

    let open_kind =
        |b: LockSpaceBuilder| async move { within(b.open()).await.err().map(|e| e.kind()) };
    assert_eq!(open_kind(c.builder(&NODES)).await, invalid);
    let twice = c
        .builder(&NODES)
        .node("n1", &c.client, &path("n2"))
        .layout(layout(1, ["n1", "n2"]));
    assert_eq!(open_kind(twice).await, invalid);
    let unknown = c.builder(&["n1"]).layout(layout(1, ["n1", "n2"]));
    assert_eq!(
        open_kind(unknown).await,
        Some(ErrorKind::PreconditionFailed)
    );
}

/// 13. A publication lives on the directory node and keeps its value through a reshard:
///     written in `A`, read by a process that starts in `A+B`, written in `A+B` and seen by
///     a subscriber, read and written in `B`; no lock node holds it.
#[tokio::test(start_paused = true)]
async fn a_publication_keeps_its_value_across_a_reshard() {
    use futures::StreamExt;
    let c = Cluster::start().await;
    let (a, t, b) = reshard();
    let directory = c.directory(&a).await;
    let early = c.following(&NODES).await;
    let name = moved(&t, 1).remove(0);
    within(early.published(&name).publish(b"v1")).await.unwrap();

    within(directory.begin_add("n3")).await.unwrap();
    follows(&early, t.epoch()).await;
    let late = c.following(&NODES).await;
    assert_eq!(late.layout().epoch(), t.epoch());
    assert_eq!(within(late.published(&name).get()).await.unwrap(), b"v1");
    let mut values = late.published(&name).subscribe();
    let first = within(values.next()).await.unwrap().unwrap();
    assert_eq!(first, b"v1");
    within(early.published(&name).publish(b"v2")).await.unwrap();
    let second = within(values.next()).await.unwrap().unwrap();
    assert_eq!(second, b"v2");

    none_lagging(&directory).await;
    assert_eq!(within(directory.finish()).await.unwrap(), b);
    follows(&early, b.epoch()).await;
    follows(&late, b.epoch()).await;
    assert_eq!(within(early.published(&name).get()).await.unwrap(), b"v2");
    within(late.published(&name).publish(b"v3")).await.unwrap();
    let third = within(values.next()).await.unwrap().unwrap();
    assert_eq!(third, b"v3");

    let stored = format!("{SPACE}/value/{name}");
    assert!(c.emulator.semaphore_names(DIR).contains(&stored));
    for node in NODES {
        let names = c.emulator.semaphore_names(node);
        assert!(
            names.iter().all(|n| !n.contains(&name)),
            "{node}: {names:?}"
        );
    }
}

/// 14. Without a directory (a fixed layout) a publication is the name's `Published` value
///     on the node the layout places it on, and only there.
#[tokio::test(start_paused = true)]
async fn a_publication_without_a_directory_lives_on_its_node() {
    let c = Cluster::start().await;
    let space = c.fixed(&layout(1, NODES)).await;
    for i in 0..6 {
        let name = format!("flag-{i}");
        let value = format!("on-{i}");
        within(space.published(&name).publish(value.as_bytes()))
            .await
            .unwrap();
        let node = space.node_of(&name);
        let direct = space.manager(&node).unwrap().published(&name);
        assert_eq!(within(direct.get()).await.unwrap(), value.as_bytes());
        for other in NODES {
            let here = c.emulator.semaphore_names(other).contains(&name);
            assert_eq!(here, other == node, "{name} on {other}");
        }
    }
}

/// 15. A publication's bad input and a space that was shut down, by kind: a name that
///     does not fit with the directory's prefix (nothing sent), then `SessionClosed` from
///     every verb and the stream.
#[tokio::test(start_paused = true)]
async fn a_publication_refuses_by_kind() {
    use futures::StreamExt;
    let c = Cluster::start().await;
    let _directory = c.directory(&layout(1, NODES)).await;
    let space = c.following(&NODES).await;
    // The limit is on the whole semaphore name, the directory's prefix included.
    let room = MAX_NAME_LEN - format!("{SPACE}/value/").len();
    let fits = space.published(&"y".repeat(room));
    within(fits.publish(b"v")).await.unwrap();
    assert_eq!(within(fits.get()).await.unwrap(), b"v");
    let long = space.published(&"x".repeat(room + 1));
    let kind = |r: ydb_coordination::Result<()>| r.err().map(|e| e.kind());
    let invalid = Some(ErrorKind::InvalidArgument);
    assert_eq!(kind(within(long.publish(b"v")).await), invalid);
    assert_eq!(kind(within(long.get()).await.map(drop)), invalid);
    let mut stream = long.subscribe();
    let item = within(stream.next()).await.unwrap();
    assert_eq!(kind(item.map(drop)), invalid);
    assert!(within(stream.next()).await.is_none());
    assert!(
        c.emulator
            .semaphore_names(DIR)
            .iter()
            .all(|n| !n.contains("xxxx"))
    );

    let fixed = c.fixed(&layout(1, NODES)).await;
    for s in [&space, &fixed] {
        within(s.shutdown()).await;
        let config = s.published("config");
        let closed = Some(ErrorKind::SessionClosed);
        assert_eq!(kind(within(config.publish(b"v")).await), closed);
        assert_eq!(kind(within(config.get()).await.map(drop)), closed);
        let item = within(config.subscribe().next()).await.unwrap();
        assert_eq!(kind(item.map(drop)), closed);
    }
}

/// 16. A space membership ends by itself, and says why: when its name's new place in a
///     transition is another recipe's semaphore (it cannot join there, and leaves its old
///     place), and when the space shuts down; one that can move follows both steps.
#[tokio::test(start_paused = true)]
async fn a_membership_ends_by_itself_with_its_error() {
    let c = Cluster::start().await;
    let (a, t, _) = reshard();
    let directory = c.directory(&a).await;
    let space = c.following(&NODES).await;
    let names = moved(&t, 2);
    let (blocked, kept) = (names[0].as_str(), names[1].as_str());
    let stuck = within(space.group(blocked).join(b"w1")).await.unwrap();
    let member = within(space.group(kept).join(b"w1")).await.unwrap();
    assert!(stuck.error().is_none() && member.error().is_none());
    let other = session(&space, "n3").await;
    within(other.create_semaphore(blocked, 1, b""))
        .await
        .unwrap();

    within(directory.begin_add("n3")).await.unwrap();
    let err = within(stuck.ended()).await;
    assert_eq!(err.kind(), ErrorKind::PreconditionFailed);
    assert_eq!(stuck.error().map(|e| e.kind()), Some(err.kind()));
    eventually("the old place is left", || async {
        held_on(&space, "n1", blocked)
            .await
            .is_none_or(|h| h.1.is_empty())
            && held_on(&space, "n2", blocked)
                .await
                .is_none_or(|h| h.1.is_empty())
    })
    .await;
    // The other membership moved and stays.
    eventually("the kept member is in both places", || async {
        within(space.group(kept).members()).await.unwrap().len() == 1
            && held_on(&space, "n3", kept)
                .await
                .is_some_and(|h| h.1.len() == 1)
    })
    .await;
    assert!(member.error().is_none());

    // The second step: the kept membership leaves its old place and goes on in the new.
    none_lagging(&directory).await;
    within(directory.finish()).await.unwrap();
    follows(&space, t.epoch() + 1).await;
    let old = t.parts(kept)[0].node.clone();
    eventually("the kept member left its old place", || async {
        held_on(&space, &old, kept)
            .await
            .is_none_or(|h| h.1.is_empty())
            && held_on(&space, "n3", kept)
                .await
                .is_some_and(|h| h.1.len() == 1)
    })
    .await;
    assert!(member.error().is_none());

    within(space.shutdown()).await;
    // `error()` is what tells an ending that says why from a task gone silently.
    let err = within(member.ended()).await;
    assert_eq!(err.kind(), ErrorKind::SessionClosed);
    assert_eq!(
        member.error().map(|e| e.kind()),
        Some(ErrorKind::SessionClosed)
    );
}

/// 17. A leave does not wait for a move in progress: a membership moving onto a node whose
///     server is down leaves at once, its old place too.
#[tokio::test(start_paused = true)]
async fn a_membership_leaves_while_its_move_waits_for_a_down_node() {
    let c = Cluster::start().await;
    let down = within(Emulator::builder().node(path("n3")).start())
        .await
        .unwrap();
    let c3 = within(Client::connect(&down.connection_string()))
        .await
        .unwrap();
    within(down.shutdown()).await;
    let (a, t, _) = reshard();
    let directory = c.directory(&a).await;
    let builder = c
        .builder(&["n1", "n2"])
        .node("n3", &c3, &path("n3"))
        .directory(&c.client, DIR, SPACE);
    let space = within(builder.open()).await.unwrap();
    let name = moved(&t, 1).remove(0);
    let old = t.parts(&name)[0].node.clone();
    let member = within(space.group(&name).join(b"w1")).await.unwrap();

    within(directory.begin_add("n3")).await.unwrap();
    follows(&space, t.epoch()).await;
    // The move now waits for n3; give it time to be under way.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(member.error().is_none());
    within(member.leave()).await.unwrap();
    eventually("the old place is left", || async {
        held_on(&space, &old, &name)
            .await
            .is_none_or(|h| h.1.is_empty())
    })
    .await;
}

// ---- a process's locks live inside its directory membership ------------------------------

/// The session timeout of a process cut off from its directory (its nodes' and its
/// directory's).
const TIMEOUT: Duration = Duration::from_secs(2);

impl Cluster {
    /// A client that reaches the emulator through a fault proxy of its own.
    async fn behind_proxy(&self) -> (FaultProxy, Client) {
        let proxy = within(FaultProxy::start(self.emulator.local_addr()))
            .await
            .unwrap();
        let behind = within(
            Client::builder(proxy.connection_string(self.emulator.database()))
                .discovery(false)
                .build(),
        )
        .await
        .unwrap();
        (proxy, behind)
    }

    /// A process that reaches its lock nodes directly and its directory through `behind`.
    async fn cut_off_process(&self, behind: &Client) -> LockSpace {
        let builder = self
            .builder(&NODES)
            .session_options(SessionOptions::new().timeout(TIMEOUT))
            .directory(behind, DIR, SPACE);
        within(builder.open()).await.unwrap()
    }
}

/// Publishes `layout` past the directory's steps, as a careless operator would.
async fn overwrite(c: &Cluster, layout: &Layout) {
    let manager = c.client.session_manager(DIR, SessionOptions::new());
    let published = manager.published(&format!("{SPACE}/layout"));
    within(published.publish(&layout.to_bytes())).await.unwrap();
    within(manager.shutdown()).await;
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

async fn try_lock_result(
    space: &LockSpace,
    name: &str,
) -> ydb_coordination::Result<Option<MutexGuard>> {
    within(space.mutex(name).try_lock()).await
}

/// 18. A process cut off from its directory while the fleet reshards past it takes no
/// lock in its old layout next to a holder in the new one; once it reaches the directory
/// again it runs the new layout.
#[tokio::test(start_paused = true)]
async fn a_process_cut_off_from_its_directory_takes_no_lock_in_the_old_layout() {
    let c = Cluster::start().await;
    let (proxy, cut_client) = c.behind_proxy().await;
    let a = layout(1, ["n1", "n2"]);
    let b = a.add_node("n3").unwrap().finish().unwrap();
    let directory = c.directory(&a).await;
    let cut = c.cut_off_process(&cut_client).await;
    assert_eq!(members(&directory).await, 1);

    proxy.net().stall();
    eventually("the directory drops the cut-off process", || async {
        members(&directory).await == 0
    })
    .await;
    // Nobody lags: both steps are accepted.
    within(directory.begin_add("n3")).await.unwrap();
    assert_eq!(within(directory.finish()).await.unwrap(), b);
    let fresh = c.following(&NODES).await;
    assert_eq!(fresh.layout().epoch(), b.epoch());
    let name = moving(&a, &b, "n1", "n3");
    let held = try_lock_result(&fresh, &name).await.unwrap().unwrap();

    // The cut-off process still runs `A`, where the name is free on n1: it must not take it.
    assert_eq!(cut.layout().epoch(), a.epoch());
    let err = try_lock_result(&cut, &name).await.unwrap_err();
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
    proxy.net().resume();
    let mut layouts = cut.layout_changes();
    within(layouts.wait_for(|l| l.epoch() == b.epoch()))
        .await
        .unwrap();
    drop(layouts);
    let busy = within(cut.mutex(&name).lock_timeout(Duration::from_secs(10))).await;
    assert!(busy.unwrap().is_none());
    assert!(within(held.release()).await.unwrap());
    let mine = within(cut.mutex(&name).lock_timeout(Duration::from_secs(10)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(mine.space_lease().unwrap().epoch(), b.epoch());
    assert_eq!(members(&directory).await, 2);
}

/// 19. A lock held by a process whose directory connection stalls (the server then
/// expires its directory session by itself) is lost before the directory stops listing the
/// process: no operator step can meet it.
#[tokio::test(start_paused = true)]
async fn a_held_lock_is_lost_before_the_directory_stops_listing_its_process() {
    let c = Cluster::start().await;
    let (proxy, cut_client) = c.behind_proxy().await;
    let a = layout(1, ["n1", "n2"]);
    let directory = c.directory(&a).await;
    let cut = c.cut_off_process(&cut_client).await;
    let guard = try_lock_result(&cut, "nightly").await.unwrap().unwrap();
    proxy.net().stall();
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
        try_lock_result(&cut, "nightly").await.unwrap_err().kind(),
        ErrorKind::Unavailable
    );
}

/// 20. A bounded lock of a moved name in a transition ends near its bound while the
/// directory does not answer (its fencing token needs the published layout), and gives
/// back both places.
#[tokio::test(start_paused = true)]
async fn a_bounded_lock_in_a_transition_is_bounded_while_the_directory_is_silent() {
    let c = Cluster::start().await;
    let (proxy, cut_client) = c.behind_proxy().await;
    let a = layout(1, ["n1", "n2"]);
    let directory = c.directory(&a).await;
    let t = within(directory.begin_add("n3")).await.unwrap();
    let cut = c.cut_off_process(&cut_client).await;
    assert_eq!(cut.layout().epoch(), t.epoch());
    let name = moving(&a, &t.finish().unwrap(), "n1", "n3");
    assert_eq!(t.parts(&name).len(), 2);

    proxy.net().stall();
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
        let other = c.following(&NODES).await;
        let guard = try_lock_result(&other, &name).await.unwrap().unwrap();
        assert!(within(guard.release()).await.unwrap());
        within(other.shutdown()).await;
    }
}

/// 21. A layout of the same epoch with other nodes, written over the published one, shuts
/// a running process's space (its locks lost, no new one, the error reported) while a
/// process opened afterwards runs it; publishing the process's layout again reopens it; an
/// older epoch shuts it the same way.
#[tokio::test(start_paused = true)]
async fn a_contradicting_layout_shuts_the_space_until_the_directory_is_consistent() {
    let c = Cluster::start().await;
    let a = layout(1, ["n1", "n2"]);
    let directory = c.directory(&a).await;
    let running = c.following(&NODES).await;
    let held = try_lock_result(&running, "nightly").await.unwrap().unwrap();

    let rewritten = layout(1, ["n3"]);
    overwrite(&c, &rewritten).await;
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
    let later = c.following(&NODES).await;
    assert_eq!(*later.layout(), rewritten);
    let theirs = try_lock_result(&later, "acct-0").await.unwrap().unwrap();
    assert_eq!(
        try_lock_result(&running, "acct-0")
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::PreconditionFailed
    );
    drop(theirs);

    // The directory's own layout again: the running process goes on.
    overwrite(&c, &a).await;
    eventually("the contradiction clears", || async {
        running.layout_error().is_none()
    })
    .await;
    let guard = try_lock_result(&running, "acct-0").await.unwrap().unwrap();
    assert!(within(guard.release()).await.unwrap());
    within(later.shutdown()).await;

    // An older epoch than the one run.
    let t = within(directory.begin_add("n3")).await.unwrap();
    let mut layouts = running.layout_changes();
    within(layouts.wait_for(|l| l.epoch() == t.epoch()))
        .await
        .unwrap();
    overwrite(&c, &a).await;
    eventually("the older epoch is refused", || async {
        running.layout_error().is_some()
    })
    .await;
    assert_eq!(running.layout().epoch(), t.epoch());
    assert!(try_lock_result(&running, "acct-1").await.is_err());
    overwrite(&c, &t).await;
    eventually("the contradiction clears", || async {
        running.layout_error().is_none()
    })
    .await;
    assert!(try_lock_result(&running, "acct-1").await.unwrap().is_some());
}

// ---- the fleet recipes at parity with one node's ---------------------------------------------

/// Reads `stream` until an item meets `want`, each read bounded.
async fn next_where<T>(
    stream: &mut (impl futures::Stream<Item = ydb_coordination::Result<T>> + Unpin),
    what: &str,
    want: impl Fn(&T) -> bool,
) -> T {
    use futures::StreamExt;
    loop {
        let item = within(stream.next()).await;
        let item = item.unwrap_or_else(|| panic!("the stream ended before {what}"));
        let item = item.unwrap_or_else(|e| panic!("the stream failed before {what}: {e}"));
        if want(&item) {
            return item;
        }
    }
}

/// 23. A leader elected in the transition while it is what is published holds the old
///     place's token for its whole term: once `B` is published and the election is read on
///     the new place, `leader()` and `observe()` still report that token, not one made from
///     the new place's order id.
#[tokio::test(start_paused = true)]
async fn a_leader_elected_in_a_transition_keeps_its_token_once_the_next_layout_is_published() {
    let c = Cluster::start().await;
    let (a, t, _) = reshard();
    let directory = c.directory(&a).await;
    let (p1, observer) = (c.following(&NODES).await, c.following(&NODES).await);
    let name = moved(&t, 1).remove(0);
    within(directory.begin_add("n3")).await.unwrap();
    follows(&p1, t.epoch()).await;
    follows(&observer, t.epoch()).await;
    let leadership = within(p1.election(&name).campaign(b"leader"))
        .await
        .unwrap();
    let token = leadership.fencing_token();
    assert_eq!(
        token.epoch,
        a.epoch(),
        "the old place's token, as A+B is published"
    );
    let mut leaders = observer.election(&name).observe();
    let seen = next_where(&mut leaders, "the leader", Option::is_some).await;
    assert_eq!(seen.map(|l| l.fencing_token), Some(token));

    none_lagging(&directory).await;
    let b = within(directory.finish()).await.unwrap();
    follows(&observer, b.epoch()).await;
    let read = within(observer.election(&name).leader())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        read.node.as_deref(),
        Some(t.parts(&name)[1].node.as_str()),
        "read on the new place"
    );
    assert_eq!(
        (read.fencing_token, read.data.as_slice()),
        (token, &b"leader"[..])
    );
    let seen = next_where(&mut leaders, "the leader on the new place", |l| {
        l.as_ref().is_some_and(|l| l.node == read.node)
    })
    .await;
    assert_eq!(seen.map(|l| l.fencing_token), Some(token));
    // A new value keeps the token.
    within(leadership.set_data(b"leader:2")).await.unwrap();
    let seen = next_where(&mut leaders, "the new value", |l| {
        l.as_ref().is_some_and(|l| l.data == b"leader:2")
    })
    .await;
    assert_eq!(seen.map(|l| l.fencing_token), Some(token));
    assert!(within(leadership.release()).await.unwrap());
}

/// 22. An observed election and a watched group follow a moved name through a reshard, as
///     one node's `observe()` and `watch()` follow their semaphore: the leader taken in `B`
///     is seen on its new place with a token of `B`'s epoch, and the member set moves with
///     its members; the candidates are read where they wait.
#[tokio::test(start_paused = true)]
async fn an_observed_election_and_a_watched_group_follow_a_reshard() {
    let c = Cluster::start().await;
    let (a, t, _) = reshard();
    let directory = c.directory(&a).await;
    let (p1, observer) = (c.following(&NODES).await, c.following(&NODES).await);
    // An election and a group cannot share a name: two moved names.
    let names = moved(&t, 2);
    let (name, group) = (names[0].clone(), names[1].clone());
    let (old, new) = (
        t.parts(&name)[0].node.clone(),
        t.parts(&name)[1].node.clone(),
    );
    let mut leaders = observer.election(&name).observe();
    let mut sets = observer.group(&group).watch();

    next_where(&mut leaders, "nobody leads", Option::is_none).await;
    let leadership = within(p1.election(&name).campaign(b"in-a")).await.unwrap();
    let seen = next_where(&mut leaders, "the leader of A", Option::is_some).await;
    let seen = seen.unwrap();
    assert_eq!(
        (
            seen.data.as_slice(),
            seen.node.as_deref().unwrap_or_default()
        ),
        (&b"in-a"[..], old.as_str())
    );
    assert_eq!(seen.fencing_token, leadership.fencing_token());
    let candidates = within(observer.election(&name).candidates()).await.unwrap();
    assert_eq!(candidates.len(), 1);
    assert!(candidates[0].is_leader && !candidates[0].is_me);
    // The leader's own token (with its epoch) and value, as the leader reads them.
    assert_eq!(candidates[0].fencing_token, leadership.fencing_token());
    assert_eq!(candidates[0].data, b"in-a");
    let member = within(p1.group(&group).join(b"w1")).await.unwrap();
    next_where(&mut sets, "w1 in A", |s| s.len() == 1 && s[0].data == b"w1").await;

    // The reshard: the leader resigns in the transition, the next one leads in B.
    within(directory.begin_add("n3")).await.unwrap();
    follows(&p1, t.epoch()).await;
    follows(&observer, t.epoch()).await;
    assert!(within(leadership.release()).await.unwrap());
    next_where(&mut leaders, "the resignation", Option::is_none).await;
    none_lagging(&directory).await;
    let b = within(directory.finish()).await.unwrap();
    follows(&p1, b.epoch()).await;
    follows(&observer, b.epoch()).await;
    let p2 = c.following(&NODES).await;
    let leadership = within(p2.election(&name).campaign(b"in-b")).await.unwrap();
    let seen = next_where(&mut leaders, "the leader of B", |l| {
        l.as_ref().is_some_and(|l| l.data == b"in-b")
    })
    .await
    .unwrap();
    assert_eq!(seen.node, Some(new));
    assert_eq!(seen.fencing_token.epoch, b.epoch());
    assert_eq!(seen.fencing_token, leadership.fencing_token());

    // The member moved with the layout; a member joining in B is seen beside it.
    let other = within(p2.group(&group).join(b"w2")).await.unwrap();
    next_where(&mut sets, "w1 and w2 in B", |s| s.len() == 2).await;
    assert!(within(member.leave()).await.unwrap());
    next_where(&mut sets, "w2 alone", |s| {
        s.len() == 1 && s[0].data == b"w2"
    })
    .await;
    assert!(within(other.leave()).await.unwrap());
    assert!(within(leadership.release()).await.unwrap());
}
