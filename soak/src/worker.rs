//! A worker process: its own clients, session manager and lock space, reaching each
//! coordination node and the directory through a link of its own, running every workload at
//! once until the deadline the controller gave it, and writing what it does to its history.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::time::{Instant, sleep, timeout};
use tokio_util::sync::CancellationToken;
use ydb_coordination::space::LockSpace;
use ydb_coordination::{Client, SessionManager, SessionOptions, auth::Credentials};

use crate::history::{Kind, Phase, Recorder, Token, What, now};
use crate::register::{self, Request};
use crate::resource::{PgWrite, PgWriter};

/// The permits of the counted semaphore.
pub(crate) const PERMITS: u64 = 3;
/// The fenced mutex's names.
pub(crate) const MUTEX_NAMES: [&str; 3] = ["m0", "m1", "m2"];
/// The lock space's names.
pub(crate) const SPACE_NAMES: [&str; 6] = ["s0", "s1", "s2", "s3", "s4", "s5"];
/// The lock around the unfenced counter.
pub(crate) const COUNTER: &str = "counter";
/// The counted semaphore.
pub(crate) const POOL: &str = "pool";
/// The election.
pub(crate) const LEADER: &str = "leader";

/// Between two writes of a holder.
const WRITE_EVERY: Duration = Duration::from_millis(100);
/// How long an acquire waits on the server before it gives up.
pub(crate) const ACQUIRE_WAIT: Duration = Duration::from_secs(2);
/// In the keep-writing mode, how long a holder goes on writing after its token fired.
const KEEP_WRITING_FOR: Duration = Duration::from_secs(1);
/// In the broken modes (keep-writing, unfenced), the longest a holder holds.
const BROKEN_HOLD: Duration = Duration::from_secs(15);
/// How often a hold is long (from half a session timeout to `--max-hold-ms`).
const LONG_HOLD_ODDS: f64 = 0.3;
/// How often a holder goes deaf for a while: it keeps writing without looking at its
/// token, so that only fencing stands between it and the next holder.
const DEAF_ODDS: f64 = 0.1;

/// The worker's command line (given by the controller).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct WorkerArgs {
    /// The process name in the histories (`w3.1`).
    #[arg(long)]
    pub(crate) process: String,
    /// The history file to append to.
    #[arg(long)]
    pub(crate) history: PathBuf,
    /// A link to the server as `node=connection string`: `locks`, `directory` and each
    /// space node, each through a relay of its own; repeated.
    #[arg(long = "link")]
    pub(crate) links: Vec<String>,
    /// The TLS name of the server, for a `grpcs://` connection through a proxy.
    #[arg(long)]
    pub(crate) tls_domain: Option<String>,
    /// The register's address.
    #[arg(long)]
    pub(crate) register: SocketAddr,
    /// The coordination node of the mutex, counter, semaphore and election.
    #[arg(long)]
    pub(crate) lock_node: String,
    /// The lock space's directory node.
    #[arg(long)]
    pub(crate) directory: String,
    /// The lock space's name on its directory.
    #[arg(long)]
    pub(crate) space: String,
    /// A lock-space node as `name=path`; repeated.
    #[arg(long = "space-node")]
    pub(crate) space_nodes: Vec<String>,
    /// The session timeout, in milliseconds.
    #[arg(long)]
    pub(crate) session_timeout_ms: u64,
    /// When to stop, in `CLOCK_MONOTONIC` nanoseconds.
    #[arg(long)]
    pub(crate) until: u64,
    /// The seed of this process's random choices.
    #[arg(long)]
    pub(crate) seed: u64,
    /// Go on writing after a lease's token fired (a broken holder, for the checker to catch).
    #[arg(long)]
    pub(crate) keep_writing: bool,
    /// Hold fenced locks three times longer, so that faults find holders at work (for the
    /// broken modes, whose effects show while a holder is cut off).
    #[arg(long)]
    pub(crate) long_holds: bool,
    /// The longest of the long holds, in milliseconds (several session timeouts, drawn per
    /// seed by the controller).
    #[arg(long, default_value_t = 9_000)]
    pub(crate) max_hold_ms: u64,
    /// The PostgreSQL every fenced write also goes to (`--resource postgres`): a
    /// tokio-postgres connection string.
    #[arg(long)]
    pub(crate) postgres: Option<String>,
    /// Write to PostgreSQL without the fence's check, deaf through every hold (a broken
    /// writer, for the checker to catch).
    #[arg(long)]
    pub(crate) unfenced: bool,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Runs the worker to its deadline.
