//! Errors the client makes itself, before anything reaches a server, and that no retry can
//! change: they end the call (and a session manager) at once, with their own kind, instead of
//! being retried until the budget runs out and reported as a timeout.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::time::Duration;

use common::within;
use tokio::time::Instant;
use ydb_coordination::emulator::Emulator;
use ydb_coordination::{Client, ErrorKind, SessionManager, SessionOptions, auth::Credentials};

const NODE: &str = "/local/app";
/// The connect budget of these tests; "at once" is well under it.
const BUDGET: Duration = Duration::from_secs(10);

/// An emulator, and a client of it whose static token is not a valid header value (it has
/// a line break).
async fn client_with_unsendable_token() -> (Emulator, Client) {
    let emulator = within(Emulator::builder().node(NODE).start())
        .await
        .unwrap();
    let client = within(
        Client::builder(emulator.connection_string())
            .credentials(Credentials::token("secret\nsecond line"))
            .build(),
    )
    .await
    .unwrap();
    (emulator, client)
}

fn options() -> SessionOptions {
    SessionOptions::new().connect_timeout(BUDGET)
}

#[tokio::test(start_paused = true)]
async fn a_token_that_is_not_a_header_value_fails_a_session_start_at_once() {
    let (_emulator, client) = client_with_unsendable_token().await;
    let err = within(client.describe_node(NODE)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);

    let started = Instant::now();
    let err = within(client.session(NODE, options())).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err:?}");
    assert!(started.elapsed() < BUDGET / 10, "{:?}", started.elapsed());
}

#[tokio::test(start_paused = true)]
async fn a_token_that_is_not_a_header_value_stops_a_session_manager_at_once() {
    let (_emulator, client) = client_with_unsendable_token().await;
    let started = Instant::now();
    let manager = SessionManager::new(client, NODE, options());
    let err = within(manager.current()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err:?}");
    assert!(started.elapsed() < BUDGET / 10, "{:?}", started.elapsed());
    assert!(manager.try_current().is_none());
}

#[tokio::test(start_paused = true)]
async fn a_zero_attempt_timeout_is_refused_when_the_client_is_built() {
    let emulator = within(Emulator::builder().node(NODE).start())
        .await
        .unwrap();
    let builder = Client::builder(emulator.connection_string()).attempt_timeout(Duration::ZERO);
    let err = within(builder.build()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    // Any positive one is taken.
    let builder =
        Client::builder(emulator.connection_string()).attempt_timeout(Duration::from_millis(1));
    within(builder.build()).await.unwrap();
}
