//! A lock delay for an exclusive lock: after a holder lost the lock without releasing it,
//! the next holder gets its guard only once the delay has passed since its grant.
//!
//! The server keeps nothing of a session once it has ended, so whether the last tenure
//! ended cleanly is recorded in the semaphore's own data, where every holder can read and
//! write it: `held <order id>` from the grant on, `released <order id>` just before a clean
//! release. A new holder that finds a `held` marker of another tenure (or anything it cannot
//! read) knows the last tenure ended without a clean release, and waits.
//!
//! In a lock space a marker also names the epoch of the layout it was written in
//! (`held <order id> epoch <epoch>`), and one of an older layout than the one run is not
//! taken at its word (see [`Running`]).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::AfterGrant;
use crate::error::{Error, ErrorKind, Result};
use crate::session::Lease;

const HELD: &str = "held ";
const RELEASED: &str = "released ";
const EPOCH: &str = " epoch ";
/// After a `held` marker on a node: the holder waits the delay, its guard handed over at
/// this wall-clock time (Unix milliseconds). For the people who read the data (`ydb-coord
/// top`); no holder decides anything on it.
const UNTIL: &str = " until ";

/// What the semaphore's data says of the last tenure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Marker {
    /// Nothing: a semaphore nobody has held yet.
    Empty,
    /// Held by this order id, and not released cleanly (yet).
    Held(u64),
    /// Released cleanly by this order id.
    Released(u64),
    /// Something else: somebody else writes the data; treated as an unclean end.
    Unknown,
}

#[cfg(test)]
fn parse(data: &[u8]) -> Marker {
    parse_in(data).0
}

/// The marker, and the epoch of the layout it was written in (`None`: written on one node,
/// or nothing to read).
fn parse_in(data: &[u8]) -> (Marker, Option<u64>) {
    if data.is_empty() {
        return (Marker::Empty, None);
    }
    let Ok(text) = std::str::from_utf8(data) else {
        return (Marker::Unknown, None);
    };
    let (text, epoch) = match text.split_once(EPOCH) {
        Some((marker, epoch)) => match epoch.parse::<u64>() {
            Ok(epoch) => (marker, Some(epoch)),
            Err(_) => return (Marker::Unknown, None),
        },
        None => (text, None),
    };
    let order = |rest: &str| rest.parse::<u64>().ok();
    if let Some(id) = text.strip_prefix(HELD).and_then(held_order) {
        return (Marker::Held(id), epoch);
    }
    if let Some(id) = text.strip_prefix(RELEASED).and_then(order) {
        return (Marker::Released(id), epoch);
    }
    (Marker::Unknown, None)
}

/// The order id of a `held` marker (after its prefix), with or without the time its holder
/// waits until (` until <ms>`).
fn held_order(rest: &str) -> Option<u64> {
    let order = match rest.split_once(UNTIL) {
        Some((order, until)) => {
            until.parse::<u64>().ok()?;
            order
        }
        None => rest,
    };
    order.parse().ok()
}

/// When the holder with order id `owner` gets its guard after the lock delay it waits, if the
/// marker `data` says it waits one (Unix milliseconds), written on a node (see [`UNTIL`]).
pub(crate) fn delay_until(data: &[u8], owner: u64) -> Option<u64> {
    let text = std::str::from_utf8(data).ok()?;
    let (order, until) = text.strip_prefix(HELD)?.split_once(UNTIL)?;
    if order.parse::<u64>().ok()? != owner {
        return None;
    }
    until.parse().ok()
}

/// The `held` marker of a holder on a node that waits the delay, until `until` (Unix
/// milliseconds).
pub(crate) fn held_until(order: u64, until: u64) -> Vec<u8> {
    format!("{HELD}{order}{UNTIL}{until}").into_bytes()
}