pub(crate) fn main(args: WorkerArgs) -> Result<(), BoxError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(run(args))
}

/// What every workload of the worker shares.
#[derive(Debug)]
struct Ctx {
    rec: Recorder,
    register: SocketAddr,
    until: u64,
    keep_writing: bool,
    long_holds: bool,
    max_hold: Duration,
    timeout: Duration,
    postgres: Option<String>,
    unfenced: bool,
}

impl Ctx {
    fn running(&self) -> bool {
        now() < self.until
    }

    /// The bound on a whole acquire, past the server's own wait: a stalled network must not
    /// keep a workload from its deadline.
    fn acquire_bound(&self) -> Duration {
        ACQUIRE_WAIT + self.timeout * 2
    }
}

async fn run(args: WorkerArgs) -> Result<(), BoxError> {
    let rec = Recorder::create(&args.history, &args.process)?;
    rec.record(
        &rec.event(rec.op(), Kind::Start, Phase::Info)
            .detail(format!("pid {}", std::process::id())),
    );
    let timeout_ = Duration::from_millis(args.session_timeout_ms);
    // A client per link: each node and the directory are reached through their own relay.
    let mut clients = std::collections::HashMap::new();
    for link in &args.links {
        let (node, connection) = link
            .split_once('=')
            .ok_or_else(|| format!("--link {link:?} is not node=connection"))?;
        let mut builder = Client::builder(connection)
            .discovery(false)
            .credentials(Credentials::from_env()?);
        if let Some(domain) = &args.tls_domain {
            builder = builder.tls_domain(domain);
        }
        let client = timeout(timeout_ * 4, builder.build()).await??;
        clients.insert(node.to_string(), client);
    }
    let client_of = |node: &str| {
        clients
            .get(node)
            .ok_or_else(|| format!("no --link for {node}"))
    };
    let options = SessionOptions::new()
        .timeout(timeout_)
        .description(&args.process);
    let manager = client_of(&last_segment(&args.lock_node))?
        .session_manager(&args.lock_node, options.clone());
    // Opening the space joins the directory: under faults and load (a slow directory link
    // during a reshard, a partition) it may take more than its bound; a worker tries again
    // until its deadline rather than give up.
    let open = || -> Result<_, BoxError> {
        let mut space = LockSpace::builder().session_options(options.clone());
        for node in &args.space_nodes {
            let (name, path) = node
                .split_once('=')
                .ok_or_else(|| format!("--space-node {node:?} is not name=path"))?;
            space = space.node(name, client_of(name)?, path);
        }
        let directory = client_of(&last_segment(&args.directory))?;
        Ok(space
            .directory(directory, &args.directory, &args.space)
            .open())
    };
    let space = loop {
        let failed = match timeout(timeout_ * 4, open()?).await {
            Ok(Ok(space)) => break space,
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("not open in {:?}", timeout_ * 4),
        };
        if now() >= args.until {
            return Err(format!("the lock space could not be opened: {failed}").into());
        }
        eprintln!("worker: the lock space did not open ({failed}); trying again");
        sleep(Duration::from_millis(500)).await;
    };
    let ctx = Arc::new(Ctx {
        rec,
        register: args.register,
        until: args.until,
        keep_writing: args.keep_writing,
        long_holds: args.long_holds,
        max_hold: Duration::from_millis(args.max_hold_ms),
        timeout: timeout_,
        postgres: args.postgres.clone(),
        unfenced: args.unfenced,
    });
    // Which sessions are this process's, so that the checker knows whose leases a
    // server-side expiry ended.
    let mut watchers = vec![tokio::spawn(log_sessions(
        ctx.clone(),
        last_segment(&args.lock_node),
        manager.sessions(),
    ))];
    for node in &args.space_nodes {
        let name = node.split_once('=').map_or(node.as_str(), |(n, _)| n);
        if let Ok(m) = space.manager(name) {
            watchers.push(tokio::spawn(log_sessions(
                ctx.clone(),
                name.to_string(),
                m.sessions(),
            )));
        }
    }
    let seed = args.seed;
    let tasks = vec![
        tokio::spawn(mutex_loop(ctx.clone(), manager.clone(), seed ^ 1)),
        tokio::spawn(counter_loop(ctx.clone(), manager.clone(), seed ^ 2)),
        tokio::spawn(semaphore_loop(ctx.clone(), manager.clone(), seed ^ 3)),
        tokio::spawn(election_loop(ctx.clone(), manager.clone(), seed ^ 4)),
        tokio::spawn(space_loop(ctx.clone(), space.clone(), seed ^ 5)),
    ];
    for task in tasks {
        let _ = task.await;
    }
    for watcher in watchers {
        watcher.abort();
    }
    // Closing asks the server to free everything at once, so that nothing is left for the
    // end-of-run describe.
    let close = async {
        space.shutdown().await;
        manager.shutdown().await;
    };
    let _ = timeout(timeout_ * 2, close).await;
    ctx.rec
        .record(&ctx.rec.event(ctx.rec.op(), Kind::Exit, Phase::Info));
    Ok(())
}

