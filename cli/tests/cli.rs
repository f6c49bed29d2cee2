//! The `ydb-coord` binary against an emulator in the test process: locked commands exclude
//! each other, lease loss stops the command, exit codes, JSON output and one-line errors.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use common::*;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;

fn file_exists(path: &str) -> bool {
    Path::new(path).exists()
}

#[test]
fn two_lock_processes_never_run_their_commands_at_once() {
    let env = Env::new("exclusive");
    let log = env.path("log");
    let script = format!("echo start >> {log}; sleep 0.3; echo end >> {log}");
    let mut children: Vec<Child> = (0..3)
        .map(|_| env.spawn(&["lock", NODE, "job", "--", "sh", "-c", &script]))
        .collect();
    for child in &mut children {
        assert!(wait_exit(child).success());
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let got: Vec<&str> = text.lines().collect();
    assert_eq!(
        got,
        ["start", "end", "start", "end", "start", "end"],
        "{text}"
    );
}

#[test]
fn expired_session_stops_the_command_and_exits_with_lease_lost() {
    let env = Env::new("expire");
    let pidfile = env.path("pid");
    // The command ignores SIGTERM, so it takes the SIGKILL after the grace period.
    let script = format!("trap '' TERM; echo $$ > {pidfile}; while :; do sleep 0.05; done");
    let mut child = env.spawn(&[
        "lock",
        NODE,
        "job",
        "--kill-grace",
        "300ms",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    wait_until("the command to start", || {
        std::fs::read_to_string(&pidfile).is_ok_and(|s| s.ends_with('\n'))
    });
    let ids = env.emulator.session_ids(NODE);
    assert_eq!(ids.len(), 1);
    let started = Instant::now();
    assert!(env.emulator.expire_session(NODE, ids[0]));
    let status = wait_exit(&mut child);
    assert_eq!(status.code(), Some(LEASE_LOST));
    assert!(started.elapsed() < Duration::from_secs(5));
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        kill(Pid::from_raw(pid), None).is_err(),
        "the command is still running"
    );
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(err.contains("may be lost"), "{err}");
    assert!(
        err.lines()
            .last()
            .unwrap_or("")
            .starts_with("error: lost the lock"),
        "{err}"
    );
}

#[test]
fn no_wait_fails_fast_while_another_process_holds_the_lock() {
    let env = Env::new("nowait");
    let marker = env.path("held");
    let script = format!("touch {marker}; sleep 30");
    let mut holder = env.spawn(&["lock", NODE, "job", "--", "sh", "-c", &script]);
    wait_until("the holder's command to start", || file_exists(&marker));

    let started = Instant::now();
    let o = env.run(&["lock", NODE, "job", "--no-wait", "--", "true"]);
    assert_one_line_error(&o, NOT_ACQUIRED, "--no-wait");
    assert!(started.elapsed() < Duration::from_secs(5));

    let o = env.run(&["lock", NODE, "job", "--wait", "200ms", "--", "true"]);
    assert_one_line_error(&o, NOT_ACQUIRED, "within 200ms");

    // SIGTERM to ydb-coord reaches the command; its death by SIGTERM is the exit code.
    signal(&holder, Signal::SIGTERM);
    assert_eq!(wait_exit(&mut holder).code(), Some(128 + 15));
    let o = env.run(&["lock", NODE, "job", "--no-wait", "--", "true"]);
    assert!(o.status.success(), "{}", stderr(&o));
}

/// `ydb-coord lock NODE job -- sh -c SCRIPT`.
fn lock_sh(env: &Env, script: &str) -> std::process::Output {
    env.run(&["lock", NODE, "job", "--", "sh", "-c", script])
}

#[test]
fn command_exit_code_and_environment_are_passed_through() {
    let env = Env::new("exitcode");
    let o = lock_sh(
        &env,
        "echo $YDB_COORD_FENCING_TOKEN $YDB_COORD_SESSION_ID; exit 7",
    );
    assert_eq!(o.status.code(), Some(7), "{}", stderr(&o));
    let out = stdout(&o);
    let fields: Vec<u64> = out.split_whitespace().map(|f| f.parse().unwrap()).collect();
    assert_eq!(fields.len(), 2, "{out}");
    assert!(fields[1] > 0);

    let o = env.run(&["lock", NODE, "job", "--", "no-such-command-ydb-coord"]);
    assert_one_line_error(&o, 127, "no-such-command-ydb-coord");
}

/// `YDB_COORD_FENCE_TOKEN` is the token as the fence stores it, with the node's incarnation:
/// a holder on the node created again (its order ids start at 1) still comes after one on the
/// old node.
#[test]
fn the_fence_token_carries_the_node_incarnation() {
    let env = Env::new("fencetoken");
    let tokens = || {
        let o = lock_sh(&env, "echo $YDB_COORD_FENCING_TOKEN $YDB_COORD_FENCE_TOKEN");
        assert!(o.status.success(), "{}", stderr(&o));
        let out = stdout(&o);
        let fields: Vec<&str> = out.split_whitespace().collect();
        assert_eq!(fields.len(), 2, "{out}");
        let fence = ydb_coordination_fence::Token::from_hex(fields[1]).unwrap();
        assert_eq!(fence.fencing().order.to_string(), fields[0]);
        assert_ne!(fence.node_incarnation(), Default::default());
        fence
    };
    let first = tokens();
    let second = tokens();
    assert!(second > first);
    assert!(env.run(&["node", "drop", NODE]).status.success());
    assert!(env.run(&["node", "create", NODE]).status.success());
    let recreated = tokens();
    assert!(
        recreated.fencing() <= second.fencing(),
        "the order ids start again"
    );
    assert!(recreated > second, "{recreated} after {second}");
}

#[test]
fn counted_lock_admits_up_to_the_limit() {
    let env = Env::new("counted");
    let (a, b) = (env.path("a"), env.path("b"));
    let hold = |marker: &str| format!("touch {marker}; sleep 30");
    let (sa, sb) = (hold(&a), hold(&b));
    let mut first = env.spawn(&["lock", NODE, "pool", "--limit", "2", "--", "sh", "-c", &sa]);
    let mut second = env.spawn(&["lock", NODE, "pool", "--limit", "2", "--", "sh", "-c", &sb]);
    wait_until("both holders to start", || {
        file_exists(&a) && file_exists(&b)
    });
    let o = env.run(&[
        "lock",
        NODE,
        "pool",
        "--limit",
        "2",
        "--no-wait",
        "--",
        "true",
    ]);
    assert_one_line_error(&o, NOT_ACQUIRED, "pool");
    let o = env.run(&["lock", NODE, "pool", "--limit", "3", "--", "true"]);
    assert_one_line_error(&o, 1, "limit 2");
    for child in [&mut first, &mut second] {
        signal(child, Signal::SIGINT);
        assert_eq!(wait_exit(child).code(), Some(128 + 2));
    }
}

#[test]
fn json_output_parses() {
    let env = Env::new("json");
    let o = env.run(&[
        "semaphore",
        "create",
        NODE,
        "pool",
        "--limit",
        "3",
        "--data",
        "d1",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));

    let o = env.run(&[
        "--json",
        "semaphore",
        "describe",
        NODE,
        "pool",
        "--owners",
        "--waiters",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["name"], "pool");
    assert_eq!(v["node"], NODE);
    assert_eq!(v["limit"], 3);
    assert_eq!(v["data"], "d1");
    assert_eq!(v["ephemeral"], false);
    assert!(v["owners"].as_array().unwrap().is_empty());

    let o = env.run(&["--json", "node", "describe", NODE]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["node"], NODE);

    // Lock events go to stderr (stdout belongs to the command), one object per line.
    let o = env.run(&["--json", "lock", NODE, "job", "--", "echo", "out"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "out\n");
    let events = stderr_json(&o);
    assert_eq!(events.len(), 2, "{}", stderr(&o));
    assert_eq!(events[0]["event"], "acquired");
    assert!(events[0]["fencing_token"].as_u64().is_some());
    assert_eq!(events[1]["event"], "exited");
    assert_eq!(events[1]["code"], 0);
}

#[test]
fn bad_input_gives_a_clear_one_line_error() {
    let env = Env::new("bad");
    let o = env.run(&["lock", "/local/nope", "job", "--", "true"]);
    assert_one_line_error(&o, 1, "/local/nope not found");
    let o = env.run(&["node", "describe", "/local/nope"]);
    assert_one_line_error(&o, 1, "/local/nope not found");
    let o = env.run(&["semaphore", "describe", NODE, "x"]);
    assert_one_line_error(&o, 1, r#"semaphore "x" not found on /local/app"#);
    let o = env.run(&["lock", NODE, "job", "--bogus", "--", "true"]);
    assert_one_line_error(&o, 2, "--bogus");
    let o = env.run(&["lock", NODE, "job", "echo", "hi"]);
    assert_one_line_error(&o, 2, "missing `--`");
    let o = env.run(&["lock", NODE, "job"]);
    assert_one_line_error(&o, 2, "missing the command");
    let o = env.run(&["lock", NODE, "job", "--wait", "soon", "--", "true"]);
    assert_one_line_error(&o, 2, "invalid duration");
    let o = env.run(&["lock", NODE, "job", "--wait", "10", "--", "true"]);
    assert_one_line_error(&o, 2, "needs a unit");
    let o = env.run(&[
        "lock", NODE, "job", "--shared", "--count", "2", "--", "true",
    ]);
    assert_one_line_error(&o, 2, "--shared");
    let mut cmd = env.command(&["node", "describe", NODE]);
    cmd.env_remove("YDB_CONNECTION_STRING");
    let o = assert_cmd::Command::from_std(cmd)
        .timeout(LIMIT)
        .output()
        .unwrap();
    assert_one_line_error(&o, 2, "YDB_CONNECTION_STRING");
}

#[test]
fn refused_connection_gives_a_readable_one_line_error() {
    let env = Env::new("refused");
    // Nothing listens on port 1; -c takes precedence over the emulator's connection string.
    let refused = [
        "-c",
        "grpc://127.0.0.1:1/local",
        "node",
        "describe",
        "/local/x",
    ];
    let verbose = [&["--verbose"][..], &refused[..]].concat();
    // Each run retries until its timeout: the two run side by side.
    for (o, _) in env.run_side_by_side(&[refused.to_vec(), verbose]) {
        assert_one_line_error(&o, 1, "connection refused");
        let err = stderr(&o);
        assert!(!err.contains("tonic::"), "{err:?}");
        assert!(!err.contains("code:"), "{err:?}");
    }
}

#[test]
fn node_and_semaphore_commands_round_trip() {
    let env = Env::new("roundtrip");
    let ok = |args: &[&str]| {
        let o = env.run(args);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        stdout(&o)
    };
    ok(&[
        "node",
        "create",
        "/local/n2",
        "--session-grace-period",
        "30s",
    ]);
    let v: Value = serde_json::from_str(&ok(&["--json", "node", "describe", "n2"])).unwrap();
    assert_eq!(v["node"], "/local/n2");
    assert_eq!(v["session_grace_period_ms"], 30_000);
    ok(&["node", "alter", "/local/n2", "--read-consistency", "strict"]);
    let text = ok(&["node", "describe", "/local/n2"]);
    assert!(text.contains("strict"), "{text}");
    ok(&["node", "drop", "/local/n2"]);
    assert_one_line_error(&env.run(&["node", "describe", "/local/n2"]), 1, "not found");

    ok(&[
        "semaphore",
        "create",
        NODE,
        "s",
        "--limit",
        "2",
        "--data",
        "one",
    ]);
    assert_one_line_error(
        &env.run(&["semaphore", "create", NODE, "s", "--limit", "2"]),
        1,
        "already exists",
    );
    ok(&["semaphore", "update", NODE, "s", "--data", "two"]);
    let text = ok(&["semaphore", "describe", NODE, "s"]);
    assert!(text.contains("\"two\"") && text.contains("limit"), "{text}");
    ok(&["semaphore", "delete", NODE, "s"]);
    assert_one_line_error(
        &env.run(&["semaphore", "describe", NODE, "s"]),
        1,
        r#"semaphore "s" not found"#,
    );
}

#[test]
fn elect_runs_the_leader_and_observe_prints_it() {
    let env = Env::new("elect");
    let marker = env.path("leading");
    let script = format!("touch {marker}; sleep 30");
    let mut leader = env.spawn(&[
        "elect", NODE, "boss", "--data", "host-a", "--", "sh", "-c", &script,
    ]);
    wait_until("the leader's command to start", || file_exists(&marker));
    let o = env.run(&[
        "elect",
        NODE,
        "boss",
        "--data",
        "host-b",
        "--no-wait",
        "--",
        "true",
    ]);
    assert_one_line_error(&o, NOT_ACQUIRED, "leadership");

    let mut observer = env.spawn(&["--json", "elect", NODE, "boss", "--observe"]);
    let rx = lines(&mut observer);
    let v = next_json(&rx);
    assert_eq!(v["event"], "leader");
    assert_eq!(v["data"], "host-a");

    signal(&leader, Signal::SIGTERM);
    assert_eq!(wait_exit(&mut leader).code(), Some(128 + 15));
    let v = next_json(&rx);
    assert_eq!(v["event"], "no_leader");
    signal(&observer, Signal::SIGINT);
    assert!(wait_exit(&mut observer).success());
}

#[test]
fn watch_prints_the_description_then_each_change() {
    let env = Env::new("watch");
    let o = env.run(&[
        "semaphore",
        "create",
        NODE,
        "cfg",
        "--limit",
        "1",
        "--data",
        "v1",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let mut watcher = env.spawn(&["--json", "watch", NODE, "cfg"]);
    let rx = lines(&mut watcher);
    let v = next_json(&rx);
    assert_eq!(v["event"], "initial");
    assert_eq!(v["data"], "v1");
    let o = env.run(&["semaphore", "update", NODE, "cfg", "--data", "v2"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v = next_json(&rx);
    assert_eq!(v["event"], "changed");
    assert_eq!(v["data"], "v2");
    signal(&watcher, Signal::SIGTERM);
    assert!(wait_exit(&mut watcher).success());
}

#[test]
fn silent_server_stops_the_command_with_lease_lost() {
    let env = Env::new("stall");
    let marker = env.path("started");
    let script = format!("touch {marker}; sleep 30");
    let mut child = env.spawn(&[
        "--session-timeout",
        "1s",
        "lock",
        NODE,
        "job",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    wait_until("the command to start", || file_exists(&marker));
    let stalled = Instant::now();
    env.emulator.net().stall();
    assert_eq!(wait_exit(&mut child).code(), Some(LEASE_LOST));
    assert!(stalled.elapsed() < Duration::from_secs(8));
}

#[test]
fn counted_lock_without_limit_needs_an_existing_semaphore() {
    let env = Env::new("nolimit");
    let o = env.run(&["lock", NODE, "absent", "--count", "1", "--", "true"]);
    assert_one_line_error(&o, 1, "--limit");
    let o = env.run(&["lock", NODE, "present", "--limit", "2", "--", "true"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = env.run(&["lock", NODE, "present", "--count", "2", "--", "true"]);
    assert!(o.status.success(), "{}", stderr(&o));
}
