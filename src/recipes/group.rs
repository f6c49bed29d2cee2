//! Group membership and service discovery.

use std::sync::Arc;

use futures::StreamExt;
use tokio::sync::{oneshot, watch};

use super::follow::{Following, follow, read};
use super::{Acquiring, Held, Prepare, Scope, Source, acquiring};
use crate::config::{AcquireOptions, DescribeOptions, WatchOptions};
use crate::error::{Error, ErrorKind, Result};
use crate::keeper::{Keeper, Kept};
use crate::session::{Lease, SemaphoreDescription};

/// The group semaphore's limit: nobody ever waits to join.
const GROUP_LIMIT: u64 = u64::MAX;

/// A group of processes that know about each other: each member [joins](Group::join) with
/// its data (an address, a shard, a role) and stays a member for as long as it keeps the
/// returned [`Membership`]; anyone can list the [members](Group::members) or
/// [watch](Group::watch) the whole set change. The building block of service discovery.
///
/// # Representation
///
/// One persistent semaphore with an unreachable limit (`u64::MAX`, created on first use):
/// each member is an owner of one token, its data is the owner data, and the set is read
/// with a describe of the owners and followed with an owners watch. A member that crashes
/// is removed by the server when its session times out
/// ([`SessionOptions::timeout`](crate::SessionOptions::timeout)). The semaphore is
/// persistent, not ephemeral, so that an empty group can still be watched (the server
/// deletes an ephemeral semaphore with its last owner, and nobody can watch one that does
/// not exist); it stays on the node when the group empties.
///
/// # A group deleted under its members
///
/// Being persistent, the semaphore can be deleted with `delete_semaphore(name, force =
/// true)` while it has members, and the server tells them nothing. So each member's session
/// keeps a data watch on it (it fires on a delete or a data update, never when members come
/// and go: one notification per member per delete, where an owners watch would send N per
/// join to each of N members), and describes the owners once per join and after each
/// reattach. The membership leaves [`Joined`](MembershipState::Joined) within one trip of
/// the server's notice to the member's session (a notice lost with a broken stream: at the
/// reattach), then joins the group anew, creating it again if nobody has.
///
/// # Member identity
///
/// A member is a session: [`Member::session_id`] is its identity, and one session can be a
/// member of a group once (a second [`join`](Group::join) from the same session waits until
/// the first membership ends). After a session loss a [`Membership`] from a
/// [`SessionManager`](crate::SessionManager) joins again in the next session, with a new session id and a greater
/// [`Member::order_id`]; until the server expires the old session (at most a session
/// timeout), the set can show both the old entry and the new one. Identify a process by
/// its data when that matters.
///
/// # Examples
///
/// ```
/// # use ydb_coordination::emulator::Emulator;
/// # use ydb_coordination::{Client, SessionOptions};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let emulator = Emulator::builder().node("/local/app").start().await?;
/// # let client = Client::connect(&emulator.connection_string()).await?;
/// let manager = client.session_manager("/local/app", SessionOptions::new());
/// let workers = manager.group("workers");
/// let me = workers.join(b"10.0.0.7:8080").await?;
///
/// let members = workers.members().await?;
/// assert_eq!(members.len(), 1);
/// assert_eq!(members[0].data, b"10.0.0.7:8080");
/// assert!(members[0].is_me);
///
/// me.leave().await?;
/// assert!(workers.members().await?.is_empty());
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Group {
    scope: Scope,
    name: String,
}

/// A member of a [`Group`], from [`Group::members`] and [`Group::watch`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Member {
    /// The member's session: its identity in the group.
    pub session_id: u64,
    /// The data it joined with.
    pub data: Vec<u8>,
    /// The server's `order_id` of the membership: members joined in increasing `order_id`.
    pub order_id: u64,
    /// Whether the member is the session that asked (on a
    /// [`SessionManager`](crate::SessionManager), the session current when the answer came).
    pub is_me: bool,
}

/// The members in `d`, in the order they joined, as seen from the session `me`.
fn members_of(d: &SemaphoreDescription, me: u64) -> Vec<Member> {
    d.owners
        .iter()
        .map(|o| Member {
            session_id: o.session_id,
            data: o.data.clone(),
            order_id: o.order_id,
            is_me: o.session_id == me,
        })
        .collect()
}

