//! A granted lease's record: one allocation shared by the session core and the
//! [`Lease`](crate::Lease) handle.
//!
//! A session may hold a great many leases, so what one costs is kept small: the core's name
//! table and the handle point at the same record, and the lease's cancellation token (a
//! tree node of about 112 bytes) is made only when someone asks for it. Until then, that
//! the lease ended is one flag here, and that the session ended is the session's own token,
//! the parent every lease token is made a child of. So a lease whose token nobody asked for
//! fires nothing, and one whose token was asked for fires exactly as an eagerly made token
//! would: when the core ends the lease, and with the session's token.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The bits of [`Held::word`] above the lease id.
const EPHEMERAL: u64 = 1 << 63;
/// The handle gave the lease back: its drop sends nothing more.
const RELEASED: u64 = 1 << 62;
/// The core ended the lease, or the handle released it. Set under the token's lock.
const ENDED: u64 = 1 << 61;
/// Granted without reading its order id: it has no fencing token, and its owner data is
/// replaced without checking the ownership (the session's announcement).
const UNFENCED: u64 = 1 << 60;
/// Lease ids stay below this (a session would need millennia to reach it).
const ID: u64 = UNFENCED - 1;

/// A lease the core granted.
#[derive(Debug)]
pub(crate) struct Held {
    /// The lease's id in its session (a release of an older lease of the same name does not
    /// end this one) and the flags above it, in one word: a record of 72 bytes fits a
    /// smaller allocation than one of 80.
    word: AtomicU64,
    /// Shared with the core's name table.
    pub(crate) name: Arc<str>,
    pub(crate) count: u64,
    pub(crate) order_id: u64,
    /// When the session learnt of the grant (a bound on the lease counts from it).
    pub(crate) since: Instant,
    /// The token, once asked for.
    token: Mutex<Option<CancellationToken>>,
}

impl Held {
    pub(crate) fn new(
        lease: u64,
        name: Arc<str>,
        count: u64,
        order_id: u64,
        since: Instant,
        ephemeral: bool,
    ) -> Self {
        let flags = if ephemeral { EPHEMERAL } else { 0 };
        Self {
            word: AtomicU64::new((lease & ID) | flags),
            name,
            count,
            order_id,
            since,
            token: Mutex::new(None),
        }
    }

    /// The lease's id in its session.
    pub(crate) fn lease(&self) -> u64 {
        self.word.load(Ordering::Relaxed) & ID
    }

    /// Whether the semaphore is ephemeral.
    pub(crate) fn ephemeral(&self) -> bool {
        self.word.load(Ordering::Relaxed) & EPHEMERAL != 0
    }

    /// The same lease, granted without reading its order id.
    pub(crate) fn unfenced(self) -> Self {
        self.word.fetch_or(UNFENCED, Ordering::Relaxed);
        self
    }

    /// Whether it was granted without reading its order id.
    pub(crate) fn is_unfenced(&self) -> bool {
        self.word.load(Ordering::Relaxed) & UNFENCED != 0
    }

    fn slot(&self) -> MutexGuard<'_, Option<CancellationToken>> {
        // Nothing panics while holding the lock; a poisoned slot is still consistent.
        self.token.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Ends the lease: its token fires now if it was asked for, and is born fired if it is
    /// asked for later.
    pub(crate) fn end(&self) {
        let slot = self.slot();
        self.word.fetch_or(ENDED, Ordering::AcqRel);
        if let Some(token) = &*slot {
            token.cancel();
        }
    }

    /// Whether the lease was ended (the session's end is its token's to tell).
    pub(crate) fn is_ended(&self) -> bool {
        self.word.load(Ordering::Acquire) & ENDED != 0
    }

    /// The lease's token, a child of the session's token `session`; made on the first call.
    pub(crate) fn token(&self, session: &CancellationToken) -> CancellationToken {
        let mut slot = self.slot();
        slot.get_or_insert_with(|| {
            let token = session.child_token();
            if self.is_ended() {
                token.cancel();
            }
            token
        })
        .clone()
    }

    /// Makes `token` the lease's token if none was asked for yet (firing it at once if the
    /// lease has ended), so that the session fires it when the lease ends; whether it did.
    /// Several leases can share one token this way.
    pub(crate) fn adopt(&self, token: &CancellationToken) -> bool {
        let mut slot = self.slot();
        if slot.is_some() {
            return false;
        }
        if self.is_ended() {
            token.cancel();
        }
        *slot = Some(token.clone());
        true
    }

