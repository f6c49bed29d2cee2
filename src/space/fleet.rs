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
use crate::recipes::{
    Candidate, Leader, Member, Membership, MembershipState, Prepare, Source, StateTx,
};
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
/// (an election's `observe`, a group's `watch`): the newest state first, then each
/// change; two items in a row never repeat the same state; it ends with the error that
/// stopped it.
pub(crate) type SpaceFollowing<T> = BoxStream<'static, Result<T>>;

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

/// Joins the group `name` of `space` with `data` in the name's places now, and returns
/// once a member there; a wait in the space's keeper then moves the membership with the
/// layout (see [`LockSpace::group`]).
pub(crate) fn join_group(space: &LockSpace, name: &str, data: &[u8]) -> Acquiring<Membership> {
    let shared = space.shared().clone();
    let name = name.to_string();
    let data = data.to_vec();
    Acquiring::steps(move |_, _| {
        Box::pin(async move {
            // Subscribed first: a layout published while the places are joined is followed.
            let layouts = shared.layout.subscribe();
            let (joined, ticket) = join_places(&shared, &name, &data, BTreeMap::new()).await?;
            // Watched before the state is read: a place that changes in between is seen.
            let watching = watch_states(&joined);
            let places = Places {
                joined,
                ticket,
                watching,
            };
            let (leave, asked) = oneshot::channel();
            let (state_tx, state) = StateTx::channel(space_state(&shared, &name, &places.joined));
            let keeping = keep(shared.clone(), name, data, places, layouts, asked, state_tx);
            shared.waits.keep(Box::pin(keeping));
            Ok(Membership::from_wait(state, leave))
        })
    })
}

/// The members of the group `name` of `space` now, read where every member is.
pub(crate) async fn members(space: &LockSpace, name: &str) -> Result<Vec<Member>> {
    let shared = space.shared();
    let (node, _) = observed(shared, name).await?;
    let source = Source::new(shared.manager(&node)?.clone());
    crate::recipes::members_on(&source, name).await
}

/// The member set of the group `name` of `space` as it changes, following its place
/// through the layouts (see [`follow_place`]).
pub(crate) fn watch_group(space: &LockSpace, name: &str) -> SpaceFollowing<Vec<Member>> {
    let name = name.to_string();
    follow_place(
        space.shared().clone(),
        name.clone(),
        move |shared, node, _| Ok(shared.manager(node)?.group(&name).watch().boxed()),
    )
}

/// A space membership's state: that of its first place in the layout run now (the one
/// every member is in, outside a transition), `Joining` while it has none.
fn space_state(
    shared: &Shared,
    name: &str,
    joined: &BTreeMap<String, Membership>,
) -> MembershipState {
    let layout = shared.layout.borrow().clone();
    let first = layout.parts(name).into_iter().next().map(|p| p.node);
    first
        .and_then(|n| joined.get(&n))
        .map_or(MembershipState::Joining, Membership::state)
}

/// The places a space membership is a member in, the claim of the layout they were
/// joined in, and receivers of their states (each marked as seen).
struct Places {
    joined: BTreeMap<String, Membership>,
    ticket: Ticket,
    watching: Vec<watch::Receiver<MembershipState>>,
}

/// Tells the membership's holders its state `now`, unless it is the one they have.
fn tell(state: &watch::Sender<MembershipState>, now: MembershipState) {
    state.send_if_modified(|was| {
        let same = match (&*was, &now) {
            (MembershipState::Joining, MembershipState::Joining) => true,
            (
                MembershipState::Joined {
                    session_id: a,
                    order_id: x,
                },
                MembershipState::Joined {
                    session_id: b,
                    order_id: y,
                },
            ) => a == b && x == y,
            _ => false,
        };
        if !same {
            *was = now;
        }
        !same
    });
}

/// Waits until the state of a membership of `joined` changes (`None`: until forever).
async fn place_changed(watching: &mut [watch::Receiver<MembershipState>]) {
    if watching.is_empty() {
        return std::future::pending().await;
    }
    let changes = watching.iter_mut().map(|w| Box::pin(w.changed()));
    let _ = futures::future::select_all(changes).await;
}

/// Receivers of the states of `joined`, each marked as seen.
fn watch_states(joined: &BTreeMap<String, Membership>) -> Vec<watch::Receiver<MembershipState>> {
    joined
        .values()
        .map(|m| {
            let mut rx = m.state_changes();
            rx.borrow_and_update();
            rx
        })
        .collect()
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
    places: Places,
    mut layouts: watch::Receiver<Arc<Layout>>,
    mut asked: oneshot::Receiver<oneshot::Sender<Result<bool>>>,
    state: StateTx,
) {
    let Places {
        mut joined,
        mut ticket,
        mut watching,
    } = places;
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
            () = place_changed(&mut watching) => {
                // A place joined again in a new session (or is joining): say so.
                tell(&state, space_state(&shared, &name, &joined));
                continue;
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
                watching = watch_states(&joined);
                tell(&state, space_state(&shared, &name, &joined));
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
    state.send_replace(MembershipState::Ended(failed));
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
