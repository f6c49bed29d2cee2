//! Row 5: memory per held lease and per idle session, from RSS.
//!
//! The crate forbids `unsafe` (`[lints.rust] unsafe_code = "forbid"`, which covers benches),
//! and a counting `#[global_allocator]` needs `unsafe impl GlobalAlloc`, so memory is read
//! from `VmRSS` in `/proc/<pid>/status`. To keep the numbers clean, every measurement runs in
//! fresh processes: this bench binary re-executes itself once as an emulator server and once
//! as the client under test, so the client's heap holds nothing but the client, the server's
//! heap nothing but the emulator, and neither reuses memory freed by an earlier row. The
//! client reads both processes' RSS before and after creating the items; the report gives the
//! client's part (the library under test) and the emulator's part separately.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

use futures::StreamExt;
use ydb_coordination::emulator::Emulator;
use ydb_coordination::space::{Layout, LockSpace};
use ydb_coordination::{AcquireOptions, Client, SessionOptions};

use std::sync::atomic::AtomicU64;

use super::{R, within, ydb_acquire, ydb_client, ydb_session_options};

/// Set in a child process to its role.
pub(crate) const ROLE_VAR: &str = "COMPARE_ROLE";
pub(crate) const ADDR_VAR: &str = "COMPARE_CONNECTION";
const SERVER_PID_VAR: &str = "COMPARE_SERVER_PID";
const KIND_VAR: &str = "COMPARE_KIND";
/// Set for session kinds: how long (ms) to idle after creating them, measuring CPU time.
const IDLE_VAR: &str = "COMPARE_IDLE_MS";
pub(crate) const N_VAR: &str = "COMPARE_N";
/// Set (and inherited by the server children): a server child that never answers, to check
/// that its row fails within [`ANSWER_LIMIT`] instead of hanging the run.
const SILENT_VAR: &str = "COMPARE_SILENT_SERVER";
pub(crate) const NODE: &str = "/local/mem";
/// The lock space's node and its directory (row 5's held space locks).
const SPACE_NODE: &str = "/local/mem-space";
const SPACE_DIRECTORY: &str = "/local/mem-directory";

/// Which library and what to create.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    OursLeases,
    YdbLeases,
    OursSessions,
    YdbSessions,
    /// Mutex locks held in a lock space of one node (each a lease on that node's session,
    /// and the space's own record of the lock).
    OursSpaceLocks,
}

impl Kind {
    const ALL: [Kind; 5] = [
        Kind::OursLeases,
        Kind::YdbLeases,
        Kind::OursSessions,
        Kind::YdbSessions,
        Kind::OursSpaceLocks,
    ];

    fn name(self) -> &'static str {
        match self {
            Kind::OursLeases => "ours-leases",
            Kind::YdbLeases => "ydb-leases",
            Kind::OursSessions => "ours-sessions",
            Kind::YdbSessions => "ydb-sessions",
            Kind::OursSpaceLocks => "ours-space-locks",
        }
    }

    fn parse(s: &str) -> R<Self> {
        Self::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| format!("unknown memory kind {s:?}").into())
    }
}

/// Bytes per item, client side and emulator side.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PerItem {
    pub(crate) client: f64,
    pub(crate) server: f64,
    pub(crate) n: usize,
    /// Sessions only, when asked for: the client's CPU time per second while they idle
    /// (keepalives), and per session and second.
    pub(crate) idle_cpu: Option<IdleCpu>,
}

/// The CPU time idle sessions cost the client process (their keepalives).
#[derive(Debug, Clone, Copy)]
pub(crate) struct IdleCpu {
    /// CPU time per second of wall time, all sessions.
    pub(crate) per_second: Duration,
    /// The same per session.
    pub(crate) per_session_second: Duration,
}

/// Row 5's results.
#[derive(Debug)]
pub(crate) struct Memory {
    pub(crate) ours_lease: R<PerItem>,
    pub(crate) ydb_lease: R<PerItem>,
    pub(crate) ours_session: R<PerItem>,
    pub(crate) ydb_session: R<PerItem>,
    pub(crate) ours_space_lock: R<PerItem>,
}

/// Runs the five measurements, each in a fresh server and client process.
pub(crate) fn measure(leases: usize, sessions: usize) -> Memory {
    Memory {
        ours_lease: measure_one(Kind::OursLeases, leases, None),
        ydb_lease: measure_one(Kind::YdbLeases, leases, None),
        ours_session: measure_one(Kind::OursSessions, sessions, None),
        ydb_session: measure_one(Kind::YdbSessions, sessions, None),
        ours_space_lock: measure_one(Kind::OursSpaceLocks, leases, None),
    }
}

