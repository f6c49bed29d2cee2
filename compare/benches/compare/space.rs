//! Row 12: the lock space ([`LockSpace`]). How lock cycles on independent names scale when
//! they are spread over 1, 2 and 4 coordination nodes of an emulator in its own process
//! (each node has its own lock there, as each YDB node is its own tablet); what a lock of a
//! moved name costs in the transition `A+B` of a reshard next to the plain layout `A`; and
//! which fraction of the names adding a node to N moves (1/(N+1) expected).
//!
//! The `ydb` crate has no lock space, so this row has no side by side.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ydb_coordination::space::{Layout, LockSpace, LockSpaceBuilder, SpaceDirectory};
use ydb_coordination::{Client, config::NodeConfig};

use super::memory::ServerChild;
use super::stats::{fmt_duration, group, quantile, ratio};
use super::{
    Config, R, STEP, Window, cpu, median_rate, ours_session_options, rates_cell, ratio_line,
    windows, within,
};

/// The concurrent workers of the spread runs, each cycling its own names.
pub(crate) const WORKERS: usize = 16;
/// The names each worker cycles.
const NAMES: usize = 4;
/// The node counts of the spread runs.
const SPREAD: [usize; 3] = [1, 2, 4];
/// How many names the moved fraction is counted over.
const PLACED: usize = 100_000;
/// The directory node of the transition runs.
const DIRECTORY: &str = "/local/space-directory";

/// A node's name in a layout, and its path on the emulator.
fn node(i: usize) -> (String, String) {
    (format!("s{i}"), format!("/local/space-{i}"))
}

/// The emulator in a child process of this binary, with the nodes `s1` to `s{nodes}` (and
/// the directory node), and a client connected to it.
async fn server(nodes: usize) -> R<(ServerChild, Client)> {
    let server = ServerChild::start()?;
    let client = within("connect", STEP, Client::connect(&server.connection)).await?;
    let paths = (1..=nodes)
        .map(|i| node(i).1)
        .chain([DIRECTORY.to_string()]);
    for path in paths {
        within(
            "create_node",
            STEP,
            client.create_node(&path, NodeConfig::new()),
        )
        .await?;
    }
    Ok((server, client))
}

/// A space given the nodes `s1` to `s{nodes}`.
fn builder(client: &Client, nodes: usize) -> LockSpaceBuilder {
    let mut builder = LockSpace::builder().session_options(ours_session_options());
    for i in 1..=nodes {
        let (name, path) = node(i);
        builder = builder.node(&name, client, &path);
    }
    builder
}

/// A space over the nodes `s1` to `s{nodes}`, with the fixed layout of all of them.
async fn open(client: &Client, nodes: usize) -> R<LockSpace> {
    let layout = Layout::new(1, (1..=nodes).map(|i| node(i).0))?;
    let open = builder(client, nodes).layout(layout).open();
    within("open a lock space", STEP, open).await
}

/// The spread runs at one node count.
#[derive(Debug, Clone)]
pub(crate) struct Spread {
    pub(crate) nodes: usize,
    /// Lock cycles per second, one per window.
    pub(crate) rates: Vec<f64>,
    /// The cores the bench process (the client) used, one per window.
    pub(crate) client_cores: Vec<f64>,
    /// The cores the emulator process used, one per window.
    pub(crate) server_cores: Vec<f64>,
    /// The cores the machine left idle, one per window (empty without `/proc/stat`).
    pub(crate) idle_cores: Vec<f64>,
}

/// The CPU a window used, in cores: this process's (the client's), the emulator's, and
/// what the machine left idle (`None` without `/proc/stat`).
struct Cores {
    client: f64,
    server: f64,
    idle: Option<f64>,
}

