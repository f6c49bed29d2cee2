//! YDB tables (feature `ydb`, over the `ydb` crate's query client): one serializable
//! transaction reads the mark and writes.
//!
//! [`YdbFence::setup`] creates the table `fence (name Utf8, mark Utf8)` and the table
//! `fence_writes (name, write_id, at)` of applied write ids, whose rows YDB's TTL removes a day
//! after they were written (names from [`YdbFence::with_table`]). The check
//! ([`YdbFence::check`]) runs in the caller's transaction: one query reads the name's mark and
//! whether the write id was applied, the fencing rule judges them, and a second query upserts
//! the new mark (and the write id) when the token passes. The transaction is serializable: if
//! another holder changes the mark between this read and the commit, the commit fails with
//! `ABORTED` and the query client's `retry_tx` runs the attempt again, check included, so the
//! check and the caller's writes take effect as one atomic step. A stale or replayed check
//! rolls the transaction back before it answers: nothing of that attempt can commit.
//!
//! Marks are `Utf8`, 64 hex digits ([`Token::to_hex`]), compared as tokens by the fencing
//! rule in the client, inside the transaction. The check costs two round trips before the
//! caller's statements (the read, the upsert); the commit is the caller's.
//!
//! The `ydb` crate's futures nest deeply: a crate that runs the [conformance kit](crate::kit)
//! over [`YdbStore`] may need `#![recursion_limit = "256"]`.
//!
//! ```text
//! retry_tx ─► check (one query) ─► the caller's statements ─► commit
//!                 │ stale / replayed: rolled back, nothing commits
//!                 └ ABORTED at commit (another holder in between): the attempt runs again
//! ```

use std::sync::Arc;

use ydb::{QueryClient, Transaction, YdbError, YdbOrCustomerError};

use crate::error::{Error, ErrorKind, Result};
use crate::kit::Subject;
use crate::outcome::{Admission, Outcome};
use crate::rule::judge;
use crate::store::{FencedStore, Record, Write};
use crate::token::{Token, WriteId};

/// The parameters of the check's read, as [`YdbFence::check`] binds them.
const READ_PARAMS: [&str; 2] = ["$name", "$write_id"];
/// The parameters of the check's upsert.
const RAISE_PARAMS: [&str; 2] = ["$name", "$mark"];
/// The parameters of the write id's upsert.
const RECORD_PARAMS: [&str; 2] = ["$name", "$write_id"];

/// The fence in YDB tables: their names and the statements.
///
/// # Examples
///
/// ```no_run
/// use ydb::{ClientBuilder, Transaction, closure};
/// use ydb_coordination::FencingToken;
/// use ydb_coordination_fence::{Admission, Token, ydb::YdbFence};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let client = ClientBuilder::new_from_connection_string("grpc://localhost:2136/local")?.build().await?;
/// let queries = client.query_client();
/// let fence = YdbFence::new();
/// fence.setup(&queries).await?;
/// let token = Token::new(FencingToken::new(0, 42)); // the guard's fencing_token()
/// let credited = queries
///     .retry_tx(closure!([&fence], async |tx: &mut Transaction| {
///         match fence.check(tx, "ledger", token, None).await.map_err(YdbFence::customer)? {
///             Admission::Granted(()) => {}
///             _ => return Ok(false), // stale (or applied before): rolled back
///         }
///         tx.exec("UPSERT INTO accounts (id, balance) VALUES (1, 10)").await?;
///         Ok(true)
///     }))
///     .await?;
/// # let _ = credited;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct YdbFence {
    table: String,
    setup_yql: String,
    read_yql: String,
    raise_yql: String,
    record_yql: String,
    mark_yql: String,
}

impl Default for YdbFence {
    fn default() -> Self {
        Self::build("fence")
    }
}

impl YdbFence {
    /// The fence in the table `fence` (and `fence_writes`), in the database's root.
    pub fn new() -> Self {
        Self::default()
    }