/// The last segment of a node path: how histories name nodes.
pub(crate) fn last_segment(path: &str) -> String {
    path.rsplit('/').next().unwrap_or(path).to_string()
}

async fn log_sessions(
    ctx: Arc<Ctx>,
    node: String,
    mut sessions: futures::stream::BoxStream<'static, ydb_coordination::Session>,
) {
    use futures::StreamExt;
    while let Some(session) = sessions.next().await {
        ctx.rec.record(
            &ctx.rec
                .event(ctx.rec.op(), Kind::Session, Phase::Info)
                .name(&node)
                .value(session.id()),
        );
    }
}

/// Records the invoke of an acquire, runs it within the bound, and records a failure; on a
/// grant it returns the op id and the guard, for the caller to record the ok with the token.
async fn acquire<G, E: std::fmt::Display>(
    ctx: &Ctx,
    what: What,
    name: &str,
    future: impl Future<Output = Result<Option<G>, E>>,
) -> Option<(u64, G)> {
    let op = ctx.rec.op();
    let rec = &ctx.rec;
    rec.record(
        &rec.event(op, Kind::Acquire, Phase::Invoke)
            .what(what)
            .name(name),
    );
    let fail = |phase, detail: String| {
        rec.record(
            &rec.event(op, Kind::Acquire, phase)
                .what(what)
                .name(name)
                .detail(detail),
        );
    };
    match timeout(ctx.acquire_bound(), future).await {
        Ok(Ok(Some(guard))) => return Some((op, guard)),
        Ok(Ok(None)) => fail(Phase::Fail, "not acquired in time".to_string()),
        // Every error of an acquire leaves it not granted: a grant that races the error is
        // given back by the client.
        Ok(Err(e)) => fail(Phase::Fail, e.to_string()),
        // Dropped: withdrawn, and a grant that had arrived is released.
        Err(_) => fail(Phase::Unknown, "the acquire outlived its bound".to_string()),
    }
    None
}

/// Records a grant with its token and the hold the worker plans (`value`, in
/// milliseconds: the controller aims faults at long holds).
fn record_granted(ctx: &Ctx, op: u64, what: What, name: &str, token: Token, hold: Duration) {
    ctx.rec.record(
        &ctx.rec
            .event(op, Kind::Acquire, Phase::Ok)
            .what(what)
            .name(name)
            .token(token)
            .value(u64::try_from(hold.as_millis()).unwrap_or(u64::MAX)),
    );
}