/// Where a [`Membership`] is.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum MembershipState {
    /// Joining: at first, and again after the last session was lost (on a
    /// [`SessionManager`](crate::SessionManager)).
    Joining,
    /// A member, as the session `session_id`, with the membership's `order_id`.
    Joined {
        /// The session that is the member.
        session_id: u64,
        /// The membership's `order_id` (see [`Member::order_id`]).
        order_id: u64,
    },
    /// No longer a member, and not joining again: left, or the error that ended it (the
    /// session of a [`Session`](crate::Session) scope was lost; the manager stopped, with
    /// [`ErrorKind::SessionClosed`] after a shutdown).
    Ended(Option<Error>),
}

/// Being a member of a [`Group`], from [`Group::join`]: the process stays a member for as
/// long as this handle lives. Dropping it leaves the group.
///
/// A wait in the task its source keeps for its recipes (not a task of its own) keeps the
/// membership: on a [`SessionManager`](crate::SessionManager) it joins again in the next
/// session after a loss (the [state](Membership::state) goes
/// [`Joining`](MembershipState::Joining), then [`Joined`](MembershipState::Joined) with the
/// new session); on a [`Session`](crate::Session) the membership ends with the session. If
/// the runtime that task runs on shuts down, the membership ends with
/// [`ErrorKind::SessionClosed`] and its lease is dropped.
///
/// # Examples
///
/// ```
/// # use ydb_coordination::emulator::Emulator;
/// # use ydb_coordination::{Client, recipes::MembershipState, SessionOptions};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let emulator = Emulator::builder().node("/local/app").start().await?;
/// # let client = Client::connect(&emulator.connection_string()).await?;
/// let manager = client.session_manager("/local/app", SessionOptions::new());
/// let membership = manager.group("workers").join(b"10.0.0.7:8080").await?;
/// let session_id = membership.joined().await?;
/// assert!(matches!(membership.state(), MembershipState::Joined { .. }));
/// let mut changes = membership.state_changes();
/// # let _ = (session_id, &mut changes);
/// // e.g. stop serving while `changes` says `Joining` (the session was replaced)
/// membership.leave().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
#[must_use = "dropping the membership leaves the group"]
pub struct Membership {
    state: watch::Receiver<MembershipState>,
    /// Asks the task to leave and answer; dropped with the handle (the task then drops the
    /// lease, which releases it).
    leave: Option<oneshot::Sender<oneshot::Sender<Result<bool>>>>,
}

/// The sending side of a membership's state, as the wait that keeps the membership holds
/// it: dropped before the wait said how the membership ended (the runtime of the task it
/// ran in shut down, even before it first ran), it ends the state with
/// [`ErrorKind::SessionClosed`], so that a membership nothing keeps any more never reads as
/// joined.
pub(crate) struct StateTx(watch::Sender<MembershipState>);

impl StateTx {
    /// A membership's state, starting at `state`, and its receiver.
    pub(crate) fn channel(state: MembershipState) -> (Self, watch::Receiver<MembershipState>) {
        let (tx, rx) = watch::channel(state);
        (Self(tx), rx)
    }
}

impl std::ops::Deref for StateTx {
    type Target = watch::Sender<MembershipState>;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl Drop for StateTx {
    fn drop(&mut self) {
        self.0.send_if_modified(|state| {
            if matches!(state, MembershipState::Ended(_)) {
                return false;
            }
            *state = MembershipState::Ended(Some(Error::new(
                ErrorKind::SessionClosed,
                "the runtime that kept the group membership shut down; join the group again",
            )));
            true
        });
    }
}

/// Answers a leave request, if there was one (not just a dropped handle).
fn answer(
    asked: std::result::Result<oneshot::Sender<Result<bool>>, oneshot::error::RecvError>,
    released: Result<bool>,
) {
    if let Ok(reply) = asked {
        let _ = reply.send(released);
    }
}

impl Membership {
    /// The handle of a membership kept by a wait that says its `state` and answers `leave`
    /// (a lock space's).
    pub(crate) fn from_wait(
        state: watch::Receiver<MembershipState>,
        leave: oneshot::Sender<oneshot::Sender<Result<bool>>>,
    ) -> Self {
        Self {
            state,
            leave: Some(leave),
        }
    }

