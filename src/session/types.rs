//! What describes and watches return.

use crate::proto::{SemaphoreDescriptionProto, SemaphoreSessionProto};

/// The ephemeral semaphore whose owners are the announcing sessions of a node (see
/// [`Announcement`](crate::session::Announcement)).
///
/// ```
/// use ydb_coordination::session::ANNOUNCE_SEMAPHORE;
///
/// assert_eq!(ANNOUNCE_SEMAPHORE, "ydb-coordination:sessions");
/// ```
pub const ANNOUNCE_SEMAPHORE: &str = "ydb-coordination:sessions";

/// Whether `name` is the session's own announcement (or one of its pages, under the
/// [reserved](crate::config::is_reserved) prefix nobody else may use), which is the library's
/// business, not the user's: snapshots, lease metrics and lease events leave it out.
pub(crate) fn is_announcement(name: &str) -> bool {
    crate::config::is_reserved(name)
}

/// A semaphore as the server describes it.
///
/// # Examples
///
/// ```
/// use ydb_coordination::session::SemaphoreDescription;
///
/// fn holders(d: &SemaphoreDescription) -> Vec<u64> {
///     d.owners.iter().map(|o| o.session_id).collect()
/// }
/// # let _ = holders;
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct SemaphoreDescription {
    /// The name.
    pub name: String,
    /// The semaphore's data.
    pub data: Vec<u8>,
    /// Units held by the owners together.
    pub count: u64,
    /// Tokens in all (`u64::MAX` for ephemeral semaphores).
    pub limit: u64,
    /// Whether the semaphore is ephemeral.
    pub ephemeral: bool,
    /// The owners, ordered by `order_id` (only when requested).
    pub owners: Vec<SemaphoreSession>,
    /// The waiters in queue order (only when requested).
    pub waiters: Vec<SemaphoreSession>,
}

/// An owner or waiter of a semaphore.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct SemaphoreSession {
    /// The node-wide sequence number of the acquire that created this entry: grants on a
    /// semaphore happen in increasing `order_id`, which makes it a fencing token.
    pub order_id: u64,
    /// The session holding or waiting.
    pub session_id: u64,
    /// For waiters, the acquire's timeout in milliseconds (`u64::MAX` = forever); 0 for owners.
    pub timeout_millis: u64,
    /// Units held or wanted.
    pub count: u64,
    /// The owner's or waiter's data.
    pub data: Vec<u8>,
}

impl From<SemaphoreSessionProto> for SemaphoreSession {
    fn from(p: SemaphoreSessionProto) -> Self {
        Self {
            order_id: p.order_id,
            session_id: p.session_id,
            timeout_millis: p.timeout_millis,
            count: p.count,
            data: p.data,
        }
    }
}

impl From<SemaphoreDescriptionProto> for SemaphoreDescription {
    fn from(p: SemaphoreDescriptionProto) -> Self {
        let mut owners: Vec<SemaphoreSession> = p.owners.into_iter().map(Into::into).collect();
        owners.sort_by_key(|o| o.order_id);
        Self {
            name: p.name,
            data: p.data,
            count: p.count,
            limit: p.limit,
            ephemeral: p.ephemeral,
            owners,
            waiters: p.waiters.into_iter().map(Into::into).collect(),
        }
    }
}

/// One item of a semaphore watch.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WatchUpdate {
    /// The semaphore as it is now.
    pub description: SemaphoreDescription,
    /// `true` when this description follows a reattach: changes that happened while the
    /// stream was down were not reported one by one and may have been missed.
    pub resynced: bool,
}

/// What a session holds and waits for, from [`Session::snapshot`](crate::Session::snapshot).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionSnapshot {
    /// The session's id.
    pub session_id: u64,
    /// Its state.
    pub state: super::SessionState,
    /// Held leases, by name.
    pub held: Vec<HeldLease>,
    /// Acquires not yet granted, oldest first.
    pub waiting: Vec<WaitingAcquire>,
    /// Requests sent (or to be sent) and not yet answered.
    pub requests_in_flight: usize,
}

/// A held lease in a [`SessionSnapshot`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HeldLease {
    /// The semaphore.
    pub name: String,
    /// Units held.
    pub count: u64,
    /// The lease's fencing token (epoch 0: a lease is on one node).
    pub fencing_token: crate::session::FencingToken,
    /// When it was granted.
    pub since: tokio::time::Instant,
}

/// An acquire in progress in a [`SessionSnapshot`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WaitingAcquire {
    /// The semaphore.
    pub name: String,
    /// Units wanted.
    pub count: u64,
    /// When it was asked for.
    pub since: tokio::time::Instant,
    /// Whether the server has queued it (`false`: sent and not yet answered, or waiting
    /// locally behind another lease of the same name in this session).
    pub queued_on_server: bool,
}
