//! The lock space's properties, judged across its nodes: a name is held by one holder at a
//! time (a counted semaphore's permits stay within its limit) wherever its places are, and
//! the [`FencingToken`]s of a name's successive exclusive holders strictly grow, across the
//! two phases of a move.
//!
//! A space lock takes each of its name's places (a [`Resource::Part`] each, judged as any
//! lease is) in order; it *holds* the name once it holds them all, until it releases the
//! first, or until any part's lease token fires (then the lease may be lost, as for any
//! lease: it no longer counts), or the server revoked a part's session.

use std::collections::HashMap;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{Checker, LeaseKey, Resource, Signal};
use crate::session::FencingToken;

/// The names of the simulated lock space: exclusive locks, then a counted semaphore. With
/// the layouts of the simulation (`n0..n2`, then `n0..n3`) the first two and the semaphore
/// move (from `n1`, `n2` and `n0` to `n3`), the third stays on `n0`.
pub(crate) const NAMES: [&str; 4] = ["job-2", "job-15", "job-0", "sem-2"];

/// The index of the counted semaphore in [`NAMES`].
pub(crate) const SEMAPHORE: usize = 3;

/// The counted semaphore's limit, on every node and so across them.
pub(crate) const LIMIT: u64 = 2;

/// One place of a space lock, granted: the node's lease and its token.
#[derive(Debug, Clone)]
pub(crate) struct PartHeld {
    pub(crate) node: usize,
    pub(crate) key: LeaseKey,
    pub(crate) token: Signal,
}

#[derive(Debug)]
struct Holder {
    client: usize,
    name: usize,
    count: u64,
    /// The epoch of the layout the lock was taken in.
    epoch: u64,
    parts: Vec<PartHeld>,
}

impl Holder {
    fn live(&self) -> bool {
        self.parts.iter().all(|p| !p.token.is_cancelled())
    }

    fn on_session(&self, client: usize, session: u64) -> bool {
        self.parts
            .iter()
            .any(|p| (p.key.0, p.key.1) == (client, session))
    }

    fn describe(&self, id: u64) -> String {
        let nodes: Vec<usize> = self.parts.iter().map(|p| p.node).collect();
        format!(
            "holder {id} (client {}, epoch {}, nodes {nodes:?}, count {})",
            self.client, self.epoch, self.count
        )
    }
}

/// The holders of the space's names and the greatest token each name gave.
#[derive(Debug, Default)]
pub(crate) struct Names {
    holders: HashMap<u64, Holder>,
    next_id: u64,
    /// Per name: the greatest token of an exclusive holder so far, and whose.
    newest: HashMap<usize, (FencingToken, u64)>,
    /// The exclusive names are taken with a lock delay and no fencing: a holder holds
    /// until it has seen a part's token fired (a paused one, not before it runs again),
    /// whatever the server did.
    delayed: bool,
}

impl Names {
    /// Whether the holder counts as holding whatever the server did and while its
    /// process is paused: an exclusive name's with a lock delay.
    fn holds_on(&self, h: &Holder) -> bool {
        self.delayed && h.name != SEMAPHORE
    }

    /// The server ended `session` of `client`: the locks with a part there no longer hold
    /// (with a lock delay, an exclusive name's still does, until it sees it).
    pub(super) fn revoke(&mut self, client: usize, session: u64) {
        let delayed = self.delayed;
        self.holders
            .retain(|_, h| !h.on_session(client, session) || (delayed && h.name != SEMAPHORE));
    }
}

impl Checker {
    /// A bounded call (a space take of `name` by `client`) ended at `at`: by `expiry`, its
    /// bound, a round trip and 200 ms, or the rule of every bound is broken.
    pub(crate) fn bounded_call_ended(
        &mut self,
        client: usize,
        name: &str,
        at: Instant,
        expiry: Instant,
    ) {
        if at > expiry + std::time::Duration::from_millis(1) {
            self.violation(
                "past its bound",
                format!(
                    "client {client}'s bounded take of {name} ended {:?} past its bound and grace",
                    at - expiry
                ),
            );
        }
    }

