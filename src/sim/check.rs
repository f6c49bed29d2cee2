//! The history checker: every grant, lease end, write, pause and fault of a run is reported
//! here as it happens (in global time), and each is judged against the properties a
//! coordination client must keep. The lock space's properties across nodes are in
//! [`space`].

pub(crate) mod space;

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::session::core::Held;

/// What a simulated holder reads to know whether its lease may be lost: the lease's token
/// when the worker asked for it at the grant, else the lease's record and the session's
/// token, as `Lease::is_lost` reads them before anyone asks (the token made late).
#[derive(Debug, Clone)]
pub(crate) enum Signal {
    Token(CancellationToken),
    Record(Arc<Held>, CancellationToken),
}

impl Signal {
    /// Whether the lease may be lost.
    pub(crate) fn is_cancelled(&self) -> bool {
        match self {
            Signal::Token(token) => token.is_cancelled(),
            Signal::Record(held, session) => held.is_lost(session),
        }
    }
}

impl From<CancellationToken> for Signal {
    fn from(token: CancellationToken) -> Self {
        Signal::Token(token)
    }
}

/// One broken property, with what shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Violation {
    pub(crate) what: &'static str,
    pub(crate) detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.what, self.detail)
    }
}

/// A resource the workers contend for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Resource {
    /// An exclusive lock with a fenced register behind it.
    Mutex,
    /// A counted semaphore (limit [`SEMAPHORE_LIMIT`]).
    Semaphore,
    /// A reader-writer lock.
    RwLock,
    /// One place of a lock space's name: the semaphore [`space::NAMES`]`[name]` on the
    /// node `node` (limit [`space::LIMIT`] for [`space::SEMAPHORE`], exclusive otherwise).
    Part { node: usize, name: usize },
}

/// The limit of [`Resource::Semaphore`].
pub(crate) const SEMAPHORE_LIMIT: u64 = 3;

impl Resource {
    pub(crate) const ALL: [Resource; 3] = [Resource::Mutex, Resource::Semaphore, Resource::RwLock];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Resource::Mutex => "m",
            Resource::Semaphore => "s",
            Resource::RwLock => "rw",
            Resource::Part { name, .. } => space::NAMES[name],
        }
    }

    fn limit(self) -> u128 {
        match self {
            Resource::Semaphore => u128::from(SEMAPHORE_LIMIT),
            Resource::Part { name, .. } if name == space::SEMAPHORE => u128::from(space::LIMIT),
            Resource::Mutex | Resource::RwLock | Resource::Part { .. } => u128::from(u64::MAX),
        }
    }
}

/// Identifies one lease in a run: (client, session number on that client, lease id).
pub(crate) type LeaseKey = (usize, u64, u64);

#[derive(Debug)]
struct Holder {
    client: usize,
    resource: Resource,
    count: u64,
    order_id: u64,
    token: Signal,
}

/// Judges one run's history.
#[derive(Debug, Default)]
pub(crate) struct Checker {
    live: HashMap<LeaseKey, Holder>,
    /// The newest order id granted exclusively, per resource.
    newest_exclusive: HashMap<Resource, u64>,
    /// The largest order id ever granted, per resource.
    newest: HashMap<Resource, u64>,
    /// The fenced register: the newest token it accepted.
    register: u64,
    /// Until when each client is paused.
    paused_until: HashMap<usize, Instant>,
    /// Until when a lease loss on a client is explained by a fault that long (or a forced
    /// expiry).
    loss_explained_until: HashMap<usize, Instant>,
    /// Sessions the server ended by fiat.
    revoked: std::collections::HashSet<(usize, u64)>,
    /// The holders of the lock space's names and their tokens.
    space: space::Names,
    /// The mutex is taken with a lock delay and no fencing: a holder holds until it has seen
    /// its token fired (a paused one, not before it runs again), whatever the server did.
    lock_delay: bool,
    pub(crate) violations: Vec<Violation>,
    pub(crate) grants: u64,
    pub(crate) writes_accepted: u64,
    pub(crate) writes_rejected: u64,
    pub(crate) leases_lost: u64,
}

impl Checker {
    fn violation(&mut self, what: &'static str, detail: String) {
        self.violations.push(Violation { what, detail });
    }

    fn paused(&self, client: usize, now: Instant) -> bool {
        self.paused_until
            .get(&client)
            .is_some_and(|&until| now < until)
    }

