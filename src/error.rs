//! The crate's one error type.

use std::fmt;
use std::sync::Arc;

pub use ydb_grpc::ydb_proto::status_ids::StatusCode;

use crate::proto::IssueMessage;

/// What went wrong, in categories a caller can act on.
///
/// Match on this with a wildcard arm: new kinds may be added.
///
/// # Examples
///
/// ```
/// use ydb_coordination::{Error, ErrorKind, StatusCode};
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
    /// A client-side time limit passed (connect, acquire with a timeout, stop).
    Timeout,
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
    /// The request or the options were rejected as invalid (`BAD_REQUEST`, a bad
    /// connection string, out-of-range options).
    InvalidArgument,
    /// The service is temporarily unavailable (`UNAVAILABLE`).
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

impl ErrorKind {
    /// The kind a YDB status maps to.
    pub fn from_status(status: StatusCode) -> Self {
        match status {
            StatusCode::NotFound | StatusCode::SchemeError => Self::NotFound,
            StatusCode::AlreadyExists => Self::AlreadyExists,
            StatusCode::PreconditionFailed => Self::PreconditionFailed,
            StatusCode::BadRequest | StatusCode::Unsupported => Self::InvalidArgument,
            StatusCode::Unauthorized => Self::Unauthorized,
            StatusCode::Aborted => Self::Aborted,
            StatusCode::Unavailable => Self::Unavailable,
            StatusCode::Overloaded => Self::Overloaded,
            StatusCode::Timeout => Self::Timeout,
            StatusCode::BadSession => Self::BadSession,
            StatusCode::SessionExpired => Self::SessionExpired,
            StatusCode::Cancelled => Self::Cancelled,
            StatusCode::Undetermined => Self::OutcomeUnknown,
            _ => Self::Internal,
        }
    }
}

/// One issue attached to a YDB status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issue {
    /// The server's message.
    pub message: String,
    /// The server's issue code (0 when unset).
    pub code: u32,
    /// Nested issues.
    pub issues: Vec<Issue>,
}

impl From<&IssueMessage> for Issue {
    fn from(m: &IssueMessage) -> Self {
        Self {
            message: m.message.clone(),
            code: m.issue_code,
            issues: m.issues.iter().map(Issue::from).collect(),
        }
    }
}

type Source = Arc<dyn std::error::Error + Send + Sync + 'static>;

/// The error of every fallible operation in this crate.
///
/// Cheap to clone: one cause is shared by every caller it reaches (a lost session fails all
/// of its pending requests with the same error).
///
/// # Examples
///
/// ```
/// use ydb_coordination::{Error, ErrorKind};
///
/// fn handle(err: &Error) -> &'static str {
///     match err.kind() {
///         ErrorKind::AlreadyExists => "fine, someone created it first",
///         ErrorKind::SessionExpired => "locks are gone: stop the work",
///         _ if err.is_retryable() => "try again",
///         _ => "give up",
///     }
/// }
/// # let _ = handle;
/// ```
#[derive(Clone)]
pub struct Error(Arc<Inner>);