    /// A space lock of `client` on `name`, taken in the layout of `epoch`, is handed over
    /// while its process has seen `published` published: a lock lost on arrival (its claim
    /// `lost` already, or its layout two epochs behind) is no lock to hand over.
    pub(crate) fn space_handed_over(
        &mut self,
        client: usize,
        name: &str,
        epoch: u64,
        published: u64,
        lost: bool,
    ) {
        if lost || published.saturating_sub(epoch) >= 2 {
            self.violation(
                "lost on arrival",
                format!(
                    "client {client} handed over {name} taken in epoch {epoch} (lost: {lost}) while it had seen epoch {published} published"
                ),
            );
        }
    }

    /// Judges the space's exclusive names as taken with a lock delay (see [`Names`]).
    pub(crate) fn with_space_lock_delay(mut self) -> Self {
        self.space.delayed = true;
        self
    }

    /// A space lock of `client` on `name` (`count` of it) now holds every place `parts` of
    /// the layout of `epoch`; returns the holder's id. Judged: the name's live, running
    /// holders on every node stay within its limit.
    pub(crate) fn space_held(
        &mut self,
        now: Instant,
        client: usize,
        name: usize,
        count: u64,
        epoch: u64,
        parts: Vec<PartHeld>,
    ) -> u64 {
        self.space.next_id += 1;
        let id = self.space.next_id;
        self.space.holders.retain(|_, h| h.live());
        let holder = Holder {
            client,
            name,
            count,
            epoch,
            parts,
        };
        let revoked = !self.space.holds_on(&holder)
            && holder
                .parts
                .iter()
                .any(|p| self.revoked.contains(&(p.key.0, p.key.1)));
        if !holder.live() || revoked {
            return id; // a part was lost already: nothing is held
        }
        let limit = Resource::Part { node: 0, name }.limit();
        let mut held = u128::from(count);
        let mut others = Vec::new();
        for (other, h) in &self.space.holders {
            if h.name == name && (self.space.holds_on(h) || !self.paused(h.client, now)) {
                held += u128::from(h.count);
                others.push(h.describe(*other));
            }
        }
        if held > limit {
            self.violation(
                "space overlap",
                format!(
                    "{}: {} holds it while {others:?} hold it with live tokens",
                    NAMES[name],
                    holder.describe(id)
                ),
            );
        }
        self.space.holders.insert(id, holder);
        id
    }

    /// The holder `id` computed its fencing token. Judged, for an exclusive holder that
    /// still holds: above every token the name gave before.
    pub(crate) fn space_token(&mut self, id: u64, token: FencingToken) {
        let Some(h) = self.space.holders.get(&id).filter(|h| h.live()) else {
            return; // no longer a holder: its token fences nothing
        };
        let exclusive = u128::from(h.count)
            >= Resource::Part {
                node: 0,
                name: h.name,
            }
            .limit();
        if !exclusive {
            return;
        }
        let name = h.name;
        let detail = h.describe(id);
        let newest = self.space.newest.get(&name).copied();
        if let Some((before, by)) = newest.filter(|(before, _)| token <= *before) {
            self.violation(
                "space fencing",
                format!(
                    "{}: {detail} has token {token}, not above {before} of holder {by}",
                    NAMES[name]
                ),
            );
        }
        if newest.is_none_or(|(before, _)| token > before) {
            self.space.newest.insert(name, (token, id));
        }
    }

