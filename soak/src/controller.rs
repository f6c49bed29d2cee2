//! The controller: runs the server (the emulator, or a real YDB given by
//! `YDB_CONNECTION_STRING`) and records its own history of it, the register, a link per
//! worker and server node and a process per worker; injects the seeded faults one at a time
//! and reshards the lock space meanwhile, with a partition at each step; at the end checks
//! that nothing was left on the server, runs the checker and prints the summary.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use tokio::net::TcpListener;
use tokio::time::sleep;
use ydb_coordination::emulator::Emulator;
use ydb_coordination::emulator::observe::{Change as NodeChange, OwnerEnd, SessionEnd};
use ydb_coordination::space::{Layout, SpaceDirectory};
use ydb_coordination::{
    Client, ErrorKind, SessionManager, SessionOptions, auth::Credentials, config::DescribeOptions,
    config::NodeConfig,
};

use crate::check::{self, CHECKS, Check, Params, Report};
use crate::history::{self, Kind, Phase, Recorder, What, now};
use crate::link::{Dir, Link};
use crate::register;
use crate::resource::{self, Resource};
use crate::worker::{COUNTER, LEADER, MUTEX_NAMES, POOL, SPACE_NAMES, register_name};

/// How many times the operator looks for a holder of a moving name before it partitions
/// the last writer of one instead (100 ms apart).
const HOLDER_POLLS: usize = 30;

/// The lock space's name on its directory node.
const SPACE: &str = "soak";

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The description of every session the emulator started, by (node path, session id).
type Owners = Arc<std::sync::Mutex<std::collections::HashMap<(String, u64), String>>>;

/// A deliberately broken mode, to show that the checker catches what it is there for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Bite {
    /// Workers go on writing after their lease's token fired.
    KeepWriting,
    /// The operator publishes the new layout at once, without the transition step.
    SkipTransition,
    /// Every worker's clock runs at [`SLOW_CLOCK`] of the machine's, beyond the documented
    /// assumption (a client clock at most 10% slow): tokens fire after the server expired
    /// the session.
    SlowClock,
    /// The workers write to PostgreSQL without the fence's check (the run's resource is
    /// PostgreSQL), and every hold is long and deaf throughout (not one in ten for a while),
    /// so that every fault that ends a holder's session leaves a stale holder writing on:
    /// its late writes commit after its successor's.
    UnfencedPostgres,
}

/// The rate of the one worker whose clock runs at another rate, within the documented
/// assumption (the margin, a tenth of the session timeout, absorbs up to 10%).
const CLOCK_RATE: f64 = 0.95;
/// The rate of every worker's clock in the slow-clock bite, beyond the assumption.
const SLOW_CLOCK: f64 = 0.5;
/// Where Debian's libfaketime is; the clock-rate worker needs it.
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

/// The run's command line.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct RunArgs {
    /// The seed of the fault schedule and of every worker's choices (default: from the
    /// clock, printed to replay).
    #[arg(long)]
    pub(crate) seed: Option<u64>,
    /// How long the workers run (`150s`, `2m`, `90`).
    #[arg(long, default_value = "150s", value_parser = parse_duration)]
    pub(crate) duration: Duration,
    /// The number of worker processes.
    #[arg(long, default_value_t = 6)]
    pub(crate) workers: usize,
    /// The session timeout of every session: short, so that faults outlast it often.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    pub(crate) session_timeout: Duration,
    /// Break the system on purpose; the verdict must then fail.
    #[arg(long, value_enum)]
    pub(crate) bite: Option<Bite>,
    /// Where the fenced writes go: the register alone, or a real PostgreSQL beside it (the
    /// controller starts one; `apt-get install postgresql`).
    #[arg(long, value_enum, default_value_t)]
    pub(crate) resource: Resource,
    /// Where to write the histories (default: a fresh directory under the temp dir).
    #[arg(long)]
    pub(crate) out: Option<PathBuf>,
    /// Keep the histories after a passing run too (they are always kept after a failure).
    #[arg(long)]
    pub(crate) keep: bool,
    /// A check to leave out of the verdict (its violations are still listed), for a known
    /// open defect; repeated for more.
    #[arg(long, value_parser = check::parse_check)]
    pub(crate) ignore: Vec<Check>,
}

/// The command line of `check`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct CheckArgs {
    /// The directory of a run's histories.
    pub(crate) dir: PathBuf,
    /// The session timeout the run had.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    pub(crate) session_timeout: Duration,
    /// A check to leave out of the verdict, as the run's `--ignore`.
    #[arg(long, value_parser = check::parse_check)]
    pub(crate) ignore: Vec<Check>,
}

/// Checks kept histories again; the exit code is as a run's.
pub(crate) fn recheck(args: &CheckArgs) -> u8 {
    let (events, unreadable) = match history::load(&args.dir) {
        Ok(loaded) => loaded,
        Err(e) => {
            eprintln!("soak: {} cannot be read: {e}", args.dir.display());
            return 2;
        }
    };
    let params = Params {
        ignored: args.ignore.clone(),
        ..Params::new(args.session_timeout)
    };
    let report = check::check(&events, params);
    println!(
        "{} events ({unreadable} lines damaged), {} operations",
        events.len(),
        report.operations
    );
    for check in CHECKS {
        let ignored = if report.ignored.contains(&check) {
            " (ignored)"
        } else {
            ""
        };
        println!("  {check}: {}{ignored}", report.count(check));
    }
    for v in &report.violations {
        println!("  [{}] {}", v.check, v.message);
    }
    match (unreadable, report.passed()) {
        (0, true) => {
            println!("verdict: PASS");
            0
        }
        (0, false) => {
            println!("verdict: FAIL");
            1
        }
        _ => {
            println!("verdict: VOID (the histories lost lines)");
            2
        }
    }
}

/// `150s`, `2m`, `500ms` or plain seconds.
pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (digits, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => s.split_at(at),
        None => (s, "s"),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{s:?} is not a duration like 150s, 2m or 500ms"))?;
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n.saturating_mul(60))),
        _ => Err(format!("{s:?}: the unit is one of ms, s, m")),
    }
}

/// The faults, each injected alone and healed before the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// SIGSTOP of a holder for less than the session timeout, then SIGCONT.
    PauseShort,
    /// SIGSTOP of a holder for longer than the session timeout, then SIGCONT.
    PauseLong,
    /// SIGKILL of a worker, and a new one in its place.
    Kill,
    /// The worker's connections break and new ones are dropped for a while.
    Blackhole,
    /// One of the worker's links (to the directory, or to one node) breaks and drops new
    /// connections for a while; the others work.
    LinkBlackhole,
    /// A worker in the middle of a long hold of a lock node's lock loses every link for
    /// longer than the session timeout while it runs: the server expires its session and
    /// grants the lock to the next waiter, and only the lease's deadline has stopped the
    /// holder first.
    HolderCut,
    /// One direction of one of the worker's links, or of all of them, stops for a while.
    OneWay,
    /// The worker's traffic stops without any connection closing.
    Stall,
    /// The worker's connections break once.
    Reset,
    /// Every chunk of the worker's traffic is delayed for a while.
    Delay,
    /// Every coordination node's tablet restarts (state kept).
    TabletRestart,
    /// The server expires a session.
    ExpireSession,
}

impl Fault {
    const ALL: [Fault; 12] = [
        Fault::PauseShort,
        Fault::PauseLong,
        Fault::Kill,
        Fault::Blackhole,
        Fault::LinkBlackhole,
        Fault::HolderCut,
        Fault::OneWay,
        Fault::Stall,
        Fault::Reset,
        Fault::Delay,
        Fault::TabletRestart,
        Fault::ExpireSession,
    ];

