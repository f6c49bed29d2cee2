//! Redis and Valkey (feature `redis`): one Lua script checks the mark and applies the caller's
//! writes.
//!
//! A name's mark is the string key `<name>:fence`, holding 64 hex digits
//! ([`Token::to_hex`]); the script compares them byte by byte, so no token is rounded into one of
//! Lua's doubles (exact only to 2^53) and no locale's collation decides. A write id applied is
//! the key `<name>:fence:w:<id>`, which expires after [`RedisFence::write_id_retention`].
//!
//! The script runs atomically: it reads the mark, refuses a lower token, and otherwise raises
//! the mark, records the write id and runs the caller's [`Writes`], all in one request, one
//! round trip, as a plain write of the same keys takes. Its keys are declared, so every key
//! must hash to the name's slot: put a hash tag in the name (`{ledger}`) and in every key
//! (`{ledger}:balance`). A write whose keys lie in other slots is refused before it is sent,
//! on a single server too, so that it keeps working on a cluster.
//!
//! A command that fails inside the script (a wrong type) stops it, and Redis keeps what the
//! script had done before: the mark is raised first, so fencing still holds, but the writes
//! before the failed command stay. Write commands that cannot fail on your keys.
//!
//! # Failover can lose the mark
//!
//! Redis replicates asynchronously: a primary that fails over can lose the last writes it
//! acknowledged, the raised mark among them, and a stale holder's write can then be accepted
//! by the new primary. `WAIT` narrows the window, it does not close it. Where a failover must
//! not let a stale write through, keep the fence in a store with synchronous replication
//! (PostgreSQL with synchronous standbys, YDB).

use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{RedisError, Script};

use crate::error::{Error, ErrorKind, Result};
use crate::kit::Subject;
use crate::outcome::Outcome;
use crate::store::{FencedStore, Record, Write};
use crate::token::{Token, WriteId};

/// The script: KEYS[1] the mark, KEYS[2] the write id's key (the mark's again when there is
/// none), then the writes' keys; ARGV[1] the token, ARGV[2] "1" with a write id, ARGV[3] its
/// retention in ms, ARGV[4] the number of commands, then each command's name, number of keys,
/// number of arguments and arguments.
const SCRIPT: &str = r#"
local token = ARGV[1]
if ARGV[2] == '1' and redis.call('EXISTS', KEYS[2]) == 1 then
  return {'replayed'}
end
local mark = redis.call('GET', KEYS[1])
if mark then
  if #mark ~= 64 or string.find(mark, '[^0-9a-f]') then
    return {'corrupt', mark}
  end
  for i = 1, 64 do
    local m, t = string.byte(mark, i), string.byte(token, i)
    if m ~= t then
      if m > t then
        return {'stale', mark}
      end
      break
    end
  end
end
redis.call('SET', KEYS[1], token)
if ARGV[2] == '1' then
  redis.call('SET', KEYS[2], '1', 'PX', ARGV[3])