    /// Whether the lease may have been lost or was given back, with `session` the session's
    /// token: the same as asking whether its token fired (also by its holder's own
    /// `cancel()`), without making one.
    pub(crate) fn is_lost(&self, session: &CancellationToken) -> bool {
        self.is_ended()
            || session.is_cancelled()
            || self
                .slot()
                .as_ref()
                .is_some_and(CancellationToken::is_cancelled)
    }

    /// Marks the lease given back by its handle; whether it was the first time.
    pub(crate) fn release(&self) -> bool {
        self.word.fetch_or(RELEASED, Ordering::AcqRel) & RELEASED == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held() -> Held {
        Held::new(1, "job".into(), 1, 7, Instant::now(), true)
    }

    #[test]
    fn a_token_asked_for_before_the_end_fires_at_the_end() {
        let session = CancellationToken::new();
        let h = held();
        let token = h.token(&session);
        assert!(!token.is_cancelled());
        assert!(!h.is_lost(&session));
        h.end();
        assert!(token.is_cancelled());
        assert!(h.is_lost(&session));
        assert!(
            !session.is_cancelled(),
            "ending one lease leaves the session alone"
        );
    }

    #[test]
    fn a_token_asked_for_after_the_end_is_born_fired() {
        let session = CancellationToken::new();
        let h = held();
        h.end();
        assert!(h.is_lost(&session));
        assert!(h.token(&session).is_cancelled());
    }

    #[test]
    fn the_session_ending_fires_asked_tokens_and_counts_as_lost_for_the_rest() {
        let session = CancellationToken::new();
        let (asked, quiet) = (held(), held());
        let token = asked.token(&session);
        session.cancel();
        assert!(token.is_cancelled());
        assert!(quiet.is_lost(&session));
        assert!(!quiet.is_ended(), "the lease itself was not ended");
        assert!(quiet.token(&session).is_cancelled());
    }

    #[test]
    fn a_token_its_holder_cancelled_reads_as_lost() {
        let session = CancellationToken::new();
        let h = held();
        h.token(&session).cancel();
        assert!(h.is_lost(&session));
        assert!(!h.is_ended(), "the core did not end it");
    }

    #[test]
    fn every_ask_returns_the_same_token() {
        let session = CancellationToken::new();
        let h = held();
        let (a, b) = (h.token(&session), h.token(&session));
        a.cancel();
        assert!(b.is_cancelled());
    }

    #[test]
    fn leases_that_adopt_one_token_fire_it_when_any_of_them_ends() {
        let session = CancellationToken::new();
        let (a, b) = (held(), held());
        let shared = session.child_token();
        assert!(a.adopt(&shared) && b.adopt(&shared));
        assert!(!shared.is_cancelled());
        b.end();
        assert!(shared.is_cancelled());
        assert!(
            a.token(&session).is_cancelled(),
            "it is each lease's own token"
        );
        assert!(!a.is_ended(), "the other lease itself was not ended");
    }

    #[test]
    fn a_lease_whose_token_was_made_keeps_it_and_an_ended_one_fires_what_it_adopts() {
        let session = CancellationToken::new();
        let asked = held();
        let own = asked.token(&session);
        assert!(!asked.adopt(&session.child_token()));
        asked.end();
        assert!(own.is_cancelled());
        let ended = held();
        ended.end();
        let shared = session.child_token();
        assert!(ended.adopt(&shared));
        assert!(shared.is_cancelled());
    }

    #[test]
    fn a_lease_is_released_once() {
        let h = held();
        assert!(h.release());
        assert!(!h.release());
    }

    #[test]
    fn the_record_stays_small() {
        // The record is a lease's whole cost besides its name and its slot in the name
        // table; a field added here is paid by every held lease.
        assert!(
            std::mem::size_of::<Held>() <= 72,
            "{}",
            std::mem::size_of::<Held>()
        );
    }

    #[test]
    fn the_flags_leave_the_id_and_each_other_alone() {
        let session = CancellationToken::new();
        let h = Held::new(ID, "job".into(), 1, 7, Instant::now(), true);
        assert!(h.ephemeral() && !h.is_ended());
        assert!(h.release());
        assert!(!h.is_ended(), "a release alone does not end the lease");
        h.end();
        assert!(h.is_lost(&session));
        assert_eq!(h.lease(), ID);
        assert!(h.ephemeral());
        let persistent = Held::new(3, "job".into(), 1, 7, Instant::now(), false);
        assert!(!persistent.ephemeral());
        assert_eq!(persistent.lease(), 3);
    }
}
