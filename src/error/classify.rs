//! The one table of how a failure is classified: for every gRPC status code and every YDB
//! status, the [`ErrorKind`] it reads as, whether the request may be sent again
//! ([`RetryRule`]), and whether it blames the endpoint (which is then preferred last and
//! reconnected, see `endpoints.rs`).
//!
//! Pure: plain functions of a code. The rules follow ydb-go-sdk (`internal/xerrors`:
//! `operation.go` and `transport.go` for the retry types, `MustPessimizeEndpoint` for the
//! blame: every gRPC-level failure but `RESOURCE_EXHAUSTED` and `OUT_OF_RANGE`, never a YDB
//! status) and agree with the Java SDK's `StatusCode` retry flags. Go's "retryable" is
//! [`RetryRule::Always`], its "conditionally retryable" [`RetryRule::Idempotent`], its
//! "undefined" [`RetryRule::Never`]. Where this crate differs, the row says why:
//!
//! - YDB `TIMEOUT` is repeated for idempotent calls (Go: never). Go's callers set an
//!   operation timeout and `TIMEOUT` means it passed; this crate sets none, so the status is
//!   one of the server's internal deadlines (a busy tablet) that a repeat within the
//!   caller's own budget may well beat.
//! - A failure in the client's own transport (connection refused or reset, HTTP/2 errors,
//!   a TLS handshake) blames the endpoint whatever gRPC code tonic gives it. grpc-go reports
//!   these as `UNAVAILABLE`, which Go's pool bans on; tonic reports a cut connection as
//!   `UNKNOWN` or `INTERNAL`, so the code alone cannot tell a broken wire from a server's
//!   answer. tonic keeps the client-side error as the status's source; a status without
//!   one (a server's, or tonic's for a stream that ended without a status) is classified
//!   by its code.
//! - gRPC `UNKNOWN` is repeated for idempotent calls (Go: never), since tonic reports a
//!   stream cut short (no `grpc-status` trailer, as a proxy or a node shutting down leaves
//!   it) as `UNKNOWN` with no cause. gRPC `CANCELLED` from the server reads as
//!   [`Unavailable`](ErrorKind::Unavailable): [`Cancelled`](ErrorKind::Cancelled) is the
//!   caller's own.
//! - A gRPC-level failure that says the request was wrong (`INVALID_ARGUMENT`, `NOT_FOUND`,
//!   `ALREADY_EXISTS`, `FAILED_PRECONDITION`, `UNIMPLEMENTED`), ran out of the caller's time
//!   (`DEADLINE_EXCEEDED`, `CANCELLED`) or refused the credentials (`UNAUTHENTICATED`,
//!   `PERMISSION_DENIED`) does not blame the endpoint: another endpoint would answer the
//!   same (an older ydb-go-sdk excluded the same codes; the current one bans on all but
//!   two).
//! - An attempt that got no answer within its deadline blames the endpoint (Go does not
//!   ban on a context deadline: it has no per-attempt deadline, so a timed-out call there
//!   is the caller's budget running out, not a sign that one node hangs).
//! - Go waits longer after `OVERLOADED` and `RESOURCE_EXHAUSTED` (its slow backoff); here
//!   every retry uses the same [`Backoff`](crate::config::Backoff), bounded by the request timeout.

use super::kind::{ErrorKind, RetryRule};
use super::status::StatusCode;

/// What a failure reads as: its kind, its retry rule, and whether the endpoint is at fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Class {
    pub(crate) kind: ErrorKind,
    pub(crate) retry: RetryRule,
    pub(crate) blames_endpoint: bool,
}

const fn class(kind: ErrorKind, retry: RetryRule, blames_endpoint: bool) -> Class {
    Class {
        kind,
        retry,
        blames_endpoint,
    }
}

/// A YDB status in a server's answer. The server answered, so none blames the endpoint
/// (ydb-go-sdk bans endpoints on transport errors only).
pub(crate) fn ydb_status(status: StatusCode) -> Class {
    use ErrorKind as K;
    use RetryRule::{Always, Idempotent, Never};
    use StatusCode as S;
    let (kind, retry) = match status {
        // Not failures: a failure that carries one is the server's fault.
        S::Unspecified | S::Success => (K::Internal, Never),
        S::BadRequest | S::Unsupported => (K::InvalidArgument, Never),
        S::Unauthorized => (K::Unauthorized, Never),
        S::InternalError | S::GenericError | S::ExternalError => (K::Internal, Never),
        S::Aborted => (K::Aborted, Always),
        S::Unavailable => (K::Unavailable, Always),
        // The session is busy with another request: as good as unavailable for a moment.
        S::SessionBusy => (K::Unavailable, Always),
        S::Overloaded => (K::Overloaded, Always),
        S::SchemeError | S::NotFound => (K::NotFound, Never),
        // Go: never (see the module docs).
        S::Timeout => (K::Timeout, Idempotent),
        S::BadSession => (K::BadSession, Always),
        S::PreconditionFailed => (K::PreconditionFailed, Never),
        S::AlreadyExists => (K::AlreadyExists, Never),
        // The session is gone: not the same request again, but a new session may do.
        S::SessionExpired => (K::SessionExpired, Never),
        S::Cancelled => (K::Cancelled, Never),
        // It may have been carried out.
        S::Undetermined => (K::OutcomeUnknown, Idempotent),
    };
    class(kind, retry, false)
}