/// The idle time of every CPU of the machine so far (idle and iowait in `/proc/stat`), or
/// `None` where there is no such file.
fn machine_idle() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let ticks: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap_or(0))
        .collect();
    // Fields 4 and 5 are idle and iowait, in USER_HZ ticks (100 a second).
    let idle = ticks.get(3)? + ticks.get(4).unwrap_or(&0);
    Some(Duration::from_millis(idle * 10))
}

/// Row 12's spread runs: [`WORKERS`] tasks on one space (one process: one session per
/// node), each cycling its own names, in windows alternating between the node counts.
pub(crate) async fn spread(cfg: &Config) -> R<Vec<Spread>> {
    let most = SPREAD.into_iter().max().unwrap_or(1);
    let (mut server, client) = server(most).await?;
    let mut spaces = Vec::new();
    for nodes in SPREAD {
        spaces.push(open(&client, nodes).await?);
    }
    let (rounds, length, warmup) = windows(cfg);
    let mut out: Vec<Spread> = SPREAD
        .into_iter()
        .map(|nodes| Spread {
            nodes,
            rates: Vec::new(),
            client_cores: Vec::new(),
            server_cores: Vec::new(),
            idle_cores: Vec::new(),
        })
        .collect();
    for _ in 0..rounds {
        for (space, out) in spaces.iter().zip(&mut out) {
            let (rate, cores) = cycles(space, &mut server, Window::new(warmup, length)).await?;
            out.rates.push(rate);
            out.client_cores.push(cores.client);
            out.server_cores.push(cores.server);
            out.idle_cores.extend(cores.idle);
        }
    }
    for space in &spaces {
        space.shutdown().await;
    }
    Ok(out)
}

