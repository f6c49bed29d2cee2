//! Running a command for `lock`, `elect` and `ratelimit run`: in a process group of its own
//! (its guard's, `guard.rs`, which stops the group if `ydb-coord` dies), with the signals
//! `ydb-coord` receives forwarded to it, stopped (SIGTERM, then SIGKILL) when a token fires,
//! its exit status turned into an exit code (126/127 when it cannot start).

use std::ffi::OsString;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::ExitStatus;
use std::time::Duration;

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::{Pid, getpgid};
use tokio::sync::oneshot;
use tokio::time::{Instant, sleep, sleep_until};
use tokio_util::sync::CancellationToken;

use super::fail::{self, Failure};
use super::guard::Guard;
use super::signals::Signals;

/// How the command ended.
#[derive(Debug)]
pub(crate) struct ChildEnd {
    pub(crate) code: u8,
    /// The token fired while it ran (it was stopped).
    pub(crate) lost: bool,
}

fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(fail::ERROR),
        (None, Some(sig)) => u8::try_from(128 + sig).unwrap_or(fail::ERROR),
        (None, None) => fail::ERROR,
    }
}

/// Sends `sig` to the command's process group, and to the command itself when it is no
/// longer in it (it left with `setsid` or `setpgid`, as `timeout` does, or the group is
/// gone). The command is this process's child and not yet reaped: its pid is its own.
fn signal_group(group: Pid, pid: Pid, sig: Signal) {
    let _ = killpg(group, sig);
    if getpgid(Some(pid)).is_ok_and(|g| g != group) {
        let _ = kill(pid, sig);
    }
}

/// The grace a command without a lease (`ratelimit run`) gets between SIGTERM and SIGKILL
/// when `ydb-coord` dies (`--kill-grace`'s default).
const GRACE_WITHOUT_LEASE: Duration = Duration::from_secs(10);

/// Runs the command in its guard's process group with `env` added; forwards the signals
/// `ydb-coord` receives; when `token` fires, sends SIGTERM, then SIGKILL after `grace` (the
/// guard does the same if `ydb-coord` dies).
pub(crate) async fn run(
    command: &[OsString],
    env: &[(&str, String)],
    token: CancellationToken,
    grace: Duration,
    signals: &mut Signals,
    on_lost: impl FnOnce(),
) -> Result<ChildEnd, Failure> {
    let Some((program, args)) = command.split_first() else {
        return Err(Failure::with_code(fail::USAGE, "no command given after --"));
    };
    let shown = program.to_string_lossy();
    let mut guard = Guard::start(grace).await?;
    let group = match guard.group() {
        Ok(group) => group,
        Err(e) => {
            guard.dismiss().await;
            return Err(e);
        }
    };
    let spawned = std::process::Command::new(program)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .process_group(group)
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            guard.dismiss().await;
            let code = match e.kind() {
                std::io::ErrorKind::NotFound => fail::NOT_FOUND,
                _ => fail::CANNOT_EXECUTE,
            };
            return Err(Failure::with_code(
                code,
                format!("cannot run {shown:?}: {e}"),
            ));
        }
    };
    guard.arm(child.id());
    let group = Pid::from_raw(group);
    // A pid fits in an i32 on every system the tool runs on (`pid_t`).
    let pid = Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX));
    let (tx, mut exited) = oneshot::channel();
    let waiter = std::thread::Builder::new()
        .name("command-wait".into())
        .spawn(move || {
            let _ = tx.send(child.wait());
        });
    if let Err(e) = waiter {
        // The command runs unwatched: the guard stops it once this process ends.
        return Err(Failure::new(format!(
            "cannot start a thread to wait for {shown:?}: {e}"
        )));
    }
    let mut on_lost = Some(on_lost);
    let mut kill_at: Option<Instant> = None;
    let status = loop {
        let kill_timer = async {
            match kill_at {
                Some(at) => sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            status = &mut exited => break status,
            sig = signals.recv() => signal_group(group, pid, sig),
            () = token.cancelled(), if on_lost.is_some() => {
                if let Some(f) = on_lost.take() {
                    f();
                }
                signal_group(group, pid, Signal::SIGTERM);
                kill_at = Some(Instant::now() + grace);
            }
            () = kill_timer => {
                signal_group(group, pid, Signal::SIGKILL);
                kill_at = None;
            }
        }
    };
    // The command ended: the guard leaves the group, so that the group ends with the
    // command's other processes.
    guard.dismiss().await;
    let status = status
        .map_err(|_| Failure::new("lost track of the command"))?
        .map_err(|e| Failure::new(format!("waiting for the command: {e}")))?;
    let lost = on_lost.is_none();
    if lost {
        // The command is gone; whatever else it started in its group gets the rest of
        // the grace period, then SIGKILL.
        let deadline = kill_at.unwrap_or_else(Instant::now);
        while killpg(group, None).is_ok() {
            if Instant::now() >= deadline {
                let _ = killpg(group, Signal::SIGKILL);
                break;
            }
            sleep(Duration::from_millis(50)).await;
        }
    }
    Ok(ChildEnd {
        code: exit_code(status),
        lost,
    })
}

/// Runs the command as [`run`] does, with nothing that stops it but its own end; returns its
/// exit code.
pub(crate) async fn run_to_end(
    command: &[OsString],
    env: &[(&str, String)],
    signals: &mut Signals,
) -> Result<u8, Failure> {
    let never = CancellationToken::new();
    let end = run(command, env, never, GRACE_WITHOUT_LEASE, signals, || {}).await?;
    Ok(end.code)
}