impl ErrorKind {
    /// The kind a YDB status maps to (the table of [`ErrorKind`]).
    pub fn from_status(status: StatusCode) -> Self {
        ydb_status(status).kind
    }
}

/// A gRPC status without a client-side cause: one a server (or a proxy in front of it) sent,
/// or one tonic made up for a stream that ended wrongly (`UNKNOWN` for a missing
/// `grpc-status` trailer, `INTERNAL` for an unexpected end of the body). As in
/// ydb-go-sdk's `MustPessimizeEndpoint`, a gRPC-level failure blames the endpoint unless it
/// says the request was wrong (`INVALID_ARGUMENT`, `NOT_FOUND`, ...), the caller's budget
/// ran out (`DEADLINE_EXCEEDED`, `CANCELLED`), credentials were refused, or the cluster as a
/// whole is short of capacity (`RESOURCE_EXHAUSTED`).
pub(crate) fn grpc_code(code: tonic::Code) -> Class {
    use ErrorKind as K;
    use RetryRule::{Always, Idempotent, Never};
    use tonic::Code as C;
    match code {
        // Not a failure: one that carries it breaks the protocol.
        C::Ok => class(K::Protocol, Never, false),
        // The server (or a proxy) gave up on the call, e.g. while shutting down: not the
        // caller's cancellation, which is `Cancelled`.
        C::Cancelled => class(K::Unavailable, Idempotent, false),
        // Go: never repeated. tonic reports a stream cut short (a missing trailer, e.g. by
        // a proxy) as `UNKNOWN` with no cause, which grpc-go reports as `UNAVAILABLE`.
        C::Unknown => class(K::Internal, Idempotent, true),
        C::Internal => class(K::Internal, Idempotent, true),
        C::DataLoss => class(K::Internal, Never, true),
        C::Unimplemented => class(K::Internal, Never, false),
        C::InvalidArgument | C::OutOfRange => class(K::InvalidArgument, Never, false),
        C::DeadlineExceeded => class(K::Timeout, Idempotent, false),
        C::NotFound => class(K::NotFound, Never, false),
        C::AlreadyExists => class(K::AlreadyExists, Never, false),
        // Go bans on `UNAUTHENTICATED` too; another endpoint of the same cluster checks the
        // same token.
        C::PermissionDenied | C::Unauthenticated => class(K::Unauthorized, Never, false),
        C::ResourceExhausted => class(K::Overloaded, Always, false),
        C::FailedPrecondition => class(K::PreconditionFailed, Never, false),
        C::Aborted => class(K::Aborted, Always, true),
        C::Unavailable => class(K::Transport, Idempotent, true),
    }
}

/// A failure in the client's own transport, whatever its gRPC code: the endpoint is at
/// fault. When the connection never came up nothing was sent, so any call may go again;
/// otherwise the request may have reached the server. A TLS certificate the client refuses
/// comes back the same at every attempt: never repeated.
pub(crate) fn transport_failure(connected: bool, tls_rejected: bool) -> Class {
    let retry = if tls_rejected {
        RetryRule::Never
    } else if connected {
        RetryRule::Idempotent
    } else {
        RetryRule::Always
    };
    class(ErrorKind::Transport, retry, true)
}

