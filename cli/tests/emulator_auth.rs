//! `ydb-coord emulator --token` and `--user`: an emulator that enforces authentication, tried
//! with the credentials a real YDB would take, from the SDK environment variables.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;

/// Exit code of a bad command line.
const USAGE: i32 = 2;
/// Exit code of a command that could not be carried out.
const FAILED: i32 = 1;

#[test]
fn the_emulator_accepts_only_its_tokens_and_users() {
    let env = Env::new("emulator-auth");
    let (_server, cs) = serve(
        &env,
        &[
            "--listen",
            "127.0.0.1:0",
            "--node",
            "app",
            "--token",
            "first",
            "--token",
            "second",
            "--user",
            "root:se:cret",
            "--user",
            "guest:",
        ],
    );
    let token = |t: &'static str| [("YDB_ACCESS_TOKEN_CREDENTIALS", t)];
    let user = |name: &'static str, password: &'static str| {
        [
            ("YDB_STATIC_CREDENTIALS_USER", name),
            ("YDB_STATIC_CREDENTIALS_PASSWORD", password),
        ]
    };

    assert_eq!(describe(&env, &cs, &[], &token("first")), Some(0));
    assert_eq!(describe(&env, &cs, &[], &token("second")), Some(0));
    // The password is everything after the first ':'.
    assert_eq!(describe(&env, &cs, &[], &user("root", "se:cret")), Some(0));
    assert_eq!(describe(&env, &cs, &[], &user("guest", "")), Some(0));

    assert_eq!(describe(&env, &cs, &[], &[]), Some(FAILED));
    assert_eq!(describe(&env, &cs, &[], &token("third")), Some(FAILED));
    assert_eq!(describe(&env, &cs, &[], &user("root", "se")), Some(FAILED));
    assert_eq!(describe(&env, &cs, &[], &user("nobody", "")), Some(FAILED));
}

#[test]
fn without_tokens_or_users_the_emulator_checks_nothing() {
    let env = Env::new("emulator-open");
    let (_server, cs) = serve(&env, &["--listen", "127.0.0.1:0", "--node", "app"]);
    assert_eq!(describe(&env, &cs, &[], &[]), Some(0));
    let any = [("YDB_ACCESS_TOKEN_CREDENTIALS", "anything")];
    assert_eq!(describe(&env, &cs, &[], &any), Some(0));
}

#[test]
fn a_user_without_a_password_separator_or_name_is_a_usage_error() {
    let env = Env::new("emulator-bad-user");
    for bad in ["root", ":secret"] {
        let out = env.run(&["emulator", "--listen", "127.0.0.1:0", "--user", bad]);
        assert_eq!(out.status.code(), Some(USAGE), "{bad}: {}", stderr(&out));
        assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
    }
}
