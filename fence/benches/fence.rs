//! What the fence costs: a fenced write against a plain write of the same row, on the same
//! PostgreSQL and the same Redis, each started for the run (see `benches/README.md`).
//!
//! Every row times one client writing one row, again and again, the plain and the fenced
//! write alternating in blocks so that both see the same machine. The "+10 ms RTT" rows run
//! the same writes through a proxy that delays every chunk by 5 ms each way: the round trips
//! then dominate, and the ratio counts them (1.0 for as many as the plain write, 2.0 for
//! twice as many).
//!
//! `cargo bench -p ydb-coordination-fence --all-features --bench fence` for the table;
//! `cargo test` runs it as a smoke run (a tenth of the samples, no judgement of numbers).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_postgres::types::Type;
use tokio_postgres::{Client, NoTls};
use ydb_coordination::FencingToken;
use ydb_coordination_fence::postgres::{PgFence, Sql};
use ydb_coordination_fence::redis::{RedisFence, Writes};
use ydb_coordination_fence::{Outcome, Token};

/// Samples per row in a full run; the smoke run takes a tenth.
const SAMPLES: usize = 2_000;
/// Samples per row over the delayed link (each costs milliseconds).
const DELAYED_SAMPLES: usize = 300;
/// Plain and fenced writes alternate in blocks of this many.
const BLOCK: usize = 50;
/// The delay the proxy adds to every chunk, each way.
const ONE_WAY: Duration = Duration::from_millis(5);

/// The latencies of one kind of write, in microseconds, sorted.
struct Latencies(Vec<f64>);

impl Latencies {
    fn at(&self, q: f64) -> f64 {
        let i = ((self.0.len() as f64 - 1.0) * q).round() as usize;
        self.0.get(i).copied().unwrap_or(f64::NAN)
    }
}

/// Runs `plain` and `fenced` `samples` times each, alternating in blocks; both latencies.
async fn compare<P, F>(samples: usize, mut plain: P, mut fenced: F) -> (Latencies, Latencies)
where
    P: AsyncFnMut(),
    F: AsyncFnMut(),
{
    let (mut a, mut b) = (Vec::with_capacity(samples), Vec::with_capacity(samples));
    // Warm up both (connections, prepared scripts, caches).
    for _ in 0..BLOCK.min(samples) {
        plain().await;
        fenced().await;
    }
    while a.len() < samples {
        for _ in 0..BLOCK.min(samples - a.len()) {
            let t = Instant::now();
            plain().await;
            a.push(t.elapsed().as_secs_f64() * 1e6);
        }
        for _ in 0..BLOCK.min(samples - b.len()) {
            let t = Instant::now();
            fenced().await;
            b.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    a.sort_by(f64::total_cmp);
    b.sort_by(f64::total_cmp);
    (Latencies(a), Latencies(b))
}

/// A TCP proxy to 127.0.0.1:`target` that delivers every chunk `ONE_WAY` after it read it,
/// in order, both ways; its port.
async fn delaying_proxy(target: u16) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = TcpStream::connect(("127.0.0.1", target)).await else {
                continue;
            };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            let (cr, cw) = client.into_split();
            let (sr, sw) = server.into_split();
            tokio::spawn(delayed_copy(cr, sw));
            tokio::spawn(delayed_copy(sr, cw));
        }
    });
    port
}

async fn delayed_copy(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let writer = tokio::spawn(async move {
        while let Some((due, chunk)) = rx.recv().await {
            tokio::time::sleep_until(due.into()).await;
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
    });
    let mut buf = vec![0u8; 64 * 1024];
    while let Ok(n) = from.read(&mut buf).await {
        if n == 0
            || tx
                .send((Instant::now() + ONE_WAY, buf[..n].to_vec()))
                .is_err()
        {
            break;
        }
    }
    drop(tx);
    let _ = writer.await;
}

async fn postgres(port: u16) -> Client {
    let config = format!("host=127.0.0.1 port={port} user=postgres dbname=postgres");
    let (client, connection) = tokio_postgres::connect(&config, NoTls).await.unwrap();
    tokio::spawn(connection);
    client
}

async fn redis(port: u16) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    client.get_multiplexed_async_connection().await.unwrap()
}

/// One row of the table.
struct Row {
    store: &'static str,
    write: &'static str,
    link: &'static str,
    plain: Latencies,
    fenced: Latencies,
}

const UPSERT: &str = "INSERT INTO bench_rows (id, value) VALUES (1, $1) ON CONFLICT (id) DO UPDATE SET value = EXCLUDED.value";