    fn name(self) -> &'static str {
        match self {
            Fault::PauseShort => "sigstop-short",
            Fault::PauseLong => "sigstop-long",
            Fault::Kill => "sigkill",
            Fault::Blackhole => "proxy-blackhole",
            Fault::LinkBlackhole => "link-blackhole",
            Fault::HolderCut => "holder-cut",
            Fault::OneWay => "one-way",
            Fault::Stall => "proxy-stall",
            Fault::Reset => "proxy-reset",
            Fault::Delay => "proxy-delay",
            Fault::TabletRestart => "tablet-restart",
            Fault::ExpireSession => "session-expire",
        }
    }

    /// Whether it needs the emulator (a real server's tablets and sessions are not ours).
    fn server_side(self) -> bool {
        matches!(self, Fault::TabletRestart | Fault::ExpireSession)
    }
}

/// Where the coordination nodes live.
struct Nodes {
    lock: String,
    space: Vec<(String, String)>,
    directory: String,
}

impl Nodes {
    fn under(root: &str) -> Self {
        Self {
            lock: format!("{root}/locks"),
            space: (1..=4)
                .map(|i| (format!("n{i}"), format!("{root}/n{i}")))
                .collect(),
            directory: format!("{root}/directory"),
        }
    }

    fn all(&self) -> Vec<&str> {
        let mut all = vec![self.lock.as_str(), self.directory.as_str()];
        all.extend(self.space.iter().map(|(_, p)| p.as_str()));
        all
    }
}

/// One worker place (its links are `Run::links[index]`) and the process running there now.
struct Slot {
    index: usize,
    incarnation: u32,
    child: Option<Child>,
    /// Set once the process was seen gone, so that it is counted once.
    gone: bool,
}

impl Slot {
    fn process(&self) -> String {
        format!("w{}.{}", self.index, self.incarnation)
    }

    fn pid(&self) -> Option<Pid> {
        let id = self.child.as_ref()?.id();
        Some(Pid::from_raw(i32::try_from(id).ok()?))
    }
}

/// Everything the run shares.
struct Run {
    args: RunArgs,
    seed: u64,
    dir: PathBuf,
    rec: Arc<Recorder>,
    emulator: Option<Emulator>,
    /// The real server's connection string, when there is one.
    external: Option<String>,
    tls_domain: Option<String>,
    database: String,
    nodes: Nodes,
    client: Client,
    register: register::Shared,
    register_addr: SocketAddr,
    /// The connection string of the PostgreSQL the fenced writes also go to.
    postgres: Option<String>,
    until: u64,
    /// Each worker's links, by slot: one per node it uses (`locks`, `n1`..`n4`) and one to
    /// the directory, by the node's last path segment.
    links: Vec<BTreeMap<String, Link>>,
    /// The slot whose worker's clock runs at [`CLOCK_RATE`] (none without libfaketime).
    clock_slot: Option<usize>,
    /// The longest hold of this run (several session timeouts, from the seed).
    max_hold: Duration,
    /// When the quiet tail begins: no fault from then on (the liveness check needs it).
    quiet_from: u64,
    /// Whose each session is, by (node path, session id): its description, the worker's
    /// process name (empty for the controller's), as the server was told.
    owners: Owners,
    /// Held while a fault is in place, so that faults (the operator's partition too) come
    /// one at a time.
    fault_lock: tokio::sync::Mutex<()>,
}

/// Runs the soak; the exit code is 0 on a passing verdict, 1 on a violation, 2 when the run
/// could not be made.
pub(crate) fn main(args: RunArgs) -> u8 {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("soak: no runtime: {e}");
            return 2;
        }
    };
    // Past its duration a run needs its closing, the server's session timeout and the
    // check: this bound is far above that, so that nothing keeps the command from ending.
    let bound = args.duration + args.session_timeout * 10 + Duration::from_secs(120);
    match runtime.block_on(async { tokio::time::timeout(bound, run(args)).await }) {
        Ok(Ok(Verdict::Pass)) => 0,
        Ok(Ok(Verdict::Fail)) => 1,
        Ok(Ok(Verdict::Void)) => 2,
        Ok(Err(e)) => {
            eprintln!("soak: the run could not be made: {e}");
            2
        }
        Err(_) => {
            eprintln!("soak: the run did not end within {bound:?}");
            2
        }
    }
}

async fn run(args: RunArgs) -> Result<Verdict, BoxError> {
    let seed = args.seed.unwrap_or_else(|| now() % 1_000_000);
    let dir = match &args.out {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir().join(format!(
            "ydb-coordination-soak-{seed}-{}",
            std::process::id()
        )),
    };
    std::fs::create_dir_all(&dir)?;
    println!(
        "soak: seed {seed}, {} workers, {:?}, histories in {}",
        args.workers,
        args.duration,
        dir.display()
    );
    let rec = Arc::new(Recorder::create(
        &dir.join("controller.jsonl"),
        "controller",
    )?);
    let register_rec = Arc::new(Recorder::create(&dir.join("register.jsonl"), "register")?);

    let external = std::env::var("YDB_CONNECTION_STRING")
        .ok()
        .filter(|s| !s.is_empty());
    let emulated = Nodes::under("/local/soak");
    let server_rec = Arc::new(Recorder::create(&dir.join("server.jsonl"), "server")?);
    let owners: Owners = Arc::default();
    let (emulator, connection) = match &external {
        None => {
            let (log, known) = (server_rec.clone(), owners.clone());
            let mut builder = Emulator::builder().database("/local").observer(
                move |node: &str, change: &NodeChange| {
                    if let NodeChange::SessionStarted {
                        session,
                        description,
                    } = change
                    {
                        known
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .insert((node.to_string(), *session), description.clone());
                    }
                    server_event(&log, node, change);
                },
            );
            for node in emulated.all() {
                builder = builder.node(node);
            }
            let emulator = builder.start().await?;
            let conn = emulator.connection_string();
            (Some(emulator), conn)
        }
        Some(conn) => (None, conn.clone()),
    };
    let client = Client::builder(&connection)
        .credentials(Credentials::from_env()?)
        .build()
        .await?;
    let database = client.database().to_string();
    let (nodes, upstream, tls_domain) = match &emulator {
        Some(e) => (emulated, e.local_addr(), None),
        None => {
            let root = format!("{database}/soak-{seed}-{}", std::process::id());
            let nodes = Nodes::under(&root);
            for node in nodes.all() {
                client.create_node(node, NodeConfig::new()).await?;
            }
            let (addr, host) = endpoint_of(&connection)?;
            let tls = connection.starts_with("grpcs://").then_some(host);
            (nodes, addr, tls)
        }
    };

    let register: register::Shared = Arc::default();
    let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    let register_addr = listener.local_addr()?;
    tokio::spawn(register::serve(listener, register.clone(), register_rec));
    let postgres = if args.resource == Resource::Postgres
        || args.bite == Some(Bite::UnfencedPostgres)
    {
        let started = resource::start().await?;
        if started.is_none() {
            eprintln!(
                "soak: PostgreSQL is not installed (apt-get install postgresql): the fenced writes go to the register alone"
            );
        }
        started
    } else {
        None
    };

    let options = SessionOptions::new().timeout(args.session_timeout);
    let directory = SpaceDirectory::new(&client, &nodes.directory, SPACE, options.clone())?;
    let first = Layout::new(1, ["n1", "n2", "n3"])?;
    tokio::time::timeout(SpaceDirectory::ADMIN_WAIT, directory.init(first.clone()))
        .await
        .map_err(|_| "the directory's layout could not be published in time")??;
    rec.record(
        &rec.event(rec.op(), Kind::Reshard, Phase::Ok)
            .name("init")
            .value(first.epoch())
            .detail(first.to_string()),
    );

    let mut links = Vec::new();
    for _ in 0..args.workers {
        let mut mine = BTreeMap::new();
        for node in nodes.all() {
            mine.insert(
                crate::worker::last_segment(node),
                Link::start(upstream).await?,
            );
        }
        links.push(mine);
    }
    let mut draw = StdRng::seed_from_u64(seed ^ 0x5eed);
    let max_hold = args.session_timeout * draw.random_range(1..=4);
    let clock_slot = faketime_ready(&args).then(|| draw.random_range(0..args.workers));
    let start = now();
    let until = start + nanos(args.duration);
    let run = Arc::new(Run {
        seed,
        dir: dir.clone(),
        rec: rec.clone(),
        emulator,
        external,
        tls_domain,
        database,
        nodes,
        client,
        register,
        register_addr,
        postgres,
        until,
        links,
        clock_slot,
        max_hold,
        quiet_from: until.saturating_sub(nanos(args.session_timeout * 2 + Duration::from_secs(3))),
        owners,
        fault_lock: tokio::sync::Mutex::new(()),
        args,
    });

    let mut slots = Vec::new();
    for index in 0..run.args.workers {
        let mut slot = Slot {
            index,
            incarnation: 0,
            child: None,
            gone: false,
        };
        spawn_worker(&run, &mut slot)?;
        slots.push(slot);
    }

    let admin = run.client.session_manager(&run.nodes.lock, options.clone());
    let operator = tokio::spawn(operator(run.clone(), directory.clone(), options.clone()));
    let faults = inject_faults(&run, &mut slots, &admin).await;
    let reshards = operator.await.unwrap_or(0);

    // The workers stop by themselves at `until`; give them their closing time.
    let closing = run.args.session_timeout * 3 + Duration::from_secs(5);
    wait_for_exit(&run, &mut slots, closing).await;
    // Every closing is bounded: a broken library must not keep the verdict from coming.
    let closing_bound = run.args.session_timeout * 3;
    let _ = tokio::time::timeout(closing_bound, directory.shutdown()).await;
    // A killed worker's sessions end on the server one session timeout after their last
    // contact: only then must nothing be left.
    sleep(run.args.session_timeout + Duration::from_millis(1500)).await;
    let leftovers = describe_leftovers(&run, &admin).await;
    let _ = tokio::time::timeout(closing_bound, admin.shutdown()).await;
    if run.external.is_some() {
        for node in run.nodes.all() {
            let _ = run.client.drop_node(node).await;
        }
    }

    if let Some(config) = &run.postgres {
        let rec = Recorder::create(&dir.join("postgres.jsonl"), "postgres")?;
        resource::read_back(config, &rec).await?;
    }
    let (events, unreadable) = history::load(&dir)?;
    let params = Params {
        ignored: run.args.ignore.clone(),
        ..Params::new(run.args.session_timeout)
    };
    let report = check::check(&events, params);
    print_summary(
        &run,
        &report,
        faults,
        reshards,
        leftovers,
        unreadable,
        nanos_to(now() - start),
    );
    let passed = report.passed();
    let verdict = match (unreadable, passed) {
        (0, true) => Verdict::Pass,
        (0, false) => Verdict::Fail,
        _ => Verdict::Void,
    };
    if verdict == Verdict::Pass && !run.args.keep && run.args.out.is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        println!("histories: {}", dir.display());
    }
    if let Some(emulator) = Arc::into_inner(run).and_then(|r| r.emulator) {
        emulator.shutdown().await;
    }
    Ok(verdict)
}

