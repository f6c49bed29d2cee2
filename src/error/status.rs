//! The YDB status a server answers with, as this crate's own type.

use std::fmt;

/// The status a YDB server answered with (`Ydb.StatusIds.StatusCode`), read by
/// [`Error::status`](super::Error::status). Which [`ErrorKind`](super::ErrorKind) each one
/// reads as is the table on [`ErrorKind`](super::ErrorKind).
///
/// Match on it with a wildcard arm: YDB adds statuses.
///
/// # Examples
///
/// ```
/// use ydb_coordination::error::StatusCode;
///
/// assert_eq!(StatusCode::try_from(400140), Ok(StatusCode::NotFound));
/// assert_eq!(StatusCode::NotFound.as_str(), "NOT_FOUND");
/// assert_eq!(StatusCode::NotFound.code(), 400140);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
#[repr(i32)]
pub enum StatusCode {
    /// `STATUS_CODE_UNSPECIFIED`: no status.
    Unspecified = 0,
    /// `SUCCESS`.
    Success = 400_000,
    /// `BAD_REQUEST`: the request is malformed or its arguments are out of range.
    BadRequest = 400_010,
    /// `UNAUTHORIZED`: the credentials were refused.
    Unauthorized = 400_020,
    /// `INTERNAL_ERROR`.
    InternalError = 400_030,
    /// `ABORTED`: the operation was cut short (a semaphore deleted under a waiter).
    Aborted = 400_040,
    /// `UNAVAILABLE`: the server cannot serve now.
    Unavailable = 400_050,
    /// `OVERLOADED`: the server sheds load.
    Overloaded = 400_060,
    /// `SCHEME_ERROR`: the path does not name what the request needs.
    SchemeError = 400_070,
    /// `GENERIC_ERROR`.
    GenericError = 400_080,
    /// `TIMEOUT`: the operation's timeout passed on the server.
    Timeout = 400_090,
    /// `BAD_SESSION`.
    BadSession = 400_100,
    /// `PRECONDITION_FAILED`: the state does not allow the request.
    PreconditionFailed = 400_120,
    /// `ALREADY_EXISTS`.
    AlreadyExists = 400_130,
    /// `NOT_FOUND`.
    NotFound = 400_140,
    /// `SESSION_EXPIRED`: the coordination session ended on the server.
    SessionExpired = 400_150,
    /// `CANCELLED`.
    Cancelled = 400_160,
    /// `UNDETERMINED`: the outcome is unknown.
    Undetermined = 400_170,
    /// `UNSUPPORTED`.
    Unsupported = 400_180,
    /// `SESSION_BUSY`.
    SessionBusy = 400_190,
    /// `EXTERNAL_ERROR`.
    ExternalError = 400_200,
}

/// Every status, for the conversions.
const ALL: [StatusCode; 21] = [
    StatusCode::Unspecified,
    StatusCode::Success,
    StatusCode::BadRequest,
    StatusCode::Unauthorized,
    StatusCode::InternalError,
    StatusCode::Aborted,
    StatusCode::Unavailable,
    StatusCode::Overloaded,
    StatusCode::SchemeError,
    StatusCode::GenericError,
    StatusCode::Timeout,
    StatusCode::BadSession,
    StatusCode::PreconditionFailed,
    StatusCode::AlreadyExists,
    StatusCode::NotFound,
    StatusCode::SessionExpired,
    StatusCode::Cancelled,
    StatusCode::Undetermined,
    StatusCode::Unsupported,
    StatusCode::SessionBusy,
    StatusCode::ExternalError,
];

impl StatusCode {
    /// The number on the wire.
    ///
    /// ```
    /// # use ydb_coordination::error::StatusCode;
    /// assert_eq!(StatusCode::Success.code(), 400000);
    /// ```
    pub const fn code(self) -> i32 {
        self as i32
    }

    /// The name YDB's protocol gives it, e.g. `NOT_FOUND`.
    ///
    /// ```
    /// # use ydb_coordination::error::StatusCode;
    /// assert_eq!(StatusCode::SessionExpired.as_str(), "SESSION_EXPIRED");
    /// ```
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Unspecified => "STATUS_CODE_UNSPECIFIED",
            Self::Success => "SUCCESS",
            Self::BadRequest => "BAD_REQUEST",
            Self::Unauthorized => "UNAUTHORIZED",
            Self::InternalError => "INTERNAL_ERROR",
            Self::Aborted => "ABORTED",
            Self::Unavailable => "UNAVAILABLE",
            Self::Overloaded => "OVERLOADED",
            Self::SchemeError => "SCHEME_ERROR",
            Self::GenericError => "GENERIC_ERROR",
            Self::Timeout => "TIMEOUT",
            Self::BadSession => "BAD_SESSION",
            Self::PreconditionFailed => "PRECONDITION_FAILED",
            Self::AlreadyExists => "ALREADY_EXISTS",
            Self::NotFound => "NOT_FOUND",
            Self::SessionExpired => "SESSION_EXPIRED",
            Self::Cancelled => "CANCELLED",
            Self::Undetermined => "UNDETERMINED",
            Self::Unsupported => "UNSUPPORTED",
            Self::SessionBusy => "SESSION_BUSY",
            Self::ExternalError => "EXTERNAL_ERROR",
        }
    }
}

/// A number that is no known status.
///
/// ```
/// # use ydb_coordination::error::{StatusCode, UnknownStatus};
/// assert_eq!(StatusCode::try_from(7), Err(UnknownStatus(7)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnknownStatus(pub i32);

impl fmt::Display for UnknownStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} is not a known YDB status", self.0)
    }
}

impl std::error::Error for UnknownStatus {}

impl TryFrom<i32> for StatusCode {
    type Error = UnknownStatus;

    fn try_from(code: i32) -> Result<Self, UnknownStatus> {
        ALL.into_iter()
            .find(|s| s.code() == code)
            .ok_or(UnknownStatus(code))
    }
}

impl fmt::Display for StatusCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every status has YDB's number and name: the wire types agree.
    #[test]
    fn every_status_matches_the_protocol() {
        use ydb_grpc::ydb_proto::status_ids::StatusCode as Wire;
        for status in ALL {
            let wire = Wire::try_from(status.code()).map(|w| w.as_str_name());
            assert_eq!(wire, Ok(status.as_str()), "{status:?}");
        }
        for wire in 0..=400_300 {
            if let Ok(w) = Wire::try_from(wire) {
                assert_eq!(
                    StatusCode::try_from(wire).map(StatusCode::as_str),
                    Ok(w.as_str_name())
                );
            }
        }
    }
}
