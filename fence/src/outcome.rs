//! What a fenced write or claim came to.

use std::fmt;

use crate::token::Token;

/// What the resource did with a fenced write or claim: applied it, or refused it as stale.
///
/// Not an error to be mapped: a holder that gets [`Outcome::Stale`] has lost its lock and must
/// stop writing. [`Outcome::into_result`] turns it into a `Result` for `?`.
///
/// # Examples
///
/// ```
/// use ydb_coordination::FencingToken;
/// use ydb_coordination_fence::{Outcome, Token};
///
/// let newer = Token::new(FencingToken::new(0, 8));
/// let refused = Outcome::Stale { current: newer };
/// assert!(!refused.is_applied());
/// assert_eq!(refused.into_result().unwrap_err().current, newer);
/// ```
#[must_use = "a stale write was not applied: its holder has lost the lock and must stop"]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The write was applied (or, retried with the same write id, had been applied before);
    /// the name's mark is at least the write's token.
    Applied,
    /// Refused: the resource had accepted `current`, a greater token, so this holder's lock
    /// has passed to another. Nothing was written.
    Stale {
        /// The greatest token the resource had accepted for the name.
        current: Token,
    },
}

impl Outcome {
    /// Whether the write was applied.
    pub fn is_applied(&self) -> bool {
        matches!(self, Outcome::Applied)
    }

    /// `Ok(())` when applied, the refusal as an error otherwise.
    ///
    /// # Errors
    ///
    /// [`StaleToken`] when the write was refused.
    pub fn into_result(self) -> Result<(), StaleToken> {
        match self {
            Outcome::Applied => Ok(()),
            Outcome::Stale { current } => Err(StaleToken { current }),
        }
    }
}

/// What a fence check in the caller's own transaction came to (the PostgreSQL and YDB
/// adapters).
///
/// # Examples
///
/// ```
/// use ydb_coordination_fence::Admission;
///
/// let replay: Admission<()> = Admission::Replayed;
/// assert!(replay.outcome().is_applied());
/// ```
#[must_use = "a stale check aborted the transaction: its holder has lost the lock and must stop"]
#[derive(Debug)]
pub enum Admission<T> {
    /// The token is not below the mark, which it now is: the caller's statements may follow
    /// in the transaction, `T`.
    Granted(T),
    /// The write id was applied before: the transaction was aborted (or rolled back), write
    /// nothing more.
    Replayed,
    /// The mark is greater: the transaction was aborted (or rolled back), and the holder has
    /// lost its lock.
    Stale {
        /// The greatest token accepted for the name.
        current: Token,
    },
}

impl<T> Admission<T> {
    /// The outcome as [`FencedStore`](crate::FencedStore) reports it: `Granted` and `Replayed` are applied (once
    /// the transaction commits, for `Granted`).
    pub fn outcome(&self) -> Outcome {
        match self {
            Admission::Granted(_) | Admission::Replayed => Outcome::Applied,
            Admission::Stale { current } => Outcome::Stale { current: *current },
        }
    }
}

/// A write refused as stale, as an error ([`Outcome::into_result`]).
///
/// ```
/// use ydb_coordination::FencingToken;
/// use ydb_coordination_fence::{StaleToken, Token};
///
/// let e = StaleToken { current: Token::new(FencingToken::new(0, 8)) };
/// assert!(e.to_string().contains('8'));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StaleToken {
    /// The greatest token the resource had accepted for the name.
    pub current: Token,
}

impl fmt::Display for StaleToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the write was refused: the resource accepted the newer fencing token {}, so this holder lost its lock and must stop writing",
            self.current
        )
    }
}

impl std::error::Error for StaleToken {}
