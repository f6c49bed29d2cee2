//! PostgreSQL (feature `postgres`): a fence table, and a conditional upsert that runs in the
//! same transaction as the caller's own statements.
//!
//! [`PgFence::setup`] creates three objects (names from [`PgFence::with_table`], `fence` by
//! default): the table `fence (name, mark)`, the table `fence_writes (name, write_id, at)` of
//! applied write ids, and the function `fence_check(name, mark [, write_id])`. The check is
//! one call of `fence_check`, whose heart is one statement:
//!
//! ```sql
//! INSERT INTO fence AS f (name, mark) VALUES ($name, $token)
//! ON CONFLICT (name) DO UPDATE SET mark = GREATEST(f.mark, EXCLUDED.mark)
//! RETURNING f.mark
//! ```
//!
//! (with the write id's bookkeeping around it). Being a function, it is what a shell job
//! calls too (`SELECT fence_check('ledger', :'token')` in `psql`, the token from
//! `ydb-coord lock`'s `YDB_COORD_FENCE_TOKEN`). It always locks the name's row until the
//! transaction ends, and returns the mark after it: equal to the token, the write may go on;
//! greater, the holder is stale, and `fence_check` raises an error (SQLSTATE `YF409`, the mark
//! in its detail) that **aborts the transaction**. So nothing of a stale holder can commit, even
//! statements sent before the answer came back: [`PgFence::execute`] sends `BEGIN`, the check,
//! the caller's statements and `COMMIT` at once, one round trip, as a plain write of the same
//! statements takes. A newer holder's check waits on the row lock and runs after the older
//! holder's transaction ends, so writes commit in token order.
//!
//! A write id already applied makes the check raise `YF208`: the transaction aborts and the
//! caller learns that its write had been applied ([`Admission::Replayed`]). Applied write ids
//! are kept until [`PgFence::prune`] removes them.
//!
//! The marks are `text COLLATE "C"`: 64 hex digits ([`Token::to_hex`]) that sort as the tokens
//! do. Under `REPEATABLE READ` or `SERIALIZABLE`, a holder's check can fail with a
//! serialization error when another holder of the name committed since its snapshot: retry it.

use std::pin::Pin;
use std::time::Duration;

use futures::TryFutureExt as _;
use futures::future::{BoxFuture, maybe_done};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, NoTls, Transaction};

use crate::error::{Error, ErrorKind, Result};
use crate::kit::Subject;
use crate::outcome::{Admission, Outcome};
use crate::store::{FencedStore, Record, Write};
use crate::token::{Token, WriteId};

/// The SQLSTATE of a stale check: the mark is in the error's detail.
const STALE: &str = "YF409";
/// The SQLSTATE of a check whose write id was applied before.
const REPLAYED: &str = "YF208";
/// The longest table name [`PgFence::with_table`] takes (PostgreSQL's 63 bytes, less the
/// suffixes of the other objects).
const MAX_TABLE_LEN: usize = 48;

/// One of the caller's statements for [`PgFence::execute`]: SQL and its parameters with their
/// types, sent without a separate prepare (so that the whole write is one round trip).
///
/// ```
/// use tokio_postgres::types::Type;
/// use ydb_coordination_fence::postgres::Sql;
///
/// let amount = 10i64;
/// let credit = Sql::new("UPDATE accounts SET balance = balance + $1 WHERE id = 1")
///     .bind(&amount, Type::INT8);
/// assert_eq!(credit.params.len(), 1);
/// ```
#[derive(Debug, Clone)]
pub struct Sql<'a> {
    /// The statement.
    pub text: &'a str,
    /// Its parameters `$1`, `$2`, ... with their types.
    pub params: Vec<(&'a (dyn ToSql + Sync), Type)>,
}

impl<'a> Sql<'a> {
    /// The statement `text`, without parameters so far.
    pub fn new(text: &'a str) -> Self {
        Self {
            text,
            params: Vec::new(),
        }
    }