    /// Judges the mutex as taken with a lock delay (see [`Checker::granted`]).
    pub(crate) fn with_lock_delay(mut self) -> Self {
        self.lock_delay = true;
        self
    }

    /// Whether a holder still counts at `now`: live, and running or (for the mutex without
    /// fencing behind a lock delay) stopped with its work, which it has not seen end.
    fn counts(&self, h: &Holder, now: Instant) -> bool {
        (self.lock_delay && h.resource == Resource::Mutex) || !self.paused(h.client, now)
    }

    /// A client's process stops being stepped from `now` until `until`.
    pub(crate) fn pause(&mut self, client: usize, until: Instant) {
        self.paused_until.insert(client, until);
    }

    /// A fault that may rightly cost `client` its leases, until `until`.
    pub(crate) fn may_lose(&mut self, client: usize, until: Instant) {
        let slot = self.loss_explained_until.entry(client).or_insert(until);
        *slot = (*slot).max(until);
    }

    /// The server ended a session by fiat (a forced expiry, which no client can see
    /// coming): what it held, and any grant of it still on its way, stops counting as held
    /// from now; the client learns of it only when the news arrives.
    /// With a lock delay the mutex's holder holds on until it sees its token fired.
    pub(crate) fn revoke(&mut self, client: usize, session: u64) {
        let delayed = self.lock_delay;
        self.live.retain(|k, h| {
            (k.0, k.1) != (client, session) || (delayed && h.resource == Resource::Mutex)
        });
        self.space.revoke(client, session);
        self.revoked.insert((client, session));
    }