    /// Keeps the membership `held` in `waits` (its source's keeper).
    fn start(held: Held<Lease>, waits: &Keeper<Kept>) -> Self {
        let (state_tx, state) = StateTx::channel(MembershipState::Joining);
        let (leave, asked) = oneshot::channel();
        waits.keep(Box::pin(Self::keep(held, state_tx, asked)));
        Self {
            state,
            leave: Some(leave),
        }
    }

    /// The wait: takes each membership from `held` and waits for it to end, until asked to
    /// leave (or the handle is dropped, which drops the lease and so releases it).
    async fn keep(
        mut held: Held<Lease>,
        state: StateTx,
        mut asked: oneshot::Receiver<oneshot::Sender<Result<bool>>>,
    ) {
        let ended = loop {
            let member = tokio::select! {
                biased;
                asked = &mut asked => {
                    answer(asked, Ok(false));
                    break None;
                }
                next = held.next() => match next {
                    Some(Ok(member)) => member,
                    Some(Err(e)) => break Some(e),
                    None => break None,
                },
            };
            state.send_replace(MembershipState::Joined {
                session_id: member.session_id(),
                order_id: member.fencing_token().order,
            });
            let lost = member.token();
            tokio::select! {
                biased;
                asked = &mut asked => {
                    // Asked to leave: release and answer. The handle was dropped: dropping
                    // the lease releases it.
                    let released = member.release().await;
                    answer(asked, released);
                    break None;
                }
                () = lost.cancelled() => {
                    drop(member);
                    state.send_replace(MembershipState::Joining);
                }
            }
        };
        state.send_replace(MembershipState::Ended(ended));
    }

    /// Where the membership is now.
    pub fn state(&self) -> MembershipState {
        self.state.borrow().clone()
    }

    /// A receiver of the membership's state changes.
    pub fn state_changes(&self) -> watch::Receiver<MembershipState> {
        self.state.clone()
    }

    /// The error that ended the membership for good (as [`MembershipState::Ended`]), `None`
    /// while it is a member or joining, and after a leave.
    ///
    /// # Examples
    ///
    /// ```
    /// # use ydb_coordination::emulator::Emulator;
    /// # use ydb_coordination::{Client, SessionOptions};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let emulator = Emulator::builder().node("/local/app").start().await?;
    /// # let client = Client::connect(&emulator.connection_string()).await?;
    /// let manager = client.session_manager("/local/app", SessionOptions::new());
    /// let me = manager.group("workers").join(b"host-a").await?;
    /// assert!(me.error().is_none());
    /// # Ok(())
    /// # }
    /// ```
    pub fn error(&self) -> Option<Error> {
        match &*self.state.borrow() {
            MembershipState::Ended(e) => e.clone(),
            _ => None,
        }
    }

    /// Waits until the membership ends by itself, and returns why.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn ended(&self) -> Error {
        let mut state = self.state.clone();
        let ended = state
            .wait_for(|s| matches!(s, MembershipState::Ended(_)))
            .await
            .map(|s| s.clone());
        match ended {
            Ok(MembershipState::Ended(Some(e))) => e,
            _ => left(),
        }
    }

    /// Waits until the process is a member, and returns its session id.
    ///
    /// # Errors
    ///
    /// The membership ended and will not join again: the error that ended it, or
    /// [`ErrorKind::Cancelled`] if it was left.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn joined(&self) -> Result<u64> {
        let mut rx = self.state.clone();
        let state = rx
            .wait_for(|s| !matches!(s, MembershipState::Joining))
            .await
            .map(|s| s.clone())
            .unwrap_or(MembershipState::Ended(None));
        match state {
            MembershipState::Joined { session_id, .. } => Ok(session_id),
            MembershipState::Ended(Some(e)) => Err(e),
            _ => Err(left()),
        }
    }

    /// Leaves the group and waits for the server's answer (`false`: the membership was
    /// already lost, and the process was not a member at that moment).
    ///
    /// # Errors
    ///
    /// The session ended first (the server then removes the member itself).
    ///
    /// # Cancel safety
    ///
    /// The task is asked to leave at once; dropping the future only skips the wait.
    pub async fn leave(mut self) -> Result<bool> {
        let (reply, answer) = oneshot::channel();
        let asked = self.leave.take().map(|leave| leave.send(reply));
        if !matches!(asked, Some(Ok(()))) {
            return Ok(false);
        }
        answer.await.unwrap_or(Ok(false))
    }
}