    /// The same statement with `value`, of type `ty`, as its next parameter.
    pub fn bind(mut self, value: &'a (dyn ToSql + Sync), ty: Type) -> Self {
        self.params.push((value, ty));
        self
    }
}

/// The fence in PostgreSQL: its tables and statements.
///
/// # Examples
///
/// ```no_run
/// use tokio_postgres::{NoTls, types::Type};
/// use ydb_coordination::FencingToken;
/// use ydb_coordination_fence::{Outcome, Token, postgres::{PgFence, Sql}};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let (mut client, connection) = tokio_postgres::connect("host=localhost user=postgres", NoTls).await?;
/// tokio::spawn(connection);
/// let fence = PgFence::new();
/// fence.setup(&client).await?;
/// let token = Token::new(FencingToken::new(0, 42)); // the guard's fencing_token()
/// let amount = 10i64;
/// let credit = Sql::new("UPDATE accounts SET balance = balance + $1 WHERE id = 1").bind(&amount, Type::INT8);
/// match fence.execute(&mut client, "ledger", token, None, &[credit]).await? {
///     Outcome::Applied => println!("credited"),
///     Outcome::Stale { current } => println!("lost the lock to {current}; nothing written"),
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct PgFence {
    table: String,
    setup_sql: String,
    check_sql: String,
    mark_sql: String,
    prune_sql: String,
}

impl Default for PgFence {
    fn default() -> Self {
        Self::build("fence")
    }
}

