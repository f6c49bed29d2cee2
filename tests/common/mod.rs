//! Shared helpers of the integration tests: an emulator (or a real YDB when
//! `YDB_CONNECTION_STRING` is set), a client, and bounded waits.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use std::future::IntoFuture;
use std::time::Duration;

use ydb_coordination::emulator::{Emulator, FaultProxy};
use ydb_coordination::{
    Client, Session, SessionOptions, auth::Credentials, config::NodeConfig, session::SessionState,
};

/// The bound on any single wait in a test (paused time makes it free).
pub const T: Duration = Duration::from_secs(600);

/// How many tasks the test's runtime has alive (what a held lock may not add to).
pub fn alive_tasks() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

/// Fails the test if more than `extra` tasks are alive than `before` ([`alive_tasks`] taken
/// before `what` was done).
pub fn assert_tasks_at_most(before: usize, extra: usize, what: &str) {
    let after = alive_tasks();
    assert!(
        after <= before + extra,
        "{what} went from {before} to {after} tasks"
    );
}

/// Runs `f` (bounded) on a runtime of its own, on a blocking thread of this one, and then
/// shuts that runtime down: the tasks `f` started there are gone, what it returned stays.
pub async fn on_a_runtime_that_shuts_down<F>(f: F) -> F::Output
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let ran = tokio::task::spawn_blocking(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let out = runtime.block_on(within(f));
        drop(runtime);
        out
    });
    within(ran).await.unwrap()
}

/// Awaits `f` or fails the test.
pub async fn within<F: IntoFuture>(f: F) -> F::Output {
    match tokio::time::timeout(T, f).await {
        Ok(v) => v,
        Err(_) => panic!("timed out"),
    }
}

/// A client of `connection_string` with `credentials` (discovery on or off).
pub async fn client_with(
    connection_string: String,
    discovery: bool,
    credentials: Credentials,
) -> Client {
    within(
        Client::builder(connection_string)
            .discovery(discovery)
            .credentials(credentials)
            .build(),
    )
    .await
    .unwrap()
}

/// A coordination node to test on and a client connected to it: the embedded emulator's
/// `/local/app`, or a fresh node on the real YDB named by `YDB_CONNECTION_STRING`.
pub struct Env {
    /// The emulator. With a real YDB it still runs, but the client does not use it, so
    /// tests that need its fault controls call [`Env::emulated`] first and skip.
    pub emulator: Emulator,
    pub client: Client,
    pub node: String,
    real: bool,
}

impl Env {
    pub async fn new() -> Self {
        let emulator = within(Emulator::builder().node("/local/app").start())
            .await
            .unwrap();
        if let Some((client, node)) = real_ydb("app").await {
            return Self {
                emulator,
                client,
                node,
                real: true,
            };
        }
        let client = within(Client::connect(&emulator.connection_string()))
            .await
            .unwrap();
        Self {
            emulator,
            client,
            node: "/local/app".to_string(),
            real: false,
        }
    }

    /// A client whose connections go through a fault proxy of its own (discovery off, so
    /// it cannot bypass the proxy), for faults that hit one client only.
    pub async fn behind_proxy(&self) -> (FaultProxy, Client) {
        let proxy = within(FaultProxy::start(self.emulator.local_addr()))
            .await
            .unwrap();
        let client = within(
            Client::builder(proxy.connection_string(self.emulator.database()))
                .discovery(false)
                .build(),
        )
        .await
        .unwrap();
        (proxy, client)
    }

    /// A session on the test node through a fault proxy of its own (see
    /// [`Env::behind_proxy`]).
    pub async fn session_behind_proxy(&self) -> (FaultProxy, Session) {
        let (proxy, client) = self.behind_proxy().await;
        let session = within(client.session(&self.node, SessionOptions::new()))
            .await
            .unwrap();
        (proxy, session)
    }

    /// Whether the client talks to the emulator; tests that need its fault controls or
    /// introspection return early (and say so) when it does not.
    pub fn emulated(&self) -> bool {
        if self.real {
            eprintln!("skipped: needs the emulator's fault controls");
        }
        !self.real
    }

    pub async fn session(&self) -> Session {
        self.session_with(SessionOptions::new()).await
    }

    pub async fn session_with(&self, opts: SessionOptions) -> Session {
        within(self.client.session(&self.node, opts)).await.unwrap()
    }
}

/// A real YDB from `YDB_CONNECTION_STRING`, with a fresh node, when one is configured;
/// the test's paused clock is resumed.
pub async fn real_ydb(node: &str) -> Option<(Client, String)> {
    let conn = std::env::var("YDB_CONNECTION_STRING")
        .ok()
        .filter(|s| !s.is_empty())?;
    // A real server answers in real time: a paused clock would jump ahead while the
    // runtime waits for the network and fire every timeout. (Call from paused tests.)
    tokio::time::resume();
    let client = within(Client::connect(&conn)).await.unwrap();
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = format!(
        "{}/ydb-coordination-test-{node}-{}-{n}",
        client.database(),
        std::process::id()
    );
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
