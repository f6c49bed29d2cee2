//! Instant arithmetic that cannot overflow, for every floor: a duration from a user or a
//! server can be anything up to `Duration::MAX`.

use std::time::Duration;

use tokio::time::Instant;

/// `now + d`, saturating far in the future (30 years on) instead of overflowing on huge
/// durations.
pub(crate) fn later(now: Instant, d: Duration) -> Instant {
    now.checked_add(d)
        .unwrap_or_else(|| now + Duration::from_secs(30 * 365 * 24 * 3600))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_huge_duration_saturates_instead_of_overflowing() {
        let now = Instant::now();
        assert_eq!(
            later(now, Duration::from_secs(5)),
            now + Duration::from_secs(5)
        );
        let far = later(now, Duration::MAX);
        assert!(far > now + Duration::from_secs(29 * 365 * 24 * 3600));
    }
}
