//! What fleets build on locks, in a [`LockSpace`]: an election and a group whose names are
//! placed like every other name, observed where their holders meet.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;
use futures::stream::BoxStream;
use tokio::sync::{oneshot, watch};

use super::layout::Layout;
use super::lock::Spec;
use super::{LockSpace, Shared, Ticket};
use crate::config::{AcquireOptions, MAX_DATA_LEN};
use crate::error::{Error, ErrorKind, Result};
use crate::recipes::{Candidate, Leader, Member, Membership, Prepare, Source};
use crate::session::Acquiring;
use crate::session::FencingToken;

/// The place of `name` where every holder of it meets now, with the epoch its tokens
/// carry: in a stable layout the only one; in a transition the old place while the
/// transition is what is published, the new one once the next layout is (read from the
/// directory).
async fn observed(shared: &Shared, name: &str) -> Result<(String, u64)> {
    let layout: Arc<Layout> = shared.layout.borrow().clone();
    let mut parts = layout.parts(name);
    let published = if layout.is_transition() {
        let bound = tokio::time::Instant::now() + shared.directory_wait();
        shared
            .published_layout(bound)
            .await?
            .map(|published| super::take::published_epoch(&layout, &published))
    } else {
        None
    };
    let (new, epoch) = layout.token_place(published.flatten());
    let part = if new {
        parts.pop()
    } else {
        parts.into_iter().next()
    };
    let node = part.map(|p| p.node).unwrap_or_default();
    Ok((node, epoch))
}

/// What a space election's leader takes in each place: the one unit of a persistent
/// semaphore of limit 1, as a node's election does, guarded against a forced delete; the
/// leader writes its fencing token with its value before it is handed its leadership.
pub(crate) fn election_spec(data: &[u8]) -> Spec {
    Spec {
        options: AcquireOptions::new().count(1).data(data.to_vec()),
        prepare: Prepare::Semaphore { limit: 1 },
        guard: true,
        lock_delay: None,
        leader: true,
        mutex: false,
    }
}

/// The leader of the election `name` in `space`, read where every leader holds it (see
/// [`observed`]).
pub(crate) async fn leader(space: &LockSpace, name: &str) -> Result<Option<Leader>> {
    let shared = space.shared();
    let (node, _) = observed(shared, name).await?;
    let source = Source::new(shared.manager(&node)?.clone());
    let leader = crate::recipes::leader_on(&source, name).await?;
    Ok(leader.and_then(|l| space_leader(l, node)))
}

/// The leader, then the waiters in the order they will lead, of the election `name` in
/// `space`, read where every candidate waits.
pub(crate) async fn candidates(space: &LockSpace, name: &str) -> Result<Vec<Candidate>> {
    let shared = space.shared();
    let (node, epoch) = observed(shared, name).await?;
    let source = Source::new(shared.manager(&node)?.clone());
    let candidates = crate::recipes::candidates_on(&source, name).await?;
    Ok(candidates
        .into_iter()
        .map(|c| space_candidate(c, epoch))
        .collect())
}

/// The leader of the election `name` in `space` as it changes, following its place
/// through the layouts (see [`follow_place`]).
pub(crate) fn observe_leader(space: &LockSpace, name: &str) -> SpaceFollowing<Option<Leader>> {
    let name = name.to_string();
    follow_place(
        space.shared().clone(),
        name.clone(),
        move |shared, node, _| {
            let leaders = shared.manager(node)?.election(&name).observe();
            let node = node.to_string();
            Ok(leaders
                .map(move |l| l.map(|l| l.and_then(|l| space_leader(l, node.clone()))))
                .boxed())
        },
    )
}

/// What a space election's leader writes as its owner data in every place: its fencing
/// token, then its value. The token is the leader's own (the one its guard carries), not
/// one an observer could work out from the place it reads: a leader elected in a
/// transition while it was what is published has the old place's token, and an observer
/// that reads the new place once the next layout is published would see another order id.
const LEADER_TAG: &str = "ydb-coordination/space-leader/1";

