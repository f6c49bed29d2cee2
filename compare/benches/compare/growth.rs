//! Row 9: cost as the work grows. Sessions queue on one mutex, one after another, to a depth
//! of 10, 1,000 and 10,000; at each depth the row measures what one more queued acquire
//! costs (at the tail, behind all the others) and what a handoff costs at the head and at
//! the tail of the queue, as the lock passes down the whole of it. The emulator runs in this
//! process, so the CPU time is the client's and the emulator's together, and the server's
//! side is counted exactly by the emulator ([`Emulator::traffic`]).

use std::time::{Duration, Instant};

use futures::StreamExt;
use ydb_coordination::emulator::{Emulator, Traffic};
use ydb_coordination::{AcquireOptions, Client, Session, config::DescribeOptions};

use super::stats::quantile;
use super::{R, cpu, cut_until_attached, ours_session_options, within};

/// How many acquires, and handoffs, are measured at each end of the queue.
const MEASURED: usize = 100;

/// The longest one wait of the row may take.
const WAIT: Duration = Duration::from_secs(30);

/// One depth's measurements.
#[derive(Debug, Clone)]
pub(crate) struct Depth {
    pub(crate) depth: usize,
    /// Per queued acquire at the tail: acquire until `queued()` and one describe answered
    /// on the same stream after it (so whatever the acquire asks while it waits is done).
    pub(crate) enqueue: Vec<Duration>,
    /// Process CPU time (client and emulator) per queued acquire at the tail.
    pub(crate) enqueue_cpu: Duration,
    /// What the server was asked and sent per queued acquire at the tail (the describe
    /// included).
    pub(crate) enqueue_traffic: PerOp,
    /// Release until the next holder's grant, at the head of the full queue.
    pub(crate) handoff_head: Vec<Duration>,
    /// The same, over the last handoffs.
    pub(crate) handoff_tail: Vec<Duration>,
    /// What the server was asked and sent per handoff at the head.
    pub(crate) handoff_traffic: PerOp,
}

/// Traffic per operation.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PerOp {
    pub(crate) requests: f64,
    pub(crate) bytes: f64,
    pub(crate) entries: f64,
}

impl PerOp {
    fn of(t: Traffic, ops: usize) -> Self {
        let ops = ops.max(1) as f64;
        Self {
            requests: t.requests as f64 / ops,
            bytes: t.response_bytes as f64 / ops,
            entries: t.described_entries as f64 / ops,
        }
    }
}

fn lock() -> AcquireOptions {
    AcquireOptions::exclusive().ephemeral(true)
}

