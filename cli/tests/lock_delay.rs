//! `ydb-coord lock --lock-delay` and the library's lock-delay mutex on the same name, with
//! real processes both ways: after a holder that left without unlocking (a killed process, a
//! session closed under the lock), the next holder starts the delay after its grant; after a
//! clean release at once. A plain lock and a lock-delay lock on one name refuse each other,
//! naming the other mode: exit code 2 from the shell, `ErrorKind::ModeMismatch` in the
//! library.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::BufRead;
use std::time::{Duration, Instant};

use common::{Env, NODE, wait_exit, wait_until};
use nix::sys::signal::Signal;
use ydb_coordination::config::DescribeOptions;
use ydb_coordination::{Client, ErrorKind, Session, SessionOptions};

const DELAY: Duration = Duration::from_secs(3);

fn session(env: &Env) -> Session {
    env._rt.block_on(async {
        let client = Client::connect(&env.cs).await.unwrap();
        client.session(NODE, SessionOptions::new()).await.unwrap()
    })
}

/// Whether session `id` owns `name`.
fn owns(env: &Env, observer: &Session, name: &str, id: Option<u64>) -> bool {
    env._rt.block_on(async {
        let d = observer
            .describe_semaphore(name, DescribeOptions::new().owners(true))
            .await;
        d.is_ok_and(|d| {
            d.owners
                .iter()
                .any(|o| id.is_none_or(|id| o.session_id == id))
        })
    })
}

/// `ydb-coord GLOBAL lock NODE job --lock-delay 3s -- COMMAND`, started.
fn delayed(env: &Env, global: &[&str], command: &[&str]) -> std::process::Child {
    let mut args = global.to_vec();
    args.extend(["lock", NODE, "job", "--lock-delay", "3s", "--"]);
    args.extend_from_slice(command);
    env.spawn(&args)
}

#[test]
fn a_killed_shell_holder_makes_the_library_wait_the_delay_and_a_clean_release_does_not() {
    let env = Env::new("delay-shell-killed");
    let observer = session(&env);
    // The command runs once the guard is handed over, its marker written.
    let running = env.path("running");
    let command = format!("touch {running}; sleep 60");
    let mut holder = delayed(&env, &["--session-timeout", "1s"], &["sh", "-c", &command]);
    wait_until("the shell's command runs", || {
        std::path::Path::new(&running).exists()
    });
    assert!(owns(&env, &observer, "job", None));
    common::signal(&holder, Signal::SIGKILL);
    let killed = Instant::now();
    wait_exit(&mut holder);
    let next = session(&env);
    let guard = env._rt.block_on(async {
        tokio::time::timeout(common::LIMIT, next.mutex("job").lock_delay(DELAY).lock())
            .await
            .unwrap()
            .unwrap()
    });
    // Granted once the killed holder's session expired, handed over the delay after that.
    assert!(killed.elapsed() >= DELAY, "{:?}", killed.elapsed());
    // A clean unlock: the shell's next lock starts at once.
    env._rt.block_on(guard.unlock()).unwrap();
    let started = Instant::now();
    let out = env.run(&["lock", NODE, "job", "--lock-delay", "3s", "--", "true"]);
    assert!(out.status.success(), "{out:?}");
    assert!(started.elapsed() < DELAY, "{:?}", started.elapsed());
    // And the shell's clean release lets the library in at once.
    let started = Instant::now();
    let guard = env._rt.block_on(async {
        tokio::time::timeout(common::LIMIT, next.mutex("job").lock_delay(DELAY).lock())
            .await
            .unwrap()
            .unwrap()
    });
    assert!(started.elapsed() < DELAY, "{:?}", started.elapsed());
    env._rt.block_on(guard.unlock()).unwrap();
}

#[test]
fn a_library_holder_that_left_without_unlocking_makes_the_shell_wait_the_delay() {
    let env = Env::new("delay-library-left");
    let gone = session(&env);
    env._rt.block_on(async {
        let guard = gone.mutex("job").lock_delay(DELAY).lock().await.unwrap();
        // The session ends under the lock: no clean release is recorded.
        gone.close().await;
        assert!(guard.is_lost());
    });
    let left = Instant::now();
    let mut child = delayed(&env, &[], &["echo", "started"]);
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "started");
    assert!(left.elapsed() >= DELAY, "{:?}", left.elapsed());
    assert!(wait_exit(&mut child).success());
}

#[test]
fn a_plain_lock_and_a_lock_delay_lock_refuse_each_other_naming_the_other_mode() {
    let env = Env::new("delay-modes");
    let library = session(&env);
    // The library's lock-delay mutex holds `delayed`: a plain shell lock is refused.
    let guard = env
        ._rt
        .block_on(library.mutex("delayed").lock_delay(DELAY).lock())
        .unwrap();
    let out = env.run(&["lock", NODE, "delayed", "--no-wait", "--", "true"]);
    common::assert_one_line_error(&out, 2, "--lock-delay");
    // Released: still a lock-delay lock's name (its semaphore stays).
    env._rt.block_on(guard.unlock()).unwrap();
    let out = env.run(&["lock", NODE, "delayed", "--", "true"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");

    // A plain library lock holds `plain`: a shell lock with a delay is refused.
    let plain = env._rt.block_on(library.mutex("plain").lock()).unwrap();
    let out = env.run(&["lock", NODE, "plain", "--lock-delay", "2s", "--", "true"]);
    common::assert_one_line_error(&out, 2, "without --lock-delay");
    drop(plain);

    // A shell lock with a delay holds `shell`: the library's plain mutex is refused by kind.
    let observer = session(&env);
    let mut holder = env.spawn(&[
        "lock",
        NODE,
        "shell",
        "--lock-delay",
        "2s",
        "--",
        "sleep",
        "60",
    ]);
    wait_until("the shell holds shell", || {
        owns(&env, &observer, "shell", None)
    });
    let refused = env._rt.block_on(library.mutex("shell").try_lock());
    assert_eq!(
        refused.err().map(|e| e.kind()),
        Some(ErrorKind::ModeMismatch)
    );
    common::signal(&holder, Signal::SIGTERM);
    wait_exit(&mut holder);
}