/// The most bytes [`leader_value`] adds to a leader's value.
const LEADER_FRAME: usize = LEADER_TAG.len() + 2 * 20 + 3;

/// A leader's owner data: [`LEADER_TAG`], its token's epoch and order, a line break, then
/// its value.
pub(super) fn leader_value(token: FencingToken, value: &[u8]) -> Vec<u8> {
    let mut data = format!("{LEADER_TAG} {} {}\n", token.epoch, token.order).into_bytes();
    data.extend_from_slice(value);
    data
}

/// Refuses a leader's value that would not fit in a semaphore's data with the token.
pub(crate) fn check_leader_value(value: &[u8]) -> Result<()> {
    if value.len() > MAX_DATA_LEN - LEADER_FRAME {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!(
                "a space leader's value is at most {} bytes (its fencing token goes with it), not {}",
                MAX_DATA_LEN - LEADER_FRAME,
                value.len()
            ),
        ));
    }
    Ok(())
}

/// The token and value a leader wrote ([`leader_value`]); `None` for data that is not a
/// leader's (one not written yet: the leader is not handed its guard before it is).
pub(super) fn read_leader_value(data: &[u8]) -> Option<(FencingToken, &[u8])> {
    let rest = data
        .strip_prefix(LEADER_TAG.as_bytes())?
        .strip_prefix(b" ")?;
    let end = rest.iter().position(|&b| b == b'\n')?;
    let head = std::str::from_utf8(&rest[..end]).ok()?;
    let (epoch, order) = head.split_once(' ')?;
    let token = FencingToken::new(epoch.parse().ok()?, order.parse().ok()?);
    Some((token, &rest[end + 1..]))
}

/// The space's view of a node's leader, read on `node`: its own token and value, or `None`
/// while it has not written them (it is not the leader yet).
fn space_leader(mut l: Leader, node: String) -> Option<Leader> {
    let (fencing_token, data) = read_leader_value(&l.data)?;
    l.data = data.to_vec();
    l.fencing_token = fencing_token;
    l.node = Some(node);
    Some(l)
}

/// A node's candidate as the space shows it: the leader with the token and value it wrote
/// ([`leader_value`]); a waiter (or a leader that has not written them yet) with the
/// token it would lead with in the layout observed, `epoch`.
fn space_candidate(mut c: Candidate, epoch: u64) -> Candidate {
    match read_leader_value(&c.data).filter(|_| c.is_leader) {
        Some((token, value)) => {
            c.data = value.to_vec();
            c.fencing_token = token;
        }
        None => c.fencing_token = FencingToken::new(epoch, c.fencing_token.order),
    }
    c
}

/// A stream that follows one name's place in a [`LockSpace`] through its layouts
/// (an election's `observe`, [`SpaceGroup::watch`]): the newest state first, then each
/// change; two items in a row never repeat the same state; it ends with the error that
/// stopped it.
pub type SpaceFollowing<T> = BoxStream<'static, Result<T>>;

/// What [`follow_place`] keeps between items.
struct Place<T, F> {
    shared: Arc<Shared>,
    name: String,
    open: F,
    layouts: watch::Receiver<Arc<Layout>>,
    stream: Option<BoxStream<'static, Result<T>>>,
    last: Option<T>,
    ended: bool,
}