/// `name` as a quoted identifier.
fn quoted(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

impl PgFence {
    /// The fence in the table `fence` (and `fence_writes`, `fence_check`).
    pub fn new() -> Self {
        Self::default()
    }

    /// The fence in the table `table` (and `<table>_writes`, `<table>_check`), in the
    /// connection's schema search path.
    ///
    /// ```
    /// use ydb_coordination_fence::{ErrorKind, postgres::PgFence};
    ///
    /// assert!(PgFence::with_table("app_fence").is_ok());
    /// assert_eq!(PgFence::with_table("").unwrap_err().kind(), ErrorKind::InvalidInput);
    /// ```
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] if `table` is empty, longer than 48 bytes or holds a NUL.
    pub fn with_table(table: &str) -> Result<Self> {
        if table.is_empty() || table.len() > MAX_TABLE_LEN || table.contains('\0') {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "the fence table name {table:?} must be 1 to {MAX_TABLE_LEN} bytes, without NUL"
                ),
            ));
        }
        Ok(Self::build(table))
    }

    fn build(table: &str) -> Self {
        let fence = quoted(table);
        let writes = quoted(&format!("{table}_writes"));
        let check = quoted(&format!("{table}_check"));
        let setup_sql = format!(
            r#"SELECT pg_advisory_xact_lock(hashtext('ydb-coordination-fence setup'));
CREATE TABLE IF NOT EXISTS {fence} (
    name text PRIMARY KEY,
    mark text COLLATE "C" NOT NULL CHECK (mark ~ '^[0-9a-f]{{64}}$')
);
CREATE TABLE IF NOT EXISTS {writes} (
    name text NOT NULL,
    write_id text NOT NULL,
    at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (name, write_id)
);
-- $1 the name, $2 the token's mark, $3 the write id or NULL. PL/pgSQL keeps the plans of its
-- statements for the session.
CREATE OR REPLACE FUNCTION {check}(fence_name text, fence_mark text, fence_write_id text DEFAULT NULL)
RETURNS text LANGUAGE plpgsql VOLATILE AS $fence$
DECLARE
    found_mark text;
BEGIN
    IF fence_write_id IS NOT NULL AND EXISTS (
        SELECT 1 FROM {writes} w WHERE w.name = fence_name AND w.write_id = fence_write_id
    ) THEN
        RAISE EXCEPTION 'this write id was applied before' USING ERRCODE = '{REPLAYED}';
    END IF;
    INSERT INTO {fence} AS f (name, mark) VALUES (fence_name, fence_mark)
    ON CONFLICT (name) DO UPDATE SET mark = GREATEST(f.mark, EXCLUDED.mark)
    RETURNING f.mark INTO found_mark;
    IF found_mark <> fence_mark THEN
        RAISE EXCEPTION 'stale fencing token: the mark is %', found_mark
            USING ERRCODE = '{STALE}', DETAIL = found_mark;
    END IF;
    IF fence_write_id IS NOT NULL THEN
        -- Two retries of one write at once: the second waits for the first's commit here,
        -- then finds its id.
        INSERT INTO {writes} (name, write_id) VALUES (fence_name, fence_write_id)
        ON CONFLICT DO NOTHING;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'this write id was applied before' USING ERRCODE = '{REPLAYED}';
        END IF;
    END IF;
    RETURN 'applied';
END
$fence$;"#
        );
        let check_sql = format!("SELECT {check}($1, $2, $3)");
        let mark_sql = format!("SELECT mark FROM {fence} WHERE name = $1");
        let prune_sql =
            format!("DELETE FROM {writes} WHERE at < now() - make_interval(secs => $1)");
        Self {
            table: table.to_string(),
            setup_sql,
            check_sql,
            mark_sql,
            prune_sql,
        }
    }

    /// The fence's table name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Creates the fence's tables and function if they do not exist (and replaces the
    /// function). Safe to run from several clients at once.
    ///
    /// # Errors
    ///
    /// The server's (rights to create tables and functions are needed).
    ///
    /// # Cancel safety
    ///
    /// The statements run in one implicit transaction: dropping the future leaves all or none.
    pub async fn setup(&self, client: &Client) -> Result<()> {
        client
            .batch_execute(&self.setup_sql)
            .await
            .map_err(|e| pg_error(e, "set up the fence tables"))
    }

    /// Checks `token` for `name` in the caller's transaction `tx`: raises the mark to it, or
    /// aborts the transaction if the mark is greater or `write` was applied before. The
    /// caller's statements may be sent before this answer arrives (pipelined): a stale or
    /// replayed check aborts the transaction, so they cannot commit.
    ///
    /// # Errors
    ///
    /// The server's; a refusal is [`Admission::Stale`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future after its first poll leaves the check sent: the transaction holds
    /// the name's row (or is aborted) until it ends.
    pub async fn check(
        &self,
        tx: &Transaction<'_>,
        name: &str,
        token: Token,
        write: Option<WriteId>,
    ) -> Result<Admission<()>> {
        self.check_on(tx.client(), name, token, write).await
    }

    async fn check_on(
        &self,
        client: &Client,
        name: &str,
        token: Token,
        write: Option<WriteId>,
    ) -> Result<Admission<()>> {
        let mark = token.to_hex();
        let id = write.map(|w| w.to_string());
        let result = client
            .query_typed(
                &self.check_sql,
                &[(&name, Type::TEXT), (&mark, Type::TEXT), (&id, Type::TEXT)],
            )
            .await;
        admission(result.map(drop), name)
    }

    /// Begins a transaction on `client` and checks `token` in it ([`PgFence::check`]); on
    /// [`Admission::Granted`], the transaction is the caller's, for its statements and its
    /// commit. Two round trips before the caller's statements (`BEGIN`, the check).
    ///
    /// # Errors
    ///
    /// The server's; a refusal is [`Admission::Stale`] (the transaction is then rolled back).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future rolls the transaction back.
    pub async fn begin<'c>(
        &self,
        client: &'c mut Client,
        name: &str,
        token: Token,
        write: Option<WriteId>,
    ) -> Result<Admission<Transaction<'c>>> {
        let tx = client
            .transaction()
            .await
            .map_err(|e| pg_error(e, "begin a transaction"))?;
        Ok(match self.check(&tx, name, token, write).await? {
            Admission::Granted(()) => Admission::Granted(tx),
            Admission::Replayed => Admission::Replayed,
            Admission::Stale { current } => Admission::Stale { current },
        })
    }

    /// A fenced write in one round trip: `BEGIN`, the check, the caller's `statements` and
    /// `COMMIT`, sent together; `client` is held (`&mut`) so that nothing else interleaves.
    /// [`Outcome::Applied`] when the statements committed, or had been applied before under
    /// the write id `write`.
    ///
    /// # Errors
    ///
    /// The server's, or a statement's: then nothing was committed.
    ///
    /// # Cancel safety
    ///
    /// Everything is sent at the first poll, `COMMIT` included: dropping the future later
    /// does not stop the write, only the news of its outcome (retry with the same write id to
    /// learn it).
    pub async fn execute(
        &self,
        client: &mut Client,
        name: &str,
        token: Token,
        write: Option<WriteId>,
        statements: &[Sql<'_>],
    ) -> Result<Outcome> {
        let client: &Client = client;
        let mark = token.to_hex();
        let id = write.map(|w| w.to_string());
        let check_params: [(&(dyn ToSql + Sync), Type); 3] =
            [(&name, Type::TEXT), (&mark, Type::TEXT), (&id, Type::TEXT)];
        let mut requests: Vec<BoxFuture<'_, Result<(), tokio_postgres::Error>>> =
            Vec::with_capacity(statements.len() + 3);
        requests.push(Box::pin(client.batch_execute("BEGIN")));
        requests.push(Box::pin(
            client
                .query_typed(&self.check_sql, &check_params)
                .map_ok(drop),
        ));
        for s in statements {
            requests.push(Box::pin(client.query_typed(s.text, &s.params).map_ok(drop)));
        }
        requests.push(Box::pin(client.batch_execute("COMMIT")));
        let mut answers = pipelined(requests).await.into_iter();
        let mut next = || answers.next().unwrap_or(Ok(()));
        next().map_err(|e| pg_error(e, "begin a transaction"))?;
        let admission = admission(next(), name)?;
        for _ in statements {
            let answer = next();
            if let Admission::Granted(()) = admission {
                answer.map_err(|e| pg_error(e, "run a fenced statement"))?;
            }
        }
        // A check or statement that failed aborted the transaction: COMMIT rolled it back.
        next().map_err(|e| pg_error(e, "commit the fenced write"))?;
        Ok(admission.outcome())
    }

    /// Raises the mark of `name` to `token` (or refuses it), alone in its own transaction:
    /// a new holder's claim.
    ///
    /// # Errors
    ///
    /// The server's; a refusal is [`Outcome::Stale`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future after its first poll leaves the claim sent.
    pub async fn claim(&self, client: &Client, name: &str, token: Token) -> Result<Outcome> {
        Ok(self.check_on(client, name, token, None).await?.outcome())
    }

    /// The mark of `name`, if it has one.
    ///
    /// # Errors
    ///
    /// The server's; [`ErrorKind::Corrupt`] if the stored mark is not a token.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn mark(&self, client: &Client, name: &str) -> Result<Option<Token>> {
        let row = client
            .query_typed_opt(&self.mark_sql, &[(&name, Type::TEXT)])
            .await
            .map_err(|e| pg_error(e, "read the mark"))?;
        row.map(|r| {
            let hex: String = r.try_get(0).map_err(|e| pg_error(e, "read the mark"))?;
            Token::from_hex(&hex)
        })
        .transpose()
    }

    /// Forgets the write ids applied more than `older_than` ago; returns how many. A write
    /// retried with a forgotten id is judged as a new write. Run it now and then.
    ///
    /// # Errors
    ///
    /// The server's.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future after its first poll leaves the delete sent.
    pub async fn prune(&self, client: &Client, older_than: Duration) -> Result<u64> {
        let secs = older_than.as_secs_f64();
        let rows = client
            .query_typed(
                &format!("{} RETURNING 1", self.prune_sql),
                &[(&secs, Type::FLOAT8)],
            )
            .await
            .map_err(|e| pg_error(e, "prune the write ids"))?;
        Ok(rows.len() as u64)
    }
}

