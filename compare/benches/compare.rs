//! Side-by-side benchmarks; run with `cargo bench -p ydb-coordination-compare --bench compare`.
//!
//! This crate vs the official `ydb` crate (0.18.2) vs the protocol floor, all against the
//! in-process emulator over loopback TCP, in one run, on a multi-thread tokio runtime in real
//! time. Prints a markdown table (medians, p90, ratios) to stdout.
//!
//! Rows:
//! 1. lock cycle latency: one session, sequential exclusive acquire + confirmed release;
//!    the floor is two ping/pong round trips on a bare `Session` stream;
//! 2. pipelined throughput: 1,000 tasks on one session, each cycling its own semaphore;
//! 3. contended handoff: 16 sessions on one mutex;
//! 4. recovery: stream cut to `Attached`; session expiry to the next `hold()` guard;
//! 5. memory per held lease and per idle session (RSS, in separate processes);
//! 6. the metrics overhead;
//! 7. client CPU time per lock cycle (`getrusage`, the emulator in another process);
//! 8. the emulator's own throughput and CPU time per acquire + release;
//! 9. growth: a queue of 10, 1,000 and 10,000 sessions on one mutex, what one more queued
//!    acquire and a handoff cost at each depth;
//! 10. growth: 1,000 and 10,000 idle sessions (RSS, keepalive CPU), 10,000 and 100,000 held
//!     leases (RSS; a reattach under them);
//! 11. the rate limiter: the rate 1, 10 and 100 acquirers achieve against the configured one,
//!     and the round trip of an acquire that does not wait next to one unary call;
//! 12. the lock space: lock cycles of 16 workers on independent names over 1, 2 and 4 nodes
//!     (the emulator in another process), a lock of a moved name in the transition of a
//!     reshard against the plain layout, the fraction of names moved by adding a node.
//!
//! Rows 1 to 4, 8, 9, 10's reattach, 11 and 12 run under a time limit: a row that does not finish within it (a peer
//! that stops answering) is reported as failed, with the reason, and the next row runs. The
//! rows that measure child processes (5, 7) give each client child at most 180 s. An emulator
//! child (rows 5, 7, 8, 12) has 30 s for each answer (its address, its CPU time): one that gives
//! none fails its row. The table is printed whatever happened; the run fails if a row of this
//! crate failed.
//!
//! Environment:
//! - `COMPARE_ROWS=1,2,3,4,5,6,7,8,9,10,11,12` selects rows (default all);
//! - `COMPARE_SCALE=1.0` scales sample counts and run times (`5` for a long run); memory
//!   always uses 10,000 leases and 1,000 sessions unless scaled below 1. Under `cargo test`
//!   (no `--bench` argument) the bench is a smoke run that judges no number, at `0.02` unless
//!   the variable says otherwise;
//! - `COMPARE_ONLY=ours` or `ydb` runs one crate's side of rows 1 to 3 (for profiling);
//! - `COMPARE_SILENT_SERVER=1` makes every emulator child stay silent, to check that rows 5,
//!   7, 8 and 12 then fail within their bounds instead of hanging the run.

#[path = "compare/cpu.rs"]
mod cpu;
#[path = "compare/growth.rs"]
mod growth;
#[path = "compare/memory.rs"]
mod memory;
#[path = "compare/rate.rs"]
mod rate;
#[path = "compare/space.rs"]
mod space;
#[path = "compare/stats.rs"]
mod stats;

use std::error::Error;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use ydb_coordination::emulator::Emulator;
use ydb_coordination::{AcquireOptions, Client, SessionOptions, session::SessionState};
use ydb_grpc::ydb_proto::coordination::v1::coordination_service_client::CoordinationServiceClient;
use ydb_grpc::ydb_proto::coordination::{
    SessionRequest, SessionResponse, session_request, session_response,
};

use self::stats::{Summary, fmt_bytes, fmt_duration, fmt_rate, group, ratio};

type R<T> = Result<T, Box<dyn Error + Send + Sync>>;

/// How many times row 1 replaces a `ydb` session whose call never returned before it gives
/// up on the `ydb` side.
const YDB_RESTARTS: usize = 3;

/// The bound on any single await of the `ydb` crate (its request controller can lose a
/// response that arrives before the request is registered, and then waits forever).
const STEP: Duration = Duration::from_secs(10);
/// The session timeout for every session in rows 1-3.
const SESSION_TIMEOUT: Duration = Duration::from_secs(60);

/// Awaits `fut` for at most `limit`, turning a timeout or an error into an error naming `what`.
async fn within<T, E, F>(what: &str, limit: Duration, fut: F) -> R<T>
where
    F: Future<Output = Result<T, E>>,
    E: std::fmt::Debug,
{
    match tokio::time::timeout(limit, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(format!("{what}: {e:?}").into()),
        Err(_) => Err(format!("{what}: no answer within {limit:?}").into()),
    }
}

/// Cuts every connection of `emulator` and waits until `session` is attached again, each
/// change of its state within `limit`; a session that ends instead is an error.
async fn cut_until_attached(
    emulator: &Emulator,
    session: &ydb_coordination::Session,
    limit: Duration,
) -> R<()> {
    let mut states = session.state_changes();
    states.borrow_and_update();
    emulator.net().cut();
    loop {
        within("state change", limit, states.changed()).await?;
        let state = *states.borrow_and_update();
        match state {
            SessionState::Attached { .. } => return Ok(()),
            SessionState::Reattaching { .. } => {}
            other => return Err(format!("session ended on a cut: {other:?}").into()),
        }
    }
}

/// A `ydb` client on the emulator (its default discovery included).
async fn ydb_client(connection: &str) -> R<ydb::Client> {
    let builder = ydb::ClientBuilder::new_from_connection_string(connection)?;
    within("ydb ClientBuilder::build", STEP, builder.build()).await
}

fn ydb_session_options() -> R<ydb::SessionOptions> {
    Ok(ydb::SessionOptionsBuilder::default()
        .timeout(SESSION_TIMEOUT)
        .build()?)
}

async fn ydb_session(client: &ydb::Client, node: &str) -> R<ydb::CoordinationSession> {
    within(
        "ydb create_session",
        STEP,
        client
            .coordination_client()
            .create_session(node.to_string(), ydb_session_options()?),
    )
    .await
}

/// Creates limit-1 persistent semaphores on `node` with a session of this crate. Used for
/// the `ydb` crate's nodes too: its `create_semaphore` can lose its answer like any request
/// (see [`ydb_acquire`]), and a retry answered `ALREADY_EXISTS` would end its session.
async fn create_semaphores(client: &Client, node: &str, names: &[String]) -> R<()> {
    let session = client.session(node, ours_session_options()).await?;
    for name in names {
        session.create_semaphore(name, 1, b"").await?;
    }
    session.close().await;
    Ok(())
}

fn ours_session_options() -> SessionOptions {
    SessionOptions::new().timeout(SESSION_TIMEOUT)
}

/// Run settings from the environment.
#[derive(Debug, Clone)]
struct Config {
    rows: Vec<u8>,
    scale: f64,
    /// `COMPARE_ONLY=ours` or `ydb`: run one crate's side of rows 1-3 (for profiling).
    only: Option<String>,
}

impl Config {
    fn from_env() -> R<Self> {
        let rows = match std::env::var("COMPARE_ROWS") {
            Ok(v) => v
                .split(',')
                .map(|r| r.trim().parse::<u8>())
                .collect::<Result<Vec<_>, _>>()?,
            Err(_) => (1..=12).collect(),
        };
        // `cargo bench` passes `--bench`; `cargo test` runs the smoke run.
        let full = std::env::args().any(|a| a == "--bench");
        let scale = match std::env::var("COMPARE_SCALE") {
            Ok(v) => v.parse::<f64>()?,
            Err(_) if full => 1.0,
            Err(_) => 0.02,
        };
        if !(scale > 0.0 && scale.is_finite()) {
            return Err("COMPARE_SCALE must be a positive number".into());
        }
        let only = std::env::var("COMPARE_ONLY").ok();
        if let Some(o) = &only
            && o != "ours"
            && o != "ydb"
        {
            return Err("COMPARE_ONLY must be `ours` or `ydb`".into());
        }
        Ok(Self { rows, scale, only })
    }

    fn runs(&self, side: &str) -> bool {
        self.only.as_deref().is_none_or(|o| o == side)
    }

    fn has(&self, row: u8) -> bool {
        self.rows.contains(&row)
    }

    fn count(&self, base: usize, min: usize) -> usize {
        ((base as f64 * self.scale).round() as usize).max(min)
    }

    /// The longest one row may run.
    fn row_limit(&self) -> Duration {
        Duration::from_secs(120).mul_f64(self.scale.max(1.0))
    }

    fn duration(&self, base: Duration) -> Duration {
        base.mul_f64(self.scale).max(Duration::from_millis(200))
    }
}

// ---------------------------------------------------------------------------------------
// The floor: a bare bidi `Session` stream, ping/pong round trips.
// ---------------------------------------------------------------------------------------

