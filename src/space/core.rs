//! The lock space's pure core: what one process runs and whether it may take a lock now.
//!
//! Everything a lock space decides about its layouts and its locks' lives is here, as one
//! state machine that takes inputs and `now` and returns [`Effect`]s, like the session core:
//! no async, no channels, no clock, no lock. The async shell (`space/mod.rs`, its directory
//! tasks and its locks) carries out the effects and feeds the inputs; the deterministic
//! simulation (`crate::sim`) drives this same core.
//!
//! - **The gate**: a lock may be taken only while the process is a confirmed member of its
//!   directory (always, without one), the published layout does not contradict the one it
//!   runs, it can run what is published (every node named was given to it), and no lock
//!   taken now would be lost on arrival (the published epoch two or more past the one run).
//!   Each lock entered gets a *claim*: the epoch of the layout it is taken in, and the
//!   membership it lives in.
//! - **The layout judge**: a published layout is followed when it is the next step;
//!   a newer one that is not (a gap, another transition) makes every claim lost and is run
//!   once the process holds nothing; an older one, or the same epoch with other nodes,
//!   contradicts what the process runs: every claim is lost and the gate stays shut until
//!   the directory publishes the running layout again or a newer one. A layout the process
//!   cannot run (it names a node it was not given) shuts the gate until one it can run is
//!   published, and is reported as the layout error. Epochs come from the wire: every sum
//!   on them is checked.
//! - **Claims and epochs**: a claim two epochs behind the greatest published epoch is lost;
//!   the process reports the oldest epoch it runs (its layout's, or that of a claim it still
//!   has), which the directory's steps wait on.
//! - **The membership**: confirmed after a join and a read of the published layout; when it
//!   may be lost (the directory session's lease-safety deadline), every claim is lost and the
//!   gate shuts until the process is a member again.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use tokio::time::Instant;

use super::layout::{Judgment, Layout};
use crate::error::{Error, ErrorKind, Result};

/// A lock's claim, as the core knows it.
pub(crate) type ClaimId = u64;

/// A confirmed membership in the directory (a number the shell gives each one).
pub(crate) type MemberId = u64;

/// What the shell carries out.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Effect {
    /// The lock of this claim is lost (its guard's token fires; a take in progress gives
    /// its places back).
    Lost(ClaimId),
    /// The process runs this layout from now on.
    Layout(Arc<Layout>),
    /// The oldest epoch the process runs changed: report it to the directory.
    Report(u64),
    /// The gate opened or shut: locks waiting at it look again.
    Gate,
}

/// What a lock gets at the gate.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub(crate) claim: ClaimId,
    pub(crate) layout: Arc<Layout>,
    /// When the process began to run the layout (for a lock delay's markers).
    pub(crate) running_since: Instant,
    /// The membership the lock lives in (`None`: no directory).
    #[cfg_attr(not(test), allow(dead_code, reason = "read by the simulation"))]
    pub(crate) member: Option<MemberId>,
}

#[derive(Debug, Clone)]
enum Membership {
    /// No directory: always a member.
    Fixed,
    /// Not (or no longer) a confirmed member, and why.
    Not(Error),
    Confirmed(MemberId),
}

#[derive(Debug, Clone)]
struct Claim {
    epoch: u64,
    lost: bool,
}

/// Why the layout judge keeps the gate shut.
#[derive(Debug, Clone)]
enum Held {
    /// The published layout contradicts the one run.
    Contradicted(Error),
    /// A newer layout that is not the next step: run once the process holds nothing.
    Restart(Error),
    /// The published layout names a node the process was not given.
    Unrunnable(Error),
}

impl Held {
    fn error(&self) -> &Error {
        match self {
            Held::Contradicted(e) | Held::Restart(e) | Held::Unrunnable(e) => e,
        }
    }
}

/// One process's lock space: see the [module docs](self).
#[derive(Debug)]
pub(crate) struct SpaceCore {
    /// The nodes the process was given.
    given: BTreeSet<String>,
    layout: Arc<Layout>,
    running_since: Instant,
    /// The greatest epoch seen published (0: none, or no directory).
    published: u64,
    /// The last layout read from the directory, judged again when the process's last claim
    /// ends while the judge holds the gate shut.
    last_published: Option<Layout>,
    held: Option<Held>,
    /// Why the last published value was not followed, if it was not.
    layout_error: Option<Error>,
    member: Membership,
    claims: BTreeMap<ClaimId, Claim>,
    next_claim: ClaimId,
    /// The number of the last confirmed membership.
    members: MemberId,
    reported: u64,
    stopped: bool,
    effects: Vec<Effect>,
    /// A deliberately broken gate, for the simulation to show that its checker bites: it
    /// lets a lock through while the published layout leaves the one run behind or cannot
    /// be run.
    #[cfg(test)]
    broken_gate: bool,
}