/// `at` on the wall clock, in Unix milliseconds (for people: a monotonic instant has no
/// date).
fn wall_millis(at: Instant) -> u64 {
    let now = std::time::SystemTime::now();
    let wall = match at.checked_duration_since(Instant::now()) {
        Some(ahead) => now.checked_add(ahead),
        None => now.checked_sub(Instant::now().saturating_duration_since(at)),
    };
    wall.and_then(|w| w.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A marker: `what` by the tenure `order`, in the layout of `epoch` of a lock space.
fn marker(what: &str, order: u64, epoch: Option<u64>) -> Vec<u8> {
    match epoch {
        Some(epoch) => format!("{what}{order}{EPOCH}{epoch}"),
        None => format!("{what}{order}"),
    }
    .into_bytes()
}

/// Whether the holder with order id `own` must wait the delay after reading `data`: unless
/// the semaphore is new, the last tenure was released cleanly, or the marker is its own.
#[cfg(test)]
fn must_wait(data: &[u8], own: u64) -> bool {
    unclean(parse(data), own)
}

/// Whether `marker` tells of a tenure other than `own` that did not end cleanly.
fn unclean(marker: Marker, own: u64) -> bool {
    match marker {
        Marker::Empty | Marker::Released(_) => false,
        Marker::Held(id) => id != own,
        Marker::Unknown => true,
    }
}

/// What a place's marker asks of its new holder (order id `own`), who runs the layout of
/// `runs` in a lock space (`None` on one node).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Asks {
    /// The last tenure did not end cleanly: wait until the delay after the own grant.
    pub(crate) after_grant: bool,
    /// The marker is not of the layout run (none, or an older one): wait until the delay
    /// after the process began to run it ([`Running`]).
    pub(crate) after_start: bool,
}

/// What the marker `data` asks of the holder with order id `own` (see [`Asks`]).
pub(crate) fn asks(data: &[u8], own: u64, runs: Option<u64>) -> Asks {
    let (marker, written) = parse_in(data);
    Asks {
        after_grant: unclean(marker, own),
        after_start: runs.is_some_and(|epoch| written.is_none_or(|written| written < epoch)),
    }
}

/// The marker of a tenure from its grant on (in a lock space, with the `epoch` of the
/// lock's layout).
pub(crate) fn held(order: u64, epoch: Option<u64>) -> Vec<u8> {
    marker(HELD, order, epoch)
}

/// The marker of a clean release (in a lock space, with the `epoch` of the lock's layout).
pub(crate) fn released(order: u64, epoch: Option<u64>) -> Vec<u8> {
    marker(RELEASED, order, epoch)
}

/// The layout a lock space's lock is taken in, for its markers: the epoch they are written
/// with, and when the process began to run it.
///
/// A marker written in that layout (or a newer one) tells the last tenure of the name,
/// since every holder of those layouts takes this place and writes it. One of an older
/// layout, or none (a name new to its node), may not: the name may have been held on
/// another node since (moved away by a reshard and back, or held in the old layout of a
/// transition after the marker was written). Every such tenure belongs to a layout older
/// than the one run, so it had ended before that layout was published and the process
/// began to run it: the holder waits until `delay` after `since`, and only a marker of the
/// layout run is taken at its word.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Running {
    pub(crate) epoch: u64,
    pub(crate) since: Instant,
}

/// The step after a lock-delay mutex's grant: its one place settled (see [`settle`]); on
/// one node the marker tells the last tenure of the name, as nothing else could hold it.
pub(crate) fn after_grant(delay: Duration) -> AfterGrant {
    Arc::new(move |lease: Lease, deadline: Option<Instant>| {
        Box::pin(async move {
            settle(std::slice::from_ref(&lease), delay, None, deadline).await?;
            Ok(lease)
        })
    })
}

