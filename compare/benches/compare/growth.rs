//! Row 9: cost as the work grows. Sessions queue on one mutex, one after another, to a depth
//! of 10, 1,000 and 10,000; at each depth the row measures what one more queued acquire
//! costs (at the tail, behind all the others) and what a handoff costs at the head and at
//! the tail of the queue, as the lock passes down the whole of it. The emulator runs in this
//! process, so the CPU time is the client's and the emulator's together, and the server's
//! side is counted exactly by the emulator ([`Emulator::traffic`]).

use std::time::{Duration, Instant};

use futures::StreamExt;
use ydb_coordination::emulator::{Emulator, Traffic};
use ydb_coordination::{AcquireOptions, Client, DescribeOptions, Session};

use super::{R, cpu, ours_session_options, within};

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
    let measured = MEASURED.min(depth);
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
        held = within("grant", WAIT, acquire).await?;
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
