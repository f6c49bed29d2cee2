//! Scale: one session carries 10,000 concurrently held leases and 10,000 queued acquires,
//! across a reattach, without quadratic slowdown; 2,000 sessions queue on one mutex, each
//! at the cost of the first.
//!
//! Every test runs on tokio's paused clock (so keepalives and timeouts cost nothing), but the
//! work itself is real CPU work in the driver and the emulator: the growth check times it
//! with `std::time::Instant`, which the paused tokio clock does not affect.

use crate::common;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use common::{Env, wait_state, within};
use futures::StreamExt;
use futures::future::join_all;
use tokio::task::unconstrained;
use ydb_coordination::emulator::Traffic;
use ydb_coordination::{
    AcquireOptions, FencingToken, Lease, Session, config::DescribeOptions, session::SessionState,
};

/// The scale the session must carry.
const N: usize = 10_000;

/// Runs the tests of this file one at a time, so that the growth check measures one workload,
/// not a workload plus whatever the other tests do on the same cores. Taken without `within`:
/// the wait is on another test's real CPU time, and the paused clock would run the timeout
/// out at once while this runtime idles; the lock cannot be held forever (tokio's mutex is
/// released when a test panics).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn lock() -> AcquireOptions {
    AcquireOptions::exclusive().ephemeral(true)
}

/// Awaits every future of `futures` at once (bounded by [`within`]).
///
/// The join runs outside tokio's cooperative budget: `join_all` over thousands of futures
/// (a `FuturesUnordered` inside) polls every woken future each time the task runs, and once
/// the budget of 128 is spent each of them returns `Pending` and is woken again, so a
/// batch of `k` answers costs `O(k^2 / 128)` polls in the test itself
/// (rust-lang/futures-rs#2053). Measured here (debug build, two cores), per release: with
/// the budget 45-76 us at 2,500 and 177-283 us at 40,000; without it 35 and 51 us. That is
/// the test's own overhead, not the session's, and it would hide whatever the session does.
async fn all_of<I>(futures: I) -> Vec<<I::Item as std::future::Future>::Output>
where
    I: IntoIterator,
    I::Item: std::future::Future,
{
    within(unconstrained(join_all(futures))).await
}

fn name(i: usize) -> String {
    format!("sem-{i:05}")
}

/// Acquires `sem-0..sem-n` on `s`, all at once; every grant must succeed.
async fn acquire_all(s: &Session, n: usize) -> Vec<Lease> {
    let results = all_of((0..n).map(|i| s.acquire(&name(i), lock()))).await;
    results
        .into_iter()
        .enumerate()
        .map(|(i, r)| r.unwrap_or_else(|e| panic!("acquire {}: {e}", name(i))))
        .collect()
}

/// Releases every lease at once; each must be released by the server (`true`).
async fn release_all(leases: Vec<Lease>) {
    let results = all_of(leases.into_iter().map(Lease::release)).await;
    for (i, r) in results.into_iter().enumerate() {
        assert!(r.unwrap_or_else(|e| panic!("release #{i}: {e}")));
    }
}

/// Cuts every connection and waits until each of `sessions` has seen the loss and attached
/// again (a change is awaited first, so a session that is already back still counts).
async fn cut_and_reattach(env: &Env, sessions: &[&Session]) {
    let mut changes: Vec<_> = sessions.iter().map(|s| s.state_changes()).collect();
    for rx in &mut changes {
        rx.mark_unchanged();
    }
    env.emulator.net().cut();
    for (rx, s) in changes.iter_mut().zip(sessions) {
        within(rx.changed())
            .await
            .unwrap_or_else(|e| panic!("state channel closed: {e}"));
        let state = wait_state(s, |st| {
            matches!(st, SessionState::Attached { .. } | SessionState::Expired)
        })
        .await;
        assert!(
            matches!(state, SessionState::Attached { session_id } if session_id == s.id()),
            "{state:?}"
        );
    }
}

/// Asserts `leases` hold `sem-0..sem-n` in order with pairwise distinct fencing tokens and
/// live cancellation tokens.
fn assert_distinct_live(leases: &[Lease], n: usize) {
    assert_eq!(leases.len(), n);
    let mut tokens = HashSet::with_capacity(n);
    for (i, lease) in leases.iter().enumerate() {
        assert_eq!(lease.name(), name(i));
        assert!(!lease.is_lost(), "{} lost", lease.name());
        assert!(
            tokens.insert(lease.fencing_token()),
            "fencing token {} repeated",
            lease.fencing_token()
        );
    }
}

/// Wall-clock time of each phase of [`workload`].
#[derive(Debug, Default, Clone, Copy)]
struct Phases {
    acquire: Duration,
    reattach_held: Duration,
    queue: Duration,
    reattach_queued: Duration,
    handover: Duration,
    release: Duration,
}

