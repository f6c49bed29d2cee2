//! `ydb-coord emulator` serving TLS on several listeners, and clients trusting its CA with
//! `--ca-file` or `YDB_SSL_ROOT_CERTIFICATES_FILE` (the name ydb-go-sdk reads).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../tests/common/certs.rs"]
mod certs;
mod common;

use certs::Ca;
use common::*;

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
