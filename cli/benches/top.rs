//! `ydb-coord top` against a growing fleet of announcing sessions; run with
//! `cargo bench -p ydb-coord --bench top`.
//!
//! For each fleet size (default 100, 1,000 and 10,000 sessions, each holding two exclusive
//! locks, so 200 to 20,000 names), against the in-process emulator over loopback TCP with
//! YDB's message limit (64,000,000 bytes): the sessions start and announce, then
//!
//! 1. `top --once --json` runs as a process of its own: its wall time, the bytes and requests
//!    the node answered for it (the emulator's traffic counters), the largest message the
//!    node sent since the fleet started (the announcements' describe grows with the fleet;
//!    gRPC's default limit is 4 MiB), top's peak resident memory (`VmHWM`), and whether the
//!    snapshot was whole;
//! 2. `top --json --interval 1s` (the stream) runs for three snapshots: the time to its first
//!    snapshot and the bytes the node answered per interval after it;
//! 3. the lock cycle of one session (exclusive lock, then unlock, in a loop for 2 s) with
//!    announcements and without, interleaved, in that fleet: the median cycle and the
//!    requests per cycle, side by side, and their ratios.
//!
//! Prints a markdown table to stdout. `TOP_FLEET=50,200` picks the fleet sizes (default 100,
//! 1,000 and 10,000 under `cargo bench`; under `cargo test`, a smoke run of 50, a few seconds
//! in a debug build); every step has a time limit and a step that fails is reported as such,
//! after which the run fails.

use std::error::Error;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use ydb_coordination::emulator::Emulator;
use ydb_coordination::{AcquireOptions, Client, Lease, Session, SessionOptions};

type R<T> = Result<T, Box<dyn Error + Send + Sync>>;

const BIN: &str = env!("CARGO_BIN_EXE_ydb-coord");
const NODE: &str = "/local/app";
/// The fleet's session timeout: long, so that its pings stay a small part of the load.
const SESSION_TIMEOUT: Duration = Duration::from_secs(60);
/// The bound on any one step (a fleet's start, a `top` run).
const STEP: Duration = Duration::from_secs(300);
/// How long each side of the lock-cycle comparison runs.
const CYCLES_FOR: Duration = Duration::from_secs(2);

/// What one fleet size measured.
#[derive(Debug, Default)]
struct Row {
    sessions: usize,
    names: usize,
    start: Duration,
    once: Option<Once>,
    stream: Option<Stream>,
    cycles: Option<Cycles>,
    failed: Vec<String>,
}

#[derive(Debug)]
struct Once {
    time: Duration,
    bytes: u64,
    requests: u64,
    largest: u64,
    peak_rss: u64,
    complete: bool,
    semaphores: usize,
    sessions: usize,
}

#[derive(Debug)]
struct Stream {
    first: Duration,
    bytes_per_interval: u64,
    complete: bool,
}

#[derive(Debug)]
struct Cycles {
    plain: Duration,
    announcing: Duration,
    plain_requests: f64,
    announcing_requests: f64,
}

fn main() {
    let sizes: Vec<usize> = std::env::var("TOP_FLEET")
        .ok()
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| {
            // `cargo bench` passes `--bench`; `cargo test` runs the smoke run.
            if std::env::args().any(|a| a == "--bench") {
                vec![100, 1_000, 10_000]
            } else {
                vec![50]
            }
        });
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            std::process::exit(1);
        }
    };
    let mut rows = Vec::new();
    for sessions in sizes {
        eprintln!("fleet of {sessions} sessions");
        let row = runtime.block_on(fleet(sessions));
        rows.push(row);
    }
    print(&rows);
    runtime.shutdown_timeout(Duration::from_secs(1));
    if rows.iter().any(|r| !r.failed.is_empty()) {
        std::process::exit(1);
    }
}

/// Starts `sessions` announcing sessions holding two locks each, then measures.
async fn fleet(sessions: usize) -> Row {
    let mut row = Row {
        sessions,
        names: sessions * 2,
        ..Row::default()
    };
    let emulator = match Emulator::builder().node(NODE).start().await {
        Ok(e) => e,
        Err(e) => {
            row.failed.push(format!("emulator: {e}"));
            return row;
        }
    };
    let cs = emulator.connection_string();
    let started = Instant::now();
    let fleet = match tokio::time::timeout(STEP, start(&cs, sessions)).await {
        Ok(Ok(fleet)) => fleet,
        Ok(Err(e)) => {
            row.failed.push(format!("start: {e}"));
            return row;
        }
        Err(_) => {
            row.failed.push(format!("start: not within {STEP:?}"));
            return row;
        }
    };
    row.start = started.elapsed();
    // Every session announced (written within a second of its last change).
    tokio::time::sleep(Duration::from_secs(3)).await;

    match once(&emulator, &cs).await {
        Ok(o) => {
            if !o.complete || o.semaphores != row.names || o.sessions != sessions {
                row.failed.push(format!(
                    "--once: {} names of {}, {} sessions of {}, complete {}",
                    o.semaphores, row.names, o.sessions, sessions, o.complete
                ));
            }
            row.once = Some(o);
        }
        Err(e) => row.failed.push(format!("--once: {e}")),
    }
    match stream(&emulator, &cs).await {
        Ok(s) => row.stream = Some(s),
        Err(e) => row.failed.push(format!("stream: {e}")),
    }
    match cycles(&emulator, &cs).await {
        Ok(c) => row.cycles = Some(c),
        Err(e) => row.failed.push(format!("lock cycle: {e}")),
    }
    drop(fleet);
    emulator.shutdown().await;
    row
}

