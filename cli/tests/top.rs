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
use serde_json::{Value, json};
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
    // 64-bit numbers are strings of digits.
    assert_eq!(sem["limit"], "4");
    assert_eq!(sem["count"], "4");
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
        .map(|w| w["session_id"].as_str().unwrap().parse().unwrap())
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
            .any(|s| s["name"] == "late" && s["count"] == "2");
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

// ---- Reserved names, complete or it says so, the rows an on-call engineer needs ----

use common::raw::RawSession;
use ydb_coordination::session::ANNOUNCE_SEMAPHORE;

/// `top --once --json` on the node: its exit code and the snapshot.
fn once(env: &Env, extra: &[&str]) -> (Option<i32>, Value) {
    let mut args = vec!["--json", "top", NODE, "--once"];
    args.extend_from_slice(extra);
    let out = env.run(&args);
    let v =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {out:?}"));
    (out.status.code(), v)
}

/// Starts an announcing library session holding `names` (exclusive ephemeral locks); waits
/// until `top` lists every name, and returns the session with its leases.
fn holding(env: &Env, description: &str, names: &[String]) -> (Session, Vec<Lease>) {
    env._rt.block_on(async {
        let client = ydb_coordination::Client::connect(&env.cs).await.unwrap();
        let options = SessionOptions::new()
            .description(description)
            .announce(true);
        let s = client.session(NODE, options).await.unwrap();
        let mut leases = Vec::new();
        for name in names {
            let lock = AcquireOptions::exclusive().ephemeral(true);
            leases.push(s.acquire(name, lock).await.unwrap());
        }
        (s, leases)
    })
}