/// Follows what `open` streams from `name`'s observed place, opening it again on the new
/// place each time the space moves to a new layout.
fn follow_place<T, F>(shared: Arc<Shared>, name: String, open: F) -> SpaceFollowing<T>
where
    T: Clone + PartialEq + Send + 'static,
    F: Fn(&Shared, &str, u64) -> Result<BoxStream<'static, Result<T>>> + Send + 'static,
{
    let layouts = shared.layout.subscribe();
    let place = Place {
        shared,
        name,
        open,
        layouts,
        stream: None,
        last: None,
        ended: false,
    };
    futures::stream::unfold(place, |mut p| async move {
        if p.ended {
            return None;
        }
        loop {
            if p.stream.is_none() {
                p.layouts.borrow_and_update();
                let opened = match observed(&p.shared, &p.name).await {
                    Ok((node, epoch)) => (p.open)(&p.shared, &node, epoch),
                    Err(e) => Err(e),
                };
                match opened {
                    Ok(stream) => p.stream = Some(stream),
                    Err(e) => {
                        p.ended = true;
                        return Some((Err(e), p));
                    }
                }
            }
            let stream = p.stream.as_mut()?;
            tokio::select! {
                item = stream.next() => match item {
                    Some(Ok(v)) if p.last.as_ref() == Some(&v) => {}
                    Some(Ok(v)) => {
                        p.last = Some(v.clone());
                        return Some((Ok(v), p));
                    }
                    Some(Err(e)) => {
                        p.ended = true;
                        return Some((Err(e), p));
                    }
                    None => return None,
                },
                changed = p.layouts.changed() => {
                    if changed.is_err() {
                        return None;
                    }
                    // The space runs a new layout: the name's place may have moved.
                    p.stream = None;
                }
            }
        }
    })
    .boxed()
}

/// Group membership in a [`LockSpace`], from [`LockSpace::group`]: on each node the same
/// group as [`SessionManager::group`](crate::SessionManager::group). A member follows the
/// layout: in a transition it is a member in both places, and it leaves the old place once
/// the space runs the new layout, so the members are always all in the place
/// [`SpaceGroup::members`] reads.
///
/// # Examples
///
/// ```
/// # use ydb_coordination::emulator::Emulator;
/// # use ydb_coordination::space::{Layout, LockSpace};
/// # use ydb_coordination::Client;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let emulator = Emulator::builder().node("/local/n1").node("/local/n2").start().await?;
/// # let client = Client::connect(&emulator.connection_string()).await?;
/// # let space = LockSpace::builder().node("n1", &client, "/local/n1").node("n2", &client, "/local/n2")
/// #     .layout(Layout::new(1, ["n1", "n2"])?).open().await?;
/// let workers = space.group("workers");
/// let me = workers.join(b"10.0.0.7:8080").await?;
/// assert_eq!(workers.members().await?.len(), 1);
/// me.leave().await?;
/// assert!(workers.members().await?.is_empty());
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct SpaceGroup {
    space: LockSpace,
    name: String,
}

/// Being a member of a [`SpaceGroup`], from [`SpaceGroup::join`]; dropping it leaves.
#[derive(Debug)]
#[must_use = "dropping the membership leaves the group"]
pub struct SpaceMembership {
    leave: Option<oneshot::Sender<oneshot::Sender<Result<bool>>>>,
    ended: watch::Receiver<Option<Error>>,
}

impl SpaceMembership {
    /// The error that ended the membership: it could not follow a new layout (a node the
    /// space was not given), or a place's membership ended for good (its node's manager
    /// stopped, [`ErrorKind::SessionClosed`] after [`LockSpace::shutdown`]); `None` while
    /// it is a member.
    ///
    /// ```
    /// # use ydb_coordination::emulator::Emulator;
    /// # use ydb_coordination::space::{Layout, LockSpace};
    /// # use ydb_coordination::Client;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let emulator = Emulator::builder().node("/local/n1").start().await?;
    /// # let client = Client::connect(&emulator.connection_string()).await?;
    /// # let space = LockSpace::builder().node("n1", &client, "/local/n1")
    /// #     .layout(Layout::new(1, ["n1"])?).open().await?;
    /// let me = space.group("workers").join(b"host-a").await?;
    /// assert!(me.error().is_none());
    /// # me.leave().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn error(&self) -> Option<Error> {
        self.ended.borrow().clone()
    }

    /// Waits until the membership ends by itself, and returns why.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn ended(&self) -> Error {
        let mut ended = self.ended.clone();
        match ended.wait_for(Option::is_some).await {
            Ok(e) => e.clone().unwrap_or_else(gone),
            Err(_) => gone(),
        }
    }

    /// Leaves the group in every place and waits until the servers answered (`false`: a
    /// place's membership was already lost), as the node's
    /// [`Membership::leave`](crate::Membership::leave). A move to a new layout in progress
    /// (which may wait for a node that is down) is dropped instead: the places it joined
    /// leave by themselves, without that wait.
    ///
    /// # Errors
    ///
    /// A place's session ended first (its server then removes the member itself).
    ///
    /// # Cancel safety
    ///
    /// The task is asked to leave at once; dropping the future only skips the wait.
    pub async fn leave(mut self) -> Result<bool> {
        let Some(leave) = self.leave.take() else {
            return Ok(false);
        };
        let (tx, rx) = oneshot::channel();
        if leave.send(tx).is_err() {
            return Ok(false);
        }
        rx.await.unwrap_or(Ok(false))
    }
}

