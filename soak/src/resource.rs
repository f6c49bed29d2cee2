//! The real resource of `--resource postgres`: a PostgreSQL the controller starts, as the
//! fence crate's tests start theirs (its helper, `fence/tests/common/mod.rs`: Debian's
//! binaries, a free loopback port, a temporary directory, the server stopped and the
//! directory removed when the controller exits), to which every fenced write of the workers
//! goes through the fence crate's PostgreSQL adapter, beside the register.
//!
//! A write is one statement ([`WRITE`]): it upserts the name's value and appends a row to
//! `soak_history` (the token, the writer's process, its op and lease), after the fence's
//! check in the same transaction ([`PgFence::execute`]). A stale token aborts the
//! transaction, so the history table holds exactly what PostgreSQL accepted. From the check
//! to the commit the transaction holds the name's fence row (unfenced, its value row), so the
//! rows of one name are numbered (`seq`) in the order they committed. At the end the
//! controller reads the table back into `postgres.jsonl` ([`read_back`]) for the checker
//! (`check/resource.rs`).
//!
//! The broken mode (`--bite unfenced-postgres`) runs the same statement without the check: a
//! stale holder's late write then commits after its successor's, and the checker must say so.

// The fence tests' helper, shared as it is: it panics where a test would fail (PostgreSQL
// missing in CI, or not starting), and this module turns that into the run's error.
#[path = "../../fence/tests/common/mod.rs"]
mod server;

use std::time::Duration;

use tokio::time::timeout;
use tokio_postgres::types::Type;
use tokio_postgres::{Client, NoTls};
use ydb_coordination::FencingToken;
use ydb_coordination_fence::Token as FenceToken;
use ydb_coordination_fence::postgres::{PgFence, Sql};

use crate::history::{Kind, Phase, Recorder, Token};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Where the workers' fenced writes go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub(crate) enum Resource {
    /// The register alone.
    #[default]
    Register,
    /// The register and, beside it, a real PostgreSQL fenced by the fence crate's adapter.
    Postgres,
}

/// The values and the history of accepted writes.
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS soak_values (
    name text PRIMARY KEY,
    value bigint NOT NULL,
    epoch bigint NOT NULL,
    ord bigint NOT NULL,
    process text NOT NULL
);
CREATE TABLE IF NOT EXISTS soak_history (
    seq bigserial PRIMARY KEY,
    name text NOT NULL,
    epoch bigint NOT NULL,
    ord bigint NOT NULL,
    process text NOT NULL,
    op bigint NOT NULL,
    lease bigint NOT NULL,
    value bigint NOT NULL
);";

/// One write: `$1` the name, `$2` the value, `$3` and `$4` the token's epoch and order id,
/// `$5` the writer's process, `$6` its op id, `$7` its lease. The value's upsert comes first,
/// so that the unfenced statement too takes the name's row before its history row is
/// numbered.
const WRITE: &str = "
WITH v AS (
    INSERT INTO soak_values AS s (name, value, epoch, ord, process) VALUES ($1, $2, $3, $4, $5)
    ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value, epoch = EXCLUDED.epoch,
        ord = EXCLUDED.ord, process = EXCLUDED.process
    RETURNING 1
)
INSERT INTO soak_history (name, epoch, ord, process, op, lease, value)
SELECT $1, $3, $4, $5, $6, $7, $2 FROM v";

/// What PostgreSQL accepted, in its order.
const READ_BACK: &str =
    "SELECT name, epoch, ord, process, op, lease, value FROM soak_history ORDER BY seq";

/// The longest a write may take: PostgreSQL is on loopback and never faulted, but a stopped
/// writer's transaction holds its name's row until it goes on.
const CALL_BOUND: Duration = Duration::from_secs(5);
/// The longest the setup or the read-back may take.
const ADMIN_BOUND: Duration = Duration::from_secs(60);

/// Starts this process's PostgreSQL and sets up the fence and the tables; its connection
/// string. `None` when PostgreSQL is not installed, after saying what to install; in CI
/// (`CI=true`) that is an error.
pub(crate) async fn start() -> Result<Option<String>, BoxError> {
    let started =
        tokio::task::spawn_blocking(|| server::postgres().map(server::Server::postgres_config))
            .await;
    // The helper's panic message is on stderr already.
    let Some(config) = started.map_err(|_| "PostgreSQL could not be started (see above)")? else {
        return Ok(None);
    };
    let client = timeout(ADMIN_BOUND, connect(&config))
        .await
        .map_err(|_| "PostgreSQL did not accept a connection in time")??;
    timeout(ADMIN_BOUND, PgFence::new().setup(&client))
        .await
        .map_err(|_| "PostgreSQL did not set up the fence in time")??;
    timeout(ADMIN_BOUND, client.batch_execute(SCHEMA))
        .await
        .map_err(|_| "PostgreSQL did not set up the soak's tables in time")??;
    Ok(Some(config))
}