/// One window of lock cycles on `space`: cycles per second, and the cores used.
async fn cycles(space: &LockSpace, server: &mut ServerChild, window: Window) -> R<(f64, Cores)> {
    let done = Arc::new(AtomicU64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for worker in 0..WORKERS {
        let (space, done) = (space.clone(), done.clone());
        tasks.spawn(async move {
            let mutexes: Vec<_> = (0..NAMES)
                .map(|j| space.mutex(&format!("w{worker:02}-{j}")))
                .collect();
            for mutex in mutexes.iter().cycle() {
                if window.over() {
                    break;
                }
                let guard = within("space lock", STEP, mutex.lock()).await?;
                within("space unlock", STEP, guard.release()).await?;
                if window.contains(Instant::now()) {
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }
            R::Ok(())
        });
    }
    tokio::time::sleep_until(tokio::time::Instant::from_std(window.from)).await;
    let (client0, server0, idle0) = (cpu::used()?, server.cpu()?, machine_idle());
    tokio::time::sleep_until(tokio::time::Instant::from_std(window.to)).await;
    let (client1, server1, idle1) = (cpu::used()?, server.cpu()?, machine_idle());
    while let Some(finished) = tasks.join_next().await {
        finished??;
    }
    let cores = |from: Duration, to: Duration| {
        to.saturating_sub(from).as_secs_f64() / (window.to - window.from).as_secs_f64()
    };
    Ok((
        window.rate(done.load(Ordering::Relaxed)),
        Cores {
            client: cores(client0, client1),
            server: cores(server0, server1),
            idle: idle0.zip(idle1).map(|(from, to)| cores(from, to)),
        },
    ))
}

/// Row 12's transition runs: lock + unlock of one moved name, in `A+B` and in `A`.
#[derive(Debug, Clone)]
pub(crate) struct Transition {
    pub(crate) name: String,
    pub(crate) moving: Vec<Duration>,
    pub(crate) plain: Vec<Duration>,
}

/// Two spaces that follow the same directory node: one in `A` (`s1`), one in the transition
/// `A+B` to `s1, s2`; the same moved name cycled in each, in alternating batches.
pub(crate) async fn transition(cfg: &Config) -> R<Transition> {
    let (_server, client) = server(2).await?;
    let a = Layout::new(1, [node(1).0])?;
    let mut spaces = Vec::new();
    let mut moving = None;
    for space in ["plain", "moving"] {
        let operator = SpaceDirectory::new(&client, DIRECTORY, space, ours_session_options())?;
        within("init", STEP, operator.init(a.clone())).await?;
        if space == "moving" {
            moving = Some(within("begin_add", STEP, operator.begin_add(&node(2).0)).await?);
        }
        operator.shutdown().await;
        let opened = builder(&client, 2)
            .directory(&client, DIRECTORY, space)
            .open();
        spaces.push(within("open a lock space", STEP, opened).await?);
    }
    let moving = moving.ok_or("no transition")?;
    let name = (0..1000)
        .map(|i| format!("cycle-{i}"))
        .find(|n| moving.parts(n).len() == 2)
        .ok_or("no name moves to s2")?;
    if spaces.get(1).is_none_or(|s| !s.layout().is_transition()) {
        return Err("the moving space does not run the transition".into());
    }
    let batch = 50;
    let rounds = cfg.count(2000, 200).div_ceil(batch);
    let mut samples = [Vec::new(), Vec::new()];
    // The first round warms up the sessions and is not kept.
    for round in 0..=rounds {
        for (space, samples) in spaces.iter().zip(&mut samples) {
            let mutex = space.mutex(&name);
            for _ in 0..batch {
                let t = Instant::now();
                let guard = within("space lock", STEP, mutex.lock()).await?;
                within("space unlock", STEP, guard.release()).await?;
                if round > 0 {
                    samples.push(t.elapsed());
                }
            }
        }
    }
    for space in &spaces {
        space.shutdown().await;
    }
    let [plain, moving] = samples;
    Ok(Transition {
        name,
        moving,
        plain,
    })
}

/// The fraction of [`PLACED`] names that adding a node to `nodes` moves.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Moved {
    pub(crate) nodes: usize,
    pub(crate) fraction: f64,
}

/// Row 12's moved fractions for 1 to 4 nodes, from the transition's [`Layout::parts`].
pub(crate) fn moved() -> R<Vec<Moved>> {
    (1..=4)
        .map(|nodes| {
            let layout = Layout::new(1, (1..=nodes).map(|i| format!("m{i}")))?;
            let moving = layout.add_node(&format!("m{}", nodes + 1))?;
            let moved = (0..PLACED)
                .filter(|i| moving.parts(&format!("name-{i}")).len() == 2)
                .count();
            Ok(Moved {
                nodes,
                fraction: moved as f64 / PLACED as f64,
            })
        })
        .collect()
}

/// The CPU a spread run used: each process's cores, the CPU time per cycle, the idle cores.
fn cpu_cell(s: &Spread) -> String {
    let (client, server) = (median_rate(&s.client_cores), median_rate(&s.server_cores));
    let per_cycle = (client + server) / median_rate(&s.rates);
    let per_cycle = if per_cycle.is_finite() && per_cycle >= 0.0 {
        fmt_duration(Duration::from_secs_f64(per_cycle))
    } else {
        "n/a".to_string()
    };
    let idle = if s.idle_cores.is_empty() {
        "n/a".to_string()
    } else {
        format!("{:.2}", median_rate(&s.idle_cores))
    };
    format!(
        "CPU: client {client:.2} + emulator {server:.2} cores ({per_cycle} per cycle); idle {idle}"
    )
}

/// Row 12's lines for the spread runs: one per node count, then the ratios.
pub(crate) fn spread_cells(spread: &[Spread]) -> Vec<[String; 6]> {
    let base = spread.first().map_or(f64::NAN, |s| median_rate(&s.rates));
    let mut rows: Vec<[String; 6]> = spread
        .iter()
        .map(|s| {
            [
                "12".to_string(),
                format!(
                    "Lock space: {WORKERS} workers on independent names over {} node(s), lock cycles/s ¹³",
                    s.nodes
                ),
                rates_cell(&s.rates),
                "no lock space ¹³".to_string(),
                cpu_cell(s),
                format!("{} 1 node", ratio(median_rate(&s.rates), base)),
            ]
        })
        .collect();
    let speedups: Vec<String> = spread
        .iter()
        .skip(1)
        .map(|s| format!("{} nodes {}", s.nodes, ratio(median_rate(&s.rates), base)))
        .collect();
    rows.push(ratio_line(
        "12",
        "Lock space: speedup of spreading the names over more nodes (÷ 1 node) ¹³".to_string(),
        speedups.join(", "),
    ));
    rows
}

/// Row 12's line for the transition runs.
pub(crate) fn transition_cells(t: &Transition) -> [String; 6] {
    let p = |s: &[Duration], q| quantile(s, q);
    let cell =
        |s: &[Duration]| format!("{} / {}", fmt_duration(p(s, 0.5)), fmt_duration(p(s, 0.99)));
    let r = |q| ratio(p(&t.moving, q).as_secs_f64(), p(&t.plain, q).as_secs_f64());
    [
        "12".to_string(),
        format!(
            "Lock space: lock + unlock of a moved name (`{}`) in the transition A+B, p50 / p99 ¹³",
            t.name
        ),
        cell(&t.moving),
        "—".to_string(),
        format!("the same in A: {}", cell(&t.plain)),
        format!("p50 {}, p99 {} of A's", r(0.5), r(0.99)),
    ]
}

/// Row 12's line for the moved fractions.
pub(crate) fn moved_cells(m: &[Moved]) -> [String; 6] {
    let join = |f: &dyn Fn(&Moved) -> String| m.iter().map(f).collect::<Vec<_>>().join(" / ");
    let expected = |m: &Moved| 1.0 / (m.nodes + 1) as f64;
    let worst = m
        .iter()
        .map(|m| (m.fraction / expected(m) - 1.0).abs())
        .fold(0.0, f64::max);
    [
        "12".to_string(),
        format!(
            "Lock space: fraction of {} names moved by adding a node to N = {} nodes ¹³",
            group(PLACED as u64),
            join(&|m| m.nodes.to_string())
        ),
        join(&|m| format!("{:.4}", m.fraction)),
        "—".to_string(),
        format!("1/(N+1): {}", join(&|m| format!("{:.4}", expected(m)))),
        format!("off by {:.1}% at most", worst * 100.0),
    ]
}

/// Row 12's note.
pub(crate) fn note(cfg: &Config) -> String {
    let (rounds, length, warmup) = windows(cfg);
    format!(
        "¹³ Row 12: the emulator runs in a fresh child process of this binary (as in rows 7 and \
         8), its nodes created over gRPC; each node has its own lock there. Spread: one \
         `LockSpace` (one process: one session per node) over 1, 2 or 4 nodes with a fixed \
         layout, {WORKERS} tasks each cycling its own {NAMES} names (`mutex(..).lock()` + \
         `unlock()`, no contention), {rounds} windows of {} after a {} warm-up per node count, \
         alternating between the counts; median (range). The CPU cells are the cores each \
         process used in the window (`getrusage` of the bench process, which is the client, and \
         of the emulator process), their CPU time per lock cycle, and the cores the whole \
         machine left idle (`/proc/stat`): on a machine of {} CPUs the two together cannot use \
         more, and what neither uses nor leaves idle went to other processes. Transition: two \
         spaces following one directory node, one in the layout A (`s1`), one in the transition \
         A+B to `s1, s2`; the same name, one that moves to `s2`, locked and unlocked in each in \
         alternating batches of 50. In A+B the lock is taken on `s1`, then on `s2`, and the \
         published layout is read from the directory for the fencing token. Moved: \
         `Layout::parts` of the transition that adds a node to N, over {} names (`name-0` …); a \
         name with two parts moves. The `ydb` crate has no lock space to put side by side.",
        fmt_duration(length),
        fmt_duration(warmup),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        group(PLACED as u64),
    )
}