/// Sends every request, in order, before awaiting any answer: a tokio-postgres request is
/// queued on the connection at its future's first poll, so polling each once, in order, puts
/// them on the wire in that order, in one flight (a `COMMIT` can never overtake a statement).
async fn pipelined<T>(requests: Vec<BoxFuture<'_, T>>) -> Vec<T> {
    let mut requests: Vec<_> = requests.into_iter().map(maybe_done).collect();
    for request in &mut requests {
        // The first poll sends; an answer cannot be there yet, and `MaybeDone` would keep it.
        let _ = futures::poll!(Pin::new(&mut *request));
    }
    let mut answers = Vec::with_capacity(requests.len());
    for mut request in requests {
        Pin::new(&mut request).await;
        answers.extend(Pin::new(&mut request).take_output());
    }
    answers
}

/// The admission a check's result says.
fn admission(result: Result<(), tokio_postgres::Error>, name: &str) -> Result<Admission<()>> {
    let e = match result {
        Ok(()) => return Ok(Admission::Granted(())),
        Err(e) => e,
    };
    let code = e.code().map(SqlState::code);
    if code == Some(REPLAYED) {
        return Ok(Admission::Replayed);
    }
    if code == Some(STALE) {
        let detail = e.as_db_error().and_then(|d| d.detail()).unwrap_or_default();
        let current = Token::from_hex(detail).map_err(|c| {
            Error::new(
                ErrorKind::Corrupt,
                format!(
                    "the fence of {name:?} refused the token with a mark that is not a token: {c}"
                ),
            )
        })?;
        return Ok(Admission::Stale { current });
    }
    Err(pg_error(e, &format!("check the fence of {name:?}")))
}