/// One raw `Session` stream through the generated client: the bench task writes requests
/// into the stream and reads responses itself, with no task in between.
struct Floor {
    tx: mpsc::UnboundedSender<SessionRequest>,
    rx: tonic::Streaming<SessionResponse>,
    next: u64,
}

impl Floor {
    async fn open(emulator: &Emulator, node: &str) -> R<Self> {
        Self::connect(&format!("http://{}", emulator.local_addr()), node).await
    }

    /// A floor stream to the emulator at `uri` (`http://host:port`).
    async fn connect(uri: &str, node: &str) -> R<Self> {
        let channel = tonic::transport::Endpoint::from_shared(uri.to_string())?
            .tcp_nodelay(true)
            .connect()
            .await?;
        let (tx, requests) = mpsc::unbounded_channel();
        tx.send(SessionRequest {
            request: Some(session_request::Request::SessionStart(
                session_request::SessionStart {
                    path: node.to_string(),
                    session_id: 0,
                    timeout_millis: SESSION_TIMEOUT.as_millis() as u64,
                    description: "floor".to_string(),
                    seq_no: 1,
                    protection_key: vec![7; 16],
                },
            )),
        })?;
        let mut client = CoordinationServiceClient::new(channel);
        let rx = within(
            "floor session stream",
            STEP,
            client.session(UnboundedReceiverStream::new(requests)),
        )
        .await?
        .into_inner();
        let mut floor = Self { tx, rx, next: 0 };
        match floor.recv().await? {
            session_response::Response::SessionStarted(_) => Ok(floor),
            other => Err(format!("floor: unexpected {other:?}").into()),
        }
    }

    /// The next response that is not a server ping (those are answered here).
    async fn recv(&mut self) -> R<session_response::Response> {
        loop {
            let msg = within("floor recv", STEP, self.rx.message())
                .await?
                .ok_or("floor: stream ended")?;
            match msg.response {
                Some(session_response::Response::Ping(p)) => {
                    self.tx.send(SessionRequest {
                        request: Some(session_request::Request::Pong(session_request::PingPong {
                            opaque: p.opaque,
                        })),
                    })?;
                }
                Some(other) => return Ok(other),
                None => return Err("floor: empty response".into()),
            }
        }
    }

    /// A lock cycle spoken directly on the stream: `acquire_semaphore` (count 1), with a
    /// `describe_semaphore` of the owners pipelined right behind it when `describe` is set
    /// (what this crate sends to learn the fencing token of an immediate grant), then
    /// `release_semaphore`, each awaited.
    async fn raw_cycle(&mut self, name: &str, describe: bool) -> R<()> {
        use session_request::Request as Rq;
        use session_response::Response as Rs;
        self.next += 1;
        let acquire = self.next;
        self.tx.send(SessionRequest {
            request: Some(Rq::AcquireSemaphore(session_request::AcquireSemaphore {
                req_id: acquire,
                name: name.to_string(),
                timeout_millis: SESSION_TIMEOUT.as_millis() as u64,
                count: 1,
                data: Vec::new(),
                ephemeral: false,
            })),
        })?;
        let mut waiting = 1;
        if describe {
            self.next += 1;
            waiting += 1;
            self.tx.send(SessionRequest {
                request: Some(Rq::DescribeSemaphore(session_request::DescribeSemaphore {
                    req_id: self.next,
                    name: name.to_string(),
                    include_owners: true,
                    include_waiters: false,
                    watch_data: false,
                    watch_owners: false,
                })),
            })?;
        }
        while waiting > 0 {
            match self.recv().await? {
                Rs::AcquireSemaphoreResult(r) if r.req_id == acquire => {
                    if !r.acquired {
                        return Err("raw acquire: not acquired".into());
                    }
                    waiting -= 1;
                }
                Rs::DescribeSemaphoreResult(_) => waiting -= 1,
                Rs::AcquireSemaphorePending(_) => {}
                other => return Err(format!("raw cycle: unexpected {other:?}").into()),
            }
        }
        self.next += 1;
        let release = self.next;
        self.tx.send(SessionRequest {
            request: Some(Rq::ReleaseSemaphore(session_request::ReleaseSemaphore {
                req_id: release,
                name: name.to_string(),
            })),
        })?;
        match self.recv().await? {
            Rs::ReleaseSemaphoreResult(r) if r.req_id == release && r.released => Ok(()),
            other => Err(format!("raw release: unexpected {other:?}").into()),
        }
    }

