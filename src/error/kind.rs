//! The words of failure: what went wrong ([`ErrorKind`]), whether the request may go again
//! ([`RetryRule`]) and the YDB status a server answers with ([`StatusCode`](super::StatusCode)). Which status
//! reads as which kind and rule is the table in `classify.rs`.

/// What went wrong, in categories a caller can act on.
///
/// Match on this with a wildcard arm: new kinds may be added.
///
/// # Classification
///
/// Every status a failure can carry reads as one kind, with a [`RetryRule`] (may the same
/// request be sent again: [`Error::retry_rule`](crate::Error::retry_rule)) and a verdict on
/// the endpoint (blamed ones are preferred last and reconnected). The rules follow
/// ydb-go-sdk's; `docs/connecting.md` says where and why they differ.
///
/// YDB statuses (the server answered, so none blames the endpoint):
///
/// | status | kind | retry |
/// |---|---|---|
/// | `BAD_REQUEST`, `UNSUPPORTED` | [`InvalidArgument`](ErrorKind::InvalidArgument) | never |
/// | `UNAUTHORIZED` | [`Unauthorized`](ErrorKind::Unauthorized) | never |
/// | `INTERNAL_ERROR`, `GENERIC_ERROR`, `EXTERNAL_ERROR`, `SUCCESS`/unspecified in a failure, unknown numbers | [`Internal`](ErrorKind::Internal) | never |
/// | `ABORTED` | [`Aborted`](ErrorKind::Aborted) | always |
/// | `UNAVAILABLE`, `SESSION_BUSY` | [`Unavailable`](ErrorKind::Unavailable) | always |
/// | `OVERLOADED` | [`Overloaded`](ErrorKind::Overloaded) | always |
/// | `SCHEME_ERROR`, `NOT_FOUND` | [`NotFound`](ErrorKind::NotFound) | never |
/// | `TIMEOUT` | [`Timeout`](ErrorKind::Timeout) | idempotent |
/// | `BAD_SESSION` | [`BadSession`](ErrorKind::BadSession) | always |
/// | `PRECONDITION_FAILED` | [`PreconditionFailed`](ErrorKind::PreconditionFailed) | never |
/// | `ALREADY_EXISTS` | [`AlreadyExists`](ErrorKind::AlreadyExists) | never |
/// | `SESSION_EXPIRED` | [`SessionExpired`](ErrorKind::SessionExpired) | never (a new session may do) |
/// | `CANCELLED` | [`Cancelled`](ErrorKind::Cancelled) | never |
/// | `UNDETERMINED` | [`OutcomeUnknown`](ErrorKind::OutcomeUnknown) | idempotent |
///
/// gRPC statuses a server (or a proxy) sent, or tonic made up for a stream that ended wrongly
/// (`UNKNOWN`, `INTERNAL`):
///
/// | code | kind | retry | blames the endpoint |
/// |---|---|---|---|
/// | `UNAVAILABLE` | [`Transport`](ErrorKind::Transport) | idempotent | yes |
/// | `RESOURCE_EXHAUSTED` | [`Overloaded`](ErrorKind::Overloaded) | always | no |
/// | `ABORTED` | [`Aborted`](ErrorKind::Aborted) | always | yes |
/// | `INTERNAL`, `UNKNOWN` | [`Internal`](ErrorKind::Internal) | idempotent | yes |
/// | `DATA_LOSS` | [`Internal`](ErrorKind::Internal) | never | yes |
/// | `CANCELLED` | [`Unavailable`](ErrorKind::Unavailable) | idempotent | no |
/// | `DEADLINE_EXCEEDED` | [`Timeout`](ErrorKind::Timeout) | idempotent | no |
/// | `UNIMPLEMENTED` | [`Internal`](ErrorKind::Internal) | never | no |
/// | `INVALID_ARGUMENT`, `OUT_OF_RANGE` | [`InvalidArgument`](ErrorKind::InvalidArgument) | never | no |
/// | `NOT_FOUND` | [`NotFound`](ErrorKind::NotFound) | never | no |
/// | `ALREADY_EXISTS` | [`AlreadyExists`](ErrorKind::AlreadyExists) | never | no |
/// | `FAILED_PRECONDITION` | [`PreconditionFailed`](ErrorKind::PreconditionFailed) | never | no |
/// | `UNAUTHENTICATED`, `PERMISSION_DENIED` | [`Unauthorized`](ErrorKind::Unauthorized) | never | no |
/// | `OK` in a failure | [`Protocol`](ErrorKind::Protocol) | never | no |
///
/// Failures of the client's own transport (connection refused or reset, HTTP/2 errors),
/// whatever gRPC code they come with, are [`Transport`](ErrorKind::Transport) and blame the
/// endpoint; they are repeated always when the connection never came up (nothing was
/// sent), for idempotent calls otherwise, and never when the client refused the server's
/// TLS certificate. An attempt nobody answered in time is [`Timeout`](ErrorKind::Timeout),
/// idempotent, and blames the endpoint.
///
/// # Examples
///
/// ```
/// use ydb_coordination::{Error, ErrorKind, error::StatusCode};
///
/// let err = Error::from_status(StatusCode::NotFound, "semaphore does not exist");
/// assert_eq!(err.kind(), ErrorKind::NotFound);
/// assert!(!err.is_retryable());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The network or the gRPC layer failed (connection refused, reset, TLS, HTTP/2).
    Transport,
    /// The session no longer exists on the server, or the client-side safety deadline passed
    /// without contact: every lease of the session may have been lost.
    SessionExpired,
    /// The session was closed by [`Session::close`](crate::Session::close) or dropped.
    SessionClosed,
    /// The request may or may not have been carried out: it was in flight when the stream
    /// broke and cannot be safely repeated (create and delete).
    OutcomeUnknown,
    /// A client-side time limit passed (connect, an attempt nobody answered, stop), or the
    /// server's `TIMEOUT` status. Never the answer "not acquired in time": that is
    /// [`NotAcquired`](ErrorKind::NotAcquired).
    Timeout,
    /// The server answered that the semaphore (or the rate-limiter units) could not be
    /// granted within the request's own timeout: nothing is held, the lock is busy. The only
    /// kind the `try_` and `_timeout` forms turn into `None` (or `false`).
    NotAcquired,
    /// The operation was cancelled by the caller or superseded.
    Cancelled,
    /// The server aborted the request (`ABORTED`), e.g. the semaphore was force-deleted
    /// while waiting.
    Aborted,
    /// The coordination node or semaphore does not exist (`NOT_FOUND`, `SCHEME_ERROR`).
    NotFound,
    /// The semaphore already exists (`ALREADY_EXISTS`).
    AlreadyExists,
    /// The request conflicts with the semaphore's state (`PRECONDITION_FAILED`): not empty,
    /// ephemeral, or a limit mismatch.
    PreconditionFailed,
    /// A lock found its name in use by a lock of the other mode: a [`Mutex`](crate::Mutex)
    /// with a [lock delay](crate::Mutex::lock_delay) (a persistent semaphore) and one
    /// without (an ephemeral semaphore) cannot share a name. The message names the other
    /// mode and what to do: use the same mode as the name's other users, or another name.
    /// Never retried.
    ModeMismatch,
    /// The request or the options were rejected as invalid (`BAD_REQUEST`, a bad
    /// connection string, out-of-range options).
    InvalidArgument,
    /// The service is temporarily unavailable (`UNAVAILABLE`), or the client could not reach
    /// it in time: no session to the coordination node came within an acquire's bound, a
    /// lock space could not confirm its membership in the directory or read its layout
    /// within a lock's bound.
    Unavailable,
    /// The service is overloaded (`OVERLOADED`).
    Overloaded,
    /// Credentials were rejected (`UNAUTHORIZED`) or could not be obtained.
    Unauthorized,
    /// The session was taken over by another stream (`BAD_SESSION`).
    BadSession,
    /// The server sent something that breaks the protocol.
    Protocol,
    /// Any other server error (`INTERNAL_ERROR`, `GENERIC_ERROR`, unknown statuses).
    Internal,
}