/// Settles the places of one lock-delay lock, all granted (one on a node, one or two in a
/// lock space, which passes the layout it `runs`): reads each place's marker, then, unless
/// the wait they ask for ends past the acquire's `deadline`, writes its own `held` one on
/// each and waits while any place asks for it: a place whose last tenure did not end
/// cleanly until `delay` after its own grant; in a lock space, a place whose marker is not
/// of the layout run until `delay` after the process began to run it ([`Running`]).
///
/// Ends with the loss of the lease whose token fires first, or with
/// [`ErrorKind::NotAcquired`] when the wait would end past `deadline`: the lock is not the
/// caller's in time, and nothing was written (the places keep the markers that asked for
/// the wait, so the next holder waits too).
pub(crate) async fn settle(
    places: &[Lease],
    delay: Duration,
    runs: Option<Running>,
    deadline: Option<Instant>,
) -> Result<()> {
    if places.is_empty() {
        return Ok(());
    }
    for lease in places {
        // The semaphore is persistent: a forced delete must end the tenure, as an election's.
        lease.guard();
    }
    let lost = futures::future::select_all(places.iter().map(|lease| {
        Box::pin(async move {
            lease.token().cancelled().await;
            lease.lost_error()
        })
    }));
    let epoch = runs.map(|r| r.epoch);
    let step = async {
        let mut hold = Hold::No;
        let mut markers = Vec::with_capacity(places.len());
        for lease in places {
            let own = lease.fencing_token().order;
            let data = lease.semaphore_data().await?;
            let asks = asks(&data, own, epoch);
            let after_grant = Hold::after(lease.granted_at(), delay);
            // On a node the marker says until when the holder waits, for the people who
            // look.
            markers.push(match (after_grant, epoch) {
                (Hold::Until(until), None) if asks.after_grant => {
                    held_until(own, wall_millis(until))
                }
                _ => held(own, epoch),
            });
            if asks.after_grant {
                hold = hold.max(after_grant);
            }
            if let Some(runs) = runs.filter(|_| asks.after_start) {
                hold = hold.max(Hold::after(runs.since, delay));
            }
        }
        if let Some(deadline) = deadline
            && hold > Hold::Until(deadline)
        {
            return Err(Error::new(
                ErrorKind::NotAcquired,
                "the lock's delay after its last holder's unclean end outlasts the acquire's timeout; the lock was given back",
            ));
        }
        // The markers are written before the guard is handed over: a holder lost from now
        // on leaves `held` behind for the next one to see.
        for (lease, marker) in places.iter().zip(&markers) {
            lease.set_semaphore_data(marker).await?;
        }
        match hold {
            Hold::No => {}
            Hold::Until(until) => tokio::time::sleep_until(until).await,
            Hold::Forever => std::future::pending().await,
        }
        Ok(())
    };
    tokio::select! {
        biased;
        (e, _, _) = lost => Err(e),
        settled = step => settled,
    }
}

/// How long a place holds its new holder back: the longest of the places' wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Hold {
    No,
    Until(Instant),
    /// A deadline past the clock's range.
    Forever,
}

impl Hold {
    fn after(start: Instant, delay: Duration) -> Self {
        start.checked_add(delay).map_or(Self::Forever, Self::Until)
    }
}

/// A clean release: `released <order id>` is written, then the lease released (see
/// [`mark_released`]).
pub(crate) async fn release_clean(lease: Lease) -> Result<bool> {
    mark_released(&lease, None).await;
    lease.release().await
}