/// The server's history: one line per change of a node, stamped on the machine's clock as
/// the node makes it (under its lock, before any message it causes leaves).
fn server_event(rec: &Recorder, node: &str, change: &NodeChange) {
    let node = crate::worker::last_segment(node);
    let event = |kind, session: u64| {
        rec.event(rec.op(), kind, Phase::Info)
            .node(&node)
            .session(session)
    };
    let event = match change {
        NodeChange::SessionStarted {
            session,
            description,
        } => event(Kind::ServerSession, *session).detail(description.as_str()),
        NodeChange::Attached { session } => event(Kind::Attach, *session),
        NodeChange::Detached { session } => event(Kind::Detach, *session),
        NodeChange::SessionEnded { session, why } => {
            event(Kind::SessionEnd, *session).detail(match why {
                SessionEnd::Stopped => "stopped",
                SessionEnd::Expired => "expired",
                SessionEnd::Forced => "forced",
                _ => "other",
            })
        }
        NodeChange::Granted {
            semaphore,
            session,
            order_id,
            count,
            limit,
        } => event(Kind::Grant, *session)
            .name(semaphore)
            .value(*order_id)
            .token([*limit, *order_id, *count]),
        NodeChange::Released {
            semaphore,
            session,
            order_id,
            why,
        } => event(Kind::Revoke, *session)
            .name(semaphore)
            .value(*order_id)
            .detail(match why {
                OwnerEnd::Released => "released",
                OwnerEnd::SessionEnded => "session-ended",
                OwnerEnd::Deleted => "deleted",
                _ => "other",
            }),
        NodeChange::Restarted => rec.event(rec.op(), Kind::Restart, Phase::Info).node(&node),
        _ => return,
    };
    rec.record(&event);
}

/// Whether a worker's clock can be made to run at another rate: libfaketime is installed
/// (`apt-get install libfaketime`), and the server is the emulator (a real server's clock is
/// not ours to compare). Without it in CI the run fails; elsewhere it says what to install.
fn faketime_ready(args: &RunArgs) -> bool {
    let installed = std::path::Path::new(LIBFAKETIME).exists();
    if !installed {
        let note = "no libfaketime: every worker's clock runs at the machine's rate (apt-get install libfaketime)";
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            eprintln!("soak: {note}; CI needs it");
            std::process::exit(2);
        }
        eprintln!("soak: {note}");
    }
    installed && args.bite != Some(Bite::SlowClock)
}

