//! Retries of idempotent unary calls: node administration (create, alter, drop, describe)
//! and discovery.
//!
//! All four node calls are safe to repeat, as YDB's SDKs treat them (ydb-go-sdk runs each
//! with `retry.WithIdempotent(true)`): creating a node that exists succeeds and leaves it
//! as it was, an alter sets the same fields again, a describe reads. A drop repeated after
//! an attempt whose answer was lost reports `NOT_FOUND`. Session streams are not retried
//! here: their attach loops are in `client.rs` and the session core.
//!
//! What is repeated, and which endpoint is blamed, comes from one table (`error/classify.rs`,
//! summarized in the docs of [`ErrorKind`] and in `docs/connecting.md`): a failure's [`RetryRule`](crate::error::RetryRule)
//! says whether the request may go again ([`RetryRule::Idempotent`](crate::error::RetryRule::Idempotent) ones only because these
//! calls are idempotent: an attempt that timed out or lost its connection may have been
//! carried out), and [`Error::blames_endpoint`] whether the next attempt must avoid the
//! endpoint. A call that is not idempotent (a rate-limiter acquire, through [`unary`]) is
//! repeated only after a failure whose rule is [`RetryRule::Always`](crate::error::RetryRule::Always)
//! (the server did not carry it out).

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;
use tonic::transport::Channel;

use crate::config::Backoff;
use crate::error::{Error, ErrorKind, Result};
use crate::transport::Transport;
use ydb_grpc::ydb_proto::operations::Operation;

/// The wait before attempt `attempt + 1` of a call (`idempotent` or not) whose attempt
/// `attempt` (0-based) failed with `err`, or `None` when its [`RetryRule`](crate::error::RetryRule) says trying again
/// cannot help or is not safe. `unit` is a uniform random number in `[0, 1)` for the
/// jitter.
///
/// Repeated for every call: `UNAVAILABLE`, `OVERLOADED`, `ABORTED`, a connection that never
/// came up. For idempotent calls also: `UNDETERMINED`, YDB `TIMEOUT`, gRPC `INTERNAL`, a
/// broken connection, an attempt timeout. Never: answers that repeat themselves
/// (`NOT_FOUND`, `BAD_REQUEST`, `UNAUTHORIZED`, `PRECONDITION_FAILED`, `INTERNAL_ERROR`,
/// gRPC `UNKNOWN` and `DATA_LOSS`).
pub(crate) fn delay(
    err: &Error,
    idempotent: bool,
    attempt: u32,
    backoff: &Backoff,
    unit: f64,
) -> Option<Duration> {
    err.retry_rule()
        .allows(idempotent)
        .then(|| backoff.delay(attempt, unit))
}

/// Sends `message` (with the YDB headers) through `call` until it succeeds, fails in a way
/// [`delay`] does not repeat, or the transport's request timeout (all attempts together)
/// runs out; each retry waits the crate's default [`Backoff`] and goes to the endpoint then
/// preferred, so an endpoint that fails is left for another. The error is the last
/// attempt's.
///
/// Each attempt has the transport's attempt timeout (a third of the request timeout by
/// default) to be answered: an endpoint that accepts the call and never answers costs one
/// attempt, is blamed (preferred last, reconnected) and the next attempt goes elsewhere.
/// An attempt that timed out may have been carried out by the server: repeating it is safe
/// only because every call sent through here is idempotent (the module docs). A call that
/// is not goes through [`unary`] with `idempotent: false`, which gives up after such an
/// attempt.
///
/// Credentials that cannot give a token fail the call at once: they retry their own
/// source. A token the server rejects is renewed once ([`Transport::token_rejected`]) and
/// the call sent again at once.
///
/// # Cancel safety
///
/// Dropping the future abandons the attempt in flight; one already sent may still be
/// carried out by the server.
pub(crate) async fn idempotent<M, T, F, Fut>(
    transport: &Transport,
    what: &str,
    message: M,
    call: F,
) -> Result<T>
where
    M: Clone,
    F: FnMut(Channel, tonic::Request<M>) -> Fut,
    Fut: Future<Output = Result<T>>,
{
    unary(
        transport,
        what,
        message,
        Attempts::idempotent(transport),
        call,
    )
    .await
}