/// Writes `released <order id>` (in a lock space, with the `epoch` of the lock's layout)
/// on a lease about to be released cleanly. A lease already lost writes nothing; a marker
/// that could not be written leaves `held` behind, so the next holder waits, which is the
/// safe side.
pub(crate) async fn mark_released(lease: &Lease, epoch: Option<u64>) {
    if lease.is_lost() {
        return;
    }
    let order = lease.fencing_token().order;
    if let Err(e) = lease.set_semaphore_data(&released(order, epoch)).await {
        tracing::debug!(
            semaphore = lease.name(),
            error = %e,
            "lock-delay marker not written; the next holder waits the delay"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_held_marker_of_another_tenure_or_an_unknown_one_makes_the_next_holder_wait() {
        assert!(!must_wait(b"", 7));
        assert!(!must_wait(&released(3, None), 7));
        assert!(!must_wait(&held(7, None), 7));
        assert!(must_wait(&held(3, None), 7));
        assert!(must_wait(b"someone else's data", 7));
        assert!(must_wait(b"held ", 7));
        assert!(must_wait(b"released x", 7));
        assert!(must_wait(&[0xff, 0xfe], 7));
    }

    #[test]
    fn a_held_marker_with_the_time_its_holder_waits_until_reads_as_held() {
        let waiting = held_until(7, 1_700_000_000_000);
        assert_eq!(parse(&waiting), Marker::Held(7));
        assert!(!must_wait(&waiting, 7));
        assert!(must_wait(&waiting, 8));
        assert_eq!(delay_until(&waiting, 7), Some(1_700_000_000_000));
        // Another tenure's, a plain one, a bad time: no delay of this owner's.
        assert_eq!(delay_until(&waiting, 8), None);
        assert_eq!(delay_until(&held(7, None), 7), None);
        assert_eq!(delay_until(b"held 7 until x", 7), None);
        assert_eq!(parse(b"held 7 until x"), Marker::Unknown);
        assert_eq!(parse(b"held x until 5"), Marker::Unknown);
    }

    #[test]
    fn markers_read_back_as_written() {
        assert_eq!(parse(&held(u64::MAX, None)), Marker::Held(u64::MAX));
        assert_eq!(parse(&released(0, None)), Marker::Released(0));
        assert_eq!(parse(b""), Marker::Empty);
        let in_space = marker(RELEASED, 4, Some(u64::MAX));
        assert_eq!(parse_in(&in_space), (Marker::Released(4), Some(u64::MAX)));
        assert_eq!(
            parse_in(&marker(HELD, 4, Some(2))),
            (Marker::Held(4), Some(2))
        );
        assert_eq!(parse_in(&held(4, None)), (Marker::Held(4), None));
    }

    #[test]
    fn a_marker_of_a_lock_space_is_judged_as_on_one_node_and_a_bad_epoch_is_unknown() {
        assert!(!must_wait(&marker(RELEASED, 3, Some(2)), 7));
        assert!(must_wait(&marker(HELD, 3, Some(2)), 7));
        assert!(!must_wait(&marker(HELD, 7, Some(2)), 7));
        assert!(must_wait(b"released 3 epoch x", 7));
        assert!(must_wait(b"released 3 epoch ", 7));
    }

    #[test]
    fn in_a_lock_space_only_a_marker_of_the_layout_run_or_a_newer_one_is_taken_at_its_word() {
        let ask = |grant, start| Asks {
            after_grant: grant,
            after_start: start,
        };
        // On one node the epoch plays no part.
        assert_eq!(asks(b"", 7, None), ask(false, false));
        assert_eq!(asks(&held(3, None), 7, None), ask(true, false));
        // In the layout of epoch 2: no marker, a node's own or an older layout's waits for
        // the process's start in it; its own layout's or a newer one's does not.
        assert_eq!(asks(b"", 7, Some(2)), ask(false, true));
        assert_eq!(asks(&released(3, None), 7, Some(2)), ask(false, true));
        assert_eq!(asks(&released(3, Some(1)), 7, Some(2)), ask(false, true));
        assert_eq!(asks(&released(3, Some(2)), 7, Some(2)), ask(false, false));
        assert_eq!(asks(&released(3, Some(3)), 7, Some(2)), ask(false, false));
        assert_eq!(asks(&held(3, Some(2)), 7, Some(2)), ask(true, false));
        assert_eq!(asks(&held(3, Some(1)), 7, Some(2)), ask(true, true));
        assert_eq!(asks(b"someone else's", 7, Some(2)), ask(true, true));
    }
}