impl SpaceCore {
    /// A process that runs `layout` from `now`, given the nodes `given`; with a directory
    /// (`directory`), not a member until it joins, and `layout` was read there.
    pub(crate) fn new(
        layout: Layout,
        given: impl IntoIterator<Item = String>,
        directory: bool,
        now: Instant,
    ) -> Self {
        let epoch = layout.epoch();
        Self {
            given: given.into_iter().collect(),
            layout: Arc::new(layout),
            running_since: now,
            published: if directory { epoch } else { 0 },
            last_published: None,
            held: None,
            layout_error: None,
            member: if directory {
                Membership::Not(not_member())
            } else {
                Membership::Fixed
            },
            claims: BTreeMap::new(),
            next_claim: 1,
            members: 0,
            reported: epoch,
            stopped: false,
            effects: Vec::new(),
            #[cfg(test)]
            broken_gate: false,
        }
    }

    /// Breaks the gate (see the field): the simulation's broken variant.
    #[cfg(test)]
    pub(crate) fn break_gate(&mut self) {
        self.broken_gate = true;
    }

    /// Whether the gate is broken (tests only; never in a build that ships).
    fn gate_broken(&self) -> bool {
        #[cfg(test)]
        return self.broken_gate;
        #[cfg(not(test))]
        false
    }

    /// The effects queued so far, in order.
    pub(crate) fn take_effects(&mut self) -> Vec<Effect> {
        std::mem::take(&mut self.effects)
    }