/// `LD_PRELOAD` and `FAKETIME` that make a process's clocks run at `rate` from now on.
/// libfaketime starts its clocks at the given time, for `CLOCK_MONOTONIC` too: that is set
/// to the machine's monotonic time now, so that the absolute deadlines the process hands
/// the kernel (a futex's) stay near the real clock.
fn faketime_env(rate: f64) -> [(&'static str, String); 3] {
    let secs = now() / 1_000_000_000;
    [
        ("LD_PRELOAD", LIBFAKETIME.to_string()),
        ("FAKETIME_FMT", "%s".to_string()),
        ("FAKETIME", format!("@{secs} x{rate}")),
    ]
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// Every check passed.
    Pass,
    /// A check failed.
    Fail,
    /// The histories are damaged: no verdict.
    Void,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn nanos_to(n: u64) -> Duration {
    Duration::from_nanos(n)
}

/// The socket address and host of `grpc[s]://host:port/database`.
fn endpoint_of(connection: &str) -> Result<(SocketAddr, String), BoxError> {
    let rest = connection
        .split_once("://")
        .map_or(connection, |(_, rest)| rest);
    let authority = rest.split('/').next().unwrap_or(rest);
    let host = authority
        .rsplit_once(':')
        .map_or(authority, |(h, _)| h)
        .to_string();
    let addr = authority
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| format!("{authority} resolves to no address"))?;
    Ok((addr, host))
}

fn spawn_worker(run: &Run, slot: &mut Slot) -> Result<(), BoxError> {
    let process = slot.process();
    let exe = std::env::current_exe()?;
    let stderr = std::fs::File::create(run.dir.join(format!("{process}.log")))?;
    let mut cmd = Command::new(exe);
    cmd.arg("worker")
        .arg("--process")
        .arg(&process)
        .arg("--history")
        .arg(run.dir.join(format!("{process}.jsonl")))
        .arg("--register")
        .arg(run.register_addr.to_string())
        .arg("--lock-node")
        .arg(&run.nodes.lock)
        .arg("--directory")
        .arg(&run.nodes.directory)
        .arg("--space")
        .arg(SPACE)
        .arg("--session-timeout-ms")
        .arg(run.args.session_timeout.as_millis().to_string())
        .arg("--until")
        .arg(run.until.to_string())
        .arg("--seed")
        .arg(
            (run.seed.wrapping_mul(1000) + slot.index as u64 * 10 + u64::from(slot.incarnation))
                .to_string(),
        );
    for (name, path) in &run.nodes.space {
        cmd.arg("--space-node").arg(format!("{name}={path}"));
    }
    for (node, link) in &run.links[slot.index] {
        let scheme = if run.tls_domain.is_some() {
            "grpcs://"
        } else {
            "grpc://"
        };
        let connection = link
            .connection_string(&run.database)
            .replace("grpc://", scheme);
        cmd.arg("--link").arg(format!("{node}={connection}"));
    }
    cmd.arg("--max-hold-ms")
        .arg(run.max_hold.as_millis().to_string());
    let rate = match run.args.bite {
        Some(Bite::SlowClock) => Some(SLOW_CLOCK),
        _ => (run.clock_slot == Some(slot.index)).then_some(CLOCK_RATE),
    };
    if let Some(rate) = rate {
        cmd.envs(faketime_env(rate));
    }
    if let Some(domain) = &run.tls_domain {
        cmd.arg("--tls-domain").arg(domain);
    }
    if run.args.bite == Some(Bite::KeepWriting) {
        cmd.arg("--keep-writing");
    }
    if let Some(config) = &run.postgres {
        cmd.arg("--postgres").arg(config);
    }
    if run.args.bite == Some(Bite::UnfencedPostgres) {
        cmd.arg("--unfenced");
    }
    if matches!(
        run.args.bite,
        Some(Bite::KeepWriting | Bite::SkipTransition)
    ) {
        cmd.arg("--long-holds");
    }
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()?;
    let clock = rate.map_or(String::new(), |r| format!(", clock rate {r}"));
    run.rec.record(
        &run.rec
            .event(run.rec.op(), Kind::Start, Phase::Info)
            .target(&process)
            .detail(format!("pid {}{clock}", child.id())),
    );
    slot.child = Some(child);
    slot.gone = false;
    Ok(())
}

fn signal(run: &Run, slot: &Slot, sig: Signal, kind: Kind) {
    let Some(pid) = slot.pid() else { return };
    // Stamped before the signal: a stopped process does nothing after this instant.
    let event = run
        .rec
        .event(run.rec.op(), kind, Phase::Info)
        .target(&slot.process());
    let sent = kill(pid, sig);
    run.rec.record(&match sent {
        Ok(()) => event,
        Err(e) => event.detail(format!("not sent: {e}")),
    });
}

/// The worker that most likely holds a lock now: for a long pause, the counter's last reader
/// (its holder, between its read and its write: the pause makes it lose an update) until
/// the register saw a lost update, then every other time; else the running worker that took a fenced lock last and holds it, as
/// the histories tell; else the last accepted writer of a random fenced name, if it still
/// runs; else a random worker.
fn victim(run: &Run, slots: &[Slot], fault: Fault, rng: &mut StdRng) -> usize {
    let (lost, reader) = {
        let register = run
            .register
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let reader = register.last_reader(&register_name(What::Counter, COUNTER));
        (register.lost_updates(), reader)
    };
    let coin = rng.random_bool(0.5);
    if fault == Fault::PauseLong
        && (lost == 0 || coin)
        && let Some(reader) = reader
        && let Some(slot) = slots.iter().find(|s| s.process() == reader && !s.gone)
    {
        return slot.index;
    }
    let alive: Vec<String> = slots
        .iter()
        .filter(|s| !s.gone)
        .map(Slot::process)
        .collect();
    let fenced = |what, _: &str| matches!(what, What::Mutex | What::Election | What::Space);
    if fault == Fault::HolderCut {
        let on_node = |what, _: &str| matches!(what, What::Mutex | What::Election);
        if let Some(holder) = long_holder(run, Some(&alive), on_node)
            .or_else(|| newest_holder(&run.dir, Some(&alive), on_node))
            && let Some(slot) = slots.iter().find(|s| s.process() == holder)
        {
            return slot.index;
        }
    }
    // Most faults go to a holder in the middle of a long hold: one that spans the session
    // timeout, so that the fault can cost it its lease while it works.
    if rng.random_bool(0.7)
        && let Some(holder) = long_holder(run, Some(&alive), fenced)
        && let Some(slot) = slots.iter().find(|s| s.process() == holder)
    {
        return slot.index;
    }
    if let Some(holder) = newest_holder(&run.dir, Some(&alive), fenced)
        && let Some(slot) = slots.iter().find(|s| s.process() == holder)
    {
        return slot.index;
    }
    let mut names: Vec<String> = MUTEX_NAMES
        .iter()
        .map(|n| register_name(What::Mutex, n))
        .chain(SPACE_NAMES.iter().map(|n| register_name(What::Space, n)))
        .chain([register_name(What::Election, LEADER)])
        .collect();
    names.shuffle(rng);
    let register = run
        .register
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for name in names {
        if let Some(writer) = register.last_writer(&name)
            && let Some(slot) = slots.iter().find(|s| s.process() == writer && !s.gone)
        {
            return slot.index;
        }
    }
    rng.random_range(0..slots.len())
}

fn between(rng: &mut StdRng, lo: Duration, hi: Duration) -> Duration {
    let (lo, hi) = (lo.as_millis() as u64, hi.as_millis() as u64);
    Duration::from_millis(rng.random_range(lo..=hi.max(lo)))
}

/// The fault loop: one fault at a time from the seeded schedule, each healed and followed
/// by a health check, until the quiet tail before the end (in which the checker expects
/// every worker to make progress). Returns the number of faults.
async fn inject_faults(run: &Run, slots: &mut [Slot], admin: &SessionManager) -> usize {
    let mut rng = StdRng::seed_from_u64(run.seed);
    let kinds: Vec<Fault> = Fault::ALL
        .into_iter()
        .filter(|f| run.emulator.is_some() || !f.server_side())
        .collect();
    // Every kind once, in a seeded order, then seeded picks.
    let mut first = kinds.clone();
    first.shuffle(&mut rng);
    // The victims depend on what the workers do; their own generator keeps the schedule of
    // kinds and durations the same for a seed.
    let mut picks = StdRng::seed_from_u64(run.seed.rotate_left(17));
    let faults_until = run.quiet_from;
    // The workers' start: give them a moment to open their spaces.
    sleep(Duration::from_secs(2)).await;
    let mut n = 0;
    while now() < faults_until {
        // The holder cut is drawn three times as often as the others: it is the fault the
        // lease deadline exists for.
        let fault = if n < first.len() {
            first[n]
        } else {
            let weighted = kinds.len() + 2;
            kinds
                .get(rng.random_range(0..weighted))
                .copied()
                .unwrap_or(Fault::HolderCut)
        };
        let at = victim(run, slots, fault, &mut picks);
        let op = run.rec.op();
        let mut begin = run
            .rec
            .event(op, Kind::Fault, Phase::Invoke)
            .detail(fault.name());
        if !fault.server_side() {
            begin = begin.target(&slots[at].process());
        }
        let one_at_a_time = run.fault_lock.lock().await;
        run.rec.record(&begin);
        // The controller's own session is no worker's: the expiry fault spares it.
        let own = admin.try_current().map(|s| s.id());
        let mut links = "all".to_string();
        let note = inject(run, &mut slots[at], fault, own, &mut rng, &mut links).await;
        run.rec.record(
            &run.rec
                .event(op, Kind::Fault, Phase::Ok)
                .detail(fault.name())
                .name(&note)
                .node(&links),
        );
        n += 1;
        health(run, slots, admin).await;
        drop(one_at_a_time);
        sleep(between(
            &mut rng,
            Duration::from_millis(200),
            Duration::from_millis(700),
        ))
        .await;
    }
    n
}

/// Injects one fault and heals it; returns a note for the history, and sets `touched` to
/// the links it acted on when not all of the worker's (`directory`, `n2`, ...).
async fn inject(
    run: &Run,
    slot: &mut Slot,
    fault: Fault,
    own: Option<u64>,
    rng: &mut StdRng,
    touched: &mut String,
) -> String {
    let timeout = run.args.session_timeout;
    let links = &run.links[slot.index];
    let all = || links.values();
    match fault {
        Fault::PauseShort | Fault::PauseLong => {
            let long = fault == Fault::PauseLong;
            let pause = if long {
                timeout + between(rng, Duration::from_millis(1500), Duration::from_secs(3))
            } else {
                between(rng, timeout / 5, timeout / 2)
            };
            signal(run, slot, Signal::SIGSTOP, Kind::Stop);
            // A server keeps an attached session while its connection lives, however quiet;
            // a long pause is one the network notices (as a load balancer's idle timeout or
            // a keepalive would): the connections break, the session's timeout runs, and
            // another holder is granted while this one sleeps.
            if long {
                all().for_each(Link::cut);
            }
            sleep(pause).await;
            signal(run, slot, Signal::SIGCONT, Kind::Cont);
            if long {
                format!("paused {pause:?}, connections broken at the stop")
            } else {
                format!("paused {pause:?}")
            }
        }
        Fault::Kill => {
            signal(run, slot, Signal::SIGKILL, Kind::Kill);
            if let Some(mut child) = slot.child.take() {
                let _ = child.wait();
            }
            slot.incarnation += 1;
            match spawn_worker(run, slot) {
                Ok(()) => format!("restarted as {}", slot.process()),
                Err(e) => {
                    slot.gone = true;
                    format!("not restarted: {e}")
                }
            }
        }
        Fault::Blackhole => {
            let d = between(
                rng,
                Duration::from_secs(1),
                timeout + Duration::from_secs(1),
            );
            for link in all() {
                link.refuse_for(d);
                link.cut();
            }
            sleep(d).await;
            format!("for {d:?}")
        }
        Fault::HolderCut => {
            let d = timeout + between(rng, Duration::from_millis(500), Duration::from_secs(2));
            for link in all() {
                link.refuse_for(d);
                link.cut();
            }
            sleep(d).await;
            format!("for {d:?}")
        }
        Fault::LinkBlackhole => {
            // The directory half the time: the membership then lapses while every node is
            // still reached, the case the lock space's gate is for.
            let node = if rng.random_bool(0.5) {
                "directory".to_string()
            } else {
                let nodes: Vec<&String> = links.keys().filter(|n| *n != "directory").collect();
                nodes[rng.random_range(0..nodes.len())].clone()
            };
            let d = between(
                rng,
                Duration::from_secs(1),
                timeout + Duration::from_secs(3),
            );
            if let Some(link) = links.get(&node) {
                link.refuse_for(d);
                link.cut();
            }
            touched.clone_from(&node);
            sleep(d).await;
            format!("{node} for {d:?}")
        }
        Fault::OneWay => {
            let dir = if rng.random_bool(0.5) {
                Dir::Up
            } else {
                Dir::Down
            };
            let one: Option<String> = rng.random_bool(0.5).then(|| {
                let nodes: Vec<&String> = links.keys().collect();
                nodes[rng.random_range(0..nodes.len())].clone()
            });
            let d = between(
                rng,
                Duration::from_secs(1),
                timeout + Duration::from_secs(2),
            );
            let chosen: Vec<&Link> = match &one {
                Some(node) => links.get(node).into_iter().collect(),
                None => all().collect(),
            };
            chosen.iter().for_each(|l| l.stall(dir));
            if let Some(node) = &one {
                touched.clone_from(node);
            }
            sleep(d).await;
            chosen.iter().for_each(|l| l.heal());
            let which = one.as_deref().unwrap_or("every link");
            format!("{} on {which} for {d:?}", dir.name())
        }
        Fault::Stall => {
            let d = between(
                rng,
                Duration::from_secs(1),
                timeout + Duration::from_secs(2),
            );
            all().for_each(|l| l.stall(Dir::Both));
            sleep(d).await;
            all().for_each(Link::heal);
            format!("for {d:?}")
        }
        Fault::Reset => {
            all().for_each(Link::cut);
            "once".to_string()
        }
        Fault::Delay => {
            let delay = between(rng, Duration::from_millis(50), Duration::from_millis(400));
            let d = between(rng, Duration::from_secs(1), Duration::from_secs(3));
            all().for_each(|l| l.delay(Dir::Both, delay));
            sleep(d).await;
            all().for_each(Link::heal);
            format!("{delay:?} for {d:?}")
        }
        Fault::TabletRestart => {
            if let Some(e) = &run.emulator {
                e.restart();
            }
            "every node".to_string()
        }
        Fault::ExpireSession => {
            let Some(e) = &run.emulator else {
                return "no emulator".to_string();
            };
            // A session of the lock node, of a space node or of the directory (a member's:
            // its membership ends), at random.
            let nodes: Vec<&str> = [run.nodes.lock.as_str(), run.nodes.directory.as_str()]
                .into_iter()
                .chain(run.nodes.space.iter().map(|(_, p)| p.as_str()))
                .collect();
            let node = nodes[rng.random_range(0..nodes.len())];
            let mut ids = e.session_ids(node);
            {
                let owners = run
                    .owners
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                // A worker's session: the controller's own (the operator's on the
                // directory, the describer's on the lock node) are spared.
                ids.retain(|id| {
                    Some(*id) != own
                        && owners
                            .get(&(node.to_string(), *id))
                            .is_some_and(|d| d.starts_with('w'))
                });
            }
            if ids.is_empty() {
                return format!("no session on {node}");
            }
            let id = ids[rng.random_range(0..ids.len())];
            // Stamped before the expiry: the session's leases end no later than this.
            run.rec.record(
                &run.rec
                    .event(run.rec.op(), Kind::Expire, Phase::Info)
                    .name(&crate::worker::last_segment(node))
                    .value(id),
            );
            e.expire_session(node, id);
            format!("session {id} on {node}")
        }
    }
}

/// After a fault: every worker still runs (a worker that died is noted and replaced) and
/// the server answers.
async fn health(run: &Run, slots: &mut [Slot], admin: &SessionManager) {
    for slot in slots.iter_mut() {
        let exited = slot
            .child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten());
        if let Some(status) = exited {
            run.rec.record(
                &run.rec
                    .event(run.rec.op(), Kind::Health, Phase::Fail)
                    .target(&slot.process())
                    .detail(format!("the worker exited early: {status}")),
            );
            slot.child = None;
            slot.incarnation += 1;
            if spawn_worker(run, slot).is_err() {
                slot.gone = true;
            }
        }
    }
    let bound = run.args.session_timeout * 3;
    let ask = async {
        // A session that ended under a fault is replaced by the manager: ask again.
        let mut attempts = 0;
        loop {
            attempts += 1;
            let session = admin.current().await?;
            match session
                .describe_semaphore(POOL, DescribeOptions::new())
                .await
            {
                Ok(_) => return Ok(()),
                Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
                Err(e) if e.kind() == ErrorKind::SessionExpired && attempts < 3 => {}
                Err(e) => return Err(e),
            }
        }
    };
    let event = |phase| run.rec.event(run.rec.op(), Kind::Health, phase);
    match tokio::time::timeout(bound, ask).await {
        Ok(Ok(())) => run.rec.record(&event(Phase::Ok)),
        Ok(Err(e)) => run.rec.record(&event(Phase::Fail).detail(e.to_string())),
        Err(_) => run
            .rec
            .record(&event(Phase::Fail).detail(format!("the server did not answer in {bound:?}"))),
    }
}