/// Watches a lease's token for its whole tenure, whatever the holder does, and records the
/// instant it fires; stops watching when the lease is given back (drop the returned guard
/// right before the release).
fn watch_token(
    ctx: &Arc<Ctx>,
    lease: u64,
    what: What,
    name: &str,
    token: CancellationToken,
) -> tokio_util::sync::DropGuard {
    let done = CancellationToken::new();
    let (ctx, name, stop) = (ctx.clone(), name.to_string(), done.clone());
    tokio::spawn(async move {
        tokio::select! {
            biased;
            _ = stop.cancelled() => {}
            _ = token.cancelled() => {
                ctx.rec.record(
                    &ctx.rec
                        .event(ctx.rec.op(), Kind::Token, Phase::Info)
                        .what(what)
                        .name(&name)
                        .lease(lease),
                );
            }
        }
    });
    done.drop_guard()
}

fn record_fired(ctx: &Ctx, lease: u64, what: What, name: &str) {
    ctx.rec.record(
        &ctx.rec
            .event(ctx.rec.op(), Kind::Fired, Phase::Info)
            .what(what)
            .name(name)
            .lease(lease),
    );
}

/// Records a release and bounds it.
async fn release<E: std::fmt::Display>(
    ctx: &Ctx,
    lease: u64,
    what: What,
    name: &str,
    future: impl Future<Output = Result<bool, E>>,
) {
    let op = ctx.rec.op();
    let rec = &ctx.rec;
    let event = |phase| {
        rec.event(op, Kind::Release, phase)
            .what(what)
            .name(name)
            .lease(lease)
    };
    rec.record(&event(Phase::Invoke));
    match timeout(ctx.timeout * 2, future).await {
        // `value`: 1 when this release gave the lease back, 0 when it was lost already.
        Ok(Ok(released)) => rec.record(&event(Phase::Ok).value(u64::from(released))),
        Ok(Err(e)) => rec.record(&event(Phase::Fail).detail(e.to_string())),
        Err(_) => rec.record(&event(Phase::Unknown).detail("the release outlived its bound")),
    }
}

/// Where a workload's writes go: the register, and the real resource when the run has one.
#[derive(Debug)]
struct Writers {
    register: register::Client,
    postgres: Option<PgWriter>,
}

impl Writers {
    fn new(ctx: &Ctx) -> Self {
        Self {
            register: register::Client::new(ctx.register),
            postgres: ctx
                .postgres
                .clone()
                .map(|config| PgWriter::new(config, !ctx.unfenced)),
        }
    }
}

/// One write to the register (a fenced one to the real resource too, at once), its invoke
/// stamped at `ts` (taken before the holder checked its token, so a write is never stamped
/// before a fire that stopped it). A `deaf` write is made without looking at the token (its
/// invoke says so): only fencing judges it.
#[allow(clippy::too_many_arguments)]
async fn write(
    ctx: &Ctx,
    writers: &mut Writers,
    ts: u64,
    lease: u64,
    what: What,
    name: &str,
    token: Option<Token>,
    value: u64,
    deaf: bool,
) -> Option<bool> {
    let op = ctx.rec.op();
    let rec = &ctx.rec;
    let event = |phase| {
        let e = rec
            .event(op, Kind::Write, phase)
            .what(what)
            .name(name)
            .lease(lease)
            .value(value);
        match token {
            Some(t) => e.token(t),
            None => e,
        }
    };
    let invoke = event(Phase::Invoke).at(ts);
    rec.record(&if deaf { invoke.detail(DEAF) } else { invoke });
    let request = Request::Write {
        name: name.to_string(),
        token,
        value,
        process: rec.process().to_string(),
        id: op,
        lease,
    };
    let Writers { register, postgres } = writers;
    let to_postgres = async {
        let (Some(pg), Some(token)) = (postgres.as_mut(), token) else {
            return;
        };
        let w = PgWrite {
            name,
            token,
            process: rec.process(),
            op,
            lease,
            value,
        };
        let done = pg.write(&w).await;
        let e = |phase| {
            rec.event(op, Kind::Fenced, phase)
                .what(what)
                .name(name)
                .lease(lease)
                .token(token)
        };
        rec.record(&match done {
            Ok(true) => e(Phase::Ok),
            Ok(false) => e(Phase::Fail),
            Err(err) => e(Phase::Unknown).detail(err.to_string()),
        });
    };
    let (answer, ()) = tokio::join!(register.call(&request), to_postgres);
    match answer {
        Ok(reply) => {
            rec.record(&event(if reply.ok { Phase::Ok } else { Phase::Fail }));
            Some(reply.ok)
        }
        Err(e) => {
            rec.record(&event(Phase::Unknown).detail(e.to_string()));
            None
        }
    }
}

