//! How one lock of a space is taken, as a pure state machine: the steps of an attempt (the
//! gate, each place in order, a lock delay, the read of the published epoch in a transition,
//! a leader's value) and what each outcome leads to (the next step, giving the places back
//! and trying again at the gate, or the end). The shell (`space/lock.rs`) carries the steps
//! out against the nodes and the directory; the simulation carries them out against its
//! node cores. Neither decides anything [`Take`] does not.
//!
//! The rules:
//! - All or nothing: a place not granted in time, or refused, gives every place back and
//!   ends the take (`None`, or the error).
//! - A claim lost while taking (the membership may be lost, the layout fell behind or was
//!   contradicted: see [`super::core`]) gives the places back and tries again at the gate,
//!   which holds the take until the process may lock again, or its deadline.
//! - A place lost (its session ended) before the lock is handed over gives the places back
//!   and tries again; past the deadline, the take ends [`ErrorKind::Unavailable`] (no node
//!   said the lock is busy).
//! - In a transition the token needs the epoch published after every place is held: read
//!   from the directory. A read that fails ends a bounded take; an unbounded one gives the
//!   places back, pauses and tries again.

use std::time::Duration;

use tokio::time::Instant;

use super::core::Entry;
use super::layout::Layout;
use crate::error::{Error, ErrorKind, Result};
use crate::session::FencingToken;

/// Between two attempts of a lock without a bound whose directory read went unanswered.
pub(crate) const READ_RETRY: Duration = Duration::from_millis(500);

/// What the shell does next for a [`Take`].
#[derive(Debug, Clone)]
pub(crate) enum Step {
    /// Enter the gate (waiting until the deadline); then [`Take::entered`] or
    /// [`Take::refused`].
    Enter { deadline: Option<Instant> },
    /// Take the place of `name` on `node`, the recipe lock there, within the deadline; then
    /// [`Take::acquired`].
    Acquire { node: String, name: String },
    /// Settle the places of a lock-delay mutex (its markers, and the wait they ask for);
    /// then [`Take::settled`].
    Settle { deadline: Option<Instant> },
    /// Read the published layout from the directory; then [`Take::read`].
    ReadPublished,
    /// Write the leader's token with its value on every place; then [`Take::written`].
    WriteLeader { token: FencingToken },
    /// Release every place taken, wait for the answers, and give up the claim; then
    /// [`Take::gave_back`].
    GiveBack,
    /// Wait this long; then [`Take::paused`].
    Pause(Duration),
    /// The end: each name's fencing token, or `None` (a place was not granted in time).
    Done(Outcome),
}

/// The epoch a lock taken in the transition `running` counts its token by, given the
/// layout `published` on the directory: the transition's (its old place's order id) while
/// it is what is published, the next step's (its new place's) once that is; `None` for any
/// other layout, which says nothing a token can rest on.
pub(crate) fn published_epoch(running: &Layout, published: &Layout) -> Option<u64> {
    if published == running {
        Some(running.epoch())
    } else if running.finish().is_ok_and(|next| next == *published) {
        Some(published.epoch())
    } else {
        None
    }
}

/// The outcome of a take: each name's fencing token, or `None` (not granted in time).
pub(crate) type Outcome = Result<Option<Vec<(String, FencingToken)>>>;

/// What comes after the places are given back.
#[derive(Debug, Clone)]
enum Then {
    Retry,
    Pause,
    End(Outcome),
}

#[derive(Debug, Clone)]
enum Phase {
    /// At the gate.
    Gate,
    /// Taking the places (the next is the first not in `orders`), or deciding what follows
    /// once all are taken.
    Places,
    Settling,
    Reading,
    /// Writing the leader's value; the tokens to hand over.
    Writing(Vec<(String, FencingToken)>),
    /// Giving the places back, then.
    GivingBack(Then),
    Pausing,
    /// The outcome, until [`Take::next`] returns it.
    Finished(Option<Outcome>),
}

/// The take of one lock: see the [module docs](self).
#[derive(Debug)]
pub(crate) struct Take {
    names: Vec<String>,
    deadline: Option<Instant>,
    /// A lock-delay mutex: its places are settled before the lock is handed over.
    settle: bool,
    /// An election: the leader's value carries its token.
    leader: bool,
    phase: Phase,
    /// The attempt's entry, once through the gate.
    entry: Option<Entry>,
    /// Every place of the attempt, in the order they are taken: (name index, node).
    plan: Vec<(usize, String)>,
    /// The order id of each place taken so far.
    orders: Vec<u64>,
    /// The attempt's places were settled.
    settled: bool,
    /// The epoch read from the directory (`Some(None)`: no directory), once read.
    published: Option<Option<u64>>,
    /// The shell says the claim was lost (its token fired).
    claim_lost: bool,
    /// The shell says a place taken was lost.
    part_lost: bool,
}

