//! Unit tests of the session core, without a runtime: inputs in, effects out.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::config::{AcquireOptions, DescribeOptions, SessionOptions, WatchOptions};
use crate::proto::{SemaphoreDescriptionProto, SemaphoreSessionProto, session_request as rq};

const SID: u64 = 7;
const MS: Duration = Duration::from_millis(1);
const S: Duration = Duration::from_secs(1);

/// A core, its root token and the time it attached.
struct Harness {
    core: SessionCore,
    token: CancellationToken,
    t0: Instant,
    effects: Vec<Effect>,
}

impl Harness {
    fn new() -> Self {
        Self::with(SessionOptions::new())
    }

    fn with(options: SessionOptions) -> Self {
        let t0 = Instant::now();
        let token = CancellationToken::new();
        let cfg = CoreConfig {
            path: "/local/app".into(),
            options,
            protection_key: vec![1; 16],
            session_id: SID,
            seq_no: 1,
        };
        let core = SessionCore::new(cfg, token.clone(), Arc::new(Terminal::default()), t0, t0);
        Self {
            core,
            token,
            t0,
            effects: Vec::new(),
        }
    }

    fn at(&self, d: Duration) -> Instant {
        self.t0 + d
    }

    /// Collects the effects of the last inputs (the driver's `check_deadline` included).
    fn run(&mut self, now: Instant) -> &[Effect] {
        self.core.check_deadline(now);
        self.effects = self.core.take_effects();
        &self.effects
    }

    fn acquire(&mut self, now: Instant, caller: CallerId, name: &str, opts: AcquireOptions) {
        self.core.command(
            now,
            Command::Acquire(AcquireCmd {
                caller,
                name: name.into(),
                opts,
                requested_at: now,
            }),
        );
    }

    /// The session saw the queue of "job" short, so a queued acquire reads the waiters.
    fn short_queue(&mut self) {
        let now = self.at(Duration::ZERO);
        self.core.hints.learn("job", 0, now);
    }

    /// Caller 1 acquires "job" at 1 ms and the server queues it (answered pending).
    fn queued_lock(&mut self) -> Instant {
        let now = self.at(MS);
        self.acquire(now, 1, "job", lock());
        self.run(now);
        self.server(now, pending(1));
        self.run(now);
        now
    }

    /// [`Self::queued_lock`] where the queue was short lately: the describe behind the
    /// acquire (req 2) reads the waiters, and the pending answer sends nothing more.
    fn queued_lock_reading_waiters(&mut self) -> Instant {
        self.short_queue();
        let now = self.at(MS);
        self.acquire(now, 1, "job", lock());
        self.run(now);
        assert_eq!(
            describes(self),
            vec![(2, true)],
            "behind the acquire, with waiters"
        );
        self.server(now, pending(1));
        let effects = self.run(now);
        assert!(
            effects.iter().all(|e| !matches!(e, Effect::Send(_))),
            "nothing more"
        );
        now
    }

    fn server(&mut self, now: Instant, r: rs::Response) {
        self.core
            .inbound(now, SessionResponse { response: Some(r) });
    }

    fn sent(&self) -> Vec<&rq::Request> {
        self.effects
            .iter()
            .filter_map(|e| match e {
                Effect::Send(r) => Some(r),
                _ => None,
            })
            .collect()
    }

    fn answers(&self) -> Vec<(CallerId, &Answer)> {
        self.effects
            .iter()
            .filter_map(|e| match e {
                Effect::Answer(c, a) => Some((*c, a)),
                _ => None,
            })
            .collect()
    }

    /// Acquires `name` for `caller` and answers as the server does for a free semaphore;
    /// returns the lease id and token of the grant.
    fn hold(
        &mut self,
        now: Instant,
        caller: CallerId,
        name: &str,
        order_id: u64,
    ) -> (u64, CancellationToken) {
        self.hold_with(now, caller, name, order_id, lock())
    }

    /// [`Self::hold`] with the acquire's options.
    fn hold_with(
        &mut self,
        now: Instant,
        caller: CallerId,
        name: &str,
        order_id: u64,
        opts: AcquireOptions,
    ) -> (u64, CancellationToken) {
        self.acquire(now, caller, name, opts);
        self.run(now);
        let ids: Vec<u64> = self.sent().iter().map(|r| req_id(r)).collect();
        let [acquire, describe] = ids[..] else {
            panic!("expected an acquire and a describe, got {:?}", self.effects);
        };
        self.server(now, acquired(acquire, true));
        self.server(now, described(describe, &[(SID, order_id)]));
        self.run(now);
        let grant = self.grant(caller).expect("granted");
        (grant.held.lease(), grant.held.token(&self.token))
    }

    /// The grant answered to `caller` in the last effects.
    fn grant(&self, caller: CallerId) -> Option<&Grant> {
        self.answers().into_iter().find_map(|(c, a)| match a {
            Answer::Acquire(Ok(Some(g))) if c == caller => Some(g),
            _ => None,
        })
    }
}

fn req_id(r: &rq::Request) -> u64 {
    match r {
        rq::Request::AcquireSemaphore(a) => a.req_id,
        rq::Request::ReleaseSemaphore(a) => a.req_id,
        rq::Request::DescribeSemaphore(a) => a.req_id,
        rq::Request::CreateSemaphore(a) => a.req_id,
        rq::Request::UpdateSemaphore(a) => a.req_id,
        rq::Request::DeleteSemaphore(a) => a.req_id,
        _ => 0,
    }
}

fn kind_of(r: &rq::Request) -> &'static str {
    match r {
        rq::Request::AcquireSemaphore(_) => "acquire",
        rq::Request::ReleaseSemaphore(_) => "release",
        rq::Request::DescribeSemaphore(_) => "describe",
        rq::Request::SessionStop(_) => "stop",
        rq::Request::Ping(_) => "ping",
        rq::Request::Pong(_) => "pong",
        _ => "other",
    }
}

fn acquired(req_id: u64, acquired: bool) -> rs::Response {
    rs::Response::AcquireSemaphoreResult(rs::AcquireSemaphoreResult {
        req_id,
        status: StatusCode::Success as i32,
        issues: Vec::new(),
        acquired,
    })
}

fn pending(req_id: u64) -> rs::Response {
    rs::Response::AcquireSemaphorePending(rs::AcquireSemaphorePending { req_id })
}

fn released(req_id: u64) -> rs::Response {
    rs::Response::ReleaseSemaphoreResult(rs::ReleaseSemaphoreResult {
        req_id,
        status: StatusCode::Success as i32,
        issues: Vec::new(),
        released: true,
    })
}

/// A describe answer listing `owners` as (session id, order id).
fn described(req_id: u64, owners: &[(u64, u64)]) -> rs::Response {
    described_queue(req_id, owners, &[])
}

/// A describe answer listing `owners` and `waiters` as (session id, order id).
fn described_queue(req_id: u64, owners: &[(u64, u64)], waiters: &[(u64, u64)]) -> rs::Response {
    let entries = |list: &[(u64, u64)]| {
        list.iter()
            .map(|&(session_id, order_id)| SemaphoreSessionProto {
                session_id,
                order_id,
                count: 1,
                ..Default::default()
            })
            .collect()
    };
    rs::Response::DescribeSemaphoreResult(rs::DescribeSemaphoreResult {
        req_id,
        status: StatusCode::Success as i32,
        issues: Vec::new(),
        semaphore_description: Some(SemaphoreDescriptionProto {
            name: "job".into(),
            limit: 1,
            count: owners.len() as u64,
            owners: entries(owners),
            waiters: entries(waiters),
            ..Default::default()
        }),
        watch_added: false,
    })
}

fn lock() -> AcquireOptions {
    AcquireOptions::exclusive().ephemeral(true)
}

// ---- scenarios -----------------------------------------------------------------------------

