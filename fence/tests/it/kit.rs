//! The conformance kit passes the reference store and catches each planted bug in a store
//! that is otherwise the reference: a kit that cannot fail proves nothing.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, PoisonError};

use ydb_coordination_fence::kit::{self, Subject};
use ydb_coordination_fence::memory::MemoryStore;
use ydb_coordination_fence::{FencedStore, Outcome, Record, Result, Token, Write, WriteId};

#[tokio::test]
async fn the_reference_store_passes_every_case() {
    let report = kit::run(&MemoryStore::new()).await;
    assert!(report.passed(), "{report}");
    assert_eq!(report.results.len(), kit::CASES.len());
}

/// One bug each, as stores get fencing wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bug {
    /// Refuses a token equal to the mark.
    RefusesEqual,
    /// Never checks the token on a write.
    AcceptsLower,
    /// A claim answers "applied" without raising the mark.
    ClaimWritesNothing,
    /// Reads the mark, compares in the client, then writes: two writers interleave.
    ReadCompareWrite,
    /// Raises the mark at the check, before the write takes effect, and never undoes it.
    MarkBeforeCommit,
    /// Forgets write ids.
    NoWriteIds,
    /// Compares the fencing token alone, not the node incarnation.
    NoIncarnation,
    /// Keeps each part of the token as a double, as Lua numbers are.
    TokenAsDoubles,
}

/// The reference rules, with one bug planted (or none).
struct Planted {
    bug: Option<Bug>,
    names: Mutex<HashMap<String, Entry>>,
}

#[derive(Default)]
struct Entry {
    mark: Option<Token>,
    value: Option<Vec<u8>>,
    applied: HashSet<WriteId>,
}

impl Planted {
    fn new(bug: Option<Bug>) -> Self {
        Self {
            bug,
            names: Mutex::new(HashMap::new()),
        }
    }

    fn has(&self, bug: Bug) -> bool {
        self.bug == Some(bug)
    }

    fn with<T>(&self, name: &str, f: impl FnOnce(&mut Entry) -> T) -> T {
        let mut names = self.names.lock().unwrap_or_else(PoisonError::into_inner);
        f(names.entry(name.to_string()).or_default())
    }

    /// The mark, if it refuses `token`.
    fn stale(&self, mark: Option<Token>, token: Token) -> Option<Token> {
        let mark = mark?;
        let parts = |t: Token| {
            let (i, f) = (t.node_incarnation(), t.fencing());
            [i.plan_step, i.tx_id, f.epoch, f.order]
        };
        let refused = match self.bug {
            Some(Bug::RefusesEqual) => mark >= token,
            Some(Bug::NoIncarnation) => mark.fencing() > token.fencing(),
            Some(Bug::TokenAsDoubles) => {
                let doubles = |t| parts(t).map(|p| p as f64);
                doubles(mark) > doubles(token)
            }
            _ => mark > token,
        };
        refused.then_some(mark)
    }
}

impl FencedStore for Planted {
    async fn claim(&self, name: &str, token: Token) -> Result<Outcome> {
        Ok(self.with(name, |e| match self.stale(e.mark, token) {
            Some(current) => Outcome::Stale { current },
            None => {
                if !self.has(Bug::ClaimWritesNothing) {
                    e.mark = Some(token);
                }
                Outcome::Applied
            }
        }))
    }

    async fn write(&self, name: &str, token: Token, write: Write<'_>) -> Result<Outcome> {
        if self.has(Bug::ReadCompareWrite) {
            let mark = self.with(name, |e| e.mark);
            if let Some(current) = self.stale(mark, token) {
                return Ok(Outcome::Stale { current });
            }
            // Another writer runs here.
            tokio::task::yield_now().await;
            self.with(name, |e| {
                e.mark = Some(token);
                e.value = Some(write.value.to_vec());
            });
            return Ok(Outcome::Applied);
        }
        Ok(self.with(name, |e| {
            let ids = !self.has(Bug::NoWriteIds);
            if ids && write.id.is_some_and(|id| e.applied.contains(&id)) {
                return Outcome::Applied;
            }
            if let Some(current) = self.stale(e.mark, token)
                && !self.has(Bug::AcceptsLower)
            {
                return Outcome::Stale { current };
            }
            e.mark = Some(token);
            e.value = Some(write.value.to_vec());
            if ids {
                e.applied.extend(write.id);
            }
            Outcome::Applied
        }))
    }

    async fn read(&self, name: &str) -> Result<Record> {
        Ok(self.with(name, |e| Record {
            mark: e.mark,
            value: e.value.clone(),
        }))
    }
}

impl Subject for Planted {
    async fn write_abandoned(&self, name: &str, token: Token, _write: Write<'_>) -> Result<()> {
        if self.has(Bug::MarkBeforeCommit) {
            self.with(name, |e| e.mark = Some(token));
        }
        Ok(())
    }
}

/// Each bug fails the case written for it.
#[tokio::test]
async fn each_planted_bug_fails_its_case() {
    let expected = [
        (Bug::RefusesEqual, "equal_token_is_accepted"),
        (Bug::AcceptsLower, "lower_token_is_refused"),
        (
            Bug::ClaimWritesNothing,
            "claim_refuses_the_stale_holder_before_the_new_holder_writes",
        ),
        (
            Bug::ReadCompareWrite,
            "race_of_32_ends_with_the_highest_token_and_its_data",
        ),
        (Bug::MarkBeforeCommit, "abandoned_write_leaves_nothing"),
        (Bug::NoWriteIds, "retried_write_id_applies_once"),
        (
            Bug::NoIncarnation,
            "recreated_node_tokens_order_after_the_old_ones",
        ),
        (Bug::TokenAsDoubles, "wide_tokens_keep_every_bit"),
    ];
    for (bug, case) in expected {
        let report = kit::run(&Planted::new(Some(bug))).await;
        assert!(
            report.failed().contains(&case),
            "{bug:?} passed {case}:\n{report}"
        );
    }
}

/// With no bug planted, the test double passes: the failures above are the bugs'.
#[tokio::test]
async fn the_double_without_a_bug_passes() {
    let report = kit::run(&Planted::new(None)).await;
    assert!(report.passed(), "{report}");
}