impl Take {
    /// The take of `names` (sorted, each once), by `deadline` (`None`: as long as it
    /// takes); `settle` for a lock-delay mutex, `leader` for an election.
    pub(crate) fn new(
        names: Vec<String>,
        deadline: Option<Instant>,
        settle: bool,
        leader: bool,
    ) -> Self {
        Self {
            names,
            deadline,
            settle,
            leader,
            phase: Phase::Gate,
            entry: None,
            plan: Vec::new(),
            orders: Vec::new(),
            settled: false,
            published: None,
            claim_lost: false,
            part_lost: false,
        }
    }

    /// The attempt's entry (its claim and layout), once through the gate.
    pub(crate) fn entry(&self) -> Option<&Entry> {
        self.entry.as_ref()
    }

    /// What to do now.
    pub(crate) fn next(&mut self, now: Instant) -> Step {
        let holding = matches!(
            self.phase,
            Phase::Places | Phase::Settling | Phase::Reading | Phase::Writing(_)
        );
        if self.claim_lost && holding {
            // A lock the space lost is not worth holding: back to the gate.
            self.phase = Phase::GivingBack(Then::Retry);
        }
        match &mut self.phase {
            Phase::Gate => Step::Enter {
                deadline: self.deadline,
            },
            Phase::Places => match self.plan.get(self.orders.len()) {
                Some((name, node)) => Step::Acquire {
                    node: node.clone(),
                    name: self.names[*name].clone(),
                },
                None => self.all_taken(now),
            },
            Phase::Settling => Step::Settle {
                deadline: self.deadline,
            },
            Phase::Reading => Step::ReadPublished,
            Phase::Writing(tokens) => Step::WriteLeader {
                token: tokens.first().map(|(_, t)| *t).unwrap_or_default(),
            },
            Phase::GivingBack(_) => Step::GiveBack,
            Phase::Pausing => Step::Pause(READ_RETRY),
            Phase::Finished(outcome) => Step::Done(outcome.take().unwrap_or_else(|| {
                Err(Error::new(
                    ErrorKind::Internal,
                    "a lock space's take was asked for a step after its end",
                ))
            })),
        }
    }

    /// Every place is granted: settle, read, write the leader's value, or hand it over.
    fn all_taken(&mut self, now: Instant) -> Step {
        if self.part_lost {
            let then = if self.deadline.is_some_and(|d| now >= d) {
                // Not `None`: no node said the lock is busy.
                Then::End(Err(Error::new(
                    ErrorKind::Unavailable,
                    "a place of the lock was lost (its node's session ended) while the next was taken, and the bound passed; try again",
                )))
            } else {
                Then::Retry
            };
            self.phase = Phase::GivingBack(then);
            return Step::GiveBack;
        }
        if self.settle && !self.settled {
            self.phase = Phase::Settling;
            return self.next(now);
        }
        let Some(entry) = &self.entry else {
            self.phase = Phase::Finished(None);
            return self.next(now);
        };
        if entry.layout.is_transition() && self.published.is_none() {
            self.phase = Phase::Reading;
            return self.next(now);
        }
        let layout = entry.layout.clone();
        let published = self.published.flatten();
        let mut at = 0;
        let mut tokens = Vec::with_capacity(self.names.len());
        for (i, name) in self.names.iter().enumerate() {
            let places = self.plan.iter().filter(|(n, _)| *n == i).count();
            let orders = self.orders.get(at..at + places).unwrap_or_default();
            at += places;
            tokens.push((name.clone(), layout.token(orders, published)));
        }
        self.phase = if self.leader {
            Phase::Writing(tokens)
        } else {
            Phase::Finished(Some(Ok(Some(tokens))))
        };
        self.next(now)
    }

    // ---- outcomes ------------------------------------------------------------------------

    /// Through the gate with `entry`: the places of its layout, in order.
    pub(crate) fn entered(&mut self, entry: Entry) {
        self.plan = self
            .names
            .iter()
            .enumerate()
            .flat_map(|(i, name)| {
                entry
                    .layout
                    .parts(name)
                    .into_iter()
                    .map(move |p| (i, p.node))
            })
            .collect();
        self.orders.clear();
        self.settled = false;
        self.published = None;
        self.claim_lost = false;
        self.part_lost = false;
        self.entry = Some(entry);
        self.phase = Phase::Places;
    }

