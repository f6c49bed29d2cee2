//! Credentials against an emulator that enforces tokens: static tokens, login with
//! user and password, providers, and the typed errors when they are missing or wrong.
#![allow(clippy::unwrap_used)]

use crate::common;

use common::within;
use ydb_coordination::emulator::Emulator;
use ydb_coordination::{Client, ErrorKind, SessionOptions, auth::Credentials, config::NodeConfig};

async fn emulator() -> Emulator {
    within(
        Emulator::builder()
            .node("/local/app")
            .user("root", "secret")
            .token("static-token")
            .start(),
    )
    .await
    .unwrap()
}

async fn connect(emulator: &Emulator, credentials: Credentials) -> Client {
    common::client_with(emulator.connection_string(), true, credentials).await
}

#[tokio::test(start_paused = true)]
async fn anonymous_requests_are_unauthorized() {
    let emulator = emulator().await;
    let client = connect(&emulator, Credentials::anonymous()).await;
    let err = within(client.session("/local/app", SessionOptions::new()))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unauthorized);
    let err = within(client.describe_node("/local/app"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unauthorized);
}

#[tokio::test(start_paused = true)]
async fn a_static_token_is_sent_with_every_call() {
    let emulator = emulator().await;
    let client = connect(&emulator, Credentials::token("static-token")).await;
    within(client.create_node("/local/other", NodeConfig::new()))
        .await
        .unwrap();
    let session = within(client.session("/local/app", SessionOptions::new()))
        .await
        .unwrap();
    within(session.create_semaphore("sem", 1, b""))
        .await
        .unwrap();
    let wrong = connect(&emulator, Credentials::token("wrong")).await;
    let err = within(wrong.session("/local/app", SessionOptions::new()))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unauthorized);
}

#[tokio::test(start_paused = true)]
async fn login_exchanges_user_and_password_for_a_token() {
    let emulator = emulator().await;
    let client = connect(&emulator, Credentials::login("root", "secret")).await;
    let session = within(client.session("/local/app", SessionOptions::new()))
        .await
        .unwrap();
    within(session.create_semaphore("sem", 1, b""))
        .await
        .unwrap();
    // The same token serves reattaches.
    emulator.net().cut();
    within(session.describe_semaphore("sem", Default::default()))
        .await
        .unwrap();

    let bad = connect(&emulator, Credentials::login("root", "nope")).await;
    let err = within(bad.session("/local/app", SessionOptions::new()))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unauthorized);
}

#[tokio::test(start_paused = true)]
async fn a_provider_is_asked_for_the_token() {
    let emulator = emulator().await;
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counter = calls.clone();
    let credentials = Credentials::from_fn(move || {
        counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        async { Ok(Some("static-token".to_string())) }
    });
    let client = connect(&emulator, credentials).await;
    within(client.describe_node("/local/app")).await.unwrap();
    assert!(calls.load(std::sync::atomic::Ordering::SeqCst) >= 1);
    // A provider that fails fails the call with its own error.
    let failing = Credentials::from_fn(|| async {
        Err(ydb_coordination::Error::new(
            ErrorKind::Unauthorized,
            "vault sealed",
        ))
    });
    let client = connect(&emulator, failing).await;
    let err = within(client.describe_node("/local/app"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unauthorized);
}
