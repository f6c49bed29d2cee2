//! A fetched token and when to fetch the next one.
//!
//! The schedule is pure (instants in, a plan out) and unit-tested as numbers; [`TokenCache`] is
//! the thin async shell around it: one fetch at a time, retried with backoff when the token is
//! needed now, tried once when it is merely due for renewal and the old one still works.

use std::fmt;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use super::Secret;
use crate::config::Backoff;
use crate::error::{Error, ErrorKind, Result};

/// A token and how long it lives from the moment it was received.
pub(crate) struct Fetched {
    pub(crate) token: Secret,
    pub(crate) lifetime: Duration,
}

/// A token is renewed after half its life, and at the latest this long after it was received
/// (IAM tokens live 12 hours; Yandex Cloud asks clients to renew them every hour).
pub(crate) const MAX_RENEW_AFTER: Duration = Duration::from_secs(3600);

/// A token is no longer sent this long before it expires (requests in flight, clock skew).
pub(crate) const EXPIRY_MARGIN: Duration = Duration::from_secs(30);

/// After a failed renewal while the old token still works, the next try waits this long.
pub(crate) const RENEW_RETRY_AFTER: Duration = Duration::from_secs(10);

/// How many times a token that is needed now is fetched before the error is reported.
pub(crate) const FETCH_ATTEMPTS: u32 = 5;

/// The waits between those attempts: 100 ms doubling up to 2 s, with full jitter.
pub(crate) fn fetch_backoff() -> Backoff {
    Backoff::new(Duration::from_millis(100), Duration::from_secs(2))
}

/// When a token received at `received` is renewed and until when it is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Schedule {
    pub(crate) renew_at: Instant,
    pub(crate) usable_until: Instant,
}

impl Schedule {
    pub(crate) fn new(received: Instant, lifetime: Duration) -> Self {
        Self {
            renew_at: received + (lifetime / 2).min(MAX_RENEW_AFTER),
            usable_until: received + lifetime.saturating_sub(EXPIRY_MARGIN),
        }
    }
}

/// What to do for a caller who needs a token at some instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Plan {
    /// The cached token is fresh.
    Use,
    /// The cached token is due for renewal but still works: try once, keep it on failure.
    Renew,
    /// No usable token: fetch one, with retries.
    Fetch,
}

struct Held {
    token: Secret,
    schedule: Schedule,
    next_try: Instant,
}

/// The cached token's state, a plain struct.
#[derive(Default)]
pub(crate) struct CacheState {
    held: Option<Held>,
}

impl CacheState {
    pub(crate) fn plan(&self, now: Instant) -> Plan {
        match &self.held {
            None => Plan::Fetch,
            Some(h) if now >= h.schedule.usable_until => Plan::Fetch,
            Some(h) if now >= h.schedule.renew_at && now >= h.next_try => Plan::Renew,
            Some(_) => Plan::Use,
        }
    }

    pub(crate) fn token(&self) -> Option<&Secret> {
        self.held.as_ref().map(|h| &h.token)
    }

    pub(crate) fn store(&mut self, now: Instant, fetched: Fetched) {
        let schedule = Schedule::new(now, fetched.lifetime);
        self.held = Some(Held {
            token: fetched.token,
            schedule,
            next_try: schedule.renew_at,
        });
    }

    /// A renewal failed: keep the token, try again a little later.
    pub(crate) fn renew_failed(&mut self, now: Instant) {
        if let Some(h) = &mut self.held {
            h.next_try = now + RENEW_RETRY_AFTER;
        }
    }

    pub(crate) fn forget(&mut self) {
        self.held = None;
    }
}

/// Whether a failed fetch is worth repeating.
pub(crate) fn is_transient(err: &Error) -> bool {
    matches!(
        err.kind(),
        ErrorKind::Unavailable | ErrorKind::Transport | ErrorKind::Timeout | ErrorKind::Overloaded
    )
}

/// A cached token around a fetch function.
pub(crate) struct TokenCache {
    state: Mutex<CacheState>,
    /// One fetch at a time; callers behind it find the fresh token.
    fetching: tokio::sync::Mutex<()>,
}

impl fmt::Debug for TokenCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cached = self.lock().token().is_some();
        f.debug_struct("TokenCache")
            .field("cached", &cached)
            .finish_non_exhaustive()
    }
}

impl Default for TokenCache {
    fn default() -> Self {
        Self {
            state: Mutex::new(CacheState::default()),
            fetching: tokio::sync::Mutex::new(()),
        }
    }
}