/// The error of a membership whose task is gone without saying why.
fn gone() -> Error {
    Error::new(
        ErrorKind::SessionClosed,
        "the group membership's task ended; join again",
    )
}

impl SpaceGroup {
    /// Joins the group with `data` in the name's places now, and returns once a member
    /// there; a small task then moves the membership with the layout.
    ///
    /// # Errors
    ///
    /// As [`Group::join`](crate::Group::join) on a node; `PreconditionFailed` for a layout
    /// naming a node the space was not given.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes withdraws: the places joined so far are left
    /// (their memberships dropped), and the process is not a member.
    pub fn join(&self, data: &[u8]) -> Acquiring<SpaceMembership> {
        let shared = self.space.shared().clone();
        let name = self.name.clone();
        let data = data.to_vec();
        Acquiring::steps(move |_, _| {
            Box::pin(async move {
                let (joined, ticket) = join_places(&shared, &name, &data, BTreeMap::new()).await?;
                let (leave, asked) = oneshot::channel();
                let (ended_tx, ended) = watch::channel(None);
                tokio::spawn(keep(shared, name, data, joined, ticket, asked, ended_tx));
                Ok(SpaceMembership {
                    leave: Some(leave),
                    ended,
                })
            })
        })
    }

    /// The members now, read where every member is (see [`SpaceGroup`]).
    ///
    /// # Errors
    ///
    /// A node's manager stopped; in a transition, the directory's errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn members(&self) -> Result<Vec<Member>> {
        let shared = self.space.shared();
        let (node, _) = observed(shared, &self.name).await?;
        shared.manager(&node)?.group(&self.name).members().await
    }

    /// The member set as it changes, as the node's [`Group::watch`](crate::Group::watch):
    /// the newest set first, then each change, following the place where every member is
    /// when the space moves to a new layout (see [`SpaceFollowing`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # use ydb_coordination::emulator::Emulator;
    /// # use ydb_coordination::space::{Layout, LockSpace};
    /// # use ydb_coordination::Client;
    /// use futures::StreamExt;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let emulator = Emulator::builder().node("/local/n1").start().await?;
    /// # let client = Client::connect(&emulator.connection_string()).await?;
    /// # let space = LockSpace::builder().node("n1", &client, "/local/n1")
    /// #     .layout(Layout::new(1, ["n1"])?).open().await?;
    /// let workers = space.group("workers");
    /// let mut sets = workers.watch();
    /// let me = workers.join(b"10.0.0.7:8080").await?;
    /// while let Some(set) = sets.next().await {
    ///     if set?.iter().any(|m| m.data == b"10.0.0.7:8080") {
    ///         break;
    ///     }
    /// }
    /// # me.leave().await?;
    /// # Ok(())
    /// # }
    /// ```
    #[must_use = "a stream does nothing unless polled"]
    pub fn watch(&self) -> SpaceFollowing<Vec<Member>> {
        let name = self.name.clone();
        follow_place(
            self.space.shared().clone(),
            name.clone(),
            move |shared, node, _| Ok(shared.manager(node)?.group(&name).watch().boxed()),
        )
    }
}

