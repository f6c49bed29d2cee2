//! `ydb-coord emulator` serving TLS on several listeners, and clients trusting its CA with
//! `--ca-file` or `YDB_SSL_ROOT_CERTIFICATES_FILE` (the name ydb-go-sdk reads).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../tests/common/certs.rs"]
mod certs;

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use certs::Ca;

const BIN: &str = env!("CARGO_BIN_EXE_ydb-coord");
const LIMIT: Duration = Duration::from_secs(20);

/// A `ydb-coord emulator` child, stopped when dropped.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ydb-coord-tls-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts the emulator and returns it with the connection string it printed.
fn serve(args: &[&str]) -> (Server, String) {
    let mut child = Command::new(BIN)
        .arg("emulator")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
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

fn client(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .env_remove("YDB_CONNECTION_STRING")
        .env_remove("YDB_SSL_ROOT_CERTIFICATES_FILE")
        .env_remove("YDB_ACCESS_TOKEN_CREDENTIALS")
        .env_remove("YDB_STATIC_CREDENTIALS_USER")
        .env_remove("YDB_ANONYMOUS_CREDENTIALS")
        .envs(env.iter().copied())
        .stdin(Stdio::null());
    let mut cmd = assert_cmd::Command::from_std(cmd);
    cmd.timeout(LIMIT);
    cmd.output().unwrap()
}

#[test]
fn the_emulator_serves_tls_on_every_listener_and_clients_trust_its_ca() {
    let dir = scratch("serve");
    let ca = Ca::new("test CA");
    let server = ca.server(&["127.0.0.1"]);
    let (cert, key, ca_file) = (
        dir.join("cert.pem"),
        dir.join("key.pem"),
        dir.join("ca.pem"),
    );
    std::fs::write(&cert, &server.cert_pem).unwrap();
    std::fs::write(&key, &server.key_pem).unwrap();
    std::fs::write(&ca_file, &ca.pem).unwrap();
    let (cert, key, ca_file) = (
        cert.to_str().unwrap(),
        key.to_str().unwrap(),
        ca_file.to_str().unwrap(),
    );
    let second = format!("127.0.0.1:{}", free_port());
    let (_server, cs) = serve(&[
        "--listen",
        "127.0.0.1:0",
        "--listen",
        &second,
        "--tls-cert",
        cert,
        "--tls-key",
        key,
        "--node",
        "app",
    ]);
    assert!(cs.starts_with("grpcs://127.0.0.1:"), "{cs}");

    let describe = |cs: &str, extra: &[&str], env: &[(&str, &str)]| {
        let mut args = vec!["-c", cs];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["node", "describe", "/local/app"]);
        client(&args, env).status.code()
    };
    assert_eq!(describe(&cs, &["--ca-file", ca_file], &[]), Some(0));
    assert_eq!(
        describe(&cs, &[], &[("YDB_SSL_ROOT_CERTIFICATES_FILE", ca_file)]),
        Some(0)
    );
    let on_second = format!("grpcs://{second}/local");
    assert_eq!(
        describe(&on_second, &["--ca-file", ca_file, "--no-discovery"], &[]),
        Some(0)
    );
    // Without the CA only the system roots are trusted.
    assert_eq!(describe(&cs, &["--no-discovery"], &[]), Some(1));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_missing_tls_file_is_a_one_line_error_naming_it() {
    let out = client(
        &[
            "emulator",
            "--listen",
            "127.0.0.1:0",
            "--tls-cert",
            "/nonexistent/cert.pem",
            "--tls-key",
            "/nonexistent/key.pem",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("/nonexistent/cert.pem"), "{err}");
}