impl TokenCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, CacheState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn cached(&self, now: Instant) -> (Plan, Option<String>) {
        let state = self.lock();
        (
            state.plan(now),
            state.token().map(|t| t.expose().to_string()),
        )
    }

    /// The token: cached, renewed or fetched as the schedule says.
    pub(crate) async fn get<F, Fut>(&self, fetch: F) -> Result<String>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<Fetched>>,
    {
        if let (Plan::Use, Some(token)) = self.cached(Instant::now()) {
            return Ok(token);
        }
        let _one_at_a_time = self.fetching.lock().await;
        match self.cached(Instant::now()) {
            (Plan::Use, Some(token)) => Ok(token),
            (Plan::Renew, Some(old)) => match fetch().await {
                Ok(fetched) => Ok(self.keep(fetched)),
                Err(err) => {
                    tracing::debug!(%err, "token renewal failed; the current token is still valid");
                    self.lock().renew_failed(Instant::now());
                    Ok(old)
                }
            },
            _ => self.fetch_with_retries(&fetch).await,
        }
    }

    async fn fetch_with_retries<F, Fut>(&self, fetch: &F) -> Result<String>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<Fetched>>,
    {
        let backoff = fetch_backoff();
        let mut attempt = 0;
        loop {
            match fetch().await {
                Ok(fetched) => return Ok(self.keep(fetched)),
                Err(err) if is_transient(&err) && attempt + 1 < FETCH_ATTEMPTS => {
                    tracing::debug!(%err, attempt, "token fetch failed; retrying");
                    tokio::time::sleep(backoff.delay(attempt, rand::random::<f64>())).await;
                    attempt += 1;
                }
                Err(err) if is_transient(&err) => {
                    return Err(Error::caused_by(
                        err.kind(),
                        format!("could not obtain a token after {FETCH_ATTEMPTS} attempts: {err}"),
                        &err,
                    ));
                }
                Err(err) => return Err(err),
            }
        }
    }

    fn keep(&self, fetched: Fetched) -> String {
        let token = fetched.token.expose().to_string();
        self.lock().store(Instant::now(), fetched);
        token
    }

    /// Forgets the token: the next caller fetches a new one.
    pub(crate) fn forget(&self) {
        self.lock().forget();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fetched(secs: u64) -> Fetched {
        Fetched {
            token: Secret::new("t"),
            lifetime: Duration::from_secs(secs),
        }
    }

    #[test]
    fn renews_at_half_life_capped_at_an_hour_and_stops_using_30s_before_expiry() {
        let t0 = Instant::now();
        let hour = Schedule::new(t0, Duration::from_secs(3600));
        assert_eq!(hour.renew_at, t0 + Duration::from_secs(1800));
        assert_eq!(hour.usable_until, t0 + Duration::from_secs(3570));
        let iam = Schedule::new(t0, Duration::from_secs(12 * 3600));
        assert_eq!(iam.renew_at, t0 + Duration::from_secs(3600));
        assert_eq!(iam.usable_until, t0 + Duration::from_secs(12 * 3600 - 30));
        let short = Schedule::new(t0, Duration::from_secs(10));
        assert_eq!(short.renew_at, t0 + Duration::from_secs(5));
        assert_eq!(short.usable_until, t0);
    }

    #[test]
    fn plans_follow_the_schedule() {
        let t0 = Instant::now();
        let mut state = CacheState::default();
        assert_eq!(state.plan(t0), Plan::Fetch);
        state.store(t0, fetched(3600));
        assert_eq!(state.plan(t0 + Duration::from_secs(1799)), Plan::Use);
        assert_eq!(state.plan(t0 + Duration::from_secs(1800)), Plan::Renew);
        let failed_at = t0 + Duration::from_secs(1800);
        state.renew_failed(failed_at);
        assert_eq!(state.plan(failed_at + Duration::from_secs(9)), Plan::Use);
        assert_eq!(state.plan(failed_at + RENEW_RETRY_AFTER), Plan::Renew);
        assert_eq!(state.plan(t0 + Duration::from_secs(3570)), Plan::Fetch);
        state.forget();
        assert_eq!(state.plan(t0), Plan::Fetch);
    }

    #[test]
    fn fetch_retry_numbers() {
        assert_eq!(FETCH_ATTEMPTS, 5);
        let b = fetch_backoff();
        assert_eq!(b.ceiling(0), Duration::from_millis(100));
        assert_eq!(b.ceiling(3), Duration::from_millis(800));
        assert_eq!(b.ceiling(10), Duration::from_secs(2));
    }
}
