//! `ydb-coord` with cloud and OAuth 2.0 credentials from the SDK environment variables, against
//! an emulator that accepts only the token a mock IAM, metadata or OAuth 2.0 token endpoint (on
//! loopback, in the test) hands out.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use common::*;
use ydb_coordination::emulator::Emulator;

/// A throwaway key generated for the tests only (shared with the library's tests).
const TEST_ONLY_PRIVATE_KEY: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/data/test-only-rsa-private-key.pem"
));

/// One request a mock endpoint received: the request line, the headers (lower-cased
/// names) and the body.
#[derive(Debug, Clone)]
struct Seen {
    line: String,
    headers: Vec<(String, String)>,
    body: String,
}

/// A one-thread HTTP/1.1 server on loopback answering every request with `200` and `body`;
/// the requests are recorded. It lives as long as the test process.
fn mock_endpoint(body: String) -> (String, Arc<Mutex<Vec<Seen>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let _ = stream.set_read_timeout(Some(LIMIT));
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            if reader.read_line(&mut line).is_err() {
                continue;
            }
            let mut headers = Vec::new();
            loop {
                let mut h = String::new();
                if reader.read_line(&mut h).is_err() || h.trim().is_empty() {
                    break;
                }
                if let Some((k, v)) = h.trim().split_once(':') {
                    headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
                }
            }
            let length = headers
                .iter()
                .find(|(k, _)| k == "content-length")
                .and_then(|(_, v)| v.parse::<usize>().ok())
                .unwrap_or(0);
            let mut buf = vec![0; length];
            let _ = reader.read_exact(&mut buf);
            record.lock().unwrap().push(Seen {
                line: line.trim().to_string(),
                headers,
                body: String::from_utf8_lossy(&buf).into_owned(),
            });
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (format!("http://{addr}"), seen)
}

/// An emulator that accepts only `token`, on the env's runtime.
fn strict_emulator(env: &Env, token: &str) -> Emulator {
    env._rt
        .block_on(Emulator::builder().node(NODE).token(token).start())
        .unwrap()
}

fn describe(env: &Env, emulator: &Emulator, vars: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = env.command(&["node", "describe", NODE]);
    cmd.env("YDB_CONNECTION_STRING", emulator.connection_string());
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let mut cmd = assert_cmd::Command::from_std(cmd);
    cmd.timeout(LIMIT);
    cmd.output().unwrap()
}

#[test]
fn a_service_account_key_file_from_the_environment_is_exchanged_at_the_iam_endpoint() {
    let env = Env::new("sa-key");
    let emulator = strict_emulator(&env, "iam-cli-token");
    let (iam, seen) = mock_endpoint(
        serde_json::json!({"iamToken": "iam-cli-token", "expiresAt": "2999-01-01T00:00:00Z"})
            .to_string(),
    );
    let key = env.path("key.json");
    let json = serde_json::json!({
        "id": "key-cli", "service_account_id": "sa-cli", "private_key": TEST_ONLY_PRIVATE_KEY,
    });
    std::fs::write(&key, json.to_string()).unwrap();

    // Without credentials the emulator refuses; with the key it accepts the IAM token.
    assert_eq!(describe(&env, &emulator, &[]).status.code(), Some(1));
    let iam_url = format!("{iam}/iam/v1/tokens");
    let out = describe(
        &env,
        &emulator,
        &[
            ("YDB_SERVICE_ACCOUNT_KEY_FILE_CREDENTIALS", &key),
            ("YDB_IAM_ENDPOINT", &iam_url),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let seen = seen.lock().unwrap().clone();
    assert!(!seen.is_empty());
    for r in &seen {
        assert_eq!(r.line, "POST /iam/v1/tokens HTTP/1.1");
        let body: serde_json::Value = serde_json::from_str(&r.body).unwrap();
        assert_eq!(body["jwt"].as_str().map(|j| j.split('.').count()), Some(3));
    }
}

#[test]
fn the_metadata_service_from_the_environment_is_asked_with_its_header() {
    let env = Env::new("metadata");
    let emulator = strict_emulator(&env, "md-cli-token");
    let (metadata, seen) = mock_endpoint(
        serde_json::json!({"access_token": "md-cli-token", "expires_in": 3600}).to_string(),
    );
    let url = format!("{metadata}/computeMetadata/v1/instance/service-accounts/default/token");
    let out = describe(
        &env,
        &emulator,
        &[
            ("YDB_METADATA_CREDENTIALS", "1"),
            ("YDB_METADATA_ENDPOINT", &url),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let seen = seen.lock().unwrap().clone();
    assert!(!seen.is_empty());
    for r in &seen {
        assert!(r.line.starts_with("GET /computeMetadata/v1/"), "{}", r.line);
        assert!(
            r.headers
                .contains(&("metadata-flavor".into(), "Google".into()))
        );
    }
}

#[test]
fn an_oauth2_config_file_from_the_environment_is_exchanged_at_its_token_endpoint() {
    let env = Env::new("oauth2");
    let emulator = strict_emulator(&env, "Bearer oauth-cli-token");
    let (endpoint, seen) = mock_endpoint(
        serde_json::json!({
            "access_token": "oauth-cli-token", "token_type": "Bearer", "expires_in": 3600,
        })
        .to_string(),
    );
    let config = env.path("oauth2.json");
    let json = serde_json::json!({
        "token-endpoint": format!("{endpoint}/oauth2/token"),
        "aud": "ydb",
        "subject-credentials": {
            "type": "FIXED", "token": "subject", "token-type": "urn:ietf:params:oauth:token-type:id_token",
        },
    });
    std::fs::write(&config, json.to_string()).unwrap();
    let out = describe(&env, &emulator, &[("YDB_OAUTH2_KEY_FILE", &config)]);
    assert!(out.status.success(), "{}", stderr(&out));
    let seen = seen.lock().unwrap().clone();
    assert!(!seen.is_empty());
    for r in &seen {
        assert_eq!(r.line, "POST /oauth2/token HTTP/1.1");
        assert!(r.headers.contains(&(
            "content-type".into(),
            "application/x-www-form-urlencoded".into()
        )));
        assert!(r.body.contains("subject_token=subject"), "{}", r.body);
        assert!(r.body.contains("audience=ydb"), "{}", r.body);
    }
}

#[test]
fn a_bad_key_file_or_a_bad_oauth2_config_file_is_an_error() {
    // An emulator that allows everything: only the credentials can fail the command.
    let env = Env::new("bad-key");
    let emulator = &env.emulator;
    assert!(describe(&env, emulator, &[]).status.success());
    let key = env.path("broken.json");
    std::fs::write(&key, r#"{"id": "k", "service_account_id": "sa"}"#).unwrap();
    let bad = describe(
        &env,
        emulator,
        &[("YDB_SERVICE_ACCOUNT_KEY_FILE_CREDENTIALS", &key)],
    );
    assert_eq!(bad.status.code(), Some(1));
    // A config without its token endpoint.
    let oauth = describe(&env, emulator, &[("YDB_OAUTH2_KEY_FILE", &key)]);
    assert_eq!(oauth.status.code(), Some(1));
}
