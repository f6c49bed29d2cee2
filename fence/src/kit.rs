//! The conformance kit: the cases every fenced store must pass, generic over
//! [`FencedStore`], to run against your own store as the adapters of this crate run it
//! against their real servers.
//!
//! | case | what it checks |
//! |---|---|
//! | `equal_token_is_accepted` | the same holder writes twice with one token: both applied |
//! | `lower_token_is_refused` | a lower token is stale, with the mark that superseded it, and writes nothing |
//! | `claim_refuses_the_stale_holder_before_the_new_holder_writes` | a claim raises the mark without writing; the old holder is then refused |
//! | `race_of_32_ends_with_the_highest_token_and_its_data` | 32 holders write at once, in shuffled order: the highest token and its value remain |
//! | `abandoned_write_leaves_nothing` | a write abandoned before it takes effect (a killed client) changes neither the mark nor the value, and blocks no one |
//! | `retried_write_id_applies_once` | a write retried with its write id returns its first outcome, even after a newer holder wrote, and is not applied twice |
//! | `recreated_node_tokens_order_after_the_old_ones` | a recreated node's tokens (order ids from 1, a greater incarnation) win over the old node's |
//! | `wide_tokens_keep_every_bit` | tokens that differ only in their lowest bit, in any of their four parts, stay apart |
//!
//! Every case uses names of its own under a random prefix, so the kit can run against a store
//! that keeps earlier runs' marks; each case must finish within
//! [`CASE_TIME_LIMIT`]. The kit needs a Tokio runtime (for that limit).
//!
//! # Examples
//!
//! ```
//! use ydb_coordination_fence::{kit, memory::MemoryStore};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let report = kit::run(&MemoryStore::new()).await;
//! assert!(report.passed(), "{report}");
//! assert_eq!(report.results.len(), kit::CASES.len());
//! # }
//! ```

use std::fmt;
use std::future::Future;
use std::time::Duration;

use futures::future::join_all;
use ydb_coordination::FencingToken;
use ydb_coordination::config::NodeIncarnation;

use crate::error::{Error, Result};
use crate::outcome::Outcome;
use crate::store::{FencedStore, Write};
use crate::token::{Token, WriteId};

/// What the kit needs beyond [`FencedStore`]: a way to kill a write halfway.
pub trait Subject: FencedStore {
    /// Carries a write to the last step before it takes effect (the check done, the value
    /// written, the commit not sent) and abandons it there, as a client killed at that point
    /// would: the connection is dropped, the transaction never committed. A store whose write
    /// is one request abandons it before sending it.
    ///
    /// # Errors
    ///
    /// The store's failures.
    fn write_abandoned(
        &self,
        name: &str,
        token: Token,
        write: Write<'_>,
    ) -> impl Future<Output = Result<()>> + Send;
}

/// The cases, in the order [`run`] runs them.
pub const CASES: [&str; 8] = [
    "equal_token_is_accepted",
    "lower_token_is_refused",
    "claim_refuses_the_stale_holder_before_the_new_holder_writes",
    "race_of_32_ends_with_the_highest_token_and_its_data",
    "abandoned_write_leaves_nothing",
    "retried_write_id_applies_once",
    "recreated_node_tokens_order_after_the_old_ones",
    "wide_tokens_keep_every_bit",
];

/// How long one case may take before it fails as hung.
pub const CASE_TIME_LIMIT: Duration = Duration::from_secs(60);

/// What [`run`] found: one result per case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// Every case's result, in [`CASES`] order.
    pub results: Vec<CaseResult>,
}

/// One case's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaseResult {
    /// The case's name, one of [`CASES`].
    pub case: &'static str,
    /// Why it failed, or `None` if it passed.
    pub failure: Option<String>,
}

impl Report {
    /// Whether every case passed.
    pub fn passed(&self) -> bool {
        self.results.iter().all(|r| r.failure.is_none())
    }

    /// The names of the cases that failed.
    pub fn failed(&self) -> Vec<&'static str> {
        self.results
            .iter()
            .filter(|r| r.failure.is_some())
            .map(|r| r.case)
            .collect()
    }
}

/// One line per case: `ok` or `FAILED` and why.
impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for r in &self.results {
            match &r.failure {
                None => writeln!(f, "ok      {}", r.case)?,
                Some(why) => writeln!(f, "FAILED  {}: {why}", r.case)?,
            }
        }
        Ok(())
    }
}

/// Runs every case against `store`, one after another, each on names of its own.
///
/// # Cancel safety
///
/// Dropping the future stops the kit; a case cut short leaves its names in the store.
pub async fn run<S: Subject>(store: &S) -> Report {
    let prefix = format!("kit-{:016x}-", rand::random::<u64>());
    let mut results = Vec::with_capacity(CASES.len());
    for (i, case) in CASES.into_iter().enumerate() {
        let name = format!("{prefix}{i}");
        let outcome = match i {
            0 => bounded(equal_token_is_accepted(store, &name)).await,
            1 => bounded(lower_token_is_refused(store, &name)).await,
            2 => bounded(claim_refuses_the_stale_holder(store, &name)).await,
            3 => bounded(race_of_32(store, &name)).await,
            4 => bounded(abandoned_write_leaves_nothing(store, &name)).await,
            5 => bounded(retried_write_id_applies_once(store, &name)).await,
            6 => bounded(recreated_node_tokens_order_after_the_old_ones(store, &name)).await,
            _ => bounded(wide_tokens_keep_every_bit(store, &name)).await,
        };
        results.push(CaseResult {
            case,
            failure: outcome.err(),
        });
    }
    Report { results }
}

