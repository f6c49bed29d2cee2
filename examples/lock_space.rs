//! A lock space over three coordination nodes grows to four while four workers lock and
//! write: no name is ever held by two workers at once, and every register write carries a
//! fencing token greater than the one before, across the move.
//!
//! Four workers (four `LockSpace`s, each with its own client, as four processes would be)
//! follow the layout published on a directory node and cycle locks on `task-0` to `task-5`,
//! writing into a fenced register per name. Meanwhile an operator adds the node `n4`: it
//! publishes the transition (`begin_add`), then retries `finish` until no worker still runs
//! the old layout. At the end the example prints the tokens of the names that moved, before
//! and after the move, and fails unless nothing was held twice, no write was refused and every
//! worker runs the new layout.
//!
//! Every wait that depends on the server is bounded, so a bug ends the example with an error
//! naming the step instead of a hang.
//!
//! `cargo run --example lock_space` (embedded emulator) or with `YDB_CONNECTION_STRING` set
//! (it then creates its nodes in that database).

#[path = "common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use ydb_coordination::FencingToken;
use ydb_coordination::space::{Layout, LockSpace, SpaceDirectory};
use ydb_coordination::{ErrorKind, SessionOptions};

use common::{BoxError, bounded};

/// The space's name on its directory node.
const SPACE: &str = "tasks";
/// The lock names the workers share.
const NAMES: usize = 6;
const WORKERS: usize = 4;
/// How long the workers run before the reshard, and again after it.
const PHASE: Duration = Duration::from_millis(1000);
/// How long a worker holds a lock.
const HOLD: Duration = Duration::from_millis(2);
/// Between two tries of `finish`.
const RETRY: Duration = Duration::from_millis(100);
/// The longest the operator retries `finish`.
const FINISH_WITHIN: Duration = Duration::from_secs(20);

/// One accepted write: who held the lock, with which token, in which layout, on which nodes.
struct Write {
    worker: usize,
    token: FencingToken,
    epoch: u64,
    nodes: Vec<String>,
}

/// A register that accepts a write only with a fencing token at least as great as the
/// greatest it has seen (a conditional write, as a row with a version column does it), and
/// notes a holder that writes while another has not left yet.
#[derive(Default)]
struct Register {
    newest: FencingToken,
    inside: Option<usize>,
    writes: Vec<Write>,
    overlaps: u64,
    refused: u64,
}

impl Register {
    fn write(&mut self, write: Write) -> Result<(), String> {
        if let Some(other) = self.inside.replace(write.worker) {
            self.overlaps += 1;
            println!(
                "OVERLAP: worker {} writes while worker {other} holds the lock",
                write.worker
            );
        }
        if write.token < self.newest {
            self.refused += 1;
            return Err(format!(
                "refused: token {} is smaller than {}",
                write.token, self.newest
            ));
        }
        self.newest = write.token;
        self.writes.push(write);
        Ok(())
    }

    fn leave(&mut self, worker: usize) {
        if self.inside == Some(worker) {
            self.inside = None;
        }
    }
}

type Registers = Arc<BTreeMap<String, Mutex<Register>>>;

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn task(i: usize) -> String {
    format!("task-{i}")
}

/// What a worker did: locks taken per epoch of the layout they were taken in, and locks
/// lost while held.
#[derive(Default)]
struct Stats {
    per_epoch: BTreeMap<u64, u64>,
    lost: u64,
}

/// Cycles locks on random names until `stop`, writing into each name's register.
async fn work(
    worker: usize,
    space: LockSpace,
    registers: Registers,
    stop: CancellationToken,
) -> Result<Stats, BoxError> {
    let mut stats = Stats::default();
    while !stop.is_cancelled() {
        let name = task(rand::random_range(0..NAMES));
        let guard = bounded(&format!("the lock {name}"), space.mutex(&name).lock()).await??;
        let register = registers.get(&name).ok_or("no register")?;
        let parts = guard
            .space_lease()
            .ok_or("a lock of a space has its parts")?;
        *stats.per_epoch.entry(parts.epoch()).or_default() += 1;
        let write = Write {
            worker,
            token: guard.fencing_token(),
            epoch: parts.epoch(),
            nodes: parts.nodes().to_vec(),
        };
        let written = locked(register).write(write);
        if let Err(why) = written {
            println!("worker {worker}, {name}: {why}");
        }
        // The work runs only while the lock is held for sure.
        let held = guard
            .token()
            .run_until_cancelled(tokio::time::sleep(HOLD))
            .await;
        if held.is_none() {
            stats.lost += 1;
            println!("worker {worker}: lost {name} while holding it");
        }
        locked(register).leave(worker);
        bounded(&format!("the unlock of {name}"), guard.release()).await??;
    }
    Ok(stats)
}

/// The tokens of a moved name's writes: the last in the old layout, the first and last in
/// the transition, the first in the new layout.
fn describe_move(writes: &[Write], a: u64, transition: u64, b: u64) -> String {
    let of = |epoch: u64| writes.iter().filter(move |w| w.epoch == epoch);
    let token = |w: Option<&Write>| {
        w.map_or("-".to_string(), |w| {
            format!("{} on {}", w.token, w.nodes.join("+"))
        })
    };
    let moving: Vec<&Write> = of(transition).collect();
    format!(
        "last in A {}; A+B: {} lock(s), {} .. {}; first in B {}",
        token(of(a).next_back()),
        moving.len(),
        token(moving.first().copied()),
        token(moving.last().copied()),
        token(of(b).next()),
    )
}

