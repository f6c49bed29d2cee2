//! Fencing that reaches the resource: two workers credit a ledger in PostgreSQL under one
//! lock; the first stalls past its lease, the second takes over, and PostgreSQL refuses the
//! first one's late write.
//!
//! ```sh
//! cargo run -p ydb-coordination-fence --features postgres --example fenced_ledger
//! ```
//!
//! PostgreSQL from `FENCE_POSTGRES` (a tokio-postgres connection string, default
//! `host=localhost user=postgres dbname=postgres`); the lock on an embedded coordination
//! emulator, or on the YDB that `YDB_CONNECTION_STRING` names.

use std::error::Error;

use tokio_postgres::types::Type;
use tokio_postgres::{Client as Postgres, NoTls};
use ydb_coordination::config::NodeConfig;
use ydb_coordination::emulator::Emulator;
use ydb_coordination::{Client, SessionOptions};
use ydb_coordination_fence::postgres::{PgFence, Sql};
use ydb_coordination_fence::{Outcome, Token};

const CREDIT: &str = "UPDATE ledger_accounts SET balance = balance + $1 WHERE id = 1";

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let postgres = std::env::var("FENCE_POSTGRES")
        .unwrap_or_else(|_| "host=localhost user=postgres dbname=postgres".to_string());
    run(&postgres).await
}

/// The whole story against the PostgreSQL `postgres` names.
pub async fn run(postgres: &str) -> Result<(), Box<dyn Error>> {
    // The lock: a coordination node on YDB, or on an emulator in this process.
    let (connection, _emulator) = match std::env::var("YDB_CONNECTION_STRING") {
        Ok(cs) if !cs.is_empty() => (cs, None),
        _ => {
            let emulator = Emulator::builder().start().await?;
            (emulator.connection_string(), Some(emulator))
        }
    };
    let client = Client::connect(&connection).await?;
    let node = format!("fenced-ledger-{}", std::process::id());
    client.create_node(&node, NodeConfig::new()).await?;

    // The resource: a ledger row, and the fence beside it.
    let (mut db, conn) = tokio_postgres::connect(postgres, NoTls).await?;
    tokio::spawn(conn);
    let fence = PgFence::new();
    fence.setup(&db).await?;
    db.batch_execute(
        "CREATE TABLE IF NOT EXISTS ledger_accounts (id int PRIMARY KEY, balance bigint NOT NULL);
         INSERT INTO ledger_accounts VALUES (1, 0) ON CONFLICT (id) DO UPDATE SET balance = 0",
    )
    .await?;
    // A fresh fence name per run: the fence keeps its marks between runs.
    let name = format!("ledger-{node}");

    let slow = client.session(&node, SessionOptions::new()).await?;
    let slow_guard = slow.mutex("ledger").lock().await?;
    let slow_token = Token::new(slow_guard.fencing_token());
    fence.claim(&db, &name, slow_token).await?.into_result()?;
    let outcome = credit(&fence, &mut db, &name, slow_token, 10).await?;
    println!("slow worker (token {slow_token}) credits 10: {outcome:?}");
    println!("slow worker stalls (a long GC pause) and loses its session");
    slow.close().await;

    let fast = client.session(&node, SessionOptions::new()).await?;
    let fast_guard = fast.mutex("ledger").lock().await?;
    let fast_token = Token::new(fast_guard.fencing_token());
    // Claim on acquire: from here on, no write of an older holder lands.
    fence.claim(&db, &name, fast_token).await?.into_result()?;
    let outcome = credit(&fence, &mut db, &name, fast_token, 5).await?;
    println!("fast worker (token {fast_token}) took over and credits 5: {outcome:?}");

    // The slow worker wakes up and, not checking its lease, credits again.
    let late = credit(&fence, &mut db, &name, slow_token, 10).await?;
    match late {
        Outcome::Stale { current } => {
            println!("slow worker's late credit: refused by PostgreSQL, the fence is at {current}")
        }
        Outcome::Applied => return Err("the stale write was applied".into()),
    }
    let balance: i64 = db
        .query_one("SELECT balance FROM ledger_accounts WHERE id = 1", &[])
        .await?
        .get(0);
    println!("balance: {balance}");
    if balance != 15 {
        return Err(format!("the balance is {balance}, not 15").into());
    }
    fast_guard.unlock().await?;
    fast.close().await;
    drop(slow_guard);
    client.drop_node(&node).await?;
    Ok(())
}

/// Credits `amount` behind the fence: one round trip, all or nothing.
async fn credit(
    fence: &PgFence,
    db: &mut Postgres,
    name: &str,
    token: Token,
    amount: i64,
) -> Result<Outcome, ydb_coordination_fence::Error> {
    let credit = Sql::new(CREDIT).bind(&amount, Type::INT8);
    fence.execute(db, name, token, None, &[credit]).await
}