    /// The fence in the table `table` (and `<table>_writes`): a path relative to the
    /// database, of letters, digits, `_`, `-`, `.` and `/`.
    ///
    /// ```
    /// use ydb_coordination_fence::{ErrorKind, ydb::YdbFence};
    ///
    /// assert!(YdbFence::with_table("app/fence").is_ok());
    /// assert_eq!(YdbFence::with_table("a`b").unwrap_err().kind(), ErrorKind::InvalidInput);
    /// ```
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] for an empty name or another character.
    pub fn with_table(table: &str) -> Result<Self> {
        let valid = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/');
        if table.is_empty() || !table.chars().all(valid) || table.starts_with('/') {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "the fence table {table:?} must be a relative path of letters, digits, _, -, . and /"
                ),
            ));
        }
        Ok(Self::build(table))
    }

    fn build(table: &str) -> Self {
        let writes = format!("{table}_writes");
        let setup_yql = format!(
            r#"CREATE TABLE IF NOT EXISTS `{table}` (
    name Utf8 NOT NULL,
    mark Utf8 NOT NULL,
    PRIMARY KEY (name)
);
CREATE TABLE IF NOT EXISTS `{writes}` (
    name Utf8 NOT NULL,
    write_id Utf8 NOT NULL,
    at Timestamp NOT NULL,
    PRIMARY KEY (name, write_id)
) WITH (TTL = Interval("P1D") ON at);"#
        );
        let read_yql = format!(
            r#"DECLARE $name AS Utf8;
DECLARE $write_id AS Utf8?;
$current = (SELECT mark FROM `{table}` WHERE name = $name);
$seen = (SELECT COUNT(*) FROM `{writes}` WHERE name = $name AND write_id = $write_id);
SELECT $current AS current, $seen AS seen;"#
        );
        let raise_yql = format!(
            "DECLARE $name AS Utf8;\nDECLARE $mark AS Utf8;\nUPSERT INTO `{table}` (name, mark) VALUES ($name, $mark);"
        );
        let record_yql = format!(
            "DECLARE $name AS Utf8;\nDECLARE $write_id AS Utf8;\nUPSERT INTO `{writes}` (name, write_id, at) VALUES ($name, $write_id, CurrentUtcTimestamp());"
        );
        let mark_yql =
            format!("DECLARE $name AS Utf8;\nSELECT mark FROM `{table}` WHERE name = $name;");
        Self {
            table: table.to_string(),
            setup_yql,
            read_yql,
            raise_yql,
            record_yql,
            mark_yql,
        }
    }

    /// The fence's table.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Creates the fence's tables if they do not exist.
    ///
    /// # Errors
    ///
    /// The server's.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future after its request was sent does not stop it.
    pub async fn setup(&self, client: &QueryClient) -> Result<()> {
        let mut client = client.clone();
        client
            .exec(self.setup_yql.as_str())
            .await
            .map_err(|e| ydb_error(e, "set up the fence tables"))
    }

    /// Checks `token` for `name` in the caller's transaction `tx`: raises the mark to it, or,
    /// if the mark is greater or `write` was applied before, rolls the transaction back.
    /// Run it first in the transaction, before the statements it protects.
    ///
    /// # Errors
    ///
    /// The server's (an `ABORTED` commit later is the query client's to retry); a refusal
    /// is [`Admission::Stale`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the transaction to its owner: uncommitted, it changes
    /// nothing.
    pub async fn check(
        &self,
        tx: &mut Transaction,
        name: &str,
        token: Token,
        write: Option<WriteId>,
    ) -> Result<Admission<()>> {
        let failed = |e| ydb_error(e, &format!("check the fence of {name:?}"));
        let id = write.map(|w| w.to_string());
        let mut row = tx
            .query_row(self.read_yql.as_str())
            .param(READ_PARAMS[0], name)
            .param(READ_PARAMS[1], id.clone())
            .await
            .map_err(failed)?;
        let current = row
            .remove_field_by_name("current")
            .and_then(Option::<String>::try_from)
            .map_err(failed)?;
        let seen = row
            .remove_field_by_name("seen")
            .and_then(Option::<u64>::try_from)
            .map_err(failed)?;
        let mark = current.as_deref().map(Token::from_hex).transpose()?;
        let admission = decide(mark, token, seen.unwrap_or(0) > 0);
        match (&admission, id) {
            (Admission::Granted(()), id) => {
                tx.exec(self.raise_yql.as_str())
                    .param(RAISE_PARAMS[0], name)
                    .param(RAISE_PARAMS[1], token.to_hex())
                    .await
                    .map_err(failed)?;
                if let Some(id) = id {
                    tx.exec(self.record_yql.as_str())
                        .param(RECORD_PARAMS[0], name)
                        .param(RECORD_PARAMS[1], id)
                        .await
                        .map_err(failed)?;
                }
            }
            _ => tx
                .rollback()
                .await
                .map_err(|e| ydb_error(e, "roll back a refused transaction"))?,
        }
        Ok(admission)
    }

    /// Raises the mark of `name` to `token`, or refuses it, in a transaction of its own (run
    /// again by the query client if it is aborted): a new holder's claim.
    ///
    /// # Errors
    ///
    /// The server's; a refusal is [`Outcome::Stale`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future after the commit was sent does not stop it.
    pub async fn claim(&self, client: &QueryClient, name: &str, token: Token) -> Result<Outcome> {
        let admission = client
            .retry_tx(ydb::closure!(
                [&fence = self, name],
                async |tx: &mut Transaction| {
                    fence
                        .check(tx, name, token, None)
                        .await
                        .map(|a| a.outcome())
                        .map_err(YdbFence::customer)
                }
            ))
            .await
            .map_err(|e| customer_error(e, &format!("claim {name:?}")))?;
        Ok(admission)
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
    pub async fn mark(&self, client: &QueryClient, name: &str) -> Result<Option<Token>> {
        let mut client = client.clone();
        let row = client
            .query_row(self.mark_yql.as_str())
            .param("$name", name)
            .optional()
            .await
            .map_err(|e| ydb_error(e, &format!("read the mark of {name:?}")))?;
        let Some(mut row) = row else { return Ok(None) };
        let value = row
            .remove_field_by_name("mark")
            .map_err(|e| ydb_error(e, "read the mark"))?;
        let hex = String::try_from(value).map_err(|e| ydb_error(e, "read the mark"))?;
        Token::from_hex(&hex).map(Some)
    }

    /// This crate's error as the query client's customer error, for `?` in a `retry_tx`
    /// callback (a customer error ends the retries).
    pub fn customer(e: Error) -> YdbOrCustomerError {
        YdbOrCustomerError::Customer(Arc::new(e))
    }
}

