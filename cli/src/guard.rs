//! The guard of a command's process group: a small `ydb-coord __guard` process, started
//! before the command, whose process group the command joins. It stops the group when
//! `ydb-coord` ends without saying so (SIGKILL, a crash), so that a command never outlives
//! the tool that holds its lock.
//!
//! The guard's stdin is a pipe only `ydb-coord` writes to: a line with the command's pid, then
//! `done` once `ydb-coord` has seen the command end (the guard exits and stops nothing). End of
//! file without `done` means `ydb-coord` is gone: SIGTERM to the group, SIGKILL after the
//! grace period, or as soon as the command itself is gone. On its stdout the guard says
//! `ready` once it ignores the signals `ydb-coord` forwards to the group.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{SigSet, Signal, kill, killpg};
use nix::unistd::{Pid, getpgrp};
use tokio::sync::oneshot;
use tokio::time::timeout;

use super::fail::{self, Failure};

/// The hidden subcommand that runs a guard.
pub(crate) const SUBCOMMAND: &str = "__guard";
const READY: &str = "ready";
const DONE: &str = "done";
/// How long the guard may take to start or to exit when told.
const STARTUP: Duration = Duration::from_secs(10);

/// The signals `ydb-coord` forwards to the command's group, which the guard ignores.
const FORWARDED: [Signal; 3] = [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP];

/// Runs the guard (the hidden subcommand): waits for `done` or the end of its stdin; returns
/// the exit code.
pub(crate) fn watch(grace: Duration) -> u8 {
    let mut forwarded = SigSet::empty();
    for sig in FORWARDED {
        forwarded.add(sig);
    }
    if forwarded.thread_block().is_err() {
        return fail::ERROR;
    }
    let mut stdout = std::io::stdout();
    if writeln!(stdout, "{READY}")
        .and_then(|()| stdout.flush())
        .is_err()
    {
        return fail::ERROR;
    }
    let mut command = None;
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        if line == DONE {
            return 0;
        }
        command = line.parse().ok().map(Pid::from_raw);
    }
    stop(getpgrp(), command, grace);
    0
}

/// SIGTERM to `group`; SIGKILL (this process included) after `grace`, or once `command` is
/// gone.
fn stop(group: Pid, command: Option<Pid>, grace: Duration) {
    let _ = killpg(group, Signal::SIGTERM);
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline && command.is_none_or(alive) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = killpg(group, Signal::SIGKILL);
}

/// Whether `pid` runs (a zombie nobody reaped does not).
fn alive(pid: Pid) -> bool {
    if kill(pid, None).is_err() {
        return false;
    }
    // The state follows the parenthesized name in /proc/PID/stat (Linux).
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_none_or(|(_, rest)| !rest.starts_with('Z')),
        Err(_) => true,
    }
}

/// A running guard, from `ydb-coord`'s side.
#[derive(Debug)]
pub(crate) struct Guard {
    child: Child,
    stdin: ChildStdin,
}

impl Guard {
    /// Starts a guard in a process group of its own and waits until it is ready.
    pub(crate) async fn start(grace: Duration) -> Result<Self, Failure> {
        let cannot = |e: &dyn std::fmt::Display| {
            Failure::new(format!(
                "cannot start the process that stops the command if ydb-coord dies: {e}"
            ))
        };
        let mut child = std::process::Command::new(own_binary().map_err(|e| cannot(&e))?)
            .arg(SUBCOMMAND)
            .arg(super::duration::format(grace))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .process_group(0)
            .spawn()
            .map_err(|e| cannot(&e))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(cannot(&"its pipes are missing"));
        };
        let (tx, rx) = oneshot::channel();
        let reader = std::thread::Builder::new().spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        if let Err(e) = reader {
            let _ = child.kill();
            let _ = child.wait();
            return Err(cannot(&e));
        }
        let mut guard = Self { child, stdin };
        match timeout(STARTUP, rx).await {
            Ok(Ok(line)) if line.trim_end() == READY => Ok(guard),
            _ => {
                let _ = guard.child.kill();
                let _ = guard.child.wait();
                Err(cannot(&"it did not report ready"))
            }
        }
    }

    /// The process group the command joins (the guard's own).
    pub(crate) fn group(&self) -> Result<i32, Failure> {
        i32::try_from(self.child.id())
            .map_err(|_| Failure::new("the guard's process id is out of range"))
    }

    /// Tells the guard the command's pid.
    pub(crate) fn arm(&mut self, command: u32) {
        // A guard that is gone has nothing to stop with it.
        let _ = writeln!(self.stdin, "{command}").and_then(|()| self.stdin.flush());
    }

    /// Tells the guard the command ended and waits for it to exit (it stops nothing).
    pub(crate) async fn dismiss(self) {
        let Self {
            mut child,
            mut stdin,
        } = self;
        let _ = writeln!(stdin, "{DONE}").and_then(|()| stdin.flush());
        drop(stdin);
        let pid = child.id();
        let (tx, rx) = oneshot::channel();
        // Without a thread the wait below times out and the guard is killed instead.
        let _ = std::thread::Builder::new().spawn(move || {
            let _ = tx.send(child.wait());
        });
        if timeout(STARTUP, rx).await.is_err()
            && let Ok(pid) = i32::try_from(pid)
        {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

/// The running `ydb-coord` binary (on Linux through /proc, which works even when the file
/// was replaced or removed since, as during an upgrade).
fn own_binary() -> std::io::Result<std::path::PathBuf> {
    let proc = std::path::Path::new("/proc/self/exe");
    if proc.exists() {
        Ok(proc.to_path_buf())
    } else {
        std::env::current_exe()
    }
}
