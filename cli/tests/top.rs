//! `ydb-coord top` against a node with 50 semaphores in use, 200 announcing sessions and a
//! queue: the `--once` snapshot in JSON and text, and the live view driven in a
//! pseudo-terminal (its screen read back with a terminal emulator).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::num::NonZeroU16;
use std::os::fd::OwnedFd;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Env, NODE, wait_exit, wait_until};
use nix::pty::{Winsize, openpty};
use serde_json::Value;
use ydb_coordination::{AcquireOptions, Lease, Session, SessionOptions};

/// Semaphores held by the crowd, besides the queue.
const SEMAPHORES: usize = 50;
/// Sessions holding them, four to a semaphore of limit 4.
const SESSIONS: usize = 200;
/// Sessions waiting in the queue of `queue`.
const WAITERS: usize = 5;

/// What keeps the crowd's semaphores held and the queue waiting.
struct Crowd {
    _sessions: Vec<Session>,
    _leases: Vec<Lease>,
    /// The waiters' acquires, in the order they queued.
    waiter_ids: Vec<u64>,
}

fn announcing(i: usize) -> SessionOptions {
    SessionOptions::new()
        .description(format!("worker {i}"))
        .announce(true)
}

/// 200 sessions holding 50 semaphores of limit 4, and a semaphore `queue` of limit 1 with
/// one holder and five sessions queued behind it.
fn crowd(env: &Env) -> Crowd {
    env._rt.block_on(async {
        let client = ydb_coordination::Client::connect(&env.cs).await.unwrap();
        let admin = client.session(NODE, SessionOptions::new()).await.unwrap();
        for s in 0..SEMAPHORES {
            admin
                .create_semaphore(&format!("sem-{s:02}"), 4, b"crowd")
                .await
                .unwrap();
        }
        admin.create_semaphore("queue", 1, b"").await.unwrap();
        let mut sessions = Vec::new();
        let mut leases = Vec::new();
        for i in 0..SESSIONS {
            let s = client.session(NODE, announcing(i)).await.unwrap();
            let name = format!("sem-{:02}", i % SEMAPHORES);
            let opts = AcquireOptions::new().count(1).data(format!("job {i}"));
            leases.push(s.acquire(&name, opts).await.unwrap());
            sessions.push(s);
        }
        let holder = client.session(NODE, announcing(SESSIONS)).await.unwrap();
        let one = || AcquireOptions::new().count(1);
        leases.push(holder.acquire("queue", one()).await.unwrap());
        sessions.push(holder);
        let mut waiter_ids = Vec::new();
        for i in 0..WAITERS {
            let s = client
                .session(NODE, announcing(SESSIONS + 1 + i))
                .await
                .unwrap();
            let mut acquiring = s.acquire("queue", one());
            assert!(acquiring.queued().await);
            waiter_ids.push(s.id());
            // Dropping the acquire would withdraw it: it stays queued on the runtime.
            tokio::spawn(async move {
                let _ = acquiring.await;
            });
            sessions.push(s);
        }
        Crowd {
            _sessions: sessions,
            _leases: leases,
            waiter_ids,
        }
    })
}

/// Waits until every session's announcement is on the node (they write within a second).
fn announced(env: &Env) {
    wait_until("every session to announce itself", || {
        let out = env.run(&["--json", "top", NODE, "--once"]);
        let Ok(v) = serde_json::from_slice::<Value>(&out.stdout) else {
            return false;
        };
        v["semaphores"].as_array().map_or(0, Vec::len) == SEMAPHORES + 1
            && v["semaphores"]
                .as_array()
                .unwrap()
                .iter()
                .any(|s| s["name"] == "queue" && s["queue"] == WAITERS)
    });
}