/// Reshards the lock space four times while the workers run: adds `n4` at a fifth of the
/// run, removes `n1` at two fifths, adds it back at three fifths and removes `n4` at three
/// quarters (each in two steps). Returns the steps published.
async fn operator(run: Arc<Run>, directory: SpaceDirectory, options: SessionOptions) -> usize {
    let duration = nanos(run.args.duration);
    let start = run.until - duration;
    // A partition at every step: the directory alone at least twice, the others in a
    // seeded order.
    let mut cuts = [
        Cut::Directory,
        Cut::Stall,
        Cut::Node,
        Cut::Directory,
        Cut::Stall,
        Cut::Node,
        Cut::Directory,
        Cut::Node,
    ];
    cuts.shuffle(&mut StdRng::seed_from_u64(run.seed.rotate_left(29)));
    let changes = [
        (20, Change::Add("n4")),
        (40, Change::Remove("n1")),
        (60, Change::Add("n1")),
        (75, Change::Remove("n4")),
    ];
    let mut steps = 0;
    for (i, (at, change)) in changes.into_iter().enumerate() {
        let when = start + duration / 100 * at;
        sleep(nanos_to(when.saturating_sub(now()))).await;
        if now() >= run.quiet_from {
            break;
        }
        steps += if run.args.bite == Some(Bite::SkipTransition) {
            skip_transition(&run, &directory, &options, change).await
        } else {
            reshard(&run, &directory, change, [cuts[2 * i], cuts[2 * i + 1]]).await
        };
    }
    steps
}