    /// The node `layout` names that the process was not given, if any.
    pub(crate) fn missing<'l>(&self, layout: &'l Layout) -> Option<&'l str> {
        layout
            .all_nodes()
            .into_iter()
            .find(|n| !self.given.contains(*n))
    }

    // ---- what the shell reads ------------------------------------------------------------

    pub(crate) fn layout(&self) -> &Arc<Layout> {
        &self.layout
    }

    /// When the process began to run its layout.
    #[cfg_attr(not(test), allow(dead_code, reason = "read by the simulation"))]
    pub(crate) fn running_since(&self) -> Instant {
        self.running_since
    }

    /// The oldest epoch the process runs: its layout's, or an older claim's.
    pub(crate) fn reported(&self) -> u64 {
        self.reported
    }

    /// The greatest epoch seen published.
    #[cfg_attr(not(test), allow(dead_code, reason = "read by the simulation"))]
    pub(crate) fn published(&self) -> u64 {
        self.published
    }

    /// Why the published layout is not followed, if it is not.
    pub(crate) fn layout_error(&self) -> Option<Error> {
        self.held
            .as_ref()
            .map(|h| h.error().clone())
            .or_else(|| self.layout_error.clone())
    }

    /// Whether the claim's lock is lost (or unknown: ended).
    #[cfg_attr(not(test), allow(dead_code, reason = "read by the simulation"))]
    pub(crate) fn is_lost(&self, claim: ClaimId) -> bool {
        self.claims.get(&claim).is_none_or(|c| c.lost)
    }

    /// Whether the process holds no claim.
    #[cfg_attr(not(test), allow(dead_code, reason = "read by the simulation"))]
    pub(crate) fn is_idle(&self) -> bool {
        self.claims.is_empty()
    }

    /// Whether the space was shut down.
    pub(crate) fn is_stopped(&self) -> bool {
        self.stopped
    }

    /// Why no lock may be taken now, if none may.
    pub(crate) fn shut(&self) -> Option<Error> {
        if self.stopped {
            return Some(closed());
        }
        if let Some(held) = self.held.as_ref().filter(|h| {
            !(self.gate_broken() && matches!(h, Held::Unrunnable(_) | Held::Restart(_)))
        }) {
            return Some(held.error().clone());
        }
        if let Membership::Not(why) = &self.member {
            return Some(why.clone());
        }
        if self.behind(self.layout.epoch()) && !self.gate_broken() {
            // The judge is about to restart: a lock taken now would be lost on arrival.
            return Some(Error::new(
                ErrorKind::Unavailable,
                format!(
                    "the lock space's directory published epoch {}, two or more past the epoch {} this process runs; it takes no lock until it runs a newer one",
                    self.published,
                    self.layout.epoch()
                ),
            ));
        }
        None
    }

    // ---- inputs --------------------------------------------------------------------------

    /// A lock asks to be taken now: its claim, the layout to take it in and the membership
    /// it lives in; or why the gate is shut.
    pub(crate) fn enter(&mut self) -> Result<Entry> {
        if let Some(why) = self.shut() {
            return Err(why);
        }
        Ok(self.claim())
    }

    /// A claim on the layout run now, whatever the gate says (for what the gate does not
    /// cover: a space group's membership).
    pub(crate) fn claim(&mut self) -> Entry {
        let claim = self.next_claim;
        self.next_claim += 1;
        self.claims.insert(
            claim,
            Claim {
                epoch: self.layout.epoch(),
                lost: false,
            },
        );
        self.report();
        Entry {
            claim,
            layout: self.layout.clone(),
            running_since: self.running_since,
            member: match self.member {
                Membership::Confirmed(id) => Some(id),
                _ => None,
            },
        }
    }

    /// A lock's claim ends (its release was answered, or it gave its places back).
    pub(crate) fn leave(&mut self, now: Instant, claim: ClaimId) {
        if self.claims.remove(&claim).is_none() {
            return;
        }
        self.report();
        if self.claims.is_empty() && self.held.is_some() {
            self.rejudge(now);
        }
    }

    /// A lock's claim is lost by the shell's own account (a part lost, a bound passed).
    pub(crate) fn lose(&mut self, claim: ClaimId) {
        if let Some(c) = self.claims.get_mut(&claim).filter(|c| !c.lost) {
            c.lost = true;
            self.effects.push(Effect::Lost(claim));
        }
    }

    /// The directory's published value: a layout, or why it is not one.
    pub(crate) fn published_value(&mut self, now: Instant, value: Result<Layout>) {
        match value {
            Ok(layout) => self.follow(now, layout),
            Err(e) => {
                // The last layout stays: an operator's step needs a readable layout too.
                self.layout_error = Some(e);
            }
        }
    }

    /// A lock in a transition read the published epoch (for its fencing token).
    pub(crate) fn seen(&mut self, epoch: u64) {
        if epoch <= self.published {
            return;
        }
        let opened_behind = !self.behind(self.layout.epoch());
        self.published = epoch;
        let lost: Vec<ClaimId> = self
            .claims
            .iter()
            .filter(|(_, c)| !c.lost && self.behind(c.epoch))
            .map(|(id, _)| *id)
            .collect();
        for claim in lost {
            self.lose(claim);
        }
        if opened_behind && self.behind(self.layout.epoch()) {
            self.effects.push(Effect::Gate);
        }
    }

    /// The membership is confirmed: joined, and the published layout read after joining was
    /// followed (`published_value` first). Returns its number.
    pub(crate) fn member_confirmed(&mut self) -> MemberId {
        if matches!(self.member, Membership::Fixed) {
            return 0;
        }
        self.members += 1;
        self.member = Membership::Confirmed(self.members);
        self.effects.push(Effect::Gate);
        self.members
    }

    /// The membership may be lost (`why`): every claim is lost, and the gate shuts until the
    /// process is a member again.
    pub(crate) fn member_lost(&mut self, why: Error) {
        if matches!(self.member, Membership::Fixed) {
            return;
        }
        self.member = Membership::Not(why);
        self.lose_all();
        self.effects.push(Effect::Gate);
    }

    /// The space shuts down: no lock is taken any more.
    pub(crate) fn stop(&mut self) {
        self.stopped = true;
        self.effects.push(Effect::Gate);
    }

    // ---- the judge -----------------------------------------------------------------------

    /// Whether a lock of `epoch` is lost by what is published: two or more epochs behind.
    fn behind(&self, epoch: u64) -> bool {
        self.published.saturating_sub(epoch) >= 2
    }

    /// Judges `layout`, published on the directory, against the one run now.
    fn follow(&mut self, now: Instant, layout: Layout) {
        self.seen(layout.epoch());
        self.last_published = Some(layout.clone());
        let missing = self.missing(&layout).map(str::to_string);
        match self.layout.judge(&layout) {
            Judgment::Same => {
                self.layout_error = None;
                // A layout it could not run is simply gone; a contradiction or a restart
                // is over once the locks it made lost are released.
                let over = match self.held {
                    None => false,
                    Some(Held::Unrunnable(_)) => true,
                    Some(_) => self.claims.is_empty(),
                };
                if over {
                    self.release_gate();
                }
            }
            Judgment::Next => match missing {
                None => self.adopt(now, layout),
                Some(node) => self.unrunnable(&layout, &node),
            },
            Judgment::Restart => {
                if let Some(node) = missing {
                    // Nothing run is worth keeping, and nothing published can be run.
                    self.lose_all();
                    return self.unrunnable(&layout, &node);
                }
                if self.claims.is_empty() {
                    return self.adopt(now, layout);
                }
                let why = Error::new(
                    ErrorKind::PreconditionFailed,
                    format!(
                        "the published layout of epoch {} is not the next step after epoch {} that this process runs; its locks of the older layout are reported lost, and it takes no lock until they are released",
                        layout.epoch(),
                        self.layout.epoch()
                    ),
                );
                tracing::warn!(error = %why, "lock space layout moved on without this process");
                self.hold(Held::Restart(why));
            }
            Judgment::Contradicts => {
                let why = Error::new(
                    ErrorKind::PreconditionFailed,
                    format!(
                        "the published layout ({layout}) contradicts the one this process runs ({}): it was written past the directory's steps; no lock is taken until the directory publishes this one again or a newer one",
                        self.layout
                    ),
                );
                tracing::warn!(error = %why, "lock space layout contradicted");
                self.hold(Held::Contradicted(why));
            }
        }
    }

    /// Judges the last published layout again (the last claim ended while the gate was
    /// held shut).
    fn rejudge(&mut self, now: Instant) {
        if let Some(layout) = self.last_published.clone() {
            self.follow(now, layout);
        }
    }

    /// Shuts the gate for `held` and loses every claim (a lock of a layout the fleet left,
    /// or of one the directory contradicts, is not worth holding).
    fn hold(&mut self, held: Held) {
        self.held = Some(held);
        self.lose_all();
        self.effects.push(Effect::Gate);
    }

    fn unrunnable(&mut self, layout: &Layout, node: &str) {
        let why = Error::new(
            ErrorKind::PreconditionFailed,
            format!(
                "the published layout of epoch {} names node {node:?}, which this process was not given; it takes no lock until a layout it can run is published (add the node with LockSpaceBuilder::node)",
                layout.epoch()
            ),
        );
        tracing::warn!(error = %why, "lock space layout cannot be run");
        self.held = Some(Held::Unrunnable(why));
        self.effects.push(Effect::Gate);
    }

    fn release_gate(&mut self) {
        self.held = None;
        self.effects.push(Effect::Gate);
    }

    fn lose_all(&mut self) {
        let ids: Vec<ClaimId> = self.claims.keys().copied().collect();
        for claim in ids {
            self.lose(claim);
        }
    }

    /// Runs `layout` from `now` on.
    fn adopt(&mut self, now: Instant, layout: Layout) {
        tracing::info!(layout = %layout, "lock space follows a new layout");
        self.layout = Arc::new(layout);
        self.running_since = now;
        self.layout_error = None;
        self.held = None;
        self.effects.push(Effect::Layout(self.layout.clone()));
        self.effects.push(Effect::Gate);
        self.report();
    }

    /// Recomputes the epoch to report: the oldest of the layout's and the claims'.
    fn report(&mut self) {
        let oldest = self.claims.values().map(|c| c.epoch).min();
        let epoch = oldest.map_or(self.layout.epoch(), |o| o.min(self.layout.epoch()));
        if epoch != self.reported {
            self.reported = epoch;
            self.effects.push(Effect::Report(epoch));
        }
    }
}

