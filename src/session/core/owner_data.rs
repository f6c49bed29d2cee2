//! Owner data of a held lease: a repeated acquire with the same count replaces it, which
//! the server answers at once without changing the order of owners. A semaphore
//! force-deleted and made anew would be *taken* by that acquire, so a describe right behind
//! it checks that the order id (the fencing token) is unchanged; if not, the new grant is
//! given back and the lease ends.

use std::sync::Arc;

use tokio::time::Instant;

use super::acquire::{not_held, owners_describe};
use super::pending::Replay;
use super::{Answer, CallerId, Kind, SessionCore};
use crate::error::{Error, ErrorKind};
use crate::proto::{StatusCode, session_request as rq, session_response as rs};

impl SessionCore {
    /// Replaces a held lease's owner data: a repeated acquire with the same count, which the
    /// server answers at once without changing the order of owners.
    pub(super) fn set_data(
        &mut self,
        now: Instant,
        name: Arc<str>,
        lease: u64,
        data: Vec<u8>,
        caller: CallerId,
    ) {
        let held = self
            .names
            .get(&*name)
            .and_then(|s| s.holding.as_ref())
            .filter(|h| h.lease() == lease)
            .map(|h| (h.count, h.ephemeral(), h.order_id, h.is_unfenced()));
        let Some((count, ephemeral, order_id, unfenced)) = held else {
            self.answer(caller, Answer::Done(Err(not_held(&name))));
            return;
        };
        let name = name.to_string();
        // The repeated acquire would also *take* a semaphore that was force-deleted and
        // made anew; the describe right behind it tells whether our order id is unchanged.
        // (Registered in this order, so a replay after a reattach keeps it.)
        let kind = Kind::SetData {
            caller: Some(caller),
            name: name.clone(),
            check: 0,
        };
        let n = name.clone();
        let update = self.pending.register(kind, Replay::Resend, |req_id| {
            rq::Request::AcquireSemaphore(rq::AcquireSemaphore {
                req_id,
                name: n,
                timeout_millis: 0,
                count,
                data,
                ephemeral,
            })
        });
        if unfenced {
            // No ownership to check: the update's own answer answers the caller.
            self.write(now, update);
            return;
        }
        let kind = Kind::SetDataCheck {
            caller: None,
            name: name.clone(),
            lease,
            order_id,
        };
        let check = self.pending.register(kind, Replay::Resend, |req_id| {
            owners_describe(req_id, name, false)
        });
        if let Some(super::pending::Entry {
            kind: Kind::SetData { check: c, .. },
            ..
        }) = self.pending.get_mut(update)
        {
            *c = check;
        }
        self.write(now, update);
        self.write(now, check);
    }

    pub(super) fn on_set_data_result(
        &mut self,
        name: &str,
        caller: Option<CallerId>,
        check: u64,
        r: &rs::AcquireSemaphoreResult,
    ) {
        let failed = if r.status != StatusCode::Success as i32 {
            Some(Error::from_ydb(
                r.status,
                &r.issues,
                &format!("set owner data of {name:?}"),
            ))
        } else if !r.acquired {
            Some(not_held(name))
        } else {
            None
        };
        match failed {
            Some(err) => {
                if let Some(caller) = caller {
                    self.answer(caller, Answer::Done(Err(err)));
                }
            }
            // An unfenced lease has no check behind it: answered now.
            None if check == 0 => {
                if let Some(caller) = caller {
                    self.answer(caller, Answer::Done(Ok(())));
                }
            }
            // The describe behind it answers the caller.
            None => {
                if let Some(super::pending::Entry {
                    kind: Kind::SetDataCheck { caller: slot, .. },
                    ..
                }) = self.pending.get_mut(check)
                {
                    *slot = caller;
                }
            }
        }
    }

    /// The describe behind an owner-data update of the lease `lease` (fencing token
    /// `fencing`): the same order id means the same ownership; any other means the old one
    /// ended and the update took the semaphore anew, which is given back, and the lease
    /// ends. The update may find the lease already ended here (a delete notice came first):
    /// what it took is given back all the same, or the session would own the semaphore with
    /// no local holder, until it ends. Not if an acquire of the name was written after the
    /// update (the lease's end started the next local waiter): the server takes it as a
    /// re-acquire of what the update took, and a release would take that from it.
    ///
    /// `order_id` is this session's order id as the describe shows it (`Some(None)`: not an
    /// owner), or `None` when the describe failed and shows nothing: the ownership cannot be
    /// told to be the lease's, so the lease ends, and what the update may hold is given back
    /// (a release of what the session does not own changes nothing).
    pub(super) fn on_set_data_check(
        &mut self,
        now: Instant,
        name: &str,
        lease: u64,
        fencing: u64,
        caller: Option<CallerId>,
        order_id: Option<Option<u64>>,
    ) {
        let Some(caller) = caller else {
            return; // the update itself failed and was answered
        };
        let held = self
            .names
            .get(name)
            .and_then(|s| s.holding.as_ref())
            .is_some_and(|h| h.lease() == lease);
        if order_id == Some(Some(fencing)) {
            // Still the lease's ownership; if the lease was released meanwhile, its release
            // (written behind this describe) gives it back.
            let result = if held { Ok(()) } else { Err(not_held(name)) };
            self.answer(caller, Answer::Done(result));
            return;
        }
        if held {
            self.end_holding(now, name);
        }
        let taken_over = self
            .names
            .get(name)
            .is_some_and(|s| s.holding.is_some() || s.active().is_some());
        // Owned anew, or perhaps (the describe failed).
        if order_id != Some(None) && !taken_over {
            self.submit_release(now, Arc::from(name), None);
        }
        let err = Error::new(
            ErrorKind::Aborted,
            format!("semaphore {name:?}: the lease ended before its data could be set"),
        );
        self.answer(caller, Answer::Done(Err(err)));
        self.next_in_line(now, name);
    }

    /// The server no longer has the lease of `name` (the semaphore was deleted, or a
    /// describe shows another order id or none): it ends here too, its token fires, and the
    /// acquires waiting behind it locally go on. Nothing is sent: there is nothing to
    /// release (the caller gives back an ownership taken anew, if any).
    pub(super) fn ownership_ended(&mut self, now: Instant, name: &str) {
        if self.end_holding(now, name) {
            self.next_in_line(now, name);
        }
    }

    /// Forgets the holding of `name`, firing its token; whether there was one.
    pub(super) fn end_holding(&mut self, now: Instant, name: &str) -> bool {
        let Some(h) = self.names.get_mut(name).and_then(|s| s.holding.take()) else {
            return false;
        };
        h.end();
        let held_for = now.saturating_duration_since(h.since);
        self.metrics
            .lease_ended(name, held_for, Some("session_expired"));
        if !super::super::types::is_announcement(name) {
            tracing::warn!(
                semaphore = name,
                fencing_token = h.order_id,
                why = "ownership_ended",
                "lease lost"
            );
        }
        self.unguard(now, name);
        true
    }
}