/// The admission of a token against the mark read, the write id having been `seen` applied.
fn decide(mark: Option<Token>, token: Token, seen: bool) -> Admission<()> {
    match judge(mark, token, seen) {
        _ if seen => Admission::Replayed,
        Outcome::Applied => Admission::Granted(()),
        Outcome::Stale { current } => Admission::Stale { current },
    }
}

/// A YDB error as this crate's: transport failures are [`ErrorKind::Unavailable`], the
/// rest [`ErrorKind::Store`].
fn ydb_error(e: YdbError, what: &str) -> Error {
    let kind = match e {
        YdbError::TransportDial(_)
        | YdbError::Transport(_)
        | YdbError::TransportGRPCStatus(_)
        | YdbError::DeadlineExceeded => ErrorKind::Unavailable,
        _ => ErrorKind::Store,
    };
    Error::new(kind, format!("YDB could not {what}: {e}")).with_source(e)
}

/// A `retry_tx` error as this crate's: the customer error it carried, or the server's.
fn customer_error(e: YdbOrCustomerError, what: &str) -> Error {
    match e {
        YdbOrCustomerError::YDB(e) => ydb_error(e, what),
        YdbOrCustomerError::Customer(e) => match e.downcast_ref::<Error>() {
            Some(ours) => Error::new(ours.kind(), ours.to_string()).with_source(CustomerError(e)),
            None => Error::new(ErrorKind::Store, format!("could not {what}"))
                .with_source(CustomerError(e)),
        },
    }
}

/// A customer error of a `retry_tx` callback, shared.
#[derive(Debug)]
struct CustomerError(Arc<dyn std::error::Error + Send + Sync>);

impl std::fmt::Display for CustomerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for CustomerError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// A fenced key-value table in YDB: [`FencedStore`] over [`YdbFence`] and a table of values
/// (`<table>_values (name Utf8, value String)`), each write one serializable transaction.
///
/// # Examples
///
/// ```no_run
/// use ydb::ClientBuilder;
/// use ydb_coordination::FencingToken;
/// use ydb_coordination_fence::{FencedStore, Token, Write, ydb::{YdbFence, YdbStore}};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let client = ClientBuilder::new_from_connection_string("grpc://localhost:2136/local")?.build().await?;
/// let store = YdbStore::setup(client.query_client(), YdbFence::new()).await?;
/// let token = Token::new(FencingToken::new(0, 7));
/// assert!(store.write("register", token, Write::new(b"v1")).await?.is_applied());
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct YdbStore {
    fence: YdbFence,
    client: QueryClient,
    upsert_yql: String,
    read_yql: String,
}