struct Inner {
    kind: ErrorKind,
    message: String,
    status: Option<StatusCode>,
    issues: Vec<Issue>,
    grpc: Option<tonic::Status>,
    source: Option<Source>,
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An error of the given kind with a message.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self(Arc::new(Inner {
            kind,
            message: message.into(),
            status: None,
            issues: Vec::new(),
            grpc: None,
            source: None,
        }))
    }

    /// The error for a YDB status with a message.
    pub fn from_status(status: StatusCode, message: impl Into<String>) -> Self {
        let mut err = Self::new(ErrorKind::from_status(status), message);
        if let Some(inner) = Arc::get_mut(&mut err.0) {
            inner.status = Some(status);
        }
        err
    }

    /// The error for a YDB status as the server reported it (raw status code and issues).
    pub(crate) fn from_ydb(status: i32, issues: &[IssueMessage], context: &str) -> Self {
        let code = StatusCode::try_from(status).unwrap_or(StatusCode::Unspecified);
        let issues: Vec<Issue> = issues.iter().map(Issue::from).collect();
        let detail = issues
            .iter()
            .map(|i| i.message.as_str())
            .collect::<Vec<_>>()
            .join("; ");
        let message = if detail.is_empty() {
            format!("{context}: {}", code.as_str_name())
        } else {
            format!("{context}: {} ({detail})", code.as_str_name())
        };
        Self(Arc::new(Inner {
            kind: ErrorKind::from_status(code),
            message,
            status: Some(code),
            issues,
            grpc: None,
            source: None,
        }))
    }

    /// A transport-level error from tonic.
    pub(crate) fn from_grpc(status: tonic::Status, context: &str) -> Self {
        let kind = match status.code() {
            tonic::Code::Unauthenticated | tonic::Code::PermissionDenied => ErrorKind::Unauthorized,
            tonic::Code::InvalidArgument => ErrorKind::InvalidArgument,
            tonic::Code::NotFound => ErrorKind::NotFound,
            tonic::Code::ResourceExhausted => ErrorKind::Overloaded,
            tonic::Code::Unimplemented => ErrorKind::Internal,
            tonic::Code::DeadlineExceeded => ErrorKind::Timeout,
            _ => ErrorKind::Transport,
        };
        let message = format!("{context}: {} ({})", status.message(), status.code());
        Self(Arc::new(Inner {
            kind,
            message,
            status: None,
            issues: Vec::new(),
            grpc: Some(status),
            source: None,
        }))
    }

    /// Attaches a source error.
    pub(crate) fn with_source(
        kind: ErrorKind,
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self(Arc::new(Inner {
            kind,
            message: message.into(),
            status: None,
            issues: Vec::new(),
            grpc: None,
            source: Some(Arc::new(source)),
        }))
    }

    /// The same cause as another error, re-labelled with a different kind and context (for
    /// example "session expired" caused by a transport failure).
    pub(crate) fn caused_by(kind: ErrorKind, message: impl Into<String>, cause: &Error) -> Self {
        Self(Arc::new(Inner {
            kind,
            message: message.into(),
            status: cause.status(),
            issues: cause.issues().to_vec(),
            grpc: None,
            source: Some(Arc::new(cause.clone())),
        }))
    }

    /// What went wrong.
    pub fn kind(&self) -> ErrorKind {
        self.0.kind
    }

    /// The YDB status, when the server reported one.
    pub fn status(&self) -> Option<StatusCode> {
        self.0.status
    }

    /// The issues the server attached to its status.
    pub fn issues(&self) -> &[Issue] {
        &self.0.issues
    }

    /// The gRPC status, for transport-level errors.
    pub fn grpc_status(&self) -> Option<&tonic::Status> {
        self.0.grpc.as_ref()
    }

    /// Whether the same operation may succeed if tried again later (on this or a new session).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self.0.kind,
            ErrorKind::Transport
                | ErrorKind::Unavailable
                | ErrorKind::Overloaded
                | ErrorKind::Timeout
                | ErrorKind::SessionExpired
                | ErrorKind::BadSession
                | ErrorKind::Aborted
                | ErrorKind::OutcomeUnknown
        )
    }

    /// Whether the error means the session is gone (expired, closed or taken over), so its
    /// leases are lost and a new session is needed.
    pub fn is_session_lost(&self) -> bool {
        matches!(
            self.0.kind,
            ErrorKind::SessionExpired | ErrorKind::SessionClosed | ErrorKind::BadSession
        )
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Error");
        d.field("kind", &self.0.kind)
            .field("message", &self.0.message);
        if let Some(status) = self.0.status {
            d.field("status", &status);
        }
        if let Some(source) = &self.0.source {
            d.field("source", source);
        }
        d.finish()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.message)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        if let Some(source) = &self.0.source {
            return Some(source.as_ref());
        }
        self.0
            .grpc
            .as_ref()
            .map(|s| s as &(dyn std::error::Error + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_kinds() {
        assert_eq!(
            ErrorKind::from_status(StatusCode::SchemeError),
            ErrorKind::NotFound
        );
        assert_eq!(
            ErrorKind::from_status(StatusCode::BadRequest),
            ErrorKind::InvalidArgument
        );
        assert_eq!(
            ErrorKind::from_status(StatusCode::Success),
            ErrorKind::Internal
        );
    }

    #[test]
    fn ydb_errors_keep_status_and_issues() {
        let err = Error::from_ydb(
            StatusCode::PreconditionFailed as i32,
            &[crate::proto::issue("Semaphore not empty")],
            "delete semaphore \"a\"",
        );
        assert_eq!(err.kind(), ErrorKind::PreconditionFailed);
        assert_eq!(err.status(), Some(StatusCode::PreconditionFailed));
        assert_eq!(err.issues().len(), 1);
        assert!(!err.is_retryable());
    }

    #[test]
    fn unknown_status_numbers_are_internal() {
        let err = Error::from_ydb(123, &[], "x");
        assert_eq!(err.kind(), ErrorKind::Internal);
    }

    #[test]
    fn caused_by_keeps_the_chain() {
        let cause = Error::new(ErrorKind::Transport, "reset");
        let err = Error::caused_by(ErrorKind::SessionExpired, "lost", &cause);
        let source = std::error::Error::source(&err).map(ToString::to_string);
        assert_eq!(source.as_deref(), Some("reset"));
        assert!(err.is_session_lost());
    }
}