/// Why a space with a directory takes no lock while it is not a confirmed member.
pub(crate) fn not_member() -> Error {
    Error::new(
        ErrorKind::Unavailable,
        "this process's membership in the lock space's directory is not confirmed (the directory cannot be reached); no lock is taken until it is a member again",
    )
}

/// The error of a space that was shut down.
pub(crate) fn closed() -> Error {
    Error::new(
        ErrorKind::SessionClosed,
        "the lock space was shut down; open a new one",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(epoch: u64, nodes: &[&str]) -> Layout {
        Layout::new(epoch, nodes.iter().copied()).unwrap_or_else(|e| panic!("{e}"))
    }

    fn given(nodes: &[&str]) -> Vec<String> {
        nodes.iter().map(|n| n.to_string()).collect()
    }

    /// A process of a space with a directory, a confirmed member running `a`.
    fn member(a: &Layout, nodes: &[&str]) -> SpaceCore {
        let mut core = SpaceCore::new(a.clone(), given(nodes), true, Instant::now());
        core.published_value(Instant::now(), Ok(a.clone()));
        core.member_confirmed();
        core.take_effects();
        core
    }

    fn lost(effects: &[Effect]) -> Vec<ClaimId> {
        effects
            .iter()
            .filter_map(|e| match e {
                Effect::Lost(c) => Some(*c),
                _ => None,
            })
            .collect()
    }

    fn kind(r: Result<Entry>) -> Option<ErrorKind> {
        r.err().map(|e| e.kind())
    }

    #[test]
    fn a_fixed_space_is_always_open_and_reports_its_oldest_claim() {
        let a = layout(1, &["n1"]);
        let mut core = SpaceCore::new(a, given(&["n1"]), false, Instant::now());
        let first = core.enter().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((first.layout.epoch(), first.member), (1, None));
        core.member_lost(not_member()); // no directory: no membership to lose
        assert!(core.enter().is_ok());
        assert!(lost(&core.take_effects()).is_empty());
        core.leave(Instant::now(), first.claim);
        assert_eq!(core.reported(), 1);
    }

    #[test]
    fn a_lock_waits_for_a_confirmed_membership_and_is_lost_with_it() {
        let a = layout(1, &["n1"]);
        let mut core = SpaceCore::new(a.clone(), given(&["n1"]), true, Instant::now());
        assert_eq!(kind(core.enter()), Some(ErrorKind::Unavailable));
        core.published_value(Instant::now(), Ok(a));
        let id = core.member_confirmed();
        let entry = core.enter().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(entry.member, Some(id));
        core.take_effects();
        core.member_lost(not_member());
        let effects = core.take_effects();
        assert_eq!(lost(&effects), [entry.claim]);
        assert!(effects.contains(&Effect::Gate));
        assert_eq!(kind(core.enter()), Some(ErrorKind::Unavailable));
        core.published_value(Instant::now(), Ok(layout(1, &["n1"])));
        assert_eq!(core.member_confirmed(), id + 1);
        assert!(core.enter().is_ok());
    }

    #[test]
    fn the_next_step_is_followed_and_claims_two_epochs_behind_are_lost() {
        let a = layout(1, &["n1"]);
        let t = a.add_node("n2").unwrap_or_else(|e| panic!("{e}"));
        let b = t.finish().unwrap_or_else(|e| panic!("{e}"));
        let mut core = member(&a, &["n1", "n2"]);
        let old = core.enter().unwrap_or_else(|e| panic!("{e}"));
        let later = Instant::now() + std::time::Duration::from_secs(1);
        core.published_value(later, Ok(t.clone()));
        assert_eq!(core.layout().epoch(), 2);
        assert_eq!(core.running_since(), later);
        // The claim of A keeps the report at 1 until it ends.
        assert_eq!(core.reported(), 1);
        assert!(core.take_effects().contains(&Effect::Layout(Arc::new(t))));
        core.published_value(later, Ok(b));
        assert_eq!(lost(&core.take_effects()), [old.claim]);
        assert_eq!(core.layout().epoch(), 3);
        core.leave(later, old.claim);
        assert_eq!(core.reported(), 3);
    }

    #[test]
    fn a_gap_loses_the_claims_and_is_run_once_they_end_and_no_lock_is_born_lost() {
        let a = layout(1, &["n1"]);
        let far = layout(5, &["n1", "n2"]);
        let mut core = member(&a, &["n1", "n2"]);
        let held = core.enter().unwrap_or_else(|e| panic!("{e}"));
        core.published_value(Instant::now(), Ok(far.clone()));
        assert_eq!(lost(&core.take_effects()), [held.claim]);
        // Still running A, and A is 4 epochs behind: nothing is handed out to be lost.
        assert_eq!(kind(core.enter()), Some(ErrorKind::PreconditionFailed));
        assert!(core.layout_error().is_some());
        core.leave(Instant::now(), held.claim);
        assert_eq!(core.layout().epoch(), 5);
        assert!(core.layout_error().is_none());
        let next = core.enter().unwrap_or_else(|e| panic!("{e}"));
        assert!(!core.is_lost(next.claim));
    }

    #[test]
    fn a_contradiction_shuts_the_gate_until_the_running_layout_is_published_again() {
        let a = layout(3, &["n1", "n2"]);
        let mut core = member(&a, &["n1", "n2", "n3"]);
        let held = core.enter().unwrap_or_else(|e| panic!("{e}"));
        core.published_value(Instant::now(), Ok(layout(3, &["n1", "n3"])));
        assert_eq!(lost(&core.take_effects()), [held.claim]);
        assert_eq!(kind(core.enter()), Some(ErrorKind::PreconditionFailed));
        // An older epoch contradicts too.
        core.published_value(Instant::now(), Ok(layout(2, &["n1", "n2"])));
        assert_eq!(kind(core.enter()), Some(ErrorKind::PreconditionFailed));
        core.published_value(Instant::now(), Ok(a.clone()));
        // Not while a lock made lost is still held.
        assert_eq!(kind(core.enter()), Some(ErrorKind::PreconditionFailed));
        core.leave(Instant::now(), held.claim);
        assert!(core.enter().is_ok());
        assert!(core.layout_error().is_none());
    }

    #[test]
    fn a_layout_naming_an_unknown_node_shuts_the_gate_until_a_runnable_one_comes() {
        let a = layout(1, &["n1"]);
        let mut core = member(&a, &["n1", "n2"]);
        let held = core.enter().unwrap_or_else(|e| panic!("{e}"));
        // The next step, onto a node this process was not given.
        let t = a.add_node("n9").unwrap_or_else(|e| panic!("{e}"));
        core.published_value(Instant::now(), Ok(t));
        assert_eq!(kind(core.enter()), Some(ErrorKind::PreconditionFailed));
        assert_eq!(core.layout().epoch(), 1);
        // What it holds is safe in A (the fleet cannot step on while it reports 1).
        assert!(lost(&core.take_effects()).is_empty());
        assert_eq!(core.reported(), 1);
        // The directory publishes A again: runnable.
        core.published_value(Instant::now(), Ok(a.clone()));
        assert!(core.enter().is_ok());
        // A gap onto an unknown node: nothing is worth keeping, nothing can be run.
        core.published_value(Instant::now(), Ok(layout(7, &["n9"])));
        assert!(lost(&core.take_effects()).contains(&held.claim));
        assert_eq!(kind(core.enter()), Some(ErrorKind::PreconditionFailed));
        // A newer layout it can run is run once its locks end.
        core.published_value(Instant::now(), Ok(layout(8, &["n2"])));
        core.leave(Instant::now(), held.claim);
        core.leave(Instant::now(), held.claim + 1);
        assert_eq!(core.layout().epoch(), 8);
        assert!(core.enter().is_ok());
    }

    #[test]
    fn epochs_at_the_end_of_the_range_neither_overflow_nor_hand_out_lost_locks() {
        let a = layout(u64::MAX - 1, &["n1"]);
        let mut core = member(&a, &["n1"]);
        let held = core.enter().unwrap_or_else(|e| panic!("{e}"));
        core.published_value(Instant::now(), Ok(layout(u64::MAX, &["n1", "n2"])));
        assert_eq!(kind(core.enter()), Some(ErrorKind::PreconditionFailed));
        core.seen(u64::MAX);
        core.leave(Instant::now(), held.claim);
        // A small epoch after the largest contradicts; nothing wraps around.
        core.published_value(Instant::now(), Ok(layout(1, &["n1"])));
        assert_eq!(kind(core.enter()), Some(ErrorKind::PreconditionFailed));
        let far = SpaceCore::new(layout(1, &["n1"]), given(&["n1"]), true, Instant::now());
        let mut far = far;
        far.seen(u64::MAX);
        far.member_confirmed();
        assert_eq!(kind(far.enter()), Some(ErrorKind::Unavailable));
    }

    #[test]
    fn a_read_that_shows_a_newer_epoch_loses_the_claims_two_behind() {
        let a = layout(1, &["n1"]);
        let mut core = member(&a, &["n1"]);
        let held = core.enter().unwrap_or_else(|e| panic!("{e}"));
        core.seen(2);
        assert!(!core.is_lost(held.claim));
        core.seen(3);
        assert!(core.is_lost(held.claim));
        assert!(core.take_effects().contains(&Effect::Gate));
    }

    #[test]
    fn a_stopped_space_takes_no_lock() {
        let mut core = SpaceCore::new(layout(1, &["n1"]), given(&["n1"]), false, Instant::now());
        core.stop();
        assert_eq!(kind(core.enter()), Some(ErrorKind::SessionClosed));
        assert!(core.is_idle());
    }
}
