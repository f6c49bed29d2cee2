//! Liveness and lease-safety arithmetic, as a pure function of instants.
//!
//! Two clocks matter:
//! - *confirmed contact*: the latest moment at which the server is known to have had the
//!   session attached. It is the **send** time of the latest request whose answer came back
//!   (a ping, an attach, any semaphore request): the server answered on this stream after we
//!   sent, so it was attached then, and it can expire the session no earlier than that moment
//!   plus the session timeout.
//! - *last inbound*: when anything last arrived on the stream; silence for two ping intervals
//!   means the stream is dead (a stall or a half-open connection) and we reattach.
//!
//! The lease-safety deadline is `confirmed + timeout - margin`: past it, the server may
//! already have handed our semaphores to someone else, so every lease token must have fired.

use std::time::Duration;

use tokio::time::Instant;

/// Keepalive state of one session.
#[derive(Debug, Clone)]
pub(crate) struct Liveness {
    timeout: Duration,
    margin: Duration,
    ping_interval: Duration,
    confirmed: Instant,
    last_inbound: Instant,
    last_ping: Option<Instant>,
    /// The latest round trip of a request the server answered.
    round_trip: Duration,
}

impl Liveness {
    /// State right after the attach request sent at `attach_sent` was answered at `now`.
    pub(crate) fn new(
        timeout: Duration,
        margin: Duration,
        ping_interval: Duration,
        attach_sent: Instant,
        now: Instant,
    ) -> Self {
        Self {
            timeout,
            margin,
            ping_interval,
            confirmed: attach_sent,
            last_inbound: now,
            last_ping: None,
            round_trip: now.saturating_duration_since(attach_sent),
        }
    }

    /// The moment every lease token must have fired.
    pub(crate) fn deadline(&self) -> Instant {
        self.confirmed + self.timeout.saturating_sub(self.margin)
    }

    /// Whether the lease-safety deadline has passed.
    pub(crate) fn expired(&self, now: Instant) -> bool {
        now >= self.deadline()
    }

    /// Something arrived on the stream.
    pub(crate) fn on_inbound(&mut self, now: Instant) {
        self.last_inbound = now;
    }

    /// The answer to a request sent at `sent`, which the server answers at once (a ping,
    /// an attach, a describe, a release, an acquire's first word), arrived at `now`: a
    /// contact, and a sample of the round trip.
    pub(crate) fn on_confirmed(&mut self, sent: Instant, now: Instant) {
        self.on_contact(sent);
        self.round_trip = now.saturating_duration_since(sent);
    }

    /// The answer to a request sent at `sent` that the server may have held for a while
    /// (an acquire's grant or its timeout) arrived: a contact, but no sample of the round
    /// trip, which would otherwise grow by the wait and stretch every bound after it.
    pub(crate) fn on_contact(&mut self, sent: Instant) {
        if sent > self.confirmed {
            self.confirmed = sent;
        }
    }

    /// The latest round trip of a request the server answered: how late after a deadline
    /// the server's own answer to it can arrive (it counts from receipt, and its answer
    /// travels back).
    pub(crate) fn round_trip(&self) -> Duration {
        self.round_trip
    }

    /// A new stream attached: the attach request was sent at `sent`, answered at `now`.
    pub(crate) fn on_attached(&mut self, sent: Instant, now: Instant) {
        self.on_confirmed(sent, now);
        self.last_inbound = now;
        self.last_ping = None;
    }

    /// Whether to send a ping now: contact is older than one interval and no ping went out
    /// within the last interval.
    pub(crate) fn ping_due(&self, now: Instant) -> bool {
        now >= self.confirmed + self.ping_interval
            && self.last_ping.is_none_or(|p| now >= p + self.ping_interval)
    }

    /// A ping was sent.
    pub(crate) fn on_ping_sent(&mut self, now: Instant) {
        self.last_ping = Some(now);
    }

    /// Whether the attached stream has been silent too long.
    pub(crate) fn stream_dead(&self, now: Instant) -> bool {
        now >= self.last_inbound + self.ping_interval * 2
    }

    /// When the attached stream next needs attention (a ping, the dead check, the deadline).
    pub(crate) fn next_check(&self) -> Instant {
        let ping = match self.last_ping {
            Some(p) => (p + self.ping_interval).max(self.confirmed + self.ping_interval),
            None => self.confirmed + self.ping_interval,
        };
        ping.min(self.last_inbound + self.ping_interval * 2)
            .min(self.deadline())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn live(t0: Instant) -> Liveness {
        Liveness::new(10 * S, S, 2 * S, t0, t0 + Duration::from_millis(5))
    }

    #[test]
    fn deadline_counts_from_the_send_time_of_the_last_answered_request() {
        let t0 = Instant::now();
        let mut l = live(t0);
        assert_eq!(l.deadline(), t0 + 9 * S);
        l.on_confirmed(t0 + 3 * S, t0 + 3 * S);
        assert_eq!(l.deadline(), t0 + 12 * S);
        // An older answer never moves the deadline back.
        l.on_confirmed(t0 + S, t0 + S);
        assert_eq!(l.deadline(), t0 + 12 * S);
        assert!(!l.expired(t0 + 12 * S - Duration::from_millis(1)));
        assert!(l.expired(t0 + 12 * S));
    }

    #[test]
    fn pings_once_per_interval_while_contact_is_old() {
        let t0 = Instant::now();
        let mut l = live(t0);
        assert!(!l.ping_due(t0 + S));
        assert!(l.ping_due(t0 + 2 * S));
        l.on_ping_sent(t0 + 2 * S);
        assert!(!l.ping_due(t0 + 3 * S));
        assert!(l.ping_due(t0 + 4 * S));
        l.on_confirmed(t0 + 4 * S, t0 + 4 * S);
        assert!(!l.ping_due(t0 + 5 * S));
    }

    #[test]
    fn silence_for_two_intervals_is_a_dead_stream() {
        let t0 = Instant::now();
        let mut l = live(t0);
        l.on_inbound(t0 + S);
        assert!(!l.stream_dead(t0 + 5 * S - Duration::from_millis(1)));
        assert!(l.stream_dead(t0 + 5 * S));
    }

    #[test]
    fn next_check_is_the_earliest_of_ping_dead_and_deadline() {
        let t0 = Instant::now();
        let mut l = live(t0);
        assert_eq!(l.next_check(), t0 + 2 * S);
        l.on_ping_sent(t0 + 2 * S);
        l.on_inbound(t0 + 2 * S);
        assert_eq!(l.next_check(), t0 + 4 * S);
    }
}