#[test]
fn once_in_json_shows_every_semaphore_owner_session_and_the_queue_in_order() {
    let env = Env::new("top-json");
    let crowd = crowd(&env);
    announced(&env);
    let out = env.run(&["--json", "top", NODE, "--once"]);
    assert!(out.status.success(), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let semaphores = v["semaphores"].as_array().unwrap();
    assert_eq!(semaphores.len(), SEMAPHORES + 1);
    let sem = semaphores.iter().find(|s| s["name"] == "sem-07").unwrap();
    assert_eq!(sem["limit"], 4);
    assert_eq!(sem["count"], 4);
    assert_eq!(sem["owners"].as_array().unwrap().len(), 4);
    let data: Vec<&str> = sem["owners"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["data"].as_str().unwrap())
        .collect();
    assert_eq!(data, ["job 7", "job 57", "job 107", "job 157"]);
    let queue = semaphores.iter().find(|s| s["name"] == "queue").unwrap();
    let waiters: Vec<u64> = queue["waiters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["session_id"].as_u64().unwrap())
        .collect();
    assert_eq!(waiters, crowd.waiter_ids);
    let sessions = v["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), SESSIONS + 1 + WAITERS);
    assert!(sessions.iter().all(|s| s["announced"] == true));
    assert!(
        sessions
            .iter()
            .any(|s| s["description"] == "worker 42" && s["holds"] == 1)
    );
}

#[test]
fn once_in_text_takes_names_and_patterns() {
    let env = Env::new("top-text");
    let _crowd = crowd(&env);
    announced(&env);
    let out = env.run(&["top", NODE, "--once", "sem-1*", "queue", "missing"]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("sem-") || l.starts_with("queue"))
        .collect();
    assert_eq!(rows.len(), 11, "{text}");
    assert!(
        rows.iter()
            .all(|r| r.starts_with("sem-1") || r.starts_with("queue"))
    );
    assert!(
        text.contains("missing"),
        "a missing exact name is noted: {text}"
    );
}

/// A pseudo-terminal running `ydb-coord top`, its screen kept by a terminal emulator.
struct Pty {
    child: Child,
    master: std::fs::File,
    screen: Arc<Mutex<vt100::Parser>>,
}

const ROWS: u16 = 45;
const COLS: u16 = 140;

impl Pty {
    fn spawn(env: &Env, args: &[&str]) -> Self {
        let size = Winsize {
            ws_row: ROWS,
            ws_col: COLS,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        let pty = openpty(&size, None).unwrap();
        let slave: OwnedFd = pty.slave;
        let mut cmd = env.command(args);
        cmd.stdin(Stdio::from(slave.try_clone().unwrap()))
            .stdout(Stdio::from(slave.try_clone().unwrap()))
            .stderr(Stdio::from(slave))
            .env("TERM", "xterm-256color");
        let child = cmd.spawn().unwrap();
        let master = std::fs::File::from(pty.master);
        let screen = Arc::new(Mutex::new(vt100::Parser::new(
            NonZeroU16::new(ROWS).unwrap(),
            NonZeroU16::new(COLS).unwrap(),
            0,
        )));
        let mut reader = master.try_clone().unwrap();
        let feed = screen.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            // Ends with an error once the child closed the terminal.
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                feed.lock().unwrap().process(&buf[..n]);
            }
        });
        Self {
            child,
            master,
            screen,
        }
    }

    fn contents(&self) -> String {
        self.screen.lock().unwrap().screen().contents()
    }

    /// Waits until the screen satisfies `cond`; on a timeout the failure shows the screen.
    fn wait_for(&self, what: &str, cond: impl Fn(&str) -> bool) {
        let deadline = std::time::Instant::now() + common::LIMIT;
        while !cond(&self.contents()) {
            let screen = self.contents();
            assert!(
                std::time::Instant::now() < deadline,
                "timed out waiting for {what}; the screen:\n{screen}"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    fn keys(&mut self, keys: &str) {
        self.master.write_all(keys.as_bytes()).unwrap();
        self.master.flush().unwrap();
    }

    /// The table rows on screen whose first word starts with `prefix` (not the detail
    /// pane's title, drawn in a rule).
    fn rows(&self, prefix: &str) -> Vec<String> {
        self.contents()
            .lines()
            .map(str::trim_start)
            .filter(|l| l.starts_with(prefix) && !l.contains('─'))
            .map(str::to_string)
            .collect()
    }
}

#[test]
fn the_live_view_in_a_terminal_sorts_filters_pauses_and_quits() {
    let env = Env::new("top-pty");
    let _crowd = crowd(&env);
    announced(&env);
    let mut pty = Pty::spawn(&env, &["top", NODE, "--interval", "500ms"]);
    pty.wait_for("the header with 51 semaphores and 206 sessions", |s| {
        s.contains("51 semaphores") && s.contains("206 sessions")
    });
    pty.wait_for("the first rows", |s| s.contains("sem-00"));

    // Sort by queue (name → held → queue), longest first: `queue` comes to the top.
    pty.keys("ss");
    pty.wait_for("the queue sorted first", |_| first_row(&pty) == "queue");

    // Filter to the names with a 3: sem-03, sem-13, sem-23, sem-30..39, sem-43.
    pty.keys("/3\r");
    pty.wait_for("the filtered table", |_| {
        let rows = pty.rows("sem-");
        rows.len() == 14
            && rows
                .iter()
                .all(|r| r.split_whitespace().next().unwrap().contains('3'))
    });

    pty.keys("p");
    pty.wait_for("PAUSED in the header", |s| s.contains("PAUSED"));
    pty.keys("q");
    let status = wait_exit(&mut pty.child);
    assert!(status.success(), "{status:?}");
}

#[test]
fn the_live_view_shows_the_waiters_of_the_selected_semaphore_in_queue_order() {
    let env = Env::new("top-pty-queue");
    let crowd = crowd(&env);
    announced(&env);
    let mut pty = Pty::spawn(&env, &["top", NODE, "queue"]);
    pty.wait_for("the queue's waiters", |s| {
        crowd
            .waiter_ids
            .iter()
            .all(|id| s.contains(&id.to_string()))
    });
    let screen = pty.contents();
    // The detail pane's waiters, after its WAITERS label.
    let screen = &screen[screen.find("WAITERS").expect("a WAITERS section")..];
    let at: Vec<usize> = crowd
        .waiter_ids
        .iter()
        .map(|id| screen.find(&format!(" {id} ")).unwrap_or(usize::MAX))
        .collect();
    let mut sorted = at.clone();
    sorted.sort_unstable();
    assert_eq!(at, sorted, "waiters in queue order: {screen}");
    // Ctrl-C in raw mode is a key, and quits.
    pty.keys("\u{3}");
    assert!(wait_exit(&mut pty.child).success());
}

/// The name on the first row of the semaphores table.
fn first_row(pty: &Pty) -> String {
    pty.contents()
        .lines()
        .map(str::trim_start)
        .find(|l| l.starts_with("sem-") || l.starts_with("queue"))
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or_default()
        .to_string()
}

#[test]
fn a_pattern_that_matches_nothing_shows_an_empty_table_not_an_error() {
    let env = Env::new("top-nothing");
    let out = env.run(&["--json", "top", NODE, "--once", "nothing-*"]);
    assert!(out.status.success(), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["semaphores"].as_array().unwrap().len(), 0);
    assert_eq!(v["sessions"].as_array().unwrap().len(), 0);
}

#[test]
fn an_unreachable_node_fails_once_within_the_timeout() {
    let env = Env::new("top-missing");
    let out = env.run(&["top", "/local/nope", "--once", "--timeout", "2s"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
}

/// A lock space of `n1` and `n2` (coordination nodes `/local/n1`, `/local/n2`) whose layout
/// is published on the test node, with names held on both nodes by announcing sessions.
#[test]
fn a_lock_space_is_shown_across_its_nodes_and_follows_a_reshard() {
    use ydb_coordination::space::LockSpace;
    let env = Env::new("top-space");
    for n in ["n1", "n2", "n3"] {
        common::ok(&env, &["node", "create", &format!("/local/{n}")]);
    }
    common::ok(
        &env,
        &[
            "space",
            "init",
            "--directory",
            NODE,
            "--space",
            "s",
            "--node",
            "n1",
            "--node",
            "n2",
        ],
    );
    let (space, guards) = env._rt.block_on(async {
        let client = ydb_coordination::Client::connect(&env.cs).await.unwrap();
        let mut builder = LockSpace::builder().session_options(announcing(0));
        for n in ["n1", "n2", "n3"] {
            builder = builder.node(n, &client, &format!("/local/{n}"));
        }
        let space = builder.directory(&client, NODE, "s").open().await.unwrap();
        // Four names placed on each node.
        let mut guards = Vec::new();
        let mut on = [0, 0];
        for i in 0.. {
            let name = format!("job-{i}");
            let n = usize::from(space.node_of(&name) == "n2");
            if on[n] < 4 {
                on[n] += 1;
                guards.push(space.mutex(&name).lock().await.unwrap());
            }
            if on == [4, 4] {
                break;
            }
        }
        (space, guards)
    });
    let snapshot = |env: &Env| -> Value {
        let out = env.run(&["--json", "top", NODE, "--space", "s", "--once"]);
        assert!(out.status.success(), "{out:?}");
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let nodes_of = |v: &Value| -> Vec<String> {
        let mut nodes: Vec<String> = v["semaphores"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["name"].as_str().unwrap().starts_with("job-"))
            .map(|s| s["node"].as_str().unwrap().to_string())
            .collect();
        nodes.sort();
        nodes.dedup();
        nodes
    };
    wait_until("the eight names on both nodes", || {
        let v = snapshot(&env);
        let jobs = v["semaphores"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["name"].as_str().unwrap().starts_with("job-"))
            .count();
        jobs == 8 && nodes_of(&v) == ["/local/n1", "/local/n2"]
    });
    // The first step of a reshard to n3: top watches the transition's nodes too, and a name
    // taken now is held on its new node as well.
    common::ok(
        &env,
        &[
            "space",
            "reshard",
            "--directory",
            NODE,
            "--space",
            "s",
            "--add",
            "n3",
        ],
    );
    let moved = env._rt.block_on(async {
        let mut changes = space.layout_changes();
        tokio::time::timeout(common::LIMIT, async {
            while !changes.borrow_and_update().is_transition() {
                changes.changed().await.unwrap();
            }
        })
        .await
        .unwrap();
        let name = (0..)
            .map(|i| format!("moved-{i}"))
            .find(|n| space.node_of(n) == "n3")
            .unwrap();
        let guard = space.mutex(&name).lock().await.unwrap();
        (name, guard)
    });
    wait_until("the moved name on n3", || {
        let v = snapshot(&env);
        v["semaphores"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["name"] == moved.0.as_str() && s["node"] == "/local/n3")
    });
    let v = snapshot(&env);
    assert!(v["target"].as_str().unwrap().contains("space s"), "{v}");
    assert!(v["notes"].as_array().unwrap().is_empty(), "{v}");
    drop(moved);
    drop(guards);
    drop(space);
}

#[test]
fn json_without_once_prints_a_snapshot_each_interval_that_follows_changes() {
    let env = Env::new("top-stream");
    let mut child = env.spawn(&["--json", "top", NODE, "--interval", "200ms", "late"]);
    let lines = common::lines(&mut child);
    let first = common::next_json(&lines);
    assert_eq!(first["semaphores"].as_array().unwrap().len(), 0, "{first}");
    // A semaphore created and held now shows up in a later snapshot.
    let _held = env._rt.block_on(async {
        let client = ydb_coordination::Client::connect(&env.cs).await.unwrap();
        let s = client.session(NODE, SessionOptions::new()).await.unwrap();
        s.create_semaphore("late", 2, b"").await.unwrap();
        let lease = s
            .acquire("late", AcquireOptions::new().count(2))
            .await
            .unwrap();
        (s, lease)
    });
    let deadline = std::time::Instant::now() + common::LIMIT;
    loop {
        assert!(
            std::time::Instant::now() < deadline,
            "the held semaphore never showed"
        );
        let v = common::next_json(&lines);
        let held = v["semaphores"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["name"] == "late" && s["count"] == 2);
        if held {
            break;
        }
    }
    common::signal(&child, nix::sys::signal::Signal::SIGTERM);
    assert!(wait_exit(&mut child).success());
}

#[test]
fn once_on_a_space_whose_layout_cannot_be_read_prints_the_snapshot_and_fails() {
    let env = Env::new("top-no-layout");
    let out = env.run(&[
        "--json",
        "top",
        NODE,
        "--space",
        "s",
        "--once",
        "--timeout",
        "10s",
    ]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["semaphores"].as_array().unwrap().len(), 0);
    assert!(!v["notes"].as_array().unwrap().is_empty(), "{v}");
}

#[test]
fn an_interval_under_a_tenth_of_a_second_is_a_usage_error() {
    let env = Env::new("top-interval");
    for interval in ["0", "1ms", "99ms"] {
        let out = env.run(&["top", NODE, "--once", "--interval", interval]);
        assert_eq!(out.status.code(), Some(2), "{interval}: {out:?}");
    }
}

#[test]
fn the_stream_ends_cleanly_when_its_reader_closes_the_pipe() {
    let env = Env::new("top-pipe");
    let mut child = env.spawn(&["--json", "top", NODE, "--interval", "100ms"]);
    let stdout = child.stdout.take().unwrap();
    // `| head -1`: one line read, then the pipe closed.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let read = std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line);
        let _ = tx.send(read.map(|_| line));
    });
    let line = rx.recv_timeout(common::LIMIT).unwrap().unwrap();
    assert!(serde_json::from_str::<Value>(&line).is_ok(), "{line:?}");
    assert!(wait_exit(&mut child).success());
}

#[test]
fn the_first_streamed_snapshot_is_whole_not_a_node_still_loading() {
    let env = Env::new("top-first");
    let _crowd = crowd(&env);
    announced(&env);
    // `| head -1` at the shortest interval, over a slow network: the reads take several
    // intervals, and that one line must not pass for an idle node.
    env.emulator.net().delay(Duration::from_millis(30));
    for _ in 0..2 {
        let mut child = env.spawn(&["--json", "top", NODE, "--interval", "100ms"]);
        let lines = common::lines(&mut child);
        let first = common::next_json(&lines);
        let semaphores = first["semaphores"].as_array().unwrap();
        assert_eq!(semaphores.len(), SEMAPHORES + 1, "{first}");
        let queue = semaphores.iter().find(|s| s["name"] == "queue").unwrap();
        assert_eq!(queue["queue"], WAITERS, "{queue}");
        common::signal(&child, nix::sys::signal::Signal::SIGTERM);
        assert!(wait_exit(&mut child).success());
    }
}
