//! The one error type of the crate.

use std::error::Error as StdError;
use std::fmt;

/// What went wrong, for deciding what to do about it.
///
/// A refused write is not an error: it is [`Outcome::Stale`](crate::Outcome::Stale).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The store could not be reached or the connection broke. A write in flight may or may
    /// not have been applied: retry it with the same [`WriteId`](crate::WriteId) to learn its
    /// first outcome.
    Unavailable,
    /// The store answered with an error of its own (a failed statement, a refused command,
    /// missing rights, a table that was never set up).
    Store,
    /// What the store holds for a name is not what this crate writes there (a mark that is not
    /// a token, a fence object without its token): someone else wrote it.
    Corrupt,
    /// The request cannot be carried out as given (a name or key the store cannot take, keys
    /// of a Redis write in different hash slots).
    InvalidInput,
    /// A compare-and-swap write lost to other writers of the same name every time it was
    /// tried: nothing was applied.
    Contended,
}

/// The error of every operation of this crate: a [kind](ErrorKind), a sentence saying what
/// happened, and the cause in [`source`](StdError::source).
///
/// # Examples
///
/// ```
/// use ydb_coordination_fence::{Error, ErrorKind};
///
/// let e = Error::new(ErrorKind::Corrupt, "the mark of \"ledger\" is not a token");
/// assert_eq!(e.kind(), ErrorKind::Corrupt);
/// ```
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    source: Option<Box<dyn StdError + Send + Sync + 'static>>,
}

impl Error {
    /// An error of `kind` that says `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            source: None,
        }
    }

    /// The same error, caused by `source`.
    ///
    /// ```
    /// use std::error::Error as _;
    /// use ydb_coordination_fence::{Error, ErrorKind};
    ///
    /// let io = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
    /// let e = Error::new(ErrorKind::Unavailable, "the store went away").with_source(io);
    /// assert!(e.source().is_some());
    /// ```
    pub fn with_source(mut self, source: impl StdError + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    /// What went wrong.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl StdError for Error {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn StdError + 'static))
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