/// How [`unary`] repeats a call.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Attempts {
    /// Whether doing the call twice leaves things as doing it once: a call that is not is
    /// repeated only after failures that say it was not carried out
    /// ([`RetryRule::Always`](crate::error::RetryRule::Always)).
    pub(crate) idempotent: bool,
    /// All attempts together (`Duration::MAX`: no limit).
    pub(crate) budget: Duration,
    /// One attempt's wait for its answer.
    pub(crate) per_attempt: Duration,
}

impl Attempts {
    /// An idempotent call within the transport's request and attempt timeouts.
    pub(crate) fn idempotent(transport: &Transport) -> Self {
        Self {
            idempotent: true,
            budget: transport.request_timeout(),
            per_attempt: transport.attempt_timeout(),
        }
    }
}

/// [`unary`] for a call answered with a YDB operation: `send` sends the request on a
/// channel, a gRPC failure reads as the crate's error and the operation's status is checked.
///
/// # Cancel safety
///
/// As [`unary`].
pub(crate) async fn operation<M, F, Fut>(
    transport: &Transport,
    what: &str,
    message: M,
    attempts: Attempts,
    send: F,
) -> Result<Operation>
where
    M: Clone,
    F: Fn(Channel, tonic::Request<M>) -> Fut,
    Fut: Future<Output = std::result::Result<Option<Operation>, tonic::Status>>,
{
    unary(transport, what, message, attempts, |channel, request| {
        let answer = send(channel, request);
        async move {
            let operation = answer.await.map_err(|s| Error::from_grpc(s, what))?;
            crate::transport::check(operation, what)
        }
    })
    .await
}

