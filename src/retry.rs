//! Retries of idempotent unary calls: node administration (create, alter, drop, describe)
//! and discovery.
//!
//! All four node calls are safe to repeat, as YDB's SDKs treat them (ydb-go-sdk runs each
//! with `retry.WithIdempotent(true)`): creating a node that exists succeeds and leaves it
//! as it was, an alter sets the same fields again, a describe reads. A drop repeated after
//! an attempt whose answer was lost reports `NOT_FOUND`. Session streams are not retried
//! here: their attach loops are in `client.rs` and the session core.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;
use tonic::transport::Channel;

use crate::config::Backoff;
use crate::error::{Error, ErrorKind, Result};
use crate::transport::Transport;

/// The wait before attempt `attempt + 1` of an idempotent call whose attempt `attempt`
/// (0-based) failed with `err`, or `None` when trying again cannot help. `unit` is a
/// uniform random number in `[0, 1)` for the jitter.
///
/// Worth repeating: what [`Error::is_retryable`] says may succeed later (a transport
/// failure other than a rejected TLS handshake, `UNAVAILABLE`, `OVERLOADED`, `ABORTED`,
/// `UNDETERMINED`, timeouts). Not: answers that repeat themselves (`NOT_FOUND`,
/// `BAD_REQUEST`, `UNAUTHORIZED`, `PRECONDITION_FAILED`, internal errors).
pub(crate) fn delay(err: &Error, attempt: u32, backoff: &Backoff, unit: f64) -> Option<Duration> {
    err.is_retryable().then(|| backoff.delay(attempt, unit))
}

/// Whether a failure says the endpoint itself is at fault (so another one should be
/// tried), rather than the server answering with an error.
pub(crate) fn endpoint_failed(err: &Error) -> bool {
    matches!(err.kind(), ErrorKind::Transport | ErrorKind::Timeout) && err.status().is_none()
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
/// is not must not come through this loop; it would give up after such an attempt, since
/// [`delay`] repeats only what its rule allows for a non-idempotent call.
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
    mut call: F,
) -> Result<T>
where
    M: Clone,
    F: FnMut(Channel, tonic::Request<M>) -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let budget = transport.request_timeout();
    let per_attempt = transport.attempt_timeout();
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
            Err(_) => Error::new(
                ErrorKind::Timeout,
                format!("{what}: no answer within the request timeout of {budget:?}"),
            ),
        };
        if endpoint_failed(&err) {
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
        let Some(wait) = delay(&err, tries, &backoff, rand::random::<f64>()) else {
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

    fn after(kind_or_status: Error) -> Option<Duration> {
        delay(&kind_or_status, 2, &Backoff::default(), 0.5)
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
                after(Error::from_status(status, "x")),
                Some(Duration::from_millis(100)),
                "{status:?}"
            );
        }
        assert!(after(Error::new(ErrorKind::Transport, "refused")).is_some());
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
            assert_eq!(after(Error::from_status(status, "x")), None, "{status:?}");
        }
        assert_eq!(after(Error::new(ErrorKind::InvalidArgument, "x")), None);
    }

    #[test]
    fn only_failures_without_a_server_answer_blame_the_endpoint() {
        assert!(endpoint_failed(&Error::new(ErrorKind::Transport, "reset")));
        assert!(endpoint_failed(&Error::new(ErrorKind::Timeout, "silent")));
        assert!(!endpoint_failed(&Error::from_status(
            StatusCode::Timeout,
            "the server's own timeout"
        )));
        assert!(!endpoint_failed(&Error::from_status(
            StatusCode::Unavailable,
            "x"
        )));
    }
}