/// The store's upsert of a value and its read of a name's mark and value, for the fence
/// table `table`.
fn store_statements(table: &str) -> (String, String) {
    let values = format!("{table}_values");
    let upsert = format!(
        "DECLARE $name AS Utf8;\nDECLARE $value AS String;\nUPSERT INTO `{values}` (name, value) VALUES ($name, $value);"
    );
    let read = format!(
        "DECLARE $name AS Utf8;\n$mark = (SELECT mark FROM `{table}` WHERE name = $name);\n$value = (SELECT value FROM `{values}` WHERE name = $name);\nSELECT $mark AS mark, $value AS value;"
    );
    (upsert, read)
}

impl std::fmt::Debug for YdbStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("YdbStore")
            .field("fence", &self.fence)
            .finish_non_exhaustive()
    }
}

impl YdbStore {
    /// The store on `client`, its tables created if they do not exist.
    ///
    /// # Errors
    ///
    /// The server's.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future after a request was sent does not stop it.
    pub async fn setup(client: QueryClient, fence: YdbFence) -> Result<Self> {
        fence.setup(&client).await?;
        let values = format!("{}_values", fence.table);
        let mut setup = client.clone();
        setup
            .exec(format!(
                "CREATE TABLE IF NOT EXISTS `{values}` (name Utf8 NOT NULL, value String NOT NULL, PRIMARY KEY (name));"
            ))
            .await
            .map_err(|e| ydb_error(e, "set up the values table"))?;
        let (upsert_yql, read_yql) = store_statements(&fence.table);
        Ok(Self {
            upsert_yql,
            read_yql,
            fence,
            client,
        })
    }
}

impl YdbStore {
    /// A write's transaction: the check, the value's upsert, then the commit, or, unless
    /// `commit`, a rollback where the commit would be (a client killed there).
    async fn transaction(
        &self,
        name: &str,
        token: Token,
        write: Write<'_>,
        commit: bool,
    ) -> std::result::Result<Outcome, YdbOrCustomerError> {
        let (fence, upsert) = (&self.fence, self.upsert_yql.as_str());
        let value = write.value.to_vec();
        self.client
            .retry_tx(ydb::closure!(
                [&fence, &upsert, &name, &value, &token, &write, &commit],
                async |tx: &mut Transaction| {
                    let admission = fence
                        .check(tx, name, *token, write.id)
                        .await
                        .map_err(YdbFence::customer)?;
                    if let Admission::Granted(()) = admission {
                        tx.exec(*upsert)
                            .param("$name", *name)
                            .param("$value", ydb::Bytes::from(value.clone()))
                            .await?;
                        if !*commit {
                            tx.rollback().await?;
                        }
                    }
                    Ok(admission.outcome())
                }
            ))
            .await
    }
}

impl FencedStore for YdbStore {
    /// # Cancel safety
    ///
    /// As [`YdbFence::claim`]'s.
    async fn claim(&self, name: &str, token: Token) -> Result<Outcome> {
        self.fence.claim(&self.client, name, token).await
    }

    /// # Cancel safety
    ///
    /// Dropping the future after the commit was sent does not stop it: retry with the same
    /// write id to learn its outcome.
    async fn write(&self, name: &str, token: Token, write: Write<'_>) -> Result<Outcome> {
        self.transaction(name, token, write, true)
            .await
            .map_err(|e| customer_error(e, &format!("write {name:?}")))
    }

    /// # Cancel safety
    ///
    /// Cancel safe.
    async fn read(&self, name: &str) -> Result<Record> {
        let mut client = self.client.clone();
        let mut row = client
            .query_row(self.read_yql.as_str())
            .param("$name", name)
            .await
            .map_err(|e| ydb_error(e, &format!("read {name:?}")))?;
        let mark = row
            .remove_field_by_name("mark")
            .and_then(Option::<String>::try_from)
            .map_err(|e| ydb_error(e, "read the mark"))?;
        let value = row
            .remove_field_by_name("value")
            .and_then(Option::<ydb::Bytes>::try_from)
            .map_err(|e| ydb_error(e, "read the value"))?;
        Ok(Record {
            mark: mark.as_deref().map(Token::from_hex).transpose()?,
            value: value.map(Vec::from),
        })
    }
}