/// A case's verdict: `Err` says what went wrong.
type Verdict = std::result::Result<(), String>;

async fn bounded(case: impl Future<Output = Verdict>) -> Verdict {
    tokio::time::timeout(CASE_TIME_LIMIT, case)
        .await
        .unwrap_or_else(|_| {
            Err(format!(
                "did not finish within {} s (a write waits on a lock nobody releases?)",
                CASE_TIME_LIMIT.as_secs()
            ))
        })
}

fn t(order: u64) -> Token {
    Token::new(FencingToken::new(0, order))
}

fn failed(what: &str, e: &Error) -> String {
    let mut message = format!("{what}: the store failed: {e}");
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        message.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    message
}

/// `what` must have been applied.
fn applied(result: Result<Outcome>, what: &str) -> Verdict {
    match result {
        Ok(Outcome::Applied) => Ok(()),
        Ok(Outcome::Stale { current }) => Err(format!(
            "{what} was refused as stale (mark {current}); it must be applied"
        )),
        Err(e) => Err(failed(what, &e)),
    }
}

/// `what` must have been refused, the mark being `mark`.
fn stale(result: Result<Outcome>, what: &str, mark: Token) -> Verdict {
    match result {
        Ok(Outcome::Stale { current }) if current == mark => Ok(()),
        Ok(Outcome::Stale { current }) => Err(format!(
            "{what} was refused with the mark {current}; the mark is {mark}"
        )),
        Ok(Outcome::Applied) => Err(format!(
            "{what} was applied; the mark is {mark}, so it must be refused as stale"
        )),
        Err(e) => Err(failed(what, &e)),
    }
}

/// The store must hold `mark` and `value` for `name`.
async fn holds<S: Subject>(s: &S, name: &str, mark: Token, value: &[u8], when: &str) -> Verdict {
    let record = s.read(name).await.map_err(|e| failed("a read", &e))?;
    if record.mark != Some(mark) {
        return Err(format!(
            "{when}, the mark is {}; it must be {mark}",
            record.mark.map_or("none".to_string(), |m| m.to_string())
        ));
    }
    if record.value.as_deref() != Some(value) {
        return Err(format!(
            "{when}, the value is {:?}; it must be {:?}",
            record.value.as_deref().map(String::from_utf8_lossy),
            String::from_utf8_lossy(value)
        ));
    }
    Ok(())
}

async fn equal_token_is_accepted<S: Subject>(s: &S, n: &str) -> Verdict {
    applied(
        s.write(n, t(5), Write::new(b"first")).await,
        "a write with token 5",
    )?;
    applied(
        s.write(n, t(5), Write::new(b"second")).await,
        "a second write with the same token 5",
    )?;
    holds(s, n, t(5), b"second", "after two writes with token 5").await
}

async fn lower_token_is_refused<S: Subject>(s: &S, n: &str) -> Verdict {
    applied(
        s.write(n, t(7), Write::new(b"seven")).await,
        "a write with token 7",
    )?;
    stale(
        s.write(n, t(6), Write::new(b"six")).await,
        "a write with the lower token 6",
        t(7),
    )?;
    holds(s, n, t(7), b"seven", "after token 6 was refused").await?;
    applied(
        s.write(n, t(8), Write::new(b"eight")).await,
        "a write with token 8",
    )?;
    holds(s, n, t(8), b"eight", "after a write with token 8").await
}

async fn claim_refuses_the_stale_holder<S: Subject>(s: &S, n: &str) -> Verdict {
    let (old, new) = (t(1), t(2));
    applied(
        s.write(n, old, Write::new(b"old-1")).await,
        "the old holder's write",
    )?;
    applied(s.claim(n, new).await, "the new holder's claim")?;
    holds(
        s,
        n,
        new,
        b"old-1",
        "after the claim (which writes no data)",
    )
    .await?;
    stale(
        s.write(n, old, Write::new(b"old-2")).await,
        "the old holder's write after the claim",
        new,
    )?;
    stale(s.claim(n, old).await, "a claim with the old token", new)?;
    applied(s.claim(n, new).await, "the new holder's claim again")?;
    applied(
        s.write(n, new, Write::new(b"new")).await,
        "the new holder's write",
    )?;
    holds(s, n, new, b"new", "after the new holder's write").await
}