#[test]
fn an_immediate_grant_carries_the_order_id_of_the_pipelined_describe() {
    let mut h = Harness::new();
    let now = h.at(MS);
    h.acquire(now, 1, "job", lock());
    h.run(now);
    let sent: Vec<_> = h.sent().iter().map(|r| (kind_of(r), req_id(r))).collect();
    assert_eq!(sent, vec![("acquire", 1), ("describe", 2)]);
    h.server(now, acquired(1, true));
    assert!(h.run(now).is_empty(), "the grant waits for the order id");
    h.server(now, described(2, &[(SID, 42)]));
    h.run(now);
    let grant = h.grant(1).expect("granted");
    assert_eq!(grant.held.order_id, 42);
    assert!(!grant.held.is_lost(&h.token));
}

#[test]
fn an_unfenced_acquire_and_its_data_updates_read_nobody_else() {
    let mut h = Harness::new();
    let now = h.at(MS);
    h.acquire(now, 1, "job", lock().timeout(Duration::ZERO).unfenced());
    h.run(now);
    let sent: Vec<_> = h.sent().iter().map(|r| (kind_of(r), req_id(r))).collect();
    assert_eq!(sent, vec![("acquire", 1)], "no describe behind it");
    h.server(now, acquired(1, true));
    h.run(now);
    let grant = h.grant(1).expect("granted on the grant alone");
    assert_eq!(grant.held.order_id, 0);
    let lease = grant.held.lease();
    h.core.control(
        now,
        Control::SetData {
            name: "job".into(),
            lease,
            data: b"new".to_vec(),
            caller: 2,
        },
    );
    h.run(now);
    let sent: Vec<_> = h.sent().iter().map(|r| (kind_of(r), req_id(r))).collect();
    assert_eq!(sent, vec![("acquire", 2)], "the update alone, no check");
    h.server(now, acquired(2, true));
    h.run(now);
    assert_eq!(h.done(2), Some(Ok(())));
}

