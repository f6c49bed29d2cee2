//! The binary at its edges, as separate processes: a command does not outlive a killed
//! `ydb-coord`, the longest names work in every command, `--timeout` is one bound, and a
//! value never published is told from one published empty.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::TcpListener;
use std::time::{Duration, Instant};

use common::*;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// Exit code of `subscribe --once` on a name never published.
const NOT_PUBLISHED: i32 = 3;

/// `(state, process group)` of `pid` from /proc, or `None` when it is gone.
fn stat(pid: i32) -> Option<(char, i32)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = text.rsplit_once(") ")?;
    let mut fields = rest.split(' ');
    let state = fields.next()?.chars().next()?;
    let group = fields.nth(1)?.parse().ok()?;
    Some((state, group))
}

/// The processes of `group` that run (zombies nobody reaped are not counted).
fn live_in_group(group: i32) -> Vec<i32> {
    let mut live = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        if let Some((state, g)) = stat(pid)
            && g == group
            && state != 'Z'
        {
            live.push(pid);
        }
    }
    live
}

/// The pid written (with a newline) to `path`, once it is there.
fn read_pid(path: &str) -> i32 {
    wait_until("the pid file", || {
        std::fs::read_to_string(path).is_ok_and(|s| s.ends_with('\n'))
    });
    std::fs::read_to_string(path)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Waits up to `bound` for `cond`; whether it held.
fn within(bound: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + bound;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_command_does_not_outlive_a_killed_ydb_coord() {
    let env = Env::new("edges-sigkill");
    let pidfile = env.path("pid");
    let script = format!("echo $$ > {pidfile}; exec sleep 1000");
    let mut tool = env.spawn(&[
        "lock",
        NODE,
        "job",
        "--kill-grace",
        "2s",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    let command = read_pid(&pidfile);
    let (_, group) = stat(command).expect("the command runs");
    signal(&tool, Signal::SIGKILL);
    wait_exit(&mut tool);
    // SIGTERM at once (sleep dies of it); the guard leaves with the group.
    let gone = within(Duration::from_secs(5), || live_in_group(group).is_empty());
    let left = live_in_group(group);
    for pid in &left {
        let _ = kill(Pid::from_raw(*pid), Signal::SIGKILL);
    }
    assert!(gone, "still running in the command's group: {left:?}");
}

/// A command that leaves its group (`setsid`, as `timeout` does with `setpgid`) still gets
/// the signals `ydb-coord` forwards.
#[test]
fn a_command_that_leaves_its_group_still_gets_the_forwarded_signals() {
    let env = Env::new("edges-setsid");
    let pidfile = env.path("pid");
    let script = format!("echo $$ > {pidfile}; exec sleep 1000");
    let mut tool = env.spawn(&["lock", NODE, "job", "--", "setsid", "sh", "-c", &script]);
    let command = read_pid(&pidfile);
    let (_, group) = stat(command).expect("the command runs");
    assert_eq!(group, command, "setsid made the command a group of its own");
    signal(&tool, Signal::SIGTERM);
    let status = wait_exit(&mut tool);
    let gone = within(Duration::from_secs(5), || {
        stat(command).is_none_or(|(s, _)| s == 'Z')
    });
    if !gone {
        let _ = kill(Pid::from_raw(command), Signal::SIGKILL);
    }
    assert!(gone, "the command outlived the forwarded SIGTERM");
    assert_eq!(status.code(), Some(128 + 15));
}

#[test]
fn a_normal_end_stops_nothing_and_leaves_no_guard() {
    let env = Env::new("edges-normal");
    let pidfile = env.path("bg");
    // The command leaves a process behind in its group and exits.
    let script = format!("sleep 1000 >/dev/null 2>&1 & echo $! > {pidfile}");
    let o = env.run(&["lock", NODE, "job", "--", "sh", "-c", &script]);
    assert!(o.status.success(), "{}", stderr(&o));
    let background = read_pid(&pidfile);
    let (_, group) = stat(background).expect("the background process runs");
    let only_it = within(Duration::from_secs(5), || {
        live_in_group(group) == [background]
    });
    let left = live_in_group(group);
    let _ = kill(Pid::from_raw(background), Signal::SIGKILL);
    assert!(only_it, "in the command's group after the end: {left:?}");
}

#[test]
fn the_longest_name_works_in_every_command() {
    let env = Env::new("edges-names");
    // 1024 bytes, the longest name the library takes, in two-byte characters.
    let name = "\u{e9}".repeat(512);
    assert_eq!(name.len(), ydb_coordination::config::MAX_NAME_LEN);
    let elected = "\u{e0}".repeat(512);
    let member = "\u{f4}".repeat(512);
    let locked = "\u{ea}".repeat(512);
    let counted = "\u{eb}".repeat(512);
    ok(&env, &["publish", NODE, &name, "v"]);
    assert_eq!(ok(&env, &["subscribe", NODE, &name, "--once"]), "v\n");
    ok(&env, &["lock", NODE, &locked, "--", "true"]);
    ok(&env, &["lock", NODE, &locked, "--shared", "--", "true"]);
    ok(
        &env,
        &["lock", NODE, &counted, "--limit", "2", "--", "true"],
    );
    ok(
        &env,
        &["elect", NODE, &elected, "--data", "a", "--", "true"],
    );
    // The commands that follow until interrupted: each prints its first line, then stops.
    for args in [
        &["--json", "subscribe", NODE, &name][..],
        &["--json", "watch", NODE, &name],
        &["--json", "elect", NODE, &elected, "--observe"],
        &["--json", "group", "join", NODE, &member],
        &["--json", "group", "watch", NODE, &member],
    ] {
        let mut child = env.spawn(args);
        let rx = lines(&mut child);
        let first = rx.recv_timeout(LIMIT);
        signal(&child, Signal::SIGINT);
        let status = wait_exit(&mut child);
        let mut err = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
        assert!(first.is_ok(), "{args:?} printed nothing: {err}");
        assert!(status.success(), "{args:?}: {err}");
    }
}

#[test]
fn timeout_is_one_bound_on_a_silent_endpoint() {
    let env = Env::new("edges-timeout");
    // Accepts connections (the kernel's backlog) and never answers.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let cs = format!("grpc://{}/local", silent.local_addr().unwrap());
    let commands = [
        &["node", "describe", NODE][..],
        &["lock", NODE, "job", "--", "true"],
        &["lock", NODE, "job", "--wait", "1s", "--", "true"],
        &["subscribe", NODE, "config", "--once"],
    ];
    // Each command waits out its timeout: they run side by side, each timed on its own.
    let all: Vec<Vec<&str>> = commands
        .iter()
        .map(|args| [&["-c", cs.as_str(), "--timeout", "3s"][..], args].concat())
        .collect();
    let runs = env.run_side_by_side(&all);
    for (args, (o, took)) in commands.into_iter().zip(runs) {
        // Unreachable is an error (1), never "not obtained in time" (75).
        assert_one_line_error(&o, 1, "within");
        assert!(
            took < Duration::from_millis(5500),
            "{args:?} took {took:?} for --timeout 3s: {}",
            stderr(&o)
        );
    }
}

#[test]
fn never_published_is_told_from_published_empty() {
    let env = Env::new("edges-published");
    let o = env.run(&["subscribe", NODE, "config", "--once"]);
    assert_one_line_error(&o, NOT_PUBLISHED, "nothing was ever published");
    assert_eq!(stdout(&o), "");
    let o = env.run(&["--json", "subscribe", NODE, "config", "--once"]);
    assert_eq!(o.status.code(), Some(NOT_PUBLISHED), "{}", stderr(&o));
    let v = &json_lines(&stdout(&o))[0];
    assert_eq!(v["published"], false, "{v}");
    assert!(v.get("data").is_none(), "{v}");
    // Reading created nothing: it is still never published.
    let o = env.run(&["subscribe", NODE, "config", "--once"]);
    assert_eq!(o.status.code(), Some(NOT_PUBLISHED), "{}", stderr(&o));

    ok(&env, &["publish", NODE, "config", ""]);
    assert_eq!(ok(&env, &["subscribe", NODE, "config", "--once"]), "\n");
    let v = &json(&env, &["subscribe", NODE, "config", "--once"])[0];
    assert_eq!(v["published"], true, "{v}");
    assert_eq!(v["data"], "", "{v}");
}