/// Kills a child process when dropped (only the children this bench started).
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        drop(self.0.stdin.take());
        // The server exits on stdin EOF; give it a moment, then kill it by its id.
        for _ in 0..50 {
            if matches!(self.0.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// How long a child process may take before it is killed and its row reported as failed.
const CHILD_LIMIT: Duration = Duration::from_secs(180);

/// How long a server child may take to answer (its address once started, its CPU time when
/// asked) before its row is reported as failed. It answers at once when it works: the bound
/// is only there so that one that never answers cannot hang the run.
const ANSWER_LIMIT: Duration = Duration::from_secs(30);

/// The lines a child writes to its stdout, read on a thread of their own so that waiting for
/// one has a deadline. The thread ends when the child's stdout closes (it exits or is
/// killed), or once nobody takes the lines any more.
struct Lines(mpsc::Receiver<std::io::Result<String>>);

impl Lines {
    fn new(out: ChildStdout) -> R<Self> {
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("server-child-stdout".into())
            .spawn(move || {
                for line in BufReader::new(out).lines() {
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            })?;
        Ok(Self(rx))
    }

    /// The next line, within [`ANSWER_LIMIT`]; `what` names the answer awaited.
    fn next(&self, what: &str) -> R<String> {
        match self.0.recv_timeout(ANSWER_LIMIT) {
            Ok(line) => Ok(line?),
            Err(RecvTimeoutError::Timeout) => {
                Err(format!("the server child gave no {what} within {ANSWER_LIMIT:?}").into())
            }
            Err(RecvTimeoutError::Disconnected) => {
                Err(format!("the server child closed its output before giving its {what}").into())
            }
        }
    }
}

/// An emulator in a fresh child process of this binary.
pub(crate) struct ServerChild {
    child: Reaped,
    lines: Lines,
    /// Its connection string.
    pub(crate) connection: String,
}

impl ServerChild {
    pub(crate) fn start() -> R<Self> {
        let exe = std::env::current_exe()?;
        let mut child = Reaped(
            Command::new(&exe)
                .env(ROLE_VAR, "server")
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()?,
        );
        let stdout = child.0.stdout.take().ok_or("server child has no stdout")?;
        let lines = Lines::new(stdout)?;
        let line = lines.next("address")?;
        let connection = line
            .trim()
            .strip_prefix("LISTENING ")
            .ok_or_else(|| format!("server child said {line:?}"))?
            .to_string();
        Ok(Self {
            child,
            lines,
            connection,
        })
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.0.id()
    }

    /// The CPU time (user + system) the emulator process has used so far.
    pub(crate) fn cpu(&mut self) -> R<Duration> {
        let stdin = self
            .child
            .0
            .stdin
            .as_mut()
            .ok_or("server child has no stdin")?;
        writeln!(stdin, "cpu")?;
        stdin.flush()?;
        let line = self.lines.next("CPU time")?;
        let nanos: u64 = line
            .trim()
            .strip_prefix("CPU ")
            .ok_or_else(|| format!("server child said {line:?}"))?
            .parse()?;
        Ok(Duration::from_nanos(nanos))
    }
}

/// Runs this binary as a client child with `envs`, for at most [`CHILD_LIMIT`], and returns
/// the numbers on its `RESULT` line.
pub(crate) fn run_client(role: &str, what: &str, envs: &[(&str, String)]) -> R<Vec<f64>> {
    let exe = std::env::current_exe()?;
    let mut command = Command::new(&exe);
    command
        .env(ROLE_VAR, role)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (k, v) in envs {
        command.env(k, v);
    }
    let mut child = Reaped(command.spawn()?);
    let deadline = std::time::Instant::now() + CHILD_LIMIT;
    let status = loop {
        if let Some(status) = child.0.try_wait()? {
            break status;
        }
        if std::time::Instant::now() >= deadline {
            return Err(format!("{what} child did not finish within {CHILD_LIMIT:?}").into());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut text = String::new();
    if let Some(mut out) = child.0.stdout.take() {
        out.read_to_string(&mut text)?;
    }
    let result = text
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .ok_or_else(|| format!("{what} child failed ({status}): {text}"))?;
    result
        .split_whitespace()
        .map(|v| {
            v.parse::<f64>()
                .map_err(|e| format!("bad result {v:?}: {e}").into())
        })
        .collect()
}

/// Creates `n` items of `kind` in a fresh client process against a fresh server process;
/// with `idle`, the sessions then idle that long while the client's CPU time is measured.
pub(crate) fn measure_one(kind: Kind, n: usize, idle: Option<Duration>) -> R<PerItem> {
    let server = ServerChild::start()?;
    let mut envs = vec![
        (ADDR_VAR, server.connection.clone()),
        (SERVER_PID_VAR, server.pid().to_string()),
        (KIND_VAR, kind.name().to_string()),
        (N_VAR, n.to_string()),
    ];
    if let Some(idle) = idle {
        envs.push((IDLE_VAR, idle.as_millis().to_string()));
    }
    let result = run_client("client", kind.name(), &envs);
    drop(server);
    let [client, server, cpu_per_second] = result?[..] else {
        return Err(format!("{} child: expected three numbers", kind.name()).into());
    };
    let idle_cpu = idle.map(|_| {
        let per_second = Duration::from_secs_f64(cpu_per_second.max(0.0));
        IdleCpu {
            per_second,
            per_session_second: per_second / n.max(1) as u32,
        }
    });
    Ok(PerItem {
        client: client / n as f64,
        server: server / n as f64,
        n,
        idle_cpu,
    })
}

/// The entry point of a child process.
pub(crate) fn child(role: &str) -> R<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match role {
        "server" if std::env::var_os(SILENT_VAR).is_some() => {
            // Never answers: the parent must give up on it within its bound.
            for line in std::io::stdin().lines() {
                line?;
            }
            Ok(())
        }
        "server" => {
            let emulator = rt.block_on(
                Emulator::builder()
                    .node(NODE)
                    .node(SPACE_NODE)
                    .node(SPACE_DIRECTORY)
                    .start(),
            )?;
            let mut stdout = std::io::stdout();
            writeln!(stdout, "LISTENING {}", emulator.connection_string())?;
            stdout.flush()?;
            // Serve until the parent closes stdin, telling the CPU time used when asked.
            for line in std::io::stdin().lines() {
                if line?.trim() == "cpu" {
                    writeln!(stdout, "CPU {}", super::cpu::used()?.as_nanos())?;
                    stdout.flush()?;
                }
            }
            drop(emulator);
            Ok(())
        }
        "client" => {
            let connection = std::env::var(ADDR_VAR)?;
            let server_pid: u32 = std::env::var(SERVER_PID_VAR)?.parse()?;
            let kind = Kind::parse(&std::env::var(KIND_VAR)?)?;
            let n: usize = std::env::var(N_VAR)?.parse()?;
            let idle = match std::env::var(IDLE_VAR) {
                Ok(ms) => Some(Duration::from_millis(ms.parse()?)),
                Err(_) => None,
            };
            let (client, server, cpu) =
                rt.block_on(client_run(&connection, server_pid, kind, n, idle))?;
            println!("RESULT {client} {server} {cpu}");
            // Skip tearing down thousands of sessions: the process is done.
            std::process::exit(0);
        }
        super::cpu::ROLE => super::cpu::child(&rt),
        other => Err(format!("unknown role {other:?}").into()),
    }
}

/// Resident set size of a process in bytes, from `/proc/<pid>/status`.
fn rss(pid: &str) -> R<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .ok_or("no VmRSS in /proc status")?;
    Ok(kb * 1024.0)
}

const SETTLE: Duration = Duration::from_millis(300);
const STEP: Duration = Duration::from_secs(30);
const PARALLEL: usize = 64;

/// Creates `n` items of `kind` and returns the RSS growth of (this client, the server), and
/// with `idle` this client's CPU seconds per second while the items then idle that long.
async fn client_run(
    connection: &str,
    server_pid: u32,
    kind: Kind,
    n: usize,
    idle: Option<Duration>,
) -> R<(f64, f64, f64)> {
    let server_pid = server_pid.to_string();
    let before = || -> R<(f64, f64)> { Ok((rss("self")?, rss(&server_pid)?)) };
    let ours_options = SessionOptions::new().timeout(Duration::from_secs(60));
    let (c0, s0, held) = match kind {
        Kind::OursLeases => {
            let client = Client::connect(connection).await?;
            let session = client.session(NODE, ours_options).await?;
            // Warm up: one lease taken and released, so lazy setup is not counted.
            let warm = session
                .acquire("warm", AcquireOptions::exclusive().ephemeral(true))
                .await?;
            warm.release().await?;
            tokio::time::sleep(SETTLE).await;
            let (c0, s0) = before()?;
            let mut leases = Vec::with_capacity(n);
            for i in 0..n {
                leases.push(
                    session
                        .acquire(
                            &format!("lease-{i:05}"),
                            AcquireOptions::exclusive().ephemeral(true),
                        )
                        .await?,
                );
            }
            (c0, s0, Box::new((client, session, leases)) as Box<dyn Send>)
        }
        Kind::OursSpaceLocks => {
            let client = Client::connect(connection).await?;
            let space = LockSpace::builder()
                .node("n1", &client, SPACE_NODE)
                .directory(&client, SPACE_DIRECTORY, "mem")
                .layout(Layout::new(1, ["n1"])?)
                .session_options(ours_options)
                .open()
                .await?;
            // Warm up: one lock taken and released, so the node's session and the space's
            // membership are not counted.
            space.mutex("warm").lock().await?.unlock().await?;
            tokio::time::sleep(SETTLE).await;
            let (c0, s0) = before()?;
            let mut locks = Vec::with_capacity(n);
            for i in 0..n {
                locks.push(space.mutex(&format!("lock-{i:05}")).lock().await?);
            }
            (c0, s0, Box::new((client, space, locks)) as Box<dyn Send>)
        }
        Kind::YdbLeases => {
            let client = ydb_client(connection).await?;
            let session = within(
                "ydb create_session",
                STEP,
                client
                    .coordination_client()
                    .create_session(NODE.to_string(), ydb_session_options()?),
            )
            .await?;
            let options = ydb::AcquireOptionsBuilder::default()
                .ephemeral(true)
                .build()?;
            let warm = ydb_acquire(&session, "warm", &options, &AtomicU64::new(0)).await?;
            drop(warm);
            tokio::time::sleep(SETTLE).await;
            let (c0, s0) = before()?;
            let lost = AtomicU64::new(0);
            let mut leases = Vec::with_capacity(n);
            for i in 0..n {
                leases
                    .push(ydb_acquire(&session, &format!("lease-{i:05}"), &options, &lost).await?);
            }
            (c0, s0, Box::new((client, session, leases)) as Box<dyn Send>)
        }
        Kind::OursSessions => {
            let client = Client::connect(connection).await?;
            let warm = client.session(NODE, ours_options.clone()).await?;
            tokio::time::sleep(SETTLE).await;
            let (c0, s0) = before()?;
            let sessions: Vec<_> = futures::stream::iter(0..n)
                .map(|_| client.session(NODE, ours_options.clone()))
                .buffer_unordered(PARALLEL)
                .collect::<Vec<_>>()
                .await
                .into_iter()
                .collect::<Result<_, _>>()?;
            (c0, s0, Box::new((client, warm, sessions)) as Box<dyn Send>)
        }
        Kind::YdbSessions => {
            let client = ydb_client(connection).await?;
            let warm = within(
                "ydb create_session",
                STEP,
                client
                    .coordination_client()
                    .create_session(NODE.to_string(), ydb_session_options()?),
            )
            .await?;
            tokio::time::sleep(SETTLE).await;
            let (c0, s0) = before()?;
            let options = ydb_session_options()?;
            let sessions: Vec<_> = futures::stream::iter(0..n)
                .map(|_| {
                    let mut coordination = client.coordination_client();
                    let options = options.clone();
                    async move {
                        within(
                            "ydb create_session",
                            STEP,
                            coordination.create_session(NODE.to_string(), options),
                        )
                        .await
                    }
                })
                .buffer_unordered(PARALLEL)
                .collect::<Vec<_>>()
                .await
                .into_iter()
                .collect::<Result<_, _>>()?;
            (c0, s0, Box::new((client, warm, sessions)) as Box<dyn Send>)
        }
    };
    tokio::time::sleep(SETTLE).await;
    let (c1, s1) = before()?;
    let mut cpu_per_second = 0.0;
    if let Some(idle) = idle {
        let (cpu0, t0) = (super::cpu::used()?, std::time::Instant::now());
        tokio::time::sleep(idle).await;
        let cpu = super::cpu::used()? - cpu0;
        cpu_per_second = cpu.as_secs_f64() / t0.elapsed().as_secs_f64();
    }
    // Keep everything alive up to the measurement; the process exits right after.
    std::mem::forget(held);
    Ok((c1 - c0, s1 - s0, cpu_per_second))
}