/// Whether a failed request may be sent again as it is, the way YDB's SDKs decide it.
///
/// A request that may have been carried out before it failed (its answer lost, an attempt
/// nobody answered in time) is repeated only when doing it twice changes nothing: every
/// node administration call and discovery is such a call. The table in [`ErrorKind`] gives
/// the rule of every status.
///
/// # Examples
///
/// ```
/// use ydb_coordination::{Error, error::RetryRule, error::StatusCode};
///
/// let err = Error::from_status(StatusCode::Undetermined, "the answer was lost");
/// assert_eq!(err.retry_rule(), RetryRule::Idempotent);
/// assert!(err.retry_rule().allows(true));
/// assert!(!err.retry_rule().allows(false));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RetryRule {
    /// Sending it again fails the same way (`NOT_FOUND`, `BAD_REQUEST`, ...).
    Never,
    /// It may have been carried out: only an idempotent request may be sent again
    /// (`UNDETERMINED`, gRPC `INTERNAL`, a broken connection, an attempt timeout).
    Idempotent,
    /// It was not carried out: any request may be sent again (`UNAVAILABLE`, `OVERLOADED`,
    /// `ABORTED`, a connection that never came up).
    Always,
}

impl RetryRule {
    /// Whether a request that is (or is not) `idempotent` may be sent again.
    pub fn allows(self, idempotent: bool) -> bool {
        match self {
            Self::Never => false,
            Self::Idempotent => idempotent,
            Self::Always => true,
        }
    }
}