/// The error of a membership that ended without one of its own: it was left.
fn left() -> Error {
    Error::new(
        ErrorKind::Cancelled,
        "the membership has ended; join the group again",
    )
}

impl Group {
    pub(crate) fn new(scope: impl Into<Scope>, name: &str) -> Self {
        Self {
            scope: scope.into(),
            name: name.to_string(),
        }
    }

    /// The group's name (its semaphore's).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// One membership with `data` as a plain lease, for a lock space's directory, which
    /// keeps its membership itself: its data changes in place, and its token says when
    /// the membership may be lost. A membership must end when the group's semaphore is
    /// force-deleted under it.
    pub(crate) fn member_lease(&self, data: &[u8]) -> Acquiring<Lease> {
        match &self.scope {
            Scope::Node(source) => member_on(source, &self.name, data),
            Scope::Space(_) => Acquiring::failed(Error::new(
                ErrorKind::Internal,
                "a lock space's group was asked for one lease; it has one membership per place",
            )),
        }
    }

    /// Joins the group with `data` (what the others see in [`Member::data`], up to
    /// [`MAX_DATA_LEN`](crate::config::MAX_DATA_LEN) bytes) and returns once this process is a
    /// member. It stays one for as long as the returned [`Membership`] lives: on a
    /// [`SessionManager`](crate::SessionManager) it joins again in the next session after a loss, by itself.
    ///
    /// Nobody waits to join: the group has no size limit, so [`Acquiring::queued`] answers
    /// `false`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`] for data or a name over the limit (nothing is sent);
    /// [`ErrorKind::PreconditionFailed`]
    /// when a semaphore of that name exists and is not a group (another limit, or
    /// ephemeral); session errors (on a [`SessionManager`](crate::SessionManager): only once it stopped).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes withdraws the request: the process does not
    /// join.
    pub fn join(&self, data: &[u8]) -> Acquiring<Membership> {
        let source = match &self.scope {
            Scope::Node(source) => source.clone(),
            Scope::Space(space) => return crate::space::join_group(space, &self.name, data),
        };
        let name = self.name.clone();
        let data = data.to_vec();
        Acquiring::steps(move |_, _| {
            Box::pin(async move {
                let what = format!("group {name:?}");
                let joins = source.clone();
                let held = Held::new(
                    what,
                    Arc::new(move || Box::pin(member_on(&joins, &name, &data))),
                    |lease: &Lease| Some(lease.session_id()),
                );
                let membership = Membership::start(held, source.waits());
                membership.joined().await?;
                Ok(membership)
            })
        })
    }