async fn run(setup: &common::Setup) -> Result<(), BoxError> {
    // The lock nodes: n1 to n3 now, n4 added later. Each process is given all four, so it
    // can follow a layout that names n4.
    let mut nodes = Vec::new();
    for i in 1..=4 {
        let path = common::fresh_node(&setup.client, &format!("lock-space-n{i}")).await?;
        nodes.push((format!("n{i}"), path));
    }
    let options = SessionOptions::new();
    let directory = SpaceDirectory::new(&setup.client, &setup.node, SPACE, options.clone())?;
    let a = bounded("init", directory.init(Layout::new(1, ["n1", "n2", "n3"])?)).await??;
    println!("operator: published {a} on the directory {}", setup.node);

    let b = a.add_node("n4")?.finish()?;
    let mut moved = Vec::new();
    for i in 0..NAMES {
        let (from, to) = (&a.parts(&task(i))[0].node, &b.parts(&task(i))[0].node);
        if from == to {
            println!("  {} lives on {from}", task(i));
        } else {
            println!("  {} lives on {from}, moves to {to}", task(i));
            moved.push(task(i));
        }
    }
    if moved.is_empty() {
        return Err("no name moves to n4: pick other names".into());
    }

    let registers: Registers = Arc::new(
        (0..NAMES)
            .map(|i| (task(i), Mutex::new(Register::default())))
            .collect(),
    );
    let mut spaces = Vec::new();
    for _ in 0..WORKERS {
        let client = setup.connect().await?;
        let mut builder = LockSpace::builder().session_options(options.clone());
        for (name, path) in &nodes {
            builder = builder.node(name, &client, path);
        }
        let space = bounded(
            "a worker's space to open",
            builder.directory(&client, &setup.node, SPACE).open(),
        )
        .await??;
        spaces.push(space);
    }
    let stop = CancellationToken::new();
    let workers: Vec<_> = spaces
        .iter()
        .enumerate()
        .map(|(w, space)| tokio::spawn(work(w, space.clone(), registers.clone(), stop.clone())))
        .collect();
    println!("{WORKERS} workers lock {NAMES} names in {a}");
    tokio::time::sleep(PHASE).await;

    let moving = bounded("begin_add", directory.begin_add("n4")).await??;
    println!("operator: published the transition {moving}");
    let started = Instant::now();
    let mut refusals = 0;
    let done = loop {
        match bounded("finish", directory.finish()).await? {
            Ok(done) => break done,
            Err(e)
                if e.kind() == ErrorKind::PreconditionFailed
                    && started.elapsed() < FINISH_WITHIN =>
            {
                refusals += 1;
                if refusals == 1 {
                    println!("operator: finish refused ({e}); trying again");
                }
                tokio::time::sleep(RETRY).await;
            }
            Err(e) => return Err(e.into()),
        }
    };
    println!(
        "operator: published {done} after {refusals} refused finish(es), {:?} after the transition",
        started.elapsed()
    );
    for (w, space) in spaces.iter().enumerate() {
        let mut changes = space.layout_changes();
        let what = format!("worker {w} to follow epoch {}", done.epoch());
        bounded(&what, changes.wait_for(|l| l.epoch() >= done.epoch())).await??;
    }
    println!("every worker follows {done}; they go on for {PHASE:?}");
    tokio::time::sleep(PHASE).await;
    stop.cancel();

    let mut lost = 0;
    for (w, worker) in workers.into_iter().enumerate() {
        let stats = bounded(&format!("worker {w} to stop"), worker).await???;
        let per_epoch: Vec<String> = stats
            .per_epoch
            .iter()
            .map(|(epoch, n)| format!("{n} locks in epoch {epoch}"))
            .collect();
        println!("worker {w} took {}", per_epoch.join(", "));
        lost += stats.lost;
    }

    println!("the names that moved, by their register's accepted writes:");
    for name in &moved {
        let register = registers.get(name).ok_or("no register")?;
        let how = describe_move(
            &locked(register).writes,
            a.epoch(),
            moving.epoch(),
            done.epoch(),
        );
        println!("  {name}: {how}");
    }
    let (mut writes, mut overlaps, mut refused) = (0, 0, 0);
    for register in registers.values() {
        let register = locked(register);
        writes += register.writes.len();
        overlaps += register.overlaps;
        refused += register.refused;
    }
    println!("{writes} writes accepted, {refused} refused, {overlaps} overlaps, {lost} locks lost");

    // Every worker runs the new layout, and says so on the directory.
    for (w, space) in spaces.iter().enumerate() {
        let layout = space.layout();
        if *layout != done || space.running_epoch() != done.epoch() {
            return Err(format!(
                "worker {w} runs {layout} (oldest epoch {}), not {done}",
                space.running_epoch()
            )
            .into());
        }
        if let Some(e) = space.layout_error() {
            return Err(format!("worker {w} does not follow the directory: {e}").into());
        }
    }
    bounded("every member to report the new epoch", async {
        while !directory.lagging().await?.is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok::<_, BoxError>(())
    })
    .await??;
    println!(
        "every worker runs {done}, and the directory lists {} members, none behind",
        directory.members().await?.len()
    );
    if overlaps > 0 || refused > 0 {
        return Err(format!(
            "{overlaps} overlapping holders, {refused} refused writes (a token went backwards)"
        )
        .into());
    }

    for space in &spaces {
        space.shutdown().await;
    }
    directory.shutdown().await;
    for (_, path) in &nodes {
        setup.client.drop_node(path).await?;
    }
    setup.client.drop_node(&setup.node).await?;
    println!("done: nothing was held twice and every token grew across the move");
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let setup = bounded("the setup", common::setup("lock-space"))
        .await?
        .map_err(|e| e.to_string())?;
    // A bound on the whole run, well under CI's minute per example.
    match tokio::time::timeout(Duration::from_secs(45), run(&setup)).await {
        Ok(result) => result,
        Err(_) => Err("the example did not finish within 45 s".into()),
    }
}