    /// A worker was handed a lease (with a lock delay, the mutex's guard: after the delay).
    /// Its token fires only when its process runs, which sees it at once: a holder whose
    /// token fired is no holder.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn granted(
        &mut self,
        now: Instant,
        key: LeaseKey,
        resource: Resource,
        count: u64,
        order_id: u64,
        token: Signal,
    ) {
        self.grants += 1;
        let client = key.0;
        self.live.retain(|_, h| !h.token.is_cancelled());
        if token.is_cancelled() || self.revoked.contains(&(key.0, key.1)) {
            return; // handed out already lost: nothing is held
        }
        // At no instant may the live, running holders of a resource exceed its limit.
        let mut held: u128 = u128::from(count);
        let mut others = Vec::new();
        for (k, h) in &self.live {
            if h.resource == resource && self.counts(h, now) {
                held += u128::from(h.count);
                others.push((*k, h.order_id));
            }
        }
        if held > resource.limit() {
            self.violation(
                "overlap",
                format!(
                    "{resource:?}: lease {key:?} (fencing {order_id}, count {count}) granted \
                     while {others:?} hold it with live tokens"
                ),
            );
        }
        let exclusive = u128::from(count) >= resource.limit();
        let newest = self.newest.get(&resource).copied().unwrap_or(0);
        if exclusive && order_id <= newest {
            self.violation(
                "fencing",
                format!("{resource:?}: exclusive grant {order_id} not above {newest}"),
            );
        }
        if exclusive {
            self.newest_exclusive.insert(resource, order_id);
        }
        self.newest.insert(resource, newest.max(order_id));
        self.live.insert(
            key,
            Holder {
                client,
                resource,
                count,
                order_id,
                token,
            },
        );
    }

    /// A lease ended: released by its worker, or lost (its token fired first).
    pub(crate) fn ended(&mut self, now: Instant, key: LeaseKey, lost: bool) {
        self.live.remove(&key);
        if !lost {
            return;
        }
        self.leases_lost += 1;
        let client = key.0;
        let explained = self
            .loss_explained_until
            .get(&client)
            .is_some_and(|&until| now <= until);
        if !explained {
            self.violation(
                "lost lease",
                format!(
                    "client {client} lost lease {key:?} at {now:?} with no fault long enough \
                     to cost it"
                ),
            );
        }
    }

    /// A write to the fenced register arrives with `token`; `issued_live` says whether the
    /// writer's lease token was live when it issued the write.
    pub(crate) fn write(&mut self, token: u64, issued_live: bool, writer: LeaseKey) -> bool {
        if token < self.register {
            self.writes_rejected += 1;
            return false;
        }
        if !issued_live {
            self.violation(
                "late write",
                format!("lease {writer:?} wrote with fencing {token} after its token fired"),
            );
        }
        self.register = token;
        self.writes_accepted += 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// An exclusive grant of the mutex with a live token.
    fn lock(c: &mut Checker, t: Instant, key: LeaseKey, order_id: u64) {
        c.granted(
            t,
            key,
            Resource::Mutex,
            u64::MAX,
            order_id,
            CancellationToken::new().into(),
        );
    }

    /// One permit of the counted semaphore with a live token.
    fn permit(c: &mut Checker, t: Instant, key: LeaseKey, order_id: u64) {
        c.granted(
            t,
            key,
            Resource::Semaphore,
            1,
            order_id,
            CancellationToken::new().into(),
        );
    }

    #[test]
    fn two_live_exclusive_holders_are_an_overlap_unless_one_is_paused() {
        let t = Instant::now();
        let mut c = Checker::default();
        lock(&mut c, t, (0, 1, 1), 1);
        lock(&mut c, t, (1, 1, 1), 2);
        assert_eq!(c.violations.len(), 1);
        assert_eq!(c.violations[0].what, "overlap");

        let mut c = Checker::default();
        lock(&mut c, t, (0, 1, 1), 1);
        c.pause(0, t + Duration::from_secs(30));
        lock(&mut c, t, (1, 1, 1), 2);
        assert!(c.violations.is_empty());
    }

    #[test]
    fn with_a_lock_delay_a_paused_mutex_holder_still_holds() {
        let t0 = Instant::now();
        let mut c = Checker::default().with_lock_delay();
        lock(&mut c, t0, (0, 1, 1), 1);
        c.pause(0, t0 + Duration::from_secs(20));
        // The server expired the paused holder's session: it has not seen that yet.
        c.revoke(0, 1);
        lock(&mut c, t0 + Duration::from_secs(12), (1, 1, 1), 2);
        assert_eq!(c.violations.len(), 1, "{:?}", c.violations);
        assert_eq!(c.violations[0].what, "overlap");
        // Without the lock delay the fencing token covers the paused holder.
        let mut c = Checker::default();
        lock(&mut c, t0, (0, 1, 1), 1);
        c.pause(0, t0 + Duration::from_secs(20));
        c.revoke(0, 1);
        lock(&mut c, t0 + Duration::from_secs(12), (1, 1, 1), 2);
        assert!(c.violations.is_empty(), "{:?}", c.violations);
    }

    #[test]
    fn a_fired_token_is_no_holder_and_counts_stay_within_the_limit() {
        let t = Instant::now();
        let mut c = Checker::default();
        let fired = CancellationToken::new();
        c.granted(
            t,
            (0, 1, 1),
            Resource::Mutex,
            u64::MAX,
            1,
            fired.clone().into(),
        );
        fired.cancel();
        lock(&mut c, t, (1, 1, 1), 2);
        assert!(c.violations.is_empty());
        for i in 0..3 {
            permit(&mut c, t, (i, 1, 2), 10 + i as u64);
        }
        assert!(c.violations.is_empty());
        permit(&mut c, t, (3, 1, 2), 20);
        assert_eq!(c.violations.len(), 1);
    }

    #[test]
    fn fencing_tokens_must_grow_and_the_register_rejects_older_ones() {
        let t = Instant::now();
        let mut c = Checker::default();
        lock(&mut c, t, (0, 1, 1), 5);
        c.ended(t, (0, 1, 1), false);
        lock(&mut c, t, (1, 1, 1), 4);
        assert_eq!(c.violations.last().map(|v| v.what), Some("fencing"));
        assert!(c.write(5, true, (0, 1, 1)));
        assert!(!c.write(4, true, (1, 1, 1)));
        assert!(c.write(6, false, (1, 1, 2)));
        assert_eq!(c.violations.last().map(|v| v.what), Some("late write"));
    }

    #[test]
    fn a_lost_lease_needs_a_long_fault() {
        let t = Instant::now();
        let mut c = Checker::default();
        lock(&mut c, t, (0, 1, 1), 1);
        c.ended(t, (0, 1, 1), true);
        assert_eq!(c.violations.last().map(|v| v.what), Some("lost lease"));
        let mut c = Checker::default();
        c.may_lose(0, t + Duration::from_secs(30));
        lock(&mut c, t, (0, 1, 1), 1);
        c.ended(t + Duration::from_secs(10), (0, 1, 1), true);
        assert!(c.violations.is_empty());
    }
}