/// The loop of [`idempotent`], for any call: as there, but repeated as `attempts` says. A
/// call that is not idempotent is never repeated after an attempt that may have been
/// carried out (a timed-out or broken one).
///
/// # Cancel safety
///
/// Dropping the future abandons the attempt in flight; one already sent may still be
/// carried out by the server.
pub(crate) async fn unary<M, T, F, Fut>(
    transport: &Transport,
    what: &str,
    message: M,
    attempts: Attempts,
    mut call: F,
) -> Result<T>
where
    M: Clone,
    F: FnMut(Channel, tonic::Request<M>) -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let Attempts {
        idempotent,
        budget,
        per_attempt,
    } = attempts;
    // `later`: a request timeout of `Duration::MAX` means no limit, not an overflow.
    let deadline = crate::clock::later(Instant::now(), budget);
    let backoff = Backoff::default();
    let mut tries = 0u32;
    let mut renewed = false;
    loop {
        let lane = transport.lane();
        // The token is part of the call: a slow or hung token source (a login, an IAM
        // endpoint) counts against the same budget.
        let left = deadline.saturating_duration_since(Instant::now());
        let request = transport
            .request_within(message.clone(), left, what)
            .await?;
        let attempt_deadline = crate::clock::later(Instant::now(), per_attempt).min(deadline);
        let attempt = call(lane.channel.clone(), request);
        let err = match tokio::time::timeout_at(attempt_deadline, attempt).await {
            Ok(Ok(value)) => {
                transport.answered(&lane);
                return Ok(value);
            }
            Ok(Err(err)) => err,
            Err(_) if attempt_deadline < deadline => Error::new(
                ErrorKind::Timeout,
                format!(
                    "{what}: the endpoint gave no answer within the attempt timeout of \
                     {per_attempt:?}; the next attempt goes to another endpoint"
                ),
            ),
            // The call's budget ran out before the attempt's own time did: the endpoint may
            // just have had less than an attempt's time, so it is not blamed, and the call
            // is over.
            Err(_) => {
                return Err(Error::new(
                    ErrorKind::Timeout,
                    format!("{what}: no answer within the request timeout of {budget:?}"),
                ));
            }
        };
        if err.blames_endpoint() {
            transport.reconnect(&lane);
        } else {
            transport.answered(&lane);
        }
        if err.kind() == ErrorKind::Unauthorized && !renewed {
            // The server rejected the token: the credentials are told, and the call goes
            // once more at once with a fresh one, as a session attach does.
            renewed = true;
            tracing::debug!(%err, "token rejected; retrying {what} with a fresh one");
            let left = deadline.saturating_duration_since(Instant::now());
            if tokio::time::timeout(left, transport.token_rejected())
                .await
                .is_err()
                || Instant::now() >= deadline
            {
                return Err(err);
            }
            continue;
        }
        let Some(wait) = delay(&err, idempotent, tries, &backoff, rand::random::<f64>()) else {
            return Err(err);
        };
        if Instant::now() + wait >= deadline {
            return Err(err);
        }
        tracing::debug!(%err, attempt = tries, "retrying {what}");
        tries += 1;
        tokio::time::sleep(wait).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::StatusCode;

    fn after(err: Error, idempotent: bool) -> Option<Duration> {
        delay(&err, idempotent, 2, &Backoff::default(), 0.5)
    }

    #[test]
    fn transient_failures_are_repeated_after_the_backoff() {
        for status in [
            StatusCode::Unavailable,
            StatusCode::Overloaded,
            StatusCode::Aborted,
            StatusCode::Undetermined,
            StatusCode::Timeout,
        ] {
            assert_eq!(
                after(Error::from_status(status, "x"), true),
                Some(Duration::from_millis(100)),
                "{status:?}"
            );
        }
        assert!(after(Error::new(ErrorKind::Transport, "refused"), true).is_some());
        assert!(after(Error::new(ErrorKind::Timeout, "no answer"), true).is_some());
    }

    #[test]
    fn what_may_have_been_carried_out_is_repeated_only_for_idempotent_calls() {
        for status in [StatusCode::Undetermined, StatusCode::Timeout] {
            assert_eq!(after(Error::from_status(status, "x"), false), None);
        }
        // An attempt nobody answered in time, a connection that broke mid-call.
        assert_eq!(after(Error::new(ErrorKind::Timeout, "silent"), false), None);
        assert_eq!(
            after(Error::new(ErrorKind::Transport, "reset"), false),
            None
        );
        for status in [StatusCode::Unavailable, StatusCode::Overloaded] {
            assert!(after(Error::from_status(status, "x"), false).is_some());
        }
    }

    #[test]
    fn answers_that_would_repeat_themselves_are_not() {
        for status in [
            StatusCode::NotFound,
            StatusCode::BadRequest,
            StatusCode::Unauthorized,
            StatusCode::PreconditionFailed,
            StatusCode::InternalError,
            StatusCode::SchemeError,
        ] {
            assert_eq!(
                after(Error::from_status(status, "x"), true),
                None,
                "{status:?}"
            );
        }
        assert_eq!(
            after(Error::new(ErrorKind::InvalidArgument, "x"), true),
            None
        );
        for code in [tonic::Code::Unimplemented, tonic::Code::DataLoss] {
            let err = Error::from_grpc(tonic::Status::new(code, "x"), "describe");
            assert_eq!(after(err, true), None, "{code:?}");
        }
    }

    #[test]
    fn only_transport_and_grpc_level_failures_blame_the_endpoint() {
        assert!(Error::new(ErrorKind::Transport, "reset").blames_endpoint());
        assert!(Error::new(ErrorKind::Timeout, "silent").blames_endpoint());
        assert!(
            !Error::from_status(StatusCode::Timeout, "the server's own timeout").blames_endpoint()
        );
        assert!(!Error::from_status(StatusCode::Unavailable, "x").blames_endpoint());
        let grpc = |code| Error::from_grpc(tonic::Status::new(code, "x"), "describe");
        for code in [
            tonic::Code::Unavailable,
            tonic::Code::Internal,
            tonic::Code::Unknown,
            tonic::Code::DataLoss,
        ] {
            assert!(grpc(code).blames_endpoint(), "{code:?}");
        }
        for code in [
            tonic::Code::ResourceExhausted,
            tonic::Code::InvalidArgument,
            tonic::Code::Unauthenticated,
        ] {
            assert!(!grpc(code).blames_endpoint(), "{code:?}");
        }
    }
}