/// PostgreSQL rows over the port `port` (the server's, or the delaying proxy's).
async fn postgres_rows(port: u16, samples: usize, link: &'static str, rows: &mut Vec<Row>) {
    let mut plain_client = postgres(port).await;
    let mut fenced_client = postgres(port).await;
    let fence = PgFence::with_table("bench_fence").unwrap();
    fence.setup(&plain_client).await.unwrap();
    plain_client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS bench_rows (id int PRIMARY KEY, value bigint NOT NULL)",
        )
        .await
        .unwrap();
    let token = Token::new(FencingToken::new(0, 1));
    let value = 7i64;

    let (plain, fenced) = compare(
        samples,
        async || {
            plain_client
                .query_typed(UPSERT, &[(&value, Type::INT8)])
                .await
                .unwrap();
        },
        async || {
            let write = Sql::new(UPSERT).bind(&value, Type::INT8);
            let outcome = fence
                .execute(&mut fenced_client, "bench", token, None, &[write])
                .await
                .unwrap();
            assert_eq!(outcome, Outcome::Applied);
        },
    )
    .await;
    rows.push(Row {
        store: "PostgreSQL",
        write: "one statement: autocommit vs PgFence::execute",
        link,
        plain,
        fenced,
    });

    let (plain, fenced) = compare(
        samples,
        async || {
            let tx = plain_client.transaction().await.unwrap();
            tx.query_typed(UPSERT, &[(&value, Type::INT8)])
                .await
                .unwrap();
            tx.commit().await.unwrap();
        },
        async || {
            let tx = fenced_client.transaction().await.unwrap();
            let params: [(&(dyn tokio_postgres::types::ToSql + Sync), Type); 1] =
                [(&value, Type::INT8)];
            let (admission, written) = futures::join!(
                fence.check(&tx, "bench", token, None),
                tx.query_typed(UPSERT, &params)
            );
            assert!(admission.unwrap().outcome().is_applied());
            written.unwrap();
            tx.commit().await.unwrap();
        },
    )
    .await;
    rows.push(Row {
        store: "PostgreSQL",
        write: "transaction: BEGIN, statement, COMMIT vs check pipelined with it",
        link,
        plain,
        fenced,
    });
}

/// Redis rows over the port `port`.
async fn redis_rows(port: u16, samples: usize, link: &'static str, rows: &mut Vec<Row>) {
    let mut plain_conn = redis(port).await;
    let mut fenced_conn = redis(port).await;
    let fence = RedisFence::new();
    let token = Token::new(FencingToken::new(0, 1));
    let writes = Writes::new().set("{bench}:value", "7");
    let (plain, fenced) = compare(
        samples,
        async || {
            let () = redis::cmd("SET")
                .arg("{bench}:value")
                .arg("7")
                .query_async(&mut plain_conn)
                .await
                .unwrap();
        },
        async || {
            let outcome = fence
                .write(&mut fenced_conn, "{bench}", token, None, &writes)
                .await
                .unwrap();
            assert_eq!(outcome, Outcome::Applied);
        },
    )
    .await;
    rows.push(Row {
        store: "Redis",
        write: "SET vs the fence script (EVALSHA)",
        link,
        plain,
        fenced,
    });
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let scale = if full { 1 } else { 10 };
    let (Some(pg), Some(redis_server)) = (common::postgres(), common::redis()) else {
        println!("fence bench: skipped (PostgreSQL or Redis is not installed)");
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let started = Instant::now();
    let rows = rt.block_on(async {
        let mut rows = Vec::new();
        postgres_rows(pg.port, SAMPLES / scale, "loopback", &mut rows).await;
        redis_rows(redis_server.port, SAMPLES / scale, "loopback", &mut rows).await;
        let pg_delayed = delaying_proxy(pg.port).await;
        let redis_delayed = delaying_proxy(redis_server.port).await;
        postgres_rows(pg_delayed, DELAYED_SAMPLES / scale, "+10 ms RTT", &mut rows).await;
        redis_rows(
            redis_delayed,
            DELAYED_SAMPLES / scale,
            "+10 ms RTT",
            &mut rows,
        )
        .await;
        rows
    });
    println!(
        "fence bench ({}, {} s): latency of one write, µs",
        if full { "full run" } else { "smoke run" },
        started.elapsed().as_secs()
    );
    println!();
    println!(
        "| store | write | link | plain p50 | fenced p50 | ratio p50 | plain p99 | fenced p99 | ratio p99 |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for r in &rows {
        let (p50, f50) = (r.plain.at(0.5), r.fenced.at(0.5));
        let (p99, f99) = (r.plain.at(0.99), r.fenced.at(0.99));
        println!(
            "| {} | {} | {} | {p50:.0} | {f50:.0} | {:.2} | {p99:.0} | {f99:.0} | {:.2} |",
            r.store,
            r.write,
            r.link,
            f50 / p50,
            f99 / p99
        );
    }
}
