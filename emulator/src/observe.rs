//! Watching a node from outside: the changes of its sessions and owners, in the order the
//! state machine made them (`SPEC.md` §2, §4).
//!
//! A [`NodeState`](crate::core::NodeState) told to [record its
//! changes](crate::core::NodeState::record_changes) notes each one as it makes it; an
//! [`Observer`] given to [`EmulatorBuilder::observer`](crate::EmulatorBuilder::observer)
//! hears them, node by node, under the node's lock and before any message they cause is
//! sent: a grant is observed before its owner can learn of it, a session's end before anyone
//! can be told. Without an observer nothing is recorded (one branch per change).

/// Why a session ended (§2.5, §2.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SessionEnd {
    /// The client stopped it (`session_stop`).
    Stopped,
    /// It stayed detached past its timeout (plus the grace period after a restart).
    Expired,
    /// [`Emulator::expire_session`](crate::Emulator::expire_session) ended it: a fault, not
    /// a timeout.
    Forced,
}

/// Why an owner stopped owning a semaphore (§4.5, §3.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OwnerEnd {
    /// Its session released it.
    Released,
    /// Its session ended ([`Change::SessionEnded`] comes first).
    SessionEnded,
    /// The semaphore was deleted under it (`delete_semaphore` with `force`).
    Deleted,
}

/// One change of a coordination node, as its state machine made it.
///
/// # Examples
///
/// ```
/// use ydb_coordination_emulator::observe::{Change, OwnerEnd};
///
/// let change = Change::Released {
///     semaphore: "lock".to_string(),
///     session: 1,
///     order_id: 7,
///     why: OwnerEnd::Released,
/// };
/// assert!(matches!(change, Change::Released { order_id: 7, .. }));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Change {
    /// A new session (§2.2), with the description its client gave.
    SessionStarted {
        /// The session's id.
        session: u64,
        /// `SessionStart.description`.
        description: String,
    },
    /// A stream attached to the session: at its start, or a reattach (§2.3).
    Attached {
        /// The session's id.
        session: u64,
    },
    /// The session's stream ended: its expiry clock runs from here (§2.5).
    Detached {
        /// The session's id.
        session: u64,
    },
    /// The session is gone, and with it everything it owned and waited for.
    SessionEnded {
        /// The session's id.
        session: u64,
        /// Why.
        why: SessionEnd,
    },
    /// A waiter became an owner (§4.1).
    Granted {
        /// The semaphore's name.
        semaphore: String,
        /// The owner's session.
        session: u64,
        /// The ownership's `order_id`: the fencing token its owner is told (§5).
        order_id: u64,
        /// The tokens it holds.
        count: u64,
        /// The semaphore's limit (`u64::MAX` for an ephemeral one).
        limit: u64,
    },
    /// An owner stopped owning.
    Released {
        /// The semaphore's name.
        semaphore: String,
        /// The owner's session.
        session: u64,
        /// The ownership's `order_id`.
        order_id: u64,
        /// Why.
        why: OwnerEnd,
    },
    /// The tablet restarted (§2.9): every attached session is detached (a
    /// [`Change::Detached`] each follows).
    Restarted,
}

/// Hears the [`Change`]s of every coordination node of an
/// [`Emulator`](crate::Emulator), in each node's order.
///
/// `observe` runs under the node's lock, before the messages the change causes are sent: it
/// must be quick and must not call the emulator. A closure `Fn(&str, &Change)` is an
/// observer.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> std::io::Result<()> {
/// use std::sync::{Arc, Mutex};
/// use ydb_coordination_emulator::{Emulator, observe::Change};
///
/// let seen: Arc<Mutex<Vec<(String, Change)>>> = Arc::default();
/// let log = seen.clone();
/// let emulator = Emulator::builder()
///     .node("/local/locks")
///     .observer(move |node: &str, change: &Change| {
///         log.lock().unwrap().push((node.to_string(), change.clone()));
///     })
///     .start()
///     .await?;
/// emulator.restart();
/// assert_eq!(seen.lock().unwrap()[0], ("/local/locks".to_string(), Change::Restarted));
/// # Ok(())
/// # }
/// ```
pub trait Observer: Send + Sync + 'static {
    /// `node` (its absolute path) made `change`.
    fn observe(&self, node: &str, change: &Change);
}

impl<F> Observer for F
where
    F: Fn(&str, &Change) + Send + Sync + 'static,
{
    fn observe(&self, node: &str, change: &Change) {
        self(node, change);
    }
}