/// Publishes `layout` as a step in the history.
fn published(run: &Run, op: u64, layout: &Layout) {
    let kind = if layout.is_transition() {
        "transition"
    } else {
        "stable"
    };
    run.rec.record(
        &run.rec
            .event(op, Kind::Reshard, Phase::Ok)
            .name(kind)
            .value(layout.epoch())
            .detail(layout.to_string()),
    );
}

/// A reshard of the lock space.
#[derive(Debug, Clone, Copy)]
enum Change {
    Add(&'static str),
    Remove(&'static str),
}

impl Change {
    /// The transition from `current` that makes the change.
    fn transition(self, current: &Layout) -> ydb_coordination::Result<Layout> {
        match self {
            Change::Add(node) => current.add_node(node),
            Change::Remove(node) => current.remove_node(node),
        }
    }
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Change::Add(node) => write!(f, "add {node}"),
            Change::Remove(node) => write!(f, "remove {node}"),
        }
    }
}

/// The names of the space that `change` moves to another node.
async fn moving_names(directory: &SpaceDirectory, change: Change) -> Vec<&'static str> {
    let Ok(current) = directory.layout().await else {
        return Vec::new();
    };
    let Ok(next) = change.transition(&current).and_then(|l| l.finish()) else {
        return Vec::new();
    };
    SPACE_NAMES
        .into_iter()
        .filter(|name| {
            let from = current.parts(name).first().map(|p| p.node.clone());
            let to = next.parts(name).first().map(|p| p.node.clone());
            from != to
        })
        .collect()
}

/// Among the `alive` processes, the one that took a `wanted` lock last and holds it still,
/// as the workers' histories tell so far.
fn newest_holder(
    dir: &std::path::Path,
    alive: Option<&[String]>,
    wanted: impl Fn(What, &str) -> bool,
) -> Option<String> {
    let (events, _) = history::load(dir).ok()?;
    let mut open: std::collections::HashMap<(String, u64), u64> = Default::default();
    for e in &events {
        match (e.kind, e.phase, e.what, e.name.as_deref()) {
            (Kind::Acquire, Phase::Ok, Some(what), Some(name))
                if wanted(what, name) && alive.is_none_or(|a| a.contains(&e.process)) =>
            {
                open.insert((e.process.clone(), e.op), e.ts);
            }
            (Kind::Release, Phase::Invoke, _, _) | (Kind::Fired, _, _, _) => {
                if let Some(lease) = e.lease {
                    open.remove(&(e.process.clone(), lease));
                }
            }
            _ => {}
        }
    }
    open.into_iter()
        .max_by_key(|(_, ts)| *ts)
        .map(|((process, _), _)| process)
}

/// Among the `alive` processes, one in the middle of a long hold of a `wanted` lock (a
/// planned hold of at least a session timeout, begun half a second ago or more and with a
/// second or more to go), the one whose hold has the longest to go.
fn long_holder(
    run: &Run,
    alive: Option<&[String]>,
    wanted: impl Fn(What, &str) -> bool,
) -> Option<String> {
    let (events, _) = history::load(&run.dir).ok()?;
    let at = now();
    let timeout = nanos(run.args.session_timeout);
    let mut open: std::collections::HashMap<(String, u64), u64> = Default::default();
    for e in &events {
        match (e.kind, e.phase, e.what, e.name.as_deref(), e.value) {
            (Kind::Acquire, Phase::Ok, Some(what), Some(name), Some(hold_ms))
                if wanted(what, name) && alive.is_none_or(|a| a.contains(&e.process)) =>
            {
                let hold = hold_ms.saturating_mul(1_000_000);
                let middle = e.ts + 500_000_000 <= at && at + 1_000_000_000 <= e.ts + hold;
                if hold >= timeout && middle {
                    open.insert((e.process.clone(), e.op), e.ts + hold);
                }
            }
            (Kind::Release, Phase::Invoke, ..) | (Kind::Fired | Kind::Token, ..) => {
                if let Some(lease) = e.lease {
                    open.remove(&(e.process.clone(), lease));
                }
            }
            _ => {}
        }
    }
    open.into_iter()
        .max_by_key(|(_, end)| *end)
        .map(|((process, _), _)| process)
}

/// The worker slot of a process name `w{slot}.{incarnation}`.
fn slot_of(process: &str) -> Option<usize> {
    process.strip_prefix('w')?.split('.').next()?.parse().ok()
}

/// How a reshard step is partitioned from a holder of a moving name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cut {
    /// Every link of the holder stalls (connections stay open).
    Stall,
    /// The holder's link to the directory alone is blackholed: its membership lapses while
    /// it still reaches every node.
    Directory,
    /// The holder's link to the name's old node alone is blackholed.
    Node,
}

impl Cut {
    fn name(self) -> &'static str {
        match self {
            Cut::Stall => "stall-during-reshard",
            Cut::Directory => "directory-partition-during-reshard",
            Cut::Node => "node-partition-during-reshard",
        }
    }
}

