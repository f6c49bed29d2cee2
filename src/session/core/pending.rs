//! The table of requests in flight, keyed by `req_id` (pure: no I/O, no clocks of its own).
//!
//! Every request is registered *before* it is written, so a fast reply always finds its
//! entry. After a reattach the table decides what is sent again: everything still
//! unanswered, in the original order, except the requests that are not safe to repeat
//! (create and delete), which fail with [`ErrorKind::OutcomeUnknown`].

use std::collections::HashMap;

use tokio::time::Instant;

use super::Ids;
use crate::error::{Error, ErrorKind};
use crate::proto::session_request::Request;

/// Whether a request may be sent again on a new stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Replay {
    /// Idempotent given the server's rules (acquire, release, describe, update).
    Resend,
    /// Not idempotent (create, delete): fail with `OutcomeUnknown` if it was sent.
    Fail,
    /// Dropped at a reattach; its owner re-creates it (watch describes).
    Drop,
}

/// One request in flight.
#[derive(Debug)]
pub(crate) struct Entry<K> {
    /// The request until it is first written. After that it is kept (for a resend) only if
    /// its owner cannot build it again; see [`PendingTable::take_for_write`].
    pub(crate) request: Option<Request>,
    /// What the driver needs to route the answer.
    pub(crate) kind: K,
    /// When it was last written (`None`: not yet written on any stream).
    pub(crate) sent_at: Option<Instant>,
    replay: Replay,
}

/// The capacity below which the table does not shrink.
const KEPT: usize = 32;

/// Requests in flight. A hash map: every request is inserted and removed once, often
/// thousands in flight, and the two walks that need `req_id` order (a replay, the end)
/// sort first.
#[derive(Debug)]
pub(crate) struct PendingTable<K> {
    entries: HashMap<u64, Entry<K>, Ids>,
    next_req_id: u64,
}

impl<K> Default for PendingTable<K> {
    fn default() -> Self {
        Self {
            entries: HashMap::default(),
            next_req_id: 1,
        }
    }
}

impl<K> PendingTable<K> {
    /// Allocates a `req_id`, builds the request with it and registers it unsent.
    pub(crate) fn register(
        &mut self,
        kind: K,
        replay: Replay,
        build: impl FnOnce(u64) -> Request,
    ) -> u64 {
        let req_id = self.next_req_id;
        self.next_req_id += 1;
        self.entries.insert(
            req_id,
            Entry {
                request: Some(build(req_id)),
                kind,
                sent_at: None,
                replay,
            },
        );
        req_id
    }

    /// The stored request for writing: a copy with `keep`, else the request itself (`None`
    /// once it was written before: the owner builds it again for a resend, so the common
    /// request is never copied). Call [`PendingTable::mark_sent`] once it is written.
    pub(crate) fn take_for_write(&mut self, req_id: u64, keep: bool) -> Option<Request> {
        let entry = self.entries.get_mut(&req_id)?;
        if keep {
            entry.request.clone()
        } else {
            entry.request.take()
        }
    }

    /// Records that the request went out at `now`.
    pub(crate) fn mark_sent(&mut self, req_id: u64, now: Instant) {
        if let Some(entry) = self.entries.get_mut(&req_id) {
            entry.sent_at = Some(now);
        }
    }

    /// The entry for an answer, if the request is still in flight.
    pub(crate) fn get(&self, req_id: u64) -> Option<&Entry<K>> {
        self.entries.get(&req_id)
    }

    /// Mutable access to an entry (e.g. to adjust a timeout before a resend).
    pub(crate) fn get_mut(&mut self, req_id: u64) -> Option<&mut Entry<K>> {
        self.entries.get_mut(&req_id)
    }

    /// Removes an answered or abandoned request. A table a burst left mostly empty gives
    /// back most of its memory.
    pub(crate) fn remove(&mut self, req_id: u64) -> Option<Entry<K>> {
        let entry = self.entries.remove(&req_id);
        let len = self.entries.len();
        if self.entries.capacity() > KEPT && len < self.entries.capacity() / 4 {
            self.entries.shrink_to(KEPT.max(len * 2));
        }
        entry
    }