    /// The gate stayed shut until the deadline (or the space was shut down): the end.
    pub(crate) fn refused(&mut self, why: Error) {
        self.entry = None;
        self.phase = Phase::Finished(Some(Err(why)));
    }

    /// The claim was lost (its token fired): the places go back at the next step.
    pub(crate) fn claim_lost(&mut self) {
        self.claim_lost = true;
    }

    /// A place taken was lost (its session ended).
    pub(crate) fn part_lost(&mut self) {
        self.part_lost = true;
    }

    /// The place asked for: its order id, not granted in time (`Ok(None)`), or an error.
    pub(crate) fn acquired(&mut self, outcome: Result<Option<u64>>) {
        if !matches!(self.phase, Phase::Places) {
            return;
        }
        match outcome {
            Ok(Some(order)) => self.orders.push(order),
            Ok(None) => self.phase = Phase::GivingBack(Then::End(Ok(None))),
            Err(e) => self.phase = Phase::GivingBack(Then::End(Err(e))),
        }
    }

    /// The places were settled, or why not.
    pub(crate) fn settled(&mut self, outcome: Result<()>) {
        if !matches!(self.phase, Phase::Settling) {
            return;
        }
        self.phase = match outcome {
            Ok(()) => {
                self.settled = true;
                Phase::Places
            }
            // A place lost during the delay: as any lost place.
            Err(_) if self.part_lost => Phase::Places,
            // The delay outlasts the bound: not the caller's in time.
            Err(e) if e.kind() == ErrorKind::NotAcquired => Phase::GivingBack(Then::End(Ok(None))),
            Err(e) => Phase::GivingBack(Then::End(Err(e))),
        };
    }

    /// The directory's published layout (`None`: no directory), or why it could not be read.
    /// Only the transition itself, or the next step it finishes into, tells the token's
    /// place; any other layout (a contradiction, a layout the fleet moved on to) gives the
    /// places back, and the gate, which the core shuts for such a layout, decides.
    pub(crate) fn read(&mut self, outcome: Result<Option<Layout>>) {
        if !matches!(self.phase, Phase::Reading) {
            return;
        }
        let running = self.entry.as_ref().map(|e| e.layout.clone());
        self.phase = match outcome {
            Ok(None) => {
                self.published = Some(None);
                Phase::Places
            }
            Ok(Some(published)) => match running.and_then(|r| published_epoch(&r, &published)) {
                Some(epoch) => {
                    self.published = Some(Some(epoch));
                    Phase::Places
                }
                None => Phase::GivingBack(Then::Retry),
            },
            // No bound: try again in a moment, once the directory answers.
            Err(e) if self.deadline.is_none() && e.kind() == ErrorKind::Unavailable => {
                Phase::GivingBack(Then::Pause)
            }
            Err(e) => Phase::GivingBack(Then::End(Err(Error::caused_by(
                e.kind(),
                format!(
                    "the lock was taken in a transition, but its fencing token needs the published layout, which could not be read ({e}); try again"
                ),
                &e,
            )))),
        };
    }

    /// The leader's value was written on every place, or why not.
    pub(crate) fn written(&mut self, outcome: Result<()>) {
        let Phase::Writing(tokens) = &mut self.phase else {
            return;
        };
        self.phase = match outcome {
            Ok(()) => Phase::Finished(Some(Ok(Some(std::mem::take(tokens))))),
            // A place lost meanwhile: as any lost place.
            Err(_) if self.part_lost => Phase::Places,
            Err(e) => Phase::GivingBack(Then::End(Err(e))),
        };
    }

    /// The places were given back and the claim given up.
    pub(crate) fn gave_back(&mut self) {
        let Phase::GivingBack(then) = std::mem::replace(&mut self.phase, Phase::Gate) else {
            return;
        };
        self.entry = None;
        self.plan.clear();
        self.orders.clear();
        self.phase = match then {
            Then::Retry => Phase::Gate,
            Then::Pause => Phase::Pausing,
            Then::End(outcome) => Phase::Finished(Some(outcome)),
        };
    }