/// A reshard step, published while a holder of a moving name (its last writer if none
/// holds one) is cut off by `cut` for a session timeout and more: the holder keeps its
/// lock on the old node and sees no new layout until the cut ends or its lease expires,
/// the case the two-step reshard and the membership are made for. With `first_cut` the
/// step waits for the cut; else it is tried at once and the cut comes when the faults
/// before it are healed.
async fn under_partition<T>(
    run: &Arc<Run>,
    directory: &SpaceDirectory,
    change: Change,
    cut: Cut,
    first_cut: bool,
    step: impl Future<Output = T>,
) -> T {
    let names = moving_names(directory, change).await;
    // A moving name is held about half the time: wait a little for a holder, one in the
    // middle of a long hold if there is one (it holds on through the step).
    let mut holder = None;
    for _ in 0..HOLDER_POLLS {
        let moving = |what, name: &str| what == What::Space && names.contains(&name);
        holder = long_holder(run, None, moving).or_else(|| newest_holder(&run.dir, None, moving));
        if holder.is_some() {
            break;
        }
        sleep(Duration::from_millis(100)).await;
    }
    let writer = holder.or_else(|| {
        let register = run
            .register
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        names
            .iter()
            .find_map(|n| register.last_writer(&register_name(What::Space, n)))
    });
    let Some((writer, slot)) = writer.and_then(|w| slot_of(&w).map(|s| (w, s))) else {
        return step.await;
    };
    let Some(links) = run.links.get(slot) else {
        return step.await;
    };
    // The old node of the first moving name (where its holder holds it now).
    let old = match directory.layout().await {
        Ok(layout) => names
            .first()
            .and_then(|n| layout.parts(n).first().map(|p| p.node.clone())),
        Err(_) => None,
    };
    let chosen: Vec<String> = links
        .keys()
        .filter(|node| match cut {
            Cut::Stall => true,
            Cut::Directory => node.as_str() == "directory",
            Cut::Node => old.as_deref() == Some(node.as_str()),
        })
        .cloned()
        .collect();
    // The cut is a fault like the others, one at a time with them; it lasts long enough
    // for the holder's lease (or membership) to lapse, however long the step takes (it
    // waits for members that lag), and the operator goes on as soon as the step is
    // published.
    let (applied, on_applied) = tokio::sync::oneshot::channel();
    let hold = run.args.session_timeout + Duration::from_secs(1);
    let run = run.clone();
    tokio::spawn(async move {
        let _one_at_a_time = run.fault_lock.lock().await;
        let Some(links) = run.links.get(slot) else {
            return;
        };
        let op = run.rec.op();
        run.rec.record(
            &run.rec
                .event(op, Kind::Fault, Phase::Invoke)
                .detail(cut.name())
                .target(&writer),
        );
        for link in chosen.iter().filter_map(|n| links.get(n)) {
            match cut {
                Cut::Stall => link.stall(Dir::Both),
                Cut::Directory | Cut::Node => {
                    link.refuse_for(hold);
                    link.cut();
                }
            }
        }
        let _ = applied.send(());
        sleep(hold).await;
        chosen
            .iter()
            .filter_map(|n| links.get(n))
            .for_each(Link::heal);
        run.rec.record(
            &run.rec
                .event(op, Kind::Fault, Phase::Ok)
                .detail(cut.name())
                .node(&chosen.join("+"))
                .name(&format!(
                    "{change}, holder of {} cut from {}",
                    names.join(","),
                    chosen.join("+")
                )),
        );
    });
    if first_cut {
        let _ = on_applied.await;
    }
    step.await
}

/// The two steps of a reshard, each retried while members still run an older layout, each
/// under a partition of a holder (`cuts`, one per step).
async fn reshard(
    run: &Arc<Run>,
    directory: &SpaceDirectory,
    change: Change,
    cuts: [Cut; 2],
) -> usize {
    let mut steps = 0;
    for (step, cut) in ["begin", "finish"].into_iter().zip(cuts) {
        let op = run.rec.op();
        run.rec.record(
            &run.rec
                .event(op, Kind::Reshard, Phase::Invoke)
                .detail(format!("{step} {change}")),
        );
        // Members paused or cut off hold a step back until they catch up or their
        // membership expires: a few session timeouts.
        // (never past the workers' end: a step then has no fleet left to wait for).
        let deadline =
            (now() + nanos(run.args.session_timeout * 10 + Duration::from_secs(10))).min(run.until);
        let attempts = async {
            loop {
                let attempt = async {
                    match (step, change) {
                        ("begin", Change::Add(node)) => directory.begin_add(node).await,
                        ("begin", Change::Remove(node)) => directory.begin_remove(node).await,
                        _ => directory.finish().await,
                    }
                };
                let bound = SpaceDirectory::ADMIN_WAIT + Duration::from_secs(5);
                match tokio::time::timeout(bound, attempt).await {
                    Ok(Ok(layout)) => {
                        published(run, op, &layout);
                        break Ok(layout);
                    }
                    Ok(Err(e)) if e.kind() == ErrorKind::PreconditionFailed && now() < deadline => {
                        sleep(Duration::from_millis(200)).await;
                    }
                    Ok(Err(e)) => break Err(e.to_string()),
                    Err(_) => break Err(format!("no answer in {bound:?}")),
                }
            }
        };
        // The fleet learns of the last step late: every worker's directory link is slow
        // while it is published, so that locks are taken in the transition after the next
        // layout was published (their tokens must follow the new layout's rule). No fault
        // in the quiet tail of the run.
        let result = if now() >= run.quiet_from {
            attempts.await
        } else {
            // Slow until a while after the step is published (it may wait long for
            // members that lag), and never into the quiet tail.
            let (published, heal) = tokio::sync::oneshot::channel::<()>();
            let slow = run.clone();
            tokio::spawn(async move {
                let op = slow_directories(&slow);
                let tail = sleep(nanos_to(slow.quiet_from.saturating_sub(now())));
                tokio::pin!(tail);
                tokio::select! {
                    _ = &mut tail => {}
                    _ = heal => {
                        let after = slow.args.session_timeout + Duration::from_secs(1);
                        tokio::select! {
                            _ = &mut tail => {}
                            _ = sleep(after) => {}
                        }
                    }
                }
                heal_directories(&slow, op);
            });
            let result =
                under_partition(run, directory, change, cut, step == "begin", attempts).await;
            let _ = published.send(());
            result
        };
        match result {
            Ok(_) => steps += 1,
            Err(e) => {
                run.rec.record(
                    &run.rec
                        .event(op, Kind::Reshard, Phase::Fail)
                        .detail(format!("{step} {change}: {e}")),
                );
                return steps;
            }
        }
    }
    steps
}

/// How slow every worker's directory link is while a reshard step is published.
const SLOW_DIRECTORY: Duration = Duration::from_millis(800);

/// Slows every worker's directory link (a fault of every process, in the history): the
/// fleet learns of a step late, so that locks are taken in a transition after the next
/// layout was published (their tokens must follow the new layout's rule). Returns the
/// fault's op for [`heal_directories`].
fn slow_directories(run: &Arc<Run>) -> u64 {
    let op = run.rec.op();
    run.rec.record(
        &run.rec
            .event(op, Kind::Fault, Phase::Invoke)
            .detail("directory-delay-during-reshard"),
    );
    for links in &run.links {
        if let Some(link) = links.get("directory") {
            link.delay(Dir::Both, SLOW_DIRECTORY);
        }
    }
    op
}

fn heal_directories(run: &Run, op: u64) {
    for links in &run.links {
        if let Some(link) = links.get("directory") {
            link.heal();
        }
    }
    run.rec.record(
        &run.rec
            .event(op, Kind::Fault, Phase::Ok)
            .detail("directory-delay-during-reshard")
            .name(&format!("{SLOW_DIRECTORY:?} each way"))
            .node("directory"),
    );
}