/// The detail of a write made without looking at the token.
pub(crate) const DEAF: &str = "deaf";

/// The register's name for a lock's name.
pub(crate) fn register_name(what: What, name: &str) -> String {
    match what {
        What::Mutex => format!("mutex/{name}"),
        What::Space => format!("space/{name}"),
        What::Election => format!("election/{name}"),
        What::Counter => format!("counter/{name}"),
        What::Semaphore => format!("semaphore/{name}"),
    }
}

/// How a holder holds: how long, and whether it goes deaf for a while (from `.0` into the
/// hold, for `.1`: it writes on without looking at its token).
#[derive(Debug, Clone, Copy)]
struct Hold {
    length: Duration,
    deaf: Option<(Duration, Duration)>,
}

/// Holds a lease for `hold.length`, writing with its token every [`WRITE_EVERY`] while it is
/// held; stops at once when the token fires (in the keep-writing mode, a second later), but
/// not while deaf: then it notices the fire only when the deaf stretch ends.
#[allow(clippy::too_many_arguments)]
async fn hold_and_write(
    ctx: &Ctx,
    client: &mut Writers,
    lease: u64,
    what: What,
    name: &str,
    cancel: &CancellationToken,
    base: [u64; 2],
    hold: Hold,
) {
    let target = register_name(what, name);
    let start = Instant::now();
    let mut end = start + hold.length;
    let deaf = hold
        .deaf
        .map(|(after, lasts)| (start + after, start + after + lasts));
    let mut fired = false;
    let mut seq = 0;
    loop {
        let ts = now();
        let at = Instant::now();
        let deaf_now = deaf.is_some_and(|(from, to)| from <= at && at < to);
        if !deaf_now && cancel.is_cancelled() && !fired {
            fired = true;
            record_fired(ctx, lease, what, name);
            if !ctx.keep_writing {
                return;
            }
            end = Instant::now() + KEEP_WRITING_FOR;
        }
        let token = [base[0], base[1], seq];
        seq += 1;
        write(
            ctx,
            client,
            ts,
            lease,
            what,
            &target,
            Some(token),
            seq,
            deaf_now,
        )
        .await;
        if Instant::now() >= end || !ctx.running() {
            return;
        }
        if fired || deaf_now {
            sleep(WRITE_EVERY).await;
        } else {
            tokio::select! {
                _ = cancel.cancelled() => {}
                _ = sleep(WRITE_EVERY) => {}
            }
        }
    }
}

/// Holds a lease without writing, noting a fire.
async fn hold_only(
    ctx: &Ctx,
    lease: u64,
    what: What,
    name: &str,
    cancel: &CancellationToken,
    hold: Duration,
) {
    if cancel.run_until_cancelled(sleep(hold)).await.is_none() {
        record_fired(ctx, lease, what, name);
    }
}