    /// The members now, in the order they joined (each with its data; see [`Member`]).
    /// Empty when nobody is a member.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`] for a name over
    /// [`MAX_NAME_LEN`](crate::config::MAX_NAME_LEN) bytes (nothing is sent); session errors (on a
    /// [`SessionManager`](crate::SessionManager) the read is made again in the next session
    /// instead, until the manager stops).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn members(&self) -> Result<Vec<Member>> {
        match &self.scope {
            Scope::Node(source) => members_on(source, &self.name).await,
            Scope::Space(space) => crate::space::members(space, &self.name).await,
        }
    }

    /// Follows the member set: the stream yields the members now, then the whole set again
    /// each time it changes (someone joined, left, or was removed with its session).
    ///
    /// # Latest-value semantics
    ///
    /// - Each item is the whole set as of some moment, in the order the session saw them.
    /// - A reader that falls behind skips intermediate sets and reads the newest one: after
    ///   any burst of changes, the next item is the set as the session last saw it. The last
    ///   set is never skipped.
    /// - Two items in a row differ.
    /// - Across a reattach of the session the watch is re-armed by itself; changes made
    ///   while the stream was down show up in the next item.
    /// - On a [`SessionManager`](crate::SessionManager) the stream carries on across a session loss without an
    ///   error item: it watches again in the next session and yields the set from there if
    ///   it differs from the last item ([`Member::is_me`] then refers to the new session).
    ///   On a [`Session`](crate::Session) it ends with the session's error, on a stopped
    ///   manager with the manager's ([`ErrorKind::SessionClosed`] after a shutdown).
    /// - In a [`LockSpace`](crate::LockSpace) it follows the place where every member is
    ///   through reshards, and also ends with an error reading the directory in a
    ///   transition.
    /// - As every stream of the crate, an error item is the last one.
    ///
    /// So don't count items: wait for the set you care about.
    ///
    /// # Examples
    ///
    /// ```
    /// # use ydb_coordination::emulator::Emulator;
    /// # use ydb_coordination::{Client, SessionOptions};
    /// use futures::StreamExt;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let emulator = Emulator::builder().node("/local/app").start().await?;
    /// # let client = Client::connect(&emulator.connection_string()).await?;
    /// let a = client.session_manager("/local/app", SessionOptions::new());
    /// let b = client.session_manager("/local/app", SessionOptions::new());
    /// let mut sets = a.group("workers").watch();
    /// assert!(sets.next().await.expect("the stream goes on")?.is_empty());
    ///
    /// let member = b.group("workers").join(b"host-b").await?;
    /// while let Some(set) = sets.next().await {
    ///     if set?.iter().any(|m| m.data == b"host-b") {
    ///         break;
    ///     }
    /// }
    /// # drop(member);
    /// # Ok(())
    /// # }
    /// ```
    pub fn watch(&self) -> MemberStream {
        let source = match &self.scope {
            Scope::Node(source) => source,
            Scope::Space(space) => {
                return Following::new(crate::space::watch_group(space, &self.name));
            }
        };
        follow(
            source,
            &self.name,
            GROUP_LIMIT,
            WatchOptions::owners_changes(),
            members_of,
        )
    }
}

/// One attempt at membership of the group `name` on the node of `source`, with `data`. A
/// membership must end when the group's semaphore is force-deleted under it.
fn member_on(source: &Source, name: &str, data: &[u8]) -> Acquiring<Lease> {
    let options = AcquireOptions::new().count(1).data(data.to_vec());
    let prepare = Prepare::Semaphore { limit: GROUP_LIMIT };
    acquiring(source, name, options, prepare, |r| r.inspect(Lease::guard))
}

/// The members of the group `name` on the node of `source`.
pub(crate) async fn members_on(source: &Source, name: &str) -> Result<Vec<Member>> {
    let options = DescribeOptions::new().owners(true);
    read(source, name, options, members_of, Vec::new()).await
}

/// The stream of [`Group::watch`]: the whole member set, with latest-value semantics.
pub type MemberStream = Following<Vec<Member>>;

super::made_from!(
    group,
    Group,
    "group",
    "whose memberships join again after a session loss"
);

#[cfg(test)]
mod tests {
    use super::members_of;
    use crate::session::{SemaphoreDescription, SemaphoreSession};

    fn owner(session_id: u64, order_id: u64, data: &[u8]) -> SemaphoreSession {
        SemaphoreSession {
            order_id,
            session_id,
            count: 1,
            data: data.to_vec(),
            ..SemaphoreSession::default()
        }
    }

    #[test]
    fn members_are_the_owners_in_join_order_and_the_asker_is_marked() {
        let d = SemaphoreDescription {
            owners: vec![owner(7, 3, b"a"), owner(9, 5, b"b")],
            ..SemaphoreDescription::default()
        };
        let members = members_of(&d, 9);
        let seen: Vec<(u64, u64, &[u8], bool)> = members
            .iter()
            .map(|m| (m.session_id, m.order_id, m.data.as_slice(), m.is_me))
            .collect();
        assert_eq!(seen, [(7, 3, &b"a"[..], false), (9, 5, &b"b"[..], true)]);
        assert!(members_of(&SemaphoreDescription::default(), 9).is_empty());
    }
}
