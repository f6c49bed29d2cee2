//! What a session learnt of the queues its acquires waited in, so that a queued acquire
//! reads the waiter list only where it was short.
//!
//! The server's answer to an acquire carries no order id (the fencing token), so a queued
//! acquire learns it one of two ways: from its own waiter entry while it waits (the describe
//! behind the acquire reads the waiters too, which costs the server and the stream one entry
//! per waiter ahead and behind, and no request of its own), or from the owners once it is
//! granted (bounded by the semaphore's limit, but one round trip after the grant). Reading the waiters keeps a handoff at the round trips of a
//! client that reads no token; across a deep queue it costs `O(depth)` per waiter and
//! `O(depth^2)` for the queue. So a session reads them only for a name whose last queue it
//! saw short, lately ([`FRESH_FOR`]), and otherwise assumes a long one: a fleet that
//! queues at once, on a lock it never queued on or one it last queued on a while ago (the
//! nightly job), never pays for the waiter list; sessions that keep meeting a short queue
//! keep reading it. A queue that grows at once behind sessions that saw it short moments
//! before costs each of them one read of the list (which shows it long; two where the
//! describe behind the acquire came back without us), then the owners.
//!
//! What it learns, per name: the number of waiters that were ahead of its acquire, from its
//! position in the waiter list when it read one, else from the order ids (every waiter ahead
//! of ours has an order id between the largest owner's and ours, since the server grants in
//! order id order; the ids are node-wide, so the difference is an upper bound). The table is
//! a fixed number of slots whatever the number of names; names that share a slot forget each
//! other, which costs a guess, never a token.

use std::hash::BuildHasher;
use std::time::Duration;

use tokio::time::Instant;

/// The deepest queue in front of an acquire for which reading the waiter list still pays.
pub(super) const SHORT_QUEUE: u64 = 32;

/// How long what a session saw of a queue stays true enough to act on.
pub(super) const FRESH_FOR: Duration = Duration::from_secs(30);

/// How many names a session remembers.
const SLOTS: usize = 64;

/// The queue hints of one session.
#[derive(Debug, Clone, Default)]
pub(super) struct QueueHints {
    /// Made on the first lesson: a session that never waited in a queue (most idle ones)
    /// keeps no table.
    slots: Option<Box<[Slot; SLOTS]>>,
}

/// What one slot remembers: 24 bytes.
#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    /// The low half of the name's hash (the slot is picked by its top bits).
    check: u32,
    /// The waiters last seen ahead, at most `u32::MAX`.
    ahead: u32,
    /// When; `None` for a slot never used.
    at: Option<Instant>,
}

impl QueueHints {
    /// Whether a queued acquire of `name` at `now` reads the waiter list to learn its order
    /// id: the session saw the name's queue short, less than [`FRESH_FOR`] ago.
    pub(super) fn reads_waiters(&self, name: &str, now: Instant) -> bool {
        let Some(slots) = &self.slots else {
            return false;
        };
        let (slot, check) = slot(name);
        let seen = slots[slot];
        seen.check == check
            && u64::from(seen.ahead) <= SHORT_QUEUE
            && seen
                .at
                .is_some_and(|at| now.saturating_duration_since(at) < FRESH_FOR)
    }

    /// A queued acquire of `name` had `ahead` waiters in front of it (at most), seen at
    /// `now`.
    pub(super) fn learn(&mut self, name: &str, ahead: u64, now: Instant) {
        let (slot, check) = slot(name);
        let slots = self
            .slots
            .get_or_insert_with(|| Box::new([Slot::default(); SLOTS]));
        slots[slot] = Slot {
            check,
            ahead: u32::try_from(ahead).unwrap_or(u32::MAX),
            at: Some(now),
        };
    }
}

/// A granted acquire's bound on the waiters that were ahead of it in the queue: the order
/// ids between the largest owner it saw behind its acquire (`floor`) and its own.
pub(super) fn waiters_ahead(floor: u64, order_id: u64) -> u64 {
    order_id.saturating_sub(floor).saturating_sub(1)
}

/// The slot of `name` and the check that tells it from the other names of that slot.
fn slot(name: &str) -> (usize, u32) {
    // Deterministic (no random seed), so a simulated run replays from its seed.
    let hash = super::Ids.hash_one(name);
    // The top bits pick the slot: the hasher's multiply leaves them the best mixed.
    let slot = (hash >> 58) as usize % SLOTS;
    (slot, hash as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_never_queued_is_assumed_long() {
        let hints = QueueHints::default();
        assert!(!hints.reads_waiters("job", Instant::now()));
        assert!(
            hints.slots.is_none(),
            "a session that never queued keeps no table"
        );
    }

    #[test]
    fn a_queue_deeper_than_a_slot_holds_is_remembered_as_long() {
        let now = Instant::now();
        let mut hints = QueueHints::default();
        hints.learn("job", u64::MAX, now);
        assert!(!hints.reads_waiters("job", now));
        hints.learn("job", u64::from(u32::MAX) + SHORT_QUEUE, now);
        assert!(!hints.reads_waiters("job", now), "no wrap to a short queue");
    }

    #[test]
    fn a_short_queue_is_read_and_a_long_one_is_not() {
        let now = Instant::now();
        let mut hints = QueueHints::default();
        hints.learn("job", SHORT_QUEUE, now);
        assert!(hints.reads_waiters("job", now));
        hints.learn("job", SHORT_QUEUE + 1, now);
        assert!(!hints.reads_waiters("job", now));
        hints.learn("job", 0, now);
        assert!(hints.reads_waiters("job", now));
    }

    #[test]
    fn a_short_queue_seen_long_ago_is_assumed_long_again() {
        let now = Instant::now();
        let mut hints = QueueHints::default();
        hints.learn("job", 0, now);
        assert!(hints.reads_waiters("job", now + FRESH_FOR - Duration::from_millis(1)));
        assert!(!hints.reads_waiters("job", now + FRESH_FOR));
        // A clock that went back (it cannot, but the core never trusts it to) reads as fresh.
        assert!(hints.reads_waiters("job", now));
    }

    #[test]
    fn names_sharing_a_slot_forget_each_other() {
        let mut hints = QueueHints::default();
        let first = "name-0".to_string();
        let (slot0, _) = slot(&first);
        let other = (1..10_000)
            .map(|i| format!("name-{i}"))
            .find(|n| slot(n).0 == slot0)
            .unwrap_or_else(|| panic!("no name shares slot {slot0}"));
        let now = Instant::now();
        hints.learn(&first, 1, now);
        hints.learn(&other, 1, now);
        assert!(hints.reads_waiters(&other, now));
        assert!(
            !hints.reads_waiters(&first, now),
            "a collision must forget, not mix up"
        );
    }

    #[test]
    fn the_slots_spread_names() {
        let used: std::collections::HashSet<usize> =
            (0..1_000).map(|i| slot(&format!("sem-{i}")).0).collect();
        assert!(
            used.len() > SLOTS * 3 / 4,
            "{} of {SLOTS} slots used",
            used.len()
        );
    }

    #[test]
    fn the_bound_counts_the_order_ids_between() {
        assert_eq!(waiters_ahead(10, 14), 3);
        assert_eq!(waiters_ahead(10, 11), 0);
        // An owner with a larger id than ours cannot be (the server grants in order): no
        // underflow, the bound is zero.
        assert_eq!(waiters_ahead(10, 5), 0);
    }
}
