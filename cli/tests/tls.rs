//! `ydb-coord emulator` serving TLS on several listeners, and clients trusting its CA with
//! `--ca-file` or `YDB_SSL_ROOT_CERTIFICATES_FILE` (the name ydb-go-sdk reads).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../tests/common/certs.rs"]
mod certs;
mod common;

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Child, Output};

use certs::Ca;
use common::*;

/// A `ydb-coord emulator` child, stopped when dropped.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts `ydb-coord emulator ARGS` and returns it with the connection string it printed.
fn serve(env: &Env, args: &[&str]) -> (Server, String) {
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
fn describe(env: &Env, cs: &str, extra: &[&str], vars: &[(&str, &str)]) -> Option<i32> {
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

#[test]
fn the_emulator_serves_tls_on_every_listener_and_clients_trust_its_ca() {
    let env = Env::new("tls-serve");
    let ca = Ca::new("test CA");
    let server = ca.server(&["127.0.0.1"]);
    let (cert, key, ca_file) = (
        env.path("cert.pem"),
        env.path("key.pem"),
        env.path("ca.pem"),
    );
    std::fs::write(&cert, &server.cert_pem).unwrap();
    std::fs::write(&key, &server.key_pem).unwrap();
    std::fs::write(&ca_file, &ca.pem).unwrap();
    let second = format!("127.0.0.1:{}", free_port());
    let (_server, cs) = serve(
        &env,
        &[
            "--listen",
            "127.0.0.1:0",
            "--listen",
            &second,
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
            "--node",
            "app",
        ],
    );
    assert!(cs.starts_with("grpcs://127.0.0.1:"), "{cs}");

    assert_eq!(describe(&env, &cs, &["--ca-file", &ca_file], &[]), Some(0));
    let by_env = [("YDB_SSL_ROOT_CERTIFICATES_FILE", ca_file.as_str())];
    assert_eq!(describe(&env, &cs, &[], &by_env), Some(0));
    let on_second = format!("grpcs://{second}/local");
    let only_second = ["--ca-file", &ca_file, "--no-discovery"];
    assert_eq!(describe(&env, &on_second, &only_second, &[]), Some(0));
    // Without the CA only the system roots are trusted.
    assert_eq!(describe(&env, &cs, &["--no-discovery"], &[]), Some(1));
}

#[test]
fn a_missing_tls_file_is_a_one_line_error_naming_it() {
    let env = Env::new("tls-missing");
    let out = env.run(&[
        "emulator",
        "--listen",
        "127.0.0.1:0",
        "--tls-cert",
        "/nonexistent/cert.pem",
        "--tls-key",
        "/nonexistent/key.pem",
    ]);
    assert_one_line_error(&out, 1, "/nonexistent/cert.pem");
}

#[test]
fn an_unusable_certificate_is_a_one_line_error_naming_the_tls_files() {
    let env = Env::new("tls-unusable");
    let cert = env.path("cert.pem");
    let key = env.path("key.pem");
    std::fs::write(&cert, "not a certificate").unwrap();
    std::fs::write(&key, "not a key").unwrap();
    let out = env.run(&[
        "emulator",
        "--listen",
        "127.0.0.1:0",
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
    ]);
    // The error is about the certificate, not about the address.
    assert_one_line_error(&out, 1, "TLS");
    assert!(!stderr(&out).contains("127.0.0.1"), "{}", stderr(&out));
}
