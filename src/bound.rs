//! The one rule of every call with a bound (a `try_` form, a `_timeout` form, a bounded
//! read): it ends by its deadline plus one measured round trip and [`GRACE`], whatever the
//! node does and whatever step the call is in. Pure arithmetic, used by the session core
//! (an acquire the server has not answered) and by [`Bounded`] futures around every
//! composed call (a recipe's, a lock space's, a read's).
//!
//! Why a round trip and a moment past the deadline: the server times a waiter out at the
//! same deadline counted from the request's arrival, and its answer ("not granted in time")
//! then travels back; until that answer could have come, silence is not yet a failure.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

use crate::clock::later;
use crate::error::{Error, ErrorKind, Result};

/// How long past its deadline and one round trip a bounded call may go on.
pub(crate) const GRACE: Duration = Duration::from_millis(200);

/// How long past its deadline a call on a link whose latest round trip is `round_trip` may
/// go on.
pub(crate) fn grace(round_trip: Duration) -> Duration {
    GRACE.saturating_add(round_trip)
}

/// When a call due by `deadline` on a link whose latest round trip is `round_trip` ends,
/// answered or not.
pub(crate) fn expiry(deadline: Instant, round_trip: Duration) -> Instant {
    later(deadline, grace(round_trip))
}

/// What a bounded call ends with when the node said nothing in time: the node (or the
/// directory, or a session to it) could not be reached, and the lock may well be free.
pub(crate) fn unavailable(what: &str) -> Error {
    Error::new(
        ErrorKind::Unavailable,
        format!(
            "the coordination service did not answer {what} by its bound; check that the node is reachable and try again"
        ),
    )
}

/// Where a bounded call learns the latest round trip of the links it uses.
pub(crate) trait RoundTrip {
    /// The longest latest round trip among the sessions the call has used so far (zero
    /// before it used any).
    fn round_trip(&self) -> Duration;
}

/// The longest round trip a composed call has seen on the sessions it used, shared between
/// the call and the [`Bound`] around it.
#[derive(Debug, Clone, Default)]
pub(crate) struct RoundTrips(Arc<AtomicU64>);

impl RoundTrips {
    /// Notes the latest round trip of a session the call uses.
    pub(crate) fn note(&self, round_trip: Duration) {
        let nanos = u64::try_from(round_trip.as_nanos()).unwrap_or(u64::MAX);
        self.0.fetch_max(nanos, Ordering::Relaxed);
    }
}

impl RoundTrip for RoundTrips {
    fn round_trip(&self) -> Duration {
        Duration::from_nanos(self.0.load(Ordering::Relaxed))
    }
}

impl RoundTrip for crate::session::Session {
    fn round_trip(&self) -> Duration {
        crate::session::Session::round_trip(self)
    }
}

/// A call's bound, armed at the first poll: `timeout` from then, past which the call is
/// given up at [`expiry`].
#[derive(Debug)]
pub(crate) struct Bound {
    timeout: Duration,
    armed: Option<Armed>,
    /// Given up: the call ended with [`unavailable`].
    expired: bool,
}

#[derive(Debug)]
struct Armed {
    deadline: Instant,
    timer: Pin<Box<Sleep>>,
}

impl Bound {
    pub(crate) fn new(timeout: Duration) -> Self {
        Self {
            timeout,
            armed: None,
            expired: false,
        }
    }

    fn arm(&mut self) -> &mut Armed {
        let timeout = self.timeout;
        self.armed.get_or_insert_with(|| {
            let deadline = later(Instant::now(), timeout);
            Armed {
                deadline,
                timer: Box::pin(tokio::time::sleep_until(expiry(deadline, Duration::ZERO))),
            }
        })
    }

    /// Whether the call is to be given up now, given the round trip it measured; else the
    /// timer is set for the moment it will be, and wakes `cx` then.
    pub(crate) fn poll_expired(&mut self, cx: &mut Context<'_>, round_trip: Duration) -> bool {
        if self.expired {
            return true;
        }
        let armed = self.arm();
        let at = expiry(armed.deadline, round_trip);
        if armed.timer.deadline() != at {
            armed.timer.as_mut().reset(at);
        }
        if armed.timer.as_mut().poll(cx).is_ready() {
            self.expired = true;
        }
        self.expired
    }
}

/// `future` given up at its bound with [`unavailable`] (`what` names the call), unless it
/// ended first. Dropping the future it wraps is what withdraws the call.
pub(crate) async fn within<T>(
    timeout: Duration,
    round_trip: &(impl RoundTrip + ?Sized),
    what: &str,
    future: impl Future<Output = Result<T>>,
) -> Result<T> {
    let mut bound = Bound::new(timeout);
    let mut future = std::pin::pin!(future);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(out) = future.as_mut().poll(cx) {
            return Poll::Ready(out);
        }
        if bound.poll_expired(cx, round_trip.round_trip()) {
            return Poll::Ready(Err(unavailable(what)));
        }
        Poll::Pending
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_ends_one_round_trip_and_the_grace_past_its_deadline() {
        let deadline = Instant::now();
        let rtt = Duration::from_millis(30);
        assert_eq!(expiry(deadline, rtt), deadline + rtt + GRACE);
        assert_eq!(expiry(deadline, Duration::ZERO), deadline + GRACE);
        // A round trip from a hostile or broken clock cannot overflow.
        assert!(expiry(deadline, Duration::MAX) > deadline);
    }
}
