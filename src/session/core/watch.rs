//! Watches: the server keeps one watch per session and semaphore, armed by a describe and
//! fired once by the next change; the core multiplexes it to every local subscriber of
//! the name and re-arms it after each change and after a reattach.

use tokio::time::Instant;

use super::pending::Replay;
use super::{Effect, Kind, SessionCore, SubscriberId};
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
}

impl SessionCore {
    pub(super) fn on_watch(
        &mut self,
        now: Instant,
        subscriber: SubscriberId,
        name: String,
        opts: WatchOptions,
    ) {
        let entry = self
            .watches
            .entry(name.clone())
            .or_insert_with(|| WatchEntry {
                subscribers: Vec::new(),
                req_id: None,
                resynced: false,
            });
        entry.subscribers.push((subscriber, opts));
        // (Re)arm with the union of every subscriber's wishes; the server keeps one watch
        // per session and semaphore, and the newest describe replaces it.
        self.arm_watch(now, &name);
    }

    /// A subscriber dropped its stream.
    pub(super) fn unwatch(&mut self, name: &str, subscriber: SubscriberId) {
        let Some(entry) = self.watches.get_mut(name) else {
            return;
        };
        entry.subscribers.retain(|(s, _)| *s != subscriber);
        if entry.subscribers.is_empty() {
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
        let union = entry.subscribers.iter().fold(
            WatchOptions::new()
                .data(false)
                .owners(false)
                .describe(DescribeOptions::new()),
            |acc, (_, o)| WatchOptions {
                data: acc.data || o.data,
                owners: acc.owners || o.owners,
                describe: DescribeOptions {
                    owners: acc.describe.owners || o.describe.owners,
                    waiters: acc.describe.waiters || o.describe.waiters,
                },
            },
        );
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

    /// Hands an item to every subscriber of `name`; an error item ends the watch.
    pub(super) fn deliver_watch(&mut self, name: &str, item: Result<WatchUpdate>) {
        let Some(entry) = self.watches.get(name) else {
            return;
        };
        let end = item.is_err();
        for (subscriber, _) in &entry.subscribers {
            self.out.push(Effect::Watch(*subscriber, item.clone()));
        }
        if end {
            self.remove_watch(name);
        }
    }

    pub(super) fn on_watch_described(&mut self, name: &str, r: rs::DescribeSemaphoreResult) {
        if self.watches.get(name).and_then(|w| w.req_id) != Some(r.req_id) {
            return; // superseded by a newer arm
        }
        let ok = r.status == StatusCode::Success as i32;
        let item = match (ok, r.semaphore_description) {
            (true, Some(d)) => {
                let resynced = self
                    .watches
                    .get_mut(name)
                    .is_some_and(|w| std::mem::take(&mut w.resynced));
                if !r.watch_added {
                    // Nothing armed: try again on the next change we cause or see.
                    tracing::debug!(name, "watch not added");
                }
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
        self.deliver_watch(name, item);
    }

    pub(super) fn on_watch_changed(&mut self, now: Instant, c: rs::DescribeSemaphoreChanged) {
        if let Some(name) = self.watch_reqs.get(&c.req_id).cloned()
            && (c.data_changed || c.owners_changed)
        {
            self.arm_watch(now, &name);
        }
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