end
local a, k = 5, 3
for _ = 1, tonumber(ARGV[4]) do
  local call = {ARGV[a]}
  local keys, args = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  a = a + 3
  for _ = 1, keys do
    call[#call + 1] = KEYS[k]
    k = k + 1
  end
  for _ = 1, args do
    call[#call + 1] = ARGV[a]
    a = a + 1
  end
  redis.call(unpack(call))
end
return {'applied'}
"#;

/// The caller's writes for [`RedisFence::write`]: commands run by the script after the check,
/// each a command name, its keys, then its other arguments (`SET key value`, `HSET key field
/// value`, `INCRBY key n`, `DEL key`...).
///
/// # Examples
///
/// ```
/// use ydb_coordination_fence::redis::Writes;
///
/// let writes = Writes::new()
///     .set("{ledger}:balance", "10")
///     .command("HSET", &["{ledger}:history"], &[b"42".as_slice(), b"credit 10"]);
/// assert_eq!(writes.len(), 2);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Writes {
    commands: Vec<Command>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Command {
    name: String,
    keys: Vec<String>,
    args: Vec<Vec<u8>>,
}

impl Writes {
    /// No writes (a claim).
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the command `name keys... args...`.
    pub fn command(mut self, name: &str, keys: &[&str], args: &[&[u8]]) -> Self {
        self.commands.push(Command {
            name: name.to_string(),
            keys: keys.iter().map(|k| k.to_string()).collect(),
            args: args.iter().map(|a| a.to_vec()).collect(),
        });
        self
    }

    /// Adds `SET key value`.
    pub fn set(self, key: &str, value: impl AsRef<[u8]>) -> Self {
        self.command("SET", &[key], &[value.as_ref()])
    }

    /// Adds `DEL key`.
    pub fn del(self, key: &str) -> Self {
        self.command("DEL", &[key], &[])
    }

    /// Adds `INCRBY key by`.
    pub fn incr_by(self, key: &str, by: i64) -> Self {
        self.command("INCRBY", &[key], &[by.to_string().as_bytes()])
    }

    /// How many commands.
    pub fn len(&self) -> usize {
        self.commands.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.commands.is_empty()
    }
}

/// The fence in Redis: its key names and the script.
///
/// # Examples
///
/// ```no_run
/// use ydb_coordination::FencingToken;
/// use ydb_coordination_fence::{Outcome, Token, redis::{RedisFence, Writes}};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let client = redis::Client::open("redis://127.0.0.1/")?;
/// let mut conn = client.get_multiplexed_async_connection().await?;
/// let fence = RedisFence::new();
/// let token = Token::new(FencingToken::new(0, 42)); // the guard's fencing_token()
/// let writes = Writes::new().incr_by("{ledger}:balance", 10);
/// match fence.write(&mut conn, "{ledger}", token, None, &writes).await? {
///     Outcome::Applied => println!("credited"),
///     Outcome::Stale { current } => println!("lost the lock to {current}; nothing written"),
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct RedisFence {
    script: Script,
    retention: Duration,
}

impl Default for RedisFence {
    fn default() -> Self {
        Self {
            script: Script::new(SCRIPT),
            retention: Duration::from_secs(24 * 60 * 60),
        }
    }
}

impl RedisFence {
    /// The fence, remembering applied write ids for a day.
    pub fn new() -> Self {
        Self::default()
    }

    /// How long an applied write id is remembered (at least a millisecond).
    pub fn write_id_retention(mut self, retention: Duration) -> Self {
        self.retention = retention.max(Duration::from_millis(1));
        self
    }

    /// The key of the name's mark.
    pub fn mark_key(name: &str) -> String {
        format!("{name}:fence")
    }

    fn write_id_key(name: &str, id: WriteId) -> String {
        format!("{name}:fence:w:{id}")
    }

    /// Checks `token` against the name's mark and, unless it is stale, raises the mark and
    /// runs `writes`, in one script: one atomic step, one round trip. [`Outcome::Applied`]
    /// also when `write` was applied before (and nothing is run again).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] if a key hashes to another slot than the name's mark
    /// (nothing is sent); [`ErrorKind::Corrupt`] if the mark key holds something else; the
    /// server's and the connection's.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future after it sent the script does not stop it: retry with the same
    /// write id to learn its outcome.
    pub async fn write<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        name: &str,
        token: Token,
        write: Option<WriteId>,
        writes: &Writes,
    ) -> Result<Outcome> {
        let mark_key = Self::mark_key(name);
        let id_key = write.map_or_else(|| mark_key.clone(), |id| Self::write_id_key(name, id));
        let slot = slot(mark_key.as_bytes());
        let keys = writes.commands.iter().flat_map(|c| &c.keys);
        if let Some(other) = keys.clone().find(|k| self::slot(k.as_bytes()) != slot) {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "the key {other:?} is not in the hash slot of the fence {name:?}: put the same hash tag in the name and every key, as {{ledger}} and {{ledger}}:balance"
                ),
            ));
        }
        let mut invocation = self.script.prepare_invoke();
        invocation.key(&mark_key).key(&id_key);
        for key in keys {
            invocation.key(key);
        }
        let retention = u64::try_from(self.retention.as_millis()).unwrap_or(u64::MAX);
        invocation
            .arg(token.to_hex())
            .arg(if write.is_some() { "1" } else { "0" })
            .arg(retention)
            .arg(writes.commands.len());
        for c in &writes.commands {
            invocation.arg(&c.name).arg(c.keys.len()).arg(c.args.len());
            for a in &c.args {
                invocation.arg(a.as_slice());
            }
        }
        let answer: Vec<String> = invocation
            .invoke_async(conn)
            .await
            .map_err(|e| redis_error(e, &format!("run the fence script of {name:?}")))?;
        verdict(&answer, name)
    }

    /// Raises the name's mark to `token`, or refuses it: a new holder's claim.
    ///
    /// # Errors
    ///
    /// As [`RedisFence::write`]'s.
    ///
    /// # Cancel safety
    ///
    /// As [`RedisFence::write`]'s.
    pub async fn claim<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        name: &str,
        token: Token,
    ) -> Result<Outcome> {
        self.write(conn, name, token, None, &Writes::new()).await
    }

    /// The name's mark, if it has one.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Corrupt`] if the mark key holds something else; the server's and the
    /// connection's.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn mark<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        name: &str,
    ) -> Result<Option<Token>> {
        let mark: Option<String> = redis::cmd("GET")
            .arg(Self::mark_key(name))
            .query_async(conn)
            .await
            .map_err(|e| redis_error(e, &format!("read the mark of {name:?}")))?;
        mark.as_deref().map(Token::from_hex).transpose()
    }
}

