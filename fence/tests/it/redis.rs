//! The Redis adapter against a real Redis, started once for this test binary.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use redis::aio::MultiplexedConnection;
use ydb_coordination::FencingToken;
use ydb_coordination_fence::redis::{RedisFence, RedisStore, Writes};
use ydb_coordination_fence::{ErrorKind, Outcome, Token, WriteId, kit};

use crate::common::{self, within};

fn t(order: u64) -> Token {
    Token::new(FencingToken::new(0, order))
}

async fn connect(server: &common::Server) -> MultiplexedConnection {
    let client = redis::Client::open(server.redis_url()).unwrap();
    within(client.get_multiplexed_async_connection())
        .await
        .unwrap()
}

async fn get(conn: &mut MultiplexedConnection, key: &str) -> Option<String> {
    within(redis::cmd("GET").arg(key).query_async(conn))
        .await
        .unwrap()
}

#[tokio::test]
async fn the_store_passes_the_conformance_kit() {
    let Some(server) = common::redis() else {
        return;
    };
    let store = within(RedisStore::connect(&server.redis_url(), RedisFence::new()))
        .await
        .unwrap();
    let report = kit::run(&store).await;
    assert!(report.passed(), "{report}");
}

#[tokio::test]
async fn the_callers_writes_run_after_the_check_and_not_when_stale() {
    let Some(server) = common::redis() else {
        return;
    };
    let mut conn = connect(server).await;
    let fence = RedisFence::new();
    let credit = Writes::new().incr_by("{acct}:balance", 10).command(
        "HSET",
        &["{acct}:log"],
        &[b"t1", b"credit 10"],
    );
    let outcome = within(fence.write(&mut conn, "{acct}", t(1), None, &credit))
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::Applied);
    assert_eq!(
        within(fence.claim(&mut conn, "{acct}", t(2)))
            .await
            .unwrap(),
        Outcome::Applied
    );
    let outcome = within(fence.write(&mut conn, "{acct}", t(1), None, &credit))
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::Stale { current: t(2) });
    assert_eq!(
        get(&mut conn, "{acct}:balance").await.as_deref(),
        Some("10")
    );
    assert_eq!(
        within(fence.mark(&mut conn, "{acct}")).await.unwrap(),
        Some(t(2))
    );
}

#[tokio::test]
async fn a_write_id_is_applied_once_until_it_expires() {
    let Some(server) = common::redis() else {
        return;
    };
    let mut conn = connect(server).await;
    let retention = std::time::Duration::from_secs(60);
    let fence = RedisFence::new().write_id_retention(retention);
    let id = WriteId::random();
    let credit = Writes::new().incr_by("{once}:n", 1);
    for _ in 0..3 {
        let outcome = within(fence.write(&mut conn, "{once}", t(1), Some(id), &credit))
            .await
            .unwrap();
        assert_eq!(outcome, Outcome::Applied);
    }
    assert_eq!(get(&mut conn, "{once}:n").await.as_deref(), Some("1"));
    let id_key = format!("{{once}}:fence:w:{id}");
    let ttl: i64 = within(redis::cmd("PTTL").arg(&id_key).query_async(&mut conn))
        .await
        .unwrap();
    assert!(ttl > 0 && ttl <= 60_000, "{ttl}");
    // Once the id expired, the same write is a new one.
    let () = within(redis::cmd("DEL").arg(&id_key).query_async(&mut conn))
        .await
        .unwrap();
    let outcome = within(fence.write(&mut conn, "{once}", t(1), Some(id), &credit))
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::Applied);
    assert_eq!(get(&mut conn, "{once}:n").await.as_deref(), Some("2"));
}

#[tokio::test]
async fn keys_outside_the_names_slot_are_refused_before_sending() {
    let Some(server) = common::redis() else {
        return;
    };
    let mut conn = connect(server).await;
    let fence = RedisFence::new();
    let elsewhere = Writes::new().set("balance", "1");
    let err = within(fence.write(&mut conn, "{slot}", t(1), None, &elsewhere))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert_eq!(within(fence.mark(&mut conn, "{slot}")).await.unwrap(), None);
}

#[tokio::test]
async fn a_mark_key_written_by_someone_else_is_corrupt_not_overwritten() {
    let Some(server) = common::redis() else {
        return;
    };
    let mut conn = connect(server).await;
    let fence = RedisFence::new();
    let key = RedisFence::mark_key("{foreign}");
    let () = within(redis::cmd("SET").arg(&key).arg("12").query_async(&mut conn))
        .await
        .unwrap();
    let err = within(fence.claim(&mut conn, "{foreign}", t(1)))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Corrupt);
    assert_eq!(get(&mut conn, &key).await.as_deref(), Some("12"));
}
