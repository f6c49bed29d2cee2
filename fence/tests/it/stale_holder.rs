//! A stale holder with real processes against a real PostgreSQL: holder A takes the lock and
//! claims the fence, is SIGSTOPped past its lease; holder B gets the lock (A's session expired
//! on the coordination service), claims and writes; A resumes and writes as if it still held
//! the lock, and the server refuses it as stale. The holders are this test binary run again
//! (`holder_process`), the coordination service an emulator in this process on a loopback port.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio_postgres::NoTls;
use tokio_postgres::types::Type;
use ydb_coordination::config::NodeConfig;
use ydb_coordination::emulator::Emulator;
use ydb_coordination::{Client, SessionOptions};
use ydb_coordination_fence::postgres::{PgFence, Sql};
use ydb_coordination_fence::{Outcome, Token};

use crate::common::{self, within};

/// The fence's table, and the values it protects (`<table>_ledger (name, holder)`).
const TABLE: &str = "stale_holder";
/// The variable that makes [`holder_process`] a holder: `<connection string> <PostgreSQL
/// config> <holder name>`, tab-separated.
const HOLDER: &str = "FENCE_TEST_HOLDER";

/// A holder process and its line protocol: it prints `holder: acquired <token>`, then
/// `holder: outcome applied` or `holder: outcome stale <token>` after each `write` it reads,
/// and ends at `exit`.
struct Holder {
    child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl Holder {
    fn spawn(connection: &str, pg: &str, name: &str) -> Self {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "stale_holder::holder_process",
                "--exact",
                "--ignored",
                "--nocapture",
            ])
            .env(HOLDER, format!("{connection}\t{pg}\t{name}"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        Self {
            child,
            stdin,
            stdout,
        }
    }

    fn pid(&self) -> Pid {
        Pid::from_raw(i32::try_from(self.child.id().unwrap()).unwrap())
    }

    /// The next line the holder says (`holder: ` taken off).
    async fn says(&mut self) -> String {
        loop {
            let line = within(self.stdout.next_line()).await.unwrap();
            let line = line.expect("the holder ended before it said what it had to");
            if let Some(said) = line.strip_prefix("holder: ") {
                return said.to_string();
            }
        }
    }

    async fn tell(&mut self, what: &str) {
        within(self.stdin.write_all(format!("{what}\n").as_bytes()))
            .await
            .unwrap();
    }

    async fn token(&mut self) -> Token {
        let said = self.says().await;
        let hex = said.strip_prefix("acquired ").expect(&said);
        Token::from_hex(hex).unwrap()
    }

    async fn write(&mut self) -> String {
        self.tell("write").await;
        self.says().await
    }

    async fn exit(mut self) {
        self.tell("exit").await;
        let status = within(self.child.wait()).await.unwrap();
        assert!(status.success(), "{status}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_stopped_past_its_lease_is_refused_by_the_real_server() {
    let Some(pg) = common::postgres() else { return };
    let emulator = within(Emulator::builder().start()).await.unwrap();
    let connection = emulator.connection_string();
    let client = within(Client::connect(&connection)).await.unwrap();
    within(client.create_node("fenced", NodeConfig::new()))
        .await
        .unwrap();
    let (db, conn) = within(tokio_postgres::connect(&pg.postgres_config(), NoTls))
        .await
        .unwrap();
    tokio::spawn(conn);
    let fence = PgFence::with_table(TABLE).unwrap();
    within(fence.setup(&db)).await.unwrap();
    within(db.batch_execute(&format!(
        "CREATE TABLE IF NOT EXISTS {TABLE}_ledger (name text PRIMARY KEY, holder text NOT NULL)"
    )))
    .await
    .unwrap();

    let mut a = Holder::spawn(&connection, &pg.postgres_config(), "a");
    let token_a = a.token().await;
    kill(a.pid(), Signal::SIGSTOP).unwrap();
    // B waits in the lock's queue until the coordination service expires A's session: A,
    // stopped, no longer pings.
    let mut b = Holder::spawn(&connection, &pg.postgres_config(), "b");
    let token_b = b.token().await;
    assert!(token_b > token_a, "{token_b} after {token_a}");
    assert_eq!(b.write().await, "outcome applied");
    kill(a.pid(), Signal::SIGCONT).unwrap();
    // A resumes and writes as if it still held the lock.
    assert_eq!(
        a.write().await,
        format!("outcome stale {}", token_b.to_hex())
    );

    let row = within(db.query_one(
        &format!("SELECT holder FROM {TABLE}_ledger WHERE name = 'ledger'"),
        &[],
    ))
    .await
    .unwrap();
    assert_eq!(row.get::<_, String>(0), "b");
    assert_eq!(
        within(fence.mark(&db, "ledger")).await.unwrap(),
        Some(token_b)
    );
    a.exit().await;
    b.exit().await;
}

/// One holder of [`a_holder_stopped_past_its_lease_is_refused_by_the_real_server`], run by it
/// in a process of its own (see [`Holder`]).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a holder process of stale_holder's test, which runs it"]
async fn holder_process() {
    let config = std::env::var(HOLDER).expect("run by the stale-holder test");
    let [connection, pg, name]: [&str; 3] = config
        .split('\t')
        .collect::<Vec<_>>()
        .try_into()
        .expect("three fields");
    let client = within(Client::connect(connection)).await.unwrap();
    let options = SessionOptions::new().timeout(Duration::from_secs(2));
    let session = within(client.session("fenced", options)).await.unwrap();
    let guard = within(session.mutex("ledger").lock()).await.unwrap();
    let token = Token::new(guard.fencing_token());
    let (mut db, conn) = within(tokio_postgres::connect(pg, NoTls)).await.unwrap();
    tokio::spawn(conn);
    let fence = PgFence::with_table(TABLE).unwrap();
    // Claim on acquire: no older holder can write from here on.
    assert_eq!(
        within(fence.claim(&db, "ledger", token)).await.unwrap(),
        Outcome::Applied
    );
    println!("holder: acquired {}", token.to_hex());

    let upsert = format!(
        "INSERT INTO {TABLE}_ledger (name, holder) VALUES ('ledger', $1) ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder"
    );
    let mut stdin = BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = stdin.next_line().await.unwrap() {
        match line.as_str() {
            // Written whatever the guard says: the fence is what stops a stale holder.
            "write" => {
                let sql = Sql::new(&upsert).bind(&name, Type::TEXT);
                let outcome = within(fence.execute(&mut db, "ledger", token, None, &[sql]))
                    .await
                    .unwrap();
                match outcome {
                    Outcome::Applied => println!("holder: outcome applied"),
                    Outcome::Stale { current } => {
                        println!("holder: outcome stale {}", current.to_hex());
                    }
                }
            }
            _ => break,
        }
    }
    drop(guard);
}