    /// The holder `id` released its first part, or lost its lock: it holds no more.
    pub(crate) fn space_released(&mut self, id: u64) {
        self.space.holders.remove(&id);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const MUTEX: usize = 0;

    /// A lock of `client` on `name` in `epoch` holding one part, on `node` in `session`;
    /// its id and the part's token.
    fn hold(
        c: &mut Checker,
        t: Instant,
        (client, session): (usize, u64),
        node: usize,
        name: usize,
        epoch: u64,
    ) -> (u64, CancellationToken) {
        let token = CancellationToken::new();
        let part = PartHeld {
            node,
            key: (client, session, 1),
            token: token.clone().into(),
        };
        let count = if name == SEMAPHORE { 1 } else { u64::MAX };
        (
            c.space_held(t, client, name, count, epoch, vec![part]),
            token,
        )
    }

    /// What the checker found, in order.
    fn caught(c: &Checker) -> Vec<&'static str> {
        c.violations.iter().map(|v| v.what).collect()
    }

    #[test]
    fn an_old_layouts_holder_and_a_new_ones_on_other_nodes_overlap() {
        let t = Instant::now();
        let mut c = Checker::default();
        // Client 0 runs A: the name's place is node 1. Client 1 runs B: node 3.
        hold(&mut c, t, (0, 1), 1, MUTEX, 1);
        hold(&mut c, t, (1, 2), 3, MUTEX, 3);
        assert_eq!(caught(&c), ["space overlap"]);
    }

    #[test]
    fn a_lost_part_released_first_part_or_paused_holder_does_not_hold() {
        let t = Instant::now();
        let mut c = Checker::default();
        // The transition's holder: both places; one part's token fires.
        let fired = CancellationToken::new();
        let parts = vec![
            PartHeld {
                node: 1,
                key: (0, 1, 1),
                token: CancellationToken::new().into(),
            },
            PartHeld {
                node: 3,
                key: (0, 2, 1),
                token: fired.clone().into(),
            },
        ];
        c.space_held(t, 0, MUTEX, u64::MAX, 2, parts);
        fired.cancel();
        let (released, _) = hold(&mut c, t, (1, 3), 3, MUTEX, 3);
        c.space_released(released);
        hold(&mut c, t, (2, 4), 1, MUTEX, 1);
        c.pause(2, t + Duration::from_secs(30));
        hold(&mut c, t, (3, 5), 3, MUTEX, 3);
        c.revoke(3, 5);
        assert!(caught(&c).is_empty());
        // Client 2 runs again: it still holds, and so does client 1 now.
        hold(&mut c, t + Duration::from_secs(60), (1, 6), 3, MUTEX, 3);
        assert_eq!(caught(&c), ["space overlap"]);
    }

    #[test]
    fn a_semaphores_permits_count_across_nodes() {
        let t = Instant::now();
        let mut c = Checker::default();
        for client in 0..LIMIT as usize {
            hold(&mut c, t, (client, 1), client, SEMAPHORE, 1);
        }
        assert!(c.violations.is_empty());
        hold(&mut c, t, (9, 1), 3, SEMAPHORE, 3);
        assert_eq!(caught(&c), ["space overlap"]);
    }

    #[test]
    fn exclusive_tokens_must_grow_across_holders_and_epochs() {
        let t = Instant::now();
        let mut c = Checker::default();
        let next = |c: &mut Checker, token: FencingToken| {
            let (id, _) = hold(c, t, (0, 1), 0, MUTEX, token.epoch);
            c.space_token(id, token);
            c.space_released(id);
        };
        next(&mut c, FencingToken::new(1, 40));
        next(&mut c, FencingToken::new(1, 41));
        next(&mut c, FencingToken::new(3, 2));
        assert!(c.violations.is_empty());
        // A's rule after a move: the old place's order id is not above the new epoch's.
        next(&mut c, FencingToken::new(1, 42));
        assert_eq!(caught(&c), ["space fencing"]);
        // A holder whose part was lost fences nothing.
        let (id, fired) = hold(&mut c, t, (4, 1), 0, MUTEX, 1);
        fired.cancel();
        c.space_token(id, FencingToken::new(1, 1));
        assert_eq!(caught(&c), ["space fencing"]);
    }
}
