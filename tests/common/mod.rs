//! Shared helpers of the integration tests: an emulator (or a real YDB when
//! `YDB_CONNECTION_STRING` is set), a client, and bounded waits.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use std::future::IntoFuture;
use std::time::Duration;

use ydb_coordination::emulator::Emulator;
use ydb_coordination::{Client, NodeConfig, Session, SessionOptions, SessionState};

/// The bound on any single wait in a test (paused time makes it free).
pub const T: Duration = Duration::from_secs(600);

/// Awaits `f` or fails the test.
pub async fn within<F: IntoFuture>(f: F) -> F::Output {
    match tokio::time::timeout(T, f).await {
        Ok(v) => v,
        Err(_) => panic!("timed out"),
    }
}

/// An emulator with a node `/local/app` and a client connected to it.
pub struct Env {
    pub emulator: Emulator,
    pub client: Client,
    pub node: String,
}

impl Env {
    pub async fn new() -> Self {
        let emulator = within(Emulator::builder().node("/local/app").start())
            .await
            .unwrap();
        let client = within(Client::connect(&emulator.connection_string()))
            .await
            .unwrap();
        Self {
            emulator,
            client,
            node: "/local/app".to_string(),
        }
    }

    pub async fn session(&self) -> Session {
        self.session_with(SessionOptions::new()).await
    }

    pub async fn session_with(&self, opts: SessionOptions) -> Session {
        within(self.client.session(&self.node, opts)).await.unwrap()
    }
}

/// A real YDB from `YDB_CONNECTION_STRING`, with a fresh node, when one is configured.
pub async fn real_ydb(node: &str) -> Option<(Client, String)> {
    let conn = std::env::var("YDB_CONNECTION_STRING")
        .ok()
        .filter(|s| !s.is_empty())?;
    let client = within(Client::connect(&conn)).await.unwrap();
    let path = format!("{}/{node}-{}", client.database(), std::process::id());
    let _ = within(client.drop_node(&path)).await;
    within(client.create_node(&path, NodeConfig::new()))
        .await
        .unwrap();
    Some((client, path))
}

/// Waits until the session's state satisfies `pred`.
pub async fn wait_state(session: &Session, pred: impl Fn(&SessionState) -> bool) -> SessionState {
    let mut rx = session.state_changes();
    let state = within(rx.wait_for(|s| pred(s))).await.unwrap();
    *state
}
