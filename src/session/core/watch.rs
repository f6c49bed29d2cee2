//! Watches: the server keeps one watch per session and semaphore, armed by a describe and
//! fired once by the next change; the core multiplexes it to every local subscriber of
//! the name and re-arms it after each change and after a reattach.

use std::sync::Arc;

use tokio::time::Instant;

use super::pending::Replay;
use super::{Effect, Kind, SessionCore, SubscriberId};
use crate::clock::later;
use crate::config::{DescribeOptions, WatchOptions};
use crate::error::{Error, ErrorKind, Result};
use crate::proto::{StatusCode, session_request as rq, session_response as rs};
use crate::session::types::WatchUpdate;

/// The server-side watch of one name and its local subscribers.
#[derive(Debug)]
pub(super) struct WatchEntry {
    pub(super) subscribers: Vec<(SubscriberId, WatchOptions)>,
    /// `req_id` of the describe whose watch is armed or in flight.
    pub(super) req_id: Option<u64>,
    /// The next item follows a reattach.
    pub(super) resynced: bool,
    /// The held lease of this name that the watch guards (see [`SessionCore::guard_lease`]).
    pub(super) guards: Option<u64>,
    /// The server answered the guard's describe without adding its watch: armed again at
    /// the next ping (see [`SessionCore::rearm_unadded_guards`]).
    pub(super) unadded: bool,
}

impl SessionCore {
    pub(super) fn on_watch(
        &mut self,
        now: Instant,
        subscriber: SubscriberId,
        name: String,
        opts: WatchOptions,
    ) {
        self.watch_entry(&name).subscribers.push((subscriber, opts));
        // (Re)arm with the union of every subscriber's wishes; the server keeps one watch
        // per session and semaphore, and the newest describe replaces it.
        self.arm_watch(now, &name);
    }

    fn watch_entry(&mut self, name: &str) -> &mut WatchEntry {
        self.watches
            .entry(name.to_string())
            .or_insert_with(|| WatchEntry {
                subscribers: Vec::new(),
                req_id: None,
                resynced: false,
                guards: None,
                unadded: false,
            })
    }

    /// Guards the held lease `lease` of `name`: the server tells no owner of a forced
    /// delete, so the session watches the semaphore itself. The watch is a data watch
    /// (plus whatever local subscribers ask): it fires on a delete and on a data update,
    /// never on owner or waiter changes, so a group of N guarded members costs one
    /// notification per member per delete, not N per join. Each description it gets lists
    /// the owners, and one that no longer shows this session with the lease's order id ends
    /// the lease: that covers a delete in the moments before the watch was armed, and one
    /// whose notification was lost with a broken stream (the watch is re-armed after the
    /// reattach). A delete notification ends it at once.
    ///
    /// An ephemeral semaphore cannot be deleted while it has an owner: nothing to guard.
    pub(super) fn guard_lease(&mut self, now: Instant, name: &str, lease: u64) {
        let held = self
            .names
            .get(name)
            .and_then(|s| s.holding.as_ref())
            .is_some_and(|h| h.lease() == lease && !h.ephemeral());
        if !held {
            return;
        }
        self.watch_entry(name).guards = Some(lease);
        // Armed anew even if a watch is armed: its first description tells whether the
        // ownership outlived the moments before.
        self.arm_watch(now, name);
    }

    /// The lease of `name` ended: the watch guards nothing any more. A watch armed for the
    /// guard and subscribers too is armed again with the subscribers' own options when the
    /// guard asked for more (a data watch, the owners described): one describe, rather than
    /// subscribers woken by changes and sent owners they did not ask for.
    pub(super) fn unguard(&mut self, now: Instant, name: &str) {
        let Some(entry) = self.watches.get_mut(name) else {
            return;
        };
        let guarded = union(entry);
        entry.guards = None;
        entry.unadded = false;
        if entry.subscribers.is_empty() {
            self.remove_watch(name);
        } else if entry.req_id.is_some() && union(entry) != guarded {
            self.arm_watch(now, name);
        }
    }

    /// A subscriber dropped its stream.
    pub(super) fn unwatch(&mut self, name: &str, subscriber: SubscriberId) {
        let Some(entry) = self.watches.get_mut(name) else {
            return;
        };
        entry.subscribers.retain(|(s, _)| *s != subscriber);
        if entry.subscribers.is_empty() && entry.guards.is_none() {
            // The server's watch fires once more at most; its answer is ignored.
            self.remove_watch(name);
        }
    }

