//! The PostgreSQL adapter against a real PostgreSQL, started once for this test binary.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use tokio_postgres::types::Type;
use tokio_postgres::{Client, NoTls};
use ydb_coordination::FencingToken;
use ydb_coordination_fence::Admission;
use ydb_coordination_fence::postgres::{PgFence, PgStore, Sql};
use ydb_coordination_fence::{ErrorKind, FencedStore, Outcome, Token, Write, WriteId, kit};

use crate::common::{self, within};

fn t(order: u64) -> Token {
    Token::new(FencingToken::new(0, order))
}

async fn connect(server: &common::Server) -> Client {
    let (client, connection) = within(tokio_postgres::connect(&server.postgres_config(), NoTls))
        .await
        .unwrap();
    tokio::spawn(connection);
    client
}

/// A fence of its own for a test, with an accounts table.
async fn fenced_accounts(client: &Client, table: &str) -> PgFence {
    let fence = PgFence::with_table(table).unwrap();
    within(fence.setup(client)).await.unwrap();
    within(client.batch_execute(&format!(
        "CREATE TABLE IF NOT EXISTS {table}_accounts (id int PRIMARY KEY, balance bigint NOT NULL);
         INSERT INTO {table}_accounts VALUES (1, 0) ON CONFLICT DO NOTHING"
    )))
    .await
    .unwrap();
    fence
}

async fn balance(client: &Client, table: &str) -> i64 {
    within(client.query_one(
        &format!("SELECT balance FROM {table}_accounts WHERE id = 1"),
        &[],
    ))
    .await
    .unwrap()
    .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_passes_the_conformance_kit() {
    let Some(pg) = common::postgres() else { return };
    let store = within(PgStore::connect(&pg.postgres_config(), PgFence::new(), 8))
        .await
        .unwrap();
    let report = kit::run(&store).await;
    assert!(report.passed(), "{report}");
}

#[tokio::test]
async fn a_stale_check_aborts_the_transaction_and_the_statements_sent_with_it() {
    let Some(pg) = common::postgres() else { return };
    let mut client = connect(pg).await;
    let fence = fenced_accounts(&client, "stale_tx").await;
    assert_eq!(
        within(fence.claim(&client, "ledger", t(2))).await.unwrap(),
        Outcome::Applied
    );

    // The stale holder sends its statement before the check's answer comes back.
    let tx = within(client.transaction()).await.unwrap();
    let credit = "UPDATE stale_tx_accounts SET balance = balance + 100 WHERE id = 1";
    let (admission, credited) = within(async {
        futures::join!(
            fence.check(&tx, "ledger", t(1), None),
            tx.execute(credit, &[])
        )
    })
    .await;
    assert!(matches!(admission.unwrap(), Admission::Stale { current } if current == t(2)));
    assert!(credited.is_err(), "the transaction is aborted");
    // COMMIT of an aborted transaction is a rollback.
    within(tx.commit()).await.unwrap();
    assert_eq!(balance(&client, "stale_tx").await, 0);
    assert_eq!(
        within(fence.mark(&client, "ledger")).await.unwrap(),
        Some(t(2))
    );
}

#[tokio::test]
async fn a_granted_transaction_is_the_callers_and_commits_with_the_mark() {
    let Some(pg) = common::postgres() else { return };
    let mut client = connect(pg).await;
    let fence = fenced_accounts(&client, "granted_tx").await;
    let Admission::Granted(tx) = within(fence.begin(&mut client, "ledger", t(5), None))
        .await
        .unwrap()
    else {
        panic!("a first token is granted");
    };
    within(tx.execute(
        "UPDATE granted_tx_accounts SET balance = 7 WHERE id = 1",
        &[],
    ))
    .await
    .unwrap();
    within(tx.commit()).await.unwrap();
    assert_eq!(balance(&client, "granted_tx").await, 7);
    assert_eq!(
        within(fence.mark(&client, "ledger")).await.unwrap(),
        Some(t(5))
    );

    // Rolled back, the check leaves no mark behind.
    let Admission::Granted(tx) = within(fence.begin(&mut client, "ledger", t(9), None))
        .await
        .unwrap()
    else {
        panic!("a greater token is granted");
    };
    within(tx.rollback()).await.unwrap();
    assert_eq!(
        within(fence.mark(&client, "ledger")).await.unwrap(),
        Some(t(5))
    );
}

#[tokio::test]
async fn a_failed_statement_commits_nothing_not_even_the_mark() {
    let Some(pg) = common::postgres() else { return };
    let mut client = connect(pg).await;
    let fence = fenced_accounts(&client, "failed_stmt").await;
    let bad = Sql::new("UPDATE failed_stmt_accounts SET balance = 1 / 0 WHERE id = 1");
    let err = within(fence.execute(&mut client, "ledger", t(3), None, &[bad]))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Store);
    assert_eq!(within(fence.mark(&client, "ledger")).await.unwrap(), None);
    // The connection is usable again: the transaction ended.
    let amount = 4i64;
    let good = Sql::new("UPDATE failed_stmt_accounts SET balance = balance + $1 WHERE id = 1")
        .bind(&amount, Type::INT8);
    let outcome = within(fence.execute(&mut client, "ledger", t(3), None, &[good]))
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::Applied);
    assert_eq!(balance(&client, "failed_stmt").await, 4);
}