/// The describes `h` sent last, as (req_id, include_waiters).
fn describes(h: &Harness) -> Vec<(u64, bool)> {
    h.sent()
        .iter()
        .filter_map(|r| match r {
            rq::Request::DescribeSemaphore(d) if d.include_owners => {
                Some((d.req_id, d.include_waiters))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn a_queued_acquire_reads_its_order_id_from_the_owners_after_its_grant() {
    let mut h = Harness::new();
    let now = h.at(MS);
    h.acquire(now, 1, "job", lock());
    h.run(now);
    assert_eq!(
        describes(&h),
        vec![(2, false)],
        "owners only behind the acquire"
    );
    h.server(now, pending(1));
    h.run(now);
    assert!(
        describes(&h).is_empty(),
        "a queue never seen is not read: it may be long"
    );
    h.server(now, described(2, &[(99, 41)]));
    assert!(h.run(now).is_empty(), "still waiting for the grant");
    let later = h.at(S);
    h.server(later, acquired(1, true));
    h.run(later);
    assert_eq!(
        describes(&h),
        vec![(3, false)],
        "the owners, after the grant"
    );
    assert!(h.grant(1).is_none(), "the grant waits for its order id");
    let shown = later + MS;
    h.server(shown, described(3, &[(SID, 43)]));
    h.run(shown);
    let grant = h.grant(1).map(|g| (g.held.order_id, g.held.since));
    assert_eq!(
        grant,
        Some((43, later)),
        "the lease counts from the server's grant"
    );
}

/// What one queued acquire sent for its order id: whether the describe behind it read the
/// waiters, how many describes it sent while queued, and how many after the grant.
#[derive(Debug, PartialEq, Eq)]
struct Reads {
    behind_reads_waiters: bool,
    while_queued: usize,
    after_grant: usize,
}

/// Queues caller `caller` on "job" at `now` behind the owner (99, `floor`), grants it and
/// answers the describes, then releases; returns what it sent for its order id.
fn queue_and_grant(
    h: &mut Harness,
    now: Instant,
    caller: CallerId,
    floor: u64,
    order_id: u64,
) -> Reads {
    let ahead: Vec<(u64, u64)> = (floor + 1..order_id).map(|o| (1_000 + o, o)).collect();
    let queue = [ahead, vec![(SID, order_id)]].concat();
    h.acquire(now, caller, "job", lock());
    h.run(now);
    let [(behind, behind_reads_waiters)] = describes(h)[..] else {
        panic!("expected an acquire and a describe, got {:?}", h.effects);
    };
    let [acquire, _] = h.sent().iter().map(|r| req_id(r)).collect::<Vec<_>>()[..] else {
        panic!("expected an acquire and a describe, got {:?}", h.effects);
    };
    h.server(now, pending(acquire));
    h.run(now);
    let waiting = describes(h);
    let answer = |req, waiters| {
        if waiters {
            described_queue(req, &[(99, floor)], &queue)
        } else {
            described(req, &[(99, floor)])
        }
    };
    h.server(now, answer(behind, behind_reads_waiters));
    for &(req, waiters) in &waiting {
        assert!(waiters);
        h.server(now, answer(req, waiters));
    }
    h.run(now);
    h.server(now, acquired(acquire, true));
    h.run(now);
    let after = describes(h);
    if let [(req, false)] = after[..] {
        h.server(now, described(req, &[(SID, order_id)]));
        h.run(now);
    }
    let grant = h.grant(caller).expect("granted");
    assert_eq!(grant.held.order_id, order_id);
    let lease = grant.held.lease();
    h.core.control(
        now,
        Control::Release {
            name: "job".into(),
            lease,
            caller: Some(caller),
        },
    );
    h.run(now);
    Reads {
        behind_reads_waiters,
        while_queued: waiting.len(),
        after_grant: after.len(),
    }
}

/// A queued acquire that reads its waiter entry: in the describe behind it, nothing more.
const WAITERS: Reads = Reads {
    behind_reads_waiters: true,
    while_queued: 0,
    after_grant: 0,
};

/// A queued acquire that reads the owners after its grant.
const OWNERS: Reads = Reads {
    behind_reads_waiters: false,
    while_queued: 0,
    after_grant: 1,
};

#[test]
fn a_queued_acquire_reads_its_waiter_entry_where_the_last_queue_was_short() {
    // A session timeout long enough for the jump past FRESH_FOR without pings.
    let mut h = Harness::with(SessionOptions::new().timeout(hints::FRESH_FOR * 10));
    let now = h.at(MS);
    // The first queue: nothing known, the owners after the grant; 2 waiters were ahead.
    assert_eq!(queue_and_grant(&mut h, now, 1, 40, 43), OWNERS);
    // Seen short: the describe behind the next acquire reads the waiters too, and neither
    // the wait nor the grant sends another.
    assert_eq!(
        queue_and_grant(&mut h, now, 2, 50, 50 + hints::SHORT_QUEUE + 2),
        WAITERS,
        "the waiters are read, not the owners"
    );
    // That list had more than SHORT_QUEUE waiters ahead: the next one is not read.
    assert_eq!(queue_and_grant(&mut h, now, 3, 100, 105), OWNERS);
    // The owners after that grant bound the queue at 4: read again, and the list shows 99
    // waiters ahead.
    assert_eq!(queue_and_grant(&mut h, now, 4, 200, 300), WAITERS);
    assert_eq!(queue_and_grant(&mut h, now, 5, 400, 401), OWNERS);
    // That one bounded the queue at 0, but what it saw is stale by the next acquire.
    let later = now + hints::FRESH_FOR;
    assert_eq!(queue_and_grant(&mut h, later, 6, 500, 501), OWNERS);
    assert_eq!(
        queue_and_grant(&mut h, later, 7, 600, 601),
        WAITERS,
        "seen short again, just now"
    );
}

#[test]
fn a_waiter_entry_read_behind_the_acquire_before_its_pending_answer_is_enough() {
    let mut h = Harness::new();
    h.short_queue();
    let now = h.at(MS);
    h.acquire(now, 1, "job", lock());
    h.run(now);
    assert_eq!(describes(&h), vec![(2, true)]);
    // The describe's answer overtakes the pending one: it shows our waiter entry.
    h.server(now, described_queue(2, &[(99, 41)], &[(8, 42), (SID, 43)]));
    h.server(now, pending(1));
    let effects = h.run(now);
    assert!(
        effects.iter().all(|e| !matches!(e, Effect::Send(_))),
        "nothing more is sent: {effects:?}"
    );
    h.server(now, acquired(1, true));
    let effects = h.run(now);
    assert!(effects.iter().all(|e| !matches!(e, Effect::Send(_))));
    assert_eq!(h.grant(1).map(|g| g.held.order_id), Some(43));
}

#[test]
fn a_describe_behind_the_acquire_that_missed_us_is_followed_by_a_waiter_read_when_queued() {
    let mut h = Harness::new();
    h.short_queue();
    let now = h.at(MS);
    h.acquire(now, 1, "job", lock());
    h.run(now);
    // Answered before the pending one, and without us: the waiters are read again.
    h.server(now, described_queue(2, &[(99, 41)], &[(8, 42)]));
    h.server(now, pending(1));
    h.run(now);
    assert_eq!(describes(&h), vec![(3, true)]);
    h.server(now, described_queue(3, &[(99, 41)], &[(8, 42), (SID, 44)]));
    h.run(now);
    h.server(now, acquired(1, true));
    h.run(now);
    assert_eq!(h.grant(1).map(|g| g.held.order_id), Some(44));
}

#[test]
fn a_try_acquire_reads_no_waiters_behind_it_even_where_the_queue_was_short() {
    let mut h = Harness::new();
    h.short_queue();
    let now = h.at(MS);
    h.acquire(now, 1, "job", lock().timeout(Duration::ZERO));
    h.run(now);
    assert_eq!(describes(&h), vec![(2, false)], "a try never waits");
}

#[test]
fn a_grant_whose_owners_describe_fails_is_given_back_with_the_describe_error() {
    // A failed describe ends the acquire with its own kind; NOT_FOUND says the semaphore is
    // gone, so the ownership ended (Aborted). Either way the grant is released.
    for (status, kind) in [
        (StatusCode::Unauthorized, ErrorKind::Unauthorized),
        (StatusCode::NotFound, ErrorKind::Aborted),
    ] {
        let mut h = Harness::new();
        let now = h.queued_lock();
        h.server(now, described(2, &[(99, 41)]));
        h.server(now, acquired(1, true));
        h.run(now);
        assert_eq!(describes(&h), vec![(3, false)]);
        h.server(
            now,
            rs::Response::DescribeSemaphoreResult(rs::DescribeSemaphoreResult {
                req_id: 3,
                status: status as i32,
                ..Default::default()
            }),
        );
        h.run(now);
        assert!(
            matches!(h.answers()[..], [(1, Answer::Acquire(Err(e)))] if e.kind() == kind),
            "{status:?}: {:?}",
            h.effects
        );
        let sent: Vec<_> = h.sent().iter().map(|r| kind_of(r)).collect();
        assert_eq!(
            sent,
            vec!["release"],
            "what the server granted is given back"
        );
    }
}

#[test]
fn a_waiter_order_id_read_before_a_reattach_is_read_again_after_it() {
    let mut h = Harness::new();
    let now = h.queued_lock_reading_waiters();
    h.server(now, described_queue(2, &[(99, 41)], &[(SID, 43)]));
    h.run(now);
    let back = h.reattach(h.at(S));
    let sent: Vec<_> = h.sent().iter().map(|r| (kind_of(r), req_id(r))).collect();
    assert_eq!(
        sent,
        vec![("acquire", 1), ("describe", 3)],
        "the acquire, then a describe"
    );
    assert_eq!(describes(&h), vec![(3, true)]);
    // Meanwhile the server dropped the old waiter: the resend made a new one, and granted it.
    h.server(back, acquired(1, true));
    assert!(h.run(back).is_empty(), "the old order id is not used");
    h.server(back, described(3, &[(SID, 50)]));
    h.run(back);
    assert_eq!(h.grant(1).map(|g| g.held.order_id), Some(50));
}

#[test]
fn a_waiter_that_reads_no_waiter_list_learns_its_order_id_after_the_grant_past_a_reattach() {
    let mut h = Harness::new();
    let now = h.queued_lock();
    h.server(now, described(2, &[(99, 41)]));
    h.run(now);
    let back = h.reattach(h.at(S));
    let sent: Vec<_> = h.sent().iter().map(|r| kind_of(r)).collect();
    assert_eq!(sent, vec!["acquire"], "the acquire alone: no waiter list");
    h.server(back, acquired(1, true));
    h.run(back);
    assert_eq!(describes(&h), vec![(3, false)]);
    h.server(back, described(3, &[(SID, 50)]));
    h.run(back);
    assert_eq!(h.grant(1).map(|g| g.held.order_id), Some(50));
}

#[test]
fn a_grant_after_describes_that_did_not_list_us_reads_the_order_id_again() {
    let mut h = Harness::new();
    let now = h.queued_lock_reading_waiters();
    // It does not list us (someone else owns it, and the waiter list is empty).
    h.server(now, described(2, &[(99, 41)]));
    assert!(h.run(now).is_empty());
    let later = h.at(S);
    h.server(later, acquired(1, true));
    h.run(later);
    assert_eq!(
        describes(&h),
        vec![(3, false)],
        "one more describe after the grant, of the owners"
    );
    h.server(later, described(3, &[(SID, 43)]));
    h.run(later);
    assert_eq!(h.grant(1).map(|g| g.held.order_id), Some(43));
}

#[test]
fn a_second_acquire_of_a_held_name_waits_locally_until_the_release() {
    let mut h = Harness::new();
    let now = h.at(MS);
    let (lease, _) = h.hold(now, 1, "job", 5);
    h.acquire(now, 2, "job", lock());
    assert!(
        h.run(now).is_empty(),
        "nothing is sent while the name is held"
    );
    h.core.control(
        now,
        Control::Release {
            name: "job".into(),
            lease,
            caller: None,
        },
    );
    h.run(now);
    let sent: Vec<_> = h.sent().iter().map(|r| kind_of(r)).collect();
    assert_eq!(sent, vec!["release", "acquire", "describe"]);
}

#[test]
fn a_cancel_racing_a_grant_releases_and_answers_cancelled_once() {
    let mut h = Harness::new();
    let now = h.at(MS);
    h.acquire(now, 1, "job", lock());
    h.run(now);
    h.core.control(
        now,
        Control::CancelAcquire {
            name: "job".into(),
            caller: 1,
        },
    );
    h.run(now);
    let sent: Vec<_> = h.sent().iter().map(|r| kind_of(r)).collect();
    assert_eq!(
        sent,
        vec!["release"],
        "the waiter (or its grant) is withdrawn"
    );
    assert!(matches!(
        h.answers().as_slice(),
        [(1, Answer::Acquire(Err(e)))] if e.kind() == ErrorKind::Cancelled
    ));
    // The grant the server had already decided arrives: answered for nobody.
    h.server(now, acquired(1, true));
    h.server(now, described(2, &[(SID, 5)]));
    assert!(h.run(now).is_empty());
    let release = 3;
    h.server(now, released(release));
    assert!(h.run(now).is_empty());
    assert!(h.core.is_empty(), "nothing left behind");
}

#[test]
fn a_grant_the_caller_no_longer_takes_is_released() {
    let mut h = Harness::new();
    let now = h.at(MS);
    let (lease, token) = h.hold(now, 1, "job", 5);
    h.core.grant_refused(now, "job".into(), lease);
    h.run(now);
    assert!(token.is_cancelled());
    let sent: Vec<_> = h.sent().iter().map(|r| kind_of(r)).collect();
    assert_eq!(sent, vec!["release"]);
}

#[test]
fn close_while_acquiring_fails_the_acquire_and_ignores_a_late_grant() {
    let mut h = Harness::new();
    let now = h.at(MS);
    h.acquire(now, 1, "job", lock());
    h.run(now);
    h.core.command(now, Command::Close { caller: 2 });
    h.run(now);
    assert!(matches!(
        h.answers().as_slice(),
        [(1, Answer::Acquire(Err(e)))] if e.kind() == ErrorKind::SessionClosed
    ));
    let sent: Vec<_> = h.sent().iter().map(|r| kind_of(r)).collect();
    assert_eq!(sent, vec!["stop"]);
    assert!(
        h.token.is_cancelled(),
        "tokens fire before the server is asked"
    );
    h.server(now, acquired(1, true));
    assert!(
        h.run(now).is_empty(),
        "a grant racing the stop is never returned"
    );
    h.server(
        now,
        rs::Response::SessionStopped(rs::SessionStopped { session_id: SID }),
    );
    h.run(now);
    assert!(matches!(h.answers().as_slice(), [(2, Answer::Closed)]));
    assert_eq!(h.core.state, SessionState::Closed);
    assert!(h.core.is_done() && h.core.is_empty());
}

#[test]
fn requests_are_replayed_in_order_after_a_reattach() {
    let mut h = Harness::new();
    let now = h.at(MS);
    h.acquire(now, 1, "a", lock());
    h.acquire(now, 2, "b", lock().timeout(10 * S));
    h.core.command(
        now,
        Command::Describe {
            caller: 3,
            name: "c".into(),
            opts: DescribeOptions::new(),
        },
    );
    h.run(now);
    let before: Vec<_> = h.sent().iter().map(|r| req_id(r)).collect();
    assert_eq!(before, vec![1, 2, 3, 4, 5]);
    let lost = h.at(S);
    h.core
        .stream_lost(lost, &Error::new(ErrorKind::Transport, "cut"));
    h.run(lost);
    assert!(matches!(h.effects[0], Effect::DropStream));
    assert!(
        matches!(
            h.effects[1],
            Effect::State(SessionState::Reattaching { .. })
        ),
        "{:?}",
        h.effects
    );
    h.core.tick(lost);
    h.run(lost);
    let Some(Effect::Dial { start, .. }) = h.effects.first() else {
        panic!("expected a dial, got {:?}", h.effects);
    };
    assert_eq!(
        (start.session_id, start.seq_no, start.protection_key.clone()),
        (SID, 2, vec![1; 16])
    );
    let back = h.at(2 * S);
    assert!(h.core.attached(back, SID, back));
    h.run(back);
    let after: Vec<_> = h.sent().iter().map(|r| req_id(r)).collect();
    assert_eq!(after, before, "the same requests, in the same order");
    // The timed acquire goes out with the time it has left.
    let left = h.sent().iter().find_map(|r| match r {
        rq::Request::AcquireSemaphore(a) if a.name == "b" => Some(a.timeout_millis),
        _ => None,
    });
    assert_eq!(left, Some(8_001), "10 s asked at 1 ms, resent at 2 s");
}

#[test]
fn the_deadline_counts_from_the_send_time_of_the_last_answered_request() {
    let mut h = Harness::new();
    // A ping goes out at 2 s and is answered at 2.5 s: contact is confirmed as of 2 s.
    let ping_at = h.at(2 * S);
    h.core.tick(ping_at);
    h.run(ping_at);
    let opaque = match h.sent().as_slice() {
        [rq::Request::Ping(p)] => p.opaque,
        other => panic!("expected a ping, got {other:?}"),
    };
    let answered = h.at(2500 * MS);
    h.server(answered, rs::Response::Pong(rs::PingPong { opaque }));
    h.run(answered);
    // The stream then goes silent; timeout 10 s, margin 1 s: tokens fire at 2 + 9 = 11 s.
    assert_eq!(h.core.live.deadline(), h.at(11 * S));
    h.run(h.at(11 * S) - MS);
    assert!(!h.token.is_cancelled());
    h.run(h.at(11 * S));
    assert!(h.token.is_cancelled());
    assert_eq!(h.core.state, SessionState::Expired);
}

/// A stream down at the deadline may be back within a round trip and a moment (the rule of
/// every bounded call): only then does the caller hear that the node did not answer.
#[test]
fn an_acquire_times_out_one_round_trip_past_its_deadline_while_the_stream_is_down() {
    let mut h = Harness::new();
    let now = h.at(MS);
    h.acquire(now, 1, "job", lock().timeout(S));
    h.run(now);
    h.server(now, pending(1));
    h.run(now);
    h.core
        .stream_lost(now, &Error::new(ErrorKind::Transport, "cut"));
    h.run(now);
    let due = now + S + crate::bound::grace(h.core.live.round_trip());
    assert!(h.core.next_wake() <= due);
    h.core.tick(due - MS);
    h.run(due - MS);
    assert!(h.answers().is_empty());
    h.core.tick(due);
    h.run(due);
    // The node did not answer: not "not acquired", which only the server can say.
    assert!(matches!(
        h.answers().as_slice(),
        [(1, Answer::Acquire(Err(e)))] if e.kind() == ErrorKind::Unavailable
    ));
    // The waiter is withdrawn on the next stream.
    let back = h.at(2 * S);
    h.core.tick(back);
    h.run(back);
    assert!(h.core.attached(back, SID, back));
    h.run(back);
    let sent: Vec<_> = h.sent().iter().map(|r| kind_of(r)).collect();
    assert_eq!(sent, vec!["release"]);
}

/// A try (timeout zero) is bounded like every acquire: on a stream that went silent, the
/// caller hears that the node did not answer a round trip and a moment after the request,
/// not at the session's end.
#[test]
fn a_try_on_a_silent_stream_ends_unavailable_one_round_trip_past_its_request() {
    let mut h = Harness::new();
    let now = h.at(MS);
    h.acquire(now, 1, "job", lock().timeout(Duration::ZERO));
    h.run(now);
    assert_eq!(h.sent().len(), 2, "the acquire and the describe behind it");
    let due = now + crate::bound::grace(h.core.live.round_trip());
    h.core.tick(due - MS);
    h.run(due - MS);
    assert!(h.answers().is_empty());
    h.core.tick(due);
    h.run(due);
    assert!(matches!(
        h.answers().as_slice(),
        [(1, Answer::Acquire(Err(e)))] if e.kind() == ErrorKind::Unavailable
    ));
    assert_eq!(h.core.state, SessionState::Attached { session_id: SID });
}

/// On a live stream the server's own timeout answer is awaited one round trip (the latest
/// measured) and a moment past the deadline, since the server counts from the request's
/// arrival; only then does the client say the node did not answer.
#[test]
fn on_a_live_stream_the_servers_timeout_answer_is_awaited_one_round_trip_past_the_deadline() {
    let mut h = Harness::new();
    let now = h.at(MS);
    h.acquire(now, 1, "job", lock().timeout(S));
    h.run(now);
    // The describe behind the acquire comes back 300 ms after it was sent: the round trip.
    let answered = now + 300 * MS;
    h.server(answered, described(2, &[(7, 1)]));
    h.server(answered, pending(1));
    h.run(answered);
    let grace = 200 * MS + 300 * MS;
    h.core.tick(now + S + grace - MS);
    h.run(now + S + grace - MS);
    assert!(
        h.answers().is_empty(),
        "answered before the server's answer was due"
    );
    h.core.tick(now + S + grace);
    h.run(now + S + grace);
    assert!(matches!(
        h.answers().as_slice(),
        [(1, Answer::Acquire(Err(e)))] if e.kind() == ErrorKind::Unavailable
    ));
}

/// The round trip of the rule is one the server answered at once: an acquire that waited
/// in the queue (here 2 s) and was then answered is contact, not a sample, so the next
/// bounded call on a stalled stream still ends a moment past its deadline.
#[test]
fn an_acquire_that_waited_is_not_a_round_trip() {
    let mut h = Harness::new();
    let now = h.at(MS);
    h.acquire(now, 1, "job", lock().timeout(10 * S));
    h.run(now);
    let first = now + 20 * MS;
    h.server(first, pending(1));
    h.run(first);
    assert_eq!(h.core.live.round_trip(), 20 * MS);
    // Granted two seconds later, after the holder let go.
    let granted = now + 2 * S;
    h.server(granted, acquired(1, true));
    h.run(granted);
    assert_eq!(
        h.core.live.round_trip(),
        20 * MS,
        "the wait in the queue became the round trip"
    );
}

#[test]
fn a_reattach_answered_with_another_session_ends_the_session() {
    let mut h = Harness::new();
    let now = h.at(MS);
    h.core
        .stream_lost(now, &Error::new(ErrorKind::Transport, "cut"));
    h.core.tick(now);
    h.run(now);
    assert!(!h.core.attached(now, SID + 1, now));
    h.run(now);
    assert_eq!(h.core.state, SessionState::Expired);
    assert_eq!(h.core.cause().kind(), ErrorKind::SessionExpired);
    assert!(h.token.is_cancelled());
}

#[test]
fn a_server_failure_with_a_session_verdict_ends_the_session_with_its_kind() {
    let mut h = Harness::new();
    let now = h.at(MS);
    h.server(
        now,
        rs::Response::Failure(rs::Failure {
            status: StatusCode::BadSession as i32,
            issues: Vec::new(),
        }),
    );
    h.run(now);
    assert_eq!(h.core.cause().kind(), ErrorKind::BadSession);
    assert!(h.token.is_cancelled());
}

// ---- the lease guard -----------------------------------------------------------------------

/// A persistent semaphore: a delete can take it from under its owner.
fn persistent() -> AcquireOptions {
    AcquireOptions::shared()
}

/// The order id of the persistent lease the guard tests hold.
const ORDER: u64 = 5;

/// A describe's watch and content flags: (watch_data, watch_owners, include_owners,
/// include_waiters).
fn flags(d: &rq::DescribeSemaphore) -> (bool, bool, bool, bool) {
    (
        d.watch_data,
        d.watch_owners,
        d.include_owners,
        d.include_waiters,
    )
}

/// What a guard alone asks for: a data watch, owners described.
const GUARD: (bool, bool, bool, bool) = (true, false, true, false);

fn changed(req_id: u64, data_changed: bool, owners_changed: bool) -> rs::Response {
    rs::Response::DescribeSemaphoreChanged(rs::DescribeSemaphoreChanged {
        req_id,
        data_changed,
        owners_changed,
    })
}

fn describe_failed(req_id: u64, status: StatusCode) -> rs::Response {
    rs::Response::DescribeSemaphoreResult(rs::DescribeSemaphoreResult {
        req_id,
        status: status as i32,
        issues: Vec::new(),
        semaphore_description: None,
        watch_added: false,
    })
}

/// A core whose caller 1 holds the persistent semaphore "job" with order id [`ORDER`] since
/// 1 ms; that time, the lease id and its token.
fn holding_persistent() -> (Harness, Instant, u64, CancellationToken) {
    let mut h = Harness::new();
    let now = h.at(MS);
    let (lease, token) = h.hold_with(now, 1, "job", ORDER, persistent());
    (h, now, lease, token)
}

impl Harness {
    /// Feeds a server message and collects the effects.
    fn reply(&mut self, now: Instant, r: rs::Response) -> &[Effect] {
        self.server(now, r);
        self.run(now)
    }

    fn guard(&mut self, now: Instant, name: &str, lease: u64) -> &[Effect] {
        self.core.control(
            now,
            Control::GuardLease {
                name: name.into(),
                lease,
            },
        );
        self.run(now)
    }

    fn watch(&mut self, now: Instant, subscriber: SubscriberId, opts: WatchOptions) {
        self.core.command(
            now,
            Command::Watch {
                subscriber,
                name: "job".into(),
                opts,
            },
        );
        self.run(now);
    }

    fn release(&mut self, now: Instant, lease: u64) {
        self.core.control(
            now,
            Control::Release {
                name: "job".into(),
                lease,
                caller: None,
            },
        );
        self.run(now);
    }

    /// The one request the last inputs sent, a describe.
    fn armed(&self) -> rq::DescribeSemaphore {
        match self.sent().as_slice() {
            [rq::Request::DescribeSemaphore(d)] => d.clone(),
            other => panic!("expected one describe, got {other:?}"),
        }
    }

    fn kinds(&self) -> Vec<&'static str> {
        self.sent().iter().map(|r| kind_of(r)).collect()
    }

    /// The watch items delivered by the last inputs, as (subscriber, is it an error).
    fn watch_items(&self) -> Vec<(SubscriberId, bool)> {
        self.effects
            .iter()
            .filter_map(|e| match e {
                Effect::Watch(s, item) => Some((*s, item.is_err())),
                _ => None,
            })
            .collect()
    }

    /// Guards the held lease of "job"; the req_id of the describe that arms the watch.
    fn arm_guard(&mut self, now: Instant, lease: u64) -> u64 {
        self.guard(now, "job", lease);
        self.armed().req_id
    }

    /// [`Self::arm_guard`], its describe answered as still ours.
    fn guarded(&mut self, now: Instant, lease: u64) -> u64 {
        let watch = self.arm_guard(now, lease);
        self.server(now, described(watch, &[(SID, ORDER)]));
        self.run(now);
        watch
    }

    /// Loses the stream at `lost` and attaches again a second later.
    fn reattach(&mut self, lost: Instant) -> Instant {
        self.core
            .stream_lost(lost, &Error::new(ErrorKind::Transport, "cut"));
        self.core.tick(lost);
        self.run(lost);
        let back = lost + S;
        assert!(self.core.attached(back, SID, back));
        self.run(back);
        back
    }
}

#[test]
fn guarding_a_held_persistent_lease_arms_one_data_watch_that_describes_the_owners() {
    let (mut h, now, lease, _) = holding_persistent();
    h.guard(now, "job", lease);
    let d = h.armed();
    assert_eq!(d.name, "job");
    assert_eq!(flags(&d), GUARD);
}

#[test]
fn guarding_an_ephemeral_lease_or_one_not_held_sends_nothing() {
    let mut h = Harness::new();
    let now = h.at(MS);
    let (ephemeral, _) = h.hold(now, 1, "job", ORDER);
    assert!(
        h.guard(now, "job", ephemeral).is_empty(),
        "an ephemeral semaphore is not deleted under its owner"
    );
    let (lease, _) = h.hold_with(now, 2, "other", 6, persistent());
    assert!(h.guard(now, "other", lease + 1).is_empty(), "another lease");
    assert!(h.guard(now, "missing", lease).is_empty(), "another name");
    h.core.control(
        now,
        Control::Release {
            name: "other".into(),
            lease,
            caller: None,
        },
    );
    h.run(now);
    assert!(h.guard(now, "other", lease).is_empty(), "a released lease");
    assert!(h.core.watches.is_empty());
}

#[test]
fn a_delete_notice_ends_the_guarded_lease_at_once() {
    let (mut h, now, lease, token) = holding_persistent();
    let watch = h.guarded(now, lease);
    assert!(h.effects.is_empty() && !token.is_cancelled());
    let later = h.at(S);
    h.reply(later, changed(watch, true, true));
    assert!(token.is_cancelled());
    assert!(
        h.sent().is_empty(),
        "nothing to give back, nothing left to guard"
    );
    assert!(
        h.core.is_empty(),
        "the guard's watch is gone with the lease"
    );
}

#[test]
fn a_delete_notice_ends_the_guarded_lease_and_re_arms_a_subscribers_watch() {
    let (mut h, now, lease, token) = holding_persistent();
    h.watch(now, 10, WatchOptions::owners_changes());
    let watch = h.guarded(now, lease);
    assert_eq!(h.watch_items(), vec![(10, false)]);
    let later = h.at(S);
    h.reply(later, changed(watch, true, true));
    assert!(token.is_cancelled());
    assert_eq!(
        flags(&h.armed()),
        (false, true, true, false),
        "re-armed with the subscriber's options alone"
    );
}

#[test]
fn a_data_notice_keeps_the_guarded_lease_and_re_arms_its_watch() {
    let (mut h, now, lease, token) = holding_persistent();
    let watch = h.guarded(now, lease);
    let later = h.at(S);
    h.reply(later, changed(watch, true, false));
    assert!(!token.is_cancelled(), "an update is no delete");
    let again = h.armed();
    assert_eq!(flags(&again), GUARD);
    assert!(
        h.reply(later, described(again.req_id, &[(SID, ORDER)]))
            .is_empty()
    );
    assert!(!token.is_cancelled());
}

#[test]
fn a_watch_description_without_this_session_ends_the_guarded_lease() {
    let (mut h, now, lease, token) = holding_persistent();
    let watch = h.arm_guard(now, lease);
    h.wait_locally(now, 2);
    h.reply(now, described(watch, &[(99, ORDER)]));
    assert!(token.is_cancelled());
    assert_eq!(
        h.kinds(),
        vec!["acquire", "describe"],
        "no release; the local waiter goes on"
    );
    assert!(!h.core.watches.contains_key("job"));
}

#[test]
fn a_watch_description_with_another_order_id_of_ours_ends_the_lease_and_gives_it_back() {
    let (mut h, now, lease, token) = holding_persistent();
    let watch = h.arm_guard(now, lease);
    // Deleted and made anew, then taken by this session again (an owner-data update).
    h.reply(now, described(watch, &[(SID, ORDER + 1)]));
    assert!(token.is_cancelled());
    assert_eq!(h.kinds(), vec!["release"]);
}

#[test]
fn a_not_found_watch_describe_ends_the_guarded_lease() {
    let (mut h, now, lease, token) = holding_persistent();
    let watch = h.arm_guard(now, lease);
    h.reply(now, describe_failed(watch, StatusCode::NotFound));
    assert!(token.is_cancelled());
    assert!(h.sent().is_empty());
    assert!(h.core.is_empty());
}

#[test]
fn another_watch_describe_failure_keeps_the_guarded_lease() {
    let (mut h, now, lease, token) = holding_persistent();
    let watch = h.arm_guard(now, lease);
    h.reply(now, describe_failed(watch, StatusCode::Overloaded));
    assert!(!token.is_cancelled(), "a failed describe shows nothing");
    assert!(h.sent().is_empty(), "no retry without a wait");
    h.release(now, lease);
    assert_eq!(h.kinds(), vec!["release"], "still held");
}

#[test]
fn a_guard_outlives_a_failed_describe_and_is_re_armed_after_a_reattach() {
    let (mut h, now, lease, token) = holding_persistent();
    h.watch(now, 10, WatchOptions::owners_changes());
    let watch = h.arm_guard(now, lease);
    h.reply(now, describe_failed(watch, StatusCode::Overloaded));
    assert_eq!(
        h.watch_items(),
        vec![(10, true)],
        "the subscriber's last item"
    );
    h.reattach(h.at(S));
    assert_eq!(
        flags(&h.armed()),
        GUARD,
        "the guard alone is armed again: a delete meanwhile must still end the lease"
    );
    assert!(!token.is_cancelled());
}

#[test]
fn releasing_a_guarded_lease_drops_its_watch() {
    let (mut h, now, lease, _) = holding_persistent();
    let watch = h.arm_guard(now, lease);
    h.release(now, lease);
    assert_eq!(h.kinds(), vec!["release"]);
    assert!(h.core.watches.is_empty() && h.core.watch_reqs.is_empty());
    let release = req_id(h.sent()[0]);
    assert!(
        h.reply(now, described(watch, &[(SID, ORDER)])).is_empty(),
        "the late description is for nobody"
    );
    h.reply(now, released(release));
    assert!(h.core.is_empty());
}

#[test]
fn a_subscriber_and_a_guard_share_one_server_watch() {
    let (mut h, now, lease, token) = holding_persistent();
    let opts = WatchOptions::owners_changes().describe(DescribeOptions::new().waiters(true));
    h.watch(now, 10, opts);
    let first = h.armed();
    assert_eq!(flags(&first), (false, true, false, true));
    h.guard(now, "job", lease);
    let second = h.armed();
    assert_eq!(flags(&second), (true, true, true, true), "the union");
    assert_eq!(h.core.watch_reqs.len(), 1);
    assert_eq!(h.core.pending.len(), 1, "one describe in flight");
    assert!(
        h.reply(now, described(first.req_id, &[(SID, ORDER)]))
            .is_empty(),
        "the replaced describe is for nobody"
    );
    h.reply(now, described(second.req_id, &[(SID, ORDER)]));
    assert_eq!(h.watch_items(), vec![(10, false)]);
    assert!(!token.is_cancelled());
}

#[test]
fn a_subscriber_joining_a_guarded_watch_re_arms_it_with_the_union() {
    let (mut h, now, lease, _) = holding_persistent();
    h.guard(now, "job", lease);
    h.watch(now, 10, WatchOptions::owners_changes());
    assert_eq!(flags(&h.armed()), (true, true, true, false));
    assert_eq!(h.core.watch_reqs.len(), 1);
    assert_eq!(h.core.pending.len(), 1);
}

#[test]
fn a_guarded_watch_is_re_armed_after_a_reattach() {
    let (mut h, now, lease, token) = holding_persistent();
    h.guarded(now, lease);
    let back = h.reattach(h.at(S));
    let d = h.armed();
    assert_eq!(flags(&d), GUARD);
    // The semaphore was deleted while the stream was down: its notice was lost with it.
    h.reply(back, describe_failed(d.req_id, StatusCode::NotFound));
    assert!(token.is_cancelled());
}

impl Harness {
    /// Caller `caller` acquires "job" too, and waits locally behind the lease held.
    fn wait_locally(&mut self, now: Instant, caller: CallerId) {
        self.acquire(now, caller, "job", persistent());
        assert!(self.run(now).is_empty(), "caller {caller} waits locally");
    }

    /// Asks caller `caller` to set the owner data of the lease of "job"; the req_ids of the
    /// re-acquire and of the describe behind it.
    fn set_data(&mut self, now: Instant, lease: u64, caller: CallerId) -> (u64, u64) {
        self.core.control(
            now,
            Control::SetData {
                name: "job".into(),
                lease,
                data: b"new".to_vec(),
                caller,
            },
        );
        self.run(now);
        let ids: Vec<u64> = self.sent().iter().map(|r| req_id(r)).collect();
        let [update, check] = ids[..] else {
            panic!(
                "expected a re-acquire and a describe, got {:?}",
                self.effects
            );
        };
        (update, check)
    }

    /// What `caller` was answered by the last inputs with a plain result.
    fn done(&self, caller: CallerId) -> Option<Result<(), ErrorKind>> {
        self.answers().into_iter().find_map(|(c, a)| match a {
            Answer::Done(r) if c == caller => Some(r.as_ref().map(|_| ()).map_err(Error::kind)),
            _ => None,
        })
    }
}

/// A describe answer of an armed watch (`watch_added`), listing `owners`.
fn watch_described(req_id: u64, owners: &[(u64, u64)]) -> rs::Response {
    let mut r = described(req_id, owners);
    if let rs::Response::DescribeSemaphoreResult(d) = &mut r {
        d.watch_added = true;
    }
    r
}

#[test]
fn an_owner_data_update_that_takes_the_semaphore_made_anew_after_a_delete_notice_gives_it_back() {
    let (mut h, now, lease, token) = holding_persistent();
    let watch = h.guarded(now, lease);
    let (update, check) = h.set_data(now, lease, 20);
    // The delete came first (its notice ends the lease), then the semaphore was made anew
    // and the re-acquire took it.
    h.reply(now, changed(watch, true, true));
    assert!(token.is_cancelled());
    h.server(now, acquired(update, true));
    h.reply(now, described(check, &[(SID, ORDER + 1)]));
    assert_eq!(
        h.kinds(),
        vec!["release"],
        "the session owns a semaphore no local lease holds: given back"
    );
    assert_eq!(h.done(20), Some(Err(ErrorKind::Aborted)));
}

#[test]
fn an_owner_data_update_taken_over_by_the_next_local_acquire_is_not_given_back() {
    let (mut h, now, lease, _) = holding_persistent();
    let watch = h.guarded(now, lease);
    let (update, check) = h.set_data(now, lease, 20);
    h.wait_locally(now, 2);
    h.reply(now, changed(watch, true, true));
    assert_eq!(h.kinds(), vec!["acquire", "describe"], "caller 2 goes on");
    h.server(now, acquired(update, true));
    h.reply(now, described(check, &[(SID, ORDER + 1)]));
    assert!(
        h.sent().is_empty(),
        "the acquire written after the update takes its ownership over; a release would \
         take it from caller 2"
    );
    assert_eq!(h.done(20), Some(Err(ErrorKind::Aborted)));
}

#[test]
fn an_owner_data_update_racing_a_release_of_its_lease_sends_no_second_release() {
    let (mut h, now, lease, _) = holding_persistent();
    let (update, check) = h.set_data(now, lease, 20);
    h.release(now, lease);
    assert_eq!(h.kinds(), vec!["release"]);
    h.server(now, acquired(update, true));
    h.reply(now, described(check, &[(SID, ORDER)]));
    assert!(h.sent().is_empty(), "the release on its way does the work");
    assert_eq!(h.done(20), Some(Err(ErrorKind::Aborted)));
}

#[test]
fn a_watch_description_with_another_order_id_of_ours_releases_before_the_next_local_acquire() {
    let (mut h, now, lease, token) = holding_persistent();
    let watch = h.arm_guard(now, lease);
    h.wait_locally(now, 2);
    h.reply(now, described(watch, &[(SID, ORDER + 1)]));
    assert!(token.is_cancelled());
    assert_eq!(
        h.kinds(),
        vec!["release", "acquire", "describe"],
        "a release behind caller 2's acquire would supersede it on the server"
    );
}

#[test]
fn a_guarded_watch_the_server_did_not_add_is_armed_again_a_ping_interval_later() {
    let (mut h, now, lease, token) = holding_persistent();
    let watch = h.arm_guard(now, lease);
    // Still ours, but no watch: a delete would go unnoticed.
    h.reply(now, described(watch, &[(SID, ORDER)]));
    assert!(h.sent().is_empty(), "not at once: no loop on such a server");
    let ping = h.at(3 * S);
    h.core.tick(ping);
    h.run(ping);
    assert_eq!(h.kinds(), vec!["describe", "ping"]);
    let again = match h.sent()[0] {
        rq::Request::DescribeSemaphore(d) => d.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(flags(&again), GUARD);
    h.reply(ping, watch_described(again.req_id, &[(SID, ORDER)]));
    let next = h.at(6 * S);
    h.core.tick(next);
    h.run(next);
    assert_eq!(h.kinds(), vec!["ping"], "armed now: nothing more to ask");
    assert!(!token.is_cancelled());
}

#[test]
fn an_owner_data_check_that_fails_ends_the_lease_and_gives_back_what_the_update_took() {
    let (mut h, now, lease, token) = holding_persistent();
    let (update, check) = h.set_data(now, lease, 20);
    h.server(now, acquired(update, true));
    // The describe cannot tell whose ownership the update kept: the lease ends, and the
    // session must not be left owning the semaphore with no local holder.
    h.reply(now, describe_failed(check, StatusCode::Overloaded));
    assert!(token.is_cancelled());
    assert_eq!(h.kinds(), vec!["release"]);
    assert_eq!(h.done(20), Some(Err(ErrorKind::Aborted)));
}

#[test]
fn a_guard_whose_describe_failed_is_armed_again_a_ping_interval_later_on_a_busy_stream() {
    let (mut h, now, lease, token) = holding_persistent();
    let watch = h.arm_guard(now, lease);
    h.reply(now, describe_failed(watch, StatusCode::Overloaded));
    assert!(
        h.sent().is_empty(),
        "not at once: no stream of describes to a failing server"
    );
    // The server keeps talking (its pings), so no ping of ours is ever due.
    for step in 1..=5u32 {
        let at = h.at(step * S / 2);
        h.server(
            at,
            rs::Response::Ping(rs::PingPong {
                opaque: u64::from(step),
            }),
        );
        h.core.tick(at);
        h.run(at);
        let kinds = h.kinds();
        if kinds.contains(&"describe") {
            assert!(at >= h.at(2 * S), "armed again only after a ping interval");
            assert!(!token.is_cancelled());
            return;
        }
    }
    panic!("the guard was never armed again while the stream was busy");
}

#[test]
fn releasing_a_guarded_lease_re_arms_a_subscribers_watch_with_its_own_options() {
    let (mut h, now, lease, _) = holding_persistent();
    h.watch(now, 10, WatchOptions::owners_changes());
    h.guarded(now, lease);
    h.release(now, lease);
    let sent = h.sent();
    let [
        rq::Request::DescribeSemaphore(d),
        rq::Request::ReleaseSemaphore(_),
    ] = sent[..]
    else {
        panic!("expected a describe and the release, got {sent:?}");
    };
    assert_eq!(
        flags(d),
        (false, true, true, false),
        "no data watch the subscriber did not ask for"
    );
    assert_eq!(h.core.watch_reqs.len(), 1);
}

#[test]
fn releasing_a_guarded_lease_whose_subscriber_asked_for_as_much_keeps_the_watch() {
    let (mut h, now, lease, _) = holding_persistent();
    let opts = WatchOptions::data_changes().describe(DescribeOptions::new().owners(true));
    h.watch(now, 10, opts);
    h.guarded(now, lease);
    h.release(now, lease);
    assert_eq!(
        h.kinds(),
        vec!["release"],
        "the armed watch is what it asks for"
    );
}

// ---- invariants, over random schedules -----------------------------------------------------

/// One step of a random schedule.
#[derive(Debug, Clone)]
enum Step {
    Acquire {
        name: u8,
        timeout_ms: Option<u64>,
    },
    Describe,
    ReleaseOldest,
    CancelNewest,
    /// Answer the request in flight at this position (modulo their number).
    Answer {
        pick: usize,
        outcome: u8,
    },
    Pong,
    Lose,
    Attach {
        ours: bool,
    },
    DialFails,
    Advance {
        ms: u64,
    },
    Close,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0u8..3, prop_oneof![Just(None), (0u64..3_000).prop_map(Some)])
            .prop_map(|(name, timeout_ms)| Step::Acquire { name, timeout_ms }),
        1 => Just(Step::Describe),
        2 => Just(Step::ReleaseOldest),
        1 => Just(Step::CancelNewest),
        8 => (0usize..16, 0u8..4).prop_map(|(pick, outcome)| Step::Answer { pick, outcome }),
        2 => Just(Step::Pong),
        1 => Just(Step::Lose),
        2 => prop_oneof![9 => Just(true), 1 => Just(false)].prop_map(|ours| Step::Attach { ours }),
        1 => Just(Step::DialFails),
        3 => (1u64..4_000).prop_map(|ms| Step::Advance { ms }),
        1 => Just(Step::Close),
    ]
}

/// A model of the server's side of the wire and of the callers, enough to check the core.
#[derive(Default)]
struct World {
    /// Requests written and not yet answered, oldest first, with when they were written.
    in_flight: Vec<(Instant, rq::Request)>,
    pings: Vec<(Instant, u64)>,
    /// The send time of the last request the server answered: the oracle of the deadline,
    /// kept apart from the core's own arithmetic.
    confirmed: Option<Instant>,
    dialing: bool,
    callers: HashSet<CallerId>,
    answered: HashMap<CallerId, usize>,
    grants: Vec<Grant>,
    next_caller: CallerId,
    next_order: u64,
}

impl World {
    fn absorb(&mut self, h: &mut Harness, now: Instant) {
        // The driver's order: run the core, then carry out the effects.
        let effects = {
            h.core.check_deadline(now);
            h.core.take_effects()
        };
        for e in effects {
            match e {
                Effect::Send(r) => match r {
                    rq::Request::Ping(p) => self.pings.push((now, p.opaque)),
                    rq::Request::Pong(_) | rq::Request::SessionStop(_) => {}
                    r => self.in_flight.push((now, r)),
                },
                Effect::Answer(caller, answer) => {
                    *self.answered.entry(caller).or_default() += 1;
                    if let Answer::Acquire(Ok(Some(grant))) = answer {
                        self.grants.push(grant);
                    }
                }
                Effect::DropStream => {
                    self.in_flight.clear();
                    self.pings.clear();
                }
                Effect::Dial { .. } => self.dialing = true,
                Effect::Queued(_) | Effect::Watch(..) | Effect::State(_) => {}
            }
        }
    }

    fn confirm(&mut self, sent: Instant) {
        self.confirmed = Some(self.confirmed.map_or(sent, |c| c.max(sent)));
    }

    fn caller(&mut self) -> CallerId {
        self.next_caller += 1;
        self.callers.insert(self.next_caller);
        self.next_caller
    }

    /// A plausible answer to a request in flight.
    fn answer(&mut self, pick: usize, outcome: u8) -> Option<rs::Response> {
        if self.in_flight.is_empty() {
            return None;
        }
        let (sent, r) = self.in_flight.remove(pick % self.in_flight.len());
        self.confirm(sent);
        self.next_order += 1;
        Some(match r {
            rq::Request::AcquireSemaphore(a) => match outcome {
                0 => pending(a.req_id),
                1 => acquired(a.req_id, false),
                _ => acquired(a.req_id, true),
            },
            rq::Request::DescribeSemaphore(d) if outcome.is_multiple_of(2) => {
                described(d.req_id, &[(SID, self.next_order)])
            }
            rq::Request::DescribeSemaphore(d) => described(d.req_id, &[(99, 1)]),
            rq::Request::ReleaseSemaphore(r) => released(r.req_id),
            _ => return None,
        })
    }
}

fn run_schedule(steps: &[Step]) {
    let mut h = Harness::with(SessionOptions::new().timeout(5 * S));
    let mut w = World::default();
    w.confirm(h.t0);
    let deadline_after = 5 * S - 5 * S / 10;
    let mut now = h.at(MS);
    let mut up = true;
    let mut acquires: Vec<(CallerId, String)> = Vec::new();
    for step in steps {
        match step.clone() {
            Step::Acquire { name, timeout_ms } => {
                let caller = w.caller();
                let mut opts = lock();
                if let Some(ms) = timeout_ms {
                    opts = opts.timeout(Duration::from_millis(ms));
                }
                let name = format!("n{name}");
                acquires.push((caller, name.clone()));
                h.acquire(now, caller, &name, opts);
            }
            Step::Describe => {
                let caller = w.caller();
                h.core.command(
                    now,
                    Command::Describe {
                        caller,
                        name: "n0".into(),
                        opts: DescribeOptions::new(),
                    },
                );
            }
            Step::ReleaseOldest => {
                if !w.grants.is_empty() {
                    let grant = w.grants.remove(0);
                    let name = h
                        .core
                        .names
                        .iter()
                        .find(|(_, s)| {
                            s.holding
                                .as_ref()
                                .is_some_and(|x| x.lease() == grant.held.lease())
                        })
                        .map(|(n, _)| n.clone());
                    if let Some(name) = name {
                        let caller = w.caller();
                        h.core.control(
                            now,
                            Control::Release {
                                name,
                                lease: grant.held.lease(),
                                caller: Some(caller),
                            },
                        );
                    }
                }
            }
            Step::CancelNewest => {
                if let Some((caller, name)) = acquires.pop()
                    && !w.answered.contains_key(&caller)
                {
                    // The caller is gone (its future was dropped): it may get one answer,
                    // it need not.
                    w.callers.remove(&caller);
                    h.core.control(
                        now,
                        Control::CancelAcquire {
                            name: name.into(),
                            caller,
                        },
                    );
                }
            }
            Step::Answer { pick, outcome } => {
                if up && let Some(r) = w.answer(pick, outcome) {
                    h.server(now, r);
                }
            }
            Step::Pong => {
                if up && let Some((sent, opaque)) = w.pings.pop() {
                    w.confirm(sent);
                    h.server(now, rs::Response::Pong(rs::PingPong { opaque }));
                }
            }
            Step::Lose => {
                if up {
                    up = false;
                    w.in_flight.clear();
                    w.pings.clear();
                    h.core
                        .stream_lost(now, &Error::new(ErrorKind::Transport, "cut"));
                }
            }
            Step::Attach { ours } => {
                if w.dialing {
                    w.dialing = false;
                    let id = if ours { SID } else { SID + 1 };
                    up = h.core.attached(now, id, now);
                    if up {
                        w.confirm(now);
                    }
                }
            }
            Step::DialFails => {
                if w.dialing {
                    w.dialing = false;
                    h.core
                        .attach_failed(now, &Error::new(ErrorKind::Transport, "refused"), 0.5);
                }
            }
            Step::Advance { ms } => {
                now += Duration::from_millis(ms);
                h.core.tick(now);
            }
            Step::Close => {
                let caller = w.caller();
                h.core.command(now, Command::Close { caller });
            }
        }
        w.absorb(&mut h, now);
        if w.confirmed.is_some_and(|c| now >= c + deadline_after) {
            assert!(
                h.token.is_cancelled(),
                "a token outlived last answered send + timeout - margin"
            );
        }
        for (caller, n) in &w.answered {
            assert!(*n <= 1, "caller {caller} answered {n} times");
        }
        if h.core.is_done() {
            break;
        }
    }
    // Let the session end however it must: the deadline passes without contact.
    for _ in 0..10 {
        if h.core.is_done() {
            break;
        }
        now += 10 * S;
        h.core.tick(now);
        w.absorb(&mut h, now);
    }
    assert!(h.core.is_done(), "the session never ended");
    assert!(h.token.is_cancelled());
    assert!(h.core.is_empty(), "something was left in the core's tables");
    for caller in &w.callers {
        assert_eq!(
            w.answered.get(caller).copied().unwrap_or(0),
            1,
            "caller {caller} was not answered exactly once"
        );
    }
    for grant in &w.grants {
        assert!(grant.held.is_lost(&h.token));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn every_caller_is_answered_once_no_token_outlives_the_deadline_and_nothing_is_left(
        steps in prop::collection::vec(step(), 1..120)
    ) {
        run_schedule(&steps);
    }
}