/// How long a holder keeps a fenced lock: mostly 200 ms to 1.5 s; often from half a session
/// timeout to the run's longest hold (several timeouts: faults and expiries then find holders
/// at work); now and then deaf for one to two timeouts somewhere inside. The broken holders
/// hold on for [`BROKEN_HOLD`], so that every fault that ends a session finds one at work:
/// the keep-writing holder until a fault fires its token, the unfenced one deaf throughout,
/// so that it writes on after its session ended while its successor writes too.
fn hold_time(ctx: &Ctx, rng: &mut StdRng) -> Hold {
    if ctx.keep_writing || ctx.unfenced {
        return Hold {
            length: BROKEN_HOLD,
            deaf: ctx.unfenced.then_some((Duration::ZERO, BROKEN_HOLD)),
        };
    }
    let short = Duration::from_millis(rng.random_range(200..1500));
    let length = if ctx.long_holds {
        short * 3
    } else if rng.random_bool(LONG_HOLD_ODDS) {
        between(rng, ctx.timeout / 2, ctx.max_hold.max(ctx.timeout))
    } else {
        short
    };
    let deaf = rng.random_bool(DEAF_ODDS).then(|| {
        let after = between(rng, Duration::ZERO, length);
        (after, between(rng, ctx.timeout, ctx.timeout * 2))
    });
    Hold { length, deaf }
}

fn between(rng: &mut StdRng, lo: Duration, hi: Duration) -> Duration {
    let (lo, hi) = (lo.as_millis() as u64, hi.as_millis() as u64);
    Duration::from_millis(rng.random_range(lo..=hi.max(lo)))
}

async fn pause(rng: &mut StdRng) {
    sleep(Duration::from_millis(rng.random_range(10..150))).await;
}

async fn mutex_loop(ctx: Arc<Ctx>, manager: SessionManager, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut client = Writers::new(&ctx);
    while ctx.running() {
        let name = MUTEX_NAMES[rng.random_range(0..MUTEX_NAMES.len())];
        let mutex = manager.mutex(name);
        let what = What::Mutex;
        if let Some((lease, guard)) =
            acquire(&ctx, what, name, mutex.lock_timeout(ACQUIRE_WAIT)).await
        {
            let base = [0, guard.fencing_token().order];
            let hold = hold_time(&ctx, &mut rng);
            record_granted(&ctx, lease, what, name, [0, base[1], 0], hold.length);
            let watch = watch_token(&ctx, lease, what, name, guard.token());
            hold_and_write(
                &ctx,
                &mut client,
                lease,
                what,
                name,
                &guard.token(),
                base,
                hold,
            )
            .await;
            drop(watch);
            release(&ctx, lease, what, name, guard.unlock()).await;
        }
        pause(&mut rng).await;
    }
}

/// Read, think, write back `value + 1`, with no token: the pattern fencing exists for. A
/// holder paused between its read and its write overwrites its successor's increment.
async fn counter_loop(ctx: Arc<Ctx>, manager: SessionManager, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut client = Writers::new(&ctx);
    let what = What::Counter;
    let target = register_name(what, COUNTER);
    while ctx.running() {
        let mutex = manager.mutex(COUNTER);
        if let Some((lease, guard)) =
            acquire(&ctx, what, COUNTER, mutex.lock_timeout(ACQUIRE_WAIT)).await
        {
            // Long enough that a pause of the process often lands inside it.
            let think = Duration::from_millis(rng.random_range(100..800));
            let token = [0, guard.fencing_token().order, 0];
            record_granted(&ctx, lease, what, COUNTER, token, think);
            let watch = watch_token(&ctx, lease, what, COUNTER, guard.token());
            let rec = &ctx.rec;
            let op = rec.op();
            let read = |phase| {
                rec.event(op, Kind::Read, phase)
                    .what(what)
                    .name(&target)
                    .lease(lease)
            };
            rec.record(&read(Phase::Invoke));
            let request = Request::Read {
                name: target.clone(),
                process: rec.process().to_string(),
            };
            match client.register.call(&request).await {
                Ok(reply) => {
                    rec.record(&read(Phase::Ok).value(reply.value));
                    let cancel = guard.token();
                    if cancel.run_until_cancelled(sleep(think)).await.is_none() {
                        record_fired(&ctx, lease, what, COUNTER);
                        // The naive holder does not look at its token: it finishes thinking
                        // and writes anyway.
                        sleep(think).await;
                    }
                    let value = reply.value + 1;
                    let (at, target) = (now(), &target);
                    write(
                        &ctx,
                        &mut client,
                        at,
                        lease,
                        what,
                        target,
                        None,
                        value,
                        false,
                    )
                    .await;
                }
                Err(e) => rec.record(&read(Phase::Unknown).detail(e.to_string())),
            }
            drop(watch);
            release(&ctx, lease, what, COUNTER, guard.unlock()).await;
        }
        pause(&mut rng).await;
    }
}

