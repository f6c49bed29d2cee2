//! A fetched token and when to fetch the next one.
//!
//! The schedule is pure (instants in, a plan out) and unit-tested as numbers; [`TokenCache`] is
//! the thin async shell around it: one fetch at a time, retried with backoff when the token is
//! needed now; when it is merely due for renewal, the old one is handed out at once and a
//! single attempt runs in the background, so a slow or failing endpoint never delays a call
//! while a valid token is at hand.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;

use tokio::time::Instant;

use super::Secret;
use crate::clock::later;
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

/// A token is no longer sent this long before it expires (requests in flight, clock skew),
/// or a quarter of its life before, for a token that lives under two minutes: one of 30 s
/// is still cached for 22.5 s instead of being fetched for every call.
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
    /// Any lifetime a token server sends is taken: one too long for the clock (a hostile
    /// `u64::MAX` seconds) saturates instead of overflowing.
    pub(crate) fn new(received: Instant, lifetime: Duration) -> Self {
        Self {
            renew_at: later(received, (lifetime / 2).min(MAX_RENEW_AFTER)),
            usable_until: later(
                received,
                lifetime.saturating_sub(EXPIRY_MARGIN.min(lifetime / 4)),
            ),
        }
    }
}

/// Where a cache gets its tokens from (the IAM exchange, the metadata service).
pub(crate) trait Fetch: Send + Sync + 'static {
    fn fetch(&self) -> BoxFuture<'_, Result<Fetched>>;
}

/// What to do for a caller who needs a token at some instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Plan {
    /// The cached token is fresh.
    Use,
    /// The cached token is due for renewal but still works: use it, and try once to renew
    /// it in the background (keeping it on failure).
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
    /// A background renewal is under way.
    renewing: bool,
}

impl CacheState {
    pub(crate) fn plan(&self, now: Instant) -> Plan {
        match &self.held {
            None => Plan::Fetch,
            Some(h) if now >= h.schedule.usable_until => Plan::Fetch,
            Some(h) if now >= h.schedule.renew_at && now >= h.next_try && !self.renewing => {
                Plan::Renew
            }
            Some(_) => Plan::Use,
        }
    }

    /// The plan for `now`; a renewal it calls for counts as started.
    pub(crate) fn begin(&mut self, now: Instant) -> Plan {
        let plan = self.plan(now);
        if plan == Plan::Renew {
            self.renewing = true;
        }
        plan
    }

    pub(crate) fn token(&self) -> Option<&Secret> {
        self.held.as_ref().map(|h| &h.token)
    }

    pub(crate) fn store(&mut self, now: Instant, fetched: Fetched) {
        let schedule = Schedule::new(now, fetched.lifetime);
        self.renewing = false;
        self.held = Some(Held {
            token: fetched.token,
            schedule,
            next_try: schedule.renew_at,
        });
    }

    /// A renewal failed: keep the token, try again a little later.
    pub(crate) fn renew_failed(&mut self, now: Instant) {
        self.renewing = false;
        if let Some(h) = &mut self.held {
            h.next_try = now + RENEW_RETRY_AFTER;
        }
    }

    pub(crate) fn forget(&mut self) {
        self.held = None;
    }
}

/// Whether a failed fetch is worth repeating: the endpoint was unreachable, failed (5xx),
/// was overloaded (429) or slow. Not: a refusal, a bad answer, an untrusted certificate.
pub(crate) fn is_transient(err: &Error) -> bool {
    matches!(
        err.kind(),
        ErrorKind::Unavailable | ErrorKind::Timeout | ErrorKind::Overloaded
    )
}

/// A cached token around a [`Fetch`] source.
pub(crate) struct TokenCache<S> {
    source: Arc<S>,
    state: Arc<Mutex<CacheState>>,
    /// One fetch at a time; callers behind it find the fresh token.
    fetching: tokio::sync::Mutex<()>,
}

impl<S: fmt::Debug> fmt::Debug for TokenCache<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cached = lock(&self.state).token().is_some();
        f.debug_struct("TokenCache")
            .field("source", &self.source)
            .field("cached", &cached)
            .finish_non_exhaustive()
    }
}