/// Joins `name` in its places in the layout run now, keeping the memberships of `joined`
/// that are still places and leaving the others once the new ones are made.
async fn join_places(
    shared: &Arc<Shared>,
    name: &str,
    data: &[u8],
    mut joined: BTreeMap<String, Membership>,
) -> Result<(BTreeMap<String, Membership>, Ticket)> {
    let (layout, ticket) = shared.claim_now();
    let places: Vec<String> = layout.parts(name).into_iter().map(|p| p.node).collect();
    for node in &places {
        if !joined.contains_key(node) {
            let membership = shared.manager(node)?.group(name).join(data).await?;
            joined.insert(node.clone(), membership);
        }
    }
    let gone: Vec<String> = joined
        .keys()
        .filter(|n| !places.contains(n))
        .cloned()
        .collect();
    for node in gone {
        if let Some(m) = joined.remove(&node) {
            let _ = m.leave().await;
        }
    }
    Ok((joined, ticket))
}

/// The task of a membership: moves it with each new layout until asked to leave (or the
/// handle is dropped), then leaves every place.
async fn keep(
    shared: Arc<Shared>,
    name: String,
    data: Vec<u8>,
    mut joined: BTreeMap<String, Membership>,
    mut ticket: Ticket,
    mut asked: oneshot::Receiver<oneshot::Sender<Result<bool>>>,
    ended: watch::Sender<Option<Error>>,
) {
    let mut layouts = shared.layout.subscribe();
    let mut failed = None;
    let reply = loop {
        tokio::select! {
            biased;
            asked = &mut asked => break asked.ok(),
            e = first_ended(&joined) => {
                tracing::warn!(group = name, error = %e, "group membership ended");
                failed = Some(e);
                break None;
            }
            changed = layouts.changed() => {
                if changed.is_err() {
                    break None;
                }
            }
        }
        // A move can wait long (a new place on a node that is down): a leave does not wait
        // for it. Dropped, the move's memberships leave by themselves.
        let moving = join_places(&shared, &name, &data, std::mem::take(&mut joined));
        let moved = tokio::select! {
            biased;
            asked = &mut asked => break asked.ok(),
            moved = moving => moved,
        };
        match moved {
            Ok((now, next)) => {
                joined = now;
                ticket = next;
            }
            Err(e) => {
                tracing::warn!(group = name, error = %e, "group membership could not follow the layout");
                failed = Some(e);
                break None;
            }
        }
    };
    // Said once every place is left, so a caller that joins again at once is not behind
    // its own old membership.
    let mut left = Ok(true);
    for (_, m) in joined {
        match m.leave().await {
            Ok(held) => left = left.map(|all| all && held),
            Err(e) => left = Err(e),
        }
    }
    if let Some(e) = failed {
        ended.send_replace(Some(e));
    }
    drop(ticket);
    if let Some(reply) = reply {
        let _ = reply.send(left);
    }
}

/// Waits until one of the memberships of `joined` ends for good (its manager stopped, or
/// an error no new session changes), and returns why.
async fn first_ended(joined: &BTreeMap<String, Membership>) -> Error {
    if joined.is_empty() {
        return std::future::pending().await;
    }
    let waits = joined.values().map(|m| Box::pin(m.ended()));
    futures::future::select_all(waits).await.0
}

impl LockSpace {
    /// The [`SpaceGroup`] `name`.
    ///
    /// ```
    /// # use ydb_coordination::space::LockSpace;
    /// # #[allow(dead_code)] fn f(space: &LockSpace) { let _ =
    /// space.group("workers");
    /// # }
    /// ```
    pub fn group(&self, name: &str) -> SpaceGroup {
        SpaceGroup {
            space: self.clone(),
            name: name.to_string(),
        }
    }
}