impl Phases {
    fn total(&self) -> Duration {
        self.acquire
            + self.reattach_held
            + self.queue
            + self.reattach_queued
            + self.handover
            + self.release
    }
}

impl std::fmt::Display for Phases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "acquire {:?}, reattach (held) {:?}, queue {:?}, reattach (queued) {:?}, \
             handover {:?}, release {:?}, total {:?}",
            self.acquire,
            self.reattach_held,
            self.queue,
            self.reattach_queued,
            self.handover,
            self.release,
            self.total()
        )
    }
}

/// The whole scenario at size `n`, on a fresh emulator, with its checks:
///
/// 1. `holder` acquires `n` distinct ephemeral semaphores concurrently;
/// 2. every connection is cut and both sessions reattach: nothing is lost;
/// 3. `waiter` queues one acquire per semaphore;
/// 4. every connection is cut again: `waiter` sends its `n` pending acquires again;
/// 5. `holder` releases everything and every queued acquire is granted;
/// 6. `waiter` releases everything and the semaphores are gone.
async fn workload(n: usize) -> Phases {
    let mut phases = Phases::default();
    let env = Env::new().await;
    let holder = env.session().await;
    let waiter = env.session().await;

    let t = Instant::now();
    let held = acquire_all(&holder, n).await;
    phases.acquire = t.elapsed();
    assert_distinct_live(&held, n);

    let t = Instant::now();
    let id = holder.id();
    cut_and_reattach(&env, &[&holder, &waiter]).await;
    phases.reattach_held = t.elapsed();
    assert_eq!(holder.id(), id);
    assert_distinct_live(&held, n);
    assert_eq!(env.emulator.semaphore_names("app").len(), n);

    let t = Instant::now();
    let mut acquires: Vec<_> = (0..n).map(|i| waiter.acquire(&name(i), lock())).collect();
    let queued = all_of(acquires.iter_mut().map(|a| a.queued())).await;
    phases.queue = t.elapsed();
    assert!(queued.iter().all(|q| *q), "every acquire must be queued");

    let t = Instant::now();
    cut_and_reattach(&env, &[&holder, &waiter]).await;
    // A describe is answered after every acquire sent before it on the same stream: the
    // replayed acquires have reached the server by then.
    within(waiter.describe_semaphore(&name(n - 1), DescribeOptions::new()))
        .await
        .unwrap_or_else(|e| panic!("describe after the reattach: {e}"));
    phases.reattach_queued = t.elapsed();
    assert_distinct_live(&held, n);
    let d = within(holder.describe_semaphore(&name(n - 1), DescribeOptions::new().waiters(true)))
        .await
        .unwrap_or_else(|e| panic!("describe waiters: {e}"));
    assert_eq!(d.waiters.len(), 1);
    assert_eq!(d.waiters[0].session_id, waiter.id());

    let t = Instant::now();
    let fences: Vec<FencingToken> = held.iter().map(Lease::fencing_token).collect();
    release_all(held).await;
    let granted: Vec<Lease> = all_of(acquires)
        .await
        .into_iter()
        .enumerate()
        .map(|(i, r)| r.unwrap_or_else(|e| panic!("queued acquire {}: {e}", name(i))))
        .collect();
    phases.handover = t.elapsed();
    assert_distinct_live(&granted, n);
    for (lease, old) in granted.iter().zip(&fences) {
        assert!(lease.fencing_token() > *old, "{}", lease.name());
    }

    let t = Instant::now();
    release_all(granted).await;
    phases.release = t.elapsed();
    assert!(env.emulator.semaphore_names("app").is_empty());
    phases
}