#[tokio::test]
async fn a_replayed_write_id_applies_its_statements_once() {
    let Some(pg) = common::postgres() else { return };
    let mut client = connect(pg).await;
    let fence = fenced_accounts(&client, "replay").await;
    let id = WriteId::random();
    let credit = Sql::new("UPDATE replay_accounts SET balance = balance + 10 WHERE id = 1");
    let credit_once = async |client: &mut Client| {
        within(fence.execute(
            client,
            "ledger",
            t(1),
            Some(id),
            std::slice::from_ref(&credit),
        ))
        .await
        .unwrap()
    };
    for _ in 0..3 {
        assert_eq!(credit_once(&mut client).await, Outcome::Applied);
    }
    assert_eq!(balance(&client, "replay").await, 10);
    assert!(matches!(
        within(fence.begin(&mut client, "ledger", t(1), Some(id)))
            .await
            .unwrap(),
        Admission::Replayed
    ));
    // Pruned, the id is forgotten: the same write applies again.
    assert_eq!(
        within(fence.prune(&client, Duration::ZERO)).await.unwrap(),
        1
    );
    assert_eq!(credit_once(&mut client).await, Outcome::Applied);
    assert_eq!(balance(&client, "replay").await, 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_holder_waits_for_the_older_transaction_and_commits_after_it() {
    let Some(pg) = common::postgres() else { return };
    let mut older = connect(pg).await;
    let mut newer = connect(pg).await;
    let fence = fenced_accounts(&older, "order").await;
    let Admission::Granted(tx) = within(fence.begin(&mut older, "ledger", t(1), None))
        .await
        .unwrap()
    else {
        panic!("granted");
    };
    let set = |v: i64| format!("UPDATE order_accounts SET balance = {v} WHERE id = 1");
    let newer_write = {
        let fence = fence.clone();
        let stmt = set(2);
        tokio::spawn(async move {
            let sql = Sql::new(&stmt);
            fence
                .execute(&mut newer, "ledger", t(2), None, &[sql])
                .await
        })
    };
    // The newer holder's check waits on the name's row, held by the older transaction.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!newer_write.is_finished());
    within(tx.execute(&set(1), &[])).await.unwrap();
    within(tx.commit()).await.unwrap();
    let outcome = within(newer_write).await.unwrap().unwrap();
    assert_eq!(outcome, Outcome::Applied);
    assert_eq!(balance(&older, "order").await, 2);
    let store_read = within(fence.mark(&older, "ledger")).await.unwrap();
    assert_eq!(store_read, Some(t(2)));
}

#[tokio::test]
async fn the_store_reads_what_it_wrote() {
    let Some(pg) = common::postgres() else { return };
    let store = within(PgStore::connect(
        &pg.postgres_config(),
        PgFence::with_table("reads").unwrap(),
        1,
    ))
    .await
    .unwrap();
    assert_eq!(
        within(store.read("nothing")).await.unwrap(),
        Default::default()
    );
    let outcome = within(store.write("x", t(1), Write::new(b"\x00\xff")))
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::Applied);
    let record = within(store.read("x")).await.unwrap();
    assert_eq!(
        (record.mark, record.value.as_deref()),
        (Some(t(1)), Some(&b"\x00\xff"[..]))
    );
}

/// `examples/fenced-credit.sh`, the shell recipe, with a token: its exit status.
fn run_recipe(pg: &common::Server, token: Token) -> std::process::ExitStatus {
    let psql = common::psql().expect("psql beside the server");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/fenced-credit.sh");
    let path = format!(
        "{}:{}",
        psql.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    std::process::Command::new("sh")
        .arg(script)
        .env("PATH", path)
        .env("YDB_COORD_FENCE_TOKEN", token.to_hex())
        .env("PGHOST", "127.0.0.1")
        .env("PGPORT", pg.port.to_string())
        .env("PGUSER", "postgres")
        .env("PGDATABASE", "postgres")
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap()
}

#[tokio::test]
async fn the_shell_recipe_commits_with_the_current_token_and_not_with_a_stale_one() {
    let Some(pg) = common::postgres() else { return };
    let client = connect(pg).await;
    let fence = PgFence::new();
    within(fence.setup(&client)).await.unwrap();
    within(client.batch_execute(
        "CREATE TABLE IF NOT EXISTS accounts (id int PRIMARY KEY, balance bigint NOT NULL);
         INSERT INTO accounts VALUES (1, 0) ON CONFLICT DO NOTHING",
    ))
    .await
    .unwrap();
    let newer = Token::new(FencingToken::new(0, u64::MAX));
    assert_eq!(
        within(fence.claim(&client, "ledger", newer)).await.unwrap(),
        Outcome::Applied
    );
    let balance = async || -> i64 {
        within(client.query_one("SELECT balance FROM accounts WHERE id = 1", &[]))
            .await
            .unwrap()
            .get(0)
    };

    let stale = tokio::task::spawn_blocking(move || run_recipe(pg, t(1)));
    assert_eq!(
        within(stale).await.unwrap().code(),
        Some(3),
        "psql's ON_ERROR_STOP"
    );
    assert_eq!(balance().await, 0);
    let current = tokio::task::spawn_blocking(move || run_recipe(pg, newer));
    assert!(within(current).await.unwrap().success());
    assert_eq!(balance().await, 10);
}

#[allow(dead_code, unreachable_pub)]
#[path = "../../examples/fenced_ledger.rs"]
mod fenced_ledger;

/// The example program, against this binary's PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_runs_against_the_real_server() {
    let Some(pg) = common::postgres() else { return };
    within(fenced_ledger::run(&pg.postgres_config()))
        .await
        .unwrap();
}

/// Two retries of one write in flight at once (the first's outcome was lost, the caller
/// retried on another connection): the second waits for the first's commit and is told its
/// write was applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_retries_of_one_write_at_once_apply_it_once() {
    let Some(pg) = common::postgres() else { return };
    let mut first = connect(pg).await;
    let mut second = connect(pg).await;
    let fence = fenced_accounts(&first, "twice").await;
    let id = WriteId::random();
    let Admission::Granted(tx) = within(fence.begin(&mut first, "ledger", t(1), Some(id)))
        .await
        .unwrap()
    else {
        panic!("the first attempt is granted");
    };
    let retry = {
        let fence = fence.clone();
        tokio::spawn(async move {
            let credit = Sql::new("UPDATE twice_accounts SET balance = balance + 10 WHERE id = 1");
            fence
                .execute(&mut second, "ledger", t(1), Some(id), &[credit])
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!retry.is_finished(), "the retry waits on the name's row");
    within(tx.execute(
        "UPDATE twice_accounts SET balance = balance + 10 WHERE id = 1",
        &[],
    ))
    .await
    .unwrap();
    within(tx.commit()).await.unwrap();
    assert_eq!(within(retry).await.unwrap().unwrap(), Outcome::Applied);
    assert_eq!(balance(&first, "twice").await, 10);
}