fn names_of(v: &Value) -> Vec<String> {
    v["semaphores"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn the_reserved_names_cannot_be_locked_created_or_deleted_from_the_shell() {
    let env = Env::new("top-reserved");
    let ran = env.path("ran");
    let touch = format!("touch {ran}");
    for name in [ANNOUNCE_SEMAPHORE, "ydb-coordination:sessions/1/1"] {
        let out = env.run(&["lock", NODE, name, "--no-wait", "--", "sh", "-c", &touch]);
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        assert!(!std::path::Path::new(&ran).exists(), "the command ran");
        let out = env.run(&["semaphore", "create", NODE, name, "--limit", "1"]);
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        let out = env.run(&["semaphore", "delete", NODE, name, "--force", "--yes"]);
        assert_eq!(out.status.code(), Some(1), "{out:?}");
    }
    // The view stays whole.
    let (_s, _leases) = holding(&env, "worker", &["job".to_string()]);
    wait_until("the session's announcement", || {
        let (code, v) = once(&env, &[]);
        code == Some(0) && names_of(&v) == ["job"]
    });
}

#[test]
fn a_view_that_finds_the_announcements_held_or_queued_by_something_else_says_so_and_fails() {
    let env = Env::new("top-intruder");
    let (_s, _leases) = holding(&env, "worker", &["job".to_string()]);
    wait_until("the session's announcement", || {
        let (code, v) = once(&env, &[]);
        code == Some(0) && names_of(&v) == ["job"]
    });
    // A program that is not this library asks for the whole announcement semaphore: it
    // queues behind the announcements, and new sessions can no longer announce.
    let addr = env.emulator.local_addr();
    let _queued = env._rt.block_on(async {
        let mut raw = RawSession::start(addr, NODE).await;
        raw.acquire(1, ANNOUNCE_SEMAPHORE, u64::MAX, true, b"");
        assert!(
            !raw.granted_or_queued(1).await,
            "queued behind the announcements"
        );
        raw
    });
    let (code, v) = once(&env, &[]);
    assert_eq!(code, Some(1), "{v}");
    assert_eq!(v["complete"], false);
    assert!(!v["notes"].as_array().unwrap().is_empty(), "{v}");

    // One holding a unit of it with data that is no announcement: what it uses is unknown.
    let env = Env::new("top-intruder-data");
    let _holder = env._rt.block_on(async {
        let mut raw = RawSession::start(env.emulator.local_addr(), NODE).await;
        raw.acquire(1, ANNOUNCE_SEMAPHORE, 1, true, b"not an announcement");
        assert!(raw.granted_or_queued(1).await);
        raw
    });
    let (code, v) = once(&env, &[]);
    assert_eq!(code, Some(1), "{v}");
    assert_eq!(v["notes"].as_array().unwrap().len(), 1, "{v}");
}

#[test]
fn every_name_a_session_uses_is_shown_however_many() {
    let env = Env::new("top-many");
    let names: Vec<String> = (0..60)
        .map(|i| format!("billing-export-shard-{i:03}"))
        .collect();
    let (_s, _leases) = holding(&env, "exporter", &names);
    wait_until("all 60 names", || {
        let (code, v) = once(&env, &[]);
        code == Some(0) && names_of(&v).len() == 60
    });
    let (code, v) = once(&env, &[]);
    assert_eq!(code, Some(0));
    assert_eq!(v["complete"], true);
    let mut shown = names_of(&v);
    shown.sort();
    assert_eq!(shown, names);
    let sessions = v["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 1);
    assert_eq!(sessions[0]["holds"], 60);
    assert_eq!(sessions[0]["uses"].as_array().unwrap().len(), 60);
}

#[test]
fn an_announcement_that_leaves_names_out_makes_once_fail_with_the_reason() {
    let env = Env::new("top-left-out");
    // A session of an older version whose record left 14 names out.
    let record = b"ydb-coordination announce 1\nd old worker\nn job\n+ 14\n";
    let _old = env._rt.block_on(async {
        let mut raw = RawSession::start(env.emulator.local_addr(), NODE).await;
        raw.acquire(1, ANNOUNCE_SEMAPHORE, 1, true, record);
        assert!(raw.granted_or_queued(1).await);
        raw.acquire(2, "job", u64::MAX, true, b"");
        assert!(raw.granted_or_queued(2).await);
        raw
    });
    let (code, v) = once(&env, &[]);
    assert_eq!(code, Some(1), "{v}");
    assert_eq!(v["complete"], false);
    assert_eq!(names_of(&v), ["job"], "what it did list is shown");
    assert_eq!(v["notes"].as_array().unwrap().len(), 1, "{v}");
    // The text says so too, and fails alike.
    let out = env.run(&["top", NODE, "--once"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(common::stdout(&out).contains("NOTES"));
}

#[test]
fn naming_the_announcement_semaphore_shows_it_and_never_hangs() {
    let env = Env::new("top-name-it");
    let (s, _leases) = holding(&env, "worker", &["job".to_string()]);
    wait_until("the session's announcement", || {
        let (code, v) = once(&env, &[]);
        code == Some(0) && names_of(&v) == ["job"]
    });
    let started = std::time::Instant::now();
    let (code, v) = once(&env, &[ANNOUNCE_SEMAPHORE, "--timeout", "5s"]);
    assert_eq!(code, Some(0), "{v}");
    assert!(started.elapsed() < Duration::from_secs(5));
    let row = &v["semaphores"][0];
    assert_eq!(row["name"], ANNOUNCE_SEMAPHORE);
    let owners: Vec<&str> = row["owners"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["session_id"].as_str().unwrap())
        .collect();
    assert_eq!(owners, [s.id().to_string()]);
}

/// A node with what an on-call engineer looks for: `nightly` held by a `ydb-coord lock`
/// process (its child returned), `export` held by a `ydb-coord lock --lock-delay 30s`
/// process waiting out the delay after a holder that left without unlocking, and `blob`, a
/// persistent semaphore a library session holds with binary data.
struct OnCall {
    nightly: Child,
    export: Child,
    _library: (Session, Lease),
}

impl Drop for OnCall {
    fn drop(&mut self) {
        for child in [&mut self.nightly, &mut self.export] {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn on_call(env: &Env) -> OnCall {
    let nightly = env.spawn(&[
        "lock", NODE, "nightly", "--data", "run 42", "--", "sleep", "60",
    ]);
    let library = env._rt.block_on(async {
        let client = ydb_coordination::Client::connect(&env.cs).await.unwrap();
        let gone = client.session(NODE, SessionOptions::new()).await.unwrap();
        let delay = Duration::from_secs(30);
        // The first holder of `export` leaves without unlocking: the next one waits.
        drop(gone.mutex("export").lock_delay(delay).lock().await.unwrap());
        gone.close().await;
        let s = client
            .session(NODE, SessionOptions::new().announce(true))
            .await
            .unwrap();
        s.create_semaphore("blob", 5, b"").await.unwrap();
        let data = vec![0xff, 0x00, b'a'];
        let lease = s
            .acquire("blob", AcquireOptions::new().count(2).data(data))
            .await
            .unwrap();
        (s, lease)
    });
    let export = env.spawn(&[
        "lock",
        NODE,
        "export",
        "--lock-delay",
        "30s",
        "--",
        "sleep",
        "60",
    ]);
    OnCall {
        nightly,
        export,
        _library: library,
    }
}

fn semaphore<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["semaphores"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {v}"))
}

fn session_of<'a>(v: &'a Value, id: &Value) -> &'a Value {
    v["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["session_id"] == *id)
        .unwrap_or_else(|| panic!("no session {id} in {v}"))
}

#[test]
fn the_rows_say_who_holds_what_since_when_from_where_exactly_for_scripts() {
    let env = Env::new("top-rows");
    let on_call = on_call(&env);
    let ready =
        |v: &Value| {
            ["nightly", "export", "blob"].iter().all(|n| {
                v["semaphores"].as_array().unwrap().iter().any(|s| {
                    s["name"] == *n && s["owners"].as_array().is_some_and(|o| !o.is_empty())
                })
            }) && semaphore(v, "export")["owners"][0]["in_lock_delay"] == true
        };
    wait_until("the three names held, export in its delay", || {
        let (code, v) = once(&env, &[]);
        code == Some(0) && ready(&v)
    });
    let (code, v) = once(&env, &[]);
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(v["complete"], true);
    assert!(v["time"].as_str().unwrap().ends_with('Z'), "{v}");
    assert!(v["time_ms"].as_u64().unwrap() > 1_600_000_000_000);
    let node = &v["nodes"][0];
    assert_eq!(node["node"], NODE);
    assert!(node["rtt_ms"].as_f64().is_some(), "{node}");
    assert_eq!(node["errors"], 0);

    // Who holds `nightly`, from where, since when.
    let nightly = semaphore(&v, "nightly");
    assert_eq!(nightly["limit"], "18446744073709551615", "u64::MAX, exact");
    let owner = &nightly["owners"][0];
    assert_eq!(owner["exact"], true, "{owner}");
    assert!(owner["granted"].as_str().unwrap().ends_with('Z'));
    assert_eq!(
        (&owner["data"], &owner["data_hex"]),
        (&json!("run 42"), &json!("72756e203432"))
    );
    let who = session_of(&v, &owner["session_id"]);
    assert_eq!(who["pid"], on_call.nightly.id());
    assert_eq!(who["tool"], "ydb-coord");
    assert!(!who["host"].as_str().unwrap().is_empty());
    assert_eq!(who["timeout_ms"], 10_000);
    assert!(who["age_ms"].as_u64().is_some() && who["contact_ms_ago"].as_u64().is_some());
    let uses = who["uses"].as_array().unwrap();
    assert!(
        uses.iter()
            .any(|u| u["name"] == "nightly" && u["held"] == true)
    );

    // `export`'s holder waits out its lock delay.
    let export = &semaphore(&v, "export")["owners"][0];
    assert!(export["lock_delay_until"].as_str().is_some(), "{export}");
    assert_eq!(
        session_of(&v, &export["session_id"])["pid"],
        on_call.export.id()
    );

    // Binary data whole, in hex.
    let blob = semaphore(&v, "blob");
    assert_eq!(blob["owners"][0]["data_hex"], "ff0061");
    assert_eq!(blob["owners"][0]["count"], "2");

    // The same numbers for Prometheus.
    let out = env.run(&["top", NODE, "--once", "--prometheus"]);
    assert!(out.status.success(), "{out:?}");
    let text = common::stdout(&out);
    assert!(text.contains(&format!("ydb_coord_top_complete{{target=\"{NODE}\"}} 1")));
    let in_delay = text
        .lines()
        .find(|l| l.starts_with("ydb_coord_owner_in_lock_delay{") && l.contains("export"))
        .unwrap();
    assert!(in_delay.ends_with(" 1"), "{in_delay}");
    let pid = on_call.nightly.id();
    assert!(
        text.lines()
            .any(|l| l.starts_with("ydb_coord_session_info{")
                && l.contains(&format!("pid=\"{pid}\""))),
        "{text}"
    );
    assert!(text.contains("ydb_coord_node_rtt_seconds{node=\"/local/app\"}"));

    // Clearing a stuck name: a script must say so; then it goes.
    let out = env.run(&["semaphore", "delete", NODE, "blob", "--force"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let out = env.run(&["semaphore", "delete", NODE, "blob", "--force", "--yes"]);
    assert!(out.status.success(), "{out:?}");
    let out = env.run(&["semaphore", "describe", NODE, "blob"]);
    assert_eq!(out.status.code(), Some(1));
    // An ephemeral lock cannot be deleted: the error says who to stop instead.
    let out = env.run(&["semaphore", "delete", NODE, "nightly", "--force", "--yes"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
}

#[test]
fn the_live_view_drills_into_a_session_and_force_deletes_a_stuck_name_after_asking() {
    let env = Env::new("top-pty-on-call");
    let on_call = on_call(&env);
    let mut pty = Pty::spawn(&env, &["top", NODE, "--interval", "300ms"]);
    let pid = on_call.nightly.id().to_string();
    pty.wait_for("the three names", |s| {
        s.contains("nightly") && s.contains("export") && s.contains("blob")
    });
    // The sessions: who they are; the selected one's holds below.
    pty.keys("2");
    pty.wait_for("the sessions with their pids", |s| {
        s.contains("HOST") && s.contains(&pid) && s.contains("ydb-coord")
    });
    pty.keys(&format!("/{pid}\r"));
    pty.wait_for("what the lock process holds", |s| {
        s.lines()
            .any(|l| l.trim_start().starts_with("holds") && l.contains("nightly"))
    });
    // The semaphores: `blob` selected, D asks, y deletes.
    // Ctrl-U empties the filter before `blob` is typed.
    pty.keys("1/\u{15}blob\r");
    pty.wait_for("blob selected", |s| s.contains("OWNERS 1"));
    pty.keys("D");
    pty.wait_for("the question", |s| s.contains("force-delete \"blob\""));
    pty.keys("y");
    pty.wait_for("blob deleted", |s| s.contains("deleted \"blob\""));
    pty.keys("q");
    assert!(wait_exit(&mut pty.child).success());
    let out = env.run(&["semaphore", "describe", NODE, "blob"]);
    assert_eq!(out.status.code(), Some(1), "blob is gone");
}

#[test]
fn a_forced_delete_on_a_terminal_says_who_holds_it_and_asks() {
    let env = Env::new("top-pty-delete");
    let on_call = on_call(&env);
    wait_until("blob held", || {
        let (_, v) = once(&env, &["blob"]);
        v["semaphores"][0]["owners"]
            .as_array()
            .is_some_and(|o| o.len() == 1)
    });
    let mut pty = Pty::spawn(&env, &["semaphore", "delete", NODE, "blob", "--force"]);
    pty.wait_for("the question", |s| s.contains("Delete it? [y/N]"));
    assert!(pty.contents().contains("1 owners"), "{}", pty.contents());
    pty.keys("y\r");
    assert!(wait_exit(&mut pty.child).success());
    drop(on_call);
}