    /// How many requests are in flight.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// At a reattach: removes and returns the entries that must fail (sent, not repeatable)
    /// and the ones to drop; returns the `req_id`s to send again, in order.
    pub(crate) fn replay(&mut self) -> (Vec<u64>, Vec<(u64, Entry<K>)>) {
        let mut resend = Vec::new();
        let mut removed = Vec::new();
        let mut ids: Vec<u64> = self.entries.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let Some(entry) = self.entries.get(&id) else {
                continue;
            };
            let keep = match entry.replay {
                Replay::Resend => true,
                Replay::Fail => entry.sent_at.is_none(),
                Replay::Drop => false,
            };
            if keep {
                resend.push(id);
            } else if let Some(entry) = self.entries.remove(&id) {
                removed.push((id, entry));
            }
        }
        (resend, removed)
    }

    /// Removes every entry (the session ended), in `req_id` order.
    pub(crate) fn drain(&mut self) -> Vec<(u64, Entry<K>)> {
        let mut entries: Vec<_> = std::mem::take(&mut self.entries).into_iter().collect();
        entries.sort_unstable_by_key(|(id, _)| *id);
        entries
    }
}

impl<K> Entry<K> {
    /// The error for a request removed at a reattach.
    pub(crate) fn replay_error(&self) -> Option<Error> {
        (self.replay == Replay::Fail).then(|| {
            Error::new(
                ErrorKind::OutcomeUnknown,
                "the stream broke while the request was in flight; it may or may not have been \
                 carried out",
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::session_request::{CreateSemaphore, DescribeSemaphore, ReleaseSemaphore};

    fn describe(req_id: u64) -> Request {
        Request::DescribeSemaphore(DescribeSemaphore {
            req_id,
            ..DescribeSemaphore::default()
        })
    }

    #[test]
    fn req_ids_increase_and_answers_find_their_entry() {
        let mut t = PendingTable::default();
        let a = t.register("a", Replay::Resend, describe);
        let b = t.register("b", Replay::Resend, describe);
        assert!(b > a);
        assert_eq!(t.get(a).map(|e| e.kind), Some("a"));
        assert_eq!(t.remove(a).map(|e| e.kind), Some("a"));
        assert!(t.get(a).is_none());
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn replay_resends_in_order_and_fails_unrepeatable_sent_requests() {
        let now = Instant::now();
        let mut t = PendingTable::default();
        let create = t.register("create", Replay::Fail, |req_id| {
            Request::CreateSemaphore(CreateSemaphore {
                req_id,
                ..CreateSemaphore::default()
            })
        });
        let release = t.register("release", Replay::Resend, |req_id| {
            Request::ReleaseSemaphore(ReleaseSemaphore {
                req_id,
                ..ReleaseSemaphore::default()
            })
        });
        let watch = t.register("watch", Replay::Drop, describe);
        let unsent_create = t.register("create2", Replay::Fail, describe);
        for id in [create, release, watch] {
            assert!(t.take_for_write(id, true).is_some());
            t.mark_sent(id, now);
        }
        assert!(
            t.take_for_write(release, false).is_some(),
            "kept: moved out now"
        );
        assert!(
            t.take_for_write(release, false).is_none(),
            "then built again by its owner"
        );
        let (resend, removed) = t.replay();
        assert_eq!(resend, vec![release, unsent_create]);
        let removed: Vec<_> = removed
            .iter()
            .map(|(id, e)| (*id, e.replay_error().map(|e| e.kind())))
            .collect();
        assert_eq!(
            removed,
            vec![(create, Some(ErrorKind::OutcomeUnknown)), (watch, None)]
        );
    }

    #[test]
    fn a_table_emptied_after_a_burst_gives_its_memory_back_and_keeps_the_rest_in_order() {
        let mut t = PendingTable::default();
        let ids: Vec<u64> = (0..4096)
            .map(|_| t.register((), Replay::Resend, describe))
            .collect();
        let burst = t.entries.capacity();
        for id in &ids[..4090] {
            assert!(t.remove(*id).is_some());
        }
        assert!(t.entries.capacity() < burst / 8);
        assert_eq!(t.len(), 6);
        let (resend, removed) = t.replay();
        assert_eq!(resend, ids[4090..]);
        assert!(removed.is_empty());
        let drained: Vec<u64> = t.drain().into_iter().map(|(id, _)| id).collect();
        assert_eq!(drained, ids[4090..]);
    }
}