async fn race_of_32<S: Subject>(s: &S, n: &str) -> Verdict {
    // 13 is prime to 32: every token once, the highest neither first nor last.
    let tokens: Vec<u64> = (0..32).map(|i| (i * 13) % 32 + 1).collect();
    let values: Vec<String> = tokens.iter().map(u64::to_string).collect();
    let writes = tokens
        .iter()
        .zip(&values)
        .map(|(&order, value)| s.write(n, t(order), Write::new(value.as_bytes())));
    let outcomes = join_all(writes).await;
    for (&order, outcome) in tokens.iter().zip(outcomes) {
        match outcome {
            Ok(Outcome::Applied) => {}
            Ok(Outcome::Stale { current }) if current > t(order) && order < 32 => {}
            Ok(Outcome::Stale { current }) => {
                return Err(format!(
                    "the racing write with token {order} was refused with the mark {current}, which is not greater"
                ));
            }
            Err(e) => return Err(failed(&format!("the racing write with token {order}"), &e)),
        }
    }
    holds(s, n, t(32), b"32", "after 32 racing writes").await
}

async fn abandoned_write_leaves_nothing<S: Subject>(s: &S, n: &str) -> Verdict {
    applied(
        s.write(n, t(3), Write::new(b"kept")).await,
        "a write with token 3",
    )?;
    s.write_abandoned(n, t(9), Write::new(b"lost"))
        .await
        .map_err(|e| failed("the abandoned write with token 9", &e))?;
    holds(
        s,
        n,
        t(3),
        b"kept",
        "after a write with token 9 was abandoned",
    )
    .await?;
    applied(
        s.write(n, t(4), Write::new(b"after")).await,
        "a write with token 4 after token 9's write was abandoned",
    )?;
    holds(s, n, t(4), b"after", "after the write with token 4").await
}

async fn retried_write_id_applies_once<S: Subject>(s: &S, n: &str) -> Verdict {
    let first = WriteId::random();
    let once = Write::new(b"first").id(first);
    applied(s.write(n, t(5), once).await, "a write with an id")?;
    applied(
        s.write(n, t(5), Write::new(b"second")).await,
        "the holder's next write",
    )?;
    applied(
        s.write(n, t(5), once).await,
        "the first write retried with its id",
    )?;
    holds(s, n, t(5), b"second", "after the first write was retried").await?;
    applied(
        s.write(n, t(6), Write::new(b"newer")).await,
        "a newer holder's write",
    )?;
    applied(
        s.write(n, t(5), once).await,
        "the first write retried with its id after a newer holder wrote",
    )?;
    holds(
        s,
        n,
        t(6),
        b"newer",
        "after the first write was retried again",
    )
    .await?;
    stale(
        s.write(n, t(5), Write::new(b"late").id(WriteId::random()))
            .await,
        "a new write of the old holder, with a new id",
        t(6),
    )
}

async fn recreated_node_tokens_order_after_the_old_ones<S: Subject>(s: &S, n: &str) -> Verdict {
    let old_node = NodeIncarnation {
        plan_step: 1_700_000_000_000,
        tx_id: 281_474_976_710_700,
    };
    let new_node = NodeIncarnation {
        plan_step: 1_700_000_360_000,
        tx_id: 281_474_976_710_701,
    };
    let old = |order| t(order).incarnation(old_node);
    let new = |order| t(order).incarnation(new_node);
    applied(
        s.write(n, old(900), Write::new(b"old node")).await,
        "a write of the old node's holder",
    )?;
    applied(
        s.write(n, new(1), Write::new(b"new node")).await,
        "a write of the recreated node's first holder (order id 1)",
    )?;
    stale(
        s.write(n, old(901), Write::new(b"late")).await,
        "a write of the old node's next holder (order id 901)",
        new(1),
    )?;
    stale(
        s.write(n, t(5_000), Write::new(b"bare")).await,
        "a write with a token without incarnation",
        new(1),
    )?;
    applied(
        s.claim(n, new(2)).await,
        "the recreated node's next holder's claim",
    )?;
    holds(
        s,
        n,
        new(2),
        b"new node",
        "after the recreated node's holders",
    )
    .await
}

async fn wide_tokens_keep_every_bit<S: Subject>(s: &S, n: &str) -> Verdict {
    let max = u64::MAX;
    let inc = |plan_step, tx_id| NodeIncarnation { plan_step, tx_id };
    let token = |i, epoch, order| Token::new(FencingToken::new(epoch, order)).incarnation(i);
    let top = token(inc(max - 1, max), max, max);
    applied(
        s.write(n, top, Write::new(b"top")).await,
        "a write with the widest token",
    )?;
    let lower = [
        ("its order id", token(inc(max - 1, max), max, max - 1)),
        ("its epoch", token(inc(max - 1, max), max - 1, max)),
        (
            "its incarnation's transaction id",
            token(inc(max - 1, max - 1), max, max),
        ),
        (
            "its incarnation's plan step",
            token(inc(max - 2, max), max, max),
        ),
    ];
    for (part, low) in lower {
        stale(
            s.write(n, low, Write::new(b"low")).await,
            &format!("a write with a token 1 lower in {part}"),
            top,
        )?;
    }
    holds(s, n, top, b"top", "after the lower tokens were refused").await
}