    /// The pause after an unanswered read is over.
    pub(crate) fn paused(&mut self) {
        if matches!(self.phase, Phase::Pausing) {
            self.phase = Phase::Gate;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn entry(layout: &Layout, claim: u64) -> Entry {
        Entry {
            claim,
            layout: Arc::new(layout.clone()),
            running_since: Instant::now(),
            member: None,
        }
    }

    fn acquire(step: Step) -> (String, String) {
        match step {
            Step::Acquire { node, name } => (node, name),
            other => panic!("expected an acquire, got {other:?}"),
        }
    }

    fn done(step: Step) -> Outcome {
        match step {
            Step::Done(outcome) => outcome,
            other => panic!("expected the end, got {other:?}"),
        }
    }

    fn names(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    /// A transition over n1 -> n1,n2 and a name that moves in it.
    fn moving() -> (Layout, String) {
        let t = Layout::new(1, ["n1"])
            .and_then(|a| a.begin(["n2"]))
            .unwrap_or_else(|e| panic!("{e}"));
        let name = (0..)
            .map(|i| format!("job-{i}"))
            .find(|n| t.parts(n).len() == 2)
            .unwrap_or_default();
        (t, name)
    }

    #[test]
    fn a_stable_lock_takes_its_place_and_hands_over_the_node_token() {
        let a = Layout::new(4, ["n1"]).unwrap_or_else(|e| panic!("{e}"));
        let now = Instant::now();
        let mut take = Take::new(names(&["job"]), None, false, false);
        assert!(matches!(take.next(now), Step::Enter { deadline: None }));
        take.entered(entry(&a, 1));
        assert_eq!(acquire(take.next(now)), ("n1".into(), "job".into()));
        take.acquired(Ok(Some(17)));
        let tokens = done(take.next(now)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(tokens, Some(vec![("job".into(), FencingToken::new(4, 17))]));
    }

    #[test]
    fn a_transition_takes_both_places_old_first_then_reads_the_published_epoch() {
        let (t, name) = moving();
        let now = Instant::now();
        let mut take = Take::new(vec![name.clone()], None, false, false);
        take.next(now);
        take.entered(entry(&t, 1));
        assert_eq!(acquire(take.next(now)).0, "n1");
        take.acquired(Ok(Some(40)));
        assert_eq!(acquire(take.next(now)).0, "n2");
        take.acquired(Ok(Some(3)));
        assert!(matches!(take.next(now), Step::ReadPublished));
        // The next layout is published: the new place's token, in its epoch.
        take.read(Ok(Some(t.finish().unwrap_or_else(|e| panic!("{e}")))));
        let tokens = done(take.next(now)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(tokens, Some(vec![(name, FencingToken::new(3, 3))]));
    }

    /// A read that shows neither the transition nor the layout it finishes into (a
    /// contradiction, a later epoch) tells nothing a token can rest on: the places go back
    /// and the gate decides.
    #[test]
    fn a_read_of_any_other_layout_gives_the_places_back_and_goes_back_to_the_gate() {
        let (t, name) = moving();
        let now = Instant::now();
        let other = Layout::new(3, ["n1", "n9"]).unwrap_or_else(|e| panic!("{e}"));
        let mut take = Take::new(vec![name], None, false, false);
        take.next(now);
        take.entered(entry(&t, 1));
        take.next(now);
        take.acquired(Ok(Some(40)));
        take.next(now);
        take.acquired(Ok(Some(3)));
        assert!(matches!(take.next(now), Step::ReadPublished));
        take.read(Ok(Some(other)));
        assert!(matches!(take.next(now), Step::GiveBack));
        take.gave_back();
        assert!(matches!(take.next(now), Step::Enter { .. }));
        // The transition itself: the old place's token, in the old layout's epoch.
        take.entered(entry(&t, 2));
        take.next(now);
        take.acquired(Ok(Some(41)));
        take.next(now);
        take.acquired(Ok(Some(4)));
        take.next(now);
        take.read(Ok(Some(t.clone())));
        let tokens = done(take.next(now)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(tokens.map(|t| t[0].1), Some(FencingToken::new(1, 41)));
    }

    #[test]
    fn a_place_not_granted_gives_back_the_others_and_ends_with_none() {
        let (t, name) = moving();
        let now = Instant::now();
        let mut take = Take::new(vec![name], Some(now), false, false);
        take.next(now);
        take.entered(entry(&t, 1));
        take.next(now);
        take.acquired(Ok(Some(40)));
        take.next(now);
        take.acquired(Ok(None));
        assert!(matches!(take.next(now), Step::GiveBack));
        take.gave_back();
        assert!(matches!(done(take.next(now)), Ok(None)));
    }

    #[test]
    fn a_claim_lost_while_taking_gives_back_and_tries_again_at_the_gate() {
        let (t, name) = moving();
        let now = Instant::now();
        let mut take = Take::new(vec![name], None, false, false);
        take.next(now);
        take.entered(entry(&t, 1));
        take.next(now);
        take.acquired(Ok(Some(40)));
        take.claim_lost();
        assert!(matches!(take.next(now), Step::GiveBack));
        take.gave_back();
        assert!(matches!(take.next(now), Step::Enter { .. }));
        // The gate stays shut until the deadline: the end, with its reason.
        take.refused(Error::new(ErrorKind::Unavailable, "not a member"));
        let err = done(take.next(now)).err().map(|e| e.kind());
        assert_eq!(err, Some(ErrorKind::Unavailable));
    }

    #[test]
    fn a_place_lost_past_the_deadline_ends_unavailable_and_before_it_tries_again() {
        let a = Layout::new(1, ["n1"]).unwrap_or_else(|e| panic!("{e}"));
        let now = Instant::now();
        let later = now + Duration::from_secs(1);
        for (at, retries) in [(now, true), (later, false)] {
            let mut take = Take::new(
                names(&["a", "b"]),
                Some(now + Duration::from_millis(500)),
                false,
                false,
            );
            take.next(now);
            take.entered(entry(&a, 1));
            take.next(now);
            take.acquired(Ok(Some(1)));
            take.next(now);
            take.acquired(Ok(Some(2)));
            take.part_lost();
            assert!(matches!(take.next(at), Step::GiveBack));
            take.gave_back();
            match take.next(at) {
                Step::Enter { .. } => assert!(retries),
                Step::Done(Err(e)) => {
                    assert!(!retries);
                    assert_eq!(e.kind(), ErrorKind::Unavailable);
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn an_unanswered_read_pauses_an_unbounded_take_and_ends_a_bounded_one() {
        let (t, name) = moving();
        let now = Instant::now();
        for deadline in [None, Some(now)] {
            let mut take = Take::new(vec![name.clone()], deadline, false, false);
            take.next(now);
            take.entered(entry(&t, 1));
            take.next(now);
            take.acquired(Ok(Some(1)));
            take.next(now);
            take.acquired(Ok(Some(2)));
            take.next(now);
            take.read(Err(Error::new(ErrorKind::Unavailable, "silent directory")));
            assert!(matches!(take.next(now), Step::GiveBack));
            take.gave_back();
            match (deadline, take.next(now)) {
                (None, Step::Pause(p)) => {
                    assert_eq!(p, READ_RETRY);
                    take.paused();
                    assert!(matches!(take.next(now), Step::Enter { .. }));
                }
                (Some(_), Step::Done(Err(e))) => assert_eq!(e.kind(), ErrorKind::Unavailable),
                (_, other) => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn a_lock_delay_settles_and_a_delay_past_the_bound_is_not_acquired() {
        let a = Layout::new(1, ["n1"]).unwrap_or_else(|e| panic!("{e}"));
        let now = Instant::now();
        for outcome in [Ok(()), Err(Error::new(ErrorKind::NotAcquired, "delay"))] {
            let ok = outcome.is_ok();
            let mut take = Take::new(names(&["job"]), Some(now), true, false);
            take.next(now);
            take.entered(entry(&a, 1));
            take.next(now);
            take.acquired(Ok(Some(5)));
            assert!(matches!(take.next(now), Step::Settle { .. }));
            take.settled(outcome);
            if ok {
                assert!(matches!(done(take.next(now)), Ok(Some(_))));
            } else {
                assert!(matches!(take.next(now), Step::GiveBack));
                take.gave_back();
                assert!(matches!(done(take.next(now)), Ok(None)));
            }
        }
    }

    #[test]
    fn a_leader_writes_its_token_before_it_is_handed_over() {
        let a = Layout::new(2, ["n1"]).unwrap_or_else(|e| panic!("{e}"));
        let now = Instant::now();
        let mut take = Take::new(names(&["scheduler"]), None, false, true);
        take.next(now);
        take.entered(entry(&a, 1));
        take.next(now);
        take.acquired(Ok(Some(9)));
        match take.next(now) {
            Step::WriteLeader { token } => assert_eq!(token, FencingToken::new(2, 9)),
            other => panic!("{other:?}"),
        }
        take.written(Ok(()));
        assert!(matches!(done(take.next(now)), Ok(Some(_))));
    }
}