/// A PostgreSQL error as this crate's: the connection's failures are
/// [`ErrorKind::Unavailable`], the server's answers [`ErrorKind::Store`].
fn pg_error(e: tokio_postgres::Error, what: &str) -> Error {
    let kind = if e.as_db_error().is_some() {
        ErrorKind::Store
    } else {
        ErrorKind::Unavailable
    };
    let message = match e.as_db_error() {
        Some(db) => format!("PostgreSQL could not {what}: {}", db.message()),
        None => format!("could not {what}: the connection to PostgreSQL failed"),
    };
    Error::new(kind, message).with_source(e)
}

/// A fenced key-value table in PostgreSQL: [`FencedStore`] over [`PgFence`] and a table of
/// values (`<table>_values (name, value bytea)`), on a few connections of its own.
///
/// Ready to use as a fenced register, and what the [conformance kit](crate::kit) runs against.
/// Each write is one round trip ([`PgFence::execute`]).
///
/// # Examples
///
/// ```no_run
/// use ydb_coordination::FencingToken;
/// use ydb_coordination_fence::{FencedStore, Token, Write, postgres::{PgFence, PgStore}};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), ydb_coordination_fence::Error> {
/// let store = PgStore::connect("host=localhost user=postgres", PgFence::new(), 4).await?;
/// let token = Token::new(FencingToken::new(0, 7));
/// let outcome = store.write("register", token, Write::new(b"v1")).await?;
/// assert!(outcome.is_applied());
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct PgStore {
    fence: PgFence,
    config: String,
    clients: Vec<tokio::sync::Mutex<Client>>,
    next: std::sync::atomic::AtomicUsize,
    upsert_sql: String,
    read_sql: String,
}

/// Opens a connection without TLS and drives it on a task of its own.
async fn connect(config: &str) -> Result<(Client, tokio::task::JoinHandle<()>)> {
    let (client, connection) = tokio_postgres::connect(config, NoTls)
        .await
        .map_err(|e| pg_error(e, "connect"))?;
    let task = tokio::spawn(async move {
        // The connection's end is the client's errors: nothing to report here.
        let _ = connection.await;
    });
    Ok((client, task))
}