impl Subject for YdbStore {
    /// In a transaction of its own: the check and the value's upsert, then the transaction is
    /// dropped without a commit, as a killed client's would be.
    async fn write_abandoned(&self, name: &str, token: Token, write: Write<'_>) -> Result<()> {
        self.transaction(name, token, write, false)
            .await
            .map(drop)
            .map_err(|e| customer_error(e, &format!("abandon a write of {name:?}")))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use ydb_coordination::FencingToken;

    use super::*;

    /// The parameters of `yql`'s `DECLARE` lines.
    fn declared(yql: &str) -> HashSet<&str> {
        yql.lines()
            .filter_map(|l| l.strip_prefix("DECLARE "))
            .filter_map(|l| l.split(' ').next())
            .collect()
    }

    /// Every statement declares exactly the parameters the code binds, and uses no other
    /// (named expressions aside).
    #[test]
    fn each_statement_declares_exactly_the_parameters_it_is_given() {
        let fence = YdbFence::with_table("app/fence").unwrap();
        let named: HashSet<&str> = ["$current", "$seen", "$mark", "$value"]
            .into_iter()
            .collect();
        let (upsert, read) = store_statements(&fence.table);
        for (yql, given) in [
            (&fence.read_yql, &READ_PARAMS[..]),
            (&fence.raise_yql, &RAISE_PARAMS[..]),
            (&fence.record_yql, &RECORD_PARAMS[..]),
            (&fence.mark_yql, &["$name"][..]),
            (&upsert, &["$name", "$value"][..]),
            (&read, &["$name"][..]),
        ] {
            let declared = declared(yql);
            assert_eq!(declared, given.iter().copied().collect(), "{yql}");
            for p in parameters(yql) {
                assert!(declared.contains(p) || named.contains(p), "{p} in {yql}");
            }
        }
    }

    #[test]
    fn statements_name_the_configured_tables_quoted() {
        let fence = YdbFence::with_table("app/fence").unwrap();
        assert!(
            fence
                .setup_yql
                .contains("CREATE TABLE IF NOT EXISTS `app/fence` (")
        );
        assert!(
            fence
                .setup_yql
                .contains("CREATE TABLE IF NOT EXISTS `app/fence_writes` (")
        );
        assert!(
            fence
                .read_yql
                .contains("FROM `app/fence` WHERE name = $name")
        );
        assert!(fence.read_yql.contains("FROM `app/fence_writes` WHERE"));
        assert!(
            fence
                .raise_yql
                .contains("UPSERT INTO `app/fence` (name, mark)")
        );
        assert!(
            fence
                .record_yql
                .contains("UPSERT INTO `app/fence_writes` (name, write_id, at)")
        );
        for bad in ["", "/abs", "a`b", "a b", "a;b"] {
            assert_eq!(
                YdbFence::with_table(bad).unwrap_err().kind(),
                ErrorKind::InvalidInput
            );
        }
    }

    #[test]
    fn the_read_writes_nothing() {
        let fence = YdbFence::new();
        for verb in ["UPSERT", "INSERT", "UPDATE", "DELETE", "REPLACE"] {
            assert!(!fence.read_yql.contains(verb), "{verb}");
        }
    }

    #[test]
    fn the_rule_decides_and_a_seen_write_id_is_replayed() {
        let t = |o| Token::new(FencingToken::new(0, o));
        assert!(matches!(decide(None, t(1), false), Admission::Granted(())));
        assert!(matches!(
            decide(Some(t(3)), t(3), false),
            Admission::Granted(())
        ));
        assert!(
            matches!(decide(Some(t(3)), t(2), false), Admission::Stale { current } if current == t(3))
        );
        assert!(matches!(
            decide(Some(t(3)), t(2), true),
            Admission::Replayed
        ));
        assert!(matches!(
            decide(Some(t(3)), t(4), true),
            Admission::Replayed
        ));
    }

    /// The `$parameters` a statement uses, in the order they first appear.
    fn parameters(yql: &str) -> Vec<&str> {
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        let mut rest = yql;
        while let Some(i) = rest.find('$') {
            let tail = &rest[i..];
            let end = tail[1..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .map_or(tail.len(), |e| e + 1);
            let name = &tail[..end];
            if seen.insert(name) {
                out.push(name);
            }
            rest = &tail[end..];
        }
        out
    }

    #[test]
    fn parameters_are_found_once_each() {
        assert_eq!(parameters("SELECT $a, $b_1 + $a;"), vec!["$a", "$b_1"]);
    }
}