/// Queues `depth` sessions on one mutex and passes it down the queue.
pub(crate) async fn queue(depth: usize) -> R<Depth> {
    let emulator = Emulator::builder().node("/local/growth").start().await?;
    let client = Client::connect(&emulator.connection_string()).await?;
    let node = "/local/growth";
    let holder = client.session(node, ours_session_options()).await?;
    let sessions: Vec<Session> = futures::stream::iter(0..depth)
        .map(|_| client.session(node, ours_session_options()))
        .buffer_unordered(64)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_, _>>()?;
    let first = within("holder acquire", WAIT, holder.acquire("growth", lock())).await?;

    // Every session but the measured tail queues in batches, in order.
    let measured = MEASURED.min(depth).max(1);
    if depth == 0 {
        return Err("a queue needs at least one session".into());
    }
    let (bulk, tail) = sessions.split_at(depth - measured);
    let mut acquires = Vec::with_capacity(depth);
    for batch in bulk.chunks(MEASURED) {
        let mut queued: Vec<_> = batch.iter().map(|s| s.acquire("growth", lock())).collect();
        for q in &mut queued {
            if !within("queue", WAIT, async { Ok::<_, String>(q.queued().await) }).await? {
                return Err("an acquire of the bulk was not queued".into());
            }
        }
        acquires.extend(queued);
    }
    // The tail, one at a time behind everyone before it.
    let mut enqueue = Vec::with_capacity(measured);
    let (cpu0, traffic0) = (cpu::used()?, emulator.traffic());
    for s in tail {
        let t = Instant::now();
        let mut acquire = s.acquire("growth", lock());
        if !within("queue", WAIT, async {
            Ok::<_, String>(acquire.queued().await)
        })
        .await?
        {
            return Err("an acquire of the tail was not queued".into());
        }
        within(
            "describe",
            WAIT,
            s.describe_semaphore("growth", DescribeOptions::new()),
        )
        .await?;
        enqueue.push(t.elapsed());
        acquires.push(acquire);
    }
    let enqueue_cpu = (cpu::used()? - cpu0) / measured as u32;
    let enqueue_traffic = PerOp::of(emulator.traffic().since(&traffic0), measured);

    // Down the queue: each holder releases as soon as it is granted.
    let mut handoff_head = Vec::with_capacity(measured);
    let mut handoff_tail = Vec::with_capacity(measured);
    let mut handoff_traffic = PerOp::default();
    let traffic0 = emulator.traffic();
    let mut held = first;
    for (i, acquire) in acquires.into_iter().enumerate() {
        let t = Instant::now();
        let release = tokio::spawn(held.release());
        held = match within("grant", WAIT, acquire).await {
            Ok(lease) => lease,
            Err(e) => {
                release.abort();
                return Err(e);
            }
        };
        let took = t.elapsed();
        within("release", WAIT, async {
            release
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| e.to_string())
        })
        .await?;
        if i < measured {
            handoff_head.push(took);
            if i + 1 == measured {
                handoff_traffic = PerOp::of(emulator.traffic().since(&traffic0), measured);
            }
        }
        if i >= depth - measured {
            handoff_tail.push(took);
        }
    }
    within("last release", WAIT, held.release()).await?;
    futures::stream::iter(sessions.iter().chain([&holder]))
        .for_each_concurrent(64, |s| s.close())
        .await;
    emulator.shutdown().await;
    Ok(Depth {
        depth,
        enqueue,
        enqueue_cpu,
        enqueue_traffic,
        handoff_head,
        handoff_tail,
        handoff_traffic,
    })
}

/// One session holding many leases, and a reattach under them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Held {
    pub(crate) leases: usize,
    /// Wall time per lease to acquire them all (pipelined, 1,024 at a time).
    pub(crate) acquire: Duration,
    /// Stream cut until the session is attached again and a describe was answered: the
    /// median of [`REATTACHES`].
    pub(crate) reattach: Duration,
    /// Process CPU time (client and emulator) for a reattach: the median.
    pub(crate) reattach_cpu: Duration,
}

/// How many reattaches [`held`] measures.
pub(crate) const REATTACHES: usize = 9;

/// Acquires `leases` ephemeral semaphores on one session, then [`REATTACHES`] times cuts every
/// connection and waits for the session to attach again with every lease kept.
pub(crate) async fn held(leases: usize) -> R<Held> {
    let emulator = Emulator::builder().node("/local/held").start().await?;
    let client = Client::connect(&emulator.connection_string()).await?;
    let session = client
        .session("/local/held", ours_session_options())
        .await?;
    let t = Instant::now();
    let held: Vec<_> = futures::stream::iter(0..leases)
        .map(|i| session.acquire(&format!("lease-{i:06}"), lock()))
        .buffer_unordered(1_024)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_, _>>()?;
    let acquire = t.elapsed() / leases.max(1) as u32;

    // A reattach takes a couple of milliseconds, as much as the machine's noise: the median
    // of several, each checked to keep every lease.
    let mut reattach = Vec::with_capacity(REATTACHES);
    let mut reattach_cpu = Vec::with_capacity(REATTACHES);
    for _ in 0..REATTACHES {
        let (cpu0, t) = (cpu::used()?, Instant::now());
        cut_until_attached(&emulator, &session, WAIT).await?;
        within(
            "describe",
            WAIT,
            session.describe_semaphore("lease-000000", DescribeOptions::new()),
        )
        .await?;
        reattach.push(t.elapsed());
        reattach_cpu.push(cpu::used()? - cpu0);
        if let Some(lost) = held.iter().position(|l| l.is_lost()) {
            return Err(format!("lease {lost} was lost in the reattach").into());
        }
    }
    futures::stream::iter(held)
        .for_each_concurrent(1_024, |l| async move {
            let _ = l.release().await;
        })
        .await;
    session.close().await;
    emulator.shutdown().await;
    Ok(Held {
        leases,
        acquire,
        reattach: quantile(&reattach, 0.5),
        reattach_cpu: quantile(&reattach_cpu, 0.5),
    })
}

