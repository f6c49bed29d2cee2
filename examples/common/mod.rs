//! Where the examples run: a real YDB when `YDB_CONNECTION_STRING` is set, otherwise the
//! embedded emulator.
#![allow(dead_code, unreachable_pub)]

use std::future::Future;
use std::time::Duration;

use ydb_coordination::emulator::Emulator;
use ydb_coordination::{Client, auth::Credentials, config::NodeConfig};

/// A client, the coordination node to use, and the emulator when one is running.
pub struct Setup {
    pub client: Client,
    pub node: String,
    pub emulator: Option<Emulator>,
    /// Where `client` connected, for more clients (one per pod of a fleet).
    pub connection: String,
}

impl Setup {
    /// Another client to the same database, with its own connections.
    pub async fn connect(&self) -> Result<Client, ydb_coordination::Error> {
        connect(&self.connection).await
    }
}

/// A client of `connection`, with the credentials the environment names.
pub async fn connect(connection: &str) -> Result<Client, ydb_coordination::Error> {
    Client::builder(connection)
        .credentials(Credentials::from_env()?)
        .build()
        .await
}

/// Connects and makes a fresh coordination node named `name`.
pub async fn setup(name: &str) -> Result<Setup, Box<dyn std::error::Error>> {
    let (conn, emulator) = match std::env::var("YDB_CONNECTION_STRING") {
        Ok(conn) if !conn.is_empty() => (conn, None),
        _ => {
            let emulator = Emulator::builder().start().await?;
            println!("(embedded emulator at {})", emulator.connection_string());
            (emulator.connection_string(), Some(emulator))
        }
    };
    let client = connect(&conn).await?;
    let node = fresh_node(&client, name).await?;
    Ok(Setup {
        client,
        node,
        emulator,
        connection: conn,
    })
}

/// Makes a fresh coordination node `examples-{name}` in the client's database (dropping the
/// one an earlier run may have left) and returns its path.
pub async fn fresh_node(client: &Client, name: &str) -> Result<String, ydb_coordination::Error> {
    let node = format!("{}/examples-{name}", client.database());
    let _ = client.drop_node(&node).await;
    client.create_node(&node, NodeConfig::new()).await?;
    Ok(node)
}

/// The error type of the examples' steps.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The longest any single step may take before an example gives up.
pub const STEP: Duration = Duration::from_secs(10);

/// Awaits `future`, failing with a message naming `what` after [`STEP`].
pub async fn bounded<F: Future>(what: &str, future: F) -> Result<F::Output, BoxError> {
    tokio::time::timeout(STEP, future)
        .await
        .map_err(|_| format!("timed out after {STEP:?} waiting for {what}").into())
}