/// `sessions` announcing sessions, two locks each (`job-<i>-a`, `job-<i>-b`), 64 starting at
/// a time, on a client (one connection) per 250 sessions, as a fleet of processes has many.
async fn start(cs: &str, sessions: usize) -> R<Vec<(Session, Lease, Lease)>> {
    let mut clients = Vec::new();
    for _ in 0..sessions.div_ceil(250).max(1) {
        clients.push(Client::connect(cs).await?);
    }
    let started = futures::stream::iter(0..sessions)
        .map(|i| {
            let client = clients[i % clients.len()].clone();
            async move {
                let options = SessionOptions::new()
                    .timeout(SESSION_TIMEOUT)
                    .description(format!("worker {i}"))
                    .announce(true);
                let s = client.session(NODE, options).await?;
                let lock = || AcquireOptions::exclusive().ephemeral(true);
                let a = s.acquire(&format!("job-{i:05}-a"), lock()).await?;
                let b = s.acquire(&format!("job-{i:05}-b"), lock()).await?;
                Ok::<_, ydb_coordination::Error>((s, a, b))
            }
        })
        .buffer_unordered(64)
        .collect::<Vec<_>>()
        .await;
    Ok(started.into_iter().collect::<Result<_, _>>()?)
}

fn command(cs: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .env("YDB_CONNECTION_STRING", cs)
        .env_remove("YDB_ACCESS_TOKEN_CREDENTIALS")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    cmd
}

/// Follows a child's peak resident memory (`VmHWM`, bytes) until it is gone.
fn watch_rss(pid: u32) -> Arc<AtomicU64> {
    let peak = Arc::new(AtomicU64::new(0));
    let seen = peak.clone();
    std::thread::spawn(move || {
        let path = format!("/proc/{pid}/status");
        while let Ok(status) = std::fs::read_to_string(&path) {
            let hwm = status
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok());
            match hwm {
                Some(kb) => seen.fetch_max(kb * 1024, Ordering::Relaxed),
                // A zombie: its memory is gone.
                None => break,
            };
            std::thread::sleep(Duration::from_millis(5));
        }
    });
    peak
}

/// Waits for `child` within `limit` (killing it past that).
async fn wait(child: &mut Child, limit: Duration) -> R<std::process::ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            return Err(format!("not done within {limit:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn once(emulator: &Emulator, cs: &str) -> R<Once> {
    let before = emulator.traffic();
    let started = Instant::now();
    let mut child = command(cs, &["--json", "top", NODE, "--once", "--timeout", "120s"]).spawn()?;
    let peak = watch_rss(child.id());
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let reader = std::thread::spawn(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).map(|_| line)
    });
    let status = wait(&mut child, STEP).await?;
    let time = started.elapsed();
    let used = emulator.traffic().since(&before);
    let line = reader.join().map_err(|_| "the reader panicked")??;
    let v: serde_json::Value = serde_json::from_str(&line)?;
    let count = |key: &str| v[key].as_array().map_or(0, Vec::len);
    Ok(Once {
        time,
        bytes: used.response_bytes,
        requests: used.requests,
        largest: used.largest_response,
        peak_rss: peak.load(Ordering::Relaxed),
        complete: status.success() && v["complete"] == true,
        semaphores: count("semaphores"),
        sessions: count("sessions"),
    })
}

async fn stream(emulator: &Emulator, cs: &str) -> R<Stream> {
    let started = Instant::now();
    let mut child = command(cs, &["--json", "top", NODE, "--interval", "1s"]).spawn()?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send((Instant::now(), line)).is_err() {
                break;
            }
        }
    });
    let mut snapshots = Vec::new();
    let result = (|| -> R<Stream> {
        for _ in 0..3 {
            let (at, line) = rx.recv_timeout(STEP)?;
            let v: serde_json::Value = serde_json::from_str(&line)?;
            snapshots.push((at, emulator.traffic(), v["complete"] == true));
        }
        let (first_at, first_traffic, _) = &snapshots[0];
        let (_, last_traffic, _) = &snapshots[2];
        Ok(Stream {
            first: first_at.duration_since(started),
            bytes_per_interval: last_traffic.since(first_traffic).response_bytes / 2,
            complete: snapshots.iter().all(|(_, _, c)| *c),
        })
    })();
    let _ = child.kill();
    let _ = wait(&mut child, STEP).await;
    result
}