#[tokio::test(start_paused = true)]
async fn one_session_holds_ten_thousand_leases() {
    let _serial = SERIAL.lock().await;
    let env = Env::new().await;
    let s = env.session().await;

    let t = Instant::now();
    let leases = acquire_all(&s, N).await;
    let acquired = t.elapsed();
    assert_distinct_live(&leases, N);
    assert_eq!(env.emulator.semaphore_names("app").len(), N);
    let tokens: Vec<_> = leases.iter().map(Lease::token).collect();

    let t = Instant::now();
    let id = s.id();
    cut_and_reattach(&env, &[&s]).await;
    let reattached = t.elapsed();
    assert_eq!(s.id(), id);
    assert!(tokens.iter().all(|t| !t.is_cancelled()), "a token fired");
    assert_distinct_live(&leases, N);
    assert_eq!(env.emulator.semaphore_names("app").len(), N);
    assert_eq!(env.emulator.session_ids("app"), vec![id]);
    // Still ours on the server: another session cannot take the first or the last one.
    let other = env.session().await;
    for i in [0, N - 1] {
        let got = within(other.try_acquire(&name(i), lock())).await.unwrap();
        assert!(got.is_none(), "{} was free after the reattach", name(i));
    }

    let t = Instant::now();
    release_all(leases).await;
    let released = t.elapsed();
    assert!(tokens.iter().all(|t| t.is_cancelled()));
    assert!(env.emulator.semaphore_names("app").is_empty());
    eprintln!(
        "{N} leases on one session: acquire {acquired:?}, cut+reattach {reattached:?}, \
         release {released:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn ten_thousand_queued_acquires_on_one_session() {
    let _serial = SERIAL.lock().await;
    let env = Env::new().await;
    let holder = env.session().await;
    let waiter = env.session().await;
    let held = acquire_all(&holder, N).await;
    assert_distinct_live(&held, N);

    let t = Instant::now();
    let mut acquires: Vec<_> = (0..N).map(|i| waiter.acquire(&name(i), lock())).collect();
    let queued = all_of(acquires.iter_mut().map(|a| a.queued())).await;
    let queue = t.elapsed();
    assert!(queued.iter().all(|q| *q), "every acquire must be queued");

    let t = Instant::now();
    let fences: Vec<FencingToken> = held.iter().map(Lease::fencing_token).collect();
    release_all(held).await;
    let granted: Vec<Lease> = all_of(acquires)
        .await
        .into_iter()
        .enumerate()
        .map(|(i, r)| r.unwrap_or_else(|e| panic!("queued acquire {}: {e}", name(i))))
        .collect();
    let handover = t.elapsed();
    assert_distinct_live(&granted, N);
    for (lease, old) in granted.iter().zip(&fences) {
        assert_eq!(lease.session_id(), waiter.id());
        assert!(lease.fencing_token() > *old, "{}", lease.name());
    }
    assert_eq!(env.emulator.semaphore_names("app").len(), N);
    release_all(granted).await;
    assert!(env.emulator.semaphore_names("app").is_empty());
    eprintln!("{N} queued acquires on one session: queue {queue:?}, handover {handover:?}");
}

/// Catches quadratic behaviour without an absolute time budget: the whole [`workload`] at
/// 10,000 must take less than 12x its time at 2,500. Linear work gives ~4x (measured 4-6x in
/// debug on two cores); work dominated by a quadratic term gives ~16x.
///
/// The bound is generous on purpose, since the runs share a machine with whatever else runs
/// there and a slow spell during the large run inflates the ratio: with `L` the linear and `Q`
/// the quadratic part of the large run, the ratio is `(L + Q) / (L / 4 + Q / 16)`, which
/// passes 12x once `Q` is ~90% of the time. So this catches a quadratic path that
/// dominates, as the `join_all` one described at [`all_of`] did (release alone grew 8x).
/// To keep noise out: the tests of this file run one at a time ([`SERIAL`]), a run at 500
/// warms up first, the small size counts its faster of two runs, and a large run over the
/// bound is measured once more (a real quadratic term fails both).
#[tokio::test(start_paused = true)]
async fn work_grows_linearly_with_the_number_of_leases() {
    const BOUND: f64 = 12.0;
    let _serial = SERIAL.lock().await;
    let _ = workload(N / 20).await;
    let small = faster(workload(N / 4).await, workload(N / 4).await);
    eprintln!("{:>6}: {small}", N / 4);
    let mut large = workload(N).await;
    eprintln!("{N:>6}: {large}");
    if ratio(&large, &small) >= BOUND {
        large = faster(large, workload(N).await);
        eprintln!("{N:>6}: {large} (the faster of two)");
    }
    eprintln!(
        "ratio {:.1}x (linear ~4x, quadratic ~16x); per phase: acquire {:.1}x, queue {:.1}x, \
         reattach with queued {:.1}x, handover {:.1}x, release {:.1}x",
        ratio(&large, &small),
        per(large.acquire, small.acquire),
        per(large.queue, small.queue),
        per(large.reattach_queued, small.reattach_queued),
        per(large.handover, small.handover),
        per(large.release, small.release),
    );
    assert!(
        ratio(&large, &small) < BOUND,
        "{N} leases took {:.1}x the time of {}: {large} vs {small}",
        ratio(&large, &small),
        N / 4
    );
}

fn faster(a: Phases, b: Phases) -> Phases {
    if a.total() <= b.total() { a } else { b }
}

fn per(large: Duration, small: Duration) -> f64 {
    large.as_secs_f64() / small.as_secs_f64()
}

fn ratio(large: &Phases, small: &Phases) -> f64 {
    per(large.total(), small.total())
}

/// How many acquires the deep-queue test measures at once, at the head and at the tail.
const BATCH: usize = 100;

/// The sessions of [`a_fleet_queues_on_one_mutex_at_a_flat_cost`].
const FLEET: usize = 2_000;

/// What the server sent per operation, as (entries of descriptions, bytes).
fn per_op(t: &Traffic, ops: usize) -> (f64, f64) {
    let ops = ops as f64;
    (
        t.described_entries as f64 / ops,
        t.response_bytes as f64 / ops,
    )
}

/// Asserts that `last` costs at most 1.2x of `first` per operation, in description entries
/// and in bytes.
fn assert_flat(what: &str, first: (f64, f64), last: (f64, f64)) {
    eprintln!(
        "{what}: {:.1} entries and {:.0} B per operation at the head, {:.1} and {:.0} B at \
         the tail",
        first.0, first.1, last.0, last.1
    );
    assert!(
        last.0 <= first.0 * 1.2 && last.1 <= first.1 * 1.2,
        "{what} grows with the queue: {first:?} per operation at the head, {last:?} at the tail"
    );
}

/// A fleet queueing on one lock: [`FLEET`] sessions queue on one mutex, a batch at a time,
/// each batch behind the ones before it, then the lock passes down the whole queue. What the
/// server sends per queued acquire, and per handoff, must not grow with the queue's depth
/// (counted by the emulator, so the check is exact: no clock; a cost that grows with the
/// depth is 20 times the first batch's at the last, so the fleet need not be larger; the
/// comparison bench's row 9 times a queue of 10,000). Each session starts out
/// without knowledge of the queue, so none reads the waiter list; the grants come in queue
/// order with increasing fencing tokens.
#[tokio::test(start_paused = true)]
async fn a_fleet_queues_on_one_mutex_at_a_flat_cost() {
    let _serial = SERIAL.lock().await;
    let env = Env::new().await;
    if !env.emulated() {
        return; // the check counts the emulator's traffic
    }
    let holder = env.session().await;
    let held = within(holder.acquire("deep", lock())).await.unwrap();
    let sessions: Vec<Session> = within(
        futures::stream::iter(0..FLEET)
            .map(|_| env.client.session(&env.node, Default::default()))
            .buffer_unordered(64)
            .collect::<Vec<_>>(),
    )
    .await
    .into_iter()
    .map(|s| s.unwrap_or_else(|e| panic!("session: {e}")))
    .collect();

    let mut acquires = Vec::with_capacity(FLEET);
    let mut enqueued = Vec::new();
    for batch in sessions.chunks(BATCH) {
        let before = env.emulator.traffic();
        let mut queued: Vec<_> = batch.iter().map(|s| s.acquire("deep", lock())).collect();
        let all = all_of(queued.iter_mut().map(|a| a.queued())).await;
        assert!(all.iter().all(|q| *q), "every acquire must be queued");
        // A describe on each stream is answered after everything sent before it on that
        // stream: all the batch asked for has been answered by then.
        for d in all_of(
            batch
                .iter()
                .map(|s| s.describe_semaphore("deep", DescribeOptions::new())),
        )
        .await
        {
            d.unwrap_or_else(|e| panic!("describe: {e}"));
        }
        enqueued.push(env.emulator.traffic().since(&before));
        acquires.extend(queued);
    }
    let depth = within(holder.describe_semaphore("deep", DescribeOptions::new().waiters(true)))
        .await
        .unwrap();
    assert_eq!(depth.waiters.len(), FLEET);
    assert_flat(
        "queued acquire",
        per_op(&enqueued[0], BATCH),
        per_op(&enqueued[enqueued.len() - 1], BATCH),
    );

    // Down the queue: each holder releases as soon as it is granted.
    let mut last_token = held.fencing_token();
    within(held.release()).await.unwrap();
    let mut handoffs = Vec::new();
    let mut before = env.emulator.traffic();
    for (i, (acquire, session)) in acquires.into_iter().zip(&sessions).enumerate() {
        let lease = within(acquire)
            .await
            .unwrap_or_else(|e| panic!("waiter {i}: {e}"));
        assert_eq!(
            lease.session_id(),
            session.id(),
            "grant {i} out of queue order"
        );
        assert!(
            lease.fencing_token() > last_token,
            "fencing token of grant {i}"
        );
        last_token = lease.fencing_token();
        assert!(within(lease.release()).await.unwrap());
        if (i + 1) % BATCH == 0 {
            let now = env.emulator.traffic();
            handoffs.push(now.since(&before));
            before = now;
        }
    }
    assert_flat(
        "handoff",
        per_op(&handoffs[0], BATCH),
        per_op(&handoffs[handoffs.len() - 1], BATCH),
    );
    assert!(env.emulator.semaphore_names("app").is_empty());
}
