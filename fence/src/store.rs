//! The fenced-store API the conformance kit checks: claim, write, read.

use std::future::Future;

use crate::error::Result;
use crate::outcome::Outcome;
use crate::token::{Token, WriteId};

/// A store that keeps, per protected name, the greatest token it has accepted (the *mark*),
/// and applies a write carrying a token in one atomic step with the check against it.
///
/// This is the common shape of every adapter (each also has its own, richer API, such as the
/// caller's own transaction), and what the [conformance kit](crate::kit) checks: implement it
/// for your own store to run the kit against it. The rules:
///
/// - a token equal to the mark is accepted (the same holder again), a lower one refused with
///   [`Outcome::Stale`] and the mark;
/// - the check and the write are one atomic step on the store, never a read, a comparison in
///   the client and a write;
/// - a write or claim that is applied raises the mark to its token;
/// - a write with a [`WriteId`] that was applied before returns [`Outcome::Applied`] again
///   without applying anything.
///
/// # Examples
///
/// ```
/// use ydb_coordination::FencingToken;
/// use ydb_coordination_fence::{FencedStore, Outcome, Token, Write, memory::MemoryStore};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), ydb_coordination_fence::Error> {
/// let store = MemoryStore::new();
/// let (old, new) = (Token::new(FencingToken::new(0, 1)), Token::new(FencingToken::new(0, 2)));
/// assert_eq!(store.write("ledger", old, Write::new(b"a")).await?, Outcome::Applied);
/// assert_eq!(store.claim("ledger", new).await?, Outcome::Applied);
/// let refused = store.write("ledger", old, Write::new(b"b")).await?;
/// assert_eq!(refused, Outcome::Stale { current: new });
/// assert_eq!(store.read("ledger").await?.value.as_deref(), Some(&b"a"[..]));
/// # Ok(())
/// # }
/// ```
pub trait FencedStore {
    /// Raises the name's mark to `token` without writing data, unless the mark is greater:
    /// what a new holder does right after it acquires the lock, so that no write of an older
    /// holder can land between its grant and its first write.
    ///
    /// # Errors
    ///
    /// The store's failures; a refusal is [`Outcome::Stale`].
    fn claim(&self, name: &str, token: Token) -> impl Future<Output = Result<Outcome>> + Send;

    /// Writes `write`'s value for the name if `token` is not below its mark, raising the mark
    /// to `token`, in one atomic step.
    ///
    /// # Errors
    ///
    /// The store's failures; a refusal is [`Outcome::Stale`].
    fn write(
        &self,
        name: &str,
        token: Token,
        write: Write<'_>,
    ) -> impl Future<Output = Result<Outcome>> + Send;

    /// The name's mark and value, as last written.
    ///
    /// # Errors
    ///
    /// The store's failures.
    fn read(&self, name: &str) -> impl Future<Output = Result<Record>> + Send;
}

/// One fenced write of [`FencedStore::write`]: a value, and optionally a write id.
///
/// ```
/// use ydb_coordination_fence::{Write, WriteId};
///
/// let write = Write::new(b"balance=10").id(WriteId::new(7));
/// assert_eq!(write.id, Some(WriteId::new(7)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Write<'a> {
    /// The value to store for the name.
    pub value: &'a [u8],
    /// The write's id, if it may be retried after an unknown outcome.
    pub id: Option<WriteId>,
}

impl<'a> Write<'a> {
    /// A write of `value` without a write id.
    pub fn new(value: &'a [u8]) -> Self {
        Self { value, id: None }
    }

    /// The same write with the id `id`.
    pub fn id(mut self, id: WriteId) -> Self {
        self.id = Some(id);
        self
    }
}

/// What [`FencedStore::read`] finds for a name.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Record {
    /// The greatest token accepted, if any.
    pub mark: Option<Token>,
    /// The value last written, if any.
    pub value: Option<Vec<u8>>,
}