/// Opens a connection without TLS and drives it on a task of its own.
async fn connect(config: &str) -> Result<Client, BoxError> {
    let (client, connection) = tokio_postgres::connect(config, NoTls).await?;
    tokio::spawn(async move {
        // Its end shows in the client's errors.
        let _ = connection.await;
    });
    Ok(client)
}

/// One fenced write as PostgreSQL keeps it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PgWrite<'a> {
    pub(crate) name: &'a str,
    /// The holder's token; the write number (`[2]`) is the register's alone: a holder's
    /// writes share its token here.
    pub(crate) token: Token,
    pub(crate) process: &'a str,
    pub(crate) op: u64,
    pub(crate) lease: u64,
    pub(crate) value: u64,
}

/// A worker's connection to the resource; reconnects after an error.
#[derive(Debug)]
pub(crate) struct PgWriter {
    config: String,
    fence: PgFence,
    /// False in the broken mode: the write goes without the fence's check.
    fenced: bool,
    client: Option<Client>,
}

impl PgWriter {
    /// A writer to the PostgreSQL of `config` (connects on first use).
    pub(crate) fn new(config: String, fenced: bool) -> Self {
        Self {
            config,
            fence: PgFence::new(),
            fenced,
            client: None,
        }
    }

    /// One write: `Ok(true)` when it committed, `Ok(false)` when the fence refused its token
    /// as stale; an error leaves the outcome unknown.
    pub(crate) async fn write(&mut self, w: &PgWrite<'_>) -> Result<bool, BoxError> {
        match timeout(CALL_BOUND, self.write_once(w)).await {
            Ok(Ok(applied)) => Ok(applied),
            Ok(Err(e)) => {
                self.client = None;
                Err(e)
            }
            Err(_) => {
                self.client = None;
                Err(format!("PostgreSQL did not answer within {CALL_BOUND:?}").into())
            }
        }
    }

    async fn write_once(&mut self, w: &PgWrite<'_>) -> Result<bool, BoxError> {
        if self.client.is_none() {
            self.client = Some(connect(&self.config).await?);
        }
        let Some(client) = self.client.as_mut() else {
            return Err("no connection to PostgreSQL".into());
        };
        let int = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let (value, epoch, ord) = (int(w.value), int(w.token[0]), int(w.token[1]));
        let (op, lease) = (int(w.op), int(w.lease));
        let statement = Sql::new(WRITE)
            .bind(&w.name, Type::TEXT)
            .bind(&value, Type::INT8)
            .bind(&epoch, Type::INT8)
            .bind(&ord, Type::INT8)
            .bind(&w.process, Type::TEXT)
            .bind(&op, Type::INT8)
            .bind(&lease, Type::INT8);
        if !self.fenced {
            client
                .query_typed(statement.text, &statement.params)
                .await?;
            return Ok(true);
        }
        let token = FenceToken::new(FencingToken::new(w.token[0], w.token[1]));
        let outcome = self
            .fence
            .execute(client, w.name, token, None, &[statement])
            .await?;
        Ok(outcome.is_applied())
    }
}

/// Reads back what PostgreSQL accepted, in its order, into `rec` (the history
/// `postgres.jsonl`, process `postgres`); returns how many writes.
pub(crate) async fn read_back(config: &str, rec: &Recorder) -> Result<usize, BoxError> {
    let client = timeout(ADMIN_BOUND, connect(config))
        .await
        .map_err(|_| "PostgreSQL did not accept a connection in time")??;
    let rows = timeout(ADMIN_BOUND, client.query(READ_BACK, &[]))
        .await
        .map_err(|_| "PostgreSQL did not return its history in time")??;
    for row in &rows {
        let int =
            |i: usize| -> Result<u64, BoxError> { Ok(u64::try_from(row.try_get::<_, i64>(i)?)?) };
        let name: String = row.try_get(0)?;
        let process: String = row.try_get(3)?;
        rec.record(
            &rec.event(rec.op(), Kind::Fenced, Phase::Ok)
                .name(&name)
                .token([int(1)?, int(2)?, 0])
                .target(&process)
                .target_op(int(4)?)
                .lease(int(5)?)
                .value(int(6)?),
        );
    }
    Ok(rows.len())
}