impl PgStore {
    /// Opens `connections` connections (at least one) without TLS to the server `config`
    /// names (a tokio-postgres connection string), and sets up the fence and the values
    /// table.
    ///
    /// # Errors
    ///
    /// The connections' and the server's.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future closes the connections opened so far.
    pub async fn connect(config: &str, fence: PgFence, connections: usize) -> Result<Self> {
        let mut clients = Vec::new();
        for _ in 0..connections.max(1) {
            clients.push(tokio::sync::Mutex::new(connect(config).await?.0));
        }
        let values = quoted(&format!("{}_values", fence.table));
        let store = Self {
            upsert_sql: format!(
                "INSERT INTO {values} (name, value) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value"
            ),
            read_sql: format!(
                "SELECT (SELECT mark FROM {} WHERE name = $1), (SELECT value FROM {values} WHERE name = $1)",
                quoted(&fence.table)
            ),
            fence,
            config: config.to_string(),
            clients,
            next: std::sync::atomic::AtomicUsize::new(0),
        };
        let client = store.client().await;
        store.fence.setup(&client).await?;
        client
            .batch_execute(&format!(
                "SELECT pg_advisory_xact_lock(hashtext('ydb-coordination-fence setup'));
                 CREATE TABLE IF NOT EXISTS {values} (name text PRIMARY KEY, value bytea NOT NULL)"
            ))
            .await
            .map_err(|e| pg_error(e, "set up the values table"))?;
        drop(client);
        Ok(store)
    }

    /// The fence.
    pub fn fence(&self) -> &PgFence {
        &self.fence
    }

    /// The next connection, in turn.
    async fn client(&self) -> tokio::sync::MutexGuard<'_, Client> {
        let i = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // `connect` opened at least one.
        self.clients[i % self.clients.len()].lock().await
    }
}

impl FencedStore for PgStore {
    /// # Cancel safety
    ///
    /// Dropping the future after its first poll leaves the claim sent.
    async fn claim(&self, name: &str, token: Token) -> Result<Outcome> {
        let client = self.client().await;
        self.fence.claim(&client, name, token).await
    }

    /// # Cancel safety
    ///
    /// As [`PgFence::execute`]'s.
    async fn write(&self, name: &str, token: Token, write: Write<'_>) -> Result<Outcome> {
        let mut client = self.client().await;
        let value = write.value;
        let upsert = Sql::new(&self.upsert_sql)
            .bind(&name, Type::TEXT)
            .bind(&value, Type::BYTEA);
        self.fence
            .execute(&mut client, name, token, write.id, &[upsert])
            .await
    }

    /// # Cancel safety
    ///
    /// Cancel safe.
    async fn read(&self, name: &str) -> Result<Record> {
        let client = self.client().await;
        let row = client
            .query_typed_one(&self.read_sql, &[(&name, Type::TEXT)])
            .await
            .map_err(|e| pg_error(e, "read a fenced value"))?;
        drop(client);
        let mark: Option<String> = row.try_get(0).map_err(|e| pg_error(e, "read the mark"))?;
        let value: Option<Vec<u8>> = row.try_get(1).map_err(|e| pg_error(e, "read the value"))?;
        Ok(Record {
            mark: mark.as_deref().map(Token::from_hex).transpose()?,
            value,
        })
    }
}

impl Subject for PgStore {
    /// On a connection of its own: `BEGIN`, the check, the value's upsert, then the
    /// connection is dropped without a `COMMIT`, as a killed client's would be.
    async fn write_abandoned(&self, name: &str, token: Token, write: Write<'_>) -> Result<()> {
        let (mut client, task) = connect(&self.config).await?;
        let tx = client
            .transaction()
            .await
            .map_err(|e| pg_error(e, "begin a transaction"))?;
        if let Admission::Granted(()) = self.fence.check(&tx, name, token, write.id).await? {
            let value = write.value;
            tx.query_typed(
                &self.upsert_sql,
                &[(&name, Type::TEXT), (&value, Type::BYTEA)],
            )
            .await
            .map_err(|e| pg_error(e, "write the value"))?;
        }
        // Killed here: the socket closes with the transaction open; the server rolls it back
        // (the transaction's drop would queue a ROLLBACK on the connection, which is gone).
        task.abort();
        drop(tx);
        Ok(())
    }
}