    fn remove_watch(&mut self, name: &str) {
        if let Some(entry) = self.watches.remove(name)
            && let Some(old) = entry.req_id
        {
            self.watch_reqs.remove(&old);
        }
    }

    pub(super) fn arm_watch(&mut self, now: Instant, name: &str) {
        let Some(entry) = self.watches.get_mut(name) else {
            return;
        };
        let union = union(entry);
        entry.unadded = false;
        if let Some(old) = entry.req_id.take() {
            // A describe of the replaced watch still unanswered is answered for nobody.
            self.watch_reqs.remove(&old);
            self.pending.remove(old);
        }
        let n = name.to_string();
        let req_id = self.submit(
            now,
            Kind::Watch {
                name: name.to_string(),
            },
            Replay::Drop,
            |req_id| {
                rq::Request::DescribeSemaphore(rq::DescribeSemaphore {
                    req_id,
                    name: n,
                    include_owners: union.describe.owners,
                    include_waiters: union.describe.waiters,
                    watch_data: union.data,
                    watch_owners: union.owners,
                })
            },
        );
        self.watch_reqs.insert(req_id, name.to_string());
        if let Some(entry) = self.watches.get_mut(name) {
            entry.req_id = Some(req_id);
        }
    }

    /// Hands an item to every subscriber of `name`; an error item ends their streams. A
    /// guard outlives it, unarmed for a ping interval (see [`SessionCore::leave_unarmed`]).
    pub(super) fn deliver_watch(&mut self, now: Instant, name: &str, item: Result<WatchUpdate>) {
        let Some(entry) = self.watches.get_mut(name) else {
            return;
        };
        let end = item.is_err();
        for (subscriber, _) in &entry.subscribers {
            self.out.push(Effect::Watch(*subscriber, item.clone()));
        }
        if !end {
            return;
        }
        if entry.guards.is_none() {
            self.remove_watch(name);
            return;
        }
        entry.subscribers.clear();
        if let Some(old) = entry.req_id.take() {
            self.watch_reqs.remove(&old);
        }
        self.leave_unarmed(now, name);
    }

    pub(super) fn on_watch_described(
        &mut self,
        now: Instant,
        name: &str,
        r: rs::DescribeSemaphoreResult,
    ) {
        if self.watches.get(name).and_then(|w| w.req_id) != Some(r.req_id) {
            return; // superseded by a newer arm
        }
        let ok = r.status == StatusCode::Success as i32;
        self.check_guarded(now, name, ok, &r);
        if ok && !r.watch_added {
            self.watch_not_added(now, name, r.req_id);
        }
        let item = match (ok, r.semaphore_description) {
            (true, Some(d)) => {
                let resynced = self
                    .watches
                    .get_mut(name)
                    .is_some_and(|w| std::mem::take(&mut w.resynced));
                Ok(WatchUpdate {
                    description: d.into(),
                    resynced,
                })
            }
            (true, None) => Err(Error::new(
                ErrorKind::Protocol,
                "describe answered without a description",
            )),
            (false, _) => Err(Error::from_ydb(
                r.status,
                &r.issues,
                &format!("watch semaphore {name:?}"),
            )),
        };
        self.deliver_watch(now, name, item);
    }

    /// A guarded lease whose semaphore is gone, or whose description (armed after the
    /// grant, so newer than it) does not show this session with the lease's order id, ends.
    fn check_guarded(
        &mut self,
        now: Instant,
        name: &str,
        ok: bool,
        r: &rs::DescribeSemaphoreResult,
    ) {
        let Some(lease) = self.watches.get(name).and_then(|w| w.guards) else {
            return;
        };
        let Some(held) = self
            .names
            .get(name)
            .and_then(|s| s.holding.as_ref())
            .filter(|h| h.lease() == lease)
            .map(|h| h.order_id)
        else {
            return;
        };
        let own = self.seen(ok, r, false).order_id;
        if own == Some(held) || (!ok && r.status != StatusCode::NotFound as i32) {
            return; // still ours, or the describe failed and shows nothing
        }
        self.end_holding(now, name);
        if own.is_some() {
            // An owner-data update took the semaphore made anew: give it back, before the
            // next local waiter's acquire (a release after it would supersede it).
            self.submit_release(now, Arc::from(name), None);
        }
        self.next_in_line(now, name);
    }