    /// One client ping and its pong.
    async fn ping(&mut self) -> R<()> {
        self.next += 1;
        let opaque = self.next;
        self.tx.send(SessionRequest {
            request: Some(session_request::Request::Ping(session_request::PingPong {
                opaque,
            })),
        })?;
        loop {
            if let session_response::Response::Pong(p) = self.recv().await?
                && p.opaque == opaque
            {
                return Ok(());
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Row 1: lock cycle latency.
// ---------------------------------------------------------------------------------------

#[derive(Debug, Default)]
struct Latency {
    /// acquire(count 1 of a limit-1 semaphore) + `Lease::release().await`.
    ours: Vec<Duration>,
    /// `session.mutex(..).lock()` + `unlock()` (ephemeral, exclusive).
    ours_mutex: Vec<Duration>,
    /// acquire + drop (one release request) + describe until the owner is gone.
    ydb_confirmed: Vec<Duration>,
    /// Describe requests the confirmed `ydb` cycles needed.
    ydb_describes: u64,
    /// acquire + drop, until the release request is sent (not confirmed).
    ydb_sent: Vec<Duration>,
    /// Why the `ydb` part stopped, if it did (after [`YDB_RESTARTS`] replaced sessions).
    ydb_error: Option<String>,
    /// Why a `ydb` session was replaced (a call that never returned), in order.
    ydb_restarts: Vec<String>,
    /// `ydb` answers lost (and recovered from).
    ydb_lost: u64,
    /// Two sequential ping round trips.
    floor: Vec<Duration>,
    /// Single ping round trips.
    ping: Vec<Duration>,
    /// acquire + release spoken on a bare stream (no library).
    raw: Vec<Duration>,
    /// As `raw`, with a describe pipelined behind the acquire.
    raw_describe: Vec<Duration>,
}

async fn row_latency(cfg: &Config) -> R<Latency> {
    let emulator = Emulator::builder()
        .node("/local/ours")
        .node("/local/ydb")
        .node("/local/floor")
        .start()
        .await?;
    let client = Client::connect(&emulator.connection_string()).await?;
    let session = client
        .session("/local/ours", ours_session_options())
        .await?;
    session.create_semaphore("cycle", 1, b"").await?;
    let mutex = session.mutex("cycle-mutex");

    let ydb = ydb_client(&emulator.connection_string()).await?;
    let mut ydb_session = ydb_session(&ydb, "/local/ydb").await?;
    let mut ydb_name = "cycle".to_string();
    create_semaphores(&client, "/local/ydb", &[ydb_name.clone()]).await?;
    create_semaphores(&client, "/local/floor", &["cycle".to_string()]).await?;
    let acquire = ydb::AcquireOptionsBuilder::default()
        .timeout(SESSION_TIMEOUT)
        .build()?;

    let mut floor = Floor::open(&emulator, "/local/floor").await?;
    let lost = AtomicU64::new(0);

    let mut out = Latency::default();
    let batch = 50;
    let rounds = cfg.count(2000, 200).div_ceil(batch);
    let warmup_rounds = 4;
    for round in 0..warmup_rounds + rounds {
        let record = round >= warmup_rounds;
        // Interleaved in small batches, so drift on a shared machine hits every variant alike.
        for _ in 0..if cfg.runs("ours") { batch } else { 0 } {
            let t = Instant::now();
            let lease = within(
                "ours acquire",
                STEP,
                session.acquire("cycle", AcquireOptions::new()),
            )
            .await?;
            if !within("ours release", STEP, lease.release()).await? {
                return Err("ours: release answered released=false".into());
            }
            if record {
                out.ours.push(t.elapsed());
            }
        }
        for _ in 0..if cfg.runs("ours") { batch } else { 0 } {
            let t = Instant::now();
            let guard = within("ours mutex lock", STEP, mutex.lock()).await?;
            within("ours mutex unlock", STEP, guard.unlock()).await?;
            if record {
                out.ours_mutex.push(t.elapsed());
            }
        }
        if out.ydb_error.is_none() && cfg.runs("ydb") {
            let batch_of_ydb = async {
                for _ in 0..batch {
                    let t = Instant::now();
                    let lease = ydb_acquire(&ydb_session, &ydb_name, &acquire, &lost).await?;
                    // `Lease::release()` spawns a release and its `Drop` spawns a second
                    // one; dropping the lease sends exactly one.
                    ydb_release_queued(lease).await?;
                    loop {
                        let owners = ydb_owners(&ydb_session, &ydb_name, &lost).await?;
                        if record {
                            out.ydb_describes += 1;
                        }
                        if owners.is_empty() {
                            break;
                        }
                    }
                    if record {
                        out.ydb_confirmed.push(t.elapsed());
                    }
                }
                for _ in 0..batch {
                    let t = Instant::now();
                    let lease = ydb_acquire(&ydb_session, &ydb_name, &acquire, &lost).await?;
                    ydb_release_queued(lease).await?;
                    if record {
                        out.ydb_sent.push(t.elapsed());
                    }
                }
                Ok::<_, Box<dyn Error + Send + Sync>>(())
            };
            if let Err(e) = batch_of_ydb.await {
                // A `ydb` call that never returns leaves its session unusable (see
                // `ydb_acquire`): go on with a new session on a new semaphore (the old session
                // may still own the old one), a few times at most.
                out.ydb_restarts.push(e.to_string());
                if out.ydb_restarts.len() > YDB_RESTARTS {
                    out.ydb_error = Some(e.to_string());
                } else {
                    ydb_name = format!("cycle-{}", out.ydb_restarts.len());
                    create_semaphores(&client, "/local/ydb", &[ydb_name.clone()]).await?;
                    ydb_session = crate::ydb_session(&ydb, "/local/ydb").await?;
                }
            }
        }
        // The floor's stream is read only here, so its pings go unanswered while the rows
        // above run; after a long stall (a stuck `ydb` call) the server may have dropped it.
        if floor.ping().await.is_err() {
            floor = Floor::open(&emulator, "/local/floor").await?;
        }
        for _ in 0..batch {
            let t = Instant::now();
            floor.raw_cycle("cycle", false).await?;
            if record {
                out.raw.push(t.elapsed());
            }
            let t = Instant::now();
            floor.raw_cycle("cycle", true).await?;
            if record {
                out.raw_describe.push(t.elapsed());
            }
        }
        for _ in 0..batch {
            let t = Instant::now();
            floor.ping().await?;
            let one = t.elapsed();
            floor.ping().await?;
            if record {
                out.floor.push(t.elapsed());
                out.ping.push(one);
                out.ping.push(t.elapsed() - one);
            }
        }
    }
    out.ydb_lost = lost.load(Ordering::Relaxed);
    session.close().await;
    emulator.shutdown().await;
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// The `ydb` crate's acquire, made to survive its lost answers.
// ---------------------------------------------------------------------------------------

/// How long a `ydb` acquire may go unanswered before the bench checks whether its answer was
/// lost.
const LOST_AFTER: Duration = Duration::from_secs(1);

/// `acquire_semaphore_with_params` of the `ydb` crate, recovering from a lost answer.
///
/// `ydb` 0.18.2's `RequestController::send` queues the request *before* it registers the
/// waiter (under an async mutex), so an answer that arrives first is dropped ("got response
/// for already unknown id") and the acquire waits forever while the server has granted it.
/// Dropping the waiting future is no way out either: if its answer does arrive later, the
/// session's receive loop fails to deliver it and ends, killing the session. So after
/// [`LOST_AFTER`] this asks the server (a describe on the same ordered stream) whether the
/// session already owns the semaphore; if it does and the answer still has not come, the
/// answer was lost, and acquiring again returns at once (the session already owns it).
/// Counts the lost answers in `lost`.
async fn ydb_acquire(
    session: &ydb::CoordinationSession,
    name: &str,
    options: &ydb::AcquireOptions,
    lost: &AtomicU64,
) -> R<ydb::Lease> {
    match tokio::time::timeout(
        ACQUIRE_LIMIT,
        ydb_acquire_unbounded(session, name, options, lost),
    )
    .await
    {
        Ok(result) => result,
        Err(_) => Err(format!("ydb acquire: no grant within {ACQUIRE_LIMIT:?}").into()),
    }
}

/// The longest a `ydb` acquire may take, lost answers and their recovery included (a
/// contended one waits behind 15 others, each holding for microseconds).
const ACQUIRE_LIMIT: Duration = Duration::from_secs(30);

async fn ydb_acquire_unbounded(
    session: &ydb::CoordinationSession,
    name: &str,
    options: &ydb::AcquireOptions,
    lost: &AtomicU64,
) -> R<ydb::Lease> {
    use futures::FutureExt;
    for _ in 0..5 {
        let acquire = session.acquire_semaphore_with_params(name, 1, options.clone());
        let mut acquire = std::pin::pin!(acquire);
        loop {
            tokio::select! {
                r = &mut acquire => return r.map_err(|e| format!("ydb acquire: {e:?}").into()),
                _ = tokio::time::sleep(LOST_AFTER) => {}
            }
            let owners = ydb_owners(session, name, lost).await?;
            if let Some(r) = (&mut acquire).now_or_never() {
                return r.map_err(|e| format!("ydb acquire: {e:?}").into());
            }
            if owners.contains(&session.id()) {
                // Granted, answer lost: acquiring again returns at once.
                lost.fetch_add(1, Ordering::Relaxed);
                break;
            }
        }
    }
    Err("ydb acquire: five answers in a row lost".into())
}

/// The owners' session ids of `name`, by a `ydb` describe. A describe answer can be lost
/// like an acquire's (see [`ydb_acquire`]); a describe is answered at once, so one that has
/// no answer after [`LOST_AFTER`] was lost, and is sent again.
async fn ydb_owners(
    session: &ydb::CoordinationSession,
    name: &str,
    lost: &AtomicU64,
) -> R<Vec<u64>> {
    let owners = ydb::DescribeOptionsBuilder::default()
        .with_owners(true)
        .build()?;
    for _ in 0..10 {
        match tokio::time::timeout(
            LOST_AFTER,
            session.describe_semaphore_with_params(name, owners.clone()),
        )
        .await
        {
            Ok(d) => {
                let d = d.map_err(|e| format!("ydb describe: {e:?}"))?;
                return Ok(d.owners.iter().map(|o| o.session_id).collect());
            }
            Err(_) => {
                lost.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    Err("ydb describe: ten answers in a row lost".into())
}

/// Drops a `ydb` lease (its `Drop` spawns one release request) and waits until the spawned
/// task has queued that request (it cancels the lease token right before), so the next
/// request of this task cannot overtake it on the stream.
async fn ydb_release_queued(lease: ydb::Lease) -> R<()> {
    let alive = lease.alive();
    drop(lease);
    within("ydb release queued", STEP, async {
        alive.cancelled().await;
        Ok::<_, ()>(())
    })
    .await
}

// ---------------------------------------------------------------------------------------
// Timed windows, alternating between the crates.
// ---------------------------------------------------------------------------------------

/// The measuring window of a timed run: warm-up, then the counted part.
#[derive(Debug, Clone, Copy)]
struct Window {
    from: Instant,
    to: Instant,
}

impl Window {
    fn new(warmup: Duration, length: Duration) -> Self {
        let from = Instant::now() + warmup;
        Self {
            from,
            to: from + length,
        }
    }

    fn contains(&self, t: Instant) -> bool {
        t >= self.from && t < self.to
    }

    fn over(&self) -> bool {
        Instant::now() >= self.to
    }

    fn rate(&self, count: u64) -> f64 {
        count as f64 / (self.to - self.from).as_secs_f64()
    }
}

/// How many alternating windows rows 2 and 3 run per crate, and how long each is.
fn windows(cfg: &Config) -> (usize, Duration, Duration) {
    (
        3,
        cfg.duration(Duration::from_secs(1)),
        Duration::from_millis(300),
    )
}

fn median_rate(rates: &[f64]) -> f64 {
    let mut sorted = rates.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted.get(sorted.len() / 2).copied().unwrap_or(f64::NAN)
}

fn rates_cell(rates: &[f64]) -> String {
    if rates.is_empty() {
        return "n/a".to_string();
    }
    let (lo, hi) = rates.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), r| {
        (lo.min(*r), hi.max(*r))
    });
    format!(
        "{} ({}–{})",
        fmt_rate(median_rate(rates)),
        group(lo.round() as u64),
        group(hi.round() as u64)
    )
}

// ---------------------------------------------------------------------------------------
// Row 2: pipelined throughput.
// ---------------------------------------------------------------------------------------

const TASKS: usize = 1000;

#[derive(Debug)]
struct Throughput {
    ours: Vec<f64>,
    ydb: R<Vec<f64>>,
    ydb_lost: u64,
}

async fn row_throughput(cfg: &Config) -> R<Throughput> {
    let emulator = Emulator::builder()
        .node("/local/ours")
        .node("/local/ydb")
        .start()
        .await?;
    let (rounds, length, warmup) = windows(cfg);
    let name = |i: usize| format!("t-{i:04}");

    let client = Client::connect(&emulator.connection_string()).await?;
    let session = client
        .session("/local/ours", ours_session_options())
        .await?;
    let names: Vec<String> = (0..TASKS).map(name).collect();
    create_semaphores(&client, "/local/ours", &names).await?;
    create_semaphores(&client, "/local/ydb", &names).await?;
    let ydb = ydb_client(&emulator.connection_string()).await?;
    let ydb_session = Arc::new(ydb_session(&ydb, "/local/ydb").await?);
    let acquire = ydb::AcquireOptionsBuilder::default()
        .timeout(SESSION_TIMEOUT)
        .build()?;
    let lost = Arc::new(AtomicU64::new(0));

    let mut out = Throughput {
        ours: Vec::new(),
        ydb: Ok(Vec::new()),
        ydb_lost: 0,
    };
    for _ in 0..rounds {
        if cfg.runs("ours") {
            // This crate: acquire + confirmed release.
            let ops = Arc::new(AtomicU64::new(0));
            let window = Window::new(warmup, length);
            let mut tasks = tokio::task::JoinSet::new();
            for i in 0..TASKS {
                let (session, ops, name) = (session.clone(), ops.clone(), name(i));
                tasks.spawn(async move {
                    while !window.over() {
                        let lease = session.acquire(&name, AcquireOptions::new()).await?;
                        lease.release().await?;
                        if window.contains(Instant::now()) {
                            ops.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Ok::<_, ydb_coordination::Error>(())
                });
            }
            while let Some(done) = tasks.join_next().await {
                done??;
            }
            out.ours.push(window.rate(ops.load(Ordering::Relaxed)));
        }
        // The `ydb` crate: acquire + release queued (not confirmed).
        if !cfg.runs("ydb") {
            continue;
        }
        let Ok(ydb_rates) = out.ydb.as_mut() else {
            continue;
        };
        let ops = Arc::new(AtomicU64::new(0));
        let window = Window::new(warmup, length);
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..TASKS {
            let (session, ops, lost, acquire, name) = (
                ydb_session.clone(),
                ops.clone(),
                lost.clone(),
                acquire.clone(),
                name(i),
            );
            tasks.spawn(async move {
                while !window.over() {
                    let lease = ydb_acquire(&session, &name, &acquire, &lost).await?;
                    ydb_release_queued(lease).await?;
                    if window.contains(Instant::now()) {
                        ops.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Ok::<_, Box<dyn Error + Send + Sync>>(())
            });
        }
        let mut failed = None;
        while let Some(done) = tasks.join_next().await {
            if let Err(e) = done? {
                failed = Some(e);
            }
        }
        match failed {
            Some(e) => out.ydb = Err(e),
            None => ydb_rates.push(window.rate(ops.load(Ordering::Relaxed))),
        }
    }
    out.ydb_lost = lost.load(Ordering::Relaxed);
    session.close().await;
    emulator.shutdown().await;
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// Row 3: contended handoff.
// ---------------------------------------------------------------------------------------

const CONTENDERS: usize = 16;

#[derive(Debug)]
struct Handoff {
    ours_rates: Vec<f64>,
    ours_handoff: Vec<Duration>,
    ydb: R<(Vec<f64>, Vec<Duration>)>,
    ydb_lost: u64,
}

/// The release instant of the current holder, taken by the next grant.
#[derive(Debug, Default)]
struct Baton {
    released: std::sync::Mutex<Option<Instant>>,
    samples: std::sync::Mutex<Vec<Duration>>,
    grants: AtomicU64,
}

fn locked<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Baton {
    fn granted(&self, window: &Window) {
        let now = Instant::now();
        let released = locked(&self.released).take();
        if window.contains(now) {
            self.grants.fetch_add(1, Ordering::Relaxed);
            if let Some(r) = released {
                locked(&self.samples).push(now - r);
            }
        }
    }

    fn releasing(&self) {
        *locked(&self.released) = Some(Instant::now());
    }

    /// The window's rate; its handoff samples are appended to `samples`.
    fn finish(&self, window: &Window, samples: &mut Vec<Duration>) -> f64 {
        samples.append(&mut locked(&self.samples));
        window.rate(self.grants.load(Ordering::Relaxed))
    }
}

async fn row_handoff(cfg: &Config) -> R<Handoff> {
    let emulator = Emulator::builder()
        .node("/local/ours")
        .node("/local/ydb")
        .start()
        .await?;
    let (rounds, length, warmup) = windows(cfg);

    let client = Client::connect(&emulator.connection_string()).await?;
    let mut sessions = Vec::new();
    for _ in 0..CONTENDERS {
        sessions.push(
            client
                .session("/local/ours", ours_session_options())
                .await?,
        );
    }
    let ydb = ydb_client(&emulator.connection_string()).await?;
    let mut ydb_sessions = Vec::new();
    for _ in 0..CONTENDERS {
        ydb_sessions.push(Arc::new(ydb_session(&ydb, "/local/ydb").await?));
    }
    create_semaphores(&client, "/local/ydb", &["handoff".to_string()]).await?;
    let acquire = ydb::AcquireOptionsBuilder::default()
        .timeout(SESSION_TIMEOUT)
        .build()?;
    let lost = Arc::new(AtomicU64::new(0));

    let mut out = Handoff {
        ours_rates: Vec::new(),
        ours_handoff: Vec::new(),
        ydb: Ok((Vec::new(), Vec::new())),
        ydb_lost: 0,
    };
    for _ in 0..rounds {
        if cfg.runs("ours") {
            // This crate: `Mutex::lock` / `MutexGuard::unlock`.
            let baton = Arc::new(Baton::default());
            let window = Window::new(warmup, length);
            let mut tasks = tokio::task::JoinSet::new();
            for session in &sessions {
                let (mutex, baton) = (session.mutex("handoff"), baton.clone());
                tasks.spawn(async move {
                    while !window.over() {
                        let guard = mutex.lock().await?;
                        baton.granted(&window);
                        baton.releasing();
                        guard.unlock().await?;
                    }
                    Ok::<_, ydb_coordination::Error>(())
                });
            }
            while let Some(done) = tasks.join_next().await {
                done??;
            }
            out.ours_rates
                .push(baton.finish(&window, &mut out.ours_handoff));
        }
        // The `ydb` crate: acquire on a limit-1 semaphore / drop.
        if !cfg.runs("ydb") {
            continue;
        }
        let Ok((ydb_rates, ydb_samples)) = out.ydb.as_mut() else {
            continue;
        };
        let baton = Arc::new(Baton::default());
        let window = Window::new(warmup, length);
        let mut tasks = tokio::task::JoinSet::new();
        for session in &ydb_sessions {
            let (session, baton, acquire, lost) = (
                session.clone(),
                baton.clone(),
                acquire.clone(),
                lost.clone(),
            );
            tasks.spawn(async move {
                while !window.over() {
                    let lease = ydb_acquire(&session, "handoff", &acquire, &lost).await?;
                    baton.granted(&window);
                    baton.releasing();
                    ydb_release_queued(lease).await?;
                    // Wait until the server shows the release before acquiring again: an
                    // acquire that overtakes the spawned release is granted at once (the
                    // session still owns the semaphore), the release then frees it, and the
                    // following release withdraws the next waiting acquire, which is answered
                    // ABORTED ("superseded"), and that ends a `ydb` session. The next holder
                    // is granted meanwhile, so this does not slow the handoff itself.
                    while ydb_owners(&session, "handoff", &lost)
                        .await?
                        .contains(&session.id())
                    {}
                }
                Ok::<_, Box<dyn Error + Send + Sync>>(())
            });
        }
        let mut failed = None;
        while let Some(done) = tasks.join_next().await {
            if let Err(e) = done? {
                failed = Some(e);
            }
        }
        match failed {
            Some(e) => out.ydb = Err(e),
            None => ydb_rates.push(baton.finish(&window, ydb_samples)),
        }
    }
    out.ydb_lost = lost.load(Ordering::Relaxed);
    for session in &sessions {
        session.close().await;
    }
    emulator.shutdown().await;
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// Row 4: recovery.
// ---------------------------------------------------------------------------------------

#[derive(Debug, Default)]
struct Recovery {
    /// `net().cut()` to `Attached` again.
    reattach: Vec<Duration>,
    /// `expire_session` to the guard's token firing.
    expiry_fired: Vec<Duration>,
    /// `expire_session` to the next guard of `hold()`.
    expiry_guard: Vec<Duration>,
}

async fn row_recovery(cfg: &Config) -> R<Recovery> {
    let node = "/local/ours";
    let emulator = Emulator::builder().node(node).start().await?;
    let client = Client::connect(&emulator.connection_string()).await?;
    let reps = cfg.count(20, 5);
    let mut out = Recovery::default();

    let session = client.session(node, SessionOptions::new()).await?;
    let held = session
        .acquire("held", AcquireOptions::exclusive().ephemeral(true))
        .await?;
    for _ in 0..reps {
        let t = Instant::now();
        cut_until_attached(&emulator, &session, STEP).await?;
        out.reattach.push(t.elapsed());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if held.is_lost() {
        return Err("the lease was lost across cuts".into());
    }
    held.release().await?;
    session.close().await;

    let manager = client.session_manager(node, SessionOptions::new());
    let mutex = manager.mutex("leader");
    let mut hold = mutex.hold();
    let mut guard = within("first guard", STEP, async {
        match hold.next().await {
            Some(guard) => guard.map_err(|e| e.to_string()),
            None => Err("hold() ended".to_string()),
        }
    })
    .await?;
    for _ in 0..reps {
        let t = Instant::now();
        let session_id = guard
            .lease()
            .ok_or("a node's guard has its lease")?
            .session_id();
        if !emulator.expire_session(node, session_id) {
            return Err("expire_session: no such session".into());
        }
        within("token fires", STEP, async {
            guard.cancelled().await;
            Ok::<_, ()>(())
        })
        .await?;
        out.expiry_fired.push(t.elapsed());
        drop(guard);
        guard = within("next guard", STEP, async {
            match hold.next().await {
                Some(guard) => guard.map_err(|e| e.to_string()),
                None => Err("hold() ended".to_string()),
            }
        })
        .await?;
        out.expiry_guard.push(t.elapsed());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(guard);
    manager.shutdown().await;
    emulator.shutdown().await;
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// The table.
// ---------------------------------------------------------------------------------------

fn cell(samples: &[Duration]) -> String {
    Summary::of(samples).map_or_else(|| "n/a".to_string(), |s| s.cell())
}

fn median_secs(samples: &[Duration]) -> f64 {
    Summary::of(samples).map_or(f64::NAN, |s| s.median.as_secs_f64())
}

fn err_cell(e: &(dyn Error + Send + Sync)) -> String {
    format!("failed: {}", e.to_string().replace('|', "/"))
}

/// Row 6: the same lock cycle with and without a metrics recorder, in alternating batches.
fn row_metrics(cfg: &Config) -> R<(Vec<Duration>, Vec<Duration>)> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let (_emulator, session) = rt.block_on(async {
        let emulator = Emulator::builder().node("/local/metrics").start().await?;
        let client = Client::connect(&emulator.connection_string()).await?;
        let session = client
            .session("/local/metrics", ours_session_options())
            .await?;
        session.create_semaphore("cycle", 1, b"").await?;
        R::Ok((emulator, session))
    })?;
    let cycles = |n: usize| {
        rt.block_on(async {
            let mut out = Vec::with_capacity(n);
            for _ in 0..n {
                let t = Instant::now();
                let lease = within(
                    "metrics acquire",
                    STEP,
                    session.acquire("cycle", AcquireOptions::new()),
                )
                .await?;
                within("metrics release", STEP, lease.release()).await?;
                out.push(t.elapsed());
            }
            R::Ok(out)
        })
    };
    let (mut off, mut on) = (Vec::new(), Vec::new());
    let batch = 50;
    let rounds = cfg.count(2000, 200).div_ceil(batch);
    for round in 0..rounds + 2 {
        let plain = cycles(batch)?;
        let recorded = metrics::with_local_recorder(&recorder, || cycles(batch))?;
        if round >= 2 {
            off.extend(plain);
            on.extend(recorded);
        }
    }
    Ok((off, on))
}

/// Runs one row for at most its time limit; an error or a timeout becomes a table line that
/// says so, and the bench goes on with the next row.
fn capped<T>(
    rt: &tokio::runtime::Runtime,
    cfg: &Config,
    rows: &mut Vec<[String; 6]>,
    row: &str,
    what: &str,
    fut: impl Future<Output = R<T>>,
) -> Option<T> {
    eprintln!("row {row}: {what} ...");
    let limit = cfg.row_limit();
    let result = rt.block_on(async {
        match tokio::time::timeout(limit, fut).await {
            Ok(result) => result,
            Err(_) => Err(format!("did not finish within {limit:?}").into()),
        }
    });
    match result {
        Ok(v) => Some(v),
        Err(e) => {
            rows.push(failed_line(row, what, e.as_ref()));
            None
        }
    }
}

/// The table line of a row that failed: `what` and why.
fn failed_line(row: &str, what: &str, e: &(dyn Error + Send + Sync)) -> [String; 6] {
    [row, what, &err_cell(e), "—", "—", "—"].map(str::to_string)
}

/// Row 10: idle sessions and held leases at two sizes each, both crates where they can.
fn row_scale_of_items(
    rt: &tokio::runtime::Runtime,
    cfg: &Config,
    rows: &mut Vec<[String; 6]>,
    notes: &mut Vec<String>,
) {
    use memory::{Kind, PerItem, measure_one};
    let small = cfg.scale < 1.0;
    let sessions = if small {
        [cfg.count(1_000, 50), cfg.count(10_000, 200)]
    } else {
        [1_000, 10_000]
    };
    let leases = if small {
        [cfg.count(10_000, 500), cfg.count(100_000, 2_000)]
    } else {
        [10_000, 100_000]
    };
    let idle = cfg.duration(Duration::from_secs(10));
    let rss = |p: &R<PerItem>| p.as_ref().map(|p| p.client).unwrap_or(f64::NAN);
    let cpu = |p: &R<PerItem>| {
        p.as_ref()
            .ok()
            .and_then(|p| p.idle_cpu)
            .map_or(f64::NAN, |c| c.per_session_second.as_secs_f64())
    };
    let show = |p: &R<PerItem>| match p {
        Ok(p) => match p.idle_cpu {
            Some(c) => format!(
                "{}, {} CPU per second ({:.0} ns per session)",
                fmt_bytes(p.client),
                fmt_duration(c.per_second),
                c.per_session_second.as_secs_f64() * 1e9
            ),
            None => fmt_bytes(p.client),
        },
        Err(e) => err_cell(e.as_ref()),
    };
    eprintln!("row 10: idle sessions and held leases (child processes) ...");
    let mut measured = Vec::new();
    for (what, kinds, sizes, idle) in [
        (
            "idle sessions: client RSS per session, keepalive CPU",
            (Kind::OursSessions, Kind::YdbSessions),
            sessions,
            Some(idle),
        ),
        (
            "held leases on one session: client RSS per lease",
            (Kind::OursLeases, Kind::YdbLeases),
            leases,
            None,
        ),
    ] {
        let mut at = Vec::new();
        for n in sizes {
            let ours = measure_one(kinds.0, n, idle);
            let ydb = measure_one(kinds.1, n, idle);
            let mut ratio_cell = format!("{} RSS", ratio(rss(&ours), rss(&ydb)));
            if idle.is_some() {
                ratio_cell += &format!(", {} CPU", ratio(cpu(&ours), cpu(&ydb)));
            }
            rows.push([
                "10".to_string(),
                format!("{} {what} ¹¹", group(n as u64)),
                show(&ours),
                show(&ydb),
                "—".to_string(),
                ratio_cell,
            ]);
            at.push((ours, ydb));
        }
        if let [(o1, y1), (o2, y2)] = &at[..] {
            let mut cell = format!(
                "RSS per item: this crate {}, `ydb` {}",
                ratio(rss(o2), rss(o1)),
                ratio(rss(y2), rss(y1))
            );
            if idle.is_some() {
                cell += &format!(
                    "; CPU per session: this crate {}, `ydb` {}",
                    ratio(cpu(o2), cpu(o1)),
                    ratio(cpu(y2), cpu(y1))
                );
            }
            rows.push(ratio_line(
                "10",
                format!(
                    "growth: {} {what} over {} (goal ≤ 1.2×)",
                    group(sizes[1] as u64),
                    group(sizes[0] as u64)
                ),
                cell,
            ));
        }
        measured.push(at);
    }
    let mut reattach = Vec::new();
    for n in leases {
        let what = format!("reattach under {} held leases", group(n as u64));
        if let Some(h) = capped(rt, cfg, rows, "10", &what, growth::held(n)) {
            rows.push([
                "10".to_string(),
                format!("{what}: stream cut → attached, every lease kept ¹¹"),
                format!(
                    "{} ({} CPU); acquiring them took {} per lease",
                    fmt_duration(h.reattach),
                    fmt_duration(h.reattach_cpu),
                    fmt_duration(h.acquire)
                ),
                "not supported ⁶".to_string(),
                "—".to_string(),
                "—".to_string(),
            ]);
            reattach.push(h);
        }
    }
    if let [a, b] = &reattach[..] {
        rows.push(ratio_line(
            "10",
            format!(
                "growth: reattach under {} leases over {} (goal ≤ 1.2× per reattach)",
                group(b.leases as u64),
                group(a.leases as u64)
            ),
            format!(
                "time {}, CPU {}",
                ratio(b.reattach.as_secs_f64(), a.reattach.as_secs_f64()),
                ratio(b.reattach_cpu.as_secs_f64(), a.reattach_cpu.as_secs_f64())
            ),
        ));
    }
    notes.push(format!(
        "¹¹ Row 10: as row 5, each count in a fresh client process against a fresh emulator \
         process (RSS growth of the client while it creates the items, divided by their \
         number); the sessions then idle for {} while the client's CPU time (user + system, \
         every thread) is read, both crates' sessions with a {SESSION_TIMEOUT:?} timeout. The \
         reattach runs in this process (emulator included in the CPU time): `net().cut()` \
         until the session is attached again and a describe sent after that is answered, \
         the median of {REATTACHES} cuts.",
        fmt_duration(idle),
        REATTACHES = growth::REATTACHES,
    ));
}

/// A line with a ratio only: `what` in the benchmark column, `ratios` in the ratio column.
fn ratio_line(row: &str, what: String, ratios: String) -> [String; 6] {
    let dash = || "—".to_string();
    [row.to_string(), what, dash(), dash(), dash(), ratios]
}

/// Row 9's line for one depth.
fn growth_cells(d: &growth::Depth) -> [String; 6] {
    let cell = |s: &[Duration]| Summary::of(s).map_or("—".to_string(), |s| s.cell());
    let t = d.enqueue_traffic;
    [
        "9".to_string(),
        format!(
            "queue of {} on one mutex: one more queued acquire; handoff at the head, at the tail ¹⁰",
            group(d.depth as u64)
        ),
        format!(
            "{}, {} CPU, server: {:.1} requests, {} and {:.1} entries sent; handoff {}, {}",
            cell(&d.enqueue),
            fmt_duration(d.enqueue_cpu),
            t.requests,
            fmt_bytes(t.bytes),
            t.entries,
            cell(&d.handoff_head),
            cell(&d.handoff_tail),
        ),
        "—".to_string(),
        format!(
            "server per handoff: {:.1} requests, {}",
            d.handoff_traffic.requests,
            fmt_bytes(d.handoff_traffic.bytes)
        ),
        "—".to_string(),
    ]
}

/// Row 9's line for one group size.
fn group_cells(g: &growth::GroupJoin) -> [String; 6] {
    let t = g.traffic;
    [
        "9".to_string(),
        format!(
            "group of {} members, {} watchers: one more join ¹⁰",
            group(g.members as u64),
            g.watchers
        ),
        format!(
            "{}, {} CPU, server: {:.1} requests, {} and {:.0} entries sent; {:.1} sets read by the watchers",
            Summary::of(&g.join).map_or("—".to_string(), |s| s.cell()),
            fmt_duration(g.cpu),
            t.requests,
            fmt_bytes(t.bytes),
            t.entries,
            g.sets_per_join,
        ),
        "—".to_string(),
        "—".to_string(),
        "—".to_string(),
    ]
}

/// Row 9's ratios: the deepest queue over the shallowest.
fn growth_ratios(small: &growth::Depth, large: &growth::Depth) -> [String; 6] {
    let median = median_secs;
    ratio_line(
        "9",
        format!(
            "growth: a queue of {} over one of {} (goal ≤ 1.2×)",
            group(large.depth as u64),
            group(small.depth as u64)
        ),
        format!(
            "enqueue {}, CPU {}, server bytes {}; handoff at the head {}, at the tail {}",
            ratio(median(&large.enqueue), median(&small.enqueue)),
            ratio(
                large.enqueue_cpu.as_secs_f64(),
                small.enqueue_cpu.as_secs_f64()
            ),
            ratio(large.enqueue_traffic.bytes, small.enqueue_traffic.bytes),
            ratio(median(&large.handoff_head), median(&small.handoff_head)),
            ratio(median(&large.handoff_tail), median(&small.handoff_tail)),
        ),
    )
}

/// Row 11's lines.
fn rate_cells(r: &rate::Rate) -> [[String; 6]; 2] {
    let joined = |f: &dyn Fn(&rate::Achieved) -> String| {
        r.achieved.iter().map(f).collect::<Vec<_>>().join(" / ")
    };
    let worst = r
        .achieved
        .iter()
        .map(|a| (a.ratio() - 1.0).abs())
        .fold(0.0, f64::max);
    let acquirers = joined(&|a| a.acquirers.to_string());
    let l = &r.latency;
    let (p50, p99, floor) = (l.acquire_at(0.5), l.acquire_at(0.99), l.describe_median());
    [
        [
            "11".to_string(),
            format!(
                "Rate limiter: achieved ÷ configured {}, {acquirers} acquirers of one unit each ¹²",
                fmt_rate(rate::RATE)
            ),
            format!(
                "{} ({} units granted in {}, the bucket of {:.0} included)",
                joined(&|a| format!("{:.3}×", a.ratio())),
                joined(&|a| group(a.units as u64)),
                fmt_duration(r.achieved.first().map_or(Duration::ZERO, |a| a.window)),
                rate::BUCKET,
            ),
            "no rate-limiter client ¹²".to_string(),
            format!("configured {}", fmt_rate(rate::RATE)),
            format!("off by {:.1}% at most (target ≤ 2%)", worst * 100.0),
        ],
        [
            "11".to_string(),
            "Rate limiter: `acquire` that does not wait, p50 / p99 round trip ¹²".to_string(),
            format!("{} / {}", fmt_duration(p50), fmt_duration(p99)),
            "—".to_string(),
            format!(
                "one unary call (`describe_node`), p50: {}",
                fmt_duration(floor)
            ),
            format!(
                "{} describe_node",
                ratio(p50.as_secs_f64(), floor.as_secs_f64())
            ),
        ],
    ]
}

/// Row 11's note.
fn rate_note(r: &rate::Rate) -> String {
    format!(
        "¹² Row 11: one client on the in-process emulator in real time; for each count a fresh \
         resource of {rate}, and that many tasks each acquiring one unit at a time for {window} \
         (`acquire_timeout` bounded by the window's end, so the server grants nothing after \
         it). Achieved rate: the units granted less the node's prefetch bucket ({bucket:.0} \
         units at the default prefetch coefficient, rate × 0.2, full at the first acquire and \
         granted at once), over the window; counting grants rather than timing them keeps a \
         stall of the machine from moving units across the window's edges. Latency: {n} \
         acquires of one unit of a resource at {big:e} units/s (never waiting), alternating \
         in batches of 50 with as many `describe_node` calls on the same client, the floor of \
         one unary call. The `ydb` crate has no rate-limiter client, so there is nothing to \
         put side by side.",
        rate = fmt_rate(rate::RATE),
        window = fmt_duration(r.achieved.first().map_or(Duration::ZERO, |a| a.window)),
        bucket = rate::BUCKET,
        n = group(r.latency.acquire.len() as u64),
        big = rate::UNLIMITED,
    )
}

fn main() -> R<()> {
    if let Ok(role) = std::env::var(memory::ROLE_VAR) {
        return memory::child(&role);
    }
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    let cfg = Config::from_env()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let workers = rt.metrics().num_workers();

    let mut rows: Vec<[String; 6]> = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    let row = |rows: &mut Vec<[String; 6]>, cells: [&str; 6]| {
        rows.push(cells.map(str::to_string));
    };

    let mut ping_median = f64::NAN;
    let mut ping_cell = "n/a".to_string();
    if cfg.has(1)
        && let Some(l) = capped(
            &rt,
            &cfg,
            &mut rows,
            "1",
            "lock cycle latency",
            row_latency(&cfg),
        )
    {
        ping_median = median_secs(&l.ping);
        ping_cell = cell(&l.ping);
        let floor = median_secs(&l.floor);
        let ours = median_secs(&l.ours);
        let ydb = median_secs(&l.ydb_confirmed);
        let mutex = median_secs(&l.ours_mutex);
        let describes = l.ydb_describes as f64 / l.ydb_confirmed.len().max(1) as f64;
        row(
            &mut rows,
            [
                "1",
                "Lock cycle: exclusive acquire + confirmed release, one session",
                &cell(&l.ours),
                &match &l.ydb_error {
                    Some(e) => format!("failed: {} ¹", e.replace('|', "/")),
                    None => format!("{} ¹", cell(&l.ydb_confirmed)),
                },
                &format!("floor, 2 ping RTTs: {}", cell(&l.floor)),
                &format!(
                    "{} of ydb's time; {} floor",
                    ratio(ours, ydb),
                    ratio(ours, floor)
                ),
            ],
        );
        row(
            &mut rows,
            [
                "1",
                "Same cycle spoken on a bare stream (no library): acquire, release ²",
                "—",
                "—",
                &cell(&l.raw),
                &format!(
                    "this crate {} of it; {} floor",
                    ratio(ours, median_secs(&l.raw)),
                    ratio(median_secs(&l.raw), floor)
                ),
            ],
        );
        row(
            &mut rows,
            [
                "1",
                "… with a describe pipelined behind the acquire (what this crate sends) ²",
                "—",
                "—",
                &cell(&l.raw_describe),
                &format!(
                    "this crate {} of it; {} floor",
                    ratio(ours, median_secs(&l.raw_describe)),
                    ratio(median_secs(&l.raw_describe), floor)
                ),
            ],
        );
        notes.push(
            "² The bench's own minimal client on a bare `Session` stream (the floor's stream): \
             the protocol messages of a lock cycle with nothing around them, so the gap to the \
             floor is the emulator's work on an acquire and a release (a ping is answered \
             without touching its state), and the gap from it to this crate is the library. \
             This crate pipelines a `describe_semaphore` behind every acquire to learn the \
             fencing token (the acquire result does not carry the `order_id`)."
                .to_string(),
        );
        row(
            &mut rows,
            [
                "1",
                "Lock cycle via the `Mutex` recipe (`lock` + `unlock`, ephemeral)",
                &cell(&l.ours_mutex),
                "—",
                &format!("floor: {}", cell(&l.floor)),
                &format!("{} floor", ratio(mutex, floor)),
            ],
        );
        row(
            &mut rows,
            [
                "1",
                "`ydb` acquire + release *sent*, unconfirmed ³",
                "—",
                &cell(&l.ydb_sent),
                &format!("1 ping RTT: {}", cell(&l.ping)),
                &format!("{} ping", ratio(median_secs(&l.ydb_sent), ping_median)),
            ],
        );
        notes.push(format!(
            "¹ `ydb` 0.18.2's `Lease::release()` spawns the release request and returns at once \
             (and its `Drop` spawns a second one), so its cycle is: `acquire_semaphore` (awaits \
             the server's answer), drop the lease (spawns exactly one release request), wait \
             until the spawned task has queued it (the lease token fires just before), then \
             `describe_semaphore` until the owner list is empty: the describe's answer on the \
             same ordered stream is the closest its API comes to a confirmed release \
             ({describes:.2} describes per cycle on average). Limit-1 persistent semaphore, \
             count 1, for both crates; {} cycles each, interleaved in batches of 50. `ydb` lost \
             {} answers in row 1 (see ⁴), each adding about {LOST_AFTER:?} to one sample{}.",
            group(l.ours.len() as u64),
            l.ydb_lost,
            match l.ydb_restarts.first() {
                None => String::new(),
                Some(first) => format!(
                    "; {} `ydb` call(s) never returned ({first}), each time the bench went on \
                     with a new `ydb` session (the rest of that batch skipped)",
                    l.ydb_restarts.len()
                ),
            }
        ));
        notes.push(
            "³ The same `ydb` cycle without any confirmation: one acquire round trip plus \
             queueing the release. Not comparable work (a release that is never confirmed); \
             shown for scale."
                .to_string(),
        );
    }

    if cfg.has(2)
        && let Some(t) = capped(
            &rt,
            &cfg,
            &mut rows,
            "2",
            "pipelined throughput",
            row_throughput(&cfg),
        )
    {
        let ours = median_rate(&t.ours);
        let (ydb_cell, r) = match &t.ydb {
            Ok(rates) => (
                rates_cell(rates),
                format!("{} ydb", ratio(ours, median_rate(rates))),
            ),
            Err(e) => (err_cell(e.as_ref()), "n/a".to_string()),
        };
        row(
            &mut rows,
            [
                "2",
                "Pipelined: 1,000 tasks on one session, each cycling its own semaphore (cycles/s) ⁴",
                &rates_cell(&t.ours),
                &ydb_cell,
                "—",
                &r,
            ],
        );
        notes.push(format!(
            "⁴ Median of {} alternating windows per crate (range in parentheses), {:?} each after \
             a 300 ms warm-up. This crate: `acquire` + `release().await` (confirmed). `ydb`: \
             `acquire_semaphore` + drop (release queued, not confirmed), i.e. less work per \
             cycle. `ydb` lost {} acquire answers in row 2 (its request controller registers \
             the waiter after sending the request, so an early answer is dropped and the call \
             never returns); the bench detects them after {LOST_AFTER:?} with a describe and \
             re-acquires.",
            windows(&cfg).0,
            windows(&cfg).1,
            t.ydb_lost
        ));
    }

    if cfg.has(3)
        && let Some(h) = capped(
            &rt,
            &cfg,
            &mut rows,
            "3",
            "contended handoff",
            row_handoff(&cfg),
        )
    {
        let ours_rate = median_rate(&h.ours_rates);
        let (ydb_rate, ydb_handoff, r_rate, r_handoff) = match &h.ydb {
            Ok((rates, samples)) => (
                rates_cell(rates),
                cell(samples),
                format!("{} ydb", ratio(ours_rate, median_rate(rates))),
                format!(
                    "{} of ydb's time; ",
                    ratio(median_secs(&h.ours_handoff), median_secs(samples))
                ),
            ),
            Err(e) => (
                err_cell(e.as_ref()),
                "n/a".to_string(),
                "n/a".to_string(),
                String::new(),
            ),
        };
        row(
            &mut rows,
            [
                "3",
                "Contended: 16 sessions on one mutex, critical sections/s ⁵",
                &rates_cell(&h.ours_rates),
                &ydb_rate,
                "—",
                &r_rate,
            ],
        );
        row(
            &mut rows,
            [
                "3",
                "Handoff: release call → next holder's grant ⁵",
                &cell(&h.ours_handoff),
                &ydb_handoff,
                &format!("1 ping RTT: {ping_cell}"),
                &format!(
                    "{r_handoff}{} ping",
                    ratio(median_secs(&h.ours_handoff), ping_median)
                ),
            ],
        );
        notes.push(format!(
            "⁵ Windows as in ⁴. This crate: `session.mutex(..).lock()` / `unlock()`. `ydb`: \
             `acquire_semaphore` on a limit-1 semaphore / drop, then describes until the server \
             no longer lists the session as an owner before acquiring again (without that, its \
             next acquire can overtake the spawned release and the session dies of an ABORTED \
             answer). Handoff is measured from just \
             before the holder's release call to the moment the next holder's acquire returns. \
             `ydb` lost {} acquire answers in row 3, each stalling every contender for about \
             {LOST_AFTER:?} (included in its rate).",
            h.ydb_lost
        ));
    }

    if cfg.has(4)
        && let Some(r) = capped(&rt, &cfg, &mut rows, "4", "recovery", row_recovery(&cfg))
    {
        row(
            &mut rows,
            [
                "4",
                "Stream cut (`net().cut()`) → `Attached` again, lease kept",
                &cell(&r.reattach),
                "not supported ⁶",
                "—",
                "—",
            ],
        );
        row(
            &mut rows,
            [
                "4",
                "Session expiry → held guard's token fires",
                &cell(&r.expiry_fired),
                "—",
                "—",
                "—",
            ],
        );
        row(
            &mut rows,
            [
                "4",
                "Session expiry → next guard of `manager.mutex(..).hold()`",
                &cell(&r.expiry_guard),
                "not supported ⁶",
                "—",
                "—",
            ],
        );
        notes.push(
            "⁶ `ydb` 0.18.2's coordination session ends its receive loop on a stream error and \
             never reattaches; it has no session manager."
                .to_string(),
        );
    }

    if cfg.has(6) {
        eprintln!("row 6: metrics overhead ...");
        let (off, on) = row_metrics(&cfg)?;
        row(
            &mut rows,
            [
                "6",
                "Lock cycle with a Prometheus recorder installed vs none (one thread) ⁸",
                &format!("{} vs {}", cell(&on), cell(&off)),
                "—",
                "—",
                &format!(
                    "{} with metrics",
                    ratio(median_secs(&on), median_secs(&off))
                ),
            ],
        );
        notes.push(
            "⁸ A current-thread runtime runs the session and the emulator; batches of 50 cycles \
             alternate between no recorder and `metrics-exporter-prometheus`'s recorder \
             (`metrics::with_local_recorder`)."
                .to_string(),
        );
    }
    if cfg.has(5) {
        eprintln!("row 5: memory (child processes) ...");
        let leases = if cfg.scale < 1.0 {
            cfg.count(10_000, 500)
        } else {
            10_000
        };
        let sessions = if cfg.scale < 1.0 {
            cfg.count(1000, 50)
        } else {
            1000
        };
        let m = memory::measure(leases, sessions);
        let show = |p: &R<memory::PerItem>| match p {
            Ok(p) => format!(
                "{} (emulator +{})",
                fmt_bytes(p.client),
                fmt_bytes(p.server)
            ),
            Err(e) => err_cell(e.as_ref()),
        };
        let cmp = |a: &R<memory::PerItem>, b: &R<memory::PerItem>, of: &str| match (a, b) {
            (Ok(a), Ok(b)) => format!("{} {of}", ratio(a.client, b.client)),
            _ => "n/a".to_string(),
        };
        let n_of = |p: &R<memory::PerItem>| p.as_ref().map(|p| p.n).unwrap_or_default() as u64;
        for (what, ours, theirs, of) in [
            (
                "held lease ({} on one session)",
                &m.ours_lease,
                Some(&m.ydb_lease),
                "ydb",
            ),
            (
                "held lock in a lock space of one node ({})",
                &m.ours_space_lock,
                None,
                "this crate's lease",
            ),
            (
                "idle session ({})",
                &m.ours_session,
                Some(&m.ydb_session),
                "ydb",
            ),
        ] {
            let what = what.replace("{}", &group(n_of(ours)));
            row(
                &mut rows,
                [
                    "5",
                    &format!("Memory per {what}, client RSS ⁷"),
                    &show(ours),
                    &theirs.map_or_else(|| "no lock space".to_string(), show),
                    "—",
                    &cmp(ours, theirs.unwrap_or(&m.ours_lease), of),
                ],
            );
        }
        notes.push(
            "⁷ RSS growth (`VmRSS`) of a fresh client process while it creates the items, divided \
             by their count; the emulator runs in its own fresh process per measurement and its \
             growth is shown in parentheses (the same server work for both crates). Leases are \
             ephemeral semaphores (count 1 for `ydb`, exclusive for this crate), acquired one after another; sessions are started 64 at a time. \
             A lock space's locks are `space.mutex(name).lock()` in a space of one node (after \
             one lock taken and released, so the node's session and the space's membership \
             are not counted): the lease on the node and the space's record of the lock. \
             RSS, not an allocator count: the crate forbids `unsafe`, which a counting \
             `#[global_allocator]` needs."
                .to_string(),
        );
    }

    if cfg.has(7) {
        eprintln!("row 7: client CPU time per lock cycle (child processes) ...");
        let n = cfg.count(2000, 200);
        let ours = cpu::cycle("ours", n);
        let ydb = cpu::cycle("ydb", n);
        let show = |c: &R<cpu::CpuCycle>| match c {
            Ok(c) => format!(
                "{} CPU ({} wall)",
                fmt_duration(c.cpu),
                fmt_duration(c.wall)
            ),
            Err(e) => err_cell(e.as_ref()),
        };
        let r = match (&ours, &ydb) {
            (Ok(a), Ok(b)) => format!(
                "{} of ydb's CPU time",
                ratio(a.cpu.as_secs_f64(), b.cpu.as_secs_f64())
            ),
            _ => "n/a".to_string(),
        };
        row(
            &mut rows,
            [
                "7",
                "Client CPU time per lock cycle (the cycle of row 1), `getrusage` ⁹",
                &show(&ours),
                &show(&ydb),
                "—",
                &r,
            ],
        );
        notes.push(format!(
            "⁹ Rows 7 and 8 put the emulator in a fresh child process, so the CPU time \
             (`getrusage(RUSAGE_SELF)`, user + system, every thread) a process reports of itself \
             is one side's alone. Row 7: a fresh client process runs {} sequential lock cycles \
             after a warm-up, this crate's as in row 1 (acquire + confirmed release), `ydb`'s as \
             in row 1 (acquire, drop, describes until the owner is gone; {} answers lost). Row \
             8: bare protocol streams (the floor's client, the cheapest load there is), each \
             cycling its own semaphore; the emulator's CPU time is read at the window's edges.",
            group(ours.as_ref().map_or(0, |c| c.n) as u64),
            ydb.as_ref().map_or(0, |c| c.lost),
        ));
    }
    if cfg.has(8) {
        let sessions = 16;
        let length = cfg.duration(Duration::from_secs(2));
        if let Some(e) = capped(
            &rt,
            &cfg,
            &mut rows,
            "8",
            "emulator throughput",
            cpu::emulator(sessions, length),
        ) {
            row(
                &mut rows,
                [
                    "8",
                    &format!(
                        "Emulator: acquire + release pairs/s from {} sessions, and its CPU per pair ⁹",
                        e.sessions
                    ),
                    &format!(
                        "{} ({} CPU per pair)",
                        fmt_rate(e.rate),
                        fmt_duration(e.cpu_per_pair)
                    ),
                    "—",
                    "—",
                    "—",
                ],
            );
            if !cfg.has(7) {
                notes.push(
                    "⁹ Row 8 puts the emulator in a fresh child process, which reports its own \
                     CPU time (`getrusage(RUSAGE_SELF)`, user + system, every thread) at the \
                     window's edges; the load is bare protocol streams, each cycling its own \
                     semaphore."
                        .to_string(),
                );
            }
        }
    }

    if cfg.has(9) {
        let depths = [10, cfg.count(1_000, 100), cfg.count(10_000, 1_000)];
        // A warm-up at the smallest depth, so that the first measured one is not also the
        // first run of the process's allocator and threads.
        let _ = capped(&rt, &cfg, &mut rows, "9", "warm-up", growth::queue(100));
        let mut measured = Vec::new();
        for depth in depths {
            let what = format!("queue of {} on one mutex", group(depth as u64));
            if let Some(d) = capped(&rt, &cfg, &mut rows, "9", &what, growth::queue(depth)) {
                rows.push(growth_cells(&d));
                measured.push(d);
            }
        }
        if let (Some(small), Some(large)) = (measured.first(), measured.last())
            && measured.len() == depths.len()
        {
            rows.push(growth_ratios(small, large));
        }
        let watchers = cfg.count(100, 20);
        let mut groups = Vec::new();
        for members in [10, cfg.count(1_000, 100)] {
            let what = format!(
                "group of {} with {watchers} watchers",
                group(members as u64)
            );
            if let Some(g) = capped(
                &rt,
                &cfg,
                &mut rows,
                "9",
                &what,
                growth::group(members, watchers),
            ) {
                rows.push(group_cells(&g));
                groups.push(g);
            }
        }
        if let [small, large] = &groups[..] {
            let median = median_secs;
            rows.push(ratio_line(
                "9",
                format!(
                    "growth: a group of {} over one of {} (goal ≤ 1.2×, see the notes)",
                    group(large.members as u64),
                    group(small.members as u64)
                ),
                format!(
                    "join {}, CPU {}, server bytes {}, description entries {}",
                    ratio(median(&large.join), median(&small.join)),
                    ratio(large.cpu.as_secs_f64(), small.cpu.as_secs_f64()),
                    ratio(large.traffic.bytes, small.traffic.bytes),
                    ratio(large.traffic.entries, small.traffic.entries),
                ),
            ));
        }
        notes.push(
            "¹⁰ Row 9: sessions queue on one ephemeral mutex, one after another, behind a holder; \
             the last 100 (all of them at depth 10) are measured one at a time, each from its \
             acquire until `queued()` and one describe answered on its stream after it (so that \
             whatever the acquire asks while it waits is done). CPU: user + system time of the \
             process, client and emulator together (the emulator runs in it). Server traffic: \
             what the emulator counts of the semaphore requests and its answers (pings not \
             included), per operation. Then the lock passes down the whole queue, each holder \
             releasing as soon as it is granted; a handoff is the release until the next \
             holder's grant, at the head of the full queue and over its last 100. A group: \
             the watchers follow it with `group(..).watch()` while the members join one after \
             another, each once every watcher saw the one before; the last 100 joins (all at \
             10 members) are measured, and their CPU time and traffic include what the \
             watchers' reads cost."
                .to_string(),
        );
    }

    if cfg.has(10) {
        row_scale_of_items(&rt, &cfg, &mut rows, &mut notes);
    }

    if cfg.has(11)
        && let Some(r) = capped(&rt, &cfg, &mut rows, "11", "rate limiter", rate::row(&cfg))
    {
        rows.extend(rate_cells(&r));
        notes.push(rate_note(&r));
    }

    if cfg.has(12) {
        let what = "lock space over 1, 2 and 4 nodes";
        if let Some(s) = capped(&rt, &cfg, &mut rows, "12", what, space::spread(&cfg)) {
            rows.extend(space::spread_cells(&s));
        }
        let what = "lock space transition";
        if let Some(t) = capped(&rt, &cfg, &mut rows, "12", what, space::transition(&cfg)) {
            rows.push(space::transition_cells(&t));
        }
        eprintln!("row 12: lock space moved fraction ...");
        rows.push(match space::moved() {
            Ok(m) => space::moved_cells(&m),
            Err(e) => failed_line("12", "lock space moved fraction", e.as_ref()),
        });
        notes.push(space::note(&cfg));
    }

    println!(
        "Emulator over loopback TCP, tokio multi-thread runtime ({workers} workers, {} CPUs), real \
         time, scale {}. Medians (p90). Ratios: this crate ÷ the other (time: below 1 is \
         faster; rates: above 1 is faster).\n",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        cfg.scale
    );
    println!("| # | Benchmark | this crate | `ydb` 0.18.2 | reference | ratio |");
    println!("|---|---|---|---|---|---|");
    for r in &rows {
        println!("| {} |", r.join(" | "));
    }
    println!();
    // By the number the note starts with, in superscript digits (¹⁰ after ⁹).
    let order = |n: &String| {
        n.chars()
            .map_while(|c| "⁰¹²³⁴⁵⁶⁷⁸⁹".chars().position(|d| d == c))
            .fold(0, |acc, d| acc * 10 + d)
    };
    notes.sort_by_key(order);
    for n in &notes {
        println!("{n}\n");
    }
    rt.shutdown_timeout(Duration::from_secs(1));
    // The table is printed whatever happened; a row of this crate that failed fails the run
    // (the `ydb` side may lose answers on its own, and is only reported).
    let failed: Vec<&str> = rows
        .iter()
        .filter(|r| r[2].starts_with("failed"))
        .map(|r| r[0].as_str())
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("rows {failed:?} failed for this crate").into())
    }
}
