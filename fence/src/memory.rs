//! [`MemoryStore`]: the reference implementation of [`FencedStore`], in one process.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, PoisonError};

use crate::error::Result;
use crate::kit::Subject;
use crate::outcome::Outcome;
use crate::rule::judge;
use crate::store::{FencedStore, Record, Write};
use crate::token::{Token, WriteId};

/// A fenced store in memory: every name's mark, value and applied write ids behind one lock,
/// so that each check and write is one atomic step.
///
/// The reference the [conformance kit](crate::kit) is written against, and a stand-in for a
/// store in tests. It forgets everything when dropped, and remembers every write id until then.
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
/// let token = Token::new(FencingToken::new(0, 3));
/// assert_eq!(store.write("a", token, Write::new(b"x")).await?, Outcome::Applied);
/// assert_eq!(store.read("a").await?.mark, Some(token));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Default)]
pub struct MemoryStore {
    names: Mutex<HashMap<String, Entry>>,
}

#[derive(Debug, Default)]
struct Entry {
    mark: Option<Token>,
    value: Option<Vec<u8>>,
    applied: HashSet<WriteId>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs `f` on the name's entry under the lock.
    fn with<T>(&self, name: &str, f: impl FnOnce(&mut Entry) -> T) -> T {
        let mut names = self.names.lock().unwrap_or_else(PoisonError::into_inner);
        f(names.entry(name.to_string()).or_default())
    }
}

impl FencedStore for MemoryStore {
    /// # Cancel safety
    ///
    /// Cancel safe: it completes at its first poll.
    async fn claim(&self, name: &str, token: Token) -> Result<Outcome> {
        Ok(self.with(name, |e| {
            let outcome = judge(e.mark, token, false);
            if outcome.is_applied() {
                e.mark = Some(token);
            }
            outcome
        }))
    }

    /// # Cancel safety
    ///
    /// Cancel safe: it completes at its first poll.
    async fn write(&self, name: &str, token: Token, write: Write<'_>) -> Result<Outcome> {
        Ok(self.with(name, |e| {
            let replayed = write.id.is_some_and(|id| e.applied.contains(&id));
            let outcome = judge(e.mark, token, replayed);
            if outcome.is_applied() && !replayed {
                e.mark = Some(token);
                e.value = Some(write.value.to_vec());
                e.applied.extend(write.id);
            }
            outcome
        }))
    }

    /// # Cancel safety
    ///
    /// Cancel safe: it completes at its first poll.
    async fn read(&self, name: &str) -> Result<Record> {
        Ok(self.with(name, |e| Record {
            mark: e.mark,
            value: e.value.clone(),
        }))
    }
}

impl Subject for MemoryStore {
    /// A write in memory has no step before the one that applies it: abandoning it leaves
    /// nothing.
    async fn write_abandoned(&self, _name: &str, _token: Token, _write: Write<'_>) -> Result<()> {
        Ok(())
    }
}
