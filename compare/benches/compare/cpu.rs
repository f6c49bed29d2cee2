//! Rows 7 and 8: the client's CPU time per lock cycle (both crates), and the emulator's own
//! throughput and CPU time per acquire + release.
//!
//! Both put the emulator in a fresh child process (see `memory`), so the CPU time a process
//! reports of itself (`getrusage(RUSAGE_SELF)`: user + system, every thread) is one side's
//! alone: the client's in row 7, the emulator's in row 8.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nix::sys::resource::{UsageWho, getrusage};
use nix::sys::time::{TimeVal, TimeValLike};
use ydb_coordination::{AcquireOptions, Client};

use super::memory::{ADDR_VAR, N_VAR, NODE, ServerChild, run_client};
use super::{
    Floor, R, SESSION_TIMEOUT, STEP, Window, create_semaphores, ours_session_options, within,
    ydb_acquire, ydb_client, ydb_owners, ydb_release_queued, ydb_session,
};

/// The role of a row-7 client child.
pub(crate) const ROLE: &str = "cpu";
const SIDE_VAR: &str = "COMPARE_SIDE";

/// The CPU time (user + system, all threads) this process has used so far.
pub(crate) fn used() -> R<Duration> {
    let usage = getrusage(UsageWho::RUSAGE_SELF)?;
    let of = |t: TimeVal| Duration::from_micros(u64::try_from(t.num_microseconds()).unwrap_or(0));
    Ok(of(usage.user_time()) + of(usage.system_time()))
}

/// Row 7's result for one crate.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CpuCycle {
    /// Client CPU time per cycle.
    pub(crate) cpu: Duration,
    /// Wall time per cycle.
    pub(crate) wall: Duration,
    pub(crate) n: usize,
    /// `ydb` answers lost (and recovered from).
    pub(crate) lost: u64,
}

/// Runs `n` sequential lock cycles of `side` (`ours` or `ydb`) in a fresh client process
/// against an emulator in another one.
pub(crate) fn cycle(side: &str, n: usize) -> R<CpuCycle> {
    let server = ServerChild::start()?;
    let result = run_client(
        ROLE,
        side,
        &[
            (ADDR_VAR, server.connection.clone()),
            (SIDE_VAR, side.to_string()),
            (N_VAR, n.to_string()),
        ],
    );
    drop(server);
    let [cpu, wall, lost] = result?[..] else {
        return Err(format!("{side} cpu child: expected three numbers").into());
    };
    Ok(CpuCycle {
        cpu: Duration::from_nanos(cpu as u64),
        wall: Duration::from_nanos(wall as u64),
        n,
        lost: lost as u64,
    })
}

/// The entry point of a row-7 client child.
pub(crate) fn child(rt: &tokio::runtime::Runtime) -> R<()> {
    let connection = std::env::var(ADDR_VAR)?;
    let side = std::env::var(SIDE_VAR)?;
    let n: usize = std::env::var(N_VAR)?.parse()?;
    let (cpu, wall, lost) = rt.block_on(cycles(&connection, &side, n))?;
    let per = |d: Duration| d.as_nanos() / n.max(1) as u128;
    println!("RESULT {} {} {lost}", per(cpu), per(wall));
    Ok(())
}

/// Measures `n` cycles after a warm-up: (CPU time, wall time, lost `ydb` answers).
async fn cycles(connection: &str, side: &str, n: usize) -> R<(Duration, Duration, u64)> {
    let client = Client::connect(connection).await?;
    create_semaphores(&client, NODE, &["cycle".to_string()]).await?;
    let warmup = (n / 10).max(20);
    match side {
        "ours" => {
            let session = client.session(NODE, ours_session_options()).await?;
            let cycle = || async {
                let acquire = session.acquire("cycle", AcquireOptions::new());
                let lease = within("ours acquire", STEP, acquire).await?;
                within("ours release", STEP, lease.release()).await?;
                R::Ok(())
            };
            measured(warmup, n, cycle).await.map(|(c, w)| (c, w, 0))
        }
        "ydb" => {
            let ydb = ydb_client(connection).await?;
            let session = ydb_session(&ydb, NODE).await?;
            let options = ydb::AcquireOptionsBuilder::default()
                .timeout(SESSION_TIMEOUT)
                .build()?;
            let lost = AtomicU64::new(0);
            // As row 1: acquire, drop (one release sent), describe until the owner is gone.
            let cycle = || async {
                let lease = ydb_acquire(&session, "cycle", &options, &lost).await?;
                ydb_release_queued(lease).await?;
                while !ydb_owners(&session, "cycle", &lost).await?.is_empty() {}
                R::Ok(())
            };
            let (c, w) = measured(warmup, n, cycle).await?;
            Ok((c, w, lost.load(Ordering::Relaxed)))
        }
        other => Err(format!("unknown side {other:?}").into()),
    }
}

/// Runs `cycle` `warmup` times, then `n` times measured: (CPU time, wall time).
async fn measured<F, Fut>(warmup: usize, n: usize, cycle: F) -> R<(Duration, Duration)>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = R<()>>,
{
    for _ in 0..warmup {
        cycle().await?;
    }
    let (cpu, t) = (used()?, Instant::now());
    for _ in 0..n {
        cycle().await?;
    }
    Ok((used()?.saturating_sub(cpu), t.elapsed()))
}

/// Row 8's result.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EmulatorLoad {
    /// Acquire + release pairs per second.
    pub(crate) rate: f64,
    /// The emulator's CPU time per pair.
    pub(crate) cpu_per_pair: Duration,
    pub(crate) sessions: usize,
}

/// `sessions` bare protocol streams (the floor's client, so the load generator costs as
/// little as possible) each cycling its own semaphore on an emulator in a child process,
/// for one window of `length`.
pub(crate) async fn emulator(sessions: usize, length: Duration) -> R<EmulatorLoad> {
    let mut server = ServerChild::start()?;
    let client = Client::connect(&server.connection).await?;
    let names: Vec<String> = (0..sessions).map(|i| format!("e-{i:03}")).collect();
    create_semaphores(&client, NODE, &names).await?;
    let authority = server
        .connection
        .trim_start_matches("grpc://")
        .split('/')
        .next()
        .unwrap_or_default()
        .to_string();
    let uri = format!("http://{authority}");
    let mut floors = Vec::with_capacity(sessions);
    for _ in 0..sessions {
        floors.push(Floor::connect(&uri, NODE).await?);
    }
    let window = Window::new(Duration::from_millis(300), length);
    let pairs = Arc::new(AtomicU64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for (mut floor, name) in floors.into_iter().zip(names) {
        let pairs = pairs.clone();
        tasks.spawn(async move {
            while !window.over() {
                floor.raw_cycle(&name, false).await?;
                if window.contains(Instant::now()) {
                    pairs.fetch_add(1, Ordering::Relaxed);
                }
            }
            R::Ok(())
        });
    }
    tokio::time::sleep_until(tokio::time::Instant::from_std(window.from)).await;
    let before = server.cpu()?;
    tokio::time::sleep_until(tokio::time::Instant::from_std(window.to)).await;
    let after = server.cpu()?;
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    let n = pairs.load(Ordering::Relaxed);
    Ok(EmulatorLoad {
        rate: window.rate(n),
        cpu_per_pair: after.saturating_sub(before) / u32::try_from(n.max(1)).unwrap_or(u32::MAX),
        sessions,
    })
}