fn lock(state: &Mutex<CacheState>) -> std::sync::MutexGuard<'_, CacheState> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<S: Fetch + Clone> TokenCache<S> {
    pub(crate) fn new(source: S) -> Self {
        Self {
            source: Arc::new(source),
            state: Arc::new(Mutex::new(CacheState::default())),
            fetching: tokio::sync::Mutex::new(()),
        }
    }

    pub(crate) fn source(&self) -> &S {
        &self.source
    }

    /// The source, to change before use; a token cached from the old one is forgotten.
    pub(crate) fn source_mut(&mut self) -> &mut S {
        lock(&self.state).forget();
        Arc::make_mut(&mut self.source)
    }

    /// The plan for now and the cached token.
    fn begin(&self) -> (Plan, Option<String>) {
        let mut state = lock(&self.state);
        let plan = state.begin(Instant::now());
        (plan, state.token().map(|t| t.expose().to_string()))
    }

    /// The token: cached, renewed or fetched as the schedule says.
    pub(crate) async fn get(&self) -> Result<String> {
        match self.begin() {
            (Plan::Use, Some(token)) => return Ok(token),
            (Plan::Renew, Some(token)) => {
                self.renew_in_background();
                return Ok(token);
            }
            _ => {}
        }
        let _one_at_a_time = self.fetching.lock().await;
        match self.begin() {
            (Plan::Use, Some(token)) => Ok(token),
            (Plan::Renew, Some(token)) => {
                self.renew_in_background();
                Ok(token)
            }
            _ => self.fetch_with_retries().await,
        }
    }

    fn renew_in_background(&self) {
        let (source, state) = (self.source.clone(), self.state.clone());
        let renewal = async move {
            let result = source.fetch().await;
            let now = Instant::now();
            match result {
                Ok(fetched) => lock(&state).store(now, fetched),
                Err(err) => {
                    tracing::debug!(%err, "token renewal failed; the current token is still valid");
                    lock(&state).renew_failed(now);
                }
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn(renewal)),
            // Outside a runtime nothing renews in the background: the token is fetched when
            // it is no longer usable.
            Err(_) => lock(&self.state).renew_failed(Instant::now()),
        }
    }

    async fn fetch_with_retries(&self) -> Result<String> {
        let backoff = fetch_backoff();
        let mut attempt = 0;
        loop {
            match self.source.fetch().await {
                Ok(fetched) => {
                    let token = fetched.token.expose().to_string();
                    lock(&self.state).store(Instant::now(), fetched);
                    return Ok(token);
                }
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

    /// Forgets the token: the next caller fetches a new one.
    pub(crate) fn forget(&self) {
        lock(&self.state).forget();
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
    fn renews_at_half_life_capped_at_an_hour_and_stops_using_30s_or_a_quarter_life_before_expiry() {
        let t0 = Instant::now();
        let hour = Schedule::new(t0, Duration::from_secs(3600));
        assert_eq!(hour.renew_at, t0 + Duration::from_secs(1800));
        assert_eq!(hour.usable_until, t0 + Duration::from_secs(3570));
        let iam = Schedule::new(t0, Duration::from_secs(12 * 3600));
        assert_eq!(iam.renew_at, t0 + Duration::from_secs(3600));
        assert_eq!(iam.usable_until, t0 + Duration::from_secs(12 * 3600 - 30));
        let short = Schedule::new(t0, Duration::from_secs(10));
        assert_eq!(short.renew_at, t0 + Duration::from_secs(5));
        assert_eq!(short.usable_until, t0 + Duration::from_millis(7500));
        let two_minutes = Schedule::new(t0, Duration::from_secs(120));
        assert_eq!(two_minutes.usable_until, t0 + Duration::from_secs(90));
    }

    #[test]
    fn lifetimes_too_long_for_the_clock_saturate() {
        let t0 = Instant::now();
        for lifetime in [Duration::MAX, Duration::from_secs(u64::MAX)] {
            let s = Schedule::new(t0, lifetime);
            assert_eq!(s.renew_at, t0 + MAX_RENEW_AFTER);
            assert!(s.usable_until > t0 + Duration::from_secs(10 * 365 * 24 * 3600));
            let mut state = CacheState::default();
            state.store(t0, fetched(u64::MAX));
            assert_eq!(state.plan(t0), Plan::Use);
            assert_eq!(state.begin(t0 + MAX_RENEW_AFTER), Plan::Renew);
            state.renew_failed(t0 + MAX_RENEW_AFTER);
            assert_eq!(state.plan(t0 + MAX_RENEW_AFTER), Plan::Use);
        }
        let none = Schedule::new(t0, Duration::ZERO);
        assert_eq!((none.renew_at, none.usable_until), (t0, t0));
    }

    #[test]
    fn plans_follow_the_schedule() {
        let t0 = Instant::now();
        let mut state = CacheState::default();
        assert_eq!(state.plan(t0), Plan::Fetch);
        state.store(t0, fetched(3600));
        assert_eq!(state.plan(t0 + Duration::from_secs(1799)), Plan::Use);
        let due = t0 + Duration::from_secs(1800);
        assert_eq!(state.begin(due), Plan::Renew);
        // One renewal at a time.
        assert_eq!(state.begin(due), Plan::Use);
        let failed_at = due;
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