/// An error the client made itself, of `kind` (no status from anywhere): a client-side
/// timeout (an attempt nobody answered) and a broken or ended stream blame the endpoint.
pub(crate) fn client_side(kind: ErrorKind) -> Class {
    use ErrorKind as K;
    use RetryRule::{Always, Idempotent, Never};
    match kind {
        K::Transport | K::Timeout => class(kind, Idempotent, true),
        K::OutcomeUnknown => class(kind, Idempotent, false),
        // Not granted in time: nothing was taken, asking again changes nothing.
        K::Aborted | K::Unavailable | K::Overloaded | K::BadSession | K::NotAcquired => {
            class(kind, Always, false)
        }
        _ => class(kind, Never, false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ErrorKind as K;
    use RetryRule::{Always, Idempotent, Never};
    use StatusCode as S;
    use tonic::Code as C;

    /// Every YDB status: (status, kind, retry rule, blames the endpoint).
    const YDB: [(S, ErrorKind, RetryRule, bool); 21] = [
        (S::Unspecified, K::Internal, Never, false),
        (S::Success, K::Internal, Never, false),
        (S::BadRequest, K::InvalidArgument, Never, false),
        (S::Unauthorized, K::Unauthorized, Never, false),
        (S::InternalError, K::Internal, Never, false),
        (S::Aborted, K::Aborted, Always, false),
        (S::Unavailable, K::Unavailable, Always, false),
        (S::Overloaded, K::Overloaded, Always, false),
        (S::SchemeError, K::NotFound, Never, false),
        (S::GenericError, K::Internal, Never, false),
        (S::Timeout, K::Timeout, Idempotent, false),
        (S::BadSession, K::BadSession, Always, false),
        (
            StatusCode::PreconditionFailed,
            K::PreconditionFailed,
            Never,
            false,
        ),
        (S::AlreadyExists, K::AlreadyExists, Never, false),
        (S::NotFound, K::NotFound, Never, false),
        (S::SessionExpired, K::SessionExpired, Never, false),
        (S::Cancelled, K::Cancelled, Never, false),
        (
            StatusCode::Undetermined,
            K::OutcomeUnknown,
            Idempotent,
            false,
        ),
        (S::Unsupported, K::InvalidArgument, Never, false),
        (S::SessionBusy, K::Unavailable, Always, false),
        (S::ExternalError, K::Internal, Never, false),
    ];

    /// Every gRPC code a server can send: (code, kind, retry rule, blames the endpoint).
    const GRPC: [(C, ErrorKind, RetryRule, bool); 17] = [
        (C::Ok, K::Protocol, Never, false),
        (C::Cancelled, K::Unavailable, Idempotent, false),
        (C::Unknown, K::Internal, Idempotent, true),
        (C::InvalidArgument, K::InvalidArgument, Never, false),
        (C::DeadlineExceeded, K::Timeout, Idempotent, false),
        (C::NotFound, K::NotFound, Never, false),
        (C::AlreadyExists, K::AlreadyExists, Never, false),
        (C::PermissionDenied, K::Unauthorized, Never, false),
        (C::ResourceExhausted, K::Overloaded, Always, false),
        (C::FailedPrecondition, K::PreconditionFailed, Never, false),
        (C::Aborted, K::Aborted, Always, true),
        (C::OutOfRange, K::InvalidArgument, Never, false),
        (C::Unimplemented, K::Internal, Never, false),
        (C::Internal, K::Internal, Idempotent, true),
        (C::Unavailable, K::Transport, Idempotent, true),
        (C::DataLoss, K::Internal, Never, true),
        (C::Unauthenticated, K::Unauthorized, Never, false),
    ];

    /// `all` (every value there is) matches `rows` one to one, each classified as its row says.
    fn assert_rows<T: Copy + PartialEq + std::fmt::Debug>(
        all: &[T],
        rows: &[(T, ErrorKind, RetryRule, bool)],
        classify: fn(T) -> Class,
    ) {
        assert_eq!(all.len(), rows.len(), "{all:?}");
        for &code in all {
            let Some(&(_, kind, retry, blames)) = rows.iter().find(|row| row.0 == code) else {
                panic!("{code:?} has no row");
            };
            assert_eq!(classify(code), class(kind, retry, blames), "{code:?}");
        }
    }

    #[test]
    fn every_ydb_status_has_its_row() {
        // Every value the enum has, found by its numbers: a status added to the enum and
        // missing from the table fails here.
        let all: Vec<StatusCode> = (0..=600_000)
            .filter_map(|n| StatusCode::try_from(n).ok())
            .collect();
        assert_rows(&all, &YDB, ydb_status);
    }

    #[test]
    fn every_grpc_code_has_its_row() {
        // tonic reads any number it does not know as UNKNOWN; 0..=16 are the codes.
        let mut all = Vec::new();
        for n in 0..=32 {
            let code = tonic::Code::from_i32(n);
            if !all.contains(&code) {
                all.push(code);
            }
        }
        assert_rows(&all, &GRPC, grpc_code);
    }

    #[test]
    fn only_transport_and_grpc_level_trouble_blames_the_endpoint() {
        for (status, ..) in YDB {
            assert!(!ydb_status(status).blames_endpoint, "{status:?}");
        }
        let blamed: Vec<tonic::Code> = GRPC
            .iter()
            .filter(|row| grpc_code(row.0).blames_endpoint)
            .map(|row| row.0)
            .collect();
        assert_eq!(
            blamed,
            [
                C::Unknown,
                C::Aborted,
                C::Internal,
                C::Unavailable,
                C::DataLoss
            ]
        );
        assert!(transport_failure(true, false).blames_endpoint);
        assert!(client_side(K::Timeout).blames_endpoint);
        assert!(!client_side(K::Internal).blames_endpoint);
        // "Not granted in time" is the server's answer: the endpoint works, and asking
        // again takes nothing twice.
        assert!(!client_side(K::NotAcquired).blames_endpoint);
        assert_eq!(client_side(K::NotAcquired).retry, Always);
    }

    #[test]
    fn transport_failures_repeat_by_what_may_have_been_sent() {
        assert_eq!(transport_failure(false, false).retry, Always);
        assert_eq!(transport_failure(true, false).retry, Idempotent);
        assert_eq!(transport_failure(false, true).retry, Never);
    }
}