/// The outcome the script's answer says.
fn verdict(answer: &[String], name: &str) -> Result<Outcome> {
    match answer {
        [v] if v == "applied" || v == "replayed" => Ok(Outcome::Applied),
        [v, mark] if v == "stale" => Ok(Outcome::Stale {
            current: Token::from_hex(mark)?,
        }),
        [v, mark] if v == "corrupt" => Err(Error::new(
            ErrorKind::Corrupt,
            format!(
                "the mark key of {name:?} holds {mark:?}, not a fencing token: something else writes {:?}",
                RedisFence::mark_key(name)
            ),
        )),
        other => Err(Error::new(
            ErrorKind::Store,
            format!(
                "the fence script of {name:?} answered {other:?}, not a verdict: is another script loaded under its hash?"
            ),
        )),
    }
}

/// A Redis error as this crate's: the connection's failures are [`ErrorKind::Unavailable`],
/// the server's answers [`ErrorKind::Store`].
fn redis_error(e: RedisError, what: &str) -> Error {
    let kind = if e.is_io_error() || e.is_connection_dropped() || e.is_timeout() {
        ErrorKind::Unavailable
    } else {
        ErrorKind::Store
    };
    Error::new(kind, format!("could not {what}: {e}")).with_source(e)
}

/// The Redis Cluster hash slot of `key`: CRC16 of its hash tag (the part between the first
/// `{` and the next `}`, when not empty) or of the whole key, modulo 16384.
pub(crate) fn slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = key.get(open + 1..)?;
        let close = rest.iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    crc16(tagged.unwrap_or(key)) % 16384
}

/// CRC16/XMODEM, the cluster's.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// A fenced key-value store in Redis: [`FencedStore`] over [`RedisFence`], a name's value in
/// the key `{<name>}:value` (the name is its own hash tag), on one multiplexed connection.
///
/// # Examples
///
/// ```no_run
/// use ydb_coordination::FencingToken;
/// use ydb_coordination_fence::{FencedStore, Token, Write, redis::{RedisFence, RedisStore}};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), ydb_coordination_fence::Error> {
/// let store = RedisStore::connect("redis://127.0.0.1/", RedisFence::new()).await?;
/// let token = Token::new(FencingToken::new(0, 7));
/// assert!(store.write("register", token, Write::new(b"v1")).await?.is_applied());
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct RedisStore {
    fence: RedisFence,
    conn: redis::aio::MultiplexedConnection,
}