/// A group's join cost at one size.
#[derive(Debug, Clone)]
pub(crate) struct GroupJoin {
    pub(crate) members: usize,
    pub(crate) watchers: usize,
    /// Per join, over the last joins: until `join()` returned.
    pub(crate) join: Vec<Duration>,
    /// Process CPU time (client and emulator) per join, the watchers' reads included.
    pub(crate) cpu: Duration,
    /// What the server was asked and sent per join, the watchers' reads included.
    pub(crate) traffic: PerOp,
    /// Sets the watchers received per join (at most one each: latest-value).
    pub(crate) sets_per_join: f64,
}

/// `watchers` sessions watch a group while `members` sessions join it one after another;
/// the last joins (up to [`MEASURED`]) are measured, each once every watcher saw it.
pub(crate) async fn group(members: usize, watchers: usize) -> R<GroupJoin> {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    if members == 0 {
        return Err("a group needs at least one member".into());
    }
    let emulator = Emulator::builder().node("/local/group").start().await?;
    let client = Client::connect(&emulator.connection_string()).await?;
    let node = "/local/group";
    let open = |n: usize| {
        futures::stream::iter(0..n)
            .map(|_| client.session(node, ours_session_options()))
            .buffer_unordered(64)
            .collect::<Vec<_>>()
    };
    let joiners: Vec<Session> = open(members).await.into_iter().collect::<Result<_, _>>()?;
    let watching: Vec<Session> = open(watchers).await.into_iter().collect::<Result<_, _>>()?;
    // Each watcher publishes the size of the last set it saw.
    let sets = Arc::new(AtomicU64::new(0));
    let mut seen = Vec::new();
    let mut tasks = tokio::task::JoinSet::new();
    for s in &watching {
        let (tx, rx) = tokio::sync::watch::channel(0usize);
        seen.push(rx);
        let (mut stream, sets) = (s.group("growth").watch(), sets.clone());
        tasks.spawn(async move {
            while let Some(Ok(set)) = stream.next().await {
                sets.fetch_add(1, Ordering::Relaxed);
                if tx.send(set.len()).is_err() {
                    return;
                }
            }
        });
    }
    // Every watcher has read the empty group before the first join (its first set marks
    // its receiver changed, though the size stays 0).
    for rx in &mut seen {
        within("watcher's first set", WAIT, rx.changed()).await?;
    }
    let measured = MEASURED.min(members).max(1);
    let mut memberships = Vec::with_capacity(members);
    let mut join = Vec::with_capacity(measured);
    let (mut cpu0, mut traffic0, mut sets0) = (Duration::ZERO, Traffic::default(), 0);
    for (i, s) in joiners.iter().enumerate() {
        if i == members - measured {
            (cpu0, traffic0) = (cpu::used()?, emulator.traffic());
            sets0 = sets.load(Ordering::Relaxed);
        }
        let t = Instant::now();
        memberships.push(within("join", WAIT, s.group("growth").join(b"member")).await?);
        let took = t.elapsed();
        // Every watcher has seen this member before the next one joins.
        for rx in &mut seen {
            within("watcher", WAIT, rx.wait_for(|n| *n > i)).await?;
        }
        if i >= members - measured {
            join.push(took);
        }
    }
    let cpu = (cpu::used()? - cpu0) / measured as u32;
    let traffic = PerOp::of(emulator.traffic().since(&traffic0), measured);
    let sets_per_join = (sets.load(Ordering::Relaxed) - sets0) as f64 / measured as f64;
    tasks.abort_all();
    drop(memberships);
    futures::stream::iter(joiners.iter().chain(&watching))
        .for_each_concurrent(64, |s| s.close())
        .await;
    emulator.shutdown().await;
    Ok(GroupJoin {
        members,
        watchers,
        join,
        cpu,
        traffic,
        sets_per_join,
    })
}