/// One session's lock cycles for [`CYCLES_FOR`] each, without and with announcements,
/// interleaved in blocks of 20.
async fn cycles(emulator: &Emulator, cs: &str) -> R<Cycles> {
    let client = Client::connect(cs).await?;
    let plain = client
        .session(NODE, SessionOptions::new().timeout(SESSION_TIMEOUT))
        .await?;
    let loud = client
        .session(
            NODE,
            SessionOptions::new()
                .timeout(SESSION_TIMEOUT)
                .description("bench")
                .announce(true),
        )
        .await?;
    let mut samples = [Vec::new(), Vec::new()];
    let mut requests = [0u64, 0];
    let mut spent = [Duration::ZERO; 2];
    while spent.iter().any(|s| *s < CYCLES_FOR) {
        for (i, s) in [&plain, &loud].into_iter().enumerate() {
            let before = emulator.traffic();
            let block = Instant::now();
            for _ in 0..20 {
                let t = Instant::now();
                let guard = tokio::time::timeout(STEP, s.mutex("bench-cycle").lock()).await??;
                tokio::time::timeout(STEP, guard.unlock()).await??;
                samples[i].push(t.elapsed());
            }
            spent[i] += block.elapsed();
            // The writes it caused are counted with it: an announcement goes out within
            // the second after its names changed.
            requests[i] += emulator.traffic().since(&before).requests;
        }
    }
    // Whatever the announcer still had to write for the last block.
    let before = emulator.traffic();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    requests[1] += emulator.traffic().since(&before).requests;
    let median = |v: &mut Vec<Duration>| {
        v.sort_unstable();
        v[v.len() / 2]
    };
    let n = |i: usize| samples[i].len() as f64;
    let (plain_n, loud_n) = (n(0), n(1));
    Ok(Cycles {
        plain: median(&mut samples[0]),
        announcing: median(&mut samples[1]),
        plain_requests: requests[0] as f64 / plain_n,
        announcing_requests: requests[1] as f64 / loud_n,
    })
}

fn ms(d: Duration) -> String {
    if d < Duration::from_millis(10) {
        format!("{:.2} ms", d.as_secs_f64() * 1e3)
    } else if d < Duration::from_secs(10) {
        format!("{:.0} ms", d.as_secs_f64() * 1e3)
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

fn bytes(n: u64) -> String {
    if n >= 10 << 20 {
        format!("{:.1} MiB", n as f64 / (1 << 20) as f64)
    } else if n >= 10 << 10 {
        format!("{:.0} KiB", n as f64 / 1024.0)
    } else {
        format!("{n} B")
    }
}

fn print(rows: &[Row]) {
    println!("## `ydb-coord top` as the fleet grows\n");
    println!(
        "| sessions | names | fleet start | `--once`: time | bytes read | requests | largest message | top's peak RSS | whole | stream: first snapshot | stream: bytes per interval | stream whole |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|:-:|---:|---:|:-:|");
    for r in rows {
        let (o1, o2, o3, o4, o5, o6) = match &r.once {
            Some(o) => (
                ms(o.time),
                bytes(o.bytes),
                o.requests.to_string(),
                bytes(o.largest),
                bytes(o.peak_rss),
                if o.complete { "yes" } else { "no" }.to_string(),
            ),
            None => Default::default(),
        };
        let (s1, s2, s3) = match &r.stream {
            Some(s) => (
                ms(s.first),
                bytes(s.bytes_per_interval),
                if s.complete { "yes" } else { "no" }.to_string(),
            ),
            None => Default::default(),
        };
        println!(
            "| {} | {} | {} | {o1} | {o2} | {o3} | {o4} | {o5} | {o6} | {s1} | {s2} | {s3} |",
            r.sessions,
            r.names,
            ms(r.start)
        );
    }
    println!("\n## The lock cycle of one session, with and without announcements, in that fleet\n");
    println!(
        "| sessions | cycle, plain (median) | cycle, announcing | ratio | requests per cycle, plain | announcing | ratio |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        if let Some(c) = &r.cycles {
            println!(
                "| {} | {} | {} | {:.2}× | {:.3} | {:.3} | {:.3}× |",
                r.sessions,
                ms(c.plain),
                ms(c.announcing),
                c.announcing.as_secs_f64() / c.plain.as_secs_f64(),
                c.plain_requests,
                c.announcing_requests,
                c.announcing_requests / c.plain_requests
            );
        }
    }
    for r in rows {
        for f in &r.failed {
            println!("\nFAILED at {} sessions: {f}", r.sessions);
        }
    }
}