async fn semaphore_loop(ctx: Arc<Ctx>, manager: SessionManager, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let what = What::Semaphore;
    while ctx.running() {
        let pool = manager.semaphore(POOL, PERMITS);
        if let Some((lease, permit)) =
            acquire(&ctx, what, POOL, pool.acquire_timeout(1, ACQUIRE_WAIT)).await
        {
            let hold = Duration::from_millis(rng.random_range(100..800));
            let token = [0, permit.fencing_token().order, 0];
            record_granted(&ctx, lease, what, POOL, token, hold);
            let watch = watch_token(&ctx, lease, what, POOL, permit.token());
            hold_only(&ctx, lease, what, POOL, &permit.token(), hold).await;
            drop(watch);
            release(&ctx, lease, what, POOL, permit.release()).await;
        }
        pause(&mut rng).await;
    }
}

async fn election_loop(ctx: Arc<Ctx>, manager: SessionManager, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut client = Writers::new(&ctx);
    let what = What::Election;
    let me = ctx.rec.process().to_string();
    while ctx.running() {
        let election = manager.election(LEADER);
        if let Some((lease, leadership)) = acquire(
            &ctx,
            what,
            LEADER,
            election.campaign_timeout(me.as_bytes(), ACQUIRE_WAIT),
        )
        .await
        {
            let base = [0, leadership.fencing_token().order];
            let term = hold_time(&ctx, &mut rng);
            record_granted(&ctx, lease, what, LEADER, [0, base[1], 0], term.length);
            let cancel = leadership.token();
            let watch = watch_token(&ctx, lease, what, LEADER, cancel.clone());
            hold_and_write(&ctx, &mut client, lease, what, LEADER, &cancel, base, term).await;
            drop(watch);
            release(&ctx, lease, what, LEADER, leadership.resign()).await;
        }
        pause(&mut rng).await;
    }
}

async fn space_loop(ctx: Arc<Ctx>, space: LockSpace, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut client = Writers::new(&ctx);
    let what = What::Space;
    while ctx.running() {
        // In a transition, mostly a name that moves: its locks are taken in both places,
        // and their tokens follow the rule of the layout published by then.
        let layout = space.layout();
        let moving: Vec<&str> = SPACE_NAMES
            .into_iter()
            .filter(|n| layout.parts(n).len() > 1)
            .collect();
        let name = if !moving.is_empty() && rng.random_bool(0.8) {
            moving[rng.random_range(0..moving.len())]
        } else {
            SPACE_NAMES[rng.random_range(0..SPACE_NAMES.len())]
        };
        let mutex = space.mutex(name);
        if let Some((lease, guard)) =
            acquire(&ctx, what, name, mutex.lock_timeout(ACQUIRE_WAIT)).await
        {
            let token = guard.fencing_token();
            let base = [token.epoch, token.order];
            let hold = hold_time(&ctx, &mut rng);
            ctx.rec.record(
                &ctx.rec
                    .event(lease, Kind::Acquire, Phase::Ok)
                    .what(what)
                    .name(name)
                    .token([base[0], base[1], 0])
                    .value(u64::try_from(hold.length.as_millis()).unwrap_or(u64::MAX))
                    .detail(guard.space_lease().map_or_else(String::new, |parts| {
                        format!("epoch {} on {}", parts.epoch(), parts.nodes().join("+"))
                    })),
            );
            let watch = watch_token(&ctx, lease, what, name, guard.token());
            hold_and_write(
                &ctx,
                &mut client,
                lease,
                what,
                name,
                &guard.token(),
                base,
                hold,
            )
            .await;
            drop(watch);
            release(&ctx, lease, what, name, guard.release()).await;
        }
        pause(&mut rng).await;
    }
}
