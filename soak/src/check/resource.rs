//! The checks against the real resource's own history (`postgres.jsonl`, `--resource
//! postgres`): the rows PostgreSQL committed to its history table, each in the transaction of
//! the write it records, in the order it accepted them. They judge what the resource kept,
//! not what the writers were told:
//!
//! - **resource-tokens**: the tokens PostgreSQL accepted never decrease per name (a holder's
//!   writes share its token, a later holder's is greater). One that does is a stale holder's
//!   write applied after its successor's: a lost update, what the fence is there to refuse.
//! - **resource-tenure**: every write PostgreSQL accepted belongs to a tenure that had
//!   begun: its writer's lease was granted, with the token the write carried, before the
//!   writer made the write (its invoke, which comes before the write reaches PostgreSQL).

use std::collections::HashMap;

use super::{Check, Report, Violation, is_worker, ts_fmt};
use crate::history::{Event, Kind, Phase};

/// The process of the resource's history.
const RESOURCE: &str = "postgres";

/// Checks the resource's history against the workers'; counts its writes for the summary.
pub(super) fn check(events: &[Event], report: &mut Report) {
    let mut granted: HashMap<(&str, u64), &Event> = HashMap::new();
    let mut invoked: HashMap<(&str, u64), u64> = HashMap::new();
    for e in events.iter().filter(|e| is_worker(&e.process)) {
        match (e.kind, e.phase) {
            (Kind::Acquire, Phase::Ok) => {
                granted.insert((&e.process, e.op), e);
            }
            (Kind::Write, Phase::Invoke) => {
                invoked.insert((&e.process, e.op), e.ts);
            }
            (Kind::Fenced, Phase::Fail) => report.resource.refused += 1,
            (Kind::Fenced, Phase::Unknown) => report.resource.unknown += 1,
            _ => {}
        }
    }
    // The greatest token accepted per name so far, and its writer and op: every write below
    // it is a stale holder's, whatever came between.
    let mut greatest: HashMap<&str, ([u64; 2], &str, u64)> = HashMap::new();
    for e in events {
        if e.process != RESOURCE || e.kind != Kind::Fenced || e.phase != Phase::Ok {
            continue;
        }
        report.resource.accepted += 1;
        let (Some(name), Some(token), Some(writer), Some(op), Some(lease)) = (
            e.name.as_deref(),
            e.token,
            e.target.as_deref(),
            e.target_op,
            e.lease,
        ) else {
            report.violations.push(Violation {
                check: Check::ResourceTenure,
                message: format!("PostgreSQL's history row {} is incomplete", e.seq),
            });
            continue;
        };
        let token = [token[0], token[1]];
        match greatest.get(name) {
            Some(&(top, top_writer, top_op)) if token < top => {
                report.violations.push(Violation {
                    check: Check::ResourceTokens,
                    message: format!(
                        "{name}: PostgreSQL accepted {writer} op {op} with {token:?} after {top_writer} op {top_op} with {top:?} (a lost update)"
                    ),
                });
            }
            _ => {
                greatest.insert(name, (token, writer, op));
            }
        }
        let tenure = |message: String| Violation {
            check: Check::ResourceTenure,
            message: format!("{name}: PostgreSQL accepted {writer} op {op}, {message}"),
        };
        let Some(grant) = granted.get(&(writer, lease)) else {
            report.violations.push(tenure(format!(
                "but its lease (op {lease}) was never granted"
            )));
            continue;
        };
        if grant.token.map(|t| [t[0], t[1]]) != Some(token) {
            report.violations.push(tenure(format!(
                "with {token:?}, but its lease (op {lease}) was granted {:?}",
                grant.token
            )));
        }
        match invoked.get(&(writer, op)) {
            None => report
                .violations
                .push(tenure("a write its writer never made".to_string())),
            Some(&at) if at < grant.ts => report.violations.push(tenure(format!(
                "made at {}, before its lease (op {lease}) was granted at {}",
                ts_fmt(at),
                ts_fmt(grant.ts)
            ))),
            Some(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Check, Params, check};
    use crate::history::{Event, Kind, Phase, What};

    const MS: u64 = 1_000_000;

    /// A history builder: a worker's grants and writes at millisecond times, and the rows
    /// PostgreSQL kept, appended at the end in its order.
    #[derive(Default)]
    struct H {
        events: Vec<Event>,
        rows: Vec<Event>,
        next_op: u64,
    }

    impl H {
        fn op(&mut self) -> u64 {
            self.next_op += 1;
            self.next_op
        }

        fn grant(&mut self, p: &str, name: &str, t: u64, order: u64) -> u64 {
            let op = self.op();
            let e = |phase| {
                Event::new(p, op, Kind::Acquire, phase)
                    .what(What::Mutex)
                    .name(name)
            };
            self.events.push(e(Phase::Invoke).at((t - 1) * MS));
            self.events
                .push(e(Phase::Ok).at(t * MS).token([0, order, 0]));
            op
        }

        /// `p` writes under `lease` with `order` at `t`; PostgreSQL answers `phase`.
        fn write(&mut self, p: &str, lease: u64, order: u64, t: u64, phase: Phase) -> u64 {
            let op = self.op();
            let e = |kind, phase| {
                Event::new(p, op, kind, phase)
                    .lease(lease)
                    .token([0, order, 0])
            };
            self.events.push(e(Kind::Write, Phase::Invoke).at(t * MS));
            self.events.push(e(Kind::Fenced, phase).at((t + 1) * MS));
            op
        }

        /// PostgreSQL's row of `p`'s write `op`.
        fn row(&mut self, p: &str, op: u64, lease: u64, order: u64) {
            let n = self.op();
            self.rows.push(
                Event::new("postgres", n, Kind::Fenced, Phase::Ok)
                    .at(1_000_000 * MS)
                    .name("mutex/m0")
                    .token([0, order, 0])
                    .target(p)
                    .target_op(op)
                    .lease(lease),
            );
        }

        fn check(&self) -> super::super::Report {
            let mut all = self.events.clone();
            all.sort_by_key(|e| e.ts);
            all.extend(self.rows.iter().cloned());
            check(&all, Params::new(std::time::Duration::from_secs(3)))
        }
    }

    #[test]
    fn writes_in_token_order_within_their_tenures_pass() {
        let mut h = H::default();
        let a = h.grant("w0.0", "m0", 10, 5);
        let w1 = h.write("w0.0", a, 5, 20, Phase::Ok);
        let w2 = h.write("w0.0", a, 5, 30, Phase::Ok);
        let b = h.grant("w1.0", "m0", 40, 6);
        let w3 = h.write("w1.0", b, 6, 50, Phase::Ok);
        // The old holder's late write, refused: no row.
        h.write("w0.0", a, 5, 60, Phase::Fail);
        h.row("w0.0", w1, a, 5);
        h.row("w0.0", w2, a, 5);
        h.row("w1.0", w3, b, 6);
        let report = h.check();
        assert_eq!(report.count(Check::ResourceTokens), 0, "{report:?}");
        assert_eq!(report.count(Check::ResourceTenure), 0, "{report:?}");
        assert_eq!((report.resource.accepted, report.resource.refused), (3, 1));
    }

    #[test]
    fn a_stale_write_applied_after_its_successor_is_a_decreasing_token() {
        let mut h = H::default();
        let a = h.grant("w0.0", "m0", 10, 5);
        let b = h.grant("w1.0", "m0", 40, 6);
        let new = h.write("w1.0", b, 6, 50, Phase::Ok);
        let late = h.write("w0.0", a, 5, 60, Phase::Ok);
        let later = h.write("w0.0", a, 5, 70, Phase::Ok);
        h.row("w1.0", new, b, 6);
        h.row("w0.0", late, a, 5);
        // Not below the write before it, but below the successor's: lost as well.
        h.row("w0.0", later, a, 5);
        let report = h.check();
        assert_eq!(report.count(Check::ResourceTokens), 2, "{report:?}");
        assert_eq!(report.count(Check::ResourceTenure), 0, "{report:?}");
    }

    #[test]
    fn a_write_outside_any_begun_tenure_is_reported() {
        let mut h = H::default();
        let a = h.grant("w0.0", "m0", 10, 5);
        // Made before its lease was granted.
        let early = h.write("w0.0", a, 5, 5, Phase::Ok);
        // With another token than its lease's.
        let wrong = h.write("w0.0", a, 9, 20, Phase::Ok);
        h.row("w0.0", early, a, 5);
        // A write nobody made.
        h.row("w0.0", 999, a, 5);
        h.row("w0.0", wrong, a, 9);
        // Under a lease never granted.
        h.row("w2.0", 77, 76, 9);
        let report = h.check();
        assert_eq!(report.count(Check::ResourceTenure), 4, "{report:?}");
        assert_eq!(report.count(Check::ResourceTokens), 0, "{report:?}");
    }
}
