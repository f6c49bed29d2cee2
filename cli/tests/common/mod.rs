//! Shared helpers of the CLI tests: an emulator in the test process, the binary run against
//! it, and bounded waits.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;
use ydb_coordination::emulator::{Emulator, EmulatorBuilder};

pub mod raw;

pub const BIN: &str = env!("CARGO_BIN_EXE_ydb-coord");

/// The binary the tests run: `YDB_COORD_BIN` when set (to run them against another build,
/// e.g. to see a test fail on older code), else the one cargo built.
pub fn bin() -> String {
    std::env::var("YDB_COORD_BIN").unwrap_or_else(|_| BIN.to_string())
}
pub const NODE: &str = "/local/app";
/// The bound on any wait in these tests (they take well under a second each when healthy).
pub const LIMIT: Duration = Duration::from_secs(20);

/// Exit codes documented in `ydb-coord --help`.
pub const NOT_ACQUIRED: i32 = 75;
pub const LEASE_LOST: i32 = 76;

/// An emulator serving `/local/app` on a runtime kept alive for the test, and a scratch
/// directory.
pub struct Env {
    pub emulator: Emulator,
    pub cs: String,
    pub dir: PathBuf,
    pub _rt: tokio::runtime::Runtime,
}

impl Env {
    pub fn new(test: &str) -> Self {
        Self::with(test, |b| b)
    }

    /// As [`Env::new`], with the emulator built by `build` from the usual builder.
    pub fn with(test: &str, build: impl FnOnce(EmulatorBuilder) -> EmulatorBuilder) -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let builder = build(Emulator::builder().node(NODE));
        let emulator = rt.block_on(builder.start()).unwrap();
        let cs = emulator.connection_string();
        let dir = std::env::temp_dir().join(format!("ydb-coord-cli-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self {
            emulator,
            cs,
            dir,
            _rt: rt,
        }
    }

    /// `ydb-coord ARGS` connected to the emulator, with a clean credentials environment.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(bin());
        cmd.args(args)
            .env("YDB_CONNECTION_STRING", &self.cs)
            .env_remove("YDB_ACCESS_TOKEN_CREDENTIALS")
            .env_remove("YDB_STATIC_CREDENTIALS_USER")
            .env_remove("YDB_ANONYMOUS_CREDENTIALS")
            .stdin(Stdio::null());
        for cloud in [
            "YDB_SERVICE_ACCOUNT_KEY_FILE_CREDENTIALS",
            "YDB_SERVICE_ACCOUNT_KEY_CREDENTIALS",
            "YDB_METADATA_CREDENTIALS",
            "YDB_OAUTH2_KEY_FILE",
            "YDB_IAM_ENDPOINT",
            "YDB_METADATA_ENDPOINT",
            "YDB_SSL_ROOT_CERTIFICATES_FILE",
        ] {
            cmd.env_remove(cloud);
        }
        cmd
    }

    /// Runs `ydb-coord ARGS` to completion (bounded).
    pub fn run(&self, args: &[&str]) -> Output {
        let mut cmd = assert_cmd::Command::from_std(self.command(args));
        cmd.timeout(LIMIT);
        cmd.output().unwrap()
    }

    /// Runs each of `runs` to completion side by side (for commands that wait out a
    /// timeout), each with the time it took, in the order given.
    pub fn run_side_by_side(&self, runs: &[Vec<&str>]) -> Vec<(Output, Duration)> {
        std::thread::scope(|s| {
            let handles: Vec<_> = runs
                .iter()
                .map(|args| {
                    s.spawn(move || {
                        let started = Instant::now();
                        let output = self.run(args);
                        (output, started.elapsed())
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    /// Starts `ydb-coord ARGS` in the background with piped output.
    pub fn spawn(&self, args: &[&str]) -> Child {
        self.command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    pub fn path(&self, name: &str) -> String {
        self.dir.join(name).to_string_lossy().into_owned()
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs `ydb-coord ARGS`, which must succeed; its stdout.
pub fn ok(env: &Env, args: &[&str]) -> String {
    let o = env.run(args);
    assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    stdout(&o)
}

/// Runs `ydb-coord --json ARGS`, which must succeed; the objects it printed, one a line.
pub fn json(env: &Env, args: &[&str]) -> Vec<Value> {
    let all = [&["--json"][..], args].concat();
    json_lines(&ok(env, &all))
}

/// The JSON objects in `text`, one a line.
pub fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l:?}: {e}")))
        .collect()
}

/// The JSON objects a run printed on stderr (its `--json` events), one a line.
pub fn stderr_json(o: &Output) -> Vec<Value> {
    json_lines(&stderr(o))
}

/// Waits for `child` to exit, killing it and failing the test after `LIMIT`.
pub fn wait_exit(child: &mut Child) -> ExitStatus {
    let deadline = Instant::now() + LIMIT;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("ydb-coord did not exit within {LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until `cond` holds, failing the test after `LIMIT`.
pub fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + LIMIT;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn signal(child: &Child, sig: Signal) {
    kill(Pid::from_raw(i32::try_from(child.id()).unwrap()), sig).unwrap();
}

/// The lines a child prints on stdout, as they come.
pub fn lines(child: &mut Child) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    let out = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

pub fn next_json(rx: &mpsc::Receiver<String>) -> Value {
    let line = rx.recv_timeout(LIMIT).unwrap();
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON: {line:?}: {e}"))
}

/// Asserts a failed run printed exactly one line, `error: ...`, on stderr.
pub fn assert_one_line_error(o: &Output, code: i32, contains: &str) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(code), "stderr: {err}");
    assert_eq!(err.lines().count(), 1, "not one line: {err:?}");
    assert!(err.starts_with("error: "), "{err:?}");
    assert!(
        err.contains(contains),
        "{err:?} does not mention {contains:?}"
    );
    assert!(!err.contains("panicked"), "{err:?}");
}

/// A `ydb-coord emulator` child, stopped when dropped.
pub struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts `ydb-coord emulator ARGS` and returns it with the connection string it printed.
pub fn serve(env: &Env, args: &[&str]) -> (Server, String) {
    let mut all = vec!["emulator"];
    all.extend_from_slice(args);
    let mut child = env.spawn(&all);
    let stdout = child.stdout.take().unwrap();
    let server = Server(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx
        .recv_timeout(LIMIT)
        .expect("the emulator printed no connection string");
    (server, line.trim().to_string())
}

/// `ydb-coord -c CS EXTRA node describe /local/app` with `vars` set; its exit code.
pub fn describe(env: &Env, cs: &str, extra: &[&str], vars: &[(&str, &str)]) -> Option<i32> {
    let mut args = vec!["-c", cs];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["node", "describe", "/local/app"]);
    let mut cmd = env.command(&args);
    cmd.envs(vars.iter().copied());
    let mut cmd = assert_cmd::Command::from_std(cmd);
    cmd.timeout(LIMIT);
    let out: Output = cmd.output().unwrap();
    out.status.code()
}