impl RedisStore {
    /// Connects to the server at `url` (`redis://host:port/db`).
    ///
    /// # Errors
    ///
    /// The connection's.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn connect(url: &str, fence: RedisFence) -> Result<Self> {
        let client = redis::Client::open(url).map_err(|e| redis_error(e, "open a client"))?;
        let conn = client
            .get_multiplexed_async_connection()
            .await
            .map_err(|e| redis_error(e, "connect to Redis"))?;
        Ok(Self { fence, conn })
    }

    fn tagged(name: &str) -> String {
        format!("{{{name}}}")
    }
}

impl FencedStore for RedisStore {
    /// # Cancel safety
    ///
    /// As [`RedisFence::write`]'s.
    async fn claim(&self, name: &str, token: Token) -> Result<Outcome> {
        let mut conn = self.conn.clone();
        self.fence
            .claim(&mut conn, &Self::tagged(name), token)
            .await
    }

    /// # Cancel safety
    ///
    /// As [`RedisFence::write`]'s.
    async fn write(&self, name: &str, token: Token, write: Write<'_>) -> Result<Outcome> {
        let mut conn = self.conn.clone();
        let name = Self::tagged(name);
        let writes = Writes::new().set(&format!("{name}:value"), write.value);
        self.fence
            .write(&mut conn, &name, token, write.id, &writes)
            .await
    }

    /// # Cancel safety
    ///
    /// Cancel safe.
    async fn read(&self, name: &str) -> Result<Record> {
        let mut conn = self.conn.clone();
        let name = Self::tagged(name);
        let (mark, value): (Option<String>, Option<Vec<u8>>) = redis::cmd("MGET")
            .arg(RedisFence::mark_key(&name))
            .arg(format!("{name}:value"))
            .query_async(&mut conn)
            .await
            .map_err(|e| redis_error(e, &format!("read {name:?}")))?;
        Ok(Record {
            mark: mark.as_deref().map(Token::from_hex).transpose()?,
            value,
        })
    }
}

impl Subject for RedisStore {
    /// The write is one script, atomic on the server: a client killed before sending it
    /// leaves nothing, and once sent it is not abandoned halfway.
    async fn write_abandoned(&self, _name: &str, _token: Token, _write: Write<'_>) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_the_cluster_specs() {
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(slot(b"123456789"), 0x31C3);
        assert_eq!(slot(b"{user1000}.following"), slot(b"{user1000}.followers"));
        assert_eq!(slot(b"{user1000}.following"), slot(b"user1000"));
        // An empty tag: the whole key.
        assert_eq!(slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") % 16384);
        // From the first `{` to the first `}` after it.
        assert_eq!(slot(b"foo{{bar}}zap"), slot(b"{bar"));
        assert_eq!(slot(b"foo{bar}{zap}"), slot(b"bar"));
    }

    #[test]
    fn verdicts_are_read_and_anything_else_is_refused() {
        let mark = Token::default().to_hex();
        assert_eq!(verdict(&["applied".into()], "n").unwrap(), Outcome::Applied);
        assert_eq!(
            verdict(&["replayed".into()], "n").unwrap(),
            Outcome::Applied
        );
        assert_eq!(
            verdict(&["stale".into(), mark.clone()], "n").unwrap(),
            Outcome::Stale {
                current: Token::default()
            }
        );
        let corrupt = verdict(&["corrupt".into(), "x".into()], "n").unwrap_err();
        assert_eq!(corrupt.kind(), ErrorKind::Corrupt);
        assert_eq!(verdict(&[], "n").unwrap_err().kind(), ErrorKind::Store);
    }
}