    /// A describe `req_id` of the watch of `name` succeeded, and the server added no watch.
    /// YDB adds one for every watching describe of a semaphore that exists, so this is a
    /// server that does not keep the protocol. A subscriber's watch waits for the next
    /// change this session causes or sees; a guard cannot (no delete would be told), so it
    /// is armed again a ping interval later, one describe per ping interval while the server
    /// keeps refusing, and each description still checks the ownership.
    fn watch_not_added(&mut self, now: Instant, name: &str, req_id: u64) {
        let Some(entry) = self
            .watches
            .get_mut(name)
            .filter(|w| w.req_id == Some(req_id))
        else {
            return;
        };
        if entry.guards.is_none() {
            tracing::debug!(name, "watch not added");
            return;
        }
        tracing::warn!(
            name,
            "the server added no watch for the lease guard; asking again in a ping interval"
        );
        // The req_id stays known: a notice under it, should one come after all, still counts.
        self.leave_unarmed(now, name);
    }

    /// Leaves the guard of `name` unarmed for now: it is armed again one ping interval
    /// from the first guard so left (not at once, which against a server that keeps
    /// failing would be a stream of describes), or at the next reattach if that comes
    /// first.
    fn leave_unarmed(&mut self, now: Instant, name: &str) {
        if let Some(entry) = self.watches.get_mut(name) {
            entry.unadded = true;
            let at = later(now, self.cfg.options.get_ping_interval());
            self.guard_rearm_at.get_or_insert(at);
        }
    }

    /// Arms again every guard left unarmed (see [`SessionCore::leave_unarmed`]).
    pub(super) fn rearm_unadded_guards(&mut self, now: Instant) {
        let names: Vec<String> = self
            .watches
            .iter()
            .filter(|(_, w)| w.unadded)
            .map(|(n, _)| n.clone())
            .collect();
        for name in names {
            self.arm_watch(now, &name);
        }
    }

    pub(super) fn on_watch_changed(&mut self, now: Instant, c: rs::DescribeSemaphoreChanged) {
        let Some(name) = self.watch_reqs.get(&c.req_id).cloned() else {
            return;
        };
        if !c.data_changed && !c.owners_changed {
            return;
        }
        // The server's watch fired and is gone.
        self.watch_reqs.remove(&c.req_id);
        if let Some(w) = self.watches.get_mut(&name) {
            w.req_id = None;
        }
        if c.data_changed && c.owners_changed {
            // Only a delete reports both kinds at once (an update reports data, an owner
            // change owners; YDB `DoDeleteSemaphore`), whatever the watch asked for. The
            // notice came on this stream after the grant's answer, so the delete came after
            // the grant: whatever this session held there is gone.
            self.ownership_ended(now, &name);
        }
        self.arm_watch(now, &name);
    }

    /// After a reattach every watch is armed again; its next item is flagged `resynced`.
    pub(super) fn rearm_watches(&mut self, now: Instant) {
        let names: Vec<String> = self.watches.keys().cloned().collect();
        for name in names {
            if let Some(w) = self.watches.get_mut(&name) {
                w.resynced = true;
                if let Some(old) = w.req_id.take() {
                    self.watch_reqs.remove(&old);
                }
            }
            self.arm_watch(now, &name);
        }
    }
}

/// What the server's watch of `entry` asks for: the union of every subscriber's wishes, and
/// the guard's (a data watch, the owners described).
fn union(entry: &WatchEntry) -> WatchOptions {
    let guarded = entry.guards.is_some();
    entry.subscribers.iter().fold(
        WatchOptions::new()
            .data(guarded)
            .owners(false)
            .describe(DescribeOptions::new().owners(guarded)),
        |acc, (_, o)| WatchOptions {
            data: acc.data || o.data,
            owners: acc.owners || o.owners,
            describe: DescribeOptions {
                owners: acc.describe.owners || o.describe.owners,
                waiters: acc.describe.waiters || o.describe.waiters,
            },
        },
    )
}