/// The broken operator: publishes the new stable layout straight over the old one, with
/// neither the transition nor the wait for the members.
async fn skip_transition(
    run: &Arc<Run>,
    directory: &SpaceDirectory,
    options: &SessionOptions,
    change: Change,
) -> usize {
    let op = run.rec.op();
    run.rec.record(
        &run.rec
            .event(op, Kind::Reshard, Phase::Invoke)
            .detail(format!("publish {change} at once")),
    );
    let attempt = async {
        let current = directory.layout().await?;
        let next = change.transition(&current)?.finish()?;
        // One epoch on instead of two: the stable layout in the transition's place.
        let next = Layout::new(current.epoch() + 1, next.nodes())?;
        let manager = run
            .client
            .session_manager(&run.nodes.directory, options.clone());
        let result = manager
            .published(&format!("{SPACE}/layout"))
            .publish(&next.to_bytes())
            .await;
        manager.shutdown().await;
        if result.is_ok() {
            published(run, op, &next);
        }
        result.map(|()| next)
    };
    let attempt = under_partition(run, directory, change, Cut::Stall, true, attempt);
    match tokio::time::timeout(run.args.session_timeout * 5, attempt).await {
        Ok(Ok(_)) => 1,
        Ok(Err(e)) => {
            run.rec.record(
                &run.rec
                    .event(op, Kind::Reshard, Phase::Fail)
                    .detail(e.to_string()),
            );
            0
        }
        Err(_) => 0,
    }
}

/// Waits for every worker to exit by itself, then kills what is left (noted in the
/// history: its tenures end there).
async fn wait_for_exit(run: &Run, slots: &mut [Slot], closing: Duration) {
    let deadline = run.until + nanos(closing);
    loop {
        let running = slots.iter_mut().any(|s| {
            s.child
                .as_mut()
                .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
        });
        if !running || now() >= deadline {
            break;
        }
        sleep(Duration::from_millis(100)).await;
    }
    for slot in slots.iter_mut() {
        let still = slot
            .child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)));
        if still {
            signal(run, slot, Signal::SIGKILL, Kind::Kill);
            run.rec.record(
                &run.rec
                    .event(run.rec.op(), Kind::Health, Phase::Fail)
                    .target(&slot.process())
                    .detail("did not exit by its deadline"),
            );
        }
        if let Some(mut child) = slot.child.take() {
            let _ = child.wait();
        }
    }
}

/// Describes every semaphore of every node after the workers are gone: any owner or waiter
/// is a leftover. Returns the number of semaphores described.
async fn describe_leftovers(run: &Run, admin: &SessionManager) -> usize {
    let mut described = 0;
    for node in run.nodes.all() {
        let names = match &run.emulator {
            Some(e) => e.semaphore_names(node),
            None => known_names(run, node),
        };
        if names.is_empty() {
            continue;
        }
        let manager;
        let source = if node == run.nodes.lock {
            admin
        } else {
            manager = run.client.session_manager(node, SessionOptions::new());
            &manager
        };
        let Ok(Ok(session)) =
            tokio::time::timeout(run.args.session_timeout * 3, source.current()).await
        else {
            run.rec.record(
                &run.rec
                    .event(run.rec.op(), Kind::Leftover, Phase::Info)
                    .name(node)
                    .detail("no session to describe the node"),
            );
            continue;
        };
        for name in names {
            let options = DescribeOptions::new().owners(true).waiters(true);
            let Ok(Ok(d)) = tokio::time::timeout(
                Duration::from_secs(5),
                session.describe_semaphore(&name, options),
            )
            .await
            else {
                continue;
            };
            described += 1;
            for (role, list) in [("owner", &d.owners), ("waiter", &d.waiters)] {
                for s in list {
                    run.rec.record(
                        &run.rec
                            .event(run.rec.op(), Kind::Leftover, Phase::Info)
                            .name(&format!("{node}:{name}"))
                            .target(&format!("session {}", s.session_id))
                            .detail(role),
                    );
                }
            }
        }
        if node != run.nodes.lock {
            let _ = tokio::time::timeout(run.args.session_timeout * 3, source.shutdown()).await;
        }
    }
    described
}

/// The semaphore names the soak uses on `node` (a real server cannot list them).
fn known_names(run: &Run, node: &str) -> Vec<String> {
    if node == run.nodes.lock {
        let mut names: Vec<String> = MUTEX_NAMES.iter().map(|s| s.to_string()).collect();
        names.extend([COUNTER, POOL, LEADER].map(String::from));
        names
    } else if node == run.nodes.directory {
        Vec::new()
    } else {
        SPACE_NAMES.iter().map(|s| s.to_string()).collect()
    }
}

/// `a 1, b 2`: counts by what, for the summary.
fn listed<'a, K: std::fmt::Display>(counts: impl Iterator<Item = (K, &'a usize)>) -> String {
    let parts: Vec<String> = counts.map(|(what, n)| format!("{what} {n}")).collect();
    parts.join(", ")
}

fn print_summary(
    run: &Run,
    report: &Report,
    faults: usize,
    reshards: usize,
    described: usize,
    unreadable: usize,
    took: Duration,
) {
    let mode = if run.external.is_some() {
        "the server of YDB_CONNECTION_STRING (client-side faults only)"
    } else {
        "the emulator"
    };
    println!("---- soak summary (seed {}) ----", run.seed);
    println!(
        "server: {mode}; network faults through a TCP relay per worker and node (no network namespaces)"
    );
    if let Some(slot) = run.clock_slot {
        println!("clock: w{slot}.* runs its clock at {CLOCK_RATE} of the machine's");
    }
    if run.args.bite == Some(Bite::SlowClock) {
        println!("clock: every worker runs its clock at {SLOW_CLOCK} of the machine's");
    }
    println!("longest hold: {:?}", run.max_hold);
    if let Some(bite) = run.args.bite {
        println!("bite mode: {bite:?} (the verdict must fail)");
    }
    println!(
        "took: {:.1}s (workers ran {:?})",
        took.as_secs_f64(),
        run.args.duration
    );
    println!(
        "processes: {} (controller, register, worker incarnations)",
        report.processes
    );
    println!("operations invoked by workers: {}", report.operations);
    let grants = report.grants.iter().map(|(w, n)| (format!("{w:?}"), n));
    println!("grants: {}", listed(grants));
    let total: usize = report.faults.values().sum();
    println!("faults: {total} ({faults} from the schedule, the rest the operator's)");
    for (kind, n) in &report.faults {
        println!("  {kind}: {n}");
    }
    println!(
        "register writes: {} accepted, {} refused",
        report.writes_accepted, report.writes_refused
    );
    println!(
        "unfenced counter: {} lost updates (what fencing prevents; reported, not a violation)",
        report.lost_updates
    );
    match (&run.postgres, run.args.bite) {
        (None, _) => println!("resource: the register alone"),
        (Some(_), Some(Bite::UnfencedPostgres)) => {
            println!("resource: PostgreSQL beside the register, written WITHOUT the fence's check")
        }
        (Some(_), _) => {
            println!("resource: PostgreSQL beside the register, fenced by its adapter");
        }
    }
    if run.postgres.is_some() {
        let counts = report.resource;
        println!(
            "PostgreSQL writes: {} accepted (its history table), {} refused as stale, {} unknown",
            counts.accepted, counts.refused, counts.unknown
        );
    }
    println!(
        "reshard steps published: {reshards} (history: {})",
        report.reshard_steps
    );
    println!("semaphores described at the end: {described}");
    println!("server history: {}", listed(report.server.iter()));
    if unreadable > 0 {
        println!("history lines damaged or lost: {unreadable}");
    }
    println!("violations by check:");
    for check in CHECKS {
        let ignored = if report.ignored.contains(&check) {
            " (ignored)"
        } else {
            ""
        };
        println!("  {check}: {}{ignored}", report.count(check));
    }
    for v in report.violations.iter().take(20) {
        println!("  [{}] {}", v.check, v.message);
    }
    if report.violations.len() > 20 {
        println!("  ... {} more", report.violations.len() - 20);
    }
    println!(
        "verdict: {} (replay with --seed {})",
        match (unreadable, report.passed()) {
            (0, true) => "PASS",
            (0, false) => "FAIL",
            _ => "VOID: the histories lost lines (a write failed: a full disk?)",
        },
        run.seed
    );
}
